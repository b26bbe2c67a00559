"""Commit-back against real bare remotes: bot author, no empty commits, rebase over concurrent pushes,
permanent rejection by a pre-receive hook reported at once."""

from __future__ import annotations

import os
import stat
import threading
from pathlib import Path

import pytest

from kgwe.errors import KgweError
from kgwe.gitops.commit_back import BotIdentity, CommitBack


def make(remote, tmp_path: Path, **kw) -> CommitBack:
    return CommitBack(str(remote.bare), "main", workdir=tmp_path / "cb", allow_local=True, **kw)


def racing(remote, tmp_path: Path, after_fetch, **kw) -> CommitBack:
    """A CommitBack whose branch moves (a real push by the human) right after each of its fetches."""

    class Racing(CommitBack):
        def _fetch(self):
            head = super()._fetch()
            after_fetch()
            return head

    return Racing(
        str(remote.bare), "main", workdir=tmp_path / "cb", backoff_base_seconds=0.01, allow_local=True, **kw
    )


def test_pushes_with_bot_author_and_template(remote, tmp_path):
    cb = make(
        remote,
        tmp_path,
        author=BotIdentity("cost-bot", "cost@example.com"),
        message_template="reports: {summary} [{period}]\n\n{files}",
    )
    result = cb.commit_files(
        {"reports/prod/chargeback.md": "# Chargeback\n"}, summary="chargeback", values={"period": "2026-11"}
    )
    assert result.status == "pushed" and result.attempts == 1
    head = remote.log()[0]
    assert head.startswith(result.sha) and "cost-bot reports: chargeback [2026-11]" in head
    assert remote.show("main", "reports/prod/chargeback.md") == "# Chargeback"
    assert remote.show("main", "policy/mig.yaml") == "kind: MIGStrategy"  # the rest is untouched


def test_never_an_empty_commit(remote, tmp_path):
    cb = make(remote, tmp_path)
    assert cb.commit_files({"reports/a.md": "same\n"}, summary="a").status == "pushed"
    before = remote.log()
    again = cb.commit_files({"reports/a.md": "same\n"}, summary="a")
    assert again.status == "unchanged" and again.attempts == 0
    assert remote.log() == before
    deleting_missing = cb.commit_files({"reports/never-existed.md": None}, summary="rm")
    assert deleting_missing.status == "unchanged"


def test_concurrent_push_is_rebased_over_not_overwritten(remote, tmp_path):
    cb = make(remote, tmp_path, backoff_base_seconds=0.01)
    cb.commit_files({"reports/a.md": "v1\n"}, summary="first")  # warm the private clone
    # A human pushes right after commit-back fetched: simulate by pushing from inside the sleep hook
    # of a first failed push. Easiest real race: push a human commit, then make commit-back's clone stale.
    remote.pull()
    human_sha = remote.commit({"policy/mig.yaml": "human change\n"}, "human edit")
    # commit-back's own remote-tracking ref is now stale; it must fetch, and if the push races, rebase.
    pushes: list[str] = []

    def once() -> None:  # the branch moves between our fetch and our push, once
        if not pushes:
            pushes.append(remote.commit({"policy/other.yaml": "concurrent\n"}, "concurrent human"))

    cb2 = racing(remote, tmp_path, once)
    result = cb2.commit_files({"reports/b.md": "report\n"}, summary="second")
    assert result.status == "pushed" and result.attempts == 2
    log = remote.log()
    assert "second" in log[0] and log[1].startswith(pushes[0]) and any(h.startswith(human_sha) for h in log)
    assert remote.show("main", "policy/other.yaml") == "concurrent"
    assert remote.show("main", "policy/mig.yaml") == "human change"
    assert remote.show("main", "reports/b.md") == "report"


def test_conflicting_edit_of_same_report_is_rewritten_on_top(remote, tmp_path):
    raced: list[str] = []

    def once() -> None:
        if not raced:
            raced.append(remote.commit({"reports/x.md": "someone else\n"}, "manual report edit"))

    cb = racing(remote, tmp_path, once)
    result = cb.commit_files({"reports/x.md": "ours\n"}, summary="x")
    assert result.status == "pushed"
    assert remote.show("main", "reports/x.md") == "ours"
    assert remote.log()[1].startswith(raced[0])  # their commit stays in history


