"""Prometheus's own binaries for the tests: promtool (rule checks, rule unit tests, PromQL parsing) and the
Prometheus server (the end-to-end test scrapes KGWE with it). Built once from the Go module
github.com/prometheus/prometheus by hack/tool-bins.sh (hack/prometheus/go.mod pins the release)."""

from __future__ import annotations

import functools
import subprocess
from pathlib import Path
from typing import Any

from kgwe.localcluster.gotools import tool_dir


@functools.cache
def prometheus_dir() -> Path:
    return tool_dir("prometheus")


def promtool(
    *args: str, cwd: Path | None = None, timeout_seconds: float = 300
) -> subprocess.CompletedProcess[str]:
    """Run promtool; the caller checks returncode (its stdout/stderr say what failed)."""
    return subprocess.run(
        [str(prometheus_dir() / "promtool"), *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=timeout_seconds,
        check=False,
    )


class PrometheusServer:
    """A real Prometheus scraping `targets` (job -> "host:port", path /metrics) every second and evaluating
    KGWE's alert rules; `query(expr)` runs an instant query. Use as a context manager.

    `target_labels` (job -> labels) attaches labels to a job's target as service discovery would, with
    Prometheus's default honor_labels: false, so a scraped label of the same name becomes exported_<name>.
    `scrape_options` (job -> options) adds to a job's scrape config, e.g. scheme https with its tls_config and
    authorization, as a ServiceMonitor renders them."""

    def __init__(
        self,
        targets: dict[str, str],
        workdir: Path,
        rule_files: tuple[Path, ...] = (),
        target_labels: dict[str, dict[str, str]] | None = None,
        scrape_options: dict[str, dict[str, Any]] | None = None,
    ) -> None:
        self.targets = targets
        self.workdir = workdir
        self.rule_files = rule_files
        self.target_labels = target_labels or {}
        self.scrape_options = scrape_options or {}
        self.port = 0
        self._proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> PrometheusServer:
        import time
        import urllib.request

        import yaml

        from kgwe.localcluster.controlplane import free_port

        self.workdir.mkdir(parents=True, exist_ok=True)
        config = {
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s", "scrape_timeout": "1s"},
            "rule_files": [str(p) for p in self.rule_files],
            "scrape_configs": [
                {
                    "job_name": job,
                    "static_configs": [self._static_config(job, target)],
                    **self.scrape_options.get(job, {}),
                }
                for job, target in sorted(self.targets.items())
            ],
        }
        (self.workdir / "prometheus.yml").write_text(yaml.safe_dump(config))
        self.port = free_port()
        log = (self.workdir / "prometheus.log").open("wb")
        self._proc = subprocess.Popen(
            [
                str(prometheus_dir() / "prometheus"),
                f"--config.file={self.workdir / 'prometheus.yml'}",
                f"--storage.tsdb.path={self.workdir / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--log.level=warn",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/-/ready", timeout=2) as r:
                    if r.status == 200:
                        return self
            except OSError:
                if self._proc.poll() is not None:
                    break
            time.sleep(0.2)
        self.__exit__(None, None, None)
        raise RuntimeError(f"prometheus did not start; see {self.workdir / 'prometheus.log'}")

    def _static_config(self, job: str, target: str) -> dict[str, Any]:
        labels = self.target_labels.get(job)
        return {"targets": [target], "labels": labels} if labels else {"targets": [target]}

    def __exit__(self, *exc: object) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait(timeout=5)

    def query(self, expr: str) -> list[dict[str, Any]]:
        """The instant-query result vector (empty: no data); raises on a query error."""
        import json
        import urllib.parse
        import urllib.request

        url = f"http://127.0.0.1:{self.port}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
        with urllib.request.urlopen(url, timeout=30) as r:
            doc = json.loads(r.read())
        if doc.get("status") != "success":
            raise RuntimeError(f"query {expr!r}: {doc.get('error')}")
        result = doc["data"]["result"]
        return result if isinstance(result, list) else [result]

    def firing(self) -> set[str]:
        """Names of the alerts currently firing."""
        import json
        import urllib.request

        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/api/v1/alerts", timeout=30) as r:
            alerts = json.loads(r.read())["data"]["alerts"]
        return {a["labels"]["alertname"] for a in alerts if a.get("state") == "firing"}


def panel_coverage(prom: PrometheusServer) -> dict[str, Any]:
    """Run every dashboard panel's queries on `prom`: a panel has data when any of its queries returns a
    sample. Panels that read dcgm-exporter metrics are counted apart (no DCGM without GPUs)."""
    from kgwe.observability.dashboards import DASHBOARDS, panels

    total = with_data = dcgm = 0
    missing: list[str] = []
    for dashboard in DASHBOARDS:
        for panel in panels(dashboard):
            if panel.dcgm:
                dcgm += 1
                continue
            total += 1
            if any(prom.query(q.expr) for q in panel.queries):
                with_data += 1
            else:
                missing.append(f"{dashboard[0]}: {panel.title}")
    return {"panels": total, "panels_with_data": with_data, "panels_needing_dcgm": dcgm, "missing": missing}
