"""Which held GPU devices are measured idle: the measurement side of demand-driven MIG rebalancing.

Pure (no I/O): the caller reads the activity (PrometheusClient.pod_engine_activity) and the pods that hold
devices (the cluster), so a measurement source that is down never reaches this decision as "idle". It sits
beside the other functions of DCGM series in kgwe.cost and is part of the pure core (import-linter).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping


def reclaimable_pods(
    activity: Mapping[tuple[str, str], float], held: Iterable[tuple[str, str]], threshold: float
) -> frozenset[tuple[str, str]]:
    """The held (namespace, pod)s whose mean engine activity (0..1) is below `threshold` (0..1).

    A pod without a measurement (no series, or NaN) is not reclaimable: unknown is never idle, so missing
    data can only keep capacity where it is, never take it from a pod that may be working.
    """
    if not 0.0 <= threshold <= 1.0:  # also rejects NaN, which would silently make nothing reclaimable
        raise ValueError(f"utilization threshold must be within 0..1, got {threshold!r}")
    out = set()
    for key in held:
        value = activity.get(key)
        if value is not None and math.isfinite(value) and value < threshold:
            out.add(key)
    return frozenset(out)
