"""Server-side apply with a dry-run diff first, and inventory-based prune.

For each desired object: a server-side-apply dry run (KGWE's field manager, forced, so KGWE takes back
fields it owns that someone edited by hand; through the cluster interface, kgwe.runtime.cluster) tells what
the object would become; only when that differs from the live object is it applied for real. So a no-op
reconcile makes zero writes, admission webhooks and defaulting take part in the comparison (as in Argo CD's
server-side diff and Flux), and fields other managers own are never touched (SSA only sets the fields KGWE
sends).

An update of an object whose desired content has not changed since KGWE last applied it (same hash in
`kgwe.nvidia.io/desired-hash`) is a hand edit being undone: it is counted as drift.

Every object applied carries the annotations `stamp` holds (kgwe.audit.stamp: the policy commit and its
author) as of its last real change: they are left out of the comparison, so a new commit that leaves an
object as it was does not rewrite it.

Prune deletes what a previous revision applied and the current one no longer renders, but only objects
that carry this repository's label, and never one annotated `kgwe.nvidia.io/prune: disabled`.
"""

from __future__ import annotations

import copy
import hashlib
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import orjson
from kubernetes.client.exceptions import ApiException

from kgwe.errors import KgweError
from kgwe.runtime.cluster import Cluster
from kgwe.runtime.errors import NotServed, message_of
from kgwe.runtime.kinds import Kind, Ref
from kgwe.runtime.leader import Gate, check
from kgwe.vocab import (
    DESIRED_HASH_ANNOTATION,
    MANAGED_BY_LABEL,
    MANAGED_BY_VALUE,
    PRUNE_ANNOTATION,
    PRUNE_DISABLED,
    REPOSITORY_LABEL,
    STAMP_ANNOTATIONS,
)

_VOLATILE_METADATA = (
    "managedFields",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "uid",
    "selfLink",
)


@dataclass(frozen=True, order=True)
class ObjectRef:
    api_version: str
    kind: str
    namespace: str | None
    name: str

    @classmethod
    def of(cls, obj: dict[str, Any]) -> ObjectRef:
        meta = obj.get("metadata") or {}
        if not obj.get("apiVersion") or not obj.get("kind") or not meta.get("name"):
            raise KgweError(f"rendered object lacks apiVersion/kind/metadata.name: {str(obj)[:120]}")
        return cls(obj["apiVersion"], obj["kind"], meta.get("namespace") or None, meta["name"])

    @property
    def kind_of(self) -> Kind:
        return Kind(self.api_version, self.kind)

    @classmethod
    def from_status(cls, entry: dict[str, Any]) -> ObjectRef:
        return cls(entry["apiVersion"], entry["kind"], entry.get("namespace") or None, entry["name"])

    def as_status(self) -> dict[str, Any]:
        out = {"apiVersion": self.api_version, "kind": self.kind, "name": self.name}
        if self.namespace:
            out["namespace"] = self.namespace
        return out

    def __str__(self) -> str:
        return str(Ref(self.kind_of, self.namespace, self.name))


@dataclass
class SyncResult:
    created: list[ObjectRef] = field(default_factory=list)
    updated: list[ObjectRef] = field(default_factory=list)
    unchanged: list[ObjectRef] = field(default_factory=list)
    drift_corrected: list[ObjectRef] = field(default_factory=list)
    pruned: list[ObjectRef] = field(default_factory=list)
    prune_skipped: list[ObjectRef] = field(default_factory=list)  # protected or not ours
    failed: list[tuple[ObjectRef, str]] = field(default_factory=list)  # the API refused these
    writes: int = 0  # real API writes (creates, updates, deletes); dry runs are not writes

    @property
    def applied(self) -> list[ObjectRef]:
        return self.created + self.updated

    @property
    def changed(self) -> bool:
        return bool(self.created or self.updated or self.pruned)


def desired_hash(obj: dict[str, Any]) -> str:
    """Content hash of a desired object (without the hash annotation itself), stable across runs."""
    clean = copy.deepcopy(obj)
    (clean.get("metadata") or {}).get("annotations", {}).pop(DESIRED_HASH_ANNOTATION, None)
    return hashlib.sha256(orjson.dumps(clean, option=orjson.OPT_SORT_KEYS)).hexdigest()[:20]


def with_ownership(obj: dict[str, Any], repository: str) -> dict[str, Any]:
    """The object as KGWE applies it: managed-by and repository labels, and the desired-content hash."""
    out = copy.deepcopy(obj)
    meta = out.setdefault("metadata", {})
    meta.setdefault("labels", {}).update({MANAGED_BY_LABEL: MANAGED_BY_VALUE, REPOSITORY_LABEL: repository})
    meta.setdefault("annotations", {})
    meta["annotations"][DESIRED_HASH_ANNOTATION] = desired_hash(out)
    return out


def comparable(obj: dict[str, Any], ignored_annotations: Iterable[str] = ()) -> dict[str, Any]:
    """An object without the fields the server changes on every write (for live vs dry-run equality), nor
    the `ignored_annotations` (the stamp of the commit that last changed it)."""
    out = copy.deepcopy(obj)
    meta = out.get("metadata") or {}
    for key in _VOLATILE_METADATA:
        meta.pop(key, None)
    annotations = meta.get("annotations")
    if annotations:
        for key in ignored_annotations:
            annotations.pop(key, None)
        if not annotations:
            meta.pop("annotations")
    return out


