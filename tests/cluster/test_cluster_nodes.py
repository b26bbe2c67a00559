"""Node operations and the inventory reader against the real apiserver, kwok GPU nodes and the MIG
manager stand-in."""

from __future__ import annotations

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from kgwe.cluster.inventory import inventory_document, read_gpu_nodes
from kgwe.cluster.nodes import NodeOps
from kgwe.policy import GPUInventory
from kgwe.runtime.kube import KubeCluster
from kgwe.vocab import CORDONED_ANNOTATION, MIG_CONFIG_LABEL, MIG_STATE_LABEL, REQUESTED_AT_ANNOTATION
from tests.harness.waiting import Watched

pytestmark = pytest.mark.cluster

CONFIGS = {
    "all-disabled": [{"devices": "all", "mig-enabled": False}],
    "kgwe-half": [
        {"devices": [0, 1, 2, 3], "mig-enabled": False},
        {"devices": [4, 5, 6, 7], "mig-enabled": True, "mig-devices": {"1g.10gb": 7}},
    ],
}


def labels_of(core, node):
    return core.read_node(node).metadata.labels


def test_relabel_drives_the_mig_manager_to_success(k8s_api, gpu_node, mig_manager, kio):
    wait_for = kio.wait_for
    core = client.CoreV1Api(k8s_api)
    kio.put_mig_parted_config(core, mig_manager, CONFIGS)
    node = gpu_node("DGX-H100")
    ops = NodeOps(KubeCluster(k8s_api))
    ops.relabel(node, "kgwe-half")
    wait_for(
        "MIG success",
        lambda: (
            labels_of(core, node).get(MIG_STATE_LABEL) == "success"
            and labels_of(core, node).get(MIG_CONFIG_LABEL) == "kgwe-half"
        ),
        watch=Watched(core.list_node),
    )
    annotations = core.read_node(node).metadata.annotations
    assert REQUESTED_AT_ANNOTATION in annotations
    facts = {f.name: f for f in read_gpu_nodes(k8s_api)}[node]
    assert facts.gpus == 8 and facts.product == "NVIDIA-H100-80GB-HBM3" and facts.topology
    doc = inventory_document([facts], mig_configs=CONFIGS)
    inv = GPUInventory.model_validate(doc)
    layouts = inv.spec.nodes[0].current_layouts()
    assert layouts[:4] == [None] * 4 and layouts[4] == ("1g.10gb",) * 7


def test_cordon_evict_uncordon(k8s_api, gpu_node, namespace, kio):
    wait_for, gpu_pod = kio.wait_for, kio.gpu_pod
    core = client.CoreV1Api(k8s_api)
    node = gpu_node("DGX-H100")
    core.create_namespaced_pod(namespace, gpu_pod("trainer", node, count=2))
    core.create_namespaced_pod(namespace, gpu_pod("cpu-only", node, resource="cpu", count=1))
    wait_for(
        "the pod running", lambda: core.read_namespaced_pod("trainer", namespace).status.phase == "Running"
    )
    facts = {f.name: f for f in read_gpu_nodes(k8s_api)}[node]
    assert facts.gpu_pods == [f"{namespace}/trainer"] and facts.whole_gpus_in_use == 2

    ops = NodeOps(KubeCluster(k8s_api))
    ops.cordon(node, "kgwe-half")
    n = core.read_node(node)
    assert n.spec.unschedulable and n.metadata.annotations[CORDONED_ANNOTATION] == "kgwe-half"

    # A PodDisruptionBudget that allows no disruption blocks the eviction (429), respected.
    policy = client.PolicyV1Api(k8s_api)
    policy.create_namespaced_pod_disruption_budget(
        namespace,
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": "keep-trainer"},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "trainer"}}},
        },
    )
    blocked = ops.evict_gpu_pods(node)
    assert blocked.blocked == (f"{namespace}/trainer",) and not blocked.evicted
    assert core.read_namespaced_pod("trainer", namespace).metadata.deletion_timestamp is None

    policy.delete_namespaced_pod_disruption_budget("keep-trainer", namespace)
    done = ops.evict_gpu_pods(node)
    assert done.evicted == (f"{namespace}/trainer",)

    def trainer_gone():
        try:
            core.read_namespaced_pod("trainer", namespace)
            return False
        except ApiException as exc:
            return exc.status == 404

    wait_for("the evicted pod deleted", trainer_gone)
    assert core.read_namespaced_pod("cpu-only", namespace).metadata.deletion_timestamp is None

    ops.uncordon(node)
    n = core.read_node(node)
    assert not n.spec.unschedulable and CORDONED_ANNOTATION not in (n.metadata.annotations or {})


def test_uncordon_leaves_an_admins_cordon_alone(k8s_api, gpu_node):
    core = client.CoreV1Api(k8s_api)
    node = gpu_node("DGX-H100")
    core.patch_node(node, {"spec": {"unschedulable": True}})
    NodeOps(KubeCluster(k8s_api)).uncordon(node)
    assert core.read_node(node).spec.unschedulable


def test_node_patches_fail_like_the_client_with_the_apiservers_answer(k8s_api, gpu_node):
    ops = NodeOps(KubeCluster(k8s_api))
    with pytest.raises(ApiException) as missing:
        ops.relabel("no-such-node", "all-disabled")
    assert missing.value.status == 404 and "no-such-node" in missing.value.body
    node = gpu_node("DGX-H100")
    stale = client.CoreV1Api(k8s_api).read_node(node).metadata.resource_version
    ops.cordon(node, "all-disabled")  # the node changes after `stale` was read
    with pytest.raises(ApiException) as conflict:
        ops._patch(node, {"metadata": {"resourceVersion": stale, "annotations": {"x": "y"}}})
    assert conflict.value.status == 409
    assert ops.writes == 1  # only the cordon was written
