"""The controller's leader keeps KGWE's own certificates: reads the Secrets, lets kgwe.certs.rotation decide,
writes what it says, and puts the CA bundle into the admission webhook configuration's caBundle.

So `helm install` needs no openssl, no hand-made Secret and no `kubectl patch`: the webhook's pods mount the
Secret (optional, so they start before it exists and wait, not Ready, without crash-looping) and reread it
when the kubelet refreshes it. The kubelet fills an optional Secret volume that appeared after the pod
started only at its next periodic sync (about a minute); so when a Secret is created (not renewed), the
Deployment whose pods wait for it gets a new pod-template annotation, and its new pods mount the Secret at
once. Writes are server-side applies with field manager kgwe-controller, each checked against the Lease
first; a Secret KGWE writes is owned by the kgwe-controller Deployment when that exists, so `helm uninstall`
removes the certificates and the CA key with it. Only the leader runs this.

Order matters for a rotation: the CA's Secret (new CA, bundle with the old one), then the caBundle, then
the certificates: at every moment each client trusts the CA of the certificate its server presents.
"""

from __future__ import annotations

import base64
import datetime as dt
import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from kgwe.certs.rotation import CertPlan, Lifetimes, Stored, Wanted, plan
from kgwe.cluster.events import EventRecorder
from kgwe.errors import KgweError
from kgwe.runtime.errors import is_not_found
from kgwe.runtime.leader import NotLeader
from kgwe.timestamps import format_rfc3339
from kgwe.vocab import (
    CA_SECRET,
    CERTIFICATE_ISSUED_ANNOTATION,
    CERTIFICATES_FIELD_MANAGER,
    CONTROLLER_DEPLOYMENT,
    CONTROLLER_SERVICE,
    EXTENDER_CLIENT_SECRET,
    EXTENDER_DEPLOYMENT,
    EXTENDER_SERVICE,
    EXTENDER_TLS_SECRET,
    FIELD_MANAGER,
    MANAGED_BY_LABEL,
    MANAGED_BY_VALUE,
    METRICS_TLS_SECRET,
    SCHEDULER_DEPLOYMENT,
    SCHEDULER_NAME,
    WEBHOOK_CONFIGURATION,
    WEBHOOK_DEPLOYMENT,
    WEBHOOK_SERVICE,
    WEBHOOK_TLS_SECRET,
)

log = logging.getLogger(__name__)

# What `--certificates` may name: the admission webhook, the standalone extender's mutual TLS, and the
# controller's and the extender's /metrics over TLS (kgwe.httpd.metrics_port).
COMPONENTS = ("webhook", "extender", "metrics")
# The Deployment whose pods mount each Secret (and wait for it when it does not exist yet).
MOUNTED_BY = {
    WEBHOOK_TLS_SECRET: WEBHOOK_DEPLOYMENT,
    EXTENDER_TLS_SECRET: EXTENDER_DEPLOYMENT,
    EXTENDER_CLIENT_SECRET: SCHEDULER_DEPLOYMENT,
}
SYNC_PERIOD_SECONDS = 30.0
_APPLY = "application/apply-patch+yaml"


def service_dns_names(service: str, namespace: str) -> tuple[str, ...]:
    """Every name a client inside the cluster may use for a Service (the API server uses `svc`)."""
    return (
        service,
        f"{service}.{namespace}",
        f"{service}.{namespace}.svc",
        f"{service}.{namespace}.svc.cluster.local",
    )


def wanted_certificates(components: Sequence[str], namespace: str) -> list[Wanted]:
    """The certificates the named components need, for Services in `namespace`."""
    unknown = sorted(set(components) - set(COMPONENTS))
    if unknown:
        raise KgweError(
            f"unknown certificate component(s) {', '.join(unknown)} (known: {', '.join(COMPONENTS)})"
        )
    out = []
    if "webhook" in components:
        out.append(
            Wanted(
                WEBHOOK_TLS_SECRET,
                f"{WEBHOOK_SERVICE}.{namespace}.svc",
                "server",
                service_dns_names(WEBHOOK_SERVICE, namespace),
            )
        )
    if "extender" in components:
        out.append(
            Wanted(
                EXTENDER_TLS_SECRET,
                f"{EXTENDER_SERVICE}.{namespace}.svc",
                "server",
                service_dns_names(EXTENDER_SERVICE, namespace),
            )
        )
        out.append(Wanted(EXTENDER_CLIENT_SECRET, SCHEDULER_NAME, "client"))
    if "metrics" in components:
        # one certificate for both Services Prometheus scrapes (it checks either name against it); their pods
        # take it at the kubelet's next sync of the optional volume: nothing waits on it, none is rolled
        out.append(
            Wanted(
                METRICS_TLS_SECRET,
                f"{CONTROLLER_SERVICE}.{namespace}.svc",
                "server",
                service_dns_names(CONTROLLER_SERVICE, namespace)
                + service_dns_names(EXTENDER_SERVICE, namespace),
            )
        )
    return out