DIFF_READERS = 8  # objects read and dry-run at once by a pass
# ("create" | "update" | "unchanged", the live object, the object as the dry run says it would be)
Diff = tuple[str, dict[str, Any] | None, dict[str, Any]]


class Applier:
    """Applies and prunes objects for one PolicyRepository (`repository` = its label value), on `cluster`
    under its field manager.

    `guard` is asked before every real write (the leader gate): when it says no, NotLeader is raised and
    nothing more is written."""

    def __init__(self, cluster: Cluster, repository: str, *, guard: Gate | None = None):
        self.cluster = cluster
        self.repository = repository
        self.guard = guard
        self.stamp: Mapping[str, str] = {}  # annotations each written object carries (the pass's commit)

    def _desired(self, obj: dict[str, Any]) -> dict[str, Any]:
        """The object as applied: ownership, then the stamp (outside the desired-content hash)."""
        desired = with_ownership(obj, self.repository)
        desired["metadata"]["annotations"].update(self.stamp)
        return desired

    def diff(self, obj: dict[str, Any]) -> Diff:
        """("create" | "update" | "unchanged", live, would-be) for one desired object, writing nothing."""
        desired = self._desired(obj)
        ref = ObjectRef.of(desired)
        live = self.cluster.get(ref.kind_of, ref.name, ref.namespace)
        would_be = self.cluster.apply(desired, dry_run=True)
        if live is None:
            return "create", None, would_be
        same = comparable(would_be, STAMP_ANNOTATIONS) == comparable(live, STAMP_ANNOTATIONS)
        return ("unchanged" if same else "update"), live, would_be

    def _diffs(self, objects: Sequence[dict[str, Any]]) -> list[Diff | ApiException]:
        """Each object's diff (or the API's refusal of its read or dry run), the reads made side by side: a
        pass that changes nothing is these reads alone, and one after another they were most of its wall
        time. A kind the cluster does not serve (NotServed) stops them all, before any write."""

        def one(obj: dict[str, Any]) -> Diff | ApiException:
            try:
                return self.diff(obj)
            except ApiException as exc:
                return exc

        if len(objects) < 2:
            return [one(obj) for obj in objects]
        with ThreadPoolExecutor(max_workers=min(DIFF_READERS, len(objects))) as pool:
            return list(pool.map(one, objects))

    def apply(self, objects: Sequence[dict[str, Any]], result: SyncResult | None = None) -> SyncResult:
        """Apply only the objects whose dry run differs from live, in their order."""
        result = result or SyncResult()
        for obj, diffed in zip(objects, self._diffs(objects), strict=True):
            desired = self._desired(obj)
            ref = ObjectRef.of(desired)
            try:
                if isinstance(diffed, ApiException):
                    raise diffed
                action, live, _ = diffed
                if action == "unchanged":
                    result.unchanged.append(ref)
                    continue
                check(self.guard)
                self.cluster.apply(desired)
            except ApiException as exc:
                result.failed.append((ref, message_of(exc)))
                continue
            result.writes += 1
            if action == "create":
                result.created.append(ref)
            else:
                result.updated.append(ref)
                live_annotations = (live or {}).get("metadata", {}).get("annotations") or {}
                live_hash = live_annotations.get(DESIRED_HASH_ANNOTATION)
                if live_hash == desired["metadata"]["annotations"][DESIRED_HASH_ANNOTATION]:
                    result.drift_corrected.append(ref)
        return result

    def prune(
        self, previous: Iterable[ObjectRef], current: Iterable[ObjectRef], result: SyncResult | None = None
    ) -> SyncResult:
        """Delete objects applied before and no longer desired (ours only, unless protected)."""
        result = result or SyncResult()
        keep = set(current)
        for ref in sorted(set(previous) - keep):
            try:
                live = self.cluster.get(ref.kind_of, ref.name, ref.namespace)
            except NotServed:
                continue  # the kind is gone from the cluster, so are its objects
            if live is None:
                continue
            meta = live.get("metadata") or {}
            if (meta.get("annotations") or {}).get(PRUNE_ANNOTATION) == PRUNE_DISABLED or (
                (meta.get("labels") or {}).get(REPOSITORY_LABEL) != self.repository
            ):
                result.prune_skipped.append(ref)
                continue
            if not self.delete(ref):
                continue
            result.writes += 1
            result.pruned.append(ref)
        return result

    def read(self, ref: ObjectRef) -> dict[str, Any] | None:
        """The live object `ref` names; None when it, or its kind, is gone from the cluster."""
        try:
            return self.cluster.get(ref.kind_of, ref.name, ref.namespace)
        except NotServed:
            return None

    def delete(self, ref: ObjectRef) -> bool:
        """Delete the object (after the leader gate); False when it, or its kind, was already gone."""
        check(self.guard)
        try:
            return self.cluster.delete(ref.kind_of, ref.name, ref.namespace)
        except NotServed:
            return False

    def sync(self, objects: Sequence[dict[str, Any]], previous: Iterable[ObjectRef]) -> SyncResult:
        """Apply then prune; the new inventory is `[ObjectRef.of(o) for o in objects]` + skipped prunes."""
        refs = [ObjectRef.of(o) for o in objects]
        if len(set(refs)) != len(refs):
            dupes = sorted({str(r) for r in refs if refs.count(r) > 1})
            raise KgweError(f"rendered objects are not unique: {', '.join(dupes)}")
        result = self.apply(objects)
        return self.prune(previous, refs, result)
