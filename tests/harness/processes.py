"""KGWE commands as processes for tests and benchmarks: started, their port read from their log, stopped."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from tests.harness.waiting import wait_for

LISTENING = r"listening on 127\.0\.0\.1:(\d+)"  # what the extender and the webhook log once serving


def start_kgwe(args: list[str], log: Path, pattern: str | None = None) -> tuple[subprocess.Popen, int]:
    """`kgwe ARGS` as a process logging to `log`; the port it printed when `pattern` is given."""
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "kgwe.cli", *args], stdout=out, stderr=subprocess.STDOUT
        )
    if pattern is None:
        return proc, 0

    def listening() -> re.Match[str] | None:
        assert proc.poll() is None, f"kgwe {args[0]} exited: {log.read_text()[-2000:]}"
        return re.search(pattern, log.read_text(errors="replace"))

    try:
        found = wait_for(f"kgwe {args[0]} to listen", listening, 90, describe=lambda: log.read_text()[-2000:])
    except BaseException:
        stop(proc)
        raise
    return proc, int(found.group(1))


def stop(proc: subprocess.Popen | None) -> None:
    if proc is not None and proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)
