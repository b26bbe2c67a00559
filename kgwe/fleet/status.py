"""`kgwe status`: one screen of the whole fleet, from plain API dicts. Pure.

- PolicyRepositories: Ready (status and reason), the applied revision, MIG rollout progress per pool;
- KGWE components: its Deployments and DaemonSets (label app.kubernetes.io/name=kgwe), ready vs desired;
- GPUs: offered, allocated, idle, unhealthy (from the node rows of `kgwe nodes`);
- budgets near their limit: the budget Events the controller records on PolicyRepositories (threshold
  reached, enforced, forecast over the limit; only those it reported, not look-alikes others wrote) and
  `kgwe-budget` ResourceQuotas at or over NEAR_LIMIT_PERCENT of their GPU limit.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from kgwe.fleet.output import Column, table
from kgwe.quantity import parse_quantity
from kgwe.runtime.conditions import find
from kgwe.vocab import BUDGET_ANNOTATION, BUDGET_QUOTA_NAME, CONTROLLER_NAME

NEAR_LIMIT_PERCENT = 80
BUDGET_EVENT_REASONS = ("BudgetThreshold", "BudgetEnforced", "BudgetForecastOverLimit")
REVISION_CHARS = 12

REPOSITORY_COLUMNS = (
    Column("NAMESPACE", "namespace"),
    Column("NAME", "name"),
    Column("READY", "ready"),
    Column("REASON", "reason"),
    Column("REVISION", "revisionShort"),
    Column("ROLLOUT", "rolloutShown"),
)
COMPONENT_COLUMNS = (
    Column("NAMESPACE", "namespace"),
    Column("COMPONENT", "name"),
    Column("KIND", "kind"),
    Column("READY", "readyShown"),
    Column("HEALTHY", "healthy"),
)
BUDGET_COLUMNS = (Column("BUDGET", "budget"), Column("SOURCE", "source"), Column("MESSAGE", "message"))


def _condition(status: Mapping[str, Any], ctype: str) -> Mapping[str, Any]:
    return find(status.get("conditions"), ctype) or {}


def _short(revision: str | None) -> str | None:
    """`main@sha1:0123...` -> `main@0123456789ab` (the branch and the short commit)."""
    if not revision:
        return None
    ref, _, digest = revision.rpartition("@")
    digest = digest.split(":", 1)[-1][:REVISION_CHARS]
    return f"{ref}@{digest}" if ref else digest


def repository_row(obj: Mapping[str, Any]) -> dict[str, Any]:
    meta = obj.get("metadata") or {}
    status = obj.get("status") or {}
    ready = _condition(status, "Ready")
    rollout = status.get("rollout") or {}
    pools = []
    for pool, p in sorted(rollout.items()):
        if not isinstance(p, Mapping):
            continue
        state = "stopped" if p.get("stopped") else f"{p.get('done', 0)}/{p.get('total', 0)}"
        pools.append(
            {
                "pool": pool,
                "done": p.get("done"),
                "total": p.get("total"),
                "stopped": bool(p.get("stopped")),
                "message": p.get("message"),
                "shown": f"{pool} {state}",
            }
        )
    return {
        "namespace": meta.get("namespace"),
        "name": meta.get("name"),
        "ready": ready.get("status", "Unknown"),
        "reason": ready.get("reason"),
        "message": ready.get("message"),
        "revision": status.get("lastAppliedRevision"),
        "revisionShort": _short(status.get("lastAppliedRevision")),
        "rollout": pools,
        "rolloutShown": ", ".join(p["shown"] for p in pools) or None,
    }


def component_row(obj: Mapping[str, Any]) -> dict[str, Any]:
    meta = obj.get("metadata") or {}
    labels = meta.get("labels") or {}
    status = obj.get("status") or {}
    kind = obj.get("kind") or ("DaemonSet" if "desiredNumberScheduled" in status else "Deployment")
    if kind == "DaemonSet":
        desired, ready = status.get("desiredNumberScheduled", 0), status.get("numberReady", 0)
    else:
        desired = (obj.get("spec") or {}).get("replicas", 1)
        ready = status.get("readyReplicas", 0)
    return {
        "namespace": meta.get("namespace"),
        "name": meta.get("name"),
        "component": labels.get("app.kubernetes.io/component"),
        "kind": kind,
        "ready": ready,
        "desired": desired,
        "readyShown": f"{ready}/{desired}",
        "healthy": ready >= desired and desired > 0,
    }


def gpu_totals(node_rows: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    """GPUs offered and allocated over the fleet, counting each MIG instance and share as one unit of
    its kind; unhealthy = GPUs the agents report unhealthy."""
    out = {"nodes": len(node_rows), "gpus": 0, "unhealthy": 0}
    for kind in ("whole", "mig", "shared"):
        out[f"{kind}Allocatable"] = out[f"{kind}Allocated"] = 0
    for row in node_rows:
        out["gpus"] += int(row.get("gpus") or 0)
        out["unhealthy"] += len(row.get("unhealthyGPUs") or ())
        res = row.get("resources") or {}
        for kind in ("whole", "shared"):
            out[f"{kind}Allocatable"] += res.get(kind, {}).get("allocatable", 0)
            out[f"{kind}Allocated"] += res.get(kind, {}).get("requested", 0)
        for m in (res.get("mig") or {}).values():
            out["migAllocatable"] += m.get("allocatable", 0)
            out["migAllocated"] += m.get("requested", 0)
    return out


def _quantity(value: object) -> float | None:
    try:
        return float(parse_quantity(value))
    except ValueError:
        return None


def reported_by_kgwe(event: Mapping[str, Any], repositories: Sequence[Mapping[str, Any]]) -> bool:
    """Whether an Event is KGWE's controller's, about a PolicyRepository it serves: written in that
    repository's namespace, naming it by uid, with the controller as its source. Anyone who may create
    Events can write one about a PolicyRepository; such a one names no repository's uid, or another
    namespace's, or another component (kgwe.cluster.events.EventRecorder sets both fields)."""
    involved = event.get("involvedObject") or {}
    meta = event.get("metadata") or {}
    for repo in repositories:
        rmeta = repo.get("metadata") or {}
        if rmeta.get("uid") and involved.get("uid") == rmeta.get("uid"):
            where = {meta.get("namespace"), involved.get("namespace")}
            source = (event.get("source") or {}).get("component")
            reporting = event.get("reportingComponent") or source
            return where == {rmeta.get("namespace")} and source == reporting == CONTROLLER_NAME
    return False


