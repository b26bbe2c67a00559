"""The MIG pool simulator (kgwe.sim.mig_rebalance): a burst of 1g.10gb pods on a pool laid out for 3g.40gb
is served once the rebalancing rule repartitions the idle node, never the busy one; and the trace's
compression onto one day."""

from __future__ import annotations

from datetime import timedelta

from kgwe.gpu import catalog
from kgwe.planner.model import GPUState, PoolRequest
from kgwe.planner.plan import plan_pool
from kgwe.planner.rebalance import Settings
from kgwe.sim.mig_rebalance import Pod, Rebalancing, day_from_trace, offered, simulate

H100 = catalog.model_by_key("H100-80GB")
MINUTE = timedelta(minutes=1)


def three_g_pool(nodes: int) -> PoolRequest:
    fresh = tuple(GPUState(f"n{n}", i, H100.key) for n in range(nodes) for i in range(8))
    plan = plan_pool(PoolRequest("p", fresh, shares={"3g.40gb": 1.0}))
    return PoolRequest(
        "p", tuple(GPUState(g.node, g.index, g.model, g.target) for g in plan.gpus), shares={"3g.40gb": 1.0}
    )


def test_a_burst_of_small_pods_is_served_once_the_idle_node_is_repartitioned() -> None:
    pool = three_g_pool(2)
    minutes, delay = 120, 3
    long_runner = Pod(arrival=0, runtime=minutes, profile="3g.40gb")  # keeps n0 busy all along
    burst = [Pod(arrival=10, runtime=60, profile="1g.10gb") for _ in range(20)]
    rule = Rebalancing(Settings(5 * MINUTE, 15 * MINUTE, max_gpus=4), delay)

    static = simulate([long_runner, *burst], pool, minutes)
    dynamic = simulate([long_runner, *burst], pool, minutes, rule)

    assert static.started == 1 and not static.repartitions  # no 1g.10gb instance, ever
    assert static.pending_pod_minutes == len(burst) * (minutes - 10)
    assert dynamic.served_fraction > static.served_fraction
    assert dynamic.pending_pod_minutes < static.pending_pod_minutes
    assert dynamic.started == 1 + len(burst)
    first = dynamic.repartitions[0]
    assert first.nodes == ("n1",)  # the idle node, never n0 which holds a pod
    assert first.gpus * H100.profiles["1g.10gb"].max_count >= len(burst) and first.gpus <= 4
    # the burst waits for the decision and the reconfiguration, then runs; served counts what fits the day
    wait = first.minute - 10 + delay
    assert dynamic.pending_pod_minutes == len(burst) * wait
    assert dynamic.served == minutes + len(burst) * 60
    assert dynamic.demanded == static.demanded == minutes + len(burst) * 60


def test_the_trace_is_compressed_onto_the_horizon_with_runtimes_kept() -> None:
    start = 10 * 86_400
    rows = [(0, 60, "1g.10gb")] + [(start + k * 3_600, start + k * 3_600 + 90, "2g.20gb") for k in range(200)]
    pods, factor = day_from_trace(rows, minutes=1440, skip_fraction=0.01)
    first = int(len(rows) * 0.01)  # the months-early outlier and whatever precedes the 1% quantile go
    assert len(pods) == len(rows) - first
    assert factor == (rows[-1][0] - rows[first][0]) / 86_400
    assert pods[0].arrival == 0 and pods[-1].arrival == 1439
    assert all(p.runtime == 2 for p in pods)  # 90 s, rounded up to whole minutes
    assert offered(pods, 1440, {"2g.20gb": 2})[0] == 2
