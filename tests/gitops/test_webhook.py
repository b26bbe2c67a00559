"""The /hooks/git endpoint: HMAC verification and 4xx JSON on bad input, through a real HTTP server."""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request

import pytest

from kgwe.gitops.webhook import ControllerHTTPServer, handle_git_hook, sign, verify_signature

SECRET = b"s3cret"
PUSH = json.dumps(
    {
        "ref": "refs/heads/main",
        "after": "a" * 40,
        "commits": [{"added": ["reports/x.md"], "modified": ["policy/mig.yaml"], "removed": []}],
        "repository": {"clone_url": "https://git.example.com/p/policy.git"},
    }
)


def headers(body: bytes, **extra: str) -> dict[str, str]:
    return {
        "Content-Type": "application/json",
        "X-Hub-Signature-256": sign(SECRET, body),
        "X-GitHub-Event": "push",
        **extra,
    }


def test_known_github_signature_vector():
    # Example from GitHub's "Validating webhook deliveries" documentation.
    assert sign(b"It's a Secret to Everybody", b"Hello, World!") == (
        "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"
    )


def test_valid_push_triggers_with_paths():
    body = PUSH.encode()
    result = handle_git_hook(SECRET, headers(body), body)
    assert result.status == 202 and result.event is not None
    assert result.event.ref == "refs/heads/main" and result.event.after == "a" * 40
    assert result.event.changed_paths == ("reports/x.md", "policy/mig.yaml")
    assert result.event.repositories == {"git.example.com/p/policy"}


@pytest.mark.parametrize(
    ("mutate", "status", "fragment"),
    [
        (lambda h, b: ({k: v for k, v in h.items() if k != "X-Hub-Signature-256"}, b), 401, "missing"),
        (lambda h, b: ({**h, "X-Hub-Signature-256": "sha256=" + "0" * 64}, b), 401, "does not match"),
        (lambda h, b: ({**h, "X-Hub-Signature-256": sign(b"wrong", b)}, b), 401, "does not match"),
        (lambda h, b: ({**h, "X-Hub-Signature-256": "sha1=abc"}, b), 401, "does not match"),
        (lambda h, b: (h, b + b" "), 401, "does not match"),  # body tampered after signing
        (lambda h, b: ({**h, "X-Hub-Signature-256": sign(SECRET, b"{no")}, b"{no"), 400, "not valid JSON"),
        (lambda h, b: ({**h, "X-Hub-Signature-256": sign(SECRET, b"[1]")}, b"[1]"), 400, "JSON object"),
        (lambda h, b: ({**h, "Content-Type": "application/x-www-form-urlencoded"}, b), 415, "content type"),
    ],
)
def test_bad_requests_get_4xx_and_trigger_nothing(mutate, status, fragment):
    h, b = mutate(headers(PUSH.encode()), PUSH.encode())
    result = handle_git_hook(SECRET, h, b)
    assert result.status == status and result.event is None
    assert fragment in result.body["error"]


def test_ping_and_other_events_do_not_trigger():
    body = b"{}"
    assert handle_git_hook(SECRET, headers(body, **{"X-GitHub-Event": "ping"}), body).event is None
    other = handle_git_hook(SECRET, headers(body, **{"X-GitHub-Event": "issues"}), body)
    assert other.status == 202 and other.event is None
    assert handle_git_hook(b"", headers(body), body).status == 503
    assert not verify_signature(SECRET, body, None)


def post(port: int, path: str, body: bytes, hdrs: dict[str, str]) -> tuple[int, dict]:
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=body, headers=hdrs, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def test_http_server_routes():
    got = []
    fired = threading.Event()

    def on_push(event):
        got.append(event)
        fired.set()

    server = ControllerHTTPServer(
        ("127.0.0.1", 0),
        secret=SECRET,
        on_push=on_push,
        get_routes={"/healthz": lambda: (200, "text/plain", b"ok")},
    ).start()
    try:
        body = PUSH.encode()
        assert post(server.port, "/hooks/git", body, headers(body))[0] == 202
        assert fired.wait(5) and got[0].after == "a" * 40
        status, payload = post(server.port, "/hooks/git", body, {**headers(body), "X-Hub-Signature-256": "x"})
        assert status == 401 and "error" in payload and len(got) == 1
        assert post(server.port, "/elsewhere", body, headers(body))[0] == 404
        with urllib.request.urlopen(f"http://127.0.0.1:{server.port}/healthz", timeout=5) as resp:
            assert resp.read() == b"ok"
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(f"http://127.0.0.1:{server.port}/nope", timeout=5)
        assert err.value.code == 404
    finally:
        server.stop()
