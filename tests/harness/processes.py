"""KGWE commands as processes for tests and benchmarks: started, their port read from their log, stopped."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

LISTENING = r"listening on 127\.0\.0\.1:(\d+)"  # what the extender and the webhook log once serving


def start_kgwe(args: list[str], log: Path, pattern: str | None = None) -> tuple[subprocess.Popen, int]:
    """`kgwe ARGS` as a process logging to `log`; the port it printed when `pattern` is given."""
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "kgwe.cli", *args], stdout=out, stderr=subprocess.STDOUT
        )
    if pattern is None:
        return proc, 0
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        m = re.search(pattern, log.read_text(errors="replace"))
        if m:
            return proc, int(m.group(1))
        assert proc.poll() is None, f"kgwe {args[0]} exited: {log.read_text()[-2000:]}"
        time.sleep(0.2)
    proc.terminate()
    raise AssertionError(f"kgwe {args[0]} did not start: {log.read_text()[-2000:]}")


def stop(proc: subprocess.Popen | None) -> None:
    if proc is not None and proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)
