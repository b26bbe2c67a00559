"""End to end on the real control plane: the agent on the fake NVML, the real kube-scheduler running the
configuration KGWE renders, and the real extender. An XID 79 injected on GPU 3 shows in the Node's
annotation, condition and Events within an agent period; new pods stay off that GPU (an 8-GPU pod no
longer fits the node, a 1-GPU pod still does, and the pod's event says why); `kgwe health` shows it;
clearing the fault brings everything back."""

from __future__ import annotations

import json
import secrets
from pathlib import Path
from urllib.request import urlopen

import orjson
import pytest
from kubernetes import client

from kgwe.cli import main
from kgwe.localcluster.extender_process import start_extender
from kgwe.topology import health
from kgwe.topology.fake_nvml import FAULTS_FILE_ENV
from kgwe.vocab import GPU_HEALTH_CONDITION
from tests.harness.deployed import eventually
from tests.harness.kgwe_scheduler import LocalScheduler, local_config, rendered_config_text
from tests.harness.pods import gpu_pod
from tests.harness.processes import start_kgwe, stop

pytestmark = pytest.mark.cluster
KGWE = "kgwe-scheduler"


def node_view(port: int, name: str) -> dict:
    with urlopen(f"http://127.0.0.1:{port}/debug/nodes/{name}") as r:
        return orjson.loads(r.read())


def condition(core: client.CoreV1Api, node: str) -> client.V1NodeCondition | None:
    conditions = core.read_node(node).status.conditions or []
    return next((c for c in conditions if c.type == GPU_HEALTH_CONDITION), None)


def faults_on(core: client.CoreV1Api, node: str) -> dict[int, health.GPUFault] | None:
    raw = (core.read_node(node).metadata.annotations or {}).get(health.ANNOTATION_KEY)
    return None if raw is None else health.decode(raw)


def test_an_injected_xid_keeps_new_pods_off_that_gpu_until_it_recovers(
    control_plane, k8s_api, namespace, gpu_node, tmp_path: Path, monkeypatch, capsys
) -> None:
    core = client.CoreV1Api(k8s_api)
    tag = {"kgwe-health": secrets.token_hex(3)}
    node = gpu_node("DGX-H100", labels=tag)
    fault_file = tmp_path / "faults"
    fault_file.write_text("")
    monkeypatch.setenv(FAULTS_FILE_ENV, str(fault_file))
    kubeconfig = str(control_plane.kubeconfig_path)
    agent, _ = start_kgwe(
        [
            "agent",
            "--fake-nvml",
            "DGX-H100",
            "--node-name",
            node,
            "--kubeconfig",
            kubeconfig,
            "--pod-resources-socket",
            "",
            "--interval-seconds",
            "1",
            "--recover-after-periods",
            "2",
            "--xid-hold-periods",
            "2",
        ],
        tmp_path / "agent.log",
    )
    extender, port = start_extender(control_plane.kubeconfig_path, "--namespace", namespace)
    config = local_config(
        rendered_config_text("http://kgwe-extender.kgwe-system.svc:8080"),
        kubeconfig=control_plane.kubeconfig_path,
        extender_url=f"http://127.0.0.1:{port}",
        leader_elect=False,
    )
    scheduler = LocalScheduler(control_plane.binaries, control_plane.workdir / "kgwe-health", config).start()
    try:
        # the annotation and the node condition are two writes of the agent's (metadata, then status)
        eventually(
            lambda: faults_on(core, node) == {} and condition(core, node) is not None,
            "the agent reports every GPU healthy",
            timeout=120,
        )
        assert condition(core, node).status == "True"

        fault_file.write_text("3:xid=79,3:lost\n")  # XID 79 comes with the GPU falling off the bus
        sick = eventually(lambda: faults_on(core, node) or None, "GPU 3 reported unhealthy", timeout=120)
        assert list(sick) == [3] and sick[3].reason == "XID79"
        cond = eventually(
            lambda: (c := condition(core, node)) is not None and c.status == "False" and c, "condition False"
        )
        assert cond.reason == "GPUsUnhealthy" and "GPU 3: XID79" in cond.message
        # the agent writes the condition, then the Event: wait for it rather than race it
        eventually(
            lambda: any(
                e.reason == "GPUUnhealthy" and "GPU 3" in (e.message or "")
                for e in core.list_namespaced_event(
                    "default", field_selector=f"involvedObject.name={node}"
                ).items
            ),
            "a GPUUnhealthy Event for GPU 3",
        )

        def bound(name: str) -> str | None:
            return core.read_namespaced_pod(name, namespace).spec.node_name

        core.create_namespaced_pod(namespace, gpu_pod("eight", node, 8, scheduler=KGWE))
        core.create_namespaced_pod(namespace, gpu_pod("one", node, 1, scheduler=KGWE))
        assert eventually(lambda: bound("one"), "the 1-GPU pod placed", timeout=120) == node

        def reasons() -> str | None:
            events = core.list_namespaced_event(namespace, field_selector="involvedObject.name=eight")
            text = " ".join(e.message or "" for e in events.items if e.reason == "FailedScheduling")
            return text if "GPU 3 (XID79)" in text else None

        message = eventually(reasons, "the 8-GPU pod's event names the sick GPU", timeout=120)
        assert "unhealthy, not used" in message and bound("eight") is None

        capsys.readouterr()
        assert main(["health", node, "--kubeconfig", kubeconfig, "-o", "json"]) == 0
        listed = json.loads(capsys.readouterr().out)
        assert any("XID79" in json.dumps(item) for item in listed["items"])

        fault_file.write_text("")  # the GPU is back (reset)
        eventually(lambda: faults_on(core, node) == {}, "GPU 3 healthy again", timeout=120)
        eventually(lambda: condition(core, node).status == "True", "condition True again", timeout=120)
        core.delete_namespaced_pod("one", namespace, grace_period_seconds=0)
        core.delete_namespaced_pod("eight", namespace, grace_period_seconds=0)
        eventually(lambda: not core.list_namespaced_pod(namespace).items, "pods gone", timeout=120)
        # the extender's own watch must have seen it too, or the scheduler could ask it first and back off
        eventually(
            lambda: node_view(port, node)["gpuUsedMilli"] == [0] * 8,
            "the extender sees 8 free GPUs",
            timeout=120,
        )
        core.create_namespaced_pod(namespace, gpu_pod("eight-again", node, 8, scheduler=KGWE))
        assert (
            eventually(lambda: bound("eight-again"), "8-GPU pod placed after recovery", timeout=120) == node
        )
    finally:
        scheduler.stop()
        stop(extender)
        stop(agent)
