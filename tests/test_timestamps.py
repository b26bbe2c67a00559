"""RFC 3339 as the API carries it: our own format round-trips, API forms read as aware UTC, junk is None."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

from kgwe.timestamps import format_rfc3339, parse_rfc3339


def test_round_trip_and_api_forms():
    when = datetime(2026, 11, 23, 22, 0, 5, tzinfo=UTC)
    assert format_rfc3339(when) == "2026-11-23T22:00:05Z"
    assert parse_rfc3339(format_rfc3339(when)) == when
    assert parse_rfc3339("2026-11-23T22:00:05.123456Z") == when.replace(microsecond=123456)
    plus_one = parse_rfc3339("2026-11-23T23:00:05+01:00")
    assert plus_one == when and plus_one.tzinfo == UTC
    assert format_rfc3339(datetime(2026, 11, 23, 23, 0, 5, tzinfo=timezone(timedelta(hours=1)))) == (
        "2026-11-23T22:00:05Z"
    )
    for junk in (None, "", "yesterday", 1700000000):
        assert parse_rfc3339(junk) is None
