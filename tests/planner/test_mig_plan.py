"""The planner's objectives, in their order, on small pools whose best answer is known by hand."""

from __future__ import annotations

from collections import Counter

import pytest

from kgwe.errors import KgweError
from kgwe.gpu import catalog
from kgwe.gpu.layouts import is_valid
from kgwe.planner.migparted import build_mig_configs
from kgwe.planner.model import GPUState, PoolRequest, RolloutLimits
from kgwe.planner.plan import plan_pool, plan_pools

H100 = "H100-80GB"
SEVEN_1G = tuple(("1g.10gb", s) for s in range(7))
BALANCED = (("1g.10gb", 0), ("1g.10gb", 1), ("2g.20gb", 2), ("3g.40gb", 4))
SEED_SHARES = {"1g.10gb": 0.7, "2g.20gb": 0.2, "3g.40gb": 0.1}


def pool(n_nodes, per_node=8, model=H100, layout=None):
    return tuple(GPUState(f"node-{i:02d}", j, model, layout) for i in range(n_nodes) for j in range(per_node))


def replanned(plan):
    return tuple(GPUState(g.node, g.index, g.model, g.target) for g in plan.gpus)


def test_fresh_pool_reaches_the_seed_shares_with_valid_layouts():
    plan = plan_pool(PoolRequest("inference", pool(10), shares=SEED_SHARES))
    h100 = catalog.model_by_key(H100)
    assert all(g.target is not None and is_valid(h100, g.target) for g in plan.gpus)
    for name, share in SEED_SHARES.items():
        assert abs(plan.achieved_shares[name] - share) <= 3 / plan.total_compute_slices, name
    assert plan.idle_compute_slices <= 3  # 560 slices; 3g layouts can cost one each
    assert plan.gpus_changed == 80 and all(r.reason.startswith("enable MIG") for r in plan.gpus)


def test_replanning_a_satisfied_pool_changes_nothing():
    first = plan_pool(PoolRequest("p", pool(4), shares=SEED_SHARES))
    again = plan_pool(PoolRequest("p", replanned(first), shares=SEED_SHARES))
    assert again.gpus_changed == 0
    assert [g.target for g in again.gpus] == [g.target for g in first.gpus]
    assert all(g.reason.startswith("kept") for g in again.gpus)


def test_only_the_needed_gpus_change():
    gpus = pool(2, layout=SEVEN_1G)  # 16 GPUs, all 1g
    plan = plan_pool(PoolRequest("p", gpus, counts={"3g.40gb": 2, "1g.10gb": 90}))
    assert plan.gpus_changed == 1  # one GPU becomes 3g+3g (3g+4x1g twice would change two)
    assert plan.achieved_counts["3g.40gb"] >= 2 and plan.achieved_counts["1g.10gb"] >= 90
    assert plan.unmet == {}


def test_in_use_instances_are_never_destroyed_without_drain():
    gpus = list(pool(1, layout=SEVEN_1G))
    gpus[3] = GPUState("node-00", 3, H100, SEVEN_1G, in_use=(("1g.10gb", 2),))
    plan = plan_pool(PoolRequest("p", tuple(gpus), shares={"7g.80gb": 1.0}))
    assert plan.gpus_changed == 7 and plan.in_use_destroyed == 0 and plan.in_use_kept == 1
    kept = next(g for g in plan.gpus if g.index == 3)
    assert not kept.changed and "in use" in kept.reason and "drain is not allowed" in kept.reason
    drained = plan_pool(
        PoolRequest("p", tuple(gpus), shares={"7g.80gb": 1.0}, limits=RolloutLimits(allow_drain=True))
    )
    assert drained.gpus_changed == 8 and drained.in_use_destroyed == 1
    assert "drains 1" in next(g for g in drained.gpus if g.index == 3).reason


def test_drain_is_used_only_when_it_improves_the_distance():
    gpus = list(pool(1, layout=BALANCED))
    gpus[0] = GPUState("node-00", 0, H100, BALANCED, in_use=(("3g.40gb", 4),))
    plan = plan_pool(
        PoolRequest("p", tuple(gpus), counts={"1g.10gb": 2}, limits=RolloutLimits(allow_drain=True))
    )
    assert plan.gpus_changed == 0 and plan.in_use_destroyed == 0


def test_demand_outranks_shares():
    plan = plan_pool(PoolRequest("p", pool(1), shares={"1g.10gb": 1.0}, demand={"7g.80gb": 3}))
    assert plan.achieved_counts["7g.80gb"] == 3 and plan.achieved_counts["1g.10gb"] == 35


def test_unmet_demand_is_reported_not_an_error():
    plan = plan_pool(PoolRequest("p", pool(1, per_node=2), demand={"7g.80gb": 3}))
    assert plan.unmet == {"7g.80gb": 1}


