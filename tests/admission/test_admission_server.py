"""The webhook over real TLS on loopback: answers, bad input as 4xx JSON, bounded bodies, health."""

from __future__ import annotations

import http.client
import ssl
from collections.abc import Iterator

import orjson
import pytest

from kgwe.admission.server import LIMITS, MAX_BODY_BYTES, CertificateReloader, make_handler
from kgwe.httpd import ServerThread
from kgwe.localcluster.pki import write_pki


@pytest.fixture(scope="module")
def served(tmp_path_factory) -> Iterator[tuple[int, ssl.SSLContext]]:
    pki = write_pki(tmp_path_factory.mktemp("pki"))  # serving cert valid for 127.0.0.1
    tls = CertificateReloader(pki.serving_cert, pki.serving_key)
    server = ServerThread(make_handler(), ("127.0.0.1", 0), limits=LIMITS, tls=tls.current).start()
    ctx = ssl.create_default_context(cafile=str(pki.ca_cert))
    yield server.port, ctx
    server.stop()


def call(served, method: str, path: str, body: bytes | None = None, headers: dict | None = None):
    port, ctx = served
    conn = http.client.HTTPSConnection("127.0.0.1", port, context=ctx, timeout=10)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        resp = conn.getresponse()
        return resp.status, resp.getheader("Content-Type"), resp.read()
    finally:
        conn.close()


def test_a_gpu_pod_review_gets_a_patch(served):
    review = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "abc",
            "kind": {"kind": "Pod"},
            "operation": "CREATE",
            "object": {"spec": {"containers": [{"resources": {"limits": {"nvidia.com/gpu": "1"}}}]}},
        },
    }
    status, ctype, body = call(served, "POST", "/mutate-pods", orjson.dumps(review))
    assert status == 200 and ctype == "application/json"
    assert orjson.loads(body)["response"]["patchType"] == "JSONPatch"


@pytest.mark.parametrize(
    ("method", "path", "body", "headers", "status"),
    [
        ("POST", "/mutate-pods", b"{not json", None, 400),
        ("POST", "/mutate-pods", b'{"kind": "AdmissionReview"}', None, 400),
        ("POST", "/mutate-pods", b"[" * 100_000 + b"]" * 100_000, None, 400),
        ("POST", "/elsewhere", b"{}", None, 404),
        ("GET", "/nothing", None, None, 404),
        ("POST", "/mutate-pods", b"", {"Content-Length": str(MAX_BODY_BYTES + 1)}, 413),
    ],
)
def test_bad_requests_get_a_4xx_json_message(served, method, path, body, headers, status):
    got, ctype, text = call(served, method, path, body, headers)
    assert got == status and ctype == "application/json"
    assert isinstance(orjson.loads(text)["error"], str)


def test_health_and_metrics(served):
    assert call(served, "GET", "/healthz")[0] == 200
    status, _, text = call(served, "GET", "/metrics")
    assert status == 200 and b'kgwe_webhook_reviews_total{outcome="routed"}' in text


def test_plain_http_is_refused_and_the_server_keeps_serving(served):
    port, _ = served
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    with pytest.raises((http.client.HTTPException, ConnectionError, OSError)):
        conn.request("GET", "/healthz")
        conn.getresponse().read()
    conn.close()
    assert call(served, "GET", "/healthz")[0] == 200
