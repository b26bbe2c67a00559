"""The metering watch loop: the thin I/O edge around kgwe.cost.metering.

On start (and after any watch gap: 410 Gone, a dropped connection) it lists nodes and pods and
reconciles the store with what is live; between lists it follows the pod watch (the one list+watch loop,
kgwe.runtime.watch, resuming from the last resourceVersion). All decisions are in
Meter; this module only moves data between the API server, the Meter and the store.

The database may be down — when this replica becomes leader, or at any time later. Metering then keeps
following pods and puts every write it cannot make into a bounded on-disk spool (kgwe.cost.spool); it
retries the schema migration and the store with exponential backoff, replays the spool in order once the
store answers, and then relists to reconcile. A pod that starts and stops during the outage is recorded
after recovery, exactly once, with its real times.
"""

from __future__ import annotations

import logging
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kubernetes import client

from kgwe.cost.metering import FINISHED, Action, End, Meter, Start, capacity, namespace_teams, node_info
from kgwe.cost.pricing import DEFAULT_SPOT_LABELS
from kgwe.cost.spool import NodeDown, NodeUp, Spool, Write
from kgwe.cost.store import CostStore
from kgwe.errors import KgweError
from kgwe.runtime.watch import list_and_watch

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
        spool: Spool | None = None,
        max_backoff_s: float = 30.0,
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
        self._claims: dict[str, str] = {}  # the budget claims of the last team sync
        default_spool = Path(tempfile.gettempdir()) / "kgwe-metering-spool.jsonl"
        self.spool = spool if spool is not None else Spool(default_spool)
        self.max_backoff_s = max_backoff_s
        self._migrated = False
        self._backoff_s = 0.0
        self._retry_at = 0.0  # monotonic time of the next store attempt while it is down
        self._reconciled = False  # the last list was reconciled with the store's open intervals
        self.totals = {"started": 0, "ended": 0, "skipped": 0, "duplicates": 0, "dropped": 0}
        self.synced = threading.Event()

    def _plain(self, obj: object) -> dict[str, Any]:
        serialized: dict[str, Any] = self.api.sanitize_for_serialization(obj)
        return serialized

    def _add(self, counts: Mapping[str, int]) -> None:
        for k, v in counts.items():
            self.totals[k] += v

    # -- the store, or the spool while the store is down ---------------------------------------------
    def _apply_now(self, writes: list[Write]) -> dict[str, int]:
        counts = {"started": 0, "ended": 0, "skipped": 0, "duplicates": 0}
        if not self._migrated:
            self.store.migrate()
            self._migrated = True
        for w in writes:
            if isinstance(w, Start):
                counts["started" if self.store.start_usage(w.interval) else "duplicates"] += 1
            elif isinstance(w, End):
                counts["ended"] += self.store.end_usage(w.pod_uid, w.at, w.resource)
            elif isinstance(w, NodeUp):
                self.store.set_node(w.capacity)
            elif isinstance(w, NodeDown):
                self.store.end_node(w.node, w.at)
        return counts

    def store_available(self) -> bool:
        """Replay the spool if the store answers (at most once per backoff step); True when it is empty."""
        if not len(self.spool) and self._migrated:
            return True
        if time.monotonic() < self._retry_at:
            return False
        try:
            self._add(self._apply_now(self.spool.pending()))
        except KgweError as exc:
            self._backoff_s = min(max(self._backoff_s * 2, 0.5), self.max_backoff_s)
            self._retry_at = time.monotonic() + self._backoff_s
            log.warning("metering: %s; keeping writes on disk, retry in %.1f s", exc, self._backoff_s)
            return False
        if len(self.spool):
            log.info("metering: cost store back; replayed %d spooled writes", len(self.spool))
        self.spool.clear()
        self._backoff_s = 0.0
        return True

    def write(self, actions: Sequence[Action | Write]) -> None:
        """Into the store when it answers, else into the spool (in order, behind what is already there)."""
        writes = [a for a in actions if isinstance(a, (Start, End, NodeUp, NodeDown))]
        self.totals["skipped"] += len(actions) - len(writes)
        if not writes:
            return
        if self.store_available():
            try:
                self._add(self._apply_now(writes))
                return
            except KgweError as exc:
                self._backoff_s = 0.5
                self._retry_at = time.monotonic() + self._backoff_s
                log.warning("metering: %s; spooling writes", exc)
        lost = self.spool.append(writes)
        if lost:
            self.totals["dropped"] += lost
            log.error("metering: spool full (%d writes); dropped %d", self.spool.max_records, lost)

    def sync_nodes(self) -> None:
        now = self.clock()
        seen: set[str] = set()
        writes: list[Write] = []
        for node in self.core.list_node().items:
            info = node_info(self._plain(node), self.is_spot)
            if info is None:
                continue
            seen.add(info.node)
            if self.meter.nodes.get(info.node) != info:
                writes.append(NodeUp(capacity(info, now)))
            self.meter.nodes[info.node] = info
        for gone in set(self.meter.nodes) - seen:
            del self.meter.nodes[gone]
            writes.append(NodeDown(gone, now))
        self.write(writes)

    def sync_teams(self) -> None:
        """Who pays for each namespace: GPUBudget claims, then the namespaces' team labels."""
        items = [self._plain(ns) for ns in self.core.list_namespace().items]
        self._namespaces = {ns["metadata"]["name"] for ns in items}
        self._claims = dict(self.budget_teams())
        self.meter.teams = namespace_teams(items, self._claims)

    def resync(self, pods: Sequence[dict[str, Any]]) -> None:
        """Reconcile the store with a full listing of pods. With the store down, live holdings are spooled
        as starts (harmless if already recorded) and the reconcile waits for it."""
        self.sync_nodes()
        self.sync_teams()
        now = self.clock()
        recorded = seen = None
        if self.store_available():
            try:
                recorded = self.store.open_usage()
                seen = self.store.recorded_pods(_finished_on_nodes(pods))
            except KgweError as exc:
                log.warning("metering: %s", exc)
        if recorded is None or seen is None:  # finished pods wait for a listing the store can check them by
            self.write([a for a in self.meter.reconcile([], pods, now) if isinstance(a, Start)])
            self._reconciled = False
        else:
            self.write(self.meter.reconcile(recorded, pods, now, seen_pods=seen))
            self._reconciled = True
        self.synced.set()

    def observe(self, event_type: str, pod: dict[str, Any]) -> None:
        """One pod event between listings."""
        if (pod.get("spec") or {}).get("nodeName") not in self.meter.nodes:
            self.sync_nodes()  # a node we have not seen yet
        if (pod.get("metadata") or {}).get("namespace") not in self._namespaces or (
            self.budget_teams() != self._claims
        ):
            self.sync_teams()  # a namespace created, or budget claims changed, since the last
        self.write(self.meter.observe(event_type, pod, self.clock()))

    def between_watches(self) -> bool:
        """Periodic work each time a watch ends: nodes come and go between pod events, budget claims and
        team labels change, and the spool is replayed when the store answers again. True (list again
        and reconcile) once the store is back after a listing it could not reconcile."""
        self.sync_nodes()
        self.sync_teams()
        back = self.store_available()
        return back and not self._reconciled

    def run(self, stop: threading.Event) -> None:
        """Follow pods through the one list+watch loop (kgwe.runtime.watch): it resumes from the last
        resourceVersion, and lists again (-> `resync`) after 410 Gone or a dropped connection."""
        list_and_watch(
            self.core.list_pod_for_all_namespaces,
            on_list=self.resync,
            on_event=self.observe,
            on_watch_end=self.between_watches,
            stop=stop,
            watch_timeout_seconds=self.watch_timeout_s,
            max_backoff_seconds=self.max_backoff_s,
        )


def _finished_on_nodes(pods: Sequence[dict[str, Any]]) -> list[str]:
    """The uids of listed pods that ran on a node and finished (the ones a gap could have missed)."""
    return [
        uid
        for pod in pods
        if (pod.get("status") or {}).get("phase") in FINISHED
        and (pod.get("spec") or {}).get("nodeName")
        and (uid := (pod.get("metadata") or {}).get("uid"))
    ]
