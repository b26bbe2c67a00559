"""A real Git server on loopback for tests and `kgwe demo`: git's own smart-HTTP backend (`git
http-backend`) behind a small threaded HTTPS server, with a throwaway CA.

PolicyRepository URLs must be https:// or ssh:// (the CRD refuses local paths), so the controller under test
fetches and pushes over real HTTPS exactly as in a cluster; it trusts the test CA through `ca_file`.
Optionally every request must carry HTTP Basic credentials, to test Secrets and token handling.
"""

from __future__ import annotations

import base64
import contextlib
import shutil
import subprocess
import tempfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from ssl import PROTOCOL_TLS_SERVER, SSLContext

from kgwe.httpd import error_body
from kgwe.httpd.headers import content_length
from kgwe.localcluster.pki import write_pki

MAX_BODY_BYTES = 64 * 1024 * 1024


class GitHttpsServer:
    """Serves the bare repositories under `project_root` at https://HOST:PORT/<name>.git; HOST is 127.0.0.1,
    or the host's address where pods on the real node reach it (its certificate names that address)."""

    def __init__(
        self,
        project_root: Path,
        *,
        username: str | None = None,
        password: str | None = None,
        host: str = "127.0.0.1",
    ):
        self.project_root = Path(project_root)
        self.host = host
        self._pki_dir = Path(tempfile.mkdtemp(prefix="kgwe-gitserver-"))
        pki = write_pki(self._pki_dir, serving_ips=[] if host == "127.0.0.1" else [host])
        self.ca_file = str(pki.ca_cert)
        self.authorizations: list[str] = []  # every Authorization header seen (tests check what was sent)
        expected = None
        if password is not None:
            expected = "Basic " + base64.b64encode(f"{username or 'git'}:{password}".encode()).decode()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                return

            def _cgi(self) -> None:
                auth = self.headers.get("Authorization", "")
                server.authorizations.append(auth)
                if expected is not None and auth != expected:
                    self.send_response(401)
                    self.send_header("WWW-Authenticate", 'Basic realm="git"')
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                length = content_length(self.headers.get("Content-Length") or "0")
                if length is None:
                    self._refuse(400, "Content-Length is not one non-negative number of ASCII digits")
                    return
                if length > MAX_BODY_BYTES:
                    self._refuse(413, f"body of {length} bytes exceeds the {MAX_BODY_BYTES} byte limit")
                    return
                body = self.rfile.read(length)
                path, _, query = self.path.partition("?")
                env = {
                    "GIT_PROJECT_ROOT": str(server.project_root),
                    "GIT_HTTP_EXPORT_ALL": "1",
                    "PATH_INFO": path,
                    "REQUEST_METHOD": self.command,
                    "QUERY_STRING": query,
                    "REMOTE_USER": "kgwe-test",
                    "REMOTE_ADDR": "127.0.0.1",
                    "CONTENT_TYPE": self.headers.get("Content-Type", ""),
                    "CONTENT_LENGTH": str(len(body)),
                    "HTTP_CONTENT_ENCODING": self.headers.get("Content-Encoding", ""),
                    "GIT_PROTOCOL": self.headers.get("Git-Protocol", ""),
                    "PATH": "/usr/bin:/bin",
                }
                done = subprocess.run(
                    ["git", "-c", "http.receivepack=true", "http-backend"],
                    input=body,
                    env=env,
                    capture_output=True,
                    timeout=120,
                )
                head, _, payload = done.stdout.partition(b"\r\n\r\n")
                status, headers = 200, []
                for line in head.decode("latin-1").split("\r\n"):
                    key, _, value = line.partition(":")
                    if key.lower() == "status":
                        status = int(value.split()[0])
                    elif key:
                        headers.append((key, value.strip()))
                self.send_response(status)
                for key, value in headers:
                    self.send_header(key, value)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def _refuse(self, status: int, message: str) -> None:
                payload = error_body(message)
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.send_header("Connection", "close")
                self.end_headers()
                self.wfile.write(payload)
                self.close_connection = True

            do_GET = do_POST = _cgi

        self._httpd = ThreadingHTTPServer((host, 0), Handler)
        self._httpd.daemon_threads = True
        context = SSLContext(PROTOCOL_TLS_SERVER)
        context.load_cert_chain(pki.serving_cert, pki.serving_key)
        self._httpd.socket = context.wrap_socket(self._httpd.socket, server_side=True)
        self.port = self._httpd.server_address[1]
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="git-https", daemon=True)

    def url(self, name: str) -> str:
        """The clone URL of `project_root/name` (e.g. "policy.git")."""
        return f"https://{self.host}:{self.port}/{name}"

    def start(self) -> GitHttpsServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        with contextlib.suppress(Exception):
            self._httpd.shutdown()
        self._httpd.server_close()
        shutil.rmtree(self._pki_dir, ignore_errors=True)

    def __enter__(self) -> GitHttpsServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
