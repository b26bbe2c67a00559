"""The five-field cron schedule of `PolicyRepository.spec.reports.schedule` ("0 6 * * *"), as pure functions.

Small on purpose: minute hour day-of-month month day-of-week with `*`, numbers, ranges, lists and steps;
day-of-month and day-of-week follow classic cron (either matches when both are restricted).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from kgwe.errors import KgweError

_FIELDS = (
    ("minute", 0, 59),
    ("hour", 0, 23),
    ("day of month", 1, 31),
    ("month", 1, 12),
    ("day of week", 0, 7),
)
MAX_LOOKBACK = timedelta(days=7)  # a controller down longer than this runs a missed report once, not many


@dataclass(frozen=True)
class Schedule:
    text: str
    minutes: frozenset[int]
    hours: frozenset[int]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]  # 0 = Sunday (7 is folded into 0)
    days_restricted: bool
    weekdays_restricted: bool

    def matches(self, at: datetime) -> bool:
        if at.minute not in self.minutes or at.hour not in self.hours or at.month not in self.months:
            return False
        day_ok, weekday_ok = at.day in self.days, (at.isoweekday() % 7) in self.weekdays
        if self.days_restricted and self.weekdays_restricted:
            return day_ok or weekday_ok
        return day_ok and weekday_ok

    def fired_between(self, after: datetime, until: datetime) -> bool:
        """Whether a fire time lies in (after, until], looking back at most MAX_LOOKBACK."""
        start = max(after, until - MAX_LOOKBACK).replace(second=0, microsecond=0) + timedelta(minutes=1)
        at = start
        while at <= until:
            if self.matches(at):
                return True
            at += timedelta(minutes=1)
        return False


def _field(text: str, name: str, low: int, high: int) -> frozenset[int]:
    values: set[int] = set()
    for part in text.split(","):
        base, _, step_text = part.partition("/")
        try:
            step = int(step_text) if step_text else 1
            if base == "*":
                first, last = low, high
            elif "-" in base:
                a, b = base.split("-", 1)
                first, last = int(a), int(b)
            else:
                first = last = int(base)
                if step_text:
                    last = high
        except ValueError:
            raise KgweError(f"cron {name} field {text!r}: expected *, N, N-M, lists and /STEP") from None
        if step < 1 or not (low <= first <= last <= high):
            raise KgweError(f"cron {name} field {text!r}: values must lie in {low}-{high}")
        values.update(range(first, last + 1, step))
    return frozenset(values)


def parse(text: str) -> Schedule:
    parts = text.split()
    if len(parts) != 5:
        raise KgweError(f"cron schedule {text!r}: expected 5 fields (minute hour day month weekday)")
    sets = [_field(p, name, low, high) for p, (name, low, high) in zip(parts, _FIELDS, strict=True)]
    weekdays = frozenset(d % 7 for d in sets[4])
    return Schedule(text, sets[0], sets[1], sets[2], sets[3], weekdays, parts[2] != "*", parts[4] != "*")
