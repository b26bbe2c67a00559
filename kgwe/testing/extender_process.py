"""Run the real `kgwe extender` as a child process for tests: start it, learn its port from its log line,
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

_LISTENING = re.compile(r"kgwe extender listening on 127\.0\.0\.1:(\d+)")


def start_extender(*args: str, timeout_seconds: float = 60.0) -> tuple[subprocess.Popen, int]:
    """`kgwe extender --listen 127.0.0.1:0 ARGS...` -> (process, port); stderr keeps draining afterwards."""
    argv = [sys.executable, "-m", "kgwe.cli", "extender", "--listen", "127.0.0.1:0", *args]
    proc = subprocess.Popen(argv, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + timeout_seconds
    while time.monotonic() < deadline:
        line = proc.stderr.readline()  # type: ignore[union-attr]
        if not line and proc.poll() is not None:
            break
        m = _LISTENING.search(line)
        if m:
            threading.Thread(target=proc.stderr.read, daemon=True).start()  # type: ignore[union-attr]
            return proc, int(m.group(1))
    proc.kill()
    raise RuntimeError(f"kgwe extender did not start (exit {proc.poll()})")


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
