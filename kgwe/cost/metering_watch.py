"""The metering watch loop: the thin I/O edge around kgwe.cost.metering.

On start (and after any watch gap: 410 Gone, a dropped connection, the database failing) it lists nodes and
pods and reconciles the store with what is live; between lists it follows the pod watch (the loop is
kgwe.cluster.watch). All decisions are in Meter; this module only moves data between the API server, the
Meter and the store.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from kubernetes import client

from kgwe.cluster.watch import list_and_watch
from kgwe.cost.metering import Meter, apply, capacity, node_info
from kgwe.cost.pricing import DEFAULT_SPOT_LABELS
from kgwe.cost.store import CostStore

log = logging.getLogger(__name__)


def _utcnow() -> datetime:
    return datetime.now(UTC)


def default_is_spot(labels: Mapping[str, str]) -> bool:
    return any(k in labels and (v is None or labels[k] == v) for k, v in DEFAULT_SPOT_LABELS)


class MeteringWatch:
    """Run `run(stop)` in a thread; `stop.set()` ends it within `watch_timeout_s`."""

    def __init__(
        self,
        api_client: client.ApiClient,
        store: CostStore,
        *,
        is_spot: Callable[[Mapping[str, str]], bool] = default_is_spot,
        clock: Callable[[], datetime] = _utcnow,
        watch_timeout_s: int = 5,
    ) -> None:
        self.api = api_client
        self.core = client.CoreV1Api(api_client)
        self.store = store
        self.is_spot = is_spot
        self.clock = clock
        self.watch_timeout_s = watch_timeout_s
        self.meter = Meter()
        self.totals = {"started": 0, "ended": 0, "skipped": 0, "duplicates": 0}
        self.synced = threading.Event()

    def _plain(self, obj: Any) -> dict[str, Any]:
        return self.api.sanitize_for_serialization(obj)

    def _add(self, counts: Mapping[str, int]) -> None:
        for k, v in counts.items():
            self.totals[k] += v

    def sync_nodes(self) -> None:
        now = self.clock()
        seen: set[str] = set()
        for node in self.core.list_node().items:
            info = node_info(self._plain(node), self.is_spot)
            if info is None:
                continue
            seen.add(info.node)
            self.meter.nodes[info.node] = info
            self.store.set_node(capacity(info, now))
        for gone in set(self.meter.nodes) - seen:
            del self.meter.nodes[gone]
            self.store.end_node(gone, now)

    def resync(self, pods: Sequence[Any]) -> None:
        """Reconcile the store with the live nodes and `pods` (a full listing)."""
        self.sync_nodes()
        live = [self._plain(p) for p in pods]
        self._add(apply(self.store, self.meter.reconcile(self.store.open_usage(), live, self.clock())))
        self.synced.set()

    def observe(self, kind: str, obj: Any) -> None:
        pod = self._plain(obj)
        if pod.get("spec", {}).get("nodeName") not in self.meter.nodes:
            self.sync_nodes()  # a node we have not seen yet
        self._add(apply(self.store, self.meter.observe(kind, pod, self.clock())))

    def run(self, stop: threading.Event) -> None:
        """Follow the pods (kgwe.cluster.watch: a fresh list after any gap); nodes are re-read whenever a
        watch ends, as they come and go between pod events."""
        self.store.migrate()
        list_and_watch(
            self.core.list_pod_for_all_namespaces,
            on_list=self.resync,
            on_event=self.observe,
            on_watch_end=self.sync_nodes,
            stop=stop,
            raw=False,
            watch_timeout_seconds=self.watch_timeout_s,
        )
