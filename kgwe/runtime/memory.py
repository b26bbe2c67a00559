"""The cluster interface (kgwe.runtime.cluster) in memory, for the fast tests of the reconcilers: objects as
the API server would keep them — a resourceVersion per write (one counter, as etcd's revision), uid,
creationTimestamp, generation bumped by a change outside metadata and status, managedFields naming each
writer — conditional writes refused with 409 Conflict, creates of an existing name with 409, deletes that
wait for finalizers and take owned objects with them, and watches that list, then hand over ADDED /
MODIFIED / DELETED as the selectors see each change, resuming from their last version.

Server-side apply is a merge here (maps merged key by key, lists replaced): the real control plane keeps
proving server-side apply. Status is written only through patch_status (every kind here has the status
subresource); `put` stores an object as is, status included — what a kubelet or another controller would
have written. `fail` makes the next matching requests fail with an HTTP status, for retries and refusals;
`on_write` is told of each write (a test can close the leader gate mid-pass)."""

from __future__ import annotations

import copy
import logging
import threading
import uuid
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from kubernetes.client.exceptions import ApiException

from kgwe.runtime import kinds
from kgwe.runtime.cluster import (
    WATCH_TIMEOUT_SECONDS,
    KubeObject,
    OnEvent,
    OnList,
    OnRestart,
)
from kgwe.runtime.errors import CONFLICT, NOT_FOUND, NotServed, api_error
from kgwe.runtime.kinds import Kind, Ref
from kgwe.runtime.selectors import field_match, label_match
from kgwe.runtime.status import merge_patch
from kgwe.timestamps import format_rfc3339
from kgwe.vocab import FIELD_MANAGER

log = logging.getLogger(__name__)

CLUSTER_SCOPED = frozenset({kinds.NODE, kinds.NAMESPACE, kinds.PRIORITY_CLASS})
SERVED = frozenset(
    {
        kinds.POLICY_REPOSITORY,
        kinds.GPU_WORKLOAD,
        kinds.NODE,
        kinds.POD,
        kinds.NAMESPACE,
        kinds.CONFIG_MAP,
        kinds.SECRET,
        kinds.EVENT,
        kinds.SERVICE,
        kinds.RESOURCE_QUOTA,
        kinds.DEPLOYMENT,
        kinds.JOB,
        kinds.PRIORITY_CLASS,
        kinds.POD_GROUP,
        kinds.ROLE_BINDING,
    }
)
STATUS_SUBRESOURCE_FREE = frozenset({kinds.CONFIG_MAP, kinds.SECRET, kinds.EVENT, kinds.ROLE_BINDING})
EVENTS_KEPT = 10_000  # watch events kept for resuming; a watch further behind lists again (410 Gone)
_WATCH_POLL_SECONDS = 0.05  # how soon a waiting watch notices `stop`
CONTROLLER_USER = "system:serviceaccount:kgwe-system:kgwe-controller"


@dataclass
class Fault:
    verb: str  # get, list, apply, patch, patch_status, create, delete, evict
    kind: Kind | None
    name: str | None
    status: int
    times: int


@dataclass(frozen=True)
class _Change:
    version: int
    ref: Ref
    before: KubeObject | None
    after: KubeObject | None  # None: deleted


Changes = list[_Change]


