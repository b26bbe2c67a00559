"""What the cost advice needs to know of a GPUWorkload, as plain data, and which metered pods are its own.

Metering records pods by name, and the controller names them after their workload: a batch run's pods
`<workload>-r<run>-<role>-<index>-<suffix>` (Indexed Jobs named by
`kgwe.policy.workload_resolution.child_name`), a serving workload's `<workload>-<role>-<hash>-<suffix>` (a
Deployment per role). So a pod's name tells its workload and, for batch kinds, the run (attempt) it belongs
to. Pure: GPUWorkload objects in, plain data out.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from fractions import Fraction
from typing import Any

from pydantic import ValidationError

from kgwe.cost.pricing import PriceBook
from kgwe.cost.usage import MIG, SHARED, WHOLE
from kgwe.errors import KgweError
from kgwe.runtime.conditions import find
from kgwe.timestamps import parse_rfc3339

PodKey = tuple[str, str]  # (namespace, pod)
_RUN_MARK = re.compile(r"-(?=r\d+-)")  # where a batch pod's workload name may end (lookahead: overlaps found)


@dataclass(frozen=True)
class RoleFacts:
    """One role's pods and what each pod holds (kinds of kgwe.cost.usage)."""

    name: str
    replicas: int
    kind: str
    count: int
    mig_profile: str | None = None
    gpu_milli: int | None = None


@dataclass(frozen=True)
class WorkloadFacts:
    namespace: str
    name: str
    workload_type: str
    batch: bool
    roles: tuple[RoleFacts, ...]
    max_retries: int
    checkpoint_interval_seconds: int | None = None
    phase: str = ""
    run: int = 0
    created_at: datetime | None = None
    completed_at: datetime | None = None  # when the Complete condition turned True

    @property
    def pods(self) -> int:
        return sum(r.replicas for r in self.roles)

    def gpus(self, book: PriceBook, product: str) -> Fraction:
        """GPUs (priced shares of physical GPUs of `product`) all its pods hold while it runs."""
        return sum(
            (
                r.replicas * r.count * book.gpu_share(product, r.kind, r.mig_profile, r.gpu_milli)
                for r in self.roles
            ),
            Fraction(0),
        )

    def pod_pattern(self) -> re.Pattern[str]:
        """Names of the pods the controller's children create; a batch pod's run is the group `run`."""
        return pod_pattern(self.name, [r.name for r in self.roles], self.batch)


def pod_pattern(workload: str, roles: Iterable[str], batch: bool) -> re.Pattern[str]:
    """Names of the pods KGWE's children create: Job pods `<wl>-r<run>-<role>-<index>-<suffix>` (the run as
    group `run`), Deployment pods `<wl>-<role>-<hash>-<suffix>`."""
    names = "|".join(re.escape(role) for role in roles)
    if batch:  # Jobs kgwe.policy.workload_resolution.child_name(workload, run, role); pods add index, suffix
        return re.compile(f"^{re.escape(workload)}-r(?P<run>\\d+)-(?:{names})-\\d+-[a-z0-9]+$")
    return re.compile(f"^{re.escape(workload)}-(?:{names})-[a-z0-9]+-[a-z0-9]+$")


def facts_from_object(obj: Mapping[str, Any]) -> WorkloadFacts:
    """A GPUWorkload as the API returns it; KgweError when it is not one KGWE can read."""
    from kgwe.policy.gpu_workload import GPUWorkload

    meta = obj.get("metadata") or {}
    where = f"GPUWorkload {meta.get('namespace', '?')}/{meta.get('name', '?')}"
    try:
        wl = GPUWorkload.model_validate(obj)
    except ValidationError as exc:
        raise KgweError(f"{where}: not readable ({exc.error_count()} error(s))") from None
    if wl.metadata is None or not wl.metadata.namespace:
        raise KgweError(f"{where}: no namespace")
    roles = []
    for role in wl.spec.effective_roles():
        req = role.gpu_requirements or wl.spec.gpu_requirements
        kind = (
            MIG
            if req.mig_profile
            else SHARED
            if req.gpu_milli is not None and req.gpu_milli < 1000
            else WHOLE
        )
        roles.append(
            RoleFacts(
                role.name,
                role.replicas,
                kind,
                req.count,
                req.mig_profile,
                req.gpu_milli if kind == SHARED else None,
            )
        )
    status = obj.get("status") or {}
    completed = find(status.get("conditions"), "Complete")
    completed = completed if completed is not None and completed.get("status") == "True" else None
    interval = wl.spec.checkpoint_interval
    return WorkloadFacts(
        namespace=wl.metadata.namespace,
        name=wl.metadata.name,
        workload_type=wl.spec.workload_type,
        batch=wl.spec.is_batch,
        roles=tuple(roles),
        max_retries=wl.spec.retry_policy.max_retries,
        checkpoint_interval_seconds=None if interval is None else int(interval.total_seconds()),
        phase=str(status.get("phase") or ""),
        run=int(status.get("run") or 0),
        created_at=parse_rfc3339(meta.get("creationTimestamp")),
        completed_at=parse_rfc3339(completed.get("lastTransitionTime")) if completed else None,
    )


def facts_from_objects(objs: Iterable[Mapping[str, Any]]) -> tuple[list[WorkloadFacts], list[str]]:
    """Every readable GPUWorkload, and a warning for each one skipped."""
    out: list[WorkloadFacts] = []
    warnings: list[str] = []
    for obj in objs:
        try:
            out.append(facts_from_object(obj))
        except KgweError as exc:
            warnings.append(str(exc))
    return out, warnings


WorkloadKey = tuple[str, str]  # (namespace, name)


def pods_by_workload(
    workloads: Iterable[WorkloadFacts], pods: Iterable[PodKey]
) -> dict[WorkloadKey, list[tuple[PodKey, int]]]:
    """(namespace, workload) -> its pods with their run (0 for serving kinds). A pod's name is split at each
    place a workload name could end, so this costs a few lookups per pod whatever the number of workloads."""
    by_key = {(w.namespace, w.name): w for w in workloads}
    patterns: dict[WorkloadKey, re.Pattern[str]] = {}
    out: dict[WorkloadKey, list[tuple[PodKey, int]]] = {}
    for ns, pod in pods:
        for cut in _candidate_names(pod):
            w = by_key.get((ns, cut))
            if w is None:
                continue
            pattern = patterns.setdefault((ns, cut), w.pod_pattern())
            m = pattern.match(pod)
            if m:
                out.setdefault((ns, cut), []).append(((ns, pod), int(m.group("run")) if w.batch else 0))
                break
    return out


def _candidate_names(pod: str) -> list[str]:
    """Prefixes of a pod name that may be its workload's name: before each `-r<run>-` (batch), and before
    each `-` of the part left of the last two segments (serving `<wl>-<role>-<hash>-<suffix>`)."""
    names = [pod[: m.start()] for m in _RUN_MARK.finditer(pod)]
    head = pod.rsplit("-", 2)[0]
    names += [head[:i] for i, c in enumerate(head) if c == "-"]
    return names
