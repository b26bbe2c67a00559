"""Rows of `kgwe nodes` and `kgwe health` from Node dicts (as the API returns them) and the GPU requests of
the pods bound to each node. Pure.

What a node offers is what the device plugin advertises (`status.allocatable`: whole GPUs, MIG instances
per profile, time-sliced shares), so the columns agree with what the scheduler sees; health is the agent's
`kgwe.nvidia.io/gpu-health` annotation (absent: no agent report, shown as "unknown")."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from kgwe.audit.stamp import Stamp
from kgwe.errors import KgweError
from kgwe.fleet.output import Column
from kgwe.gpu.sharing import NOT_SHARED, node_sharing
from kgwe.quantity import count
from kgwe.runtime.conditions import find, of
from kgwe.timestamps import format_rfc3339
from kgwe.topology import health
from kgwe.topology import view as topology_view
from kgwe.topology.annotation import topology_name
from kgwe.vocab import (
    DEVICE_PLUGIN_CONFIG_LABEL,
    GPU_COUNT_LABEL,
    GPU_HEALTH_ANNOTATION,
    GPU_HEALTH_CONDITION,
    GPU_PRODUCT_LABEL,
    GPU_RESOURCE,
    GPU_UNHEALTHY_TAINT,
    MIG_CONFIG_LABEL,
    MIG_RESOURCE_PREFIX,
    MIG_STATE_LABEL,
    SHARED_GPU_RESOURCE,
    TOPOLOGY_ANNOTATION,
)

PRODUCT_PREFIXES = ("NVIDIA-", "Tesla-")
# klog's line header (`E1206 04:41:39.388404      47 main.go:198] `), which NVIDIA's components print
_KLOG_PREFIX = re.compile(r"^[IWEF]\d{4} [\d:.]+\s+\d+ [\w./-]+:\d+\] ")

NODE_COLUMNS = (
    Column("NAME", "name"),
    Column("PRODUCT", "productShort"),
    Column("GPUS", "gpus"),
    Column("WHOLE", "whole"),
    Column("MIG", "mig"),
    Column("SHARED", "shared"),
    Column("MIG-CONFIG", "migConfigShown"),
    Column("TOPOLOGY", "topology"),
    Column("HEALTH", "health"),
    Column("MIG-LAYOUT", "migLayout", wide=True),
    Column("SHARING", "sharingShown", wide=True),
    Column("DEVICE-PLUGIN", "devicePlugin", wide=True),
    Column("SCHEDULABLE", "schedulable", wide=True),
    Column("PODS", "gpuPods", wide=True),
)

HEALTH_COLUMNS = (
    Column("NODE", "node"),
    Column("GPU", "gpu"),
    Column("STATUS", "status"),
    Column("REASON", "reason"),
    Column("SINCE", "since"),
    Column("MESSAGE", "message", wide=True),
)


def _int(value: object) -> int:
    return count(value)


def short_product(product: str) -> str:
    for prefix in PRODUCT_PREFIXES:
        if product.startswith(prefix):
            return product[len(prefix) :]
    return product


@dataclass(frozen=True)
class NodeHealth:
    """The agent's view of a node: faults per GPU index; `known` False when it never reported;
    `error` when the annotation is malformed; the GPUHealthy condition and the taint as published."""

    known: bool
    faults: Mapping[int, health.GPUFault]
    error: str | None = None
    condition: Mapping[str, Any] | None = None
    tainted: bool = False

    def summary(self, gpus: int) -> str:
        if self.error:
            return "invalid"
        if not self.known:
            return "unknown"
        if not self.faults:
            return "OK"
        return f"{len(self.faults)}/{gpus} unhealthy"


def node_health(node: Mapping[str, Any]) -> NodeHealth:
    meta = node.get("metadata") or {}
    annotations = meta.get("annotations") or {}
    cond = find(of(node), GPU_HEALTH_CONDITION)
    tainted = any(t.get("key") == GPU_UNHEALTHY_TAINT for t in (node.get("spec") or {}).get("taints") or [])
    raw = annotations.get(GPU_HEALTH_ANNOTATION)
    try:
        faults = health.decode(raw)
    except KgweError as exc:
        return NodeHealth(True, {}, str(exc), cond, tainted)
    return NodeHealth(raw is not None, faults, None, cond, tainted)


def _used_total(used: int, total: int) -> str | None:
    return f"{used}/{total}" if total or used else None


def node_row(
    node: Mapping[str, Any],
    requests: Mapping[str, int],
    pods: Sequence[str] = (),
    device_plugin: str | None = None,
) -> dict[str, Any]:
    """One GPU node: offered vs requested GPUs per kind (whole, MIG instances, shares), MIG config and
    state, sharing as GFD reports it, topology class, health. `requests`: resource -> total requested by
    live pods bound to it; `device_plugin`: the state of NVIDIA's device-plugin pod on it, where one runs."""
    meta = node.get("metadata") or {}
    labels = meta.get("labels") or {}
    annotations = meta.get("annotations") or {}
    allocatable = (node.get("status") or {}).get("allocatable") or {}
    gpus = _int(labels.get(GPU_COUNT_LABEL)) or _int(allocatable.get(GPU_RESOURCE))
    mig_offered = {
        k.removeprefix(MIG_RESOURCE_PREFIX): _int(v)
        for k, v in sorted(allocatable.items())
        if k.startswith(MIG_RESOURCE_PREFIX) and _int(v) > 0
    }
    mig_used = {
        k.removeprefix(MIG_RESOURCE_PREFIX): n
        for k, n in sorted(requests.items())
        if k.startswith(MIG_RESOURCE_PREFIX)
    }
    whole = {"allocatable": _int(allocatable.get(GPU_RESOURCE)), "requested": requests.get(GPU_RESOURCE, 0)}
    shared = {
        "allocatable": _int(allocatable.get(SHARED_GPU_RESOURCE)),
        "requested": requests.get(SHARED_GPU_RESOURCE, 0),
    }
    mig = {
        profile: {"allocatable": n, "requested": mig_used.get(profile, 0)}
        for profile, n in sorted({**{p: 0 for p in mig_used}, **mig_offered}.items())
    }
    mig_total = sum(m["allocatable"] for m in mig.values())
    mig_req = sum(m["requested"] for m in mig.values())
    config, state = labels.get(MIG_CONFIG_LABEL), labels.get(MIG_STATE_LABEL)
    replicas, strategy = node_sharing(labels)
    sharing_config = labels.get(DEVICE_PLUGIN_CONFIG_LABEL)
    sharing = "none" if strategy == NOT_SHARED else f"{strategy} x{replicas}"
    h = node_health(node)
    product = labels.get(GPU_PRODUCT_LABEL, "")
    return {
        "name": meta.get("name", ""),
        "product": product,
        "productShort": short_product(product),
        "gpus": gpus,
        "whole": _used_total(whole["requested"], whole["allocatable"]),
        "mig": _used_total(mig_req, mig_total),
        "shared": _used_total(shared["requested"], shared["allocatable"]),
        "migConfig": config,
        "migConfigState": state,
        "migConfigShown": f"{config} ({state})" if config and state else config,
        "migLayout": " ".join(f"{n}x{p}" for p, n in mig_offered.items()) or None,
        "sharing": {"strategy": strategy, "replicas": replicas, "config": sharing_config},
        "sharingShown": f"{sharing} ({sharing_config})" if sharing_config else sharing,
        "devicePlugin": device_plugin,
        "topology": topology_name(annotations.get(TOPOLOGY_ANNOTATION)),
        "health": h.summary(gpus),
        "unhealthyGPUs": sorted(h.faults),
        "schedulable": not (node.get("spec") or {}).get("unschedulable"),
        "gpuPods": len(pods),
        "resources": {"whole": whole, "mig": mig, "shared": shared},
    }


