"""The I/O floor under the extender in bench/extender_e2e.py: an extender that does no work.

    python bench/extender_floor.py --kubeconfig FILE --listen 127.0.0.1:0 --probe-listen 127.0.0.1:PORT

It runs the product's own plumbing exactly as `kgwe extender` does, and nothing else: the server (kgwe.httpd)
answering each filter with the first node of the request's list (the list is not even decoded), and the
list+watch loop (kgwe.runtime.watch) of Nodes and of the KGWE scheduler's bound pods, every event read and
decoded, none applied. Its CPU per pod in the same latency phase is what a pod costs any extender built on
these parts on this machine at that moment: the part of extender_cpu_ms_per_pod no change to KGWE's own
logic can remove. /readyz answers 200 once both lists are in.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
import threading

from kubernetes import client

from kgwe.cluster.client import api_client
from kgwe.extender.index import pod_field_selector
from kgwe.extender.nodenames import KEY
from kgwe.httpd import JSON, serve
from kgwe.runtime.watch import list_and_watch
from kgwe.vocab import SCHEDULER_NAME

_FIRST = b'{"Nodes":null,"NodeNames":[%s],"FailedNodes":{},"FailedAndUnresolvableNodes":{},"Error":""}'


def answer(method: str, path: str, body: bytes) -> tuple[int, bytes, bytes]:
    """The first listed node, cut out of the bytes."""
    if path == "/readyz":
        return (200, b'{"status":"ready"}', JSON) if all(LISTED.values()) else (503, b"{}", JSON)
    start = body.find(b'"', body.rfind(KEY + b"[") + len(KEY) + 1)
    end = body.find(b'"', start + 1)
    return 200, _FIRST % body[start : end + 1], JSON


LISTED = {"nodes": False, "pods": False}


def watch(kind: str, lister, stop: threading.Event) -> None:
    def listed(_items) -> None:
        LISTED[kind] = True

    list_and_watch(lister, on_list=listed, on_event=lambda _typ, _obj: None, stop=stop)


async def main_async(args: argparse.Namespace) -> None:
    host, port = args.listen.rsplit(":", 1)
    probe_host, probe_port = args.probe_listen.rsplit(":", 1)
    stop = asyncio.Event()
    await asyncio.gather(
        serve(answer, host, int(port), stop=stop),
        serve(answer, probe_host, int(probe_port), stop=stop, label="probes on"),
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kubeconfig", required=True)
    ap.add_argument("--listen", default="127.0.0.1:0")
    ap.add_argument("--probe-listen", required=True)
    args = ap.parse_args()
    logging.basicConfig(level="INFO")  # the e2e benchmark reads the listening port from the log
    core = client.CoreV1Api(api_client(args.kubeconfig))
    selector = pod_field_selector(SCHEDULER_NAME, bound=True)
    stop = threading.Event()
    for kind, lister in (
        ("nodes", core.list_node),
        ("pods", lambda **kw: core.list_pod_for_all_namespaces(field_selector=selector, **kw)),
    ):
        threading.Thread(target=watch, args=(kind, lister, stop), daemon=True).start()
    try:
        asyncio.run(main_async(args))
    finally:
        stop.set()
    return 0


if __name__ == "__main__":
    sys.exit(main())
