"""The local cluster behind `kgwe cluster up`: a control plane, the host's real node with CoreDNS, kwok GPU
nodes from a GPUInventory, and the GPU Operator's stand-ins, kept running by a detached supervisor process
until `kgwe cluster down`.

Like a cluster with the GPU Operator installed, it has the `gpu-operator` namespace and the RuntimeClass
`nvidia`; the GPU nodes carry GPU Feature Discovery's labels, the device plugin's allocatable resources
(whole GPUs or MIG instances as the inventory records them) and KGWE's topology annotation, and the GPU
nodes' usual taint (`GPU_NODE_TAINT`), so ordinary pods (a chart's controllers, webhooks) run on the real
node. The MIG manager and device-plugin stand-ins act on the ConfigMaps KGWE renders.

The supervisor (`python -m kgwe.localcluster.cluster DIR --status-fd N`) reports progress as lines on the
status pipe — `STEP text`, then `READY seconds` or `ERROR message` — and records itself in
/run/kgwe/cluster.json so `kgwe cluster down` and `status` find it. SIGTERM stops everything.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from kgwe.errors import KgweError
from kgwe.localcluster.realnode import STATE_DIR, RealNode
from kgwe.resources import deploy_dir, sample_repo_dir

if TYPE_CHECKING:  # imported where used: `kgwe cluster status/down` need none of them
    from kubernetes import client

    from kgwe.localcluster.controlplane import ControlPlane
    from kgwe.localcluster.deviceplugin import DevicePluginStandIn
    from kgwe.localcluster.migmanager import MigManagerStandIn

CLUSTER_RECORD = STATE_DIR / "cluster.json"
REQUEST_FILE = "cluster-request.json"


def chart_image_reference() -> str:
    """The KGWE image reference KGWE's chart uses by default: image.repository and image.tag (empty: the
    chart's appVersion), from the chart itself."""
    chart = deploy_dir() / "helm" / "kgwe"
    values = yaml.safe_load((chart / "values.yaml").read_text())
    tag = values["image"].get("tag") or yaml.safe_load((chart / "Chart.yaml").read_text())["appVersion"]
    return f"{values['image']['repository']}:{tag}"


def default_inventory() -> Path:
    return sample_repo_dir() / "inventory"


@dataclass
class ClusterRequest:
    """What `kgwe cluster up` asks the supervisor for (written to DIR/cluster-request.json)."""

    directory: str
    images: list[str] = field(default_factory=list)  # OCI archives
    inventory: str = ""  # a GPUInventory file or directory
    node_binaries: dict[str, str] = field(default_factory=dict)  # NodeBinaries.to_dict()
    mig_delay_seconds: float = 1.0
    lock_wait_seconds: float = 0.0  # for another real node on this host to go (0: fail at once)

    @classmethod
    def read(cls, path: Path) -> ClusterRequest:
        return cls(**json.loads(path.read_text()))


@dataclass
class ClusterRecord:
    """The running cluster, as /run/kgwe/cluster.json says (for `down` and `status`)."""

    pid: int
    directory: str
    kubeconfig: str
    state: str  # starting, ready
    server: str = ""
    started: float = 0.0  # time.time() when it became ready
    ready_seconds: float = 0.0

    def write(self) -> None:
        CLUSTER_RECORD.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        partial = CLUSTER_RECORD.with_suffix(".partial")
        partial.write_text(json.dumps(asdict(self)))
        partial.replace(CLUSTER_RECORD)

    @classmethod
    def read(cls) -> ClusterRecord | None:
        try:
            return cls(**json.loads(CLUSTER_RECORD.read_text()))
        except (OSError, ValueError, TypeError):
            return None


def load_inventory_nodes(path: Path) -> list[Any]:
    """The nodes of the GPUInventory at `path`, validated (errors name file, line and field)."""
    from kgwe.policy import load_repository

    policies = load_repository(path)
    policies.raise_for_errors()
    inventory = policies.inventory()
    if inventory is None or not inventory.spec.nodes:
        raise KgweError(f"{path}: no GPUInventory with nodes found")
    return list(inventory.spec.nodes)


