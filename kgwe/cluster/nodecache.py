"""The GPU nodes as the one list+watch loop (kgwe.runtime.watch) keeps them, so a reconcile reads them
without listing the cluster each time: at 1,250 nodes the list was most of a no-op reconcile.

A watch lags the API server by the time an event takes to arrive, so every node patch made in this process
tells the cache the resourceVersion it returned (`expect`), and a reader gets the nodes only once the cache
has seen all of them (resourceVersions of one resource compare as integers: Kubernetes' comparable resource
versions). Anyone else's change is seen as a fresh list would have seen it a moment earlier: the rollout
decision already allows for a node changing after it was read.

Of each node it keeps what planning reads (kgwe.cluster.inventory.facts_from_objects: name, labels,
annotations, resourceVersion, spec.unschedulable), not its status or managedFields: a fleet's worth of those
is most of the objects a long-running controller would otherwise hold and garbage-collect over and over.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from typing import Any

from kubernetes import client

from kgwe.runtime.cluster import Cluster
from kgwe.runtime.kinds import NODE
from kgwe.runtime.kube import as_cluster
from kgwe.vocab import GPU_NODE_SELECTOR

_KEPT_METADATA = ("name", "labels", "annotations", "resourceVersion")


def slim(node: Mapping[str, Any]) -> dict[str, Any]:
    """The part of a Node object the cache keeps."""
    meta = node.get("metadata") or {}
    return {
        "metadata": {k: meta[k] for k in _KEPT_METADATA if k in meta},
        "spec": {"unschedulable": bool((node.get("spec") or {}).get("unschedulable"))},
    }


def resource_version_at_least(have: str | None, want: str) -> bool:
    """Whether resourceVersion `have` is `want` or later (equal when either is not a plain integer)."""
    if have is None:
        return False
    if have.isdigit() and want.isdigit():
        return int(have) >= int(want)
    return have == want


class NodeCache:
    def __init__(
        self, cluster: Cluster | client.ApiClient, *, label_selector: str = GPU_NODE_SELECTOR
    ) -> None:
        self.cluster = as_cluster(cluster)
        self.label_selector = label_selector
        self._nodes: dict[str, dict[str, Any]] = {}
        self._expected: dict[str, str] = {}  # node -> resourceVersion a write in this process returned
        self._synced = False
        self._changed = threading.Condition()
        self._thread: threading.Thread | None = None

    def start(self, stop: threading.Event) -> NodeCache:
        """Keep the cache current in a thread until `stop` is set."""
        self._thread = threading.Thread(target=self._run, args=(stop,), name="kgwe-node-cache", daemon=True)
        self._thread.start()
        return self

    def _run(self, stop: threading.Event) -> None:
        self.cluster.watch(
            NODE, on_list=self._listed, on_event=self._event, stop=stop, labels=self.label_selector
        )
        with self._changed:
            self._synced = False
            self._changed.notify_all()

    def _listed(self, items: Sequence[dict[str, Any]]) -> None:
        with self._changed:
            self._nodes = {n["metadata"]["name"]: slim(n) for n in items}
            self._synced = True
            self._changed.notify_all()

    def _event(self, kind: str, node: dict[str, Any]) -> None:
        name = (node.get("metadata") or {}).get("name")
        if not name:
            return
        with self._changed:
            if kind == "DELETED":
                self._nodes.pop(name, None)
            else:
                self._nodes[name] = slim(node)
            self._changed.notify_all()

    def expect(self, name: str, version: str) -> None:
        """A patch of node `name` returned `version`: readers wait until the cache shows it."""
        with self._changed:
            if not resource_version_at_least(self._expected.get(name), version):
                self._expected[name] = version

    def nodes(self, timeout_seconds: float) -> list[dict[str, Any]] | None:
        """Every cached GPU node once the cache is synced and shows every expected write (a node gone since
        counts as shown); None when the cache is not running or that takes over `timeout_seconds`."""

        def caught_up() -> bool:
            return self._synced and all(
                name not in self._nodes
                or resource_version_at_least(self._nodes[name]["metadata"].get("resourceVersion"), version)
                for name, version in self._expected.items()
            )

        if self._thread is None or not self._thread.is_alive():
            return None
        with self._changed:
            if not self._changed.wait_for(caught_up, timeout=timeout_seconds):
                return None
            self._expected.clear()
            return list(self._nodes.values())
