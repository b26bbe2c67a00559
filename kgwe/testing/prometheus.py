"""Prometheus's own binaries for the tests: promtool (rule checks, rule unit tests, PromQL parsing) and the
Prometheus server (the end-to-end test scrapes KGWE with it). Built once from the Go module
github.com/prometheus/prometheus by hack/tool-bins.sh (hack/prometheus/go.mod pins the release)."""

from __future__ import annotations

import functools
import subprocess
from pathlib import Path

from kgwe.testing.gotools import tool_dir


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
