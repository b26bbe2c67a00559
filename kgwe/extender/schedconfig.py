"""The kube-scheduler side of the extender: the `extenders:` entry and a KubeSchedulerConfiguration using it.

Choices (reference Part A):
- `nodeCacheCapable: true`: only node names travel (kubernetes#72634: full Node lists made extenders slow),
  and it avoids the nodeCacheCapable=false scoring regression (kubernetes#141781).
- `managedResources`: only pods asking for NVIDIA resources reach the extender. `nvidia.com/gpu` and MIG
  resources stay checked by the scheduler too (`ignoredByScheduler: false`); `nvidia.com/gpu.shared` is
  accounted by KGWE alone per physical GPU (`ignoredByScheduler: true`), so it works whether or not a
  time-slicing device plugin advertises replicas.
- `percentageOfNodesToScore: 100`: otherwise the scheduler stops after a sample of feasible nodes and the
  extender never sees the best GPU set in a large cluster (A4).
- `prioritizeVerb` stays set although the default profile decides GPU pods in filter (then kube-scheduler,
  left one node, skips prioritize): pods with soft preferences, and profiles with `decideInFilter: false`,
  are still scored there.
- `ignorable` comes from the profile. false (default) = fail closed: while the extender is down GPU pods
  wait (FailedScheduling, retried with backoff) instead of landing on a node whose GPUs are taken by shares
  the scheduler cannot see. true = fail open: GPU pods keep scheduling on the scheduler's own counts, which
  is fine for whole-GPU-only clusters but can over-commit shared GPUs and ignores topology.
"""

from __future__ import annotations

from typing import Any

from kgwe.extender.profile import DEFAULT_PROFILE, Profile

SCHEDULER_API_VERSION = "kubescheduler.config.k8s.io/v1"


def _mig_resources() -> list[str]:
    try:
        from kgwe.gpu.catalog import all_models
    except ImportError:  # pragma: no cover
        return []
    names = {p.resource_name for m in all_models() for p in m.profiles.values()}
    return sorted(names)


def extender_entry(url_prefix: str, profile: Profile = DEFAULT_PROFILE) -> dict[str, Any]:
    managed = [
        {"name": "nvidia.com/gpu", "ignoredByScheduler": False},
        {"name": "nvidia.com/gpu.shared", "ignoredByScheduler": True},
    ]
    managed += [{"name": r, "ignoredByScheduler": False} for r in _mig_resources()]
    return {
        "urlPrefix": url_prefix.rstrip("/"),
        "filterVerb": "filter",
        "prioritizeVerb": "prioritize",
        "weight": max(1, int(profile.weight)),
        "nodeCacheCapable": True,
        "enableHTTPS": url_prefix.startswith("https://"),
        "httpTimeout": profile.http_timeout,
        "ignorable": bool(profile.ignorable),
        "managedResources": managed,
    }


def scheduler_configuration(
    url_prefix: str, profile: Profile = DEFAULT_PROFILE, **extra: Any
) -> dict[str, Any]:
    config: dict[str, Any] = {
        "apiVersion": SCHEDULER_API_VERSION,
        "kind": "KubeSchedulerConfiguration",
        "percentageOfNodesToScore": 100,
        "extenders": [extender_entry(url_prefix, profile)],
    }
    config.update(extra)
    return config
