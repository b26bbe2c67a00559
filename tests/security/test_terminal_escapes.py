"""Terminal escapes (kubectl's CVE-2021-25743 class): whatever KGWE prints for a person — a table, `-o wide`,
a plain message quoting a name or an API answer — carries no control character a terminal acts on (ESC,
CSI, BEL, a lone CR, bidirectional overrides), and the fields a tenant types are constrained at the API
server too."""

from __future__ import annotations

import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from kgwe.fleet.nodes import HEALTH_COLUMNS
from kgwe.fleet.output import render
from kgwe.fleet.status import status_document, status_text
from kgwe.fleet.workloads import WORKLOAD_COLUMNS, workload_rows
from kgwe.vocab import API_GROUP, CRD_VERSION, GPU_WORKLOAD_PLURAL

NOW = datetime(2026, 11, 24, tzinfo=UTC)
HOSTILE = (
    "\x1b]0;owned\x07",  # set the window title
    "\x1b[2J\x1b[H",  # clear the screen
    "ok\rPhase: Succeeded",  # overwrite the line shown
    "\x9b31m",  # 8-bit CSI
    "evil\u202etxt.exe",  # shown reversed
    "two\nlines",
)
DANGEROUS = {chr(c) for c in [*range(0x20), *range(0x7F, 0xA0)]} | {"\u202e"}


def _safe(text: str, rows: int | None = None) -> None:
    assert not (DANGEROUS - {"\n"}) & set(text), repr(text)
    if rows is not None:
        assert text.count("\n") == rows + 1, text  # header + one line per row, each cell on its own line


def _workload(text: str, i: int = 0) -> dict:
    return {
        "metadata": {"namespace": "ml", "name": f"wl-{i}", "creationTimestamp": "2026-11-23T00:00:00Z"},
        "spec": {"workloadType": text, "team": text, "gpuRequirements": {"count": 1}},
        "status": {
            "phase": text,
            "nodes": text,
            "gangBackend": text,
            "retryCount": text,
            "cost": {"amount": text, "currency": text, "gpuHours": text},
            "conditions": [{"type": "Admitted", "status": "False", "reason": text, "message": text}],
        },
    }


@pytest.mark.parametrize("output", ["table", "wide"])
def test_workload_tables_show_hostile_fields_as_text(output: str):
    rows = workload_rows([_workload(t, i) for i, t in enumerate(HOSTILE)], NOW)
    text = render(rows, WORKLOAD_COLUMNS, output)
    _safe(text, rows=len(HOSTILE))
    assert "\\x1b]0;owned\\x07" in text or output == "table"  # the team shows, escaped, in -o wide


def test_status_and_health_show_hostile_messages_as_text():
    repository = {
        "metadata": {"namespace": "kgwe-system", "name": "policy"},
        "status": {
            "conditions": [{"type": "Ready", "status": "False", "reason": HOSTILE[1], "message": HOSTILE[0]}],
            "lastAppliedRevision": HOSTILE[2],
            "rollout": {HOSTILE[3]: {"done": 1, "total": 2}},
        },
    }
    quota = {
        "metadata": {"namespace": "ml", "name": "kgwe-budget", "annotations": {}},
        "spec": {"hard": {"requests.nvidia.com/gpu": "4"}},
        "status": {"used": {"requests.nvidia.com/gpu": "4"}},
    }
    doc = status_document([repository], [], [], [], [quota])
    for wide in (False, True):
        _safe(status_text(doc, wide=wide))
    health = [{"node": t, "gpu": 0, "status": t, "reason": t, "since": t, "message": t} for t in HOSTILE]
    _safe(render(health, HEALTH_COLUMNS, "wide"), rows=len(HOSTILE))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.text(max_size=40), min_size=1, max_size=5))
def test_any_field_text_keeps_the_table_whole(texts: list[str]):
    rows = workload_rows([_workload(t, i) for i, t in enumerate(texts)], NOW)
    for output in ("table", "wide"):
        _safe(render(rows, WORKLOAD_COLUMNS, output), rows=len(texts))


def test_plain_messages_of_the_cli_are_escaped_too(tmp_path: Path):
    """`kgwe validate` quotes a committed key in its message: the key's escape sequences stay text."""
    manifest = tmp_path / "workload.yaml"
    manifest.write_text(
        "apiVersion: kgwe.nvidia.io/v1\nkind: GPUWorkload\nmetadata: {name: x, namespace: y}\n"
        'spec:\n  gpuRequirements: {count: 1}\n  "\\e]0;owned\\a\\e[2J": 1\n  team: "\\e[31mred\\r"\n'
    )
    done = subprocess.run(
        [sys.executable, "-m", "kgwe.cli", "validate", str(manifest)], capture_output=True, text=True
    )
    assert done.returncode == 1
    _safe(done.stdout + done.stderr)
    assert "\\x1b]0;owned\\x07" in done.stdout + done.stderr


# ---- against the real API server --------------------------------------------------------------------


@pytest.mark.cluster
def test_the_api_server_refuses_a_team_with_escapes_and_the_cli_escapes_status(
    k8s_api, policy_crds, namespace, control_plane
):
    custom = client.CustomObjectsApi(k8s_api)
    body = {
        "apiVersion": f"{API_GROUP}/{CRD_VERSION}",
        "kind": "GPUWorkload",
        "metadata": {"name": "escapes"},
        "spec": {"gpuRequirements": {"count": 1}, "team": "\x1b]0;owned\x07"},
    }
    with pytest.raises(ApiException) as refused:
        custom.create_namespaced_custom_object(API_GROUP, CRD_VERSION, namespace, GPU_WORKLOAD_PLURAL, body)
    assert refused.value.status == 422 and "spec.team" in (refused.value.body or "")
    body["spec"]["team"] = "ml-research"
    custom.create_namespaced_custom_object(API_GROUP, CRD_VERSION, namespace, GPU_WORKLOAD_PLURAL, body)
    # whoever may write a workload's status (the controller, or anyone granted it) may still write anything
    custom.patch_namespaced_custom_object_status(
        API_GROUP,
        CRD_VERSION,
        namespace,
        GPU_WORKLOAD_PLURAL,
        "escapes",
        {"status": {"phase": "Running", "nodes": HOSTILE[2], "gangBackend": HOSTILE[0]}},
    )
    for output in ("table", "wide", "yaml", "json"):
        done = subprocess.run(
            [sys.executable, "-m", "kgwe.cli", "workloads", "-n", namespace, "-o", output],
            capture_output=True,
            text=True,
            env={"KUBECONFIG": str(control_plane.kubeconfig_path), "PATH": "/usr/bin:/bin"},
        )
        assert done.returncode == 0, done.stderr
        _safe(done.stdout)
        if output == "yaml":
            (item,) = yaml.safe_load(done.stdout)["items"]
            assert item["nodes"] == HOSTILE[2]  # machine output keeps the value exact, escaped by YAML
