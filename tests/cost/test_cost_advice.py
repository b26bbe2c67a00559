"""The cost advice on plain data: which GPUWorkloads could run on spot and what it saves and risks, cost
efficiency per team and per GPUWorkload (DCGM-weighted, or allocation only), and cost per completed run.
Figures are worked out by hand in the comments."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest

from kgwe.cost.advice import POD_GROUP, advise, completed_in, runs_since
from kgwe.cost.chargeback import aggregate_usage
from kgwe.cost.efficiency import ALLOCATION_ONLY, DCGM
from kgwe.cost.pricing import pricebook
from kgwe.cost.spot import eligibility
from kgwe.cost.usage import NodeCapacity, Period, UsageInterval
from kgwe.cost.workload_facts import facts_from_object, facts_from_objects, pod_pattern, pods_by_workload
from kgwe.errors import KgweError
from kgwe.policy.workload_resolution import child_name

H100 = "NVIDIA-H100-80GB-HBM3"
L40S = "NVIDIA-L40S"
T0 = datetime(2026, 11, 1, tzinfo=UTC)
PERIOD = Period(T0, T0 + timedelta(days=30), label="2026-11")
NOW = T0 + timedelta(hours=100)  # 100 hours of the period have passed
BOOK = pricebook(
    [
        {"product": H100, "onDemandPerHour": "4.10", "spotPerHour": "1.60"},
        {"product": L40S, "onDemandPerHour": "1.20"},
    ],
    currency="USD",
)


def gpuworkload(name: str, namespace: str = "ml", *, status: dict | None = None, **spec) -> dict:
    return {
        "apiVersion": "kgwe.nvidia.io/v1",
        "kind": "GPUWorkload",
        "metadata": {"name": name, "namespace": namespace, "creationTimestamp": "2026-11-01T00:00:00Z"},
        "spec": {"gpuRequirements": {"count": 8}, **spec},
        "status": status or {},
    }


def iv(pod: str, hours: float, *, start_h: float = 0, namespace: str = "ml", team: str = "research", **kw):
    start = T0 + timedelta(hours=start_h)
    fields = {"node": "n1", "gpu_product": H100, "kind": "whole", "count": 8, **kw}
    return UsageInterval(
        pod, namespace, team, start=start, end=start + timedelta(hours=hours), pod_uid=pod, **fields
    )


NODES = [NodeCapacity(f"n{i}", H100, 8, T0 - timedelta(days=1)) for i in range(1, 5)]


def pod_usage(intervals, period=PERIOD, now=NOW):
    return aggregate_usage(intervals, period, "total", POD_GROUP, now, NODES)


# ---- which pods are whose ---------------------------------------------------------------------------------


def test_pod_names_of_the_controllers_children_tell_workload_and_run():
    job_pod = child_name("llm", 2, "worker") + "-1-x7k2p"
    assert pod_pattern("llm", ["worker"], batch=True).match(job_pod).group("run") == "2"
    assert not pod_pattern("llm", ["worker"], batch=True).match("llm-r2-launcher-0-x7k2p")
    assert pod_pattern("chat", ["server"], batch=False).match("chat-server-7d9f8c-abcde")
    # a workload named like another's run prefix keeps its own pods
    facts = [facts_from_object(gpuworkload("a")), facts_from_object(gpuworkload("a-r1"))]
    pods = [("ml", "a-r1-worker-0-abcde"), ("ml", "a-r1-r0-worker-0-abcde"), ("ml", "a-r3-worker-0-zz")]
    found = pods_by_workload(facts, pods)
    assert found[("ml", "a")] == [(("ml", "a-r1-worker-0-abcde"), 1), (("ml", "a-r3-worker-0-zz"), 3)]
    assert found[("ml", "a-r1")] == [(("ml", "a-r1-r0-worker-0-abcde"), 0)]
    # another namespace's pod of the same name is not the workload's
    assert pods_by_workload(facts, [("other", "a-r1-worker-0-abcde")]) == {}


def test_facts_from_a_gpuworkload_object():
    obj = gpuworkload(
        "llm",
        workloadType="DistributedTraining",
        distributedConfig={"nodes": 2},
        checkpointInterval="30m",
        retryPolicy={"maxRetries": 0},
        status={
            "phase": "Succeeded",
            "run": 1,
            "conditions": [
                {"type": "Complete", "status": "True", "lastTransitionTime": "2026-11-03T04:00:00Z"}
            ],
        },
    )
    f = facts_from_object(obj)
    assert (f.namespace, f.name, f.batch, f.pods, f.max_retries) == ("ml", "llm", True, 2, 0)
    assert f.checkpoint_interval_seconds == 1800 and f.run == 1
    assert f.completed_at == datetime(2026, 11, 3, 4, tzinfo=UTC)
    assert f.gpus(BOOK, H100) == 16
    facts, warnings = facts_from_objects([obj, {"kind": "GPUWorkload", "metadata": {"name": "x"}}])
    assert [w.name for w in facts] == ["llm"] and len(warnings) == 1 and "GPUWorkload ?/x" in warnings[0]


def test_checkpoint_interval_must_be_a_positive_duration():
    with pytest.raises(KgweError):
        facts_from_object(gpuworkload("llm", checkpointInterval="0s"))


# ---- spot -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "share", "words"),
    [
        ({"workloadType": "Training", "checkpointInterval": "1h"}, 1, "checkpoints every 60 min"),
        ({"workloadType": "Batch"}, 1, "restarts it (up to 3×)"),
        ({"workloadType": "Training", "retryPolicy": {"maxRetries": 0}}, 0, "an interruption ends it"),
        ({"workloadType": "Inference", "distributedConfig": {"replicas": 3}}, 2 / 3, "2 of 3 replicas"),
        ({"workloadType": "Inference"}, 0, "one replica"),
        ({"workloadType": "Interactive", "distributedConfig": {"replicas": 4}}, 0, "interactive"),
    ],
)
def test_who_may_move_to_spot(spec, share, words):
    rule = eligibility(facts_from_object(gpuworkload("w", **spec)))
    assert float(rule.movable_share) == pytest.approx(share)
    assert words in rule.reason


def test_spot_saving_and_the_interruption_risk_of_a_checkpointed_training():
    w = gpuworkload(
        "llm", workloadType="DistributedTraining", distributedConfig={"nodes": 2}, checkpointInterval="30m"
    )
    usage = pod_usage([iv("llm-r0-worker-0-aaaaa", 10), iv("llm-r0-worker-1-bbbbb", 10, node="n2")])
    advice = advise(usage, [facts_from_object(w)], BOOK, PERIOD, NOW)
    (a,) = advice.spot
    # 2 pods x 8 H100 x 10 h = 160 on-demand GPU-hours; spot is 2.50/h cheaper: 400.00 in the period
    assert (a.movable, a.on_demand_gpu_hours, a.saving) == (True, Decimal("160.000"), Decimal("400.00"))
    # 100 of the period's hours passed: x 7.3 for 730 h a month
    assert a.saving_per_month == Decimal("2920.00")
    # ran 10% of the time (160 GPU-h of 16 GPUs x 100 h); 20% of spot nodes reclaimed a month, 2 pods:
    # 0.2 x 2 x 0.1 = 0.04 interruptions a month, each redoing 15 min of 16 GPUs = 4 GPU-h at 1.60 = 6.40
    assert a.interruptions_per_month == Decimal("0.04")
    assert a.rework_per_month == Decimal("0.26")  # 0.256
    assert a.net_per_month == Decimal("2919.74")  # 2920 - 0.256
    assert "20% a month" in advice.spot_assumption


def test_spot_risk_follows_the_catalogs_assumption_and_says_when_it_cannot_price_rework():
    book = pricebook(
        [{"product": H100, "onDemandPerHour": "4.10", "spotPerHour": "1.60"}],
        currency="USD",
        spot_interruption_percent=Decimal("50"),
    )
    w = facts_from_object(gpuworkload("job", workloadType="Batch"))  # restarted, no checkpoints
    (a,) = advise(pod_usage([iv("job-r0-worker-0-aaaaa", 100)]), [w], book, PERIOD, NOW).spot
    # ran the whole 100 h: 0.5 x 1 pod x 1.0 = 0.5 interruptions a month; each repeats the run so far
    assert a.interruptions_per_month == Decimal("0.50")
    assert a.rework_per_month is None and a.net_per_month is None
    assert a.saving_per_month == Decimal("14600.00")  # 800 GPU-h x 2.50 x 7.3


def test_what_stays_on_demand_and_why():
    workloads = [
        facts_from_object(gpuworkload("chat", workloadType="Inference")),  # one replica
        facts_from_object(gpuworkload("viz", workloadType="Batch", gpuRequirements={"count": 1})),
        facts_from_object(gpuworkload("cheap", workloadType="Batch")),
        facts_from_object(
            gpuworkload(
                "serve",
                workloadType="Inference",
                distributedConfig={"replicas": 4},
                gpuRequirements={"count": 1},
            )
        ),
    ]
    usage = pod_usage(
        [
            iv("chat-worker-5d8f9-aaaaa", 10),
            iv("viz-r0-worker-0-aaaaa", 10, count=1, gpu_product=L40S, node="l40s"),  # no spot price
            iv("cheap-r0-worker-0-aaaaa", 10, spot=True),  # already on spot
            *(iv(f"serve-worker-6c7d8-{c * 5}", 10, count=1) for c in "abcd"),
        ]
    )
    advice = {a.workload: a for a in advise(usage, workloads, BOOK, PERIOD, NOW).spot}
    assert not advice["chat"].movable and "one replica" in advice["chat"].reason
    assert (
        not advice["viz"].movable
        and "no spot price" in advice["viz"].reason
        and advice["viz"].unpriced == (L40S,)
    )
    assert not advice["cheap"].movable and "no GPU time on on-demand nodes" in advice["cheap"].reason
    # 3 of 4 replicas: 40 GPU-h x 3/4 x 2.50 = 75.00; a replica lost is not work redone
    serve = advice["serve"]
    assert serve.movable and serve.saving == Decimal("75.00") and serve.rework_per_month == Decimal("0.00")


# ---- efficiency -------------------------------------------------------------------------------------------


def test_efficiency_weights_gpu_hours_by_dcgm_activity():
    w = facts_from_object(gpuworkload("llm"))
    usage = pod_usage(
        [
            iv("llm-r0-worker-0-aaaaa", 10),  # 80 GPU-h, 328.00
            iv("nb-1", 10, count=1, team="research", namespace="nb"),  # 10 GPU-h, 41.00, not measured
            iv("svc-1", 5, count=2, team="platform", namespace="prod"),  # 10 GPU-h
        ]
    )
    activity = {("ml", "llm-r0-worker-0-aaaaa"): 0.5, ("prod", "svc-1"): float("nan")}
    advice = advise(usage, [w], BOOK, PERIOD, NOW, activity=activity, activity_source="http://prom")
    teams = {e.subject: e for e in advice.team_efficiency}
    research = teams["research"]
    # measured: 80 GPU-h at 50% = 40 busy GPU-h for 328.00 -> 12.20 per 100 USD; 8.20 per busy GPU-hour
    assert research.basis == DCGM and research.busy_gpu_hours == Decimal("40.000")
    assert research.score == Decimal("12.20") and research.cost_per_busy_gpu_hour == Decimal("8.20")
    assert research.measured_share == Decimal("0.89") and research.activity == Decimal("0.50")  # 80 of 90
    assert research.gpu_hours == Decimal("90.000") and research.cost == Decimal("369.00")
    # a NaN is no measurement: that team falls back to allocation only, an upper bound (100 / 4.10)
    assert teams["platform"].basis == ALLOCATION_ONLY and teams["platform"].score == Decimal("24.39")
    (wl,) = advice.workload_efficiency
    assert (wl.subject, wl.score) == ("ml/llm", Decimal("12.20"))
    assert advice.activity_source == "http://prom"


def test_efficiency_without_any_dcgm_source_is_allocation_only():
    advice = advise(pod_usage([iv("x", 1)]), [], BOOK, PERIOD, NOW)
    (team,) = advice.team_efficiency
    assert team.basis == ALLOCATION_ONLY and team.activity is None and team.score == Decimal("24.39")
    assert advice.activity_source == ""


# ---- runs -------------------------------------------------------------------------------------------------


def test_cost_per_completed_run_counts_every_attempt():
    done = {
        "phase": "Succeeded",
        "run": 1,
        "conditions": [{"type": "Complete", "status": "True", "lastTransitionTime": "2026-11-04T00:00:00Z"}],
    }
    workloads = [
        facts_from_object(gpuworkload("a", status=done)),
        facts_from_object(gpuworkload("b", status={**done, "run": 0})),
        facts_from_object(gpuworkload("c", status={"phase": "Running"})),
    ]
    usage = pod_usage(
        [
            iv("a-r0-worker-0-aaaaa", 1),  # the failed attempt: 8 GPU-h, 32.80
            iv("a-r1-worker-0-bbbbb", 2, start_h=2),  # the one that completed: 65.60
            iv("b-r0-worker-0-ccccc", 0.5),  # 16.40
            iv("c-r0-worker-0-ddddd", 5),  # still running: no run cost
        ]
    )
    advice = advise(usage, workloads, BOOK, PERIOD, NOW)
    runs = {r.workload: r for r in advice.runs}
    assert set(runs) == {"a", "b"}
    assert (runs["a"].attempts, runs["a"].cost, runs["a"].failed_attempts_cost) == (
        2,
        Decimal("98.40"),
        Decimal("32.80"),
    )
    assert runs["a"].gpu_hours == Decimal("24.000") and runs["a"].team == "research"
    (team,) = advice.team_runs
    assert (team.runs, team.cost, team.mean_cost) == (2, Decimal("114.80"), Decimal("57.40"))


def test_runs_are_priced_over_their_whole_life():
    done = {
        "phase": "Succeeded",
        "conditions": [{"type": "Complete", "status": "True", "lastTransitionTime": "2026-11-01T02:00:00Z"}],
    }
    obj = gpuworkload("long", status=done)
    obj["metadata"]["creationTimestamp"] = "2026-10-31T20:00:00Z"
    w = facts_from_object(obj)
    assert completed_in([w], PERIOD) == [w]
    since = runs_since([w], PERIOD)
    assert since == datetime(2026, 10, 31, 20, tzinfo=UTC)
    intervals = [iv("long-r0-worker-0-aaaaa", 6, start_h=-4)]  # 4 h in October, 2 h in November
    whole_life = pod_usage(intervals, Period(since, PERIOD.until))
    advice = advise(pod_usage(intervals), [w], BOOK, PERIOD, NOW, run_usage=whole_life)
    assert advice.runs[0].gpu_hours == Decimal("48.000")  # 6 h x 8 GPUs, not just November's 16
    # a run completed before the period is not this period's
    assert completed_in([w], Period(T0 + timedelta(days=1), T0 + timedelta(days=2))) == []


def test_advice_from_the_stores_sql_aggregates_equals_the_in_memory_twin(store):
    intervals = [
        iv("llm-r0-worker-0-aaaaa", 10),
        iv("llm-r0-worker-1-bbbbb", 80, node="n2", start_h=50),  # ends after NOW: counted to NOW (50 h)
        iv("nb-1", 3, count=1, namespace="nb", kind="shared", gpu_milli=250),
        iv("svc-1", 7, count=2, namespace="prod", team="platform", kind="mig", mig_profile="3g.40gb"),
    ]
    store.add_usage(intervals)
    for node in NODES:
        store.set_node(node)
    workloads = [
        facts_from_object(gpuworkload("llm", distributedConfig={"nodes": 2}, checkpointInterval="1h"))
    ]
    from_sql = advise(store.usage_aggregates(PERIOD, "total", POD_GROUP, NOW), workloads, BOOK, PERIOD, NOW)
    in_memory = advise(pod_usage(intervals), workloads, BOOK, PERIOD, NOW)
    assert from_sql == in_memory
    assert from_sql.spot[0].saving == Decimal("1200.00")  # (80 + 400) GPU-h x 2.50


def test_advice_metrics():
    from prometheus_client import CollectorRegistry, generate_latest

    from kgwe.cost.metrics import install

    done = {
        "phase": "Succeeded",
        "conditions": [{"type": "Complete", "status": "True", "lastTransitionTime": "2026-11-02T00:00:00Z"}],
    }
    workloads = [facts_from_object(gpuworkload("llm", checkpointInterval="1h", status=done))]
    advice = advise(pod_usage([iv("llm-r0-worker-0-aaaaa", 10)]), workloads, BOOK, PERIOD, NOW)
    registry = CollectorRegistry()
    install(registry).update_advice(advice)
    text = generate_latest(registry).decode()
    labels = 'currency="USD",namespace="ml",team="research",workload="llm"'
    assert f"kgwe_spot_saving_per_month{{{labels}}} 1460.0" in text  # 80 GPU-h x 2.50 x 7.3
    assert f"kgwe_gpuworkload_run_cost{{{labels}}} 328.0" in text
    assert 'kgwe_cost_per_completed_run{currency="USD",team="research"} 328.0' in text
    assert 'kgwe_completed_runs{team="research"} 1.0' in text
    assert 'kgwe_cost_efficiency_score{basis="allocation only",team="research"} 24.39' in text
    assert (
        'kgwe_gpuworkload_cost_efficiency_score{basis="allocation only",namespace="ml",workload="llm"}'
        in text
    )