class MemoryCluster:
    def __init__(
        self,
        *,
        served: Iterable[Kind] = SERVED,
        user: str = CONTROLLER_USER,
        field_manager: str = FIELD_MANAGER,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.served = set(served)
        self.user = user
        self.field_manager = field_manager
        self.now = now
        self.on_write: Callable[[str, Ref], None] | None = None
        self.writes: list[tuple[str, Ref]] = []  # every write, in order: (verb, object)
        self._objects: dict[Ref, KubeObject] = {}
        self._version = 0
        self._changes: deque[_Change] = deque(maxlen=EVENTS_KEPT)
        self._epoch = 0  # raised by expire_watches: every watch lists again
        self._faults: list[Fault] = []
        self._cond = threading.Condition()

    # -- test controls -------------------------------------------------------------------------------
    def fail(
        self,
        verb: str,
        kind: Kind | None = None,
        name: str | None = None,
        *,
        status: int = 500,
        times: int = 1,
    ) -> None:
        """The next `times` requests of `verb` (on `kind`, on `name`) fail with HTTP `status`."""
        with self._cond:
            self._faults.append(Fault(verb, kind, name, status, times))

    def put(self, obj: Mapping[str, Any]) -> KubeObject:
        """Store `obj` as it is, status included (what the kubelet or another controller would write)."""
        ref = self._ref(obj)
        with self._cond:
            old = self._objects.get(ref)
            new = self._stamped(copy.deepcopy(dict(obj)), old)
            return self._store(ref, old, new)

    def expire_watches(self) -> None:
        """Every watch's version is gone (410): each lists again."""
        with self._cond:
            self._epoch += 1
            self._cond.notify_all()

    def objects(self, kind: Kind) -> list[KubeObject]:
        """Every stored object of `kind` (copies)."""
        with self._cond:
            return [copy.deepcopy(o) for r, o in sorted(self._objects.items()) if r.kind == kind]

    # -- the store -----------------------------------------------------------------------------------
    def _check(self, verb: str, kind: Kind, name: str | None = None) -> None:
        if kind not in self.served:
            raise NotServed(f"the cluster does not serve {kind.api_version} {kind.kind} (CRD missing?)")
        for fault in self._faults:
            if fault.verb == verb and fault.kind in (None, kind) and fault.name in (None, name):
                fault.times -= 1
                if fault.times <= 0:
                    self._faults.remove(fault)
                raise api_error(
                    fault.status, "Injected", f"{verb} {kind.kind} {name or ''}: injected failure"
                )

    def _ref(self, obj: Mapping[str, Any]) -> Ref:
        ref = Ref.of(obj)
        if ref.kind in CLUSTER_SCOPED and ref.namespace:
            return Ref(ref.kind, None, ref.name)
        return ref

    @staticmethod
    def _key(kind: Kind, name: str, namespace: str | None) -> Ref:
        return Ref(kind, None if kind in CLUSTER_SCOPED else namespace, name)

    def _stamped(self, new: KubeObject, old: KubeObject | None) -> KubeObject:
        """`new` with the metadata the server keeps: uid, creationTimestamp, generation, resourceVersion."""
        meta = new.setdefault("metadata", {})
        old_meta = (old or {}).get("metadata") or {}
        meta["uid"] = old_meta.get("uid") or str(uuid.uuid4())
        meta["creationTimestamp"] = old_meta.get("creationTimestamp") or format_rfc3339(self.now())
        generation = int(old_meta.get("generation") or 0)
        if old is None or _spec_of(old) != _spec_of(new):
            generation += 1
        meta["generation"] = generation
        self._version += 1
        meta["resourceVersion"] = str(self._version)
        return new

    def _store(self, ref: Ref, old: KubeObject | None, new: KubeObject | None) -> KubeObject:
        if new is None:
            self._objects.pop(ref, None)
            self._version += 1
        else:
            self._objects[ref] = new
        self._changes.append(_Change(self._version, ref, old, new))
        self._cond.notify_all()
        return copy.deepcopy(new if new is not None else old or {})

    def _wrote(self, verb: str, ref: Ref) -> None:
        self.writes.append((verb, ref))
        if self.on_write is not None:
            self.on_write(verb, ref)

    def _managed(self, obj: KubeObject, operation: str, subresource: str | None = None) -> None:
        entry = {"manager": self.field_manager, "operation": operation}
        if subresource:
            entry["subresource"] = subresource
        managed = obj["metadata"].setdefault("managedFields", [])
        if entry not in managed:
            managed.append(entry)

    def _precondition(self, ref: Ref, live: KubeObject, body: Mapping[str, Any]) -> None:
        wanted = (body.get("metadata") or {}).get("resourceVersion")
        if wanted is not None and wanted != live["metadata"]["resourceVersion"]:
            raise api_error(
                CONFLICT, "Conflict", f"Operation cannot be fulfilled on {ref}: the object has been modified"
            )

    def _write(self, verb: str, ref: Ref, old: KubeObject | None, new: KubeObject) -> KubeObject:
        if old is not None and new == old:
            return copy.deepcopy(old)  # the API server writes nothing for a no-op
        meta = new["metadata"]
        if meta.get("deletionTimestamp") and not meta.get("finalizers"):  # the last finalizer removed
            result = self._store(ref, old, None)
            self._collect(meta["uid"])
        else:
            result = self._store(ref, old, self._stamped(new, old))
        self._wrote(verb, ref)
        return result

    def _missing(self, ref: Ref) -> ApiException:
        return api_error(NOT_FOUND, "NotFound", f'{ref.kind.kind.lower()}s "{ref.name}" not found')

    # -- the interface -----------------------------------------------------------------------------------
    def get(self, kind: Kind, name: str, namespace: str | None = None) -> KubeObject | None:
        with self._cond:
            self._check("get", kind, name)
            obj = self._objects.get(self._key(kind, name, namespace))
            return copy.deepcopy(obj) if obj is not None else None

    def list(
        self,
        kind: Kind,
        namespace: str | None = None,
        *,
        labels: str | None = None,
        fields: str | None = None,
    ) -> list[KubeObject]:
        chosen = _chooser(namespace, labels, fields)
        with self._cond:
            self._check("list", kind)
            return [
                copy.deepcopy(o) for r, o in sorted(self._objects.items()) if r.kind == kind and chosen(o)
            ]

    def watch(
        self,
        kind: Kind,
        *,
        on_list: OnList,
        on_event: OnEvent,
        stop: threading.Event,
        namespace: str | None = None,
        labels: str | None = None,
        fields: str | None = None,
        on_restart: OnRestart | None = None,
        timeout_seconds: int = WATCH_TIMEOUT_SECONDS,
    ) -> None:
        chosen = _chooser(namespace, labels, fields)
        while not stop.is_set():
            error: BaseException | None = None
            try:
                self._follow(kind, chosen, on_list, on_event, stop)
            except Exception as exc:  # a handler failing: list again, as list_and_watch does
                log.warning(
                    "in-memory watch of %s: %s: %s; listing again", kind.kind, type(exc).__name__, exc
                )
                error = exc
            if stop.is_set():
                return
            if on_restart is not None:
                on_restart(error)
            if error is not None:
                stop.wait(_WATCH_POLL_SECONDS)

    def _follow(
        self,
        kind: Kind,
        chosen: Callable[[Mapping[str, Any]], bool],
        on_list: OnList,
        on_event: OnEvent,
        stop: threading.Event,
    ) -> None:
        """One listing, then events until `stop` or until this watch's version is gone (expire_watches)."""
        with self._cond:
            self._check("list", kind)
            version, epoch = self._version, self._epoch
            items = [
                copy.deepcopy(o) for r, o in sorted(self._objects.items()) if r.kind == kind and chosen(o)
            ]
        on_list(items)
        while not stop.is_set():
            after = self._changes_after(kind, version, epoch)
            if after is None:
                return
            version, changes = after
            for change in changes:
                for event, obj in _seen(change, chosen):
                    on_event(event, copy.deepcopy(obj))

    def _changes_after(self, kind: Kind, version: int, epoch: int) -> tuple[int, Changes] | None:
        """The version now and the changes of `kind` after `version`, waiting a moment for one; None once
        `epoch` is over."""
        with self._cond:
            self._cond.wait_for(
                lambda: self._version > version or self._epoch != epoch, timeout=_WATCH_POLL_SECONDS
            )
            if self._epoch != epoch or (self._changes and self._changes[0].version > version + 1):
                return None  # expired, or further behind than the changes kept: list again (410 Gone)
            return self._version, [c for c in self._changes if c.version > version and c.ref.kind == kind]

    def apply(self, obj: Mapping[str, Any], *, dry_run: bool = False) -> KubeObject:
        ref = self._ref(obj)
        with self._cond:
            self._check("apply", ref.kind, ref.name)
            old = self._objects.get(ref)
            if old is not None:
                self._precondition(ref, old, obj)
            body = _without_status(ref.kind, obj)
            new = merge_patch(old or {}, body)
            self._managed(new, "Apply")
            if dry_run:
                if old is not None and new == old:
                    return copy.deepcopy(old)
                preview: KubeObject = copy.deepcopy(new)
                preview["metadata"].setdefault("resourceVersion", str(self._version))
                return preview
            return self._write("apply", ref, old, new)

    def patch(
        self, kind: Kind, name: str, body: Mapping[str, Any], namespace: str | None = None
    ) -> KubeObject:
        return self._patched("patch", self._key(kind, name, namespace), body)

    def patch_status(
        self, kind: Kind, name: str, body: Mapping[str, Any], namespace: str | None = None
    ) -> KubeObject:
        return self._patched("patch_status", self._key(kind, name, namespace), body)

    def _patched(self, verb: str, ref: Ref, body: Mapping[str, Any]) -> KubeObject:
        """A merge patch of the object (`patch`) or of its status alone (`patch_status`)."""
        with self._cond:
            self._check(verb, ref.kind, ref.name)
            old = self._objects.get(ref)
            if old is None:
                raise self._missing(ref)
            self._precondition(ref, old, body)
            if verb == "patch_status":
                new = copy.deepcopy(old)
                new["status"] = merge_patch(old.get("status") or {}, body.get("status") or {})
                self._managed(new, "Update", "status")
            else:
                new = merge_patch(old, _without_status(ref.kind, body))
                new["metadata"]["resourceVersion"] = old["metadata"]["resourceVersion"]  # checked above
                self._managed(new, "Update")
            return self._write(verb, ref, old, new)

    def create(self, obj: Mapping[str, Any], *, dry_run: bool = False) -> KubeObject:
        body = copy.deepcopy(dict(obj))
        meta = body.setdefault("metadata", {})
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = f"{meta['generateName']}{uuid.uuid4().hex[:5]}"
        ref = self._ref(body)
        with self._cond:
            self._check("create", ref.kind, ref.name)
            if ref in self._objects:
                raise api_error(
                    CONFLICT, "AlreadyExists", f'{ref.kind.kind.lower()}s "{ref.name}" already exists'
                )
            new = _without_status(ref.kind, body)
            self._managed(new, "Update")
            if dry_run:
                return new
            return self._write("create", ref, None, new)

    def delete(self, kind: Kind, name: str, namespace: str | None = None, *, uid: str | None = None) -> bool:
        ref = self._key(kind, name, namespace)
        with self._cond:
            self._check("delete", kind, name)
            old = self._objects.get(ref)
            if old is None:
                return False
            if uid is not None and old["metadata"]["uid"] != uid:
                raise api_error(CONFLICT, "Conflict", f"Precondition failed: UID in precondition: {uid}")
            if old["metadata"].get("deletionTimestamp"):
                return True
            if old["metadata"].get("finalizers"):
                new = copy.deepcopy(old)
                new["metadata"]["deletionTimestamp"] = format_rfc3339(self.now())
                self._store(ref, old, self._stamped(new, old))
            else:
                self._store(ref, old, None)
                self._collect(old["metadata"]["uid"])
            self._wrote("delete", ref)
            return True

    def _collect(self, owner_uid: str) -> None:
        """Delete what `owner_uid` owned, and what those owned (background propagation)."""
        owned = [
            (r, o)
            for r, o in self._objects.items()
            if any(ref.get("uid") == owner_uid for ref in o["metadata"].get("ownerReferences") or [])
        ]
        for ref, obj in owned:
            self._store(ref, obj, None)
            self._collect(obj["metadata"]["uid"])

    def evict(self, name: str, namespace: str) -> None:
        with self._cond:
            self._check("evict", kinds.POD, name)
        if not self.delete(kinds.POD, name, namespace):
            raise self._missing(Ref(kinds.POD, namespace, name))

    def serves(self, group: str, version: str | None = None) -> bool:
        return any(k.group == group and version in (None, k.version) for k in self.served)

    def username(self) -> str:
        return self.user


def _spec_of(obj: Mapping[str, Any]) -> dict[str, Any]:
    """What a generation counts: everything but metadata and status."""
    return {k: v for k, v in obj.items() if k not in ("metadata", "status", "apiVersion", "kind")}


def _without_status(kind: Kind, obj: Mapping[str, Any]) -> KubeObject:
    body = copy.deepcopy(dict(obj))
    if kind not in STATUS_SUBRESOURCE_FREE:
        body.pop("status", None)
    return body


def _chooser(
    namespace: str | None, labels: str | None, fields: str | None
) -> Callable[[Mapping[str, Any]], bool]:
    by_labels, by_fields = label_match(labels), field_match(fields)

    def chosen(obj: Mapping[str, Any]) -> bool:
        where = (obj.get("metadata") or {}).get("namespace")
        return (namespace is None or where == namespace) and by_labels(obj) and by_fields(obj)

    return chosen


def _seen(change: _Change, chosen: Callable[[Mapping[str, Any]], bool]) -> list[tuple[str, KubeObject]]:
    """What a watch with these selectors is told of one change: an object entering its view is ADDED,
    leaving it DELETED, changing inside it MODIFIED."""
    was = change.before is not None and chosen(change.before)
    now = change.after is not None and chosen(change.after)
    if now and change.after is not None:
        return [("MODIFIED" if was else "ADDED", change.after)]
    if was and change.before is not None:
        return [("DELETED", change.after or change.before)]
    return []
