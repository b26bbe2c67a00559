"""The gpu-health annotation round-trips and refuses malformed values with a clear error."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from kgwe.errors import KgweError
from kgwe.topology import health


def test_round_trip_sorted_and_empty() -> None:
    when = datetime(2026, 11, 23, 22, 0, tzinfo=UTC)
    faults = {
        7: health.GPUFault("XID79", "GPU has fallen off the bus", when),
        3: health.GPUFault("ECC", "x", when),
    }
    value = health.encode(faults)
    assert value.index('"3"') < value.index('"7"')
    assert health.decode(value) == faults
    assert health.encode({}) == "{}"
    assert health.decode("{}") == {} and health.decode(None) == {}


@pytest.mark.parametrize(
    "value",
    [
        "not json",
        "[]",
        '{"x": {"reason": "A", "message": "", "since": "2026-11-23T22:00:00Z"}}',
        '{"999": {"reason": "A", "message": "", "since": "2026-11-23T22:00:00Z"}}',
        '{"1": {"reason": "", "message": "", "since": "2026-11-23T22:00:00Z"}}',
        '{"1": {"reason": "A", "message": "", "since": "yesterday"}}',
        '{"1": "bad"}',
        "{" + " " * health.MAX_BYTES + "}",
    ],
)
def test_malformed_values_are_refused(value: str) -> None:
    with pytest.raises(KgweError, match="gpu-health"):
        health.decode(value)
