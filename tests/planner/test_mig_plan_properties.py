"""Hypothesis properties of the planner."""

from __future__ import annotations

import itertools
from collections import Counter
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kgwe.errors import KgweError
from kgwe.gpu import catalog
from kgwe.gpu.layouts import check_layout, enumerate_layouts, feasible_multisets
from kgwe.planner.model import GPUState, PoolRequest, RolloutLimits
from kgwe.planner.plan import plan_pool

MODELS = ["H100-80GB", "A100-40GB", "A30-24GB"]
SETTINGS = settings(max_examples=35, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _layouts(key):
    model = catalog.model_by_key(key)
    return [None, (), *enumerate_layouts(model, [p.name for p in model.base_profiles], maximal=False)]


LAYOUTS = {key: _layouts(key) for key in MODELS}


@st.composite
def gpu_states(draw, node, index, models):
    key = draw(st.sampled_from(models))
    layout = draw(st.sampled_from(LAYOUTS[key]))
    in_use = ()
    whole = False
    if layout:
        in_use = tuple(i for i in layout if draw(st.integers(0, 4)) == 0)
    elif layout is None:
        whole = draw(st.integers(0, 5)) == 0
    return GPUState(node, index, key, layout, in_use, whole)


@st.composite
def requests(draw, limits=True):
    models = draw(st.lists(st.sampled_from(MODELS), min_size=1, max_size=2, unique=True))
    gpus = []
    for n in range(draw(st.integers(1, 3))):
        for i in range(draw(st.integers(1, 4))):
            gpus.append(draw(gpu_states(f"node-{n}", i, models)))
    present = {g.model for g in gpus}
    offered = sorted({p.name for k in present for p in catalog.model_by_key(k).base_profiles})
    chosen = draw(st.lists(st.sampled_from(offered), min_size=1, max_size=4, unique=True))
    weights = [draw(st.integers(1, 10)) for _ in chosen]
    total = sum(weights) * draw(st.sampled_from([1, 1, 2]))
    shares = {p: w / total for p, w in zip(chosen, weights, strict=True)}
    demand = {}
    if draw(st.booleans()):
        demand = {draw(st.sampled_from(offered)): draw(st.integers(0, 6))}
    lim = RolloutLimits(allow_drain=draw(st.booleans()))
    if limits and draw(st.booleans()):
        lim = RolloutLimits(draw(st.integers(0, 5)), draw(st.integers(1, 3)), lim.allow_drain)
    return PoolRequest("pool", tuple(gpus), shares=shares, demand=demand, limits=lim)


@SETTINGS
@given(requests())
def test_layouts_valid_in_use_safe_and_deterministic(req):
    plan = plan_pool(req)
    assert plan == plan_pool(req)
    by_id = {(g.node, g.index): g for g in req.gpus}
    assert len(plan.gpus) == len(req.gpus)
    for g in plan.gpus:
        state = by_id[(g.node, g.index)]
        if g.target is not None:
            check_layout(catalog.model_by_key(g.model), g.target)
        if state.busy and not req.limits.allow_drain:
            assert not g.changed and g.in_use_destroyed == 0
        if not g.changed:
            assert Counter(i.profile for i in g.target or ()) == Counter(n for n, _ in state.layout or ())
        assert g.reason
    if not req.limits.allow_drain:
        assert plan.in_use_destroyed == 0
    if req.limits.max_gpus_changed is not None:
        assert plan.gpus_changed <= req.limits.max_gpus_changed
    if req.limits.max_nodes_changed is not None:
        assert plan.nodes_changed <= req.limits.max_nodes_changed


@SETTINGS
@given(requests(limits=False))
def test_replanning_the_result_changes_nothing(req):
    plan = plan_pool(req)
    by_id = {(g.node, g.index): g for g in req.gpus}
    after = []
    for g in plan.gpus:
        state = by_id[(g.node, g.index)]
        in_use = () if g.changed else state.in_use
        whole = state.whole_gpu_in_use and not g.changed
        after.append(GPUState(g.node, g.index, g.model, g.target, in_use, whole))
    again = plan_pool(PoolRequest(req.name, tuple(after), req.shares, req.counts, req.demand, req.limits))
    assert again.gpus_changed == 0, [g.reason for g in again.changes()]


def _shortfall(req, multisets):
    """The planner's share objective for a given final state (compute slices short of the targets)."""
    model = catalog.model_by_key(req.gpus[0].model)
    total = model.compute_slots * len(req.gpus)
    got = Counter()
    for ms in multisets:
        got.update(dict(ms))
    return sum(
        max(0.0, share * total - got[p] * model.profiles[p].compute_slices) for p, share in req.shares.items()
    )


@SETTINGS
@given(
    st.lists(st.sampled_from(LAYOUTS["H100-80GB"][1:]), min_size=1, max_size=2),
    st.dictionaries(
        st.sampled_from(["1g.10gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"]),
        st.integers(1, 10),
        min_size=1,
        max_size=3,
    ),
)
def test_share_distance_is_optimal_against_brute_force(layouts, weights):
    total = sum(weights.values())
    shares = {p: w / total for p, w in weights.items()}
    req = PoolRequest(
        "p", tuple(GPUState("n", i, "H100-80GB", lay) for i, lay in enumerate(layouts)), shares=shares
    )
    plan = plan_pool(req)
    model = catalog.model_by_key("H100-80GB")
    options = [tuple(sorted(Counter(dict(ms)).items())) for ms in feasible_multisets(model, sorted(shares))]
    per_gpu = [[*options, tuple(sorted(Counter(n for n, _ in lay).items()))] for lay in layouts]
    best = min(_shortfall(req, combo) for combo in itertools.product(*per_gpu))
    got = _shortfall(req, [tuple(Counter(i.profile for i in g.target).items()) for g in plan.gpus])
    assert got == pytest.approx(best, abs=1e-6)


@SETTINGS
@given(st.integers(1, 4), st.sampled_from(["7g.80gb", "3g.40gb", "1g.10gb"]))
def test_impossible_counts_are_clear_errors(n_gpus, profile):
    gpus = tuple(GPUState("n", i, "H100-80GB") for i in range(n_gpus))
    most = n_gpus * catalog.model_by_key("H100-80GB").profile(profile).max_count
    assert plan_pool(PoolRequest("p", gpus, counts={profile: most})).unmet == {}
    with pytest.raises(KgweError, match=f"{profile}: {most + 1} asked, at most {most}"):
        plan_pool(PoolRequest("p", gpus, counts={profile: most + 1}))


@SETTINGS
@given(st.text(min_size=1, max_size=12).filter(lambda s: not catalog.models_matching(s)))
def test_unknown_models_are_clear_errors(key):
    with pytest.raises(KgweError, match="unknown GPU model"):
        plan_pool(PoolRequest("p", (GPUState("n", 0, key),)))


@SETTINGS
@given(requests(), st.booleans())
def test_disabling_mig_never_kills_workloads_unless_drain(req, drain):
    lim = RolloutLimits(req.limits.max_gpus_changed, req.limits.max_nodes_changed, drain)
    plan = plan_pool(PoolRequest(req.name, req.gpus, limits=lim, mig_enabled=False))
    by_id = {(g.node, g.index): g for g in req.gpus}
    for g in plan.gpus:
        state = by_id[(g.node, g.index)]
        if g.changed:
            assert g.target is None and state.layout is not None
            assert drain or not state.busy
        else:
            assert g.target == (
                None if state.layout is None else check_layout(catalog.model_by_key(g.model), state.layout)
            )
    if lim.max_nodes_changed is not None:
        assert plan.nodes_changed <= lim.max_nodes_changed


def _distance(req, plan):
    """(unmet demand in instances, share shortfall in compute slices) of a plan, computed from its layouts."""
    got = Counter(i.profile for g in plan.gpus for i in (g.target or ()))
    unmet = sum(max(0, n - got[p]) for p, n in req.demand.items())
    total = sum(catalog.model_by_key(g.model).compute_slots for g in req.gpus)
    short = 0.0
    models = [catalog.model_by_key(k) for k in sorted({g.model for g in req.gpus})]
    for p, share in req.shares.items():
        size = next(m.profiles[p].compute_slices for m in models if p in m.profiles)
        short += max(0.0, share * total - got[p] * size)
    return unmet, round(short, 6)


@SETTINGS
@given(requests(limits=False))
def test_drain_destroys_only_what_buys_a_better_distance(req):
    strict = PoolRequest(req.name, req.gpus, req.shares, req.counts, req.demand, RolloutLimits())
    drain = replace(strict, limits=RolloutLimits(allow_drain=True))
    strict_plan, drain_plan = plan_pool(strict), plan_pool(drain)
    assert _distance(drain, drain_plan) <= _distance(strict, strict_plan)
    if _distance(drain, drain_plan) == _distance(strict, strict_plan):
        assert drain_plan.in_use_destroyed == 0
