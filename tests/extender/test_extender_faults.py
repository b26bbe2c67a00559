"""Fault behaviour of the real `kgwe extender` process over HTTP: bad input is a 4xx JSON error, never a 500,
a crash or a hang; the server keeps serving afterwards."""

from __future__ import annotations

import http.client
import re
import select
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

INVENTORY = """\
apiVersion: kgwe.nvidia.io/v1
kind: GPUInventory
metadata: {name: faults}
spec:
  nodes:
    - {name: h1, gpus: 8, product: NVIDIA-H100-80GB-HBM3, topology: DGX-H100}
    - {name: l1, gpus: 8, product: NVIDIA-L40S, topology: L40S-8-PCIE, devices: [{index: 0, busy: true}]}
"""

GOOD = orjson.dumps(
    {
        "Pod": {
            "metadata": {"name": "p"},
            "spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "2"}}}]},
        },
        "NodeNames": ["h1", "l1"],
    }
)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, int, subprocess.Popen]]:
    inv = tmp_path_factory.mktemp("ext") / "inventory.yaml"
    inv.write_text(INVENTORY)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "kgwe.cli",
            "extender",
            "--inventory",
            str(inv),
            "--listen",
            "127.0.0.1:0",
            "--request-timeout",
            "1",
        ],
        stderr=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).resolve().parents[2],
    )
    port = None
    deadline = time.monotonic() + 60
    while port is None and time.monotonic() < deadline:
        line = proc.stderr.readline()
        if not line and proc.poll() is not None:
            break
        m = re.search(r"listening on 127\.0\.0\.1:(\d+)", line)
        if m:
            port = int(m.group(1))
    assert port, f"extender did not start (exit {proc.poll()})"
    yield "127.0.0.1", port, proc
    proc.terminate()
    proc.wait(timeout=10)


def request(server, method: str, path: str, body: bytes | None = None, headers: dict | None = None):
    conn = http.client.HTTPConnection(server[0], server[1], timeout=10)
    conn.request(method, path, body=body, headers={"Content-Type": "application/json", **(headers or {})})
    resp = conn.getresponse()
    data = resp.read()
    conn.close()
    return resp.status, resp.getheader("Content-Type"), data


def raw(server, payload: bytes) -> bytes:
    with socket.create_connection(server[:2], timeout=10) as s:
        s.sendall(payload)
        chunks = []
        while True:
            try:
                chunk = s.recv(65536)
            except ConnectionResetError:
                break
            if not chunk:
                break
            chunks.append(chunk)
        return b"".join(chunks)


def status_of(response: bytes) -> int:
    return int(response.split(b" ", 2)[1])


