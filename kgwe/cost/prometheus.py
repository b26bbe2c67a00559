"""A small Prometheus HTTP API client for DCGM per-pod series (docs/facts/cost.md §9), tolerant of bad data.

Only `/api/v1/query_range` is used. An answer that is not the documented JSON matrix is a clear
KgweError; inside a good answer, points that are not finite non-negative numbers are skipped and
counted, never guessed.

dcgm-exporter names the pod holding a device `namespace`/`pod` (or `pod_namespace`/`pod_name` in its
old-names mode); a Prometheus that scrapes it through Kubernetes service discovery without honor_labels
renames those to `exported_namespace`/`exported_pod` and puts the exporter's own pod in `namespace`/`pod`
(§9). `by_pod` folds all three spellings into `namespace`/`pod` before aggregating, so either scrape
setup attributes a device to the pod that holds it.
"""

from __future__ import annotations

import json
import math
import urllib.error
import urllib.parse
import urllib.request
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from kgwe.cost.rightsizing import UtilizationSeries
from kgwe.cost.usage import to_epoch
from kgwe.errors import KgweError

ENGINE_ACTIVE = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"
FB_USED = "DCGM_FI_DEV_FB_USED"
MAX_BODY = 64 * 1024 * 1024
MAX_STEPS = 11_000  # Prometheus rejects a range query of more steps per series (HTTP 400, §9)


@dataclass
class Matrix:
    series: dict[tuple[str, str], list[tuple[float, float]]] = field(default_factory=dict)
    skipped_points: int = 0
    skipped_series: int = 0


