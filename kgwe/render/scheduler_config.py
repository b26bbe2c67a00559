"""Is a KubeSchedulerConfiguration fit to restart the KGWE scheduler with, and its hash. Pure.

kube-scheduler reads its configuration once, at start. The controller restarts the kgwe-scheduler
Deployment (a new pod-template annotation) only for a configuration that this check accepts, so a
missing or malformed `kgwe-scheduler-config` leaves the running scheduler as it is and the reason goes to
the PolicyRepository's status. The check is what would make the new pods fail or misbehave: not YAML, not
a v1 KubeSchedulerConfiguration, no profile with our schedulerName, no extender, or leader election on the
default scheduler's Lease (two schedulers would then take turns instead of both running).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping

from kgwe.vocab import SCHEDULER_NAME

API_VERSION = "kubescheduler.config.k8s.io/v1"
KIND = "KubeSchedulerConfiguration"
DEFAULT_LEASE = "kube-scheduler"
MAX_CONFIG_BYTES = 1024 * 1024  # a ConfigMap holds at most 1 MiB


def config_hash(text: str) -> str:
    """The value of the Deployment's hash annotation for this configuration text."""
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def config_problem(text: str | None, scheduler_name: str = SCHEDULER_NAME) -> str | None:
    """Why `text` must not be rolled out to the KGWE scheduler, or None when it may."""
    if text is None:
        return "has no KubeSchedulerConfiguration"
    if len(text.encode()) > MAX_CONFIG_BYTES:
        return f"is larger than {MAX_CONFIG_BYTES} bytes"
    from kgwe.policy.yaml_source import YamlSyntaxError, load_one

    try:
        doc = load_one(text, max_bytes=MAX_CONFIG_BYTES)
    except YamlSyntaxError as exc:
        return f"is not valid YAML (line {exc.line}): {exc}"
    if not isinstance(doc, Mapping):
        return "is not a YAML mapping"
    if doc.get("apiVersion") != API_VERSION or doc.get("kind") != KIND:
        return (
            f"is not a {API_VERSION} {KIND} (apiVersion {doc.get('apiVersion')!r}, kind {doc.get('kind')!r})"
        )
    profiles = doc.get("profiles")
    names = (
        [p.get("schedulerName") for p in profiles if isinstance(p, Mapping)]
        if isinstance(profiles, list)
        else []
    )
    if scheduler_name not in names:
        return f"has no profile with schedulerName {scheduler_name!r} (profiles: {names or 'none'})"
    extenders = doc.get("extenders")
    if not isinstance(extenders, list) or not extenders:
        return "calls no extender (extenders is empty)"
    for i, ext in enumerate(extenders):
        if not isinstance(ext, Mapping) or not isinstance(ext.get("urlPrefix"), str) or not ext["urlPrefix"]:
            return f"extenders[{i}].urlPrefix is missing"
    election = doc.get("leaderElection")
    if isinstance(election, Mapping) and election.get("leaderElect", True):
        lease = election.get("resourceName") or DEFAULT_LEASE
        if lease == DEFAULT_LEASE:
            return f"elects its leader on the default scheduler's Lease {DEFAULT_LEASE!r}"
    elif election is None:
        return f"elects its leader on the default scheduler's Lease {DEFAULT_LEASE!r} (no leaderElection)"
    return None
