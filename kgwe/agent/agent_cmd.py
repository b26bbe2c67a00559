"""Discover this node's GPUs, interconnect and GPU health through NVML and publish them on the Node.

`kgwe agent --once --print` shows what NVML reports; `--fake-nvml NAME` replays a known topology instead
of talking to a driver (faults can be injected, see kgwe/topology/fake_nvml.py). Without --once the agent
re-checks every --interval-seconds and patches the Node only when something changed. GPU health goes into
the `kgwe.nvidia.io/gpu-health` annotation, the `GPUHealthy` Node condition, Events on every transition
and, with --taint-when-all-unhealthy, a NoSchedule taint while every GPU of the Node is unhealthy.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from kgwe.agent import health as gpu_health
from kgwe.agent import node_state, podresources
from kgwe.errors import KgweError
from kgwe.topology import annotation, choice, discovery, known
from kgwe.topology import health as health_annotation
from kgwe.topology.health import GPUFault
from kgwe.topology.nvml import Nvml
from kgwe.vocab import AGENT_FIELD_MANAGER, GPU_HEALTH_CONDITION, GPU_UNHEALTHY_TAINT

if TYPE_CHECKING:  # imported where used: `kgwe agent --dry-run` needs no Kubernetes client
    from kubernetes import client

# NCCL's inter-CPU bandwidth model (GB/s): Intel SKL, AMD Zen2, ARM (docs/facts/topology.md §2.1).
_SYS_GBPS_BY_VENDOR = {"GenuineIntel": 10.0, "AuthenticAMD": 16.0}
_ARM_SYS_GBPS = 6.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--once", action="store_true", help="discover (and publish) once, then exit")
    parser.add_argument("--print", dest="print_", action="store_true", help="print what was found")
    parser.add_argument("--json", action="store_true", help="with --print: print JSON instead of text")
    parser.add_argument(
        "--fake-nvml", metavar="TOPOLOGY", help=f"replay a known topology ({', '.join(known.names())})"
    )
    parser.add_argument(
        "--node-name", default=os.environ.get("NODE_NAME"), help="Node to publish on ($NODE_NAME)"
    )
    parser.add_argument("--no-publish", action="store_true", help="do not touch the Kubernetes Node")
    parser.add_argument("--kubeconfig", help="kubeconfig file (default: in-cluster, then ~/.kube/config)")
    parser.add_argument(
        "--pod-resources-socket",
        default=podresources.DEFAULT_SOCKET,
        help="kubelet PodResources socket (skipped if absent)",
    )
    parser.add_argument("--interval-seconds", type=float, default=60.0, help="re-check period")
    parser.add_argument(
        "--recover-after-periods",
        type=int,
        default=3,
        help="clean periods in a row before an unhealthy GPU counts as healthy again (default 3)",
    )
    parser.add_argument(
        "--xid-hold-periods",
        type=int,
        default=10,
        help="periods a critical XID event keeps its GPU unhealthy (default 10)",
    )
    parser.add_argument(
        "--taint-when-all-unhealthy",
        action="store_true",
        help=f"taint the Node {GPU_UNHEALTHY_TAINT}:NoSchedule while every one of its GPUs is unhealthy",
    )
    parser.add_argument("--no-health", action="store_true", help="do not check or publish GPU health")


@dataclass
class Observation:
    found: discovery.Discovery
    holders: dict[int, str] | None
    holders_note: str
    faults: dict[int, GPUFault] | None = None  # None: health not checked
    gpu_total: int = 0  # GPUs NVML counts, lost ones included
    transitions: tuple[gpu_health.Transition, ...] = ()


def _sys_gbps(cpuinfo: Path = Path("/proc/cpuinfo")) -> float:
    try:
        text = cpuinfo.read_text(errors="replace")
    except OSError:
        return 16.0
    for vendor, gbps in _SYS_GBPS_BY_VENDOR.items():
        if vendor in text:
            return gbps
    return _ARM_SYS_GBPS if "CPU implementer" in text else 16.0


def nvml_module(args: argparse.Namespace) -> Nvml:
    """The NVML the agent talks to for its whole life: pynvml, or one FakeNvml replaying a topology."""
    if args.fake_nvml:
        from kgwe.topology.fake_nvml import FakeNvml

        return FakeNvml.for_known(known.canonical_name(args.fake_nvml))
    try:
        import pynvml
    except ImportError:  # pragma: no cover - nvidia-ml-py is a dependency
        raise discovery.NoDriverError("no NVIDIA driver: nvidia-ml-py is not installed") from None
    module: Nvml = pynvml  # nvidia-ml-py ships no types
    return module


class HealthCheck:
    """The probe and the tracker, alive across periods (XID events arrive on one event set)."""

    def __init__(self, nvml: Nvml, args: argparse.Namespace) -> None:
        self.nvml = nvml
        self.probe = gpu_health.Probe(nvml)
        self.tracker = gpu_health.HealthTracker(
            recover_after_periods=args.recover_after_periods, xid_hold_periods=args.xid_hold_periods
        )
        self._initialized = False

    def check(self) -> tuple[dict[int, GPUFault], int, list[gpu_health.Transition]] | None:
        """(faults, GPUs counted, transitions), or None when NVML could not be read at all this period."""
        try:
            if not self._initialized:
                self.nvml.nvmlInit()  # held for the agent's life: the XID event set needs NVML up
                self._initialized = True
            samples = self.probe.sample()
        except Exception as exc:  # NVMLError and whatever a driver does: report the rest, retry next time
            print(f"kgwe agent: warning: GPU health not read: {exc}", file=sys.stderr)
            return None
        transitions = self.tracker.update(samples)
        return self.tracker.faults(), len(samples), transitions


def observe(
    args: argparse.Namespace, nvml: Nvml | None = None, health: HealthCheck | None = None
) -> Observation:
    """One pass: discovery and health through NVML (real or replayed), and the kubelet's GPU holders."""
    nvml = nvml if nvml is not None else nvml_module(args)
    if args.fake_nvml:
        name = known.canonical_name(args.fake_nvml)
        found = discovery.discover(nvml, name=name, sys_gbps=known.load(name).rates.sys_gbps)
    else:
        found = discovery.discover(nvml, name=args.node_name, sys_gbps=_sys_gbps())
    holders: dict[int, str] | None = None
    socket = args.pod_resources_socket
    if socket and Path(socket.removeprefix("unix://")).exists():
        holdings = podresources.list_pod_resources(socket)
        holders = podresources.gpu_holders(holdings, {g.uuid: g.index for g in found.topology.gpus})
        note = f"{len(holders)} GPU(s) held by pods (kubelet PodResources)"
    else:
        note = f"kubelet PodResources socket {socket} not present: GPU holders unknown"
    obs = Observation(found, holders, note)
    checked = health.check() if health is not None else None
    if checked is not None:
        obs.faults, obs.gpu_total, transitions = checked
        obs.transitions = tuple(transitions)
    return obs


