"""The audit trail's pure parts: the stamp a write carries and the monthly JSON Lines log (append-only, hash
chained, bounded by KGWE's own state, closed by one line when full). A hostile author:
tests/security/test_audit_author.py; a hostile committer editing the log:
tests/security/test_audit_log_tampering.py."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from kgwe.audit.log import (
    CHAIN_KEY,
    MAX_NAMES,
    AuditEntry,
    LogState,
    NodeChange,
    Pending,
    QuotaChange,
    append,
    current_state,
    is_log_path,
    line_hash,
    log_path,
    moved_state,
    verify,
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


STATE = LogState("reports/audit/2026-11.jsonl")


def test_the_log_is_append_only_hash_chained_and_closed_by_one_line_when_full():
    first = append(None, [entry(created=["A/x"]).record()], T0, STATE)
    assert first.kept == 1 and first.data is not None and first.data.count(b"\n") == 1
    assert json.loads(first.data)[CHAIN_KEY] == "" and first.state.head == line_hash(first.data)
    second = append(first.data, [entry(created=["A/y"]).record()], T0, first.state)
    assert (
        second.kept == 1 and second.data is not None and second.data.startswith(first.data)
    )  # byte for byte
    assert json.loads(second.data.splitlines()[1])[CHAIN_KEY] == first.state.head  # chained
    assert (second.state.lines, second.state.bytes) == (2, len(second.data))
    line = len(entry(created=["A/z"]).line()) + 80
    bound = second.state.bytes + 3 * line + 100
    full = append(second.data, [entry(created=["A/z"]).record()] * 50, T0, second.state, max_bytes=bound)
    assert 0 < full.kept < 50 and full.closed and full.data is not None and full.data.startswith(second.data)
    assert len(full.data) <= bound
    closing = json.loads(full.data.splitlines()[-1])
    assert closing["logFull"] is True and closing["maxBytes"] == bound
    after = append(full.data, [entry(created=["A/z"]).record()], T0, full.state)
    assert after.data == full.data and after.kept == 0  # nothing after the closing line that month
    assert json.loads(full.data.splitlines()[-2])["objects"]["created"]["names"] == ["A/z"]  # the last kept


def test_fullness_counts_kgwe_s_own_bytes_never_the_file_s():
    """Another writer's lines neither fill the month nor close it: KGWE's state decides."""
    assert verify(b'{"logFull": true}\n', STATE) == "holds 1 line(s) KGWE did not write"
    padded = b"x" * 5_000_000 + b"\n"
    appended = append(padded, [entry(created=["A/x"]).record()], T0, STATE)
    assert appended.kept == 0 and appended.problem is not None and appended.data == padded  # left alone


def test_a_file_not_as_kgwe_left_it_is_found_and_left_alone():
    first = append(None, [entry(created=[f"A/{i}"]).record() for i in range(3)], T0, STATE)
    data, state = first.data, first.state
    assert data is not None and verify(data, state) is None
    lines = data.splitlines(keepends=True)
    forged = json.loads(lines[1])
    forged["author"] = "Someone Else <s@x>"
    cases = {
        "changed": lines[0] + json.dumps(forged).encode() + b"\n" + lines[2],
        "removed": lines[0] + lines[2],
        "cut": lines[0] + lines[1],
        "reordered": lines[1] + lines[0] + lines[2],
        "added after": data + b'{"time": "2026-11-30T00:00:00Z"}\n',
        "added between": lines[0] + b"{}\n" + lines[1] + lines[2],
        "unfinished": data + b'{"theirs": tr',
    }
    for what, tampered in cases.items():
        problem = verify(tampered, state)
        assert problem is not None, what
        appended = append(tampered, [entry(created=["A/x"]).record()], T0, state)
        assert appended.problem == problem and appended.data == tampered and appended.kept == 0, what
    assert verify(None, state) == "is gone: KGWE wrote 3 line(s) there"


def test_a_new_month_or_file_continues_the_chain():
    first = append(None, [entry(created=["A/x"]).record()], T0, STATE)
    december = datetime(2026, 12, 1, 0, 1, tzinfo=UTC)
    assert current_state(first.state, "reports", T0) == first.state
    new = current_state(first.state, "reports", december)
    assert new.path == "reports/audit/2026-12.jsonl" and new.start == new.head == first.state.head
    assert new.lines == 0 and new.seq > first.state.seq
    assert current_state(first.state, "elsewhere", T0).path == "elsewhere/audit/2026-11.jsonl"
    moved = moved_state(first.state, "reports", T0, "00ff00ff00ff00ff")
    assert moved.path == "reports/audit/2026-11.00ff00ff00ff00ff.jsonl" and moved.start == first.state.head
    assert LogState.from_record(moved.record()) == moved
    assert LogState.from_record({**moved.record(), "lines": -1}) is None
    assert LogState.from_record({**moved.record(), "path": "reports/x.jsonl"}) is None
    assert LogState.from_record({**moved.record(), "head": "zz"}) is None


def test_pending_entries_go_out_in_order_after_a_dropped_count():
    pending = Pending(limit=2)
    december = datetime(2026, 12, 1, 0, 1, tzinfo=UTC)
    kept = [
        pending.add(
            AuditEntry(
                time=when, repository="r", stamp=Stamp.of("", SHA, "a", "b"), applied="x", pruned=["A/b"]
            )
        )
        for when in (T0, december, december)
    ]
    assert kept == [True, True, False]
    records = pending.records(december)
    assert records[0] == {"time": "2026-12-01T00:01:00Z", "dropped": 1}
    assert [r["time"] for r in records[1:]] == ["2026-11-30T23:59:00Z", "2026-12-01T00:01:00Z"]
    pending.forget(2)  # the count and the first entry are in the log
    assert pending.dropped == 0 and [e.time for e in pending.entries] == [december]
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
        ("reports/audit/2026-11.0123abcd0123abcd.jsonl", True),  # a file KGWE went on in
        ("reports/audit/2026-11.xyz.jsonl", False),
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
