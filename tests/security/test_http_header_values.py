"""Whatever a client puts in a header, KGWE's one HTTP server (every port runs it) answers: a 4xx with a
JSON message for anything it cannot parse, never a dropped connection or a traceback in the log. A
Content-Length of Unicode digits (`²`, Arabic-Indic) or of thousands of digits used to raise inside the
parser; a property test now feeds it random header values."""

from __future__ import annotations

import json
import logging
import socket
import ssl
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kgwe.gitops.webhook import ControllerHTTPServer, sign
from kgwe.httpd import JSON, Limits, ServerThread
from kgwe.localcluster.gitserver import GitHttpsServer


def echo(method: str, path: str, body: bytes) -> tuple[int, bytes, bytes]:
    return 200, json.dumps({"length": len(body)}).encode(), JSON


@pytest.fixture(scope="module")
def port() -> Iterator[int]:
    server = ServerThread(echo, ("127.0.0.1", 0), limits=Limits(header_timeout_seconds=2.0)).start()
    yield server.port
    server.stop()


def exchange(port: int, request: bytes, wrap: ssl.SSLContext | None = None) -> tuple[int, bytes, bytes]:
    """(status, headers, body) of the answer to one raw request; status 0 when the server closed without
    answering."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
        sock = wrap.wrap_socket(raw, server_hostname="127.0.0.1") if wrap else raw
        sock.sendall(request)
        data = b""
        while b"\r\n\r\n" not in data:
            try:
                chunk = sock.recv(65536)
            except (ConnectionResetError, ssl.SSLError):
                chunk = b""
            if not chunk:
                return 0, data, b""
            data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        length = next(
            (int(v) for k, _, v in (ln.partition(": ") for ln in lines[1:]) if k.lower() == "content-length"),
            0,
        )
        while len(body) < length:
            chunk = sock.recv(65536)
            if not chunk:
                break
            body += chunk
        return int(lines[0].split(" ")[1]), head, body


def request_with(name: bytes, value: bytes, body: bytes = b"{}") -> bytes:
    return (
        b"POST /filter HTTP/1.1\r\nHost: kgwe\r\nConnection: close\r\n"
        + name
        + b": "
        + value
        + b"\r\n\r\n"
        + body
    )


def assert_json_client_error(status: int, head: bytes, body: bytes) -> None:
    assert 400 <= status < 500, (status, head[:200])
    assert b"Content-Type: application/json" in head
    assert isinstance(json.loads(body)["error"], str)


@pytest.mark.parametrize(
    "value",
    [
        "²".encode(),  # a digit to str.isdigit, not to int()
        "١٢".encode(),  # Arabic-Indic digits: int() would read 12
        "²".encode("latin-1"),
        b"9" * 5000,  # past int()'s 4,300-digit limit: too large (413)
        b"1_0",  # int() reads 10
        b"+2",
        b" 2 2",
        b"0x2",
    ],
)
def test_a_content_length_not_of_ascii_digits_or_too_long_is_a_4xx(port: int, value: bytes, caplog) -> None:
    caplog.set_level(logging.ERROR)
    status, head, body = exchange(port, request_with(b"Content-Length", value))
    assert_json_client_error(status, head, body)
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


def test_many_leading_zeros_still_parse(port: int) -> None:
    status, _, body = exchange(port, request_with(b"Content-Length", b"0" * 5000 + b"2"))
    assert status == 200 and json.loads(body) == {"length": 2}


header_names = st.sampled_from(
    [b"Content-Length", b"content-length", b"Transfer-Encoding", b"Connection", b"Authorization", b"X-Any"]
)
header_values = st.binary(max_size=6000).map(lambda b: b.replace(b"\r", b"").replace(b"\n", b""))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=header_names, value=header_values | st.text(max_size=60).map(str.encode))
def test_any_header_value_gets_an_answer(port: int, name: bytes, value: bytes, caplog) -> None:
    """Any value of any header: a 2xx (it was fine) or a 4xx with a JSON message, and nothing logged as an
    error — never a closed connection without an answer."""
    caplog.clear()
    status, head, body = exchange(port, request_with(name, value))
    if status != 200:
        assert_json_client_error(status, head, body)
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


@pytest.fixture(scope="module")
def controller_port() -> Iterator[int]:
    server = ControllerHTTPServer(("127.0.0.1", 0), secret=b"hook-secret", on_push=lambda event: None).start()
    yield server.port
    server.stop()


webhook_headers = st.sampled_from(
    [
        b"X-Hub-Signature-256",
        b"X-Gitlab-Token",
        b"X-GitHub-Event",
        b"X-Gitlab-Event",
        b"X-GitHub-Delivery",
        b"Content-Type",
        b"Content-Length",
    ]
)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=webhook_headers, value=header_values | st.text(max_size=60).map(str.encode))
def test_the_controller_port_answers_any_webhook_header_value(
    controller_port: int, name: bytes, value: bytes, caplog
) -> None:
    """The controller's webhook reads its own headers too (signature, token, event, delivery): any value
    is a decision or a 4xx — never the 422 of a handler that raised."""
    caplog.clear()
    body = b'{"ref": "refs/heads/main"}'
    signed = b"X-Hub-Signature-256: " + sign(b"hook-secret", body).encode() + b"\r\n"
    request = request_with(name, value, body).replace(b"/filter", b"/hooks/git")
    if name != b"X-Hub-Signature-256":
        request = request.replace(b"Connection: close\r\n", b"Connection: close\r\n" + signed)
    status, head, reply = exchange(controller_port, request)
    assert status != 422, reply
    if status >= 300:
        assert_json_client_error(status, head, reply)
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


def test_the_demo_git_server_answers_a_bad_content_length_with_a_400(tmp_path: Path, caplog) -> None:
    """The loopback Git server of `kgwe demo` and the tests parses Content-Length as strictly."""
    caplog.set_level(logging.ERROR)
    with GitHttpsServer(tmp_path) as server:
        context = ssl.create_default_context(cafile=server.ca_file)
        for value in ("²".encode(), b"9" * 5000, b"-1"):
            request = request_with(b"Content-Length", value).replace(b"/filter", b"/policy.git/info/refs")
            status, head, body = exchange(server.port, request, context)
            assert_json_client_error(status, head, body)
