"""Decision 4: classes read from telemetry, each with its evidence; too little telemetry is unknown."""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kgwe import vocab
from kgwe.cost.rightsizing import UtilizationSeries
from kgwe.optimizer.classes import agreement, classify, declared_class
from kgwe.optimizer.classes_eval import check_serving_trace

MINUTE = 60.0


def series(compute, memory=20_000.0, step=MINUTE) -> UtilizationSeries:
    times = [i * step for i in range(len(compute))]
    return UtilizationSeries("ns", "p", compute, [memory] * len(compute), times[-1], compute_times=times)


def training(n=240, gpus=1.0):
    rng = random.Random(1)
    return [gpus * rng.uniform(0.75, 0.95) for _ in range(n)]


def inference(n=240):
    rng = random.Random(2)
    return [rng.uniform(0.1, 0.4) if i % 3 == 0 else 0.0 for i in range(n)]  # a burst every 3 minutes


def notebook(n=240):
    return [0.6 if i % 40 in (0, 1) else 0.0 for i in range(n)]  # two busy minutes every 40


@pytest.mark.parametrize(
    ("compute", "expected", "says"),
    [
        (
            [0.0] * 120,
            vocab.WORKLOAD_CLASS_IDLE,
            "idle holder: p95 utilization 0.0% over 2.0 h, holding 19.5 GiB",
        ),
        (training(), vocab.WORKLOAD_CLASS_TRAINING, "training: busy 100% of the time"),
        (inference(), vocab.WORKLOAD_CLASS_INFERENCE, "inference: busy in short bursts (median pause 2 min"),
        (
            notebook(),
            vocab.WORKLOAD_CLASS_INTERACTIVE,
            "interactive: bursts between long pauses (median pause 38",
        ),
        ([0.5] * 10, vocab.WORKLOAD_CLASS_UNKNOWN, "too little telemetry to class (10 sample(s) over 9 min)"),
        ([], vocab.WORKLOAD_CLASS_UNKNOWN, "no usable sample"),
    ],
    ids=["idle", "training", "inference", "interactive", "short", "empty"],
)
def test_each_signature_gets_its_class_and_a_reason(compute, expected, says):
    s = series(compute) if compute else UtilizationSeries("ns", "p", [], [], 0.0)
    got = classify(s)
    assert got.name == expected and says in got.reason


def test_utilization_is_per_gpu_held():
    """Four GPUs at 0.85 each is training; the same summed activity spread over 16 GPUs is not."""
    assert classify(series(training(gpus=4.0)), gpus=4).name == vocab.WORKLOAD_CLASS_TRAINING
    assert classify(series(training(gpus=4.0)), gpus=16).name != vocab.WORKLOAD_CLASS_TRAINING


def test_garbage_samples_are_skipped_not_classed():
    noisy = [float("nan"), -1.0, *training()]
    assert classify(series(noisy)).name == vocab.WORKLOAD_CLASS_TRAINING


def test_declared_types_map_to_classes_and_idle_is_never_a_disagreement():
    assert declared_class("DistributedTraining") == vocab.WORKLOAD_CLASS_TRAINING
    assert declared_class("Interactive") == vocab.WORKLOAD_CLASS_INTERACTIVE
    assert declared_class(None) is None and declared_class("Other") is None
    pairs = [
        (vocab.WORKLOAD_CLASS_TRAINING, vocab.WORKLOAD_CLASS_TRAINING),
        (vocab.WORKLOAD_CLASS_INFERENCE, vocab.WORKLOAD_CLASS_INTERACTIVE),
        (vocab.WORKLOAD_CLASS_IDLE, vocab.WORKLOAD_CLASS_INTERACTIVE),
        (vocab.WORKLOAD_CLASS_UNKNOWN, vocab.WORKLOAD_CLASS_TRAINING),
        (vocab.WORKLOAD_CLASS_INFERENCE, None),
    ]
    assert agreement(pairs) == (1, 2)


def test_the_serving_check_counts_what_a_serving_trace_should_show():
    times = [i * MINUTE for i in range(240)]
    pods = {
        "serving": (times, inference(), times, [20_000.0] * 240),
        "idle": (times, [0.0] * 240, times, [17_000.0] * 240),
        "trainer": (times, training(), times, [30_000.0] * 240),
        "short": (times[:5], [0.1] * 5, times[:5], [1.0] * 5),
    }
    check = check_serving_trace(pods)
    assert check.classified == 3 and check.consistent == 2  # the trainer does not fit a serving trace
    assert check.idle == check.idle_holding_memory == 1
    assert check.halves_compared == 3 and check.halves_agree == 3
    assert check.figures()["classes_consistent_with_serving_fraction"] == pytest.approx(2 / 3, abs=1e-4)


samples = st.floats(-10, 10) | st.sampled_from([math.nan, math.inf, -math.inf])


@settings(max_examples=60, deadline=None)
@given(st.lists(samples, max_size=120), st.floats(0, 1e5), st.floats(0, 16))
def test_any_telemetry_gets_a_class_never_an_exception(compute, step, gpus):
    times = [i * step for i in range(len(compute))]
    got = classify(UtilizationSeries("ns", "p", compute, compute, 0.0, compute_times=times), gpus=gpus)
    assert got.name in vocab.WORKLOAD_CLASSES and got.reason
