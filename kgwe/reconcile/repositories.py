"""The PolicyRepositories of one namespace on the controller runtime (kgwe.runtime.loop): a watch of them
queues a repository when its generation (a spec edit), its reconcile-requested annotation or its deletion
changes — never for the status its own reconcile wrote — and every repository again after its interval
(with ±10% jitter) or at once when a signed webhook push names its URL. A pass that ends in a state a retry
may mend (kstatus' ProgressingWithRetry: Git unreachable, the API refusing an object) is retried after the
repository's own exponential backoff, never later than its interval.

Workers take the repositories side by side (one repository never twice at once): a slow or hanging Git server
(up to spec.timeout per call) delays only its own repository. Only the leader reconciles; a standby that
receives a push hands it to the leader by stamping the repositories it names
(RECONCILE_REQUESTED_AT_ANNOTATION)."""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Hashable
from typing import Protocol

from kubernetes.client.exceptions import ApiException

from kgwe.gitops.retry import jittered_interval_seconds
from kgwe.gitops.webhook import repository_key
from kgwe.reconcile.status import RETRY_PHASES, Outcome
from kgwe.runtime.cluster import Cluster, KubeObject
from kgwe.runtime.errors import NotServed, is_not_found
from kgwe.runtime.kinds import POLICY_REPOSITORY
from kgwe.runtime.leader import Gate, alone
from kgwe.runtime.loop import ControlLoop, Result, Source
from kgwe.runtime.queue import Backoff, WorkQueue
from kgwe.vocab import POLICY_REPOSITORY_PLURAL, RECONCILE_REQUESTED_AT_ANNOTATION

log = logging.getLogger(__name__)

WORKERS = 8  # repositories reconciled side by side at most
BACKOFF = Backoff(base_seconds=2.0, cap_seconds=300.0)  # after a pass that failed (never past its interval)


class Reconciler(Protocol):
    """What the loop needs of a repository's reconciler (kgwe.reconcile.repository.RepositoryReconciler)."""

    @property
    def last_read(self) -> KubeObject | None: ...

    def reconcile(self, *, pushed: bool = False) -> Outcome | None: ...

    def interval_seconds(self) -> float: ...


def repository_view(obj: KubeObject) -> Hashable:
    """What of a PolicyRepository asks for a reconcile when it changes: its generation, a reconcile
    request, its deletion; and the repository key of its URL (where webhook pushes are routed)."""
    meta = obj.get("metadata") or {}
    url = (obj.get("spec") or {}).get("url")
    return (
        meta.get("generation"),
        (meta.get("annotations") or {}).get(RECONCILE_REQUESTED_AT_ANNOTATION),
        meta.get("deletionTimestamp"),
        repository_key(url) if isinstance(url, str) else None,
    )


def _name(obj: KubeObject) -> str | None:
    name = (obj.get("metadata") or {}).get("name")
    return str(name) if name else None


class RepositoryController:
    def __init__(
        self,
        cluster: Cluster,
        namespace: str,
        reconciler_for: Callable[[str], Reconciler],
        *,
        gate: Gate = alone,
        after: Callable[[Reconciler, KubeObject], None] | None = None,
        jitter_fraction: float = 0.1,
        rng: random.Random | None = None,
        workers: int = WORKERS,
        backoff: Backoff = BACKOFF,
    ) -> None:
        self.cluster = cluster
        self.namespace = namespace
        self.reconciler_for = reconciler_for  # the reconciler of a repository, kept between passes
        self.gate = gate
        self.after = after  # told after each pass of a repository still there (the cost duties)
        self.jitter_fraction = jitter_fraction
        self._rng = rng or random.Random()
        self._pushed: set[str] = set()  # repositories a push named, not reconciled since
        self._lock = threading.Lock()
        self.crd_missing = False  # the watch says the PolicyRepository API is not served
        source = Source(
            POLICY_REPOSITORY_PLURAL, POLICY_REPOSITORY, key=_name, namespace=namespace, view=repository_view
        )
        self.loop = ControlLoop(
            POLICY_REPOSITORY_PLURAL,
            cluster,
            self.reconcile,
            [source],
            gate=gate,
            workers=workers,
            queue=WorkQueue(backoff=backoff, rng=self._rng),
            observer=self,
        )

    @property
    def reconciles(self) -> int:
        return self.loop.reconciles

    def start(self, stop: threading.Event) -> None:
        self.loop.start(stop)

    def join_workers(self, timeout_seconds: float) -> bool:
        """After `stop`: whether the reconciles running ended within `timeout_seconds`."""
        return self.loop.join_workers(timeout_seconds)

    # -- one pass ----------------------------------------------------------------------------------------
    def reconcile(self, name: str) -> Result:
        """Reconcile repository `name` once; when to look at it again."""
        with self._lock:
            pushed = name in self._pushed
            self._pushed.discard(name)
        rec = self.reconciler_for(name)
        outcome = rec.reconcile(pushed=pushed)
        repo = rec.last_read
        if repo is None:
            return Result()  # gone: its watch event brings it back if it comes again
        if self.after is not None and self.gate():
            try:
                self.after(rec, repo)
            except Exception:  # the costs of one pass must not stop the repository's reconciles
                log.exception("after the reconcile of %s", name)
        wait = jittered_interval_seconds(rec.interval_seconds(), self.jitter_fraction, self._rng)
        return Result(after_seconds=wait, failed=outcome is not None and outcome.phase in RETRY_PHASES)

    # -- webhook pushes ----------------------------------------------------------------------------------
    def push(self, repositories: frozenset[str]) -> None:
        """A push named these repository keys: the leader reconciles their repositories now; a standby asks
        the leader to, through the repositories' annotation."""
        names = [k for k in self.loop.known() if _key_of(self.loop.view(k)) in repositories]
        if not self.gate():
            self._request_from_leader(names)
            return
        with self._lock:
            self._pushed |= set(names)
        for name in names:
            self.loop.add(name)

    def _request_from_leader(self, names: list[str]) -> None:
        """Ask the leader to sync now by stamping the PolicyRepositories the push names (a standby got it)."""
        stamp = f"{time.time():.6f}"
        body = {"metadata": {"annotations": {RECONCILE_REQUESTED_AT_ANNOTATION: stamp}}}
        try:
            for name in names:
                self.cluster.patch(POLICY_REPOSITORY, name, body, self.namespace)
        except ApiException as exc:
            log.warning("could not hand the webhook push to the leader: %s", exc.reason)

    # -- what the watch says (kgwe.runtime.loop.WatchObserver) -------------------------------------------
    def listed(self, source: str, count: int) -> None:
        self.crd_missing = False

    def changed(self, source: str, event: str) -> None:
        return

    def restarted(self, source: str, error: BaseException | None) -> None:
        missing = isinstance(error, NotServed) or (error is not None and is_not_found(error))
        if missing and not self.crd_missing:
            log.warning("watching PolicyRepositories failed: %s", CRD_MISSING)
        self.crd_missing = missing


def _key_of(view: Hashable | None) -> str | None:
    """The repository key in a repository_view."""
    return view[3] if isinstance(view, tuple) else None


CRD_MISSING = (
    f"the CustomResourceDefinition {POLICY_REPOSITORY_PLURAL}.{POLICY_REPOSITORY.group} is not installed: "
    "install KGWE's CRDs (helm: crds.install=true; kustomize: deploy/crds/)"
)