def _core_api(kubeconfig: str | None) -> client.CoreV1Api:
    from kubernetes import client

    from kgwe.cluster.client import api_client

    return client.CoreV1Api(api_client(kubeconfig))


def publish(
    core: client.CoreV1Api, node_name: str, obs: Observation, *, taint: bool = False, claim: bool = False
) -> dict[str, Any] | None:
    """Patch the Node's KGWE labels/annotations (and, with health, its condition and taint) where they
    differ; returns the metadata patch sent (None: no change). Every write is the agent's field manager's:
    `helm uninstall` removes what that manager owns. `claim` (the first publish of a process): take
    ownership of the values already there first (an earlier agent may have written them under another
    manager), with one server-side apply."""
    from kubernetes.client.exceptions import ApiException

    try:
        node = core.read_node(node_name)
        annotations: dict[str, str | None] = dict(
            node_state.desired_annotations(obs.found.topology, obs.holders)
        )
        if obs.faults is not None:
            annotations[health_annotation.ANNOTATION_KEY] = health_annotation.encode(obs.faults)
        labels = node_state.desired_labels(obs.found.topology)
        if claim:  # the values as they are now: the patch below changes what differs
            current_labels, current_annotations = node.metadata.labels or {}, node.metadata.annotations or {}
            owned = {
                "labels": {k: current_labels[k] for k in labels if k in current_labels},
                "annotations": {k: current_annotations[k] for k in annotations if k in current_annotations},
            }
            body = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": node_name, **owned}}
            core.patch_node(
                node_name,
                body,
                field_manager=AGENT_FIELD_MANAGER,
                force=True,
                _content_type="application/apply-patch+yaml",
            )
            node = core.read_node(node_name)
        patch = node_state.node_patch(node.metadata.labels, node.metadata.annotations, labels, annotations)
        if patch is not None:
            core.patch_node(node_name, patch, field_manager=AGENT_FIELD_MANAGER)
        if obs.faults is not None:
            now = datetime.now(UTC)
            current = {c.type: c for c in (node.status.conditions or [])} if node.status else {}
            old = current.get(GPU_HEALTH_CONDITION)
            status_patch = node_state.condition_patch(
                None if old is None else (old.status, old.reason, old.message, old.last_transition_time),
                obs.faults,
                now,
            )
            if status_patch is not None:
                core.patch_node_status(node_name, status_patch, field_manager=AGENT_FIELD_MANAGER)
            taints = [t.to_dict() for t in (node.spec.taints or [])] if node.spec else []
            all_sick = bool(obs.gpu_total) and len(obs.faults) >= obs.gpu_total
            wanted = node_state.desired_taints(taints, taint and all_sick)
            if wanted is not None:
                core.patch_node(node_name, {"spec": {"taints": wanted}}, field_manager=AGENT_FIELD_MANAGER)
            _record_transitions(core, node, obs.transitions)
    except ApiException as exc:
        raise KgweError(f"cannot update Node {node_name}: {exc.status} {exc.reason}") from None
    return patch


