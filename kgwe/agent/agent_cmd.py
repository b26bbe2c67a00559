"""Discover this node's GPUs and interconnect through NVML and publish them on the Node.

`kgwe agent --once --print` shows what NVML reports; `--fake-nvml NAME` replays a known topology instead
of talking to a driver. Without --once the agent re-checks every --interval-seconds and patches the Node
only when something changed.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from kgwe.agent import node_state, podresources
from kgwe.errors import KgweError
from kgwe.topology import annotation, choice, discovery, known

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


@dataclass
class Observation:
    found: discovery.Discovery
    holders: dict[int, str] | None
    holders_note: str


def _sys_gbps(cpuinfo: Path = Path("/proc/cpuinfo")) -> float:
    try:
        text = cpuinfo.read_text(errors="replace")
    except OSError:
        return 16.0
    for vendor, gbps in _SYS_GBPS_BY_VENDOR.items():
        if vendor in text:
            return gbps
    return _ARM_SYS_GBPS if "CPU implementer" in text else 16.0


def observe(args: argparse.Namespace) -> Observation:
    """One discovery pass: NVML (real or replayed) and, when reachable, the kubelet's GPU holders."""
    if args.fake_nvml:
        from kgwe.topology.fake_nvml import FakeNvml

        name = known.canonical_name(args.fake_nvml)
        found = discovery.discover(
            FakeNvml.for_known(name), name=name, sys_gbps=known.load(name).rates.sys_gbps
        )
    else:
        try:
            import pynvml
        except ImportError:  # pragma: no cover - nvidia-ml-py is a dependency
            raise discovery.NoDriverError("no NVIDIA driver: nvidia-ml-py is not installed") from None
        found = discovery.discover(pynvml, name=args.node_name, sys_gbps=_sys_gbps())
    holders: dict[int, str] | None = None
    socket = args.pod_resources_socket
    if socket and Path(socket.removeprefix("unix://")).exists():
        holdings = podresources.list_pod_resources(socket)
        holders = podresources.gpu_holders(holdings, {g.uuid: g.index for g in found.topology.gpus})
        note = f"{len(holders)} GPU(s) held by pods (kubelet PodResources)"
    else:
        note = f"kubelet PodResources socket {socket} not present: GPU holders unknown"
    return Observation(found, holders, note)


def _core_api(kubeconfig: str | None):
    from kubernetes import client

    from kgwe.cluster.client import api_client

    return client.CoreV1Api(api_client(kubeconfig))


def publish(core: Any, node_name: str, obs: Observation) -> dict | None:
    """Patch the Node's KGWE labels/annotations if they differ; returns the patch sent (None: no change)."""
    from kubernetes.client.exceptions import ApiException

    try:
        node = core.read_node(node_name)
        patch = node_state.node_patch(
            node.metadata.labels,
            node.metadata.annotations,
            node_state.desired_labels(obs.found.topology),
            node_state.desired_annotations(obs.found.topology, obs.holders),
        )
        if patch is not None:
            core.patch_node(node_name, patch)
    except ApiException as exc:
        raise KgweError(f"cannot update Node {node_name}: {exc.status} {exc.reason}") from None
    return patch


def summary(obs: Observation) -> dict:
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
    lines += [f"warning: {w}" for w in s["warnings"]]
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    publishing = not args.no_publish and not (args.once and args.print_ and not args.node_name)
    if publishing and not args.node_name:
        raise KgweError("no Node to publish on: pass --node-name or set NODE_NAME (or use --no-publish)")
    core = _core_api(args.kubeconfig) if publishing else None
    while True:
        try:
            obs = observe(args)
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
                patch = publish(core, args.node_name, obs)
                changed = "updated" if patch else "unchanged"
                print(f"kgwe agent: Node {args.node_name} {changed}", file=sys.stderr)
            except KgweError as exc:
                if args.once:
                    raise
                print(f"kgwe agent: warning: {exc}; retrying in {args.interval_seconds:g}s", file=sys.stderr)
        if args.once:
            return 0
        time.sleep(max(args.interval_seconds, 1.0))
