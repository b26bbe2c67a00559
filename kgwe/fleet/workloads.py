"""Rows of `kgwe workloads` from GPUWorkload dicts (as the API returns them). Pure.

Phase, GPUs, nodes and cost so far are what the workload controller writes into `status` (cost from the
metered usage of the workload's pods, priced by the PricingCatalog)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from kgwe.fleet.output import Column, age
from kgwe.timestamps import parse_rfc3339 as parse_time

WORKLOAD_COLUMNS = (
    Column("NAMESPACE", "namespace"),
    Column("NAME", "name"),
    Column("TYPE", "type"),
    Column("PHASE", "phase"),
    Column("GPUS", "gpus"),
    Column("NODES", "nodes"),
    Column("AGE", "age"),
    Column("COST", "costShown"),
    Column("GPU-HOURS", "gpuHours", wide=True),
    Column("TEAM", "team", wide=True),
    Column("RETRIES", "retries", wide=True),
    Column("GANG", "gangBackend", wide=True),
)


def _gpus_requested(spec: Mapping[str, Any]) -> int | None:
    """Total GPUs (or MIG instances / shares) asked for, when the controller has not yet written it."""
    req = spec.get("gpuRequirements") or {}
    count = req.get("count", 1)
    roles = spec.get("roles")
    if isinstance(roles, list) and roles:
        total = 0
        for role in roles:
            if not isinstance(role, Mapping):
                return None
            own = role.get("gpuRequirements") or req
            total += int(role.get("replicas", 1) or 1) * int(own.get("count", 1) or 1)
        return total
    dc = spec.get("distributedConfig") or {}
    pods = dc.get("nodes") or dc.get("replicas") or 1
    try:
        return int(pods) * int(count)
    except (TypeError, ValueError):
        return None


def workload_row(obj: Mapping[str, Any], now: datetime) -> dict[str, Any]:
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    cost = status.get("cost") or {}
    amount, currency = cost.get("amount"), cost.get("currency")
    gpus = status.get("gpus")
    return {
        "namespace": meta.get("namespace"),
        "name": meta.get("name"),
        "type": spec.get("workloadType", "Training"),
        "phase": status.get("phase") or "Pending",
        "gpus": gpus if gpus is not None else _gpus_requested(spec),
        "nodes": status.get("nodes"),
        "created": meta.get("creationTimestamp"),
        "age": age(parse_time(meta.get("creationTimestamp")), now),
        "cost": amount,
        "currency": currency,
        "costShown": f"{amount} {currency}" if amount is not None and currency else amount,
        "gpuHours": cost.get("gpuHours"),
        "team": spec.get("team"),
        "retries": status.get("retryCount", 0),
        "gangBackend": status.get("gangBackend"),
        "placements": status.get("placements") or [],
        "conditions": [
            {k: c.get(k) for k in ("type", "status", "reason", "message")}
            for c in status.get("conditions") or []
        ],
    }


def workload_rows(objs: Sequence[Mapping[str, Any]], now: datetime) -> list[dict[str, Any]]:
    rows = [workload_row(o, now) for o in objs]
    return sorted(rows, key=lambda r: (r["namespace"] or "", r["name"] or ""))
