"""Decision 2's core: bounds of a pod's later GPU use from its first hour and its peers, the fallbacks with
their reasons, and the rightsizing advice built on the bounds."""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kgwe.cost.rightsizing import MODEL, RULE, UtilizationSeries, size_of
from kgwe.optimizer import usage
from kgwe.optimizer.usage import (
    Capacity,
    Peer,
    UsageModel,
    Use,
    advise,
    capacity_of,
    fit,
    from_params,
    group_keys,
    owner_name,
    predict_use,
    split,
    to_params,
)

A100 = "NVIDIA-A100-SXM4-80GB"
L40S = "NVIDIA-L40S"
MINUTE = 60.0
CAP = capacity_of(A100, 1)


def pod(
    name: str,
    *,
    memory: float = 24_000.0,
    compute: float = 0.2,
    spike: float = 1.5,
    minutes: int = 600,
    ns: str = "serve",
    seed: int = 0,
) -> UtilizationSeries:
    """A serving pod: steady memory with one spike after its first hour, compute that rises after it."""
    rng = random.Random(seed)
    times = [i * MINUTE for i in range(minutes)]
    c = [compute * (0.3 if i < 60 else 1.0) * rng.uniform(0.5, 1.0) for i in range(minutes)]
    m = [memory * (spike if i == minutes - 5 else 1.0) for i in range(minutes)]
    return UtilizationSeries(ns, name, c, m, times[-1], compute_times=times, memory_times=times)


def first_hour(s: UtilizationSeries) -> UtilizationSeries:
    keep = [i for i, t in enumerate(s.compute_times) if t <= usage.EARLY_SECONDS]
    pick = lambda xs: [xs[i] for i in keep]  # noqa: E731
    return UtilizationSeries(
        s.namespace,
        s.pod,
        pick(s.compute_gpus),
        pick(s.memory_mib),
        usage.EARLY_SECONDS,
        compute_times=pick(s.compute_times),
        memory_times=pick(s.memory_times),
    )


def peers(n: int, groups=("serve/sd", "serve"), **kw) -> list[Peer]:
    out = []
    for i in range(n):
        p = usage.peer_of(pod(f"p{i}", seed=i, spike=1.2 + 0.03 * i, **kw), groups, CAP)
        assert p is not None
        out.append(p)
    return out


def test_split_cuts_the_first_hour_and_drops_absurd_values():
    s = pod("a")
    bad = UtilizationSeries(
        s.namespace,
        s.pod,
        [*s.compute_gpus[:-3], math.nan, -1.0, 5.0],  # not finite, negative, above the one GPU held
        [*s.memory_mib[:-2], 10**9, math.inf],  # above the A100's 80 GB
        s.history_seconds,
        compute_times=s.compute_times,
        memory_times=s.memory_times,
    )
    cut = split(bad, CAP)
    assert cut.dropped == 5 and cut.problem is None
    assert cut.early is not None and cut.early.samples == 61  # minutes 0..60 inclusive
    assert cut.early.memory_peak_mib == 24_000 and cut.later is not None
    assert cut.later.memory_peak_mib == pytest.approx(36_000)  # the spike at minute 595 survived


def test_bound_is_the_conformal_quantile_of_the_nearest_peers_ratios():
    model = UsageModel(tuple(peers(25)))
    early = Use(24_000.0, 0.06, 60)
    pred = model.predict(("serve/sd", "serve"), early, (0.1, 1.0))
    assert pred.from_model and pred.group == "serve/sd" and pred.peers == 20

    def distance(p):
        return (
            abs(math.log(24_000 / p.early.memory_peak_mib)) / math.log(1.25)
            + abs(0.06 - p.early.compute_high_gpus) / 0.1
        )

    near = sorted(model.peers, key=distance)[:20]
    ratios = sorted(p.later.memory_peak_mib / p.early.memory_peak_mib for p in near)
    assert pred.memory.at(0.9) == pytest.approx(24_000 * ratios[math.ceil(21 * 0.9) - 1])
    assert pred.memory.at(0.9) >= pred.memory.at(0.5) >= early.memory_peak_mib
    assert "20 pods of workload serve/sd (of 25 with history)" in pred.why


