"""Decision 3 on public traces: the runtime model against the global and the group median, and a budget's
queue ordered by its predictions against first come, first served (bench/optimizer.py, `kgwe optimize
report --traces`).

- openb (Alibaba cluster-trace-gpu-v2023): the GPU pods that finished within the trace (scheduled, deleted
  before its end; runtime = deletion - scheduling). Each pod is predicted at its creation from the pods that
  had finished by then (a rolling origin), grouped as KGWE groups runs: its QoS class (the closest the trace
  has to a runtime), then its GPU request, then its whole request shape.
- Philly (83,154 job runtimes, no feature and no order): only the prior can be tested there — a random half
  fits, the other half scores; against the global median it can only tie (it is one).
- The queue: the same openb pods as jobs on a budget of GPUs that the offered load keeps 90% busy; mean wait
  when the queue is ordered by the expected duration predicted, by the group median, by the true duration (the
  oracle), each over first come, first served — beside the PAI v2020 simulator's published ratios.
"""

from __future__ import annotations

import csv
import math
import random
from pathlib import Path

from kgwe.errors import KgweError
from kgwe.optimizer import queue
from kgwe.optimizer.prediction import Prediction
from kgwe.optimizer.registry import Evaluation
from kgwe.optimizer.runtime import Example, Level, Timed, expected_seconds, fit, rolling_origin
from kgwe.optimizer.scores import coverage, mae, median, ratio

OPENB_LEVELS = (
    Level("qos", "of QoS class {0}"),
    Level("gpu-request", "of QoS class {0} asking {1} GPU(s) of {2} milli"),
    Level("shape", "of QoS class {0} shaped {1} GPU x {2} milli, {3} mCPU, {4} MiB"),
)
# The PAI v2020 simulator's published mean waits (20,000 jobs; docs/optimizer.md): FIFO, shortest job first
# with the duration from the user's history (SJU), from group, user and GPU features (SJGG), and the oracle.
PAI_WAIT_SECONDS = {"fifo": 2879.8, "sju": 1239.6, "sjgg": 963.2, "oracle": 949.9}
QUEUE_BUSY = 0.9  # the budget's GPUs: the offered load keeps them this busy on average


def openb_runs(data_dir: Path) -> list[tuple[Timed, float, float]]:
    """(timed example, creation s, GPUs) for every openb GPU pod that finished within the trace."""
    path = data_dir / "alibaba-gpu-v2023" / "openb_pod_list_default.csv"
    if not path.is_file():
        raise KgweError(f"trace file not found: {path}")
    with path.open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    last = max(int(r["deletion_time"] or 0) for r in rows)
    out = []
    for r in rows:
        gpus = int(r["num_gpu"] or 0)
        if not gpus or not r["scheduled_time"] or not r["deletion_time"]:
            continue
        scheduled, deleted = int(r["scheduled_time"]), int(r["deletion_time"])
        if deleted >= last or deleted < scheduled:  # still running at the end: censored, not finished
            continue
        milli = int(r["gpu_milli"] or 1000)
        keys = (
            (r["qos"],),
            (r["qos"], str(gpus), str(milli)),
            (r["qos"], str(gpus), str(milli), r["cpu_milli"], r["memory_mib"]),
        )
        example = Example(keys, float(deleted - scheduled))
        share = gpus * (milli / 1000 if gpus == 1 and milli < 1000 else 1.0)
        out.append(
            (Timed(example, float(int(r["creation_time"])), float(deleted)), float(r["creation_time"]), share)
        )
    return out


def philly_runtimes(data_dir: Path) -> list[float]:
    path = data_dir / "philly-atc19-derived" / "philly_runtime_from_alibaba_v2020.csv"
    if not path.is_file():
        raise KgweError(f"trace file not found: {path}")
    with path.open(newline="") as fh:
        return [float(r["runtime"]) for r in csv.DictReader(fh)]