def _record_transitions(
    core: client.CoreV1Api, node: client.V1Node, transitions: tuple[gpu_health.Transition, ...]
) -> None:
    """One Event per GPU that changed verdict (Warning when it turned unhealthy), on the Node."""
    if not transitions:
        return
    from kgwe.cluster.events import EventRecorder

    recorder = EventRecorder(core.api_client, component=AGENT_FIELD_MANAGER)  # its Events name it
    involved = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": node.metadata.name, "uid": node.metadata.uid},
    }
    for t in transitions:
        kind, reason = ("Normal", "GPUHealthy") if t.healthy else ("Warning", "GPUUnhealthy")
        recorder.record(involved, kind, reason, f"GPU {t.index}: {t.reason}: {t.message}")


def summary(obs: Observation) -> dict[str, Any]:
    topo = obs.found.topology
    return {
        "name": topo.name,
        "known_topology": known.identify(topo),
        "driver_version": obs.found.driver_version,
        "gpus": [
            {
                "index": g.index,
                "name": g.name,
                "uuid": g.uuid,
                "pci_bus_id": g.pci_bus_id,
                "memory_mib": g.memory_mib,
                "numa_node": g.numa_node,
                "gpu_numa_id": g.gpu_numa_id,
                "cpu_affinity": g.cpu_affinity,
                "nvswitch_links": g.nvswitch_links,
                "mig_enabled": g.mig_enabled,
                "mig_devices": [[m.profile, m.start, m.size] for m in g.mig_devices],
                "mig_profiles": {
                    p: [list(x) for x in pl] for p, pl in obs.found.mig_profiles.get(g.index, {}).items()
                },
            }
            for g in topo.gpus
        ],
        "matrix": [list(row) for row in topo.matrix()],
        "bandwidth_gbps": [list(row) for row in topo.bandwidth_gbps],
        "best_ring_gbps": {
            str(k): c.bottleneck_gbps
            for k in (2, 4, 8, 16)
            if k <= topo.size and (c := choice.choose(topo, frozenset(g.index for g in topo.gpus), k))
        },
        "gpu_holders": {str(k): v for k, v in (obs.holders or {}).items()},
        "holders_note": obs.holders_note,
        "annotation_bytes": len(annotation.encode(topo)),
        "gpu_health": None
        if obs.faults is None
        else {
            str(i): {"reason": f.reason, "message": f.message, "since": f.since.isoformat()}
            for i, f in obs.faults.items()
        },
        "warnings": list(obs.found.warnings),
    }