def test_pre_receive_rejection_is_permanent_and_not_retried(remote, tmp_path):
    hook = remote.bare / "hooks" / "pre-receive"
    hook.write_text("#!/bin/sh\necho 'branch main is protected' >&2\nexit 1\n")
    hook.chmod(hook.stat().st_mode | stat.S_IEXEC)
    sleeps: list[float] = []
    cb = make(remote, tmp_path, attempts=5, sleep=sleeps.append)
    before = remote.log()
    result = cb.commit_files({"reports/a.md": "x\n"}, summary="a")
    assert result.status == "rejected" and result.attempts == 1 and sleeps == []
    assert "protected" in result.reason or "rejected" in result.reason
    assert remote.log() == before


def test_branch_always_moving_gives_up_after_bounded_attempts(remote, tmp_path):
    counter = iter(range(100))

    sleeps: list[float] = []
    cb = racing(
        remote,
        tmp_path,
        lambda: remote.commit({f"policy/n{next(counter)}.yaml": "x\n"}, "busy"),
        attempts=3,
        sleep=sleeps.append,
    )
    result = cb.commit_files({"reports/a.md": "x\n"}, summary="a")
    assert result.status == "failed" and result.attempts == 3 and len(sleeps) == 2
    assert not any("kgwe-bot" in line for line in remote.log())


def test_only_reports_paths_may_be_written(remote, tmp_path):
    cb = make(remote, tmp_path)
    for bad in ("policy/mig.yaml", "../x", "/etc/passwd", "reports/../policy/x"):
        with pytest.raises(KgweError):
            cb.commit_files({bad: "x"}, summary="bad")
    with pytest.raises(KgweError, match="template"):
        make(remote, tmp_path, message_template="{nope}").commit_files({"reports/a": "x"}, summary="s")


def test_two_writers_in_parallel_both_land(remote, tmp_path):
    results = {}

    def write(name: str) -> None:
        cb = CommitBack(
            str(remote.bare), "main", workdir=tmp_path / name, backoff_base_seconds=0.05, allow_local=True
        )
        results[name] = cb.commit_files({f"reports/{name}.md": name}, summary=name)

    threads = [threading.Thread(target=write, args=(n,)) for n in ("w1", "w2", "w3")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert {n: (r.status, r.reason) for n, r in results.items()} == {n: ("pushed", "") for n in results}
    for name in results:
        assert remote.show("main", f"reports/{name}.md") == name
    assert os.path.isdir(remote.bare)


def _append(line: bytes):
    return lambda old: (old or b"") + line


def test_an_edit_is_applied_again_to_what_a_concurrent_push_left(remote, tmp_path):
    cb = make(remote, tmp_path)
    assert cb.commit_files({"reports/log.jsonl": _append(b"ours 1\n")}, summary="log").status == "pushed"
    seen: list[bytes | None] = []
    fetches: list[int] = []

    def once() -> None:  # someone else appends between our first fetch and our push
        fetches.append(1)
        if len(fetches) == 1:
            remote.pull()
            remote.commit({"reports/log.jsonl": "ours 1\ntheirs\n"}, "their line")

    def edit(old: bytes | None) -> bytes:
        seen.append(old)
        return (old or b"") + b"ours 2\n"

    result = racing(remote, tmp_path, once, attempts=3).commit_files(
        {"reports/log.jsonl": edit}, summary="log"
    )
    assert result.status == "pushed" and result.attempts == 2
    assert seen == [b"ours 1\n", b"ours 1\ntheirs\n"]  # the edit saw each head's file, bytes exact
    assert remote.show("main", "reports/log.jsonl") == "ours 1\ntheirs\nours 2"
    same = cb.commit_files({"reports/log.jsonl": lambda old: old}, summary="log")
    assert same.status == "unchanged"


def test_an_edit_never_reads_through_a_symlink_or_past_its_bound(remote, tmp_path, monkeypatch):
    import kgwe.gitops.commit_back as commit_back

    (remote.work / "reports").mkdir()
    (remote.work / "reports" / "log.jsonl").symlink_to("../policy/mig.yaml")
    remote.commit({"reports/big.jsonl": "x" * 100}, "a link and a big file")
    called: list[bytes | None] = []
    cb = make(remote, tmp_path)
    linked = cb.commit_files({"reports/log.jsonl": lambda old: called.append(old) or b"x"}, summary="s")
    assert linked.status == "rejected" and "not a regular file" in linked.reason and called == []
    monkeypatch.setattr(commit_back, "MAX_EDITED_BYTES", 99)
    big = cb.commit_files({"reports/big.jsonl": _append(b"more")}, summary="s")
    assert big.status == "rejected" and "100 bytes, over the 99-byte bound" in big.reason
    assert remote.show("main", "policy/mig.yaml") == "kind: MIGStrategy"