def evaluate(data_dir: Path, quick: bool = False) -> Evaluation:
    runs = openb_runs(data_dir)
    if quick:  # the first third of the trace's time
        runs = sorted(runs, key=lambda r: r[1])[: len(runs) // 3]
    scores, rows = rolling_origin([t for t, _, _ in runs], OPENB_LEVELS)
    lines = [
        f"openb: {scores.examples:,} finished GPU pods, each predicted at its creation from the pods "
        "finished by then",
        f"  MAE {scores.mae_seconds:,.0f} s; group median {scores.group_median_mae_seconds:,.0f} s (ratio "
        f"{scores.mae_ratio_to_group_median:.3f}); global median {scores.global_median_mae_seconds:,.0f} s "
        f"(ratio {scores.mae_ratio_to_global_median:.3f}); P90 bound covers {scores.p90_coverage:.1%}",
    ]
    philly = philly_runtimes(data_dir)
    rng = random.Random(42)
    rng.shuffle(philly)
    if quick:
        philly = philly[:20_000]
    half = len(philly) // 2
    prior = fit((Example((), s) for s in philly[:half]), ())
    held = [s for s in philly[half:] if math.isfinite(s) and s >= 0]
    guess = prior.predict(())
    glob = median(philly[:half])
    philly_mae = mae(held, [guess.value] * len(held))
    philly_cov = coverage(held, [guess.at(0.9)] * len(held))
    lines.append(
        f"Philly: {len(held):,} held-out job runtimes, no feature to condition on: the model is its prior "
        f"(median {guess.value:,.0f} s, P90 {guess.at(0.9):,.0f} s); MAE ratio to the global median "
        f"{ratio(philly_mae, mae(held, [glob] * len(held))):.3f}, P90 bound covers {philly_cov:.1%}"
    )
    waits, queue_lines = _queue(runs, rows)
    lines += queue_lines
    figures: dict[str, float | int] = {
        "runtime_mae_ratio_to_group_median": round(scores.mae_ratio_to_group_median, 4),
        "runtime_mae_ratio_to_global_median": round(scores.mae_ratio_to_global_median, 4),
        "runtime_p90_coverage": round(scores.p90_coverage, 4),
        "runtime_held_out_pods": scores.examples,
        "runtime_philly_p90_coverage": round(philly_cov, 4),
        **waits,
    }
    return Evaluation("runtime", figures, tuple(lines))


def _queue(
    runs: list[tuple[Timed, float, float]], rows: list[tuple[Timed, Prediction, float]]
) -> tuple[dict[str, float | int], list[str]]:
    """The scored pods as a budget's queue: ordered by the model's expected duration (the mean, which is
    what shortest-expected-first needs), by the group median, by the truth, and first come, first served;
    then each third of the trace's time apart (the first third has the least history to learn from)."""
    share = {t: gpus for t, _, gpus in runs}
    whole = _waits(rows, share)
    thirds = [_waits(rows[i * len(rows) // 3 : (i + 1) * len(rows) // 3], share) for i in range(3)]
    pai = {k: v / PAI_WAIT_SECONDS["fifo"] for k, v in PAI_WAIT_SECONDS.items()}
    figures: dict[str, float | int] = {
        "queue_wait_ratio_to_fcfs": round(whole["model"], 4),
        "queue_wait_ratio_to_fcfs_group_median": round(whole["group"], 4),
        "queue_wait_ratio_to_fcfs_oracle": round(whole["oracle"], 4),
        "queue_gpus": int(whole["gpus"]),
        **{f"queue_wait_ratio_to_fcfs_third_{i + 1}": round(w["model"], 4) for i, w in enumerate(thirds)},
    }
    lines = [
        f"queue: the same {len(rows):,} pods on a budget of {whole['gpus']:g} GPUs ({QUEUE_BUSY:.0%} busy on "
        f"average); mean wait first come, first served {whole['fifo']:,.0f} s",
        f"  over it, ordered by the model's expected duration {whole['model']:.3f}, by the group median "
        f"{whole['group']:.3f}, by the true duration {whole['oracle']:.3f}",
        "  each third of the trace's time on its own budget (model / group median / oracle): "
        + "; ".join(f"{w['model']:.3f} / {w['group']:.3f} / {w['oracle']:.3f}" for w in thirds),
        f"  PAI v2020 simulator (published, its own cluster and jobs): history of the user {pai['sju']:.3f}, "
        f"group + user + GPU {pai['sjgg']:.3f}, oracle {pai['oracle']:.3f} of FIFO's mean wait",
    ]
    return figures, lines


def _waits(rows: list[tuple[Timed, Prediction, float]], share: dict[Timed, float]) -> dict[str, float]:
    """Mean waits over FIFO's on a budget the rows' offered load keeps QUEUE_BUSY busy (and FIFO's, GPUs)."""
    jobs = [queue.Job(t.start, share[t], t.example.seconds, expected_seconds(pred)) for t, pred, _ in rows]
    group_jobs = [queue.Job(t.start, share[t], t.example.seconds, gm) for t, _, gm in rows]
    span = max(j.arrival for j in jobs) - min(j.arrival for j in jobs) or 1.0
    offered = sum(j.gpus * j.seconds for j in jobs) / span
    capacity = max(max(j.gpus for j in jobs), math.ceil(offered / QUEUE_BUSY))
    fifo = queue.mean_wait(jobs, capacity, queue.fcfs)
    return {
        "fifo": fifo,
        "gpus": capacity,
        "model": ratio(queue.mean_wait(jobs, capacity, queue.by_prediction), fifo),
        "group": ratio(queue.mean_wait(group_jobs, capacity, queue.by_prediction), fifo),
        "oracle": ratio(queue.mean_wait(jobs, capacity, queue.by_actual), fifo),
    }
