"""Run `kgwe extender` as its own process against a test control plane (as kube-scheduler would reach it)."""

from __future__ import annotations

import re
import subprocess
import sys
import threading
import time
from pathlib import Path
from urllib.request import urlopen

REPO = Path(__file__).resolve().parents[2]


def _ready(url: str) -> bool:
    try:
        with urlopen(url) as r:
            return r.status == 200
    except OSError:
        return False


def start_extender(
    kubeconfig: Path | str, *extra_args: str, timeout_seconds: float = 60.0
) -> tuple[subprocess.Popen, int]:
    """(process, port) once /readyz answers 200; its log is drained so it never blocks on a full pipe."""
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "kgwe.cli",
            "extender",
            "--kubeconfig",
            str(kubeconfig),
            "--listen",
            "127.0.0.1:0",
            *extra_args,
        ],
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )
    assert proc.stderr is not None
    port = None
    deadline = time.monotonic() + timeout_seconds
    while port is None and time.monotonic() < deadline:
        line = proc.stderr.readline()
        m = re.search(r"listening on 127\.0\.0\.1:(\d+)", line)
        if m:
            port = int(m.group(1))
        elif not line and proc.poll() is not None:
            break
    if port is None:
        proc.kill()
        raise RuntimeError(f"kgwe extender did not start (exit {proc.poll()})")
    stream = proc.stderr
    threading.Thread(target=lambda: [None for _ in stream], name="extender-log", daemon=True).start()
    while not _ready(f"http://127.0.0.1:{port}/readyz"):
        if time.monotonic() > deadline or proc.poll() is not None:
            proc.kill()
            raise RuntimeError("kgwe extender never became ready")
        time.sleep(0.1)
    return proc, port