def gpu_topology(node: Mapping[str, Any]) -> dict[str, Any]:
    """A node's GPUs and links from the agent's annotation, for `kgwe nodes NODE -o wide|json|yaml`:
    {"gpuTopology": document} or {"gpuTopologyError": why} (absent annotation: no agent report)."""
    raw = ((node.get("metadata") or {}).get("annotations") or {}).get(TOPOLOGY_ANNOTATION)
    try:
        found = topology_view.from_annotation(raw)
    except KgweError as exc:
        return {"gpuTopologyError": str(exc)}
    if found is None:
        return {"gpuTopologyError": f"no {TOPOLOGY_ANNOTATION} annotation (no agent report)"}
    return {"gpuTopology": topology_view.to_document(found)}


def gpu_topology_text(node: Mapping[str, Any]) -> str:
    """The same as text: a GPU table beside the nvidia-smi `topo -m` matrix, and the links' GB/s."""
    name = _name(node)
    raw = ((node.get("metadata") or {}).get("annotations") or {}).get(TOPOLOGY_ANNOTATION)
    try:
        found = topology_view.from_annotation(raw)
    except KgweError as exc:
        return f"{name}: {exc}\n"
    if found is None:
        return f"{name}: no {TOPOLOGY_ANNOTATION} annotation (no agent report)\n"
    return topology_view.text(name, found)


def policy_change(node: Mapping[str, Any]) -> dict[str, Any]:
    """The policy commit (and its author) of KGWE's last change to a node, from the audit trail's
    annotations (docs/audit.md): {"lastPolicyChange": {...}}, or {} when KGWE never changed it."""
    stamp = Stamp.from_annotations((node.get("metadata") or {}).get("annotations"))
    return {"lastPolicyChange": {"revision": stamp.revision, "author": stamp.author}} if stamp else {}


def policy_change_text(node: Mapping[str, Any]) -> str:
    """The same as one line ("" when KGWE never changed the node)."""
    stamp = Stamp.from_annotations((node.get("metadata") or {}).get("annotations"))
    if stamp is None:
        return ""
    return f"{_name(node)}: last changed by KGWE for policy {stamp.revision} by {stamp.author}\n"


