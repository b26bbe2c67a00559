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

from collections.abc import Mapping
from dataclasses import dataclass

from kgwe.render.scheduler_config import config_hash, config_problem
from kgwe.runtime.cluster import Cluster
from kgwe.runtime.kinds import CONFIG_MAP, DEPLOYMENT
from kgwe.runtime.leader import Gate, check
from kgwe.vocab import (
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
        cluster: Cluster,
        namespace: str,
        *,
        guard: Gate | None = None,
        scheduler_name: str = SCHEDULER_NAME,
    ) -> None:
        self.cluster = cluster
        self.namespace = namespace
        self.guard = guard
        self.scheduler_name = scheduler_name
        self.writes = 0
        self.stamp: Mapping[str, str] = {}  # annotations the restarted Deployment gets (the pass's commit)

    def _config_text(self) -> str | None:
        cm = self.cluster.get(CONFIG_MAP, SCHEDULER_CONFIGMAP, self.namespace)
        return None if cm is None else (cm.get("data") or {}).get(SCHEDULER_CONFIG_KEY)

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
        deployment = self.cluster.get(DEPLOYMENT, SCHEDULER_DEPLOYMENT, self.namespace)
        if deployment is None:
            return SchedulerSync("no-deployment", f"no Deployment {SCHEDULER_DEPLOYMENT} to restart", digest)
        template = (deployment.get("spec") or {}).get("template") or {}
        current = ((template.get("metadata") or {}).get("annotations") or {}).get(
            SCHEDULER_CONFIG_HASH_ANNOTATION
        )
        if current == digest:
            return SchedulerSync("unchanged", f"{SCHEDULER_DEPLOYMENT} runs configuration {digest}", digest)
        check(self.guard)
        body = {
            "apiVersion": DEPLOYMENT.api_version,
            "kind": DEPLOYMENT.kind,
            "metadata": {
                "name": SCHEDULER_DEPLOYMENT,
                "namespace": self.namespace,
                **({"annotations": dict(self.stamp)} if self.stamp else {}),
            },
            "spec": {"template": {"metadata": {"annotations": {SCHEDULER_CONFIG_HASH_ANNOTATION: digest}}}},
        }
        self.cluster.apply(body)
        self.writes += 1
        return SchedulerSync(
            "restarted",
            f"{SCHEDULER_DEPLOYMENT} restarted for configuration {digest} (was {current})",
            digest,
        )
