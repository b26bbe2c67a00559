"""Leader election on a coordination.k8s.io/v1 Lease (the Python client only ships a ConfigMap lock).

Same rules as client-go's leaderelection:
- a candidate takes the Lease only when the holder has not renewed it for `lease_duration` as observed on
  the candidate's own monotonic clock (no clock sync between machines needed);
- every write uses the Lease's resourceVersion, so two candidates can never both succeed;
- the leader stops acting once `renew_deadline` has passed since its last successful renewal, and
  renew_deadline < lease_duration, so a deposed leader stops *before* anyone else may start.

`is_leader()` is the gate every write of the controller checks; `on_stopped_leading` fires when the gate
closes, so the loop can abandon work in flight.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from kgwe.errors import KgweError
from kgwe.runtime.errors import is_conflict, is_not_found

log = logging.getLogger(__name__)


class LeaderElector:
    def __init__(
        self,
        api_client: client.ApiClient,
        *,
        name: str,
        namespace: str,
        identity: str,
        lease_duration_seconds: float = 15.0,
        renew_deadline_seconds: float = 10.0,
        retry_period_seconds: float = 2.0,
        on_started_leading: Callable[[], None] | None = None,
        on_stopped_leading: Callable[[], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not 0 < retry_period_seconds < renew_deadline_seconds < lease_duration_seconds:
            raise KgweError("leader election needs retry period < renew deadline < lease duration")
        self.api = client.CoordinationV1Api(api_client)
        self.name = name
        self.namespace = namespace
        self.identity = identity
        self.lease_duration_seconds = lease_duration_seconds
        self.renew_deadline_seconds = renew_deadline_seconds
        self.retry_period_seconds = retry_period_seconds
        self.on_started_leading = on_started_leading
        self.on_stopped_leading = on_stopped_leading
        self._clock = clock
        self._last_renew: float | None = None  # our clock, at our last successful write
        self._observed: tuple[str | None, object] | None = None  # (holder, renewTime) last seen
        self._observed_at = 0.0
        self._leading = False
        self._lock = threading.Lock()

    # -- the gate ------------------------------------------------------------------------------
    def is_leader(self) -> bool:
        with self._lock:
            return (
                self._leading
                and self._last_renew is not None
                and self._clock() - self._last_renew < self.renew_deadline_seconds
            )

    # -- one round -----------------------------------------------------------------------------
    def try_acquire_or_renew(self) -> bool:
        now = datetime.now(UTC)
        try:
            lease = self.api.read_namespaced_lease(self.name, self.namespace)
        except ApiException as exc:
            if not is_not_found(exc):
                log.warning("reading lease %s/%s failed: %s", self.namespace, self.name, exc.reason)
                return False
            return self._create(now)
        spec = lease.spec or client.V1LeaseSpec()
        holder = spec.holder_identity or None
        record = (holder, spec.renew_time)
        if record != self._observed:
            self._observed, self._observed_at = record, self._clock()
        duration = spec.lease_duration_seconds or self.lease_duration_seconds
        if holder and holder != self.identity and self._clock() - self._observed_at < duration:
            return False  # someone else holds a lease that has not expired (by our clock)
        if holder != self.identity:
            spec.lease_transitions = (spec.lease_transitions or 0) + 1
            spec.acquire_time = now
        spec.holder_identity = self.identity
        spec.lease_duration_seconds = int(self.lease_duration_seconds)
        spec.renew_time = now
        lease.spec = spec
        started = self._clock()
        try:
            self.api.replace_namespaced_lease(self.name, self.namespace, lease)  # resourceVersion-guarded
        except ApiException as exc:
            if not (is_conflict(exc) or is_not_found(exc)):
                log.warning("renewing lease %s/%s failed: %s", self.namespace, self.name, exc.reason)
            return False
        self._renewed(started)
        return True

    def _create(self, now: datetime) -> bool:
        body = client.V1Lease(
            metadata=client.V1ObjectMeta(name=self.name, namespace=self.namespace),
            spec=client.V1LeaseSpec(
                holder_identity=self.identity,
                acquire_time=now,
                renew_time=now,
                lease_duration_seconds=int(self.lease_duration_seconds),
                lease_transitions=0,
            ),
        )
        started = self._clock()
        try:
            self.api.create_namespaced_lease(self.namespace, body)
        except ApiException as exc:
            if not is_conflict(exc):
                log.warning("creating lease %s/%s failed: %s", self.namespace, self.name, exc.reason)
            return False
        self._renewed(started)
        return True

    def _renewed(self, started: float) -> None:
        # Count from when the request was sent: the server may have stored it any time after that.
        with self._lock:
            self._last_renew = started

    # -- the loop ------------------------------------------------------------------------------
    def step(self) -> None:
        """One election round plus the leading/not-leading transitions (callbacks run here).

        Any failure to reach the apiserver (refused connection, TLS, timeout) is a failed round, never an
        exception: the thread must keep campaigning, and the renew deadline closes the gate meanwhile.
        """
        try:
            ok = self.try_acquire_or_renew()
        except Exception as exc:  # urllib3, OSError, SSL: all mean "this round failed"
            log.warning("lease %s/%s round failed: %s", self.namespace, self.name, type(exc).__name__)
            ok = False
        with self._lock:
            was = self._leading
            still_valid = self._last_renew is not None and (
                self._clock() - self._last_renew < self.renew_deadline_seconds
            )
            self._leading = still_valid if (ok or was) else False
            now_leading = self._leading
        if now_leading and not was and self.on_started_leading:
            self.on_started_leading()
        if was and not now_leading:
            log.warning("lost leadership of %s/%s", self.namespace, self.name)
            if self.on_stopped_leading:
                self.on_stopped_leading()

    def run(self, stop: threading.Event) -> None:
        """Campaign and renew until `stop` is set; releases the Lease on the way out."""
        while not stop.is_set():
            self.step()
            stop.wait(self.retry_period_seconds)
        self.release()

    def start(self, stop: threading.Event) -> threading.Thread:
        thread = threading.Thread(target=self.run, args=(stop,), name=f"lease-{self.name}", daemon=True)
        thread.start()
        return thread

    def release(self) -> None:
        """Give the Lease up (holder cleared) so a successor does not wait a whole lease duration."""
        with self._lock:
            was = self._leading
            self._leading = False
        if not was:
            return
        try:
            lease = self.api.read_namespaced_lease(self.name, self.namespace)
            if lease.spec and lease.spec.holder_identity == self.identity:
                lease.spec.holder_identity = None
                lease.spec.lease_duration_seconds = 1
                lease.spec.renew_time = datetime.now(UTC)
                self.api.replace_namespaced_lease(self.name, self.namespace, lease)
        except Exception as exc:  # best effort on the way out
            log.info("could not release lease %s/%s: %s", self.namespace, self.name, exc)
        if self.on_stopped_leading:
            self.on_stopped_leading()