def budget_rows(
    events: Sequence[Mapping[str, Any]],
    quotas: Sequence[Mapping[str, Any]],
    repositories: Sequence[Mapping[str, Any]] = (),
) -> list[dict[str, Any]]:
    """Budgets near or over their limit: the latest budget Event per (object, reason) the controller reported
    about one of `repositories` (reported_by_kgwe), and each kgwe-budget quota whose GPU use is at or above
    NEAR_LIMIT_PERCENT of its hard limit."""
    latest: dict[tuple[str, str, str], Mapping[str, Any]] = {}
    for ev in events:
        if ev.get("reason") not in BUDGET_EVENT_REASONS or not reported_by_kgwe(ev, repositories):
            continue
        involved = ev.get("involvedObject") or {}
        key = (involved.get("namespace") or "", involved.get("name") or "", ev["reason"])
        stamp = ev.get("lastTimestamp") or ev.get("eventTime") or ""
        old = latest.get(key)
        if old is None or stamp >= (old.get("lastTimestamp") or old.get("eventTime") or ""):
            latest[key] = ev
    rows = []
    for (ns, name, reason), ev in sorted(latest.items()):
        message = str(ev.get("message") or "")
        budget = message.split()[1] if message.startswith("budget ") and len(message.split()) > 1 else None
        rows.append({"budget": budget, "source": f"{reason} on {ns}/{name}", "message": message})
    for quota in quotas:
        meta = quota.get("metadata") or {}
        if meta.get("name") != BUDGET_QUOTA_NAME:
            continue
        hard = (quota.get("spec") or {}).get("hard") or {}
        used = (quota.get("status") or {}).get("used") or {}
        for key in sorted(hard):
            limit, now_used = _quantity(hard[key]), _quantity(used.get(key, "0"))
            if limit is None or now_used is None:
                continue
            if (limit == 0 and now_used == 0) or (limit > 0 and now_used * 100 < NEAR_LIMIT_PERCENT * limit):
                continue
            percent = "capped" if limit <= now_used else f"{now_used * 100 / limit:.0f}%"
            rows.append(
                {
                    "budget": (meta.get("annotations") or {}).get(BUDGET_ANNOTATION),
                    "source": f"ResourceQuota {meta.get('namespace')}/{BUDGET_QUOTA_NAME}",
                    "message": f"{key}: used {used.get(key, '0')} of {hard[key]} ({percent})",
                }
            )
    return rows


def status_document(
    repositories: Sequence[Mapping[str, Any]],
    components: Sequence[Mapping[str, Any]],
    node_rows: Sequence[Mapping[str, Any]],
    events: Sequence[Mapping[str, Any]],
    quotas: Sequence[Mapping[str, Any]],
) -> dict[str, Any]:
    return {
        "policyRepositories": sorted(
            (repository_row(r) for r in repositories), key=lambda r: (r["namespace"] or "", r["name"] or "")
        ),
        "components": sorted(
            (component_row(c) for c in components), key=lambda r: (r["namespace"] or "", r["name"] or "")
        ),
        "gpus": gpu_totals(node_rows),
        "budgets": budget_rows(events, quotas, repositories),
    }


def status_text(doc: Mapping[str, Any], *, wide: bool = False) -> str:
    """The table form: one section per part, each saying so when it is empty."""
    g = doc["gpus"]
    parts = ["POLICY REPOSITORIES"]
    parts.append(
        table(doc["policyRepositories"], REPOSITORY_COLUMNS, wide=wide).rstrip("\n")
        if doc["policyRepositories"]
        else "  none"
    )
    parts += ["", "COMPONENTS"]
    parts.append(
        table(doc["components"], COMPONENT_COLUMNS, wide=wide).rstrip("\n")
        if doc["components"]
        else "  none found (Deployments/DaemonSets labelled app.kubernetes.io/name=kgwe)"
    )
    parts += ["", "GPUS"]
    lines = [f"  {g['gpus']} GPUs on {g['nodes']} nodes, {g['unhealthy']} unhealthy"]
    for kind, label in (("whole", "whole GPUs:   "), ("mig", "MIG instances:"), ("shared", "shared GPUs:  ")):
        offered, allocated = g[f"{kind}Allocatable"], g[f"{kind}Allocated"]
        lines.append(f"  {label} {allocated} allocated, {offered - allocated} idle of {offered}")
    parts.append("\n".join(lines))
    parts += ["", f"BUDGETS NEAR THEIR LIMIT (>= {NEAR_LIMIT_PERCENT}%)"]
    parts.append(
        table(doc["budgets"], BUDGET_COLUMNS, wide=wide).rstrip("\n") if doc["budgets"] else "  none"
    )
    return "\n".join(parts) + "\n"
