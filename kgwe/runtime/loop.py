"""A control loop: watches feed keys into a work queue, workers reconcile them while the leader gate is open.

- Sources: one watch per kind (kgwe.runtime.cluster's watch: list, then events, resumed from the last
  version). The primary source's objects are the loop's keys; it remembers a small view of each (say its
  generation) and queues a key only when that view changed — not on its own status writes — or on every
  event when it keeps none. Other sources (a workload's pods) queue the keys their objects name.
- Reconcile: `reconcile(key)` returns a Result: look again after some seconds, or only on a change; or a
  failure, retried after the key's exponential backoff (kgwe.runtime.queue). An exception is a failure too.
- Leadership: keys are queued and reconciled only while the gate is open; on becoming leader every key is
  queued (nothing was done while standing by), and `on_leading` is told.
- Resync: with `resync_seconds`, every key is queued that often (periodic work: timeouts, costs), from the
  keys the watch knows — never a LIST.
- `on_tick` runs on the first worker before it takes each key (and at least every second): work that must
  come before the keys (a workload's RoleBindings before its pods' owners).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Protocol

from kgwe.runtime.cluster import WATCH_TIMEOUT_SECONDS, Cluster, KubeObject
from kgwe.runtime.kinds import Kind
from kgwe.runtime.leader import Gate, NotLeader, alone
from kgwe.runtime.queue import WorkQueue

log = logging.getLogger(__name__)

TICK_SECONDS = 1.0  # how often a worker with nothing to do looks at the gate and `on_tick`
_GONE = object()


@dataclass(frozen=True)
class Result:
    """What a reconcile asks for next: another look after `after_seconds` (None: only on a change), or,
    `failed`, a retry after the key's backoff (capped by `after_seconds` when given)."""

    after_seconds: float | None = None
    failed: bool = False


DONE = Result()
RETRY = Result(failed=True)


@dataclass(frozen=True)
class Source:
    """A watch feeding the loop: the objects of `kind` (in `namespace`, chosen by `labels`), and the key
    each names (None: none). `view`, for the primary source: what of an object, when it changes, needs a
    reconcile (None: every event does)."""

    name: str
    kind: Kind
    key: Callable[[KubeObject], str | None]
    namespace: str | None = None
    labels: str | None = None
    view: Callable[[KubeObject], Hashable] | None = None


class WatchObserver(Protocol):
    """Told what the loop's watches hand over (metrics)."""

    def listed(self, source: str, count: int) -> None: ...

    def changed(self, source: str, event: str) -> None: ...

    def restarted(self, source: str, error: BaseException | None) -> None: ...