class PrometheusClient:
    def __init__(self, base_url: str, *, timeout_s: float = 10.0) -> None:
        if not base_url.startswith(("http://", "https://")):
            raise KgweError(f"Prometheus URL must start with http:// or https://, got {base_url!r}")
        self.base_url = base_url.rstrip("/")
        self.timeout_s = timeout_s

    def _get(self, path: str, params: dict[str, str]) -> object:
        url = f"{self.base_url}{path}?{urllib.parse.urlencode(params)}"
        try:
            with urllib.request.urlopen(url, timeout=self.timeout_s) as resp:
                body = resp.read(MAX_BODY + 1)
        except urllib.error.HTTPError as exc:
            body = exc.read(MAX_BODY + 1)
            try:
                message = json.loads(body).get("error", "")
            except (ValueError, AttributeError, RecursionError):
                message = body[:200].decode(errors="replace")
            message = " ".join(str(message).split())  # one line, whatever a proxy put in its error page
            raise KgweError(f"Prometheus {self.base_url} answered HTTP {exc.code}: {message}") from None
        except (urllib.error.URLError, TimeoutError, OSError) as exc:
            raise KgweError(f"Prometheus {self.base_url} is unreachable: {exc}") from None
        if len(body) > MAX_BODY:
            raise KgweError(f"Prometheus {self.base_url} answer is larger than {MAX_BODY} bytes")
        try:
            return json.loads(body)
        except (ValueError, RecursionError):  # RecursionError: nesting deeper than the interpreter's stack
            raise KgweError(f"Prometheus {self.base_url} answered something that is not JSON") from None

    def query_range(self, query: str, start: datetime, end: datetime, step_s: int) -> Matrix:
        start_s, end_s = to_epoch(start), to_epoch(end)
        if step_s < 1 or end_s < start_s:
            raise KgweError(f"Prometheus range query needs start <= end and step >= 1 s, got {start}..{end}")
        if (end_s - start_s) // step_s > MAX_STEPS:
            raise KgweError(
                f"Prometheus range query {start}..{end} at {step_s} s is more than the {MAX_STEPS} "
                "steps per series Prometheus answers; use a larger step"
            )
        data = self._get(
            "/api/v1/query_range",
            {"query": query, "start": str(start_s), "end": str(end_s), "step": f"{step_s}s"},
        )
        if not isinstance(data, dict) or data.get("status") != "success":
            error = data.get("error") if isinstance(data, dict) else None
            raise KgweError(
                f"Prometheus {self.base_url} query failed: {error or 'answer without status success'}"
            )
        payload = data.get("data")
        if (
            not isinstance(payload, dict)
            or payload.get("resultType") != "matrix"
            or not isinstance(payload.get("result"), list)
        ):
            raise KgweError(f"Prometheus {self.base_url} answer is not a range-query matrix")
        out = Matrix()
        for item in payload["result"]:
            metric = item.get("metric") if isinstance(item, dict) else None
            values = item.get("values") if isinstance(item, dict) else None
            if not isinstance(metric, dict) or not isinstance(values, list):
                out.skipped_series += 1
                continue
            ns = metric.get("namespace") or metric.get("pod_namespace")
            pod = metric.get("pod") or metric.get("pod_name")
            if not ns or not pod:
                out.skipped_series += 1
                continue
            points = out.series.setdefault((str(ns), str(pod)), [])
            for point in values:
                try:
                    t, v = float(point[0]), float(point[1])
                except (TypeError, ValueError, IndexError):
                    out.skipped_points += 1
                    continue
                if not (math.isfinite(t) and math.isfinite(v)) or v < 0:
                    out.skipped_points += 1
                    continue
                points.append((t, v))
        return out

    def pod_utilization(
        self, start: datetime, end: datetime, step_s: int = 60
    ) -> tuple[list[UtilizationSeries], int]:
        """Per-pod compute (engine activity summed over the pod's devices) and framebuffer MiB.
        Returns the series and how many points/series were skipped as garbage."""
        step_s = fitting_step(start, end, step_s)
        compute = self.query_range(by_pod("sum", ENGINE_ACTIVE), start, end, step_s)
        memory = self.query_range(by_pod("sum", FB_USED), start, end, step_s)
        skipped = sum(m.skipped_points + m.skipped_series for m in (compute, memory))
        joined: dict[tuple[str, str], tuple[list[Any], list[Any]]] = defaultdict(lambda: ([], []))
        for key, points in compute.series.items():
            joined[key][0].extend(points)
        for key, points in memory.series.items():
            joined[key][1].extend(points)
        out = []
        for (ns, pod), (c, m) in sorted(joined.items()):
            if not c or not m:
                continue
            c.sort()
            m.sort()
            times = [t for t, _ in c + m]
            history_s = max(times) - min(times)
            out.append(
                UtilizationSeries(
                    ns,
                    pod,
                    [v for _, v in c],
                    [v for _, v in m],
                    history_s,
                    compute_times=[t for t, _ in c],
                    memory_times=[t for t, _ in m],
                )
            )
        return out, skipped

    def pod_engine_activity(
        self, start: datetime, end: datetime, step_s: int = 30
    ) -> dict[tuple[str, str], float]:
        """(namespace, pod) -> mean DCGM_FI_PROF_GR_ENGINE_ACTIVE (0..1) over [start, end].

        On MIG, dcgm-exporter reports the metric per GPU instance, so a pod holding one instance has one
        series. A pod holding several devices gets the mean across them at each step: that is the share of
        what it holds that it keeps busy, on the same 0..1 scale as a utilization threshold (a sum would
        exceed 1, a max would call a pod busy that leaves most of its instances idle), and a device scraped
        by two jobs does not double it. Then the mean over the steps where the pod had data. Points above 1
        are not a ratio and are skipped; a pod without any usable point is absent — unknown, never idle.
        `step_s` is the finest step; a range too long for it at Prometheus's step limit gets a coarser one.
        """
        step_s = fitting_step(start, end, step_s)
        matrix = self.query_range(by_pod("avg", ENGINE_ACTIVE), start, end, step_s)
        out: dict[tuple[str, str], float] = {}
        for key, points in matrix.series.items():
            values = [v for _, v in points if v <= 1.0]
            if values:
                out[key] = math.fsum(values) / len(values)
        return out


def fitting_step(start: datetime, end: datetime, step_s: int) -> int:
    """`step_s`, or the smallest step that keeps [start, end] within Prometheus's MAX_STEPS: a month of
    history at one point a minute is more steps than Prometheus answers, and a coarser sample of it serves
    a mean or a percentile better than an HTTP 400."""
    if step_s < 1:
        return step_s  # not a step: query_range refuses it
    return max(step_s, math.ceil(max(0, to_epoch(end) - to_epoch(start)) / MAX_STEPS))


def by_pod(aggregation: str, metric: str) -> str:
    """PromQL: `aggregation by (namespace, pod)` of `metric`, the pod read from whichever labels carry it."""
    expr = metric
    for target, sources in (
        ("namespace", ("exported_namespace", "pod_namespace")),
        ("pod", ("exported_pod", "pod_name")),
    ):
        for source in sources:  # the later source wins: dcgm-exporter's own old names over a rename
            expr = f'label_replace({expr}, "{target}", "$1", "{source}", "(.+)")'
    return f"{aggregation} by (namespace, pod) ({expr})"