@dataclass(frozen=True)
class CertSync:
    """One pass: the Secrets written (name: why), whether the caBundle was patched, and the Deployments
    rolled so that their pods mount a Secret that did not exist before."""

    written: dict[str, str]
    ca_bundle_patched: bool
    rolled: tuple[str, ...] = ()


def _decode(data: dict[str, str] | None) -> dict[str, bytes]:
    out = {}
    for key, value in (data or {}).items():
        try:
            out[key] = base64.b64decode(value, validate=True)
        except ValueError:
            out[key] = b""  # unreadable: rotation treats it as missing
    return out


class CertificateKeeper:
    def __init__(
        self,
        api_client: client.ApiClient,
        namespace: str,
        components: Sequence[str],
        *,
        guard: Callable[[], bool] = lambda: True,
        recorder: EventRecorder | None = None,
        lifetimes: Lifetimes | None = None,
        now: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.UTC),
        webhook_configuration: str = WEBHOOK_CONFIGURATION,
    ) -> None:
        self.core = client.CoreV1Api(api_client)
        self.apps = client.AppsV1Api(api_client)
        self.admission = client.AdmissionregistrationV1Api(api_client)
        self.namespace = namespace
        self.components = tuple(components)
        self.wanted = wanted_certificates(self.components, namespace)
        self.guard = guard
        self.recorder = recorder
        self.lifetimes = lifetimes or Lifetimes()
        self.now = now
        self.webhook_configuration = webhook_configuration
        self.wake = threading.Event()  # set to sync at once (leadership gained)
        self.last_error: str | None = None

    # -- reading -------------------------------------------------------------------------------------------
    def _stored(self, name: str) -> Stored | None:
        try:
            secret = self.core.read_namespaced_secret(name, self.namespace)
        except ApiException as exc:
            if is_not_found(exc):
                return None
            raise
        return Stored(_decode(secret.data), dict(secret.metadata.annotations or {}))

    def _owner(self) -> list[dict[str, Any]]:
        """The kgwe-controller Deployment as owner of the Secrets (none when it does not exist)."""
        try:
            deployment = self.apps.read_namespaced_deployment(CONTROLLER_DEPLOYMENT, self.namespace)
        except ApiException as exc:
            if exc.status in (403, 404):
                return []
            raise
        return [
            {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "name": CONTROLLER_DEPLOYMENT,
                "uid": deployment.metadata.uid,
            }
        ]

    # -- writing -------------------------------------------------------------------------------------------
    def _check_leader(self) -> None:
        if not self.guard():
            raise NotLeader("lost leadership; stopping before the next certificate write")

    def _write(
        self, name: str, data: dict[str, bytes], annotations: dict[str, str], owners: list[dict[str, Any]]
    ) -> None:
        self._check_leader()
        metadata: dict[str, Any] = {
            "name": name,
            "namespace": self.namespace,
            "labels": {MANAGED_BY_LABEL: MANAGED_BY_VALUE, "app.kubernetes.io/component": "certificates"},
            "annotations": annotations,
        }
        if owners:
            metadata["ownerReferences"] = owners
        body = {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": metadata,
            "type": "kubernetes.io/tls",
            "data": {k: base64.b64encode(v).decode() for k, v in data.items()},
        }
        self.core.patch_namespaced_secret(
            name, self.namespace, body, field_manager=FIELD_MANAGER, force=True, _content_type=_APPLY
        )

    def _patch_ca_bundle(self, bundle: bytes) -> bool:
        """Put `bundle` into every webhook of the configuration that calls our webhook Service."""
        if "webhook" not in self.components:
            return False
        try:
            config = self.admission.read_mutating_webhook_configuration(self.webhook_configuration)
        except ApiException as exc:
            if is_not_found(exc):
                log.info("no MutatingWebhookConfiguration %s: caBundle not set", self.webhook_configuration)
                return False
            raise
        encoded = base64.b64encode(bundle).decode()
        names = []
        for hook in config.webhooks or []:
            service = hook.client_config.service if hook.client_config else None
            if service is None or service.name != WEBHOOK_SERVICE or service.namespace != self.namespace:
                continue
            names.append((hook.name, hook.client_config.ca_bundle))
        if all(current == encoded for _, current in names):
            return False
        self._check_leader()
        body = {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "MutatingWebhookConfiguration",
            "metadata": {"name": self.webhook_configuration},
            "webhooks": [{"name": name, "clientConfig": {"caBundle": encoded}} for name, _ in names],
        }
        self.admission.patch_mutating_webhook_configuration(
            self.webhook_configuration, body, field_manager=FIELD_MANAGER, force=True, _content_type=_APPLY
        )
        return True

    def _roll(self, deployment: str, secret: str, stamp: str) -> bool:
        """A new pod-template annotation on `deployment` (its pods then mount `secret` now); False when the
        Deployment does not exist (a component not installed, or deployed under another name)."""
        try:
            self.apps.read_namespaced_deployment(deployment, self.namespace)
        except ApiException as exc:
            if exc.status in (403, 404):
                return False
            raise
        self._check_leader()
        body = {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": deployment, "namespace": self.namespace},
            "spec": {"template": {"metadata": {"annotations": {CERTIFICATE_ISSUED_ANNOTATION: stamp}}}},
        }
        self.apps.patch_namespaced_deployment(
            deployment,
            self.namespace,
            body,
            field_manager=CERTIFICATES_FIELD_MANAGER,
            force=True,
            _content_type=_APPLY,
        )
        log.info(
            "Deployment %s/%s rolled: its pods mount the new Secret %s", self.namespace, deployment, secret
        )
        return True

    # -- one pass ------------------------------------------------------------------------------------------
    def _read_all(self) -> dict[str, Stored | None]:
        return {name: self._stored(name) for name in [CA_SECRET, *(w.secret for w in self.wanted)]}

    def plan(self) -> CertPlan:
        return plan(self.now(), CA_SECRET, self._read_all(), self.wanted, self.lifetimes)

    def sync(self) -> CertSync:
        """Issue, renew or rotate what needs it, then keep the caBundle equal to the bundle."""
        stored = self._read_all()
        todo = plan(self.now(), CA_SECRET, stored, self.wanted, self.lifetimes)
        owners = self._owner() if todo.writes else []
        written: dict[str, str] = {}
        ca_write = [w for w in todo.writes if w.name == CA_SECRET]
        for write in ca_write:  # first: the bundle everyone trusts must hold the new CA before it signs
            self._write(write.name, write.data, write.annotations, owners)
            written[write.name] = write.reason
        patched = self._patch_ca_bundle(todo.bundle)
        rolled = []
        for write in todo.writes:
            if write.name == CA_SECRET:
                continue
            self._write(write.name, write.data, write.annotations, owners)
            written[write.name] = write.reason
            deployment = MOUNTED_BY.get(write.name)
            if stored.get(write.name) is None and deployment is not None:  # created, not renewed
                stamp = format_rfc3339(self.now())
                if self._roll(deployment, write.name, stamp):
                    rolled.append(deployment)
        for name, reason in written.items():
            log.info("Secret %s/%s written: %s", self.namespace, name, reason)
            if self.recorder is not None:
                involved = {
                    "apiVersion": "v1",
                    "kind": "Secret",
                    "metadata": {"name": name, "namespace": self.namespace},
                }
                self.recorder.normal(involved, "CertificateIssued", reason)
        return CertSync(written, patched, tuple(rolled))

    def run(
        self,
        stop: threading.Event,
        is_leader: Callable[[], bool],
        period_seconds: float = SYNC_PERIOD_SECONDS,
    ) -> None:
        """Sync every `period_seconds` while leading (and at once when `wake` is set) until `stop`."""
        while not stop.is_set():
            if is_leader():
                try:
                    self.sync()
                    self.last_error = None
                except NotLeader:
                    pass
                except ApiException as exc:
                    self.last_error = f"{exc.status} {exc.reason}"
                    log.warning("certificates not synced: %s %s", exc.status, exc.reason)
                except Exception as exc:  # never let the loop die: the next pass retries
                    self.last_error = f"{type(exc).__name__}: {exc}"
                    log.exception("certificates not synced")
            self.wake.wait(period_seconds)
            self.wake.clear()

    def start(self, stop: threading.Event, is_leader: Callable[[], bool]) -> threading.Thread:
        thread = threading.Thread(target=self.run, args=(stop, is_leader), name="certificates", daemon=True)
        thread.start()
        return thread