class LocalCluster:
    """Everything `kgwe cluster up` runs, in this process (the supervisor's, or a test session's)."""

    def __init__(self, request: ClusterRequest, say: Callable[[str], None] = print) -> None:
        self.request = request
        self.say = say
        self.cp: ControlPlane | None = None
        # kept: a signal handler may stop the control plane (and drop cp.node) first
        self.node: RealNode | None = None
        self._standins: list[MigManagerStandIn | DevicePluginStandIn] = []

    def start(self) -> None:
        from kubernetes import client

        from kgwe.localcluster import gpunodes
        from kgwe.localcluster.controlplane import ControlPlane, find_binaries
        from kgwe.localcluster.nodebins import NodeBinaries

        directory = Path(self.request.directory)
        nodes = load_inventory_nodes(Path(self.request.inventory or default_inventory()))
        binaries = NodeBinaries.from_dict(self.request.node_binaries) if self.request.node_binaries else None
        self.say(
            "starting etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok and the real node"
        )
        self.cp = ControlPlane(
            binaries.kubernetes if binaries else find_binaries(),
            workdir=directory,
            real_node=functools.partial(
                RealNode,
                binaries=binaries,
                images=[Path(p) for p in self.request.images],
                lock_wait_seconds=self.request.lock_wait_seconds,
            ),
        )
        self.cp.start()
        node = self.cp.node
        assert isinstance(node, RealNode)  # the one real_node above makes
        self.node = node
        for reference in list(node.imported):
            _tag_for_chart(node, reference)
        images = ", ".join(sorted(node.image_references()))
        self.say(f"real node {node.name} Ready; CoreDNS serving; images: {images}")
        api = self.cp.api_client()
        gpunodes.ensure_gpu_operator_objects(api)  # its namespace and RuntimeClass, as the GPU Operator makes
        core = client.CoreV1Api(api)
        for inv_node in nodes:
            core.create_node(gpunodes.inventory_node_manifest(inv_node, taints=[gpunodes.GPU_NODE_TAINT]))
        gpunodes.wait_nodes_ready(api, [n.name for n in nodes], timeout_seconds=120)
        self.say(f"{len(nodes)} kwok GPU nodes Ready (from {self.request.inventory or default_inventory()})")
        self._start_standins(api)

    @property
    def mig_manager(self) -> MigManagerStandIn | None:
        """The MIG manager stand-in while the cluster runs (its `applies` log, its `delay_seconds`)."""
        from kgwe.localcluster.migmanager import MigManagerStandIn

        return next((s for s in self._standins if isinstance(s, MigManagerStandIn)), None)

    def import_image(self, archive: Path) -> str:
        """Import one more OCI archive into the running node (as `--image` does); returns its reference."""
        assert self.node is not None, "the cluster is not started"
        reference = self.node.import_image(archive)
        _tag_for_chart(self.node, reference)
        return str(reference)

    def _start_standins(self, api: client.ApiClient) -> None:
        from kgwe.localcluster.deviceplugin import DevicePluginStandIn
        from kgwe.localcluster.migmanager import MigManagerStandIn
        from kgwe.render.render import RenderOptions

        names = RenderOptions()
        delay = self.request.mig_delay_seconds
        common: dict[str, Any] = {"delay_seconds": delay, "config_namespace": names.mig_namespace}
        self._standins = [
            MigManagerStandIn(api, config_map=names.mig_config_name, **common).__enter__(),
            DevicePluginStandIn(api, config_map=names.device_plugin_config_name, **common).__enter__(),
        ]
        self.say(
            f"MIG manager and device-plugin stand-ins watch {names.mig_namespace}/{names.mig_config_name} "
            f"and {names.mig_namespace}/{names.device_plugin_config_name}"
        )

    def stop(self) -> list[str]:
        """Stop the stand-ins, the node and the control plane; returns the node's teardown problems."""
        stoppers = [threading.Thread(target=_quietly_exit, args=(s,)) for s in self._standins]
        for thread in stoppers:  # together: each waits for its watch to time out
            thread.start()
        for thread in stoppers:
            thread.join()
        self._standins = []
        if self.cp is not None:
            self.cp.stop()
            self.cp = None
        return list(self.node.teardown_problems) if self.node is not None else []


