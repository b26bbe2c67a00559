"""The audit trail on the real control plane: a policy commit's Node relabel and the objects it changes carry
that commit and its (cleaned) author, as do the Events that tell of them; objects it leaves as they were
keep the commit that last changed them; and the leader's audit log line for the relabel lands in the
policy repository with the next inventory snapshot."""

from __future__ import annotations

import json
import subprocess
from datetime import UTC, datetime

import pytest
from kubernetes import client

from kgwe.audit.log import line_hash
from kgwe.audit.stamp import MAX_EMAIL_CHARS, MAX_NAME_CHARS
from kgwe.reconcile.repository import RepositoryReconciler
from kgwe.vocab import MIG_CONFIG_LABEL, REVISION_ANNOTATION, REVISION_AUTHOR_ANNOTATION
from tests.harness.waiting import nodes_watched, repeat_until
from tests.reconcile.conftest import git

pytestmark = pytest.mark.cluster

SYSTEM_NS = "kgwe-system"
REPORTS = "reports/e2e"
# what a committer may type as their name: a right-to-left override hiding text, and far too much of it
MALLORY = "Mallory \u202egnp.exe\u202c " + "x" * 500


def git_bare(e2e, *args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=e2e.remote.bare, capture_output=True, text=True, check=True
    ).stdout


def settle(rec: RepositoryReconciler, node: str, config_part: str) -> None:
    """Reconcile until ready with `node` on a config containing `config_part`."""

    def done(outcome) -> bool:
        labels = client.CoreV1Api(rec.cluster.api_client).read_node(node).metadata.labels or {}
        return outcome is not None and outcome.phase == "ready" and config_part in labels[MIG_CONFIG_LABEL]

    repeat_until(
        "the rollout to finish",
        rec.reconcile,
        done,
        90.0,
        watch=nodes_watched(rec.cluster),
    )