class ControlLoop:
    def __init__(
        self,
        name: str,
        cluster: Cluster,
        reconcile: Callable[[str], Result],
        sources: Sequence[Source],
        *,
        gate: Gate = alone,
        workers: int = 1,
        queue: WorkQueue | None = None,
        resync_seconds: float | None = None,
        observer: WatchObserver | None = None,
        on_leading: Callable[[], None] | None = None,
        on_tick: Callable[[], None] | None = None,
        watch_timeout_seconds: int = WATCH_TIMEOUT_SECONDS,
    ) -> None:
        self.name = name
        self.cluster = cluster
        self.reconcile = reconcile
        self.sources = list(sources)  # the first is the primary: its objects are the keys
        self.gate = gate
        self.workers = workers
        self.queue = queue if queue is not None else WorkQueue()  # (an empty queue is falsy)
        self.resync_seconds = resync_seconds
        self.observer = observer
        self.on_leading = on_leading
        self.on_tick = on_tick
        self.watch_timeout_seconds = watch_timeout_seconds
        self.reconciles = 0  # reconciles run (a key dropped while standing by is not one)
        self.listed = threading.Event()  # the primary source listed once
        self._known: dict[str, Hashable] = {}  # key -> view, as the primary watch last saw it
        self._lock = threading.Lock()
        self._leading = False
        self._missed = False  # a key was dropped while the gate was closed: all are looked at once it opens
        self._last_resync = 0.0
        self._threads: list[threading.Thread] = []
        self._workers: list[threading.Thread] = []  # of those, the ones that run reconciles

    # -- keys ------------------------------------------------------------------------------------------
    def known(self) -> list[str]:
        """Every key the primary watch knows."""
        with self._lock:
            return sorted(self._known)

    def view(self, key: str) -> Hashable | None:
        """The view of `key` the primary watch last saw (None: unknown or none kept)."""
        with self._lock:
            return self._known.get(key)

    def add(self, key: str, after_seconds: float = 0.0) -> None:
        """Queue `key` (while leading: a standby reconciles nothing, and looks at every key once it leads)."""
        if self.gate():
            self.queue.add(key, after_seconds)
        else:
            self._missed = True

    def resync(self) -> None:
        """Queue every key the watch knows."""
        for key in self.known():
            self.add(key)

    # -- the watches -----------------------------------------------------------------------------------
    def _primary_listed(self, source: Source, items: Sequence[KubeObject]) -> None:
        views = {k: self._view_of(source, obj) for obj in items if (k := source.key(obj))}
        with self._lock:
            old, self._known = self._known, views
        self.listed.set()
        for key in sorted(views.keys() | old.keys()):
            if source.view is None or old.get(key, _GONE) != views.get(key, _GONE):
                self.add(key)

    def _primary_changed(self, source: Source, event: str, obj: KubeObject) -> None:
        key = source.key(obj)
        if not key:
            return
        view = self._view_of(source, obj)
        with self._lock:  # the view and its key's place in the queue change together
            old = self._known.pop(key, _GONE) if event == "DELETED" else self._known.get(key, _GONE)
            if event != "DELETED":
                self._known[key] = view
            if source.view is None or event == "DELETED" or old != view:
                self.add(key)

    @staticmethod
    def _view_of(source: Source, obj: KubeObject) -> Hashable:
        return source.view(obj) if source.view is not None else None

    def _watch(self, source: Source, primary: bool, stop: threading.Event) -> None:
        observer = self.observer

        def listed(items: Sequence[KubeObject]) -> None:
            if observer is not None:
                observer.listed(source.name, len(items))
            if primary:
                self._primary_listed(source, items)
                return
            for obj in items:
                if key := source.key(obj):
                    self.add(key)

        def changed(event: str, obj: KubeObject) -> None:
            if observer is not None:
                observer.changed(source.name, event)
            if primary:
                self._primary_changed(source, event, obj)
            elif key := source.key(obj):
                self.add(key)

        def restarted(error: BaseException | None) -> None:
            if observer is not None:
                observer.restarted(source.name, error)

        self.cluster.watch(
            source.kind,
            on_list=listed,
            on_event=changed,
            stop=stop,
            namespace=source.namespace,
            labels=source.labels,
            on_restart=restarted,
            timeout_seconds=self.watch_timeout_seconds,
        )

    # -- leadership and resync ---------------------------------------------------------------------------
    def supervise(self) -> None:
        """Follow the gate: on becoming leader (or leading again after dropping keys), `on_leading`, and every
        key queued if any was dropped meanwhile; while leading, every key again each `resync_seconds`."""
        leading = self.gate()
        became = leading and (not self._leading or self._missed)
        self._leading = leading
        if became and self.on_leading is not None:
            self.on_leading()
        due = self.resync_seconds is not None and time.monotonic() - self._last_resync >= self.resync_seconds
        # every key again only when one was dropped while standing by: a loop that led from the start has
        # queued each key from its watch already (queueing them again reconciled each twice at start)
        if leading and (self._missed or due):
            self._missed = False
            self._last_resync = time.monotonic()
            self.resync()

    # -- the workers -------------------------------------------------------------------------------------
    def process(self, timeout_seconds: float) -> str | None:
        """Take one due key (waiting up to `timeout_seconds`) and reconcile it if still leading; the key, or
        None when none came."""
        key = self.queue.get(timeout_seconds)
        if key is None:
            return None
        try:
            if self.gate():
                self._reconcile(key)
            else:
                self._missed = True
        finally:
            self.queue.done(key)
        return key

    def _reconcile(self, key: str) -> None:
        try:
            result = self.reconcile(key)
        except NotLeader:
            return
        except Exception:  # one broken key must not stop the others: retried after its backoff
            log.exception("%s: reconcile of %s failed", self.name, key)
            result = RETRY
        with self._lock:
            self.reconciles += 1
        if result.failed:
            delay = self.queue.retry(key, result.after_seconds)
            log.debug(
                "%s: %s failed %d time(s) in a row; again in %.1f s",
                self.name,
                key,
                self.queue.failures(key),
                delay,
            )
            return
        self.queue.forget(key)
        if result.after_seconds is not None:
            self.queue.add(key, result.after_seconds)

    def _work(self, stop: threading.Event, first: bool) -> None:
        while not stop.is_set():
            if first and self.on_tick is not None and self.gate():
                self.on_tick()
            self.process(TICK_SECONDS)

    def _supervisor(self, stop: threading.Event) -> None:
        while not stop.is_set():
            self.supervise()
            stop.wait(TICK_SECONDS)

    def start(self, stop: threading.Event) -> None:
        """The watches, the workers and the supervisor, in daemon threads until `stop` is set."""
        targets: list[tuple[str, Callable[[], None]]] = []
        for index, source in enumerate(self.sources):
            targets.append((f"watch-{source.name}", _bind(self._watch, source, index == 0, stop)))
        for index in range(self.workers):
            targets.append((f"{self.name}-{index}", _bind(self._work, stop, index == 0)))
        targets.append((f"{self.name}-leader", _bind(self._supervisor, stop)))
        for index, (name, target) in enumerate(targets):
            thread = threading.Thread(target=target, name=f"loop-{name}", daemon=True)
            thread.start()
            self._threads.append(thread)
            if len(self.sources) <= index < len(self.sources) + self.workers:
                self._workers.append(thread)

    def join_workers(self, timeout_seconds: float) -> bool:
        """After `stop` was set: wait up to `timeout_seconds` for the reconciles running to end (the watches
        are left: they end with their stream). True when every worker has ended."""
        deadline = time.monotonic() + timeout_seconds
        for thread in self._workers:
            thread.join(max(0.0, deadline - time.monotonic()))
        return not any(t.is_alive() for t in self._workers)


def _bind(fn: Callable[..., None], *args: object) -> Callable[[], None]:
    return lambda: fn(*args)
