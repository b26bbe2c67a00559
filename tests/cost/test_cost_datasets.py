"""The public trace readers and the offline rightsizing evaluation on a slice of the GenAI series."""

from __future__ import annotations

from decimal import Decimal

from kgwe.cost import datasets
from kgwe.cost.evaluation import evaluate_rightsizing


def test_daily_series_have_whole_days_only():
    helios = datasets.helios_earth_daily_gpu_hours()
    philly = datasets.philly_daily_node_hours()
    assert len(helios) == 31 and max(helios) <= 208 * 24  # vc6YE has 208 GPUs
    assert len(philly) == 72 and max(philly) <= 552 * 24  # at most 552 nodes in the sequence


def test_rightsizing_evaluation_recommends_on_one_half_and_checks_the_other():
    pods = dict(sorted(datasets.genai_pod_series().items())[:12])
    ev = evaluate_rightsizing(pods, "NVIDIA-A100-SXM4-80GB", Decimal("2.45"))
    assert ev.pods == 12 and 0 < ev.recommended <= 12
    assert ev.test_samples > 0 and 0 <= ev.undersized_samples <= ev.test_samples
    assert 0 <= ev.gpu_hours_saved <= ev.gpu_hours_observed
    assert ev.cost_saved == (Decimal(repr(ev.gpu_hours_saved)) * Decimal("2.45")).quantize(Decimal("0.01"))
    assert sum(ev.profiles.values()) == ev.recommended
