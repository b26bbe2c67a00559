"""A closed pipe (`kgwe validate sample-repo | head -1`) ends kgwe quietly, as it does any Unix tool."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_closed_stdout_is_a_quiet_exit(tmp_path: Path) -> None:
    # Enough output that it cannot all sit in the pipe buffer before the reader goes away.
    repo = tmp_path / "repo"
    repo.mkdir()
    for i in range(2000):  # ~300 KB of errors: several times a pipe buffer (64 KiB)
        (repo / f"bad-{i:04}.yaml").write_text("apiVersion: kgwe.nvidia.io/v1\nkind: Nope\n")
    kgwe = subprocess.Popen(
        [sys.executable, "-m", "kgwe.cli", "validate", str(repo)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=ROOT,
    )
    head = subprocess.run(["head", "-1"], stdin=kgwe.stdout, capture_output=True, timeout=120)
    kgwe.stdout.close()  # only `head` holds the read end now; it has exited
    stderr = kgwe.stderr.read().decode()
    code = kgwe.wait(timeout=120)
    assert head.stdout.count(b"\n") == 1
    assert stderr == "", stderr
    assert code in (0, 141)
