"""Model records: what is written reads back the same; anything else is refused with its reason."""

from __future__ import annotations

from datetime import UTC, datetime

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from kgwe.optimizer.record import MAX_RECORD_BYTES, ModelRecord, ModelRecordError

T = datetime(2026, 5, 1, 12, tzinfo=UTC)


def record(**kw) -> ModelRecord:
    base = dict(
        name="runtime",
        version=1,
        fitted_at=T,
        since=datetime(2026, 4, 1, tzinfo=UTC),
        until=T,
        samples=412,
        metrics={"mae_ratio_to_group_median": 0.81, "p90_coverage": 0.9},
        params={"groups": [["ml", "torch", 3.1]]},
        notes=("12 runs dropped: negative durations",),
    )
    base.update(kw)
    return ModelRecord(**base)


def test_round_trip_and_summary():
    r = record()
    assert ModelRecord.from_json(r.to_json()) == r
    line = r.summary()
    assert "runtime v1" in line and "412 sample(s)" in line and "mae_ratio_to_group_median 0.810" in line


@given(
    st.dictionaries(st.text(max_size=20), st.floats(allow_nan=False, allow_infinity=False), max_size=10),
    st.integers(0, 10**9),
)
def test_any_finite_metrics_round_trip(metrics, samples):
    r = record(metrics=metrics, samples=samples)
    assert ModelRecord.from_json(r.to_json()) == r


@pytest.mark.parametrize(
    ("doc", "said"),
    [
        (b"not json", "not JSON"),
        (b"[]", "not a JSON object"),
        (orjson.dumps({"name": ""}), "name must be"),
        (orjson.dumps({"name": "m", "version": "1", "samples": 1}), "whole numbers"),
        (orjson.dumps({"name": "m", "version": 1, "samples": -1}), "whole numbers"),
        (orjson.dumps({"name": "m", "version": 1, "samples": 1}), "fittedAt is required"),
        (orjson.dumps({"name": "m", "version": 1, "samples": 1, "fittedAt": "yesterday"}), "RFC 3339"),
        (
            orjson.dumps(
                {
                    "name": "m",
                    "version": 1,
                    "samples": 1,
                    "fittedAt": "2026-01-01T00:00:00Z",
                    "metrics": {"a": "x"},
                }
            ),
            "metrics.a",
        ),
        (
            orjson.dumps(
                {"name": "m", "version": 1, "samples": 1, "fittedAt": "2026-01-01T00:00:00Z", "notes": [1]}
            ),
            "notes",
        ),
        (b" " * (MAX_RECORD_BYTES + 1), "over"),
    ],
)
def test_refused_with_the_reason(doc, said):
    with pytest.raises(ModelRecordError, match=said):
        ModelRecord.from_json(doc)


def test_a_record_too_large_to_keep_is_refused_when_written():
    with pytest.raises(ModelRecordError, match="bytes, over"):
        record(params={"x": "y" * MAX_RECORD_BYTES}).to_json()
