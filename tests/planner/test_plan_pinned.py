"""Pinned GPUs (their node already changed for the current strategy revision) keep their layout: the
controller's guarantee that a node changes at most once per revision rests on it."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given
from hypothesis import strategies as st

from kgwe.errors import KgweError
from kgwe.planner.model import PoolRequest
from kgwe.planner.plan import plan_pool

from .test_mig_plan_properties import SETTINGS, requests


@SETTINGS
@given(requests(), st.data())
def test_pinned_nodes_keep_their_layouts_and_the_plan_is_deterministic(req: PoolRequest, data):
    nodes = sorted({g.node for g in req.gpus})
    pinned = set(data.draw(st.lists(st.sampled_from(nodes), unique=True)))
    req = replace(req, gpus=tuple(replace(g, pinned=g.node in pinned) for g in req.gpus))
    try:
        plan = plan_pool(req)
    except KgweError:
        return  # counts the pool cannot hold: a policy error, covered elsewhere
    for gpu in plan.gpus:
        if gpu.node in pinned:
            assert not gpu.changed, f"pinned {gpu.node}/{gpu.index} changed: {gpu.reason}"
    assert plan_pool(req) == plan, "the same facts must give the same plan"


def test_a_pool_with_only_pinned_nodes_changes_nothing():
    from kgwe.planner.model import GPUState

    gpus = tuple(GPUState(f"n{n}", i, "H100-80GB", None, pinned=True) for n in range(2) for i in range(2))
    plan = plan_pool(PoolRequest("p", gpus, shares={"1g.10gb": 1.0}))
    assert plan.gpus_changed == 0 and all("already changed" in g.reason for g in plan.gpus)
    disabled = plan_pool(PoolRequest("p", tuple(replace(g, layout=()) for g in gpus), mig_enabled=False))
    assert disabled.gpus_changed == 0
