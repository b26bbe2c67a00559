"""A workload's GPU-hours and cost so far, from the metered usage intervals of its pods (pure).

Metering is per pod and charges the team of the pod's namespace (never a team the pod names itself), and
what a pod holds by its resources (its own annotations cannot shrink it: kgwe.cost.metering). This sums the
same intervals for the workload's own status: GPU-units x hours x the catalog price, one rounding to cents.
A pod that merely takes a name like the workload's pods adds to this status, never takes from it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from datetime import datetime
from decimal import Decimal
from fractions import Fraction

from kgwe.cost.allocate import cents_to_decimal, round_cents
from kgwe.cost.pricing import PriceBook
from kgwe.cost.usage import UsageInterval
from kgwe.cost.workload_facts import pod_pattern as pod_pattern  # the names of a workload's pods


def workload_cost(
    intervals: Iterable[UsageInterval], book: PriceBook, namespace: str, pods: re.Pattern[str], now: datetime
) -> tuple[Decimal, Decimal]:
    """(GPU-hours, cost) of the matching pods' usage up to `now`."""
    gpu_seconds = Fraction(0)
    money = Fraction(0)
    for iv in intervals:
        if iv.namespace != namespace or not pods.match(iv.pod):
            continue
        end = min(iv.end or now, now)
        seconds = max(0, int((end - iv.start).total_seconds()))
        units = iv.count * book.gpu_share(iv.gpu_product, iv.kind, iv.mig_profile, iv.gpu_milli)
        gpu_seconds += units * seconds
        price = book.price(iv.gpu_product)
        if price is not None:
            rate = price.per_hour(iv.spot)
            money += units * seconds * Fraction(rate) / 3600
    hours = (Decimal(gpu_seconds.numerator) / Decimal(gpu_seconds.denominator) / 3600).quantize(
        Decimal("0.001")
    )
    return hours, cents_to_decimal(round_cents(money))
