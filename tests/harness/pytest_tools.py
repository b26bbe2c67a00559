"""pytest plugin: the Go-built tools some tests run, each behind a session fixture that builds it on first
use (hack/tool-bins.sh, cached in ~/.cache/kgwe) and gives the test what it calls. A test taking one is
marked `gotool` (tests.harness.pytest_lanes), so `make check` leaves it out.

Fixtures (session):
  chart       tests.harness.chart with helm built (chart.helm(...), chart.template(...))
  promtool    kgwe.localcluster.prometheus.promtool with promtool built
  prometheus  kgwe.localcluster.prometheus.PrometheusServer with Prometheus built
  flux        tests.harness.flux with Flux's kustomize-controller built
  dpconfig    kgwe.localcluster.deviceplugin.nvidia_loader_reads with NVIDIA's config loader built
  kueue_tool  tests.harness.kueue with Kueue's manager built

A tool that cannot be built fails the test with the build's message; it is never skipped.
"""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import Any

import pytest

from kgwe.errors import KgweError
from kgwe.localcluster.gotools import tool_dir


def _built(name: str) -> None:
    try:
        tool_dir(name)
    except KgweError as exc:
        pytest.fail(str(exc), pytrace=False)


@pytest.fixture(scope="session")
def chart() -> ModuleType:
    from tests.harness import chart as module

    _built("helm")
    return module


@pytest.fixture(scope="session")
def promtool() -> Callable[..., Any]:
    from kgwe.localcluster.prometheus import promtool as run

    _built("prometheus")
    return run


@pytest.fixture(scope="session")
def prometheus() -> type:
    from kgwe.localcluster.prometheus import PrometheusServer

    _built("prometheus")
    return PrometheusServer


@pytest.fixture(scope="session")
def flux() -> ModuleType:
    from tests.harness import flux as module

    _built("flux")
    return module


@pytest.fixture(scope="session")
def dpconfig() -> Callable[[str], dict[str, Any]]:
    from kgwe.localcluster.deviceplugin import nvidia_loader_reads

    _built("dpconfig")
    return nvidia_loader_reads


@pytest.fixture(scope="session")
def kueue_tool() -> ModuleType:
    from tests.harness import kueue as module

    _built("kueue")
    return module
