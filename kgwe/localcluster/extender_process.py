"""Run `kgwe extender` as its own process against a test control plane (as kube-scheduler would reach it),
and speak HTTPS to it with or without a client certificate."""

from __future__ import annotations

import http.client
import re
import ssl
import subprocess
import sys
import threading
import time
from pathlib import Path
from urllib.request import urlopen

REPO = Path(__file__).resolve().parents[2]
_LISTENING = re.compile(r"kgwe extender listening on 127\.0\.0\.1:(\d+)")


def _ready(url: str) -> bool:
    try:
        with urlopen(url) as r:
            return bool(r.status == 200)
    except OSError:
        return False


def spawn_extender(*args: str, timeout_seconds: float = 60.0) -> tuple[subprocess.Popen[str], int]:
    """`kgwe extender --listen 127.0.0.1:0 ARGS...` -> (process, port) once it listens; its log is
    drained so it never blocks on a full pipe."""
    argv = [sys.executable, "-m", "kgwe.cli", "extender", "--listen", "127.0.0.1:0", *args]
    proc = subprocess.Popen(argv, stderr=subprocess.PIPE, text=True, cwd=REPO)
    assert proc.stderr is not None
    deadline = time.monotonic() + timeout_seconds
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        if not line and proc.poll() is not None:
            break
        m = _LISTENING.search(line)
        if m:
            threading.Thread(target=proc.stderr.read, name="extender-log", daemon=True).start()
            return proc, int(m.group(1))
    proc.kill()
    raise RuntimeError(f"kgwe extender did not start (exit {proc.poll()})")


def start_extender(
    kubeconfig: Path | str, *extra_args: str, timeout_seconds: float = 60.0
) -> tuple[subprocess.Popen[str], int]:
    """Cluster mode over plain HTTP: (process, port) once /readyz answers 200."""
    deadline = time.monotonic() + timeout_seconds
    proc, port = spawn_extender("--kubeconfig", str(kubeconfig), *extra_args, timeout_seconds=timeout_seconds)
    while not _ready(f"http://127.0.0.1:{port}/readyz"):
        if time.monotonic() > deadline or proc.poll() is not None:
            proc.kill()
            raise RuntimeError("kgwe extender never became ready")
        time.sleep(0.1)
    return proc, port


def https_request(port: int, ca: Path, client_dir: Path | None, path: str) -> tuple[int, bytes]:
    """GET https://127.0.0.1:PORT/PATH trusting `ca`, presenting client_dir/tls.crt when given."""
    ctx = ssl.create_default_context(cafile=str(ca))
    if client_dir is not None:
        ctx.load_cert_chain(str(client_dir / "tls.crt"), str(client_dir / "tls.key"))
    conn = http.client.HTTPSConnection("127.0.0.1", port, context=ctx, timeout=10)
    try:
        conn.request("GET", path)
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()