def _quietly_exit(context: contextlib.AbstractContextManager[object]) -> None:
    with contextlib.suppress(Exception):
        context.__exit__(None, None, None)


def _tag_for_chart(node: RealNode, reference: str) -> None:
    """A KGWE image (`…/kgwe:…`) is also named what KGWE's chart runs by default."""
    chart_reference = chart_image_reference()
    if _repository_name(reference) == _repository_name(chart_reference):
        node.tag_image(reference, chart_reference)


def _repository_name(reference: str) -> str:
    """The last path element of an image reference's repository (`ghcr.io/kgwe/kgwe:0.1.0` -> `kgwe`)."""
    return reference.rsplit("/", 1)[-1].split("@", 1)[0].split(":", 1)[0]


# ---- the supervisor process -------------------------------------------------------------------------


def serve(directory: Path, status_fd: int) -> int:
    """Run the cluster until SIGTERM/SIGINT/SIGHUP; report on `status_fd`; 0 when it stopped cleanly."""
    status = os.fdopen(status_fd, "w", buffering=1)

    def report(kind: str, text: str) -> None:
        print(f"{time.strftime('%H:%M:%S')} {kind} {text}", flush=True)  # the supervisor's log
        with contextlib.suppress(OSError):  # `up` has gone: keep running, the log has it
            status.write(f"{kind} {' '.join(text.split())}\n")

    stop = threading.Event()

    def on_signal() -> None:
        for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(signum, lambda *_: stop.set())

    on_signal()
    request = ClusterRequest.read(directory / REQUEST_FILE)
    cluster = LocalCluster(request, say=lambda text: report("STEP", text))
    record = ClusterRecord(os.getpid(), str(directory), str(directory / "kubeconfig"), "starting")
    t0 = time.monotonic()
    try:
        record.write()
        cluster.start()
        # The control plane stops itself on SIGTERM (its handler); from here the stand-ins must stop before
        # the API server goes, so a signal only wakes the orderly stop below.
        on_signal()
        if stop.is_set():
            raise KgweError("stopped while starting")
        ready = time.monotonic() - t0
        assert cluster.cp is not None  # start() returned: it is running
        record.state, record.server, record.started = "ready", cluster.cp.server_url, time.time()
        record.ready_seconds = round(ready, 1)
        record.write()
        report("READY", f"{ready:.1f}")
        status.close()
        stop.wait()
        t1 = time.monotonic()
        print("stopping", flush=True)
        problems = cluster.stop()
        for problem in problems:
            print(f"teardown: {problem}", flush=True)
        print(f"stopped in {time.monotonic() - t1:.1f}s", flush=True)
        return 1 if problems else 0
    except BaseException as exc:  # report it to `up` as one line; the log keeps the detail
        message = str(exc) if isinstance(exc, KgweError) else f"{type(exc).__name__}: {exc}"
        import traceback

        traceback.print_exc()
        cluster.stop()
        report("ERROR", message.splitlines()[0] if message else type(exc).__name__)
        return 1
    finally:
        written = ClusterRecord.read()
        if written is not None and written.pid == os.getpid():
            CLUSTER_RECORD.unlink(missing_ok=True)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kgwe.localcluster.cluster")
    parser.add_argument("directory", type=Path)
    parser.add_argument("--status-fd", type=int, required=True)
    args = parser.parse_args(argv)
    return serve(args.directory, args.status_fd)


if __name__ == "__main__":
    sys.exit(main())
