"""Property: whatever events a meter misses while it is down, a restart reconciles to exactly one
interval per pod it could have seen, with the true start, and an end no earlier than the truth."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from kgwe.cost.metering import Meter, NodeInfo, apply
from kgwe.cost.store import CostStore
from kgwe.cost.usage import Period

T0 = datetime(2026, 10, 1, tzinfo=UTC)
NODES = {"g": NodeInfo("g", "NVIDIA-H100-80GB-HBM3", 8, False)}


def at(h: int) -> datetime:
    return T0 + timedelta(hours=h)


def pod(i: int, start: int) -> dict:
    return {
        "metadata": {"name": f"p{i}", "namespace": "ml", "uid": f"u{i}"},
        "spec": {"nodeName": "g", "containers": [{"resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
        "status": {"phase": "Running", "startTime": at(start).isoformat()},
    }


@settings(max_examples=25, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 40), st.integers(1, 20)), min_size=1, max_size=8),
    st.integers(0, 50),
    st.integers(0, 20),
)
def test_restart_never_loses_or_doubles(tmp_path_factory, lives, down_at, down_for):
    store = CostStore(f"sqlite:///{tmp_path_factory.mktemp('m') / 'c.db'}")
    store.migrate()
    up_again = down_at + down_for
    pods = [(i, s, s + d) for i, (s, d) in enumerate(lives)]
    events = sorted([(s, "ADDED", i) for i, s, _ in pods] + [(e, "DELETED", i) for i, _, e in pods])
    meter = Meter(NODES)
    reconciled = False

    def restart():
        live = [pod(j, s) for j, s, e in pods if s <= up_again < e]
        apply(store, Meter(NODES).reconcile(store.open_usage(), live, at(up_again)))

    for hour, kind, i in events:
        if down_at <= hour < up_again:
            continue  # missed while down
        if hour >= up_again and not reconciled:
            restart()
            reconciled = True
        apply(store, meter.observe(kind, pod(i, pods[i][1]), at(hour)))
    if not reconciled:
        restart()
    by_pod: dict[str, list] = {}
    for iv in store.usage(Period(T0 - timedelta(days=1), T0 + timedelta(days=10))):
        by_pod.setdefault(iv.pod, []).append(iv)
    for i, start, end in pods:
        got = by_pod.get(f"p{i}", [])
        if down_at <= start and end <= up_again:
            assert got == []  # lived and died while the meter was down: it could never be seen
            continue
        assert len(got) == 1, (i, start, end, got)  # never doubled, never lost
        ended_while_down = start < down_at and down_at <= end < up_again
        assert (got[0].start, got[0].end) == (at(start), at(up_again) if ended_while_down else at(end))
    store.close()