def node_rows(
    nodes: Sequence[Mapping[str, Any]],
    requests: Mapping[str, Mapping[str, int]],
    pods: Mapping[str, Sequence[str]] | None = None,
    device_plugins: Mapping[str, str] | None = None,
) -> list[dict[str, Any]]:
    rows = [
        node_row(
            n,
            requests.get(_name(n), {}),
            (pods or {}).get(_name(n), ()),
            (device_plugins or {}).get(_name(n)),
        )
        for n in nodes
    ]
    return sorted(rows, key=lambda r: r["name"])


def device_plugin_state(pod: Mapping[str, Any]) -> str:
    """What NVIDIA's device-plugin pod on a node is doing, in a few words: the first container that is not
    running, with why and its last words (config-manager's refusal, the plugin's start failure), else the
    pod's phase (`Running`); then each running container that failed before, with when and why (a crash loop
    runs between its crashes)."""
    status = pod.get("status") or {}
    statuses = list(status.get("initContainerStatuses") or []) + list(status.get("containerStatuses") or [])
    down: str | None = None
    before: list[str] = []
    for c in statuses:
        state = c.get("state") or {}
        last = (c.get("lastState") or {}).get("terminated") or {}
        text = str(last.get("message") or "").strip()
        words = f": {_KLOG_PREFIX.sub('', text.splitlines()[-1])[-200:]}" if text else ""
        restarts = c.get("restartCount", 0)
        if "running" in state or (state.get("terminated") or {}).get("reason") == "Completed":
            if restarts and last.get("exitCode"):
                when = f" at {last['finishedAt']}" if last.get("finishedAt") else ""
                before.append(
                    f"{c.get('name')} restarted {restarts} time(s), last exit {last['exitCode']}{when}{words}"
                )
        elif down is None:
            reason = (state.get("waiting") or state.get("terminated") or {}).get("reason") or "Pending"
            down = f"{c.get('name')}: {reason} (restarts {restarts}){words}"
    return "; ".join([down or str(status.get("phase") or "Unknown"), *before])


def device_plugin_states(pods: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """node -> device_plugin_state of NVIDIA's device-plugin pod bound to it."""
    return {
        str((p.get("spec") or {}).get("nodeName")): device_plugin_state(p)
        for p in pods
        if (p.get("spec") or {}).get("nodeName")
    }


def _name(node: Mapping[str, Any]) -> str:
    return str((node.get("metadata") or {}).get("name", ""))


def _stamp(when: datetime) -> str:
    return format_rfc3339(when)


def health_rows(nodes: Sequence[Mapping[str, Any]], *, every_gpu: bool) -> list[dict[str, Any]]:
    """Per-GPU health: every GPU of each node (`every_gpu`, for one named node), else only the unhealthy
    ones plus one row per node whose health is unknown or unreadable."""
    rows: list[dict[str, Any]] = []
    for node in sorted(nodes, key=_name):
        name = _name(node)
        labels = (node.get("metadata") or {}).get("labels") or {}
        allocatable = (node.get("status") or {}).get("allocatable") or {}
        gpus = _int(labels.get(GPU_COUNT_LABEL)) or _int(allocatable.get(GPU_RESOURCE))
        h = node_health(node)
        if h.error or not h.known:
            cond = h.condition or {}
            rows.append(
                {
                    "node": name,
                    "gpu": None,
                    "status": "Invalid" if h.error else "Unknown",
                    "reason": cond.get("reason") or ("InvalidAnnotation" if h.error else "NoAgentReport"),
                    "since": cond.get("lastTransitionTime"),
                    "message": h.error or cond.get("message") or f"no {GPU_HEALTH_ANNOTATION} annotation",
                }
            )
            continue
        indices = sorted(set(range(gpus)) | set(h.faults)) if every_gpu else sorted(h.faults)
        for i in indices:
            fault = h.faults.get(i)
            rows.append(
                {
                    "node": name,
                    "gpu": i,
                    "status": "Unhealthy" if fault else "Healthy",
                    "reason": fault.reason if fault else None,
                    "since": _stamp(fault.since) if fault else None,
                    "message": fault.message if fault else None,
                }
            )
    return rows


def health_summary(nodes: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Counts for the footer of `kgwe health` and the GPU line of `kgwe status`."""
    gpus = unhealthy = unknown = tainted = 0
    for node in nodes:
        labels = (node.get("metadata") or {}).get("labels") or {}
        n = _int(labels.get(GPU_COUNT_LABEL))
        gpus += n
        h = node_health(node)
        unhealthy += len(h.faults)
        unknown += 0 if h.known and not h.error else 1
        tainted += h.tainted
    return {
        "nodes": len(nodes),
        "gpus": gpus,
        "unhealthyGPUs": unhealthy,
        "unknownNodes": unknown,
        "taintedNodes": tainted,
    }
