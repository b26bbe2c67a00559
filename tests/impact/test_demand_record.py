"""The demand record codec: built from metering intervals, round trip, and strict bounded decoding."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import orjson
import pytest

from kgwe.cost.usage import NodeCapacity, UsageInterval
from kgwe.impact.record import (
    DemandRecordError,
    Shape,
    check_inventory,
    decode,
    encode,
    record_from_intervals,
)

UNTIL = datetime(2026, 11, 16, tzinfo=UTC)
SINCE = UNTIL - timedelta(days=7)


def iv(
    pod, start_h, end_h, kind="whole", count=1, mig=None, milli=None, ns="ml-training", team="ml", uid=None
):
    return UsageInterval(
        pod=pod,
        namespace=ns,
        team=team,
        node="node-a",
        gpu_product="NVIDIA-H100-80GB-HBM3",
        kind=kind,
        count=count,
        start=SINCE + timedelta(hours=start_h),
        end=None if end_h is None else SINCE + timedelta(hours=end_h),
        mig_profile=mig,
        gpu_milli=milli,
        pod_uid=uid or f"uid-{pod}",
    )


NODES = [
    NodeCapacity("node-a", "NVIDIA-H100-80GB-HBM3", 8, SINCE - timedelta(days=30)),
    NodeCapacity("node-b", "NVIDIA-H100-80GB-HBM3", 8, SINCE - timedelta(days=30)),
    NodeCapacity("gone", "NVIDIA-L40S", 8, SINCE - timedelta(days=30), SINCE),  # closed before the end
]


def build(intervals):
    return record_from_intervals(intervals, NODES, since=SINCE, until=UNTIL, cluster="prod")


def test_record_keeps_requests_times_and_teams_but_no_pod_names():
    rec = build(
        [
            iv("secret-train-job", -5, 3, count=4),  # started before the window: arrives at 0
            iv("notebook", 10, None, kind="shared", milli=250, ns="ds", team="data"),
            iv("server", 20, 30, kind="mig", mig="1g.10gb", count=2, ns="inf", team="inference"),
            iv("server", 31, 40, kind="mig", mig="1g.10gb", count=2, ns="inf", team="inference"),  # same uid
            iv("old", -10, -1),  # ended before the window
        ]
    )
    data = encode(rec)
    assert b"secret-train-job" not in data and b"node-a" not in data
    back = decode(data)
    assert back == rec
    assert [(p.arrival_s, p.end_s) for p in back.pods] == [
        (0, 3 * 3600),
        (10 * 3600, None),
        (20 * 3600, 40 * 3600),
    ]
    assert [back.shapes[p.shape] for p in back.pods] == [
        Shape("whole", 4),
        Shape("shared", 1, gpu_milli=250),
        Shape("mig", 2, "1g.10gb"),
    ]
    assert back.teams == (("ml-training", "ml"), ("ds", "data"), ("inf", "inference"))
    assert back.gpus_by_product == {"NVIDIA-H100-80GB-HBM3": 16} and back.nodes == 2
    assert any("topology preference is not metered" in n for n in back.notes)


def test_record_over_the_size_bound_is_sampled_and_says_so():
    rec = build([iv(f"p{i}", i % 160, (i % 160) + 1, uid=f"u{i}") for i in range(5000)])
    full = encode(rec, max_bytes=10**9)
    small = encode(rec, max_bytes=len(full) // 4)
    assert len(small) <= len(full) // 4
    back = decode(small, max_bytes=len(full) // 4)
    assert 0 < len(back.pods) < 5000 and back.pods_seen == 5000
    assert back.sampled_fraction < 0.3
    assert any(n.startswith("sampled:") for n in back.notes)
    assert encode(rec, max_bytes=len(full) // 4) == small  # deterministic


@pytest.mark.parametrize(
    ("mutate", "reason"),
    [
        (lambda d: d[: len(d) // 2], "truncated"),
        (lambda d: b"", "empty"),
        (lambda d: d.replace(b'"DemandRecord"', b'"GPUInventory"'), "not a kgwe.nvidia.io/v1 DemandRecord"),
        (lambda d: d.replace(b'"version":1', b'"version":9'), "format version 9"),
        (
            lambda d: d.replace(b"[0,10800,0,0]", b"[0,10800,7,0]"),
            "pods[0]: shape or team index out of range",
        ),
        (lambda d: d.replace(b"[0,10800,0,0]", b"[0,99999999,0,0]"), "pods[0]: times outside the window"),
        (lambda d: d.replace(b'"1g.10gb"', b'"' + b"x" * 100 + b'"'), "shapes[2]: a MIG profile name"),
        (lambda d: d.replace(b'"since":"2026-11-09T00:00:00Z"', b'"since":"yesterday"'), "since: expected"),
    ],
)
def test_bad_records_are_refused_with_the_reason(mutate, reason):
    data = encode(
        build(
            [
                iv("a", 0, 3, count=4),
                iv("b", 1, 2, kind="shared", milli=500),
                iv("c", 2, 3, kind="mig", mig="1g.10gb"),
            ]
        )
    )
    with pytest.raises(DemandRecordError, match="demand record") as exc:
        decode(mutate(data))
    assert reason in str(exc.value)


def test_oversized_record_is_refused_before_parsing():
    with pytest.raises(DemandRecordError, match="over the 100-byte bound; refused"):
        decode(b"{" + b" " * 200 + b"}", max_bytes=100)


def test_deep_or_wrong_types_are_refused():
    with pytest.raises(DemandRecordError, match="not complete JSON"):
        decode(b"[" * 100_000)
    doc = orjson.loads(encode(build([iv("a", 0, 3)])))
    doc["pods"] = [[0, 10, 0, True]]
    with pytest.raises(
        DemandRecordError, match=r"pods\[0\]: expected \[arrival, end, shape, team\] integers"
    ):
        decode(orjson.dumps(doc))


def test_record_from_another_inventory_is_refused():
    rec = build([iv("a", 0, 3)])
    check_inventory(rec, {"NVIDIA-H100-80GB-HBM3": 16})
    check_inventory(rec, {"NVIDIA-H100-80GB-HBM3": 17})  # within the tolerance: a node came and went
    with pytest.raises(DemandRecordError, match="from another inventory: it ran on 16 NVIDIA-H100"):
        check_inventory(rec, {"NVIDIA-A100-SXM4-80GB": 16})
    with pytest.raises(DemandRecordError, match="from another inventory"):
        check_inventory(rec, {"NVIDIA-H100-80GB-HBM3": 64})


def test_sample_repo_record_is_the_committed_script_output_and_matches_its_inventory():
    import runpy
    from pathlib import Path

    from kgwe.impact.record import gpus_of
    from kgwe.policy.loader import load_repository
    from kgwe.resources import sample_repo_dir

    script = Path(__file__).parents[2] / "hack" / "sample_demand.py"
    shipped = (sample_repo_dir() / "reports" / "demand-record.json").read_bytes()
    assert runpy.run_path(str(script))["sample_record_bytes"]() == shipped
    inventory = load_repository(sample_repo_dir()).inventory()
    check_inventory(decode(shipped), gpus_of([(n.product, n.gpus) for n in inventory.spec.nodes]))