def test_good_request_and_keep_alive(server) -> None:
    conn = http.client.HTTPConnection(server[0], server[1], timeout=10)
    answers = []
    for _ in range(3):  # one connection, several requests (kube-scheduler keeps connections alive)
        conn.request("POST", "/filter", body=GOOD, headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        reply = orjson.loads(resp.read())
        assert resp.status == 200
        assert reply["FailedNodes"] == {} and reply["Error"] == ""
        answers.append(reply["NodeNames"])
    conn.close()
    # both nodes fit; the default profile decides in filter: the same single best node every time
    assert len(answers[0]) == 1 and answers[0][0] in ("h1", "l1")
    assert answers == [answers[0]] * 3


@pytest.mark.parametrize(
    "body,needle",
    [
        (b"{", "not valid JSON"),
        (b"\xff\xfe", "not valid JSON"),
        (b'{"NodeNames": ["h1"]}', "Pod is missing"),
        (b'{"Pod": {"metadata": {}, "spec": {}}}', "NodeNames"),
        (
            b'{"Pod": {"spec": {"containers": [{"resources": {"limits": {"nvidia.com/gpu": "x"}}}]}}, '
            b'"NodeNames": []}',
            "is not a quantity",
        ),
    ],
)
@pytest.mark.parametrize("verb", ["/filter", "/prioritize"])
def test_malformed_bodies_are_400_json(server, verb: str, body: bytes, needle: str) -> None:
    status, ctype, data = request(server, "POST", verb, body)
    assert status == 400 and ctype == "application/json"
    assert needle in orjson.loads(data)["error"]


def test_unknown_nodes_fail_with_reason_not_error(server) -> None:
    body = orjson.dumps({"Pod": orjson.loads(GOOD)["Pod"], "NodeNames": ["ghost-1", "h1"]})
    status, _, data = request(server, "POST", "/filter", body)
    reply = orjson.loads(data)
    assert status == 200 and reply["NodeNames"] == ["h1"] and reply["FailedNodes"] == {}
    only_ghosts = orjson.dumps({"Pod": orjson.loads(GOOD)["Pod"], "NodeNames": ["ghost-1", "ghost-2"]})
    status, _, data = request(server, "POST", "/filter", only_ghosts)
    reply = orjson.loads(data)
    assert status == 200 and reply["NodeNames"] == []
    assert "not in the extender's index" in reply["FailedNodes"]["ghost-1"]
    status, _, data = request(server, "POST", "/prioritize", body)
    assert status == 200 and orjson.loads(data)[0] == {"Host": "ghost-1", "Score": 0}


def test_body_over_10_mib_is_413_without_reading_it(server) -> None:
    head = (
        b"POST /filter HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\n\r\n" % (10 * 1024 * 1024 + 1)
    )
    resp = raw(server, head)
    assert status_of(resp) == 413
    assert b'"error"' in resp


def test_slow_client_gets_408_and_is_disconnected(server) -> None:
    started = time.monotonic()
    resp = raw(server, b'POST /filter HTTP/1.1\r\nContent-Length: 100\r\n\r\n{"Pod":')
    assert status_of(resp) == 408 and b"within" in resp
    assert time.monotonic() - started < 9  # the server ended it (timeout 1 s), not the client's 10 s
    resp = raw(server, b"POST /fil")  # headers never finish
    assert status_of(resp) == 408


def test_keep_alive_deadlines_follow_each_request(server) -> None:
    """One connection, one timer: after an answer the connection is idle (idle timeout, far longer than
    the 1 s request timeout), so it outlives the request timeout; a request then started and not finished
    still gets its 408 within the request timeout."""
    good = b"POST /filter HTTP/1.1\r\nContent-Length: %d\r\n\r\n%s" % (len(GOOD), GOOD)
    with socket.create_connection(server[:2], timeout=10) as s:
        for _ in range(2):
            s.sendall(good)
            got = b""
            while b"\r\n\r\n" not in got or len(got.partition(b"\r\n\r\n")[2]) < int(
                re.search(rb"Content-Length: (\d+)", got).group(1)
            ):
                chunk = s.recv(65536)
                assert chunk, "connection closed while idle"
                got += chunk
            assert status_of(got) == 200
            # idle past the request timeout: the server neither answers nor closes meanwhile
            assert not select.select([s], [], [], 1.5)[0], "an idle keep-alive connection was closed"
        started = time.monotonic()
        s.sendall(b"POST /filter HTTP/1.1\r\nContent-Length: 100\r\n\r\n{")
        tail = b""
        while b"408" not in tail:
            chunk = s.recv(65536)
            assert chunk, "connection closed without the 408"
            tail += chunk
        assert time.monotonic() - started < 9


@pytest.mark.parametrize(
    "payload,code",
    [
        (b"POST /filter HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n", 411),
        (b"GARBAGE\r\n\r\n", 400),
        (b"POST /filter HTTP/1.1\r\nContent-Length: nope\r\n\r\n", 400),
        (b"POST /filter HTTP/1.1\r\nno colon here\r\n\r\n", 400),
        (b"POST /filter HTTP/1.1\r\nX: " + b"a" * 70000 + b"\r\n\r\n", 431),
    ],
)
def test_protocol_errors_are_4xx(server, payload: bytes, code: int) -> None:
    assert status_of(raw(server, payload)) == code


def test_routes_methods_health_ready_metrics(server) -> None:
    assert request(server, "GET", "/filter")[0] == 405
    assert request(server, "POST", "/bind", b"{}")[0] == 404
    assert request(server, "GET", "/healthz")[0] == 200
    assert request(server, "GET", "/readyz")[0] == 200
    assert request(server, "POST", "/filter", b"not json")[0] == 400  # counted by code and verb
    status, ctype, data = request(server, "GET", "/metrics")
    assert status == 200 and ctype.startswith("text/plain")
    assert b'kgwe_extender_requests_total{code="400",verb="filter"}' in data
    assert b"kgwe_extender_nodes 2.0" in data


def test_server_survives_everything(server) -> None:
    assert server[2].poll() is None
    status, _, data = request(server, "POST", "/prioritize", GOOD)
    assert status == 200 and len(orjson.loads(data)) == 2
