"""A live view of the GPU nodes and GPUWorkloads, redrawn when the cluster changes (Kubernetes watches on
nodes, GPU pods and GPUWorkloads; no polling).

On a terminal each frame replaces the last; through a pipe (`| cat`, a file) frames follow one another,
separated by a blank line. Ctrl-C or a closed pipe ends it quietly; `--count N` after N frames.

examples:
  kgwe watch -A
  kgwe watch --once -o wide | cat
"""

from __future__ import annotations

import argparse
import sys
import threading
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

from kgwe.fleet.cluster import add_cluster_arguments
from kgwe.safetext import write_control

SETTLE_SECONDS = 0.3  # changes arriving together make one frame
WATCH_TIMEOUT_SECONDS = 60


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--count", type=int, metavar="N", help="stop after N frames")
    parser.add_argument("--once", action="store_true", help="one frame, then exit (same as --count 1)")
    parser.add_argument("-o", "--output", choices=("table", "wide"), default="table", help="table or wide")
    add_cluster_arguments(parser, all_namespaces=True)


class _Store:
    """The objects of one watched kind by namespace/name, replaced on every (re)list."""

    def __init__(
        self, changed: threading.Event, keep: Callable[[dict[str, Any]], bool] = lambda obj: True
    ) -> None:
        self.items: dict[str, dict[str, Any]] = {}
        self.listed = threading.Event()
        self.changed = changed
        self.keep = keep
        self.lock = threading.Lock()

    @staticmethod
    def _key(obj: dict[str, Any]) -> str:
        meta = obj.get("metadata") or {}
        return f"{meta.get('namespace') or ''}/{meta.get('name')}"

    def on_list(self, items: Sequence[dict[str, Any]]) -> None:
        with self.lock:
            self.items = {self._key(o): o for o in items if self.keep(o)}
        self.listed.set()
        self.changed.set()

    def on_event(self, kind: str, obj: dict[str, Any]) -> None:
        with self.lock:
            if kind == "DELETED" or not self.keep(obj):
                self.items.pop(self._key(obj), None)
            else:
                self.items[self._key(obj)] = obj
        self.changed.set()

    def snapshot(self) -> list[dict[str, Any]]:
        with self.lock:
            return list(self.items.values())


def run(args: argparse.Namespace) -> int:
    from kubernetes import client

    from kgwe.cluster.nodes import holds_gpu, pod_gpu_requests
    from kgwe.fleet.cluster import Fleet, requests_by_node
    from kgwe.fleet.watch_view import CLEAR, frame
    from kgwe.runtime.watch import list_and_watch
    from kgwe.vocab import API_GROUP, CRD_VERSION, GPU_NODE_SELECTOR, GPU_WORKLOAD_PLURAL

    fleet = Fleet(args)
    namespace = None if args.all_namespaces else fleet.namespace
    fleet.gpu_nodes()  # one line and exit 1 now if the cluster or the CRD is not there; not a retry loop
    fleet.workloads(namespace)
    limit = 1 if args.once else args.count
    core, custom = client.CoreV1Api(fleet.api), client.CustomObjectsApi(fleet.api)
    stop, changed = threading.Event(), threading.Event()
    nodes, pods, workloads = _Store(changed), _Store(changed, holds_gpu), _Store(changed)
    if namespace is None:
        wl_list: Callable[..., object] = custom.list_cluster_custom_object
        wl_args = {"group": API_GROUP, "version": CRD_VERSION, "plural": GPU_WORKLOAD_PLURAL}
    else:
        wl_list = custom.list_namespaced_custom_object
        wl_args = {
            "group": API_GROUP,
            "version": CRD_VERSION,
            "plural": GPU_WORKLOAD_PLURAL,
            "namespace": namespace,
        }
    watches = (
        (core.list_node, nodes, {"label_selector": GPU_NODE_SELECTOR}),
        (
            core.list_pod_for_all_namespaces,
            pods,
            {"field_selector": "status.phase!=Succeeded,status.phase!=Failed"},
        ),
        (wl_list, workloads, wl_args),
    )
    for list_fn, store, kwargs in watches:
        threading.Thread(
            target=list_and_watch,
            args=(list_fn,),
            kwargs={
                "on_list": store.on_list,
                "on_event": store.on_event,
                "stop": stop,
                "watch_timeout_seconds": WATCH_TIMEOUT_SECONDS,
                **kwargs,
            },
            daemon=True,  # a watch blocked in a read must not hold the exit
            name=f"kgwe-watch-{getattr(list_fn, '__name__', 'objects')}",
        ).start()
    tty = sys.stdout.isatty()
    scope = "all namespaces" if namespace is None else f"namespace {namespace}"
    frames, last = 0, None
    try:
        while limit is None or frames < limit:
            if not changed.wait(0.5):
                continue
            stop.wait(SETTLE_SECONDS)
            if not all(s.listed.is_set() for s in (nodes, pods, workloads)):
                continue
            changed.clear()
            by_node: dict[str, list[dict[str, Any]]] = {}
            for pod in pods.snapshot():
                by_node.setdefault(pod["spec"]["nodeName"], []).append(pod)
            requests, names = requests_by_node(by_node, pod_gpu_requests)
            now = datetime.now(UTC)
            text = frame(
                nodes.snapshot(),
                requests,
                names,
                workloads.snapshot(),
                now,
                scope=scope,
                wide=args.output == "wide",
            )
            body = text.split("\n", 1)[1]  # the header carries the time: redraw only on a real change
            if body == last:
                continue
            last = body
            if tty:
                write_control(sys.stdout, CLEAR)
            sys.stdout.write(text if tty or not frames else "\n" + text)
            sys.stdout.flush()
            frames += 1
    except KeyboardInterrupt:
        return 0
    finally:
        stop.set()
    return 0