def render_text(obs: Observation) -> str:
    s = summary(obs)
    topo = obs.found.topology
    lines = [
        f"KGWE agent: {len(s['gpus'])} GPU(s), driver {s['driver_version']}, "
        f"known topology: {s['known_topology'] or 'none matched'}",
        "",
        "\t" + "\t".join(f"GPU{g.index}" for g in topo.gpus) + "\tCPU Affinity\tNUMA Affinity",
    ]
    for pos, g in enumerate(topo.gpus):
        cells = [" X " if c == "X" else c for c in topo.matrix()[pos]]
        numa = "N/A" if g.numa_node is None else str(g.numa_node)
        lines.append(f"GPU{g.index}\t" + "\t".join(cells) + f"\t{g.cpu_affinity or 'N/A'}\t{numa}")
    lines.append("")
    for gpu in s["gpus"]:
        mig = (
            "MIG on " + ",".join(f"{p}@{st}" for p, st, _ in gpu["mig_devices"])
            if gpu["mig_enabled"]
            else ("MIG off" if gpu["mig_profiles"] else "no MIG")
        )
        lines.append(
            f"GPU{gpu['index']}: {gpu['name']} {gpu['memory_mib']} MiB {gpu['pci_bus_id']} {gpu['uuid']} "
            f"NVSwitch links {gpu['nvswitch_links']}, {mig}"
        )
    lines.append(
        "best ring all-reduce bottleneck: "
        + ", ".join(f"{k} GPUs {v:g} GB/s" for k, v in s["best_ring_gbps"].items())
        or "n/a"
    )
    lines.append(
        s["holders_note"]
        + (": " + ", ".join(f"GPU{k}={v}" for k, v in s["gpu_holders"].items()) if s["gpu_holders"] else "")
    )
    lines.append(f"annotation {annotation.ANNOTATION_KEY}: {s['annotation_bytes']} bytes")
    if obs.faults is not None:
        sick = [f"GPU{i} {f.reason}: {f.message}" for i, f in obs.faults.items()]
        lines.append("GPU health: " + ("; ".join(sick) if sick else "all GPUs healthy"))
    lines += [f"warning: {w}" for w in s["warnings"]]
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    publishing = not args.no_publish and not (args.once and args.print_ and not args.node_name)
    if publishing and not args.node_name:
        raise KgweError("no Node to publish on: pass --node-name or set NODE_NAME (or use --no-publish)")
    core = _core_api(args.kubeconfig) if publishing else None
    nvml = nvml_module(args)
    health = None if args.no_health else HealthCheck(nvml, args)
    claimed = False  # the first publish takes over what an earlier agent wrote (its field manager)
    while True:
        try:
            obs = observe(args, nvml, health)
        except discovery.NoDriverError:
            raise
        except KgweError as exc:
            if args.once:
                raise
            print(f"kgwe agent: warning: {exc}; retrying in {args.interval_seconds:g}s", file=sys.stderr)
            time.sleep(max(args.interval_seconds, 1.0))
            continue
        if args.print_:
            if args.json:
                print(orjson.dumps(summary(obs), option=orjson.OPT_INDENT_2).decode())
            else:
                print(render_text(obs))
        for w in obs.found.warnings:
            print(f"kgwe agent: warning: {w}", file=sys.stderr)
        if core is not None:
            try:
                patch = publish(
                    core, args.node_name, obs, taint=args.taint_when_all_unhealthy, claim=not claimed
                )
                claimed = True
                changed = "updated" if patch else "unchanged"
                print(f"kgwe agent: Node {args.node_name} {changed}", file=sys.stderr)
            except KgweError as exc:
                if args.once:
                    raise
                print(f"kgwe agent: warning: {exc}; retrying in {args.interval_seconds:g}s", file=sys.stderr)
        if args.once:
            return 0
        time.sleep(max(args.interval_seconds, 1.0))
