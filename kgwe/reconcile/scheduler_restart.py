"""Restart the KGWE scheduler when its rendered configuration changes.

kube-scheduler never rereads its configuration file. After a reconcile applied `kgwe-scheduler-config`,
the controller reads that ConfigMap back (what new scheduler pods will mount), checks it, and sets its hash
as the pod-template annotation `kgwe.nvidia.io/scheduler-config-hash` of the kgwe-scheduler Deployment:
a changed hash makes the Deployment roll its pods. The write is a server-side apply of that one
annotation (and, on the Deployment, the stamp of the policy commit that caused it) with field manager
kgwe-controller, so KGWE owns nothing else of a Deployment the platform
team deploys (kubectl, Argo CD and Flux keep owning the rest). A cluster without the Deployment (the
extender configured into the default scheduler instead) needs nothing here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from kgwe.cluster.apply import NotLeader
from kgwe.render.scheduler_config import config_hash, config_problem
from kgwe.vocab import (
    FIELD_MANAGER,
    SCHEDULER_CONFIG_HASH_ANNOTATION,
    SCHEDULER_CONFIG_KEY,
    SCHEDULER_CONFIGMAP,
    SCHEDULER_DEPLOYMENT,
    SCHEDULER_NAME,
)


@dataclass(frozen=True)
class SchedulerSync:
    """What happened: restarted / unchanged / no-deployment / invalid (`message` says why)."""

    outcome: str
    message: str
    config_hash: str | None = None


class SchedulerRestarter:
    def __init__(
        self,
        api_client: client.ApiClient,
        namespace: str,
        *,
        guard: Callable[[], bool] | None = None,
        scheduler_name: str = SCHEDULER_NAME,
    ) -> None:
        self.core = client.CoreV1Api(api_client)
        self.apps = client.AppsV1Api(api_client)
        self.namespace = namespace
        self.guard = guard
        self.scheduler_name = scheduler_name
        self.writes = 0
        self.stamp: Mapping[str, str] = {}  # annotations the restarted Deployment gets (the pass's commit)

    def _config_text(self) -> str | None:
        try:
            cm = self.core.read_namespaced_config_map(SCHEDULER_CONFIGMAP, self.namespace)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        return (cm.data or {}).get(SCHEDULER_CONFIG_KEY)

    def sync(self) -> SchedulerSync:
        where = f"ConfigMap {self.namespace}/{SCHEDULER_CONFIGMAP}"
        text = self._config_text()
        problem = config_problem(text, self.scheduler_name) if text is not None else None
        if text is None:
            problem = f"is missing (or has no key {SCHEDULER_CONFIG_KEY})"
        if problem:
            return SchedulerSync(
                "invalid", f"{where} {problem}; the KGWE scheduler keeps its running configuration"
            )
        assert text is not None
        digest = config_hash(text)
        try:
            deployment = self.apps.read_namespaced_deployment(SCHEDULER_DEPLOYMENT, self.namespace)
        except ApiException as exc:
            if exc.status == 404:
                return SchedulerSync(
                    "no-deployment", f"no Deployment {SCHEDULER_DEPLOYMENT} to restart", digest
                )
            raise
        template_meta = deployment.spec.template.metadata
        current = ((template_meta.annotations if template_meta else None) or {}).get(
            SCHEDULER_CONFIG_HASH_ANNOTATION
        )
        if current == digest:
            return SchedulerSync("unchanged", f"{SCHEDULER_DEPLOYMENT} runs configuration {digest}", digest)
        if self.guard is not None and not self.guard():
            raise NotLeader("lost leadership; stopping before the next write")
        body = {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {
                "name": SCHEDULER_DEPLOYMENT,
                "namespace": self.namespace,
                **({"annotations": dict(self.stamp)} if self.stamp else {}),
            },
            "spec": {"template": {"metadata": {"annotations": {SCHEDULER_CONFIG_HASH_ANNOTATION: digest}}}},
        }
        self.apps.patch_namespaced_deployment(
            SCHEDULER_DEPLOYMENT,
            self.namespace,
            body,
            field_manager=FIELD_MANAGER,
            force=True,
            _content_type="application/apply-patch+yaml",
        )
        self.writes += 1
        return SchedulerSync(
            "restarted",
            f"{SCHEDULER_DEPLOYMENT} restarted for configuration {digest} (was {current})",
            digest,
        )