def test_rollout_limits():
    gpus = pool(4, layout=SEVEN_1G)
    by_gpus = plan_pool(
        PoolRequest("p", gpus, shares={"3g.40gb": 1.0}, limits=RolloutLimits(max_gpus_changed=5))
    )
    assert by_gpus.gpus_changed == 5 and by_gpus.nodes_changed == 1
    by_nodes = plan_pool(
        PoolRequest("p", gpus, shares={"3g.40gb": 1.0}, limits=RolloutLimits(max_nodes_changed=2))
    )
    assert by_nodes.gpus_changed == 16 and by_nodes.nodes_changed == 2
    assert by_nodes.deferred == 16 and "wait for later waves" in by_nodes.notes[0]


def test_changes_are_packed_onto_few_nodes():
    gpus = pool(8, layout=SEVEN_1G)
    plan = plan_pool(PoolRequest("p", gpus, counts={"7g.80gb": 8}, shares={"1g.10gb": 0.5}))
    assert plan.gpus_changed == 8 and plan.nodes_changed == 1


def test_mixed_models_share_profile_names_by_resource():
    gpus = pool(1, per_node=2, model="A100-40GB") + tuple(GPUState("h", i, H100) for i in range(2))
    plan = plan_pool(PoolRequest("p", gpus, counts={"1g.10gb": 14}))
    # 1g.10gb is 4 per A100-40GB (2 memory slices) and 7 per H100: 14 needs both H100s
    h100 = Counter(g.target_profiles.count("1g.10gb") for g in plan.gpus if g.model == H100)
    assert h100 == Counter({7: 2})


def test_plan_is_deterministic_and_feeds_mig_parted():
    req = PoolRequest("p", pool(3, layout=BALANCED), shares=SEED_SHARES)
    a, b = plan_pool(req), plan_pool(req)
    assert a == b
    configs, nodes = build_mig_configs(a.layouts_by_node())
    assert set(nodes) == {"node-00", "node-01", "node-02"}
    assert all(name in configs for name in nodes.values())


def test_non_mig_gpus_are_left_alone():
    gpus = (*pool(1, per_node=2, model="L40S"), GPUState("h", 0, H100))
    plan = plan_pool(PoolRequest("p", gpus, shares={"1g.10gb": 1.0}))
    l40s = [g for g in plan.gpus if g.model == "L40S"]
    assert all(not g.changed and "does not support MIG" in g.reason for g in l40s)


@pytest.mark.parametrize(
    ("request_", "message"),
    [
        (PoolRequest("p", pool(1), shares={"1g.5gb": 1.0}), "no GPU of this pool offers profile '1g.5gb'"),
        (PoolRequest("p", pool(1), shares={"1g.10gb": 0.8, "2g.20gb": 0.4}), "add up to 120%"),
        (PoolRequest("p", pool(1), counts={"7g.80gb": 9}), "7g.80gb: 9 asked, at most 8"),
        (PoolRequest("p", pool(1), counts={"1g.10gb": 1.5}), "whole number"),
        (PoolRequest("p", pool(1), shares={"1g.10gb": -0.1}), "number >= 0"),
        (PoolRequest("p", (GPUState("n", 0, "H999"),), shares={}), "unknown GPU model 'H999'"),
        (PoolRequest("p", pool(1, model="T4"), shares={"1g.10gb": 1.0}), "no GPU of this pool offers"),
        (PoolRequest("p", (GPUState("n", 0, H100, (("1g.10gb", 7),)),)), "cannot start at memory slice 7"),
        (PoolRequest("p", (GPUState("n", 0, H100, (), in_use=(("1g.10gb", 0),)),)), "not in its layout"),
        (PoolRequest("p", (GPUState("n", 0, H100), GPUState("n", 0, H100))), "listed twice"),
        # the check runs once per distinct state: a bad GPU behind a good one of the same layout is still seen
        (
            PoolRequest(
                "p",
                (
                    GPUState("n", 0, H100, SEVEN_1G, in_use=(("1g.10gb", 0),)),
                    GPUState("n", 1, H100, SEVEN_1G),
                    GPUState("n", 2, H100, SEVEN_1G, in_use=(("2g.20gb", 0),)),
                ),
            ),
            "GPU n/2 has in-use instances not in its layout",
        ),
        (
            PoolRequest("p", (GPUState("n", 0, H100, SEVEN_1G), GPUState("n", 1, "A30-24GB", SEVEN_1G))),
            "A30-24GB has no MIG profile '1g.10gb'",
        ),
    ],
)
def test_bad_requests_are_clear_errors(request_, message):
    with pytest.raises(KgweError, match=message.replace("(", r"\(").replace(".", r"\.")):
        plan_pool(request_)


def test_a_gpu_in_two_pools_is_an_error():
    with pytest.raises(KgweError, match="both pool a and pool b"):
        plan_pools([PoolRequest("a", pool(1)), PoolRequest("b", pool(1))])
