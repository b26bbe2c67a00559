"""A dcgm-exporter stand-in for the tests: serves MIG-instance `DCGM_FI_PROF_GR_ENGINE_ACTIVE` series in the
exporter's text format and labels (docs/facts/cost.md §9) for a real Prometheus to scrape."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from kgwe.cost.prometheus import ENGINE_ACTIVE

H100 = 'gpu="0",UUID="GPU-5f1e8a8e-0c1b-4b7e-9a55-2f3c0d6e7a10",pci_bus_id="00000000:18:00.0"'


def instance(gi: int, profile: str, pod: tuple[str, str] | None, container: str = "main") -> str:
    """The labels dcgm-exporter puts on one MIG instance's series (no pod labels when no pod holds it)."""
    labels = f'{H100},device="nvidia0",modelName="NVIDIA H100 80GB HBM3"'
    labels += f',GPU_I_PROFILE="{profile}",GPU_I_ID="{gi}"'
    labels += ',Hostname="gpu-node-1"'
    if pod is not None:
        labels += f',container="{container}",namespace="{pod[0]}",pod="{pod[1]}"'
    return labels


def exposition(series: list[tuple[str, float]]) -> bytes:
    lines = [
        f"# HELP {ENGINE_ACTIVE} Ratio of time the graphics engine is active.",
        f"# TYPE {ENGINE_ACTIVE} gauge",
        *(f"{ENGINE_ACTIVE}{{{labels}}} {value:.6f}" for labels, value in series),
    ]
    return ("\n".join(lines) + "\n").encode()


class _Exporter(BaseHTTPRequestHandler):
    """/metrics answers scrape n's exposition; any other path a web page, as a wrong URL would."""

    render: Callable[[int], bytes]
    scrapes = 0

    def do_GET(self) -> None:
        if self.path.split("?")[0] == "/metrics":
            type(self).scrapes += 1
            body, ctype = self.render(self.scrapes), "text/plain; version=0.0.4"
        else:
            body, ctype = b"<html><body>Grafana login</body></html>", "text/html"
        self.send_response(200)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@contextlib.contextmanager
def serve_exporter(render: Callable[[int], bytes]) -> Iterator[str]:
    """An exporter on 127.0.0.1 answering `render(n)` to its n-th scrape; yields its "host:port"."""
    handler = type("Exporter", (_Exporter,), {"render": staticmethod(render), "scrapes": 0})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


class _RangeApi(BaseHTTPRequestHandler):
    """Prometheus' /api/v1/query_range as a fixed answer per query (for series dated where no scrape can put
    them: a month of history in the past)."""

    answer: Callable[[str], bytes]

    def do_GET(self) -> None:
        body = self.answer(self.path)
        self.send_response(200)
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@contextlib.contextmanager
def serve_query_range(answer: Callable[[str], bytes]) -> Iterator[str]:
    """A range-query API on 127.0.0.1 answering `answer(request path)`; yields its base URL."""
    handler = type("RangeApi", (_RangeApi,), {"answer": staticmethod(answer)})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
