"""HTTPS-style token auth against a real smart-HTTP git server (git http-backend behind a Basic-auth
check). Plain HTTP on loopback: the header handling is the same as over TLS."""

from __future__ import annotations

import base64
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from kgwe.gitops.auth import GitCredentials
from kgwe.gitops.commit_back import CommitBack
from kgwe.gitops.source import GitRef, GitSource, GitSourceError

TOKEN = "ghp_exampletoken123"


def serve(project_root):
    expected = "Basic " + base64.b64encode(f"x-access-token:{TOKEN}".encode()).decode()
    seen: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            return

        def _cgi(self):
            seen.append(self.headers.get("Authorization", ""))
            if self.headers.get("Authorization") != expected:
                self.send_response(401)
                self.send_header("WWW-Authenticate", 'Basic realm="git"')
                self.end_headers()
                return
            path, _, query = self.path.partition("?")
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            env = {
                "GIT_PROJECT_ROOT": str(project_root),
                "GIT_HTTP_EXPORT_ALL": "1",
                "PATH_INFO": path,
                "REQUEST_METHOD": self.command,
                "QUERY_STRING": query,
                "REMOTE_USER": "bot",
                "CONTENT_TYPE": self.headers.get("Content-Type", ""),
                "CONTENT_LENGTH": str(len(body)),
                "HTTP_CONTENT_ENCODING": self.headers.get("Content-Encoding", ""),
                "PATH": "/usr/bin:/bin",
            }
            out = subprocess.run(["git", "http-backend"], input=body, env=env, capture_output=True).stdout
            head, _, payload = out.partition(b"\r\n\r\n")
            status = 200
            headers = []
            for line in head.decode().split("\r\n"):
                key, _, value = line.partition(":")
                if key.lower() == "status":
                    status = int(value.split()[0])
                elif key:
                    headers.append((key, value.strip()))
            self.send_response(status)
            for k, v in headers:
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        do_GET = do_POST = _cgi

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return httpd, seen


def test_token_over_http_fetch_and_push(remote, tmp_path):
    subprocess.run(["git", "config", "http.receivepack", "true"], cwd=remote.bare, check=True)
    httpd, seen = serve(remote.bare.parent)
    url = f"http://127.0.0.1:{httpd.server_address[1]}/remote.git"
    try:
        creds = GitCredentials(username="x-access-token", password=TOKEN)
        rev = GitSource(
            url, GitRef(branch="main"), cache_dir=tmp_path / "c", credentials=creds, allow_local=True
        ).fetch()
        assert rev.sha == remote.log()[0].split()[0]

        without = GitSource(
            url,
            GitRef(branch="main"),
            cache_dir=tmp_path / "c2",
            attempts=2,
            sleep=lambda s: None,
            allow_local=True,
        )
        with pytest.raises(GitSourceError) as err:
            without.fetch()
        assert TOKEN not in str(err.value)

        cb = CommitBack(url, "main", workdir=tmp_path / "cb", credentials=creds, allow_local=True)
        assert cb.commit_files({"reports/a.md": "over http\n"}, summary="http").status == "pushed"
        assert remote.show("main", "reports/a.md") == "over http"
        rejected = CommitBack(
            url,
            "main",
            workdir=tmp_path / "cb2",
            attempts=3,
            credentials=GitCredentials(password="wrong"),
            sleep=lambda s: None,
            allow_local=True,
        )
        bad = rejected.commit_files({"reports/b.md": "x"}, summary="b")
        assert bad.status in ("rejected", "failed") and "wrong" not in bad.reason
        # The token never lands in the mirror's or the clone's git config.
        for cfg in (tmp_path / "c").rglob("config"):
            assert TOKEN not in cfg.read_text()
        assert TOKEN not in (tmp_path / "cb" / "repo.git" / "config").read_text()
        assert any(h.startswith("Basic ") for h in seen)
    finally:
        httpd.shutdown()


def test_secret_data_and_ssh_environment():
    from kgwe.gitops.auth import git_environment

    data = {
        k: base64.b64encode(v).decode()
        for k, v in {
            "username": b"bot",
            "password": b"tok",
            "identity": b"-----BEGIN KEY-----\nabc",
            "known_hosts": b"git.example.com ssh-ed25519 AAAA",
        }.items()
    }
    creds = GitCredentials.from_secret_data(data)
    assert creds.username == "bot" and creds.password == "tok" and "tok" not in repr(creds)
    with git_environment(creds) as env:
        cmd = env["GIT_SSH_COMMAND"]
        key_path = cmd.split("-i ")[1].split()[0]
        import os
        import stat

        assert stat.S_IMODE(os.stat(key_path).st_mode) == 0o600
        assert "StrictHostKeyChecking=yes" in cmd and "UserKnownHostsFile=" in cmd
        assert env["GIT_CONFIG_VALUE_0"] == "Authorization: Basic " + base64.b64encode(b"bot:tok").decode()
    assert not os.path.exists(key_path)  # removed after use
