"""The cluster as both controllers see it: get, list, watch, apply, patch, patch-status, create, delete and
evict the kinds KGWE touches, with objects as plain JSON dicts. Two implementations: kgwe.runtime.kube (the
API server, through the kubernetes client's connection, auth and deadlines) and kgwe.runtime.memory (a
store in this process that keeps resourceVersions, conflicts and watch events, for the fast tests).

Every write names KGWE's field manager. `apply` is server-side apply (forced: KGWE takes back the fields it
owns) on the API server and a merge in memory; `patch` and `patch_status` are JSON merge patches (a null
removes a key; a metadata.resourceVersion in the body makes the write conditional on it). Refusals raise
kubernetes' ApiException with the HTTP status (kgwe.runtime.errors tests them); a kind the cluster does not
serve raises NotServed."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from kgwe.runtime.kinds import Kind

KubeObject = dict[str, Any]  # an object as the API server sends it (JSON)
OnList = Callable[[Sequence[KubeObject]], None]  # the whole listing, first and after every gap
OnEvent = Callable[[str, KubeObject], None]  # ADDED / MODIFIED / DELETED and the object
OnRestart = Callable[[BaseException | None], None]  # listing again: the error (None: the watch expired)

WATCH_TIMEOUT_SECONDS = 300  # a watch the server ends after this long is resumed from its last version


class Cluster(Protocol):
    def get(self, kind: Kind, name: str, namespace: str | None = None) -> KubeObject | None:
        """The object, or None when there is none."""
        ...

    def list(
        self,
        kind: Kind,
        namespace: str | None = None,
        *,
        labels: str | None = None,
        fields: str | None = None,
    ) -> list[KubeObject]:
        """The objects of `kind` (in `namespace`, or everywhere) that the selectors choose."""
        ...

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
        """List, then hand over every change until `stop` is set (kgwe.runtime.watch.list_and_watch)."""
        ...

    def apply(self, obj: Mapping[str, Any], *, dry_run: bool = False) -> KubeObject:
        """Server-side apply `obj` (forced; a metadata.resourceVersion in it is a precondition); with
        `dry_run`, what it would become, nothing written."""
        ...

    def patch(
        self, kind: Kind, name: str, body: Mapping[str, Any], namespace: str | None = None
    ) -> KubeObject:
        """A JSON merge patch of the object; the object as it is after it."""
        ...

    def patch_status(
        self, kind: Kind, name: str, body: Mapping[str, Any], namespace: str | None = None
    ) -> KubeObject:
        """A JSON merge patch of the object's status subresource (`body` is {"status": ...})."""
        ...

    def create(self, obj: Mapping[str, Any], *, dry_run: bool = False) -> KubeObject:
        """Create `obj`; 409 when it exists. With `dry_run`, what it would be, nothing written."""
        ...

    def delete(self, kind: Kind, name: str, namespace: str | None = None, *, uid: str | None = None) -> bool:
        """Delete the object, its dependents in the background; False when it was gone already. With `uid`,
        only that object (409 when another of that name replaced it)."""
        ...

    def evict(self, name: str, namespace: str) -> None:
        """Evict a pod through the Eviction API (429 while a PodDisruptionBudget does not allow it)."""
        ...

    def serves(self, group: str, version: str | None = None) -> bool:
        """Whether the API server serves `group` (at `version`, when given), asked now."""
        ...

    def username(self) -> str:
        """Who the API server says this client is (a SelfSubjectReview)."""
        ...
