"""Who writes which object: count writes per object and field manager from watch events.

Every write that changes an object bumps its resourceVersion and reaches a watch; the apiserver stamps the
writer's managedFields entry (manager, operation, subresource) with the time and the fields it owns. So a
MODIFIED event's writer is the entry whose time or fields changed (or, for a second write within the same
second by the same manager, the newest entry). Used to prove that two controllers — Flux and KGWE — each
write only their own objects and never delete the other's.
"""

from __future__ import annotations

import json
import threading
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

from kubernetes import client, dynamic
from kubernetes.client.exceptions import ApiException

ObjectKey = str  # "Kind/namespace/name" ("Kind/name" when cluster-scoped)
Entry = tuple[str, str, str]  # manager, operation, subresource


def object_key(kind: str, namespace: str | None, name: str) -> ObjectKey:
    return f"{kind}/{namespace}/{name}" if namespace else f"{kind}/{name}"


def _entries(obj: Mapping[str, Any]) -> dict[Entry, tuple[str, str]]:
    out = {}
    for e in (obj.get("metadata") or {}).get("managedFields") or []:
        key = (e.get("manager", ""), e.get("operation", ""), e.get("subresource", ""))
        out[key] = (e.get("time", ""), json.dumps(e.get("fieldsV1"), sort_keys=True))
    return out


def writers(
    before: Mapping[Entry, tuple[str, str]] | None, after: Mapping[Entry, tuple[str, str]]
) -> list[Entry]:
    """The managedFields entries a write touched (before None: the object was just created)."""
    if before is None:
        return sorted(after)
    changed = sorted(k for k, v in after.items() if before.get(k) != v)
    if changed:
        return changed
    newest = max(after.items(), key=lambda kv: kv[1][0], default=None)
    return [newest[0]] if newest else []


class WriteRecorder:
    """Watches the given kinds (all namespaces) and counts writes per (object, manager, subresource).

    Objects listed when a watch starts are the baseline (not counted); ADDED/MODIFIED events count; DELETED
    events are kept in `deleted` with the object's last managers.
    """

    def __init__(self, api: client.ApiClient, kinds: Iterable[tuple[str, str]]) -> None:
        self.dyn = dynamic.DynamicClient(api)
        self.kinds = list(kinds)
        self.writes: Counter[tuple[ObjectKey, str, str]] = Counter()
        self.deleted: list[tuple[ObjectKey, list[str]]] = []
        self._last: dict[ObjectKey, dict[Entry, tuple[str, str]]] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._synced: list[threading.Event] = []

    def start(self, timeout_seconds: float = 60) -> WriteRecorder:
        for api_version, kind in self.kinds:
            synced = threading.Event()
            resource = self.dyn.resources.get(api_version=api_version, kind=kind)
            t = threading.Thread(
                target=self._run, args=(resource, synced), daemon=True, name=f"writes-{kind}"
            )
            t.start()
            self._threads.append(t)
            self._synced.append(synced)
        for synced in self._synced:
            if not synced.wait(timeout_seconds):
                raise TimeoutError("write recorder: a watch did not list in time")
        return self

    def stop(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(timeout=10)

    def _record(self, kind: str, event: str, obj: Mapping[str, Any]) -> None:
        meta = obj.get("metadata") or {}
        key = object_key(kind, meta.get("namespace"), meta.get("name", ""))
        after = _entries(obj)
        with self._lock:
            if event == "DELETED":
                self.deleted.append((key, sorted({m for m, _, _ in after})))
                self._last.pop(key, None)
                return
            before = self._last.get(key)
            self._last[key] = after
            if event == "SYNC":
                return
            for manager, _, subresource in writers(before if event == "MODIFIED" else None, after):
                self.writes[(key, manager, subresource)] += 1

    def _run(self, resource: Any, synced: threading.Event) -> None:
        kind = resource.kind
        rv: str | None = None
        while not self._stop.is_set():
            try:
                if rv is None:
                    listing = resource.get().to_dict()
                    for item in listing.get("items") or []:
                        self._record(kind, "SYNC", item)
                    rv = listing["metadata"]["resourceVersion"]
                    synced.set()
                for event in self.dyn.watch(resource, resource_version=rv, timeout=5):
                    if self._stop.is_set():
                        break
                    raw = event["raw_object"]
                    if event["type"] == "ERROR":
                        rv = None
                        break
                    rv = (raw.get("metadata") or {}).get("resourceVersion") or rv
                    if event["type"] != "BOOKMARK":
                        self._record(kind, event["type"], raw)
            except ApiException as exc:
                if exc.status == 410:
                    rv = None
                self._stop.wait(0.5)
            except Exception:  # a connection reset during teardown: retry until stopped
                self._stop.wait(0.5)

    def table(self) -> dict[ObjectKey, dict[str, int]]:
        """{object: {"manager[/subresource]": writes}} for the figure."""
        out: dict[ObjectKey, dict[str, int]] = {}
        with self._lock:
            for (key, manager, sub), n in sorted(self.writes.items()):
                out.setdefault(key, {})[f"{manager}/{sub}" if sub else manager] = n
        return out
