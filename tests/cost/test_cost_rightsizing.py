"""Rightsizing from DCGM series, and the Prometheus client against a tiny real HTTP server."""

from __future__ import annotations

import json
import threading
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import ClassVar
from urllib.parse import parse_qs, urlparse

import pytest

from kgwe.cost.prometheus import PrometheusClient
from kgwe.cost.rightsizing import UtilizationSeries, confidence, recommend, size_of, undersized_samples
from kgwe.errors import KgweError

H100 = "NVIDIA-H100-80GB-HBM3"
DAY = 86400.0


def series(compute, memory, history=DAY * 8):
    return UtilizationSeries("ml", "p", compute, memory, history)


def test_small_inference_pod_moves_to_the_smallest_covering_mig_profile():
    rec = recommend(
        series([0.1, 0.2, 0.25] * 50, [18_000.0, 20_000.0, 21_000.0] * 50), H100, size_of(H100, "whole", 1)
    )
    # p95 memory 21000 MiB × 1.15 = 24150 MiB > 2g.20gb: 3g.40gb is the smallest that covers it
    assert rec.recommended.mig_profile == "3g.40gb" and rec.downsizable and not rec.idle
    assert rec.confidence == pytest.approx(8 / 9)


def test_busy_pod_keeps_whole_gpus_and_idle_pods_are_flagged():
    busy = recommend(series([1.7, 1.9, 1.95] * 40, [70_000.0] * 120), H100, size_of(H100, "whole", 2))
    assert (busy.recommended.kind, busy.recommended.count) == ("whole", 3)  # 1.95 × 1.15 > 2: undersized
    assert busy.undersized
    idle = recommend(series([0.0] * 100, [1_000.0] * 100, history=DAY / 2), H100, size_of(H100, "whole", 1))
    assert idle.idle and idle.recommended.mig_profile == "1g.10gb" and idle.low_confidence


def test_no_usable_samples_means_no_recommendation():
    assert recommend(series([float("nan")], [-1.0]), H100, size_of(H100, "whole", 1)) is None
    assert confidence(0) == 0 and confidence(DAY) == 0.5


def test_undersized_samples_counts_what_the_recommendation_would_not_cover():
    rec = recommend(series([0.1] * 99 + [0.9], [10_000.0] * 100), H100, size_of(H100, "whole", 1))
    assert undersized_samples(rec, [0.1, 0.9], [10_000.0, 90_000.0]) == 2


class _Handler(BaseHTTPRequestHandler):
    answers: ClassVar[dict[str, tuple[int, bytes]]] = {}

    def do_GET(self):
        query = parse_qs(urlparse(self.path).query)["query"][0]
        metric = "engine" if "ENGINE_ACTIVE" in query else "fb"
        code, body = self.answers[metric]
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def prometheus():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", _Handler.answers
    server.shutdown()
    server.server_close()


def matrix(values_by_pod):
    return json.dumps(
        {
            "status": "success",
            "data": {
                "resultType": "matrix",
                "result": [
                    {"metric": {"namespace": "ml", "pod": pod}, "values": values}
                    for pod, values in values_by_pod.items()
                ],
            },
        }
    ).encode()


def test_prometheus_client_reads_pod_series_and_skips_garbage_points(prometheus):
    url, answers = prometheus
    answers["engine"] = (200, matrix({"a": [[0, "0.5"], [60, "NaN"], [120, "oops"], [180, "0.25"]]}))
    answers["fb"] = (200, matrix({"a": [[0, "1000"], [180, "-5"], [240, "3000"]], "b": [[0, "1"]]}))
    t0 = datetime(2026, 11, 1, tzinfo=UTC)
    got, skipped = PrometheusClient(url).pod_utilization(t0, t0 + timedelta(hours=1))
    assert [(s.pod, list(s.compute_gpus), list(s.memory_mib), s.history_seconds) for s in got] == [
        ("a", [0.5, 0.25], [1000.0, 3000.0], 240.0)
    ]
    assert skipped == 3


@pytest.mark.parametrize(
    "answer, message",
    [
        ((200, b"<html>proxy login</html>"), "not JSON"),
        ((200, b'{"status": "error", "error": "bad query"}'), "bad query"),
        ((200, b'{"status": "success", "data": {"resultType": "vector", "result": []}}'), "matrix"),
        ((503, b'{"status": "error", "error": "overloaded"}'), "HTTP 503: overloaded"),
    ],
)
def test_prometheus_garbage_answers_are_clear_errors(prometheus, answer, message):
    url, answers = prometheus
    answers["engine"] = answers["fb"] = answer
    t0 = datetime(2026, 11, 1, tzinfo=UTC)
    with pytest.raises(KgweError, match=message):
        PrometheusClient(url).pod_utilization(t0, t0 + timedelta(hours=1))


def test_unreachable_prometheus_is_a_clear_error():
    t0 = datetime(2026, 11, 1, tzinfo=UTC)
    with pytest.raises(KgweError, match="unreachable"):
        PrometheusClient("http://127.0.0.1:1", timeout_s=1).pod_utilization(t0, t0 + timedelta(hours=1))
    with pytest.raises(KgweError, match="http"):
        PrometheusClient("prometheus:9090")