def test_a_group_without_enough_peers_falls_back_to_a_wider_one_and_says_which():
    mixed = peers(5, groups=("serve/new", "serve")) + peers(20, groups=("serve/sd", "serve"))
    pred = UsageModel(tuple(mixed)).predict(("serve/new", "serve"), Use(24_000.0, 0.06, 60), (0.1, 1.0))
    assert pred.group == "serve" and "namespace serve" in pred.why
    elsewhere = UsageModel(tuple(mixed)).predict(("other/x", "other"), Use(24_000.0, 0.06, 60), (0.1, 1.0))
    assert elsewhere.group == usage.CLUSTER and "the cluster" in elsewhere.why


@pytest.mark.parametrize(
    ("model", "series", "why"),
    [
        (None, pod("a"), "no usage model fitted yet"),
        (UsageModel(tuple(peers(3))), first_hour(pod("a")), "only 3 pod(s) with history"),
        (
            UsageModel(tuple(peers(20))),
            UtilizationSeries("serve", "a", [0.1] * 50, [1.0] * 50, 3000.0),
            "carry no sample times",
        ),
        (
            UsageModel(tuple(peers(20))),
            UtilizationSeries(
                "serve",
                "a",
                [0.1] * 5,
                [1.0] * 5,
                3000.0,
                compute_times=[0, 1800, 3600, 5400, 7200],
                memory_times=[0, 1800, 3600, 5400, 7200],
            ),
            "only 3 usable sample(s) in its first 60 minutes (telemetry gaps)",
        ),
        (
            UsageModel(tuple(peers(20))),
            UtilizationSeries(
                "serve",
                "a",
                [0.1] * 30,
                [10**8] * 30,
                3000.0,
                compute_times=list(range(30)),
                memory_times=list(range(30)),
            ),
            "no usable sample (30 absurd value(s) dropped)",
        ),
    ],
    ids=["no-model", "tiny-history", "no-times", "telemetry-gaps", "memory-above-the-gpu"],
)
def test_every_fallback_says_why_and_carries_todays_rule(model, series, why):
    pred = predict_use(model, series, ("serve/sd", "serve"), CAP)
    assert not pred.from_model and why in pred.why and "today's p95/p90 rule" in pred.why
    compute, memory = usage.rule_needs(series)
    assert pred.memory.value == pytest.approx(memory if math.isfinite(memory) else 0.0)
    assert pred.compute.value == pytest.approx(compute if math.isfinite(compute) else 0.0)


def test_advice_stands_on_the_bounds_before_a_week_and_on_the_rule_after():
    model = UsageModel(tuple(peers(25)))
    young = first_hour(pod("young", seed=99))
    rec, pred = advise(young, ("serve/sd", "serve"), A100, size_of(A100, "whole", 1), model)
    assert rec is not None and rec.basis == MODEL and rec.reason == pred.why
    # the first hour shows 24 GB at low load; the peers say the peak will be ~1.5× and load 0.2 later:
    # today's rule would have said 3g.40gb (24 GB × 1.15), the bound needs more than 40 GB
    assert rec.need_memory_mib > 40_000 and rec.recommended.gpu_share == 1 and not rec.downsizable
    assert not rec.low_confidence  # a model-based size rests on its peers, not on the pod's own days
    old = pod("old", seed=7)
    old = UtilizationSeries(
        old.namespace,
        old.pod,
        old.compute_gpus,
        old.memory_mib,
        8 * 86400.0,
        compute_times=old.compute_times,
        memory_times=old.memory_times,
    )
    rec, _ = advise(old, ("serve/sd", "serve"), A100, size_of(A100, "whole", 1), model)
    assert rec is not None and rec.basis == RULE and "a week of its own history" in rec.reason


