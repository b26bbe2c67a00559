"""The audit trail's pure parts: the stamp a write carries and the monthly JSON Lines log (append-only,
bounded, closed by one line when full). A hostile author: tests/security/test_audit_author.py."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from kgwe.audit.log import (
    MAX_NAMES,
    AuditEntry,
    NodeChange,
    Pending,
    QuotaChange,
    append,
    is_closed,
    is_log_path,
    log_path,
)
from kgwe.audit.stamp import UNKNOWN_AUTHOR, Stamp
from kgwe.vocab import REVISION_ANNOTATION, REVISION_AUTHOR_ANNOTATION

SHA = "0123456789abcdef0123456789abcdef01234567"
T0 = datetime(2026, 11, 30, 23, 59, tzinfo=UTC)


def test_a_stamp_names_the_commit_flux_style_and_its_author():
    stamp = Stamp.of("main", SHA, "Ada Lovelace", "ada@example.com")
    assert stamp.revision == f"main@sha1:{SHA}"
    assert stamp.author == "Ada Lovelace <ada@example.com>"
    assert stamp.annotations() == {
        REVISION_ANNOTATION: stamp.revision,
        REVISION_AUTHOR_ANNOTATION: stamp.author,
    }
    assert Stamp.from_annotations(stamp.annotations()) == stamp
    assert Stamp.of("", SHA, "", "").revision == f"sha1:{SHA}"
    assert Stamp.of("", SHA, "", "").author == UNKNOWN_AUTHOR
    with pytest.raises(ValueError, match="not a revision"):
        Stamp.of("main", "not-a-sha", "a", "b")
    with pytest.raises(ValueError, match="not a revision"):
        Stamp.of("has space", SHA, "a", "b")


def entry(**kw) -> AuditEntry:
    stamp = Stamp.of("main", SHA, "Ada", "ada@x")
    return AuditEntry(time=T0, repository="kgwe-system/fleet", stamp=stamp, applied=stamp.revision, **kw)


def test_an_entry_is_one_json_line_saying_what_the_pass_wrote():
    e = entry(
        created=["ConfigMap/gpu-operator/b", "ConfigMap/gpu-operator/a"],
        updated=["ResourceQuota/team-a/kgwe-budget"],
        drift_corrected=["ResourceQuota/team-a/kgwe-budget"],
        nodes=[
            NodeChange("gpu-1", "relabel", "nvidia.com/mig.config", "all-1g.10gb"),
            NodeChange("gpu-1", "cordon"),
            NodeChange("gpu-1", "evict", value="ml/train-0"),
        ],
        scheduler_restarted=True,
        quotas=[QuotaChange("team-a", True, {"requests.nvidia.com/gpu": "2"})],
    )
    line = e.line()
    assert line.endswith("\n") and line.count("\n") == 1
    record = json.loads(line)
    assert record["time"] == "2026-11-30T23:59:00Z" and record["revision"] == f"main@sha1:{SHA}"
    assert record["author"] == "Ada <ada@x>" and record["repository"] == "kgwe-system/fleet"
    assert record["objects"]["created"] == {
        "count": 2,
        "names": ["ConfigMap/gpu-operator/a", "ConfigMap/gpu-operator/b"],
    }
    assert record["objects"]["driftCorrected"]["count"] == 1 and "pruned" not in record["objects"]
    assert record["nodes"] == {
        "cordoned": {"count": 1, "names": ["gpu-1"]},
        "drained": {"count": 1, "names": ["gpu-1: ml/train-0"]},
        "relabelled": {"count": 1, "names": ["gpu-1: nvidia.com/mig.config=all-1g.10gb"]},
    }
    assert record["schedulerRestarted"] is True
    assert record["budgetQuotas"]["names"] == [
        {"namespace": "team-a", "capped": True, "hard": {"requests.nvidia.com/gpu": "2"}}
    ]
    assert entry().empty and not e.empty


def test_an_entry_lists_a_bounded_number_of_names_with_the_true_count():
    many = [f"Node/gpu-{i:05d}" for i in range(10_000)]
    record = entry(updated=many, nodes=[NodeChange(n, "uncordon") for n in many]).record()
    assert record["objects"]["updated"]["count"] == 10_000
    assert len(record["objects"]["updated"]["names"]) == MAX_NAMES
    assert record["nodes"]["uncordoned"]["count"] == 10_000
    assert len(entry(updated=many).line()) < 4096


def test_the_log_is_append_only_and_closed_by_one_line_when_full():
    first, kept = append(None, [entry(created=["A/x"]).line()], T0)
    assert kept == 1 and first.count(b"\n") == 1
    second, kept = append(first, [entry(created=["A/y"]).line()], T0)
    assert kept == 1 and second.startswith(first)  # what was there stays, byte for byte
    line = entry(created=["A/z"]).line()
    full, kept = append(second, [line] * 50, T0, max_bytes=len(second) + 3 * len(line) + 100)
    assert 0 < kept < 50 and full.startswith(second) and is_closed(full)
    assert len(full) <= len(second) + 3 * len(line) + 100
    closing = json.loads(full.splitlines()[-1])
    assert closing["logFull"] is True and closing["maxBytes"] == len(second) + 3 * len(line) + 100
    after, kept = append(full, [line], T0)
    assert after == full and kept == 0  # nothing after the closing line that month
    assert json.loads(full.splitlines()[-2])["objects"]["created"]["names"] == ["A/z"]  # the last one kept


def test_a_line_someone_left_unfinished_stays_and_ours_starts_on_its_own():
    data, kept = append(b'{"theirs": tr', [entry(created=["A/x"]).line()], T0)
    lines = data.splitlines()
    assert kept == 1 and lines[0] == b'{"theirs": tr' and json.loads(lines[1])["revision"].endswith(SHA)
    assert not is_closed(b'{"logFull": "yes"}\n') and is_closed(b'{"logFull": true}\n')


def test_pending_entries_go_to_their_month_and_a_dropped_count_is_logged():
    pending = Pending(limit=2)
    december = datetime(2026, 12, 1, 0, 1, tzinfo=UTC)
    for when in (T0, december, december):
        pending.add(
            AuditEntry(
                time=when, repository="r", stamp=Stamp.of("", SHA, "a", "b"), applied="x", pruned=["A/b"]
            )
        )
    files = pending.by_file("reports/", december)
    assert set(files) == {"reports/audit/2026-11.jsonl", "reports/audit/2026-12.jsonl"}
    assert json.loads(files["reports/audit/2026-12.jsonl"][-1]) == {
        "time": "2026-12-01T00:01:00Z",
        "dropped": 1,
    }
    assert log_path("/team/reports/", T0) == "team/reports/audit/2026-11.jsonl"


@pytest.mark.parametrize(
    ("path", "is_log"),
    [
        ("reports/audit/2026-11.jsonl", True),
        ("audit/2026-01.jsonl", True),
        ("reports/audit/2026-1.jsonl", False),
        ("reports/audit/notes.jsonl", False),
        ("reports/not-audit/2026-11.jsonl", False),
        ("reports/audit/2026-11.json", False),
    ],
)
def test_a_month_s_log_is_known_by_its_path(path, is_log):
    assert is_log_path(path) is is_log


def test_kgwe_nodes_shows_the_policy_commit_of_kgwe_s_last_change_to_a_node():
    from kgwe.fleet.nodes import policy_change, policy_change_text

    stamp = Stamp.of("main", SHA, "Ada", "ada@x")
    node = {"metadata": {"name": "gpu-1", "annotations": {**stamp.annotations(), "other": "x"}}}
    assert policy_change(node) == {"lastPolicyChange": {"revision": stamp.revision, "author": "Ada <ada@x>"}}
    assert (
        policy_change_text(node) == f"gpu-1: last changed by KGWE for policy main@sha1:{SHA} by Ada <ada@x>\n"
    )
    edited = {"metadata": {"name": "gpu-2", "annotations": {REVISION_ANNOTATION: "HEAD~1"}}}  # not KGWE's
    assert policy_change(edited) == {} and policy_change_text(edited) == ""
    assert policy_change({"metadata": {"name": "gpu-3"}}) == {}
