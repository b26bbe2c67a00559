"""Which pods are MIG demand for which pool (kgwe.planner.mig_demand): only unschedulable pending pods
asking nvidia.com/mig-* resources, each counted once, for a pool whose nodes it may use."""

from __future__ import annotations

from kgwe.planner.mig_demand import PoolView, measure, pool_for, unschedulable_mig_request

UNSCHEDULABLE = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}


def pod(
    name: str,
    resources: dict[str, str],
    *,
    node: str | None = None,
    selector: dict[str, str] | None = None,
    conditions: list[dict] | None = None,
    phase: str = "Pending",
) -> dict:
    spec: dict = {"containers": [{"name": "c", "resources": {"limits": resources, "requests": resources}}]}
    if node:
        spec["nodeName"] = node
    if selector:
        spec["nodeSelector"] = selector
    return {
        "metadata": {"name": name, "namespace": "ns"},
        "spec": spec,
        "status": {"phase": phase, "conditions": [UNSCHEDULABLE] if conditions is None else conditions},
    }


H100_PROFILES = frozenset({"1g.10gb", "2g.20gb", "3g.40gb", "7g.80gb"})
A100_PROFILES = frozenset({"1g.5gb", "3g.20gb", "7g.40gb"})
POOLS = [
    PoolView("h100", ("h1",), ({"pool": "inference", "gpu": "h100"},), H100_PROFILES, {"3g.40gb": 2}),
    PoolView("a100", ("a1",), ({"pool": "training", "gpu": "a100"},), A100_PROFILES, {}),
]


def test_only_unschedulable_pending_mig_pods_count() -> None:
    mig = {"nvidia.com/mig-1g.10gb": "1"}
    assert unschedulable_mig_request(pod("p", mig)) == (("1g.10gb", 1),)
    assert unschedulable_mig_request(pod("bound", mig, node="h1")) == ()
    assert unschedulable_mig_request(pod("running", mig, phase="Running")) == ()
    assert unschedulable_mig_request(pod("new", mig, conditions=[])) == ()  # the scheduler has not tried yet
    gated = {"type": "PodScheduled", "status": "False", "reason": "SchedulingGated"}
    assert unschedulable_mig_request(pod("gated", mig, conditions=[gated])) == ()  # a queue holds it
    assert unschedulable_mig_request(pod("whole", {"nvidia.com/gpu": "1"})) == ()
    assert unschedulable_mig_request(pod("bad", {"nvidia.com/mig-1g.10gb": "lots"})) == ()


def test_a_pod_goes_to_the_pool_its_selector_admits_and_whose_gpus_offer_the_profile() -> None:
    assert pool_for(pod("p", {}), ["1g.10gb"], POOLS) == "h100"
    assert pool_for(pod("p", {}), ["1g.5gb"], POOLS) == "a100"
    assert pool_for(pod("p", {}, selector={"pool": "training"}), ["1g.10gb"], POOLS) is None
    assert pool_for(pod("p", {}, selector={"pool": "inference"}), ["1g.10gb"], POOLS) == "h100"
    assert pool_for(pod("p", {}), ["1g.10gb", "1g.5gb"], POOLS) is None  # no one pool offers both


def test_measure_counts_instances_and_pods_per_pool() -> None:
    pods = [
        pod("a", {"nvidia.com/mig-1g.10gb": "2"}),
        pod("b", {"nvidia.com/mig-1g.10gb": "1"}),
        pod("c", {"nvidia.com/mig-3g.20gb": "1"}),
        pod("elsewhere", {"nvidia.com/mig-1g.10gb": "1"}, selector={"pool": "none"}),
        pod("bound", {"nvidia.com/mig-1g.10gb": "1"}, node="h1"),
    ]
    got = measure(POOLS, pods, {"h100": {"3g.40gb": 1}})
    assert got["h100"].pending == {"1g.10gb": 3}
    assert got["h100"].pending_pods == {"1g.10gb": 2}
    assert got["h100"].in_use == {"3g.40gb": 2}
    assert got["h100"].demand() == {"1g.10gb": 3, "3g.40gb": 1}
    assert got["a100"].pending == {"3g.20gb": 1}
