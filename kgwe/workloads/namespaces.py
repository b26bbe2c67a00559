"""Namespaces that opt in to GPUWorkloads, and the controller's rights in them.

A GPUWorkload runs only in a namespace labelled kgwe.nvidia.io/workloads=enabled that is neither
Kubernetes' own (kube-*) nor KGWE's. In each such namespace the controller binds the chart's ClusterRole
kgwe-workload-writer (create Jobs, Deployments, Services, PodGroups) to itself with the RoleBinding
kgwe-workloads, and deletes that binding when the label goes: its rights to create pods' owners follow the
opt-in instead of covering the cluster. The API server holds it to that (the chart's admission policy
kgwe-controller-rolebindings): from the controller it accepts only that binding, to itself, in a labelled
namespace.

The namespaces come from a watch (label-selected: a namespace losing the label arrives as DELETED); only the
leader writes bindings, from the worker thread, before it reconciles workloads.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from kgwe.policy.admission import namespace_refusal
from kgwe.policy.quota_namespaces import protected_namespace
from kgwe.runtime.cluster import Cluster
from kgwe.runtime.kinds import NAMESPACE, ROLE_BINDING
from kgwe.runtime.kube import as_cluster
from kgwe.vocab import (
    MANAGED_BY_LABEL,
    MANAGED_BY_VALUE,
    WORKLOAD_ROLEBINDING,
    WORKLOAD_WRITER_CLUSTERROLE,
    WORKLOADS_ENABLED,
    WORKLOADS_NAMESPACE_LABEL,
)

log = logging.getLogger(__name__)

RBAC_GROUP = ROLE_BINDING.group
SERVICE_ACCOUNT_PREFIX = "system:serviceaccount:"
RETRY_SECONDS = 10.0  # after a failed sync (the API server away, a binding refused)


def binding_subject(username: str) -> dict[str, str]:
    """The RBAC subject for the user the API server says we are (a ServiceAccount in a pod)."""
    if username.startswith(SERVICE_ACCOUNT_PREFIX):
        namespace, _, name = username[len(SERVICE_ACCOUNT_PREFIX) :].partition(":")
        return {"kind": "ServiceAccount", "name": name, "namespace": namespace}
    return {"kind": "User", "apiGroup": RBAC_GROUP, "name": username}


def role_binding(namespace: str, subject: dict[str, str]) -> dict[str, Any]:
    """The RoleBinding granting the workload writer role to the controller in `namespace`."""
    return {
        "apiVersion": ROLE_BINDING.api_version,
        "kind": ROLE_BINDING.kind,
        "metadata": {
            "name": WORKLOAD_ROLEBINDING,
            "namespace": namespace,
            "labels": {MANAGED_BY_LABEL: MANAGED_BY_VALUE},
        },
        "roleRef": {"apiGroup": RBAC_GROUP, "kind": "ClusterRole", "name": WORKLOAD_WRITER_CLUSTERROLE},
        "subjects": [subject],
    }


class NamespaceGrants:
    """Which namespaces opted in (every replica knows), and their RoleBindings (the leader writes them)."""

    def __init__(
        self,
        cluster: Cluster | client.ApiClient,
        *,
        kgwe_namespace: str,
        on_enabled: Callable[[str], None] = lambda namespace: None,
    ) -> None:
        self.cluster = as_cluster(cluster)
        self.kgwe_namespace = kgwe_namespace
        self.on_enabled = on_enabled  # a namespace just opted in: its waiting workloads deserve a look
        self._lock = threading.Lock()
        self._enabled: set[str] = set()
        self._pending: set[str] = set()  # namespaces whose binding must follow a change
        self._everywhere = False  # a listing arrived (or leadership): all bindings must match it
        self._retry_at = 0.0
        self._subject: dict[str, str] | None = None
        self.listed = threading.Event()

    # -- what workloads may do -------------------------------------------------------------------------
    def enabled(self) -> frozenset[str]:
        """The namespaces that opted in, as the watch last saw them."""
        with self._lock:
            return frozenset(self._enabled)

    def refused(self, namespace: str) -> str | None:
        """Why no GPUWorkload may run in `namespace`; None when it may (kgwe.policy.admission)."""
        return namespace_refusal(namespace, self.enabled(), self.kgwe_namespace)

    # -- following namespaces ------------------------------------------------------------------------
    def run(self, stop: threading.Event, watch_timeout_seconds: int) -> None:
        self.cluster.watch(
            NAMESPACE,
            on_list=self._listed,
            on_event=self._changed,
            stop=stop,
            labels=f"{WORKLOADS_NAMESPACE_LABEL}={WORKLOADS_ENABLED}",
            timeout_seconds=watch_timeout_seconds,
        )

    def _listed(self, items: Sequence[dict[str, Any]]) -> None:
        names = {i["metadata"]["name"] for i in items if opted_in(i)}
        with self._lock:
            new = names - self._enabled
            self._enabled = names
            self._everywhere = True
        for name in sorted(new):
            self.on_enabled(name)
        self.listed.set()

    def _changed(self, kind: str, obj: dict[str, Any]) -> None:
        name = obj["metadata"]["name"]
        on = kind != "DELETED" and opted_in(obj)
        with self._lock:
            was = name in self._enabled
            if on:
                self._enabled.add(name)
            else:
                self._enabled.discard(name)
            if on != was:
                self._pending.add(name)
        if on and not was:
            self.on_enabled(name)

    # -- the leader's writes -------------------------------------------------------------------------
    def resync(self) -> None:
        """Check every binding on the next sync (on becoming leader)."""
        with self._lock:
            self._everywhere = True

    def sync(self) -> None:
        """Make the RoleBindings follow the opted-in namespaces: what changed since the last call, or all of
        them after a listing. Failures are retried after RETRY_SECONDS; never raises."""
        if time.monotonic() < self._retry_at:
            return
        with self._lock:
            everywhere, pending, enabled = self._everywhere, self._pending, set(self._enabled)
            self._everywhere, self._pending = False, set()
        if not everywhere and not pending:
            return
        wanted = {ns for ns in enabled if protected_namespace(ns, self.kgwe_namespace) is None}
        try:
            if everywhere:
                self._sync_all(wanted)
            else:
                for ns in sorted(pending):
                    if ns in wanted:
                        self._bind(ns)
                    else:
                        self._unbind(ns)
        except ApiException as exc:
            log.warning(
                "workload namespaces: RoleBinding sync failed (%s %s); retrying", exc.status, exc.reason
            )
            with self._lock:
                self._everywhere |= everywhere
                self._pending |= pending
            self._retry_at = time.monotonic() + RETRY_SECONDS

    def _sync_all(self, wanted: set[str]) -> None:
        subject = self.subject()
        listing = self.cluster.list(ROLE_BINDING, fields=f"metadata.name={WORKLOAD_ROLEBINDING}")
        bound = {rb["metadata"]["namespace"]: rb for rb in listing}
        for ns, rb in sorted(bound.items()):
            if ns not in wanted and ours(rb["metadata"].get("labels")):
                self._unbind(ns)
        for ns in sorted(wanted):
            held = bound.get(ns)
            current = held is not None and ours(held["metadata"].get("labels")) and _grants(held, subject)
            if not current:
                self._bind(ns)

    def subject(self) -> dict[str, str]:
        """Who the controller is, as the API server authenticates it (a SelfSubjectReview)."""
        if self._subject is None:
            self._subject = binding_subject(self.cluster.username())
        return self._subject

    def _bind(self, namespace: str) -> None:
        self.cluster.apply(role_binding(namespace, self.subject()))
        log.info("workload namespaces: %s opted in; bound %s", namespace, WORKLOAD_WRITER_CLUSTERROLE)

    def _unbind(self, namespace: str) -> None:
        rb = self.cluster.get(ROLE_BINDING, WORKLOAD_ROLEBINDING, namespace)
        if rb is not None and ours(rb["metadata"].get("labels")):
            self.cluster.delete(ROLE_BINDING, WORKLOAD_ROLEBINDING, namespace)
            log.info("workload namespaces: %s left; removed its RoleBinding", namespace)


def opted_in(namespace: Mapping[str, Any]) -> bool:
    """A namespace (as the API server lists it) opted in and is not being deleted."""
    meta = namespace.get("metadata") or {}
    labels = meta.get("labels") or {}
    return labels.get(WORKLOADS_NAMESPACE_LABEL) == WORKLOADS_ENABLED and not meta.get("deletionTimestamp")


def ours(labels: Mapping[str, str] | None) -> bool:
    """The labels of a RoleBinding this controller wrote (it never touches another of that name)."""
    return (labels or {}).get(MANAGED_BY_LABEL) == MANAGED_BY_VALUE


def _grants(rb: Mapping[str, Any], subject: dict[str, str]) -> bool:
    """The binding grants exactly the writer role to exactly us (anything else is re-applied)."""
    ref = rb.get("roleRef") or {}
    subjects = [
        {k: s[k] for k in ("kind", "name", "namespace") if s.get(k)} for s in rb.get("subjects") or []
    ]
    want = {k: v for k, v in subject.items() if k != "apiGroup"}
    return (
        ref.get("kind") == "ClusterRole"
        and ref.get("name") == WORKLOAD_WRITER_CLUSTERROLE
        and subjects == [want]
    )