def test_a_policy_commit_s_writes_carry_it_and_the_audit_log_lands_in_git(k8s_api, e2e, kgwe_mig_manager):
    (node,) = e2e.make_nodes(1)
    first = e2e.remote.commit(e2e.base, "first policy")
    e2e.make_repository(reports={"path": REPORTS})
    rec = RepositoryReconciler(k8s_api, SYSTEM_NS, e2e.pool, cache_dir=e2e.tmp / "cache")
    settle(rec, node, "1g.10gb")
    scoring = e2e.core.read_namespaced_config_map("kgwe-scoring", SYSTEM_NS).metadata.annotations
    assert scoring[REVISION_ANNOTATION] == f"main@sha1:{first}"
    assert scoring[REVISION_AUTHOR_ANNOTATION] == "Human <h@x>"

    # Mallory commits a new MIG layout for the pool.
    (e2e.remote.work / "policy" / "mig.yaml").write_text(e2e.strategy_yaml(e2e.pool, "3g.40gb: 100%"))
    git(e2e.remote.work, "commit", "-qam", "bigger slices", f"--author={MALLORY} <m@x>")
    git(e2e.remote.work, "pull", "-q", "--rebase", "origin", "main")  # over the bot's commits
    git(e2e.remote.work, "push", "-q", "origin", "HEAD:main")
    change = git(e2e.remote.work, "rev-parse", "HEAD")
    settle(rec, node, "3g.40gb")

    revision = f"main@sha1:{change}"
    meta = e2e.core.read_node(node).metadata
    assert "3g.40gb" in meta.labels[MIG_CONFIG_LABEL]
    assert meta.annotations[REVISION_ANNOTATION] == revision
    author = meta.annotations[REVISION_AUTHOR_ANNOTATION]
    assert author.startswith("Mallory gnp.exe xxx") and author.endswith("… <m@x>")  # no override, cut
    assert "\u202e" not in author and len(author) <= MAX_NAME_CHARS + MAX_EMAIL_CHARS + 3
    mig_parted = e2e.core.read_namespaced_config_map("kgwe-mig-parted-config", "gpu-operator").metadata
    assert mig_parted.annotations[REVISION_ANNOTATION] == revision  # changed by the commit
    scoring = e2e.core.read_namespaced_config_map("kgwe-scoring", SYSTEM_NS).metadata.annotations
    assert scoring[REVISION_ANNOTATION] == f"main@sha1:{first}"  # left as it was: not rewritten

    events = e2e.core.list_namespaced_event(SYSTEM_NS, field_selector=f"involvedObject.name={e2e.pool}").items
    selected = [e for e in events if e.reason == "MIGConfigSelected" and "3g.40gb" in e.message]
    assert selected and all(f"(policy {revision} by {author})" in e.message for e in selected)
    assert all((e.metadata.annotations or {}).get(REVISION_ANNOTATION) == revision for e in selected)

    # The relabel's line is in this month's audit log, committed by the bot with the inventory snapshot
    # (the log is batched: no commit of its own while the snapshot goes out anyway).
    log_file = f"{REPORTS}/audit/{datetime.now(UTC):%Y-%m}.jsonl"
    lines = [json.loads(line) for line in git_bare(e2e, "show", f"main:{log_file}").splitlines()]
    assert lines[0]["revision"] == f"main@sha1:{first}" and lines[0]["author"] == "Human <h@x>"
    assert lines[0]["objects"]  # what the first pass created or updated
    ours = [e for e in lines if e["revision"] == revision]
    relabelled = [name for e in ours for name in e.get("nodes", {}).get("relabelled", {}).get("names", [])]
    assert any(n.startswith(f"{node}: {MIG_CONFIG_LABEL}=") and "3g.40gb" in n for n in relabelled)
    assert all(e["author"] == author and e["repository"] == f"{SYSTEM_NS}/{e2e.pool}" for e in ours)
    added_by = git_bare(e2e, "log", "-1", "--format=%H %an", "main", "--", log_file).split()
    assert added_by[1] == "kgwe-bot"
    touched = git_bare(e2e, "show", "--name-only", "--format=", added_by[0]).split()
    assert sorted(touched) == sorted([log_file, f"{REPORTS}/gpu-inventory.yaml"])

    # The bot's commits name no policy change: a pass now writes nothing and logs nothing.
    head = git_bare(e2e, "rev-parse", "main")
    outcome = rec.reconcile()
    assert outcome is not None and outcome.phase == "ready" and rec.last_sync.writes == 0
    assert git_bare(e2e, "rev-parse", "main") == head and not rec.audit.entries

    # What KGWE wrote is its own state, in status: the file, every line of it KGWE's, the chain's head.
    kept = e2e.status()["auditLog"]
    logged = git_bare(e2e, "show", f"main:{log_file}").encode()
    assert kept["path"] == log_file and kept["lines"] == len(lines) and kept["bytes"] == len(logged)
    assert kept["head"] == line_hash(logged.splitlines()[-1]) and "tampering" not in kept

    # A hand edit the next pass puts back: its line waits (no snapshot goes out, the log was committed
    # less than the flush interval ago) — until the controller stops, when the leader commits it at once,
    # with KGWE's state of the log in status, so the next leader finds the file as KGWE left it.
    key = sorted(e2e.core.read_namespaced_config_map("kgwe-scoring", SYSTEM_NS).data)[0]
    e2e.core.patch_namespaced_config_map("kgwe-scoring", SYSTEM_NS, {"data": {key: "hand edited"}})
    outcome = rec.reconcile()
    assert outcome is not None and rec.last_sync.drift_corrected and rec.audit.waiting() == 1
    assert git_bare(e2e, "rev-parse", "main") == head
    assert rec.flush_audit()
    flushed = git_bare(e2e, "show", f"main:{log_file}").encode()
    last = json.loads(flushed.splitlines()[-1])
    assert last["objects"]["driftCorrected"]["names"] == ["ConfigMap/kgwe-system/kgwe-scoring"]
    kept = e2e.status()["auditLog"]
    assert kept["lines"] == len(lines) + 1 and kept["head"] == line_hash(flushed.splitlines()[-1])
    assert not rec.audit.waiting() and not rec.flush_audit()  # nothing waits: no commit
