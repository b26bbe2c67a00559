"""A workload's cost from its pods' metered intervals (the work queue: tests/runtime/test_queue.py)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

from kgwe.cost.pricing import pricebook
from kgwe.cost.usage import UsageInterval
from kgwe.workloads.cost import pod_pattern, workload_cost

T0 = datetime(2026, 11, 1, tzinfo=UTC)


def _iv(pod: str, hours: float, **kw) -> UsageInterval:
    base = {
        "namespace": "ml",
        "team": "t",
        "node": "n",
        "gpu_product": "NVIDIA-A100-SXM4-80GB",
        "kind": "whole",
    }
    base.update(kw)
    return UsageInterval(
        pod=pod, count=base.pop("count", 8), start=T0, end=T0 + timedelta(hours=hours), **base
    )


def test_cost_sums_only_the_workloads_pods_with_one_rounding():
    book = pricebook([{"product": "NVIDIA-A100-SXM4-80GB", "onDemandPerHour": "1.10"}], currency="USD")
    pattern = pod_pattern("llm", ["worker"], batch=True)
    usage = [
        _iv("llm-r0-worker-0-abcde", 1.0),  # 8 GPU-hours
        _iv("llm-r1-worker-1-fghij", 0.5),  # a later run counts too: 4 GPU-hours
        _iv("llm-r1-worker-1-fghij", 0.5, namespace="other"),
        _iv("llm2-r0-worker-0-abcde", 1.0),  # another workload
        _iv("llm-r0-worker-0-x", 1 / 3, kind="mig", count=1, mig_profile="1g.10gb"),
    ]
    hours, amount = workload_cost(usage, book, "ml", pattern, T0 + timedelta(days=1))
    # 8 + 4 + 1/7 of a GPU for 20 minutes = 12.0476... GPU-hours at 1.10
    assert hours == Decimal("12.048")
    assert amount == Decimal("13.25")


def test_open_interval_counts_up_to_now_and_deployment_pods_match():
    book = pricebook([{"product": "NVIDIA-A100-SXM4-80GB", "onDemandPerHour": "2"}], currency="USD")
    iv = UsageInterval(
        pod="chat-server-7d9f8-abcde",
        namespace="ml",
        team="t",
        node="n",
        gpu_product="NVIDIA-A100-SXM4-80GB",
        kind="whole",
        count=1,
        start=T0,
    )
    pattern = pod_pattern("chat", ["server"], batch=False)
    hours, amount = workload_cost([iv], book, "ml", pattern, T0 + timedelta(minutes=90))
    assert (hours, amount) == (Decimal("1.500"), Decimal("3.00"))


def test_cost_duties_put_a_workloads_metered_cost_in_its_status(tmp_path):
    from kgwe.cost.service import CostService
    from kgwe.cost.store import CostStore
    from kgwe.reconcile.costs import CostDuties

    store = CostStore(str(tmp_path / "cost.db"))
    store.migrate()
    store.add_usage([_iv("llm-r0-worker-0-abcde", 2.0), _iv("other-r0-worker-0-abcde", 2.0)])
    duties = CostDuties(CostService(store, cluster="c"), now=lambda: T0 + timedelta(hours=3))
    obj = {
        "metadata": {"name": "llm", "namespace": "ml", "creationTimestamp": "2026-10-31T23:00:00Z"},
        "spec": {"gpuRequirements": {"count": 8}},
    }
    assert duties.workload_cost("ml", "llm", obj) is None  # no PricingCatalog applied yet: nothing to price
    duties.book = pricebook([{"product": "NVIDIA-A100-SXM4-80GB", "onDemandPerHour": "1.10"}], currency="USD")
    assert duties.workload_cost("ml", "llm", obj) == {
        "gpuHours": "16.000",
        "amount": "17.60",
        "currency": "USD",
        "asOf": "2026-11-01T03:00:00Z",
    }
    store.close()
