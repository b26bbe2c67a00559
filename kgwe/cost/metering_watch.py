"""The metering watch loop: the thin I/O edge around kgwe.cost.metering.

On start (and after any watch gap: 410 Gone, a dropped connection) it lists nodes and pods and
reconciles the store with what is live; between lists it follows the pod watch. All decisions are in
Meter; this module only moves data between the API server, the Meter and the store.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException

from kgwe.cost.metering import Meter, apply, capacity, namespace_teams, node_info
from kgwe.cost.pricing import DEFAULT_SPOT_LABELS
from kgwe.cost.store import CostStore
from kgwe.errors import KgweError

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
        budget_teams: Callable[[], Mapping[str, str]] = dict,
    ) -> None:
        self.api = api_client
        self.core = client.CoreV1Api(api_client)
        self.store = store
        self.is_spot = is_spot
        self.clock = clock
        self.watch_timeout_s = watch_timeout_s
        self.budget_teams = budget_teams  # namespace -> team of the GPUBudget claiming it (the policy)
        self.meter = Meter()
        self._namespaces: set[str] = set()  # namespaces seen at the last team sync
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

    def sync_teams(self) -> None:
        """Who pays for each namespace: GPUBudget claims, then the namespaces' team labels."""
        items = [self._plain(ns) for ns in self.core.list_namespace().items]
        self._namespaces = {ns["metadata"]["name"] for ns in items}
        self.meter.teams = namespace_teams(items, self.budget_teams())

    def resync(self) -> str:
        """List and reconcile; returns the resourceVersion to watch from."""
        self.sync_nodes()
        self.sync_teams()
        pods = self.core.list_pod_for_all_namespaces()
        live = [self._plain(p) for p in pods.items]
        self._add(apply(self.store, self.meter.reconcile(self.store.open_usage(), live, self.clock())))
        self.synced.set()
        return pods.metadata.resource_version

    def run(self, stop: threading.Event) -> None:
        self.store.migrate()
        version: str | None = None
        while not stop.is_set():
            try:
                if version is None:
                    version = self.resync()
                stream = watch.Watch().stream(
                    self.core.list_pod_for_all_namespaces,
                    resource_version=version,
                    timeout_seconds=self.watch_timeout_s,
                    allow_watch_bookmarks=True,
                )
                for event in stream:
                    obj = event["object"]
                    if event["type"] == "BOOKMARK":
                        version = (
                            obj["metadata"]["resourceVersion"]
                            if isinstance(obj, dict)
                            else obj.metadata.resource_version
                        )
                        continue
                    if event["type"] == "ERROR":
                        version = None
                        break
                    pod = self._plain(obj)
                    version = pod["metadata"]["resourceVersion"]
                    if pod.get("spec", {}).get("nodeName") not in self.meter.nodes:
                        self.sync_nodes()  # a node we have not seen yet
                    if pod["metadata"].get("namespace") not in self._namespaces:
                        self.sync_teams()  # a namespace created since the last sync
                    self._add(apply(self.store, self.meter.observe(event["type"], pod, self.clock())))
                    if stop.is_set():
                        break
                else:
                    self.sync_nodes()  # periodic: nodes come and go between pod events
                    self.sync_teams()  # and budget claims or team labels change
            except ApiException as exc:
                log.warning("metering: watch ended (%s); relisting", exc.status)
                version = None
            except KgweError as exc:  # database down: keep the watch state, retry after a pause
                log.error("metering: %s", exc)
                version = None
                stop.wait(2)
            except Exception as exc:  # connection reset and friends: relist, never die silently
                log.warning("metering: %s: %s; relisting", type(exc).__name__, exc)
                version = None
                stop.wait(1)