def test_advice_can_be_a_share_or_fewer_gpus():
    small = [
        usage.peer_of(pod(f"s{i}", memory=4_000, compute=0.08, seed=i), ("nb",), capacity_of(L40S, 1))
        for i in range(20)
    ]
    model = UsageModel(tuple(p for p in small if p is not None))
    rec, _ = advise(
        first_hour(pod("n", memory=4_000, compute=0.08)), ("nb",), L40S, size_of(L40S, "whole", 1), model
    )
    assert rec is not None and rec.basis == MODEL and rec.recommended.replicas == 4  # time-sliced ×4
    four = capacity_of(A100, 4)
    big = [usage.peer_of(pod(f"b{i}", memory=100_000, compute=1.2, seed=i), ("t",), four) for i in range(20)]
    model = UsageModel(tuple(p for p in big if p is not None))
    rec, _ = advise(
        first_hour(pod("t", memory=100_000, compute=1.2)),
        ("t",),
        A100,
        size_of(A100, "whole", 4),
        model,
        gpus=4,
    )
    # peak 100 GB × 1.5 = 150 GB and p95 compute 1.2 fit two 80 GB GPUs of the four held
    assert rec is not None and rec.basis == MODEL and rec.recommended.count == 2 and rec.downsizable


def test_a_bound_never_falls_below_what_the_pod_already_used():
    model = UsageModel(tuple(peers(20, compute=0.01)))
    busy = first_hour(pod("busy", compute=0.9))  # busier than every peer ever was
    pred = predict_use(model, busy, ("serve/sd",), CAP)
    seen = usage.split(busy, CAP).whole
    assert seen is not None and seen.compute_high_gpus > 0.2  # its p95, far above the peers' 0.01
    assert pred.from_model and pred.compute.at(0.9) >= seen.compute_high_gpus
    assert pred.memory.at(0.9) >= seen.memory_peak_mib


values = st.floats(-1e12, 1e12) | st.sampled_from([math.nan, math.inf, -math.inf])


@settings(max_examples=60, deadline=None)
@given(st.lists(values, max_size=80), st.lists(values, max_size=80), st.floats(0, 1e6))
def test_any_series_gets_a_prediction_never_an_exception(compute, memory, step):
    model = UsageModel(tuple(peers(20)))
    times_c = [i * step for i in range(len(compute))]
    times_m = [i * step for i in range(len(memory))]
    s = UtilizationSeries("serve", "x", compute, memory, 3600.0, compute_times=times_c, memory_times=times_m)
    pred = predict_use(model, s, ("serve/sd",), CAP)
    assert math.isfinite(pred.memory.value) and math.isfinite(pred.compute.value)
    assert pred.from_model or pred.why
    rec, _ = advise(s, ("serve/sd",), A100, size_of(A100, "whole", 1), model)
    assert rec is None or rec.recommended.gpu_share > 0


def test_the_model_round_trips_through_its_record_params_and_refuses_junk():
    model = fit([(pod(f"p{i}", seed=i), ("serve/sd", "serve"), CAP) for i in range(21)])
    assert len(model.peers) == 21
    again = from_params(to_params(model))
    assert again is not None and len(again.peers) == 21 and again.level == model.level
    early = Use(24_000.0, 0.06, 60)
    a, b = model.predict(("serve",), early, (0, 0)), again.predict(("serve",), early, (0, 0))
    assert a.memory.at(0.9) == pytest.approx(b.memory.at(0.9), rel=1e-4)
    for junk in (
        {},
        {"peers": "x", "level": 0.9},
        {"peers": [[["g"], -1, 0, 0, 0]], "level": 0.9},
        {"peers": [], "level": 0.99},
    ):
        assert from_params(junk) is None


def test_a_level_the_neighbours_cannot_bound_is_refused():
    with pytest.raises(ValueError, match="cannot bound"):
        UsageModel((), level=0.99)


@pytest.mark.parametrize(
    ("name", "owner"),
    [
        ("sd-serve-7d9f8b6c4-x2k9p", "sd-serve"),
        ("notebook-0", "notebook"),
        ("train-job-bqz7k", "train-job"),
        ("plain", "plain"),
        ("my-app-version", "my-app-version"),
    ],
)
def test_owner_name_strips_what_kubernetes_generated(name, owner):
    assert owner_name(name) == owner


def test_group_keys_go_from_the_workload_to_the_namespace():
    assert group_keys("ml", "train") == ("ml/train", "ml")
    assert group_keys("ml", None) == ("ml",)


def test_capacity_is_the_devices_memory_and_unknown_products_have_no_ceiling():
    assert capacity_of(A100, 2) == Capacity(2.0, 2 * 81920.0)
    assert capacity_of("Mystery-GPU", 1).memory_mib == 0.0
