from datetime import UTC, datetime, timedelta

import pytest

from kgwe.errors import KgweError
from kgwe.reconcile.cron import parse


def at(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def test_daily_at_six():
    s = parse("0 6 * * *")
    assert s.matches(at("2026-11-22T06:00")) and not s.matches(at("2026-11-22T06:01"))
    assert s.fired_between(at("2026-11-22T05:59"), at("2026-11-22T06:00"))
    assert not s.fired_between(at("2026-11-22T06:00"), at("2026-11-23T05:59"))


def test_steps_ranges_lists_and_weekdays():
    s = parse("*/15 8-18 * * 1-5")
    assert s.matches(at("2026-11-23T08:45"))  # a Monday
    assert not s.matches(at("2026-11-22T08:45"))  # a Sunday
    assert not s.matches(at("2026-11-23T19:00"))
    sunday = parse("30 1 * * 0,7")
    assert sunday.matches(at("2026-11-22T01:30"))


def test_day_of_month_or_weekday_when_both_restricted():
    s = parse("0 0 1 * 1")  # the 1st, and every Monday (classic cron)
    assert s.matches(at("2026-12-01T00:00")) and s.matches(at("2026-11-23T00:00"))
    assert not s.matches(at("2026-11-24T00:00"))


def test_long_outage_is_bounded():
    s = parse("0 6 * * *")
    now = at("2026-11-22T07:00")
    assert s.fired_between(now - timedelta(days=400), now)


@pytest.mark.parametrize("bad", ["0 6 * *", "61 * * * *", "a * * * *", "*/0 * * * *", "5-1 * * * *"])
def test_bad_schedules_are_clear_errors(bad):
    with pytest.raises(KgweError, match="cron"):
        parse(bad)
