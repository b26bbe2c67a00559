"""pod_engine_activity against a real Prometheus (built from Go modules) scraping dcgm-exporter-format text
every second: MIG-instance series of a busy, an idle and a two-instance pod, an instance no pod holds, and
a second exporter scraped the way a ServiceMonitor scrapes it (its own pod's namespace/pod as target
labels, so Prometheus renames the workload's to exported_*). Then reclaimable_pods on the result, and the
failures a controller must turn into "measurement unavailable": Prometheus stopped, a URL that is not
Prometheus."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest

from kgwe.cost.prometheus import ENGINE_ACTIVE, MAX_STEPS, PrometheusClient, by_pod, fitting_step
from kgwe.cost.utilization import reclaimable_pods
from kgwe.errors import KgweError
from tests.harness.dcgm import exposition, instance, serve_exporter
from tests.harness.waiting import wait_for

BUSY, IDLE, TWO, UNMEASURED = ("ml", "busy"), ("ml", "idle"), ("ml", "two"), ("ml", "queued")
RENAMED = ("ml", "renamed")
EXPORTER_POD = ("gpu-operator", "dcgm-exporter-x7k2p")  # the scraped exporter's own pod (target labels)


def node_a(scrape: int) -> bytes:
    """Values alternate between scrapes, so the means are of several different samples."""
    odd = scrape % 2
    return exposition(
        [
            (instance(9, "1g.10gb", BUSY), 0.9 if odd else 0.7),  # mean 0.8
            (instance(10, "1g.10gb", IDLE), 0.06 if odd else 0.04),  # mean 0.05
            (instance(11, "2g.20gb", TWO), 0.7 if odd else 0.5),  # the pod's two instances: mean 0.4
            (instance(12, "2g.20gb", TWO, container="sidecar"), 0.2),
            (instance(13, "1g.10gb", None), 0.0),  # held by no pod: no pod labels
        ]
    )


def node_b(scrape: int) -> bytes:
    return exposition([(instance(9, "3g.40gb", RENAMED), 0.3), (instance(10, "3g.40gb", None), 0.0)])


@pytest.fixture
def exporters():
    with serve_exporter(node_a) as a, serve_exporter(node_b) as b:
        yield a, b


def test_engine_activity_per_pod_and_only_the_idle_pod_is_reclaimable(prometheus, tmp_path, exporters):
    node_a_target, node_b_target = exporters
    with prometheus(
        {"dcgm-a": node_a_target, "dcgm-b": node_b_target},
        tmp_path / "prometheus",
        target_labels={"dcgm-b": {"namespace": EXPORTER_POD[0], "pod": EXPORTER_POD[1]}},
    ) as prom:
        samples = f"count_over_time({ENGINE_ACTIVE}[10m])"

        def scraped_enough() -> bool:
            counts = [float(r["value"][1]) for r in prom.query(samples)]
            return len(counts) == 7 and min(counts) >= 10

        wait_for("10 scrapes of all 7 series", scraped_enough)
        # what Prometheus stored for node b: the workload's labels renamed, the exporter's pod in their place
        renamed = prom.query(f'{ENGINE_ACTIVE}{{exported_pod="{RENAMED[1]}"}}')
        assert [(r["metric"]["namespace"], r["metric"]["pod"]) for r in renamed] == [EXPORTER_POD]

        client = PrometheusClient(f"http://127.0.0.1:{prom.port}")
        end = datetime.now(UTC) + timedelta(seconds=1)
        activity = client.pod_engine_activity(end - timedelta(minutes=10), end, step_s=1)

        assert activity.keys() == {BUSY, IDLE, TWO, RENAMED, EXPORTER_POD}
        assert activity[BUSY] == pytest.approx(0.8, abs=0.05)
        assert activity[IDLE] == pytest.approx(0.05, abs=0.011)
        assert activity[TWO] == pytest.approx(0.4, abs=0.05)  # mean across its instances (max 0.6, sum 0.8)
        assert activity[RENAMED] == pytest.approx(0.3)
        assert activity[EXPORTER_POD] == 0.0  # node b's unheld instance, under the pod that scraped it

        held = [BUSY, IDLE, TWO, RENAMED, UNMEASURED]  # the exporter's pod holds no GPU
        assert reclaimable_pods(activity, held, 0.1) == {IDLE}
        assert reclaimable_pods(activity, held, 0.35) == {IDLE, RENAMED}

        # the most steps Prometheus answers go through; one more is refused before asking, and
        # pod_engine_activity takes a coarser step for a range that long
        query = by_pod("avg", ENGINE_ACTIVE)
        assert client.query_range(query, end - timedelta(seconds=MAX_STEPS), end, 1).series.keys() >= {BUSY}
        with pytest.raises(KgweError, match="use a larger step"):
            client.query_range(query, end - timedelta(seconds=MAX_STEPS + 1), end, 1)
        assert fitting_step(end - timedelta(seconds=MAX_STEPS + 1), end, 1) == 2
        long = client.pod_engine_activity(end - timedelta(seconds=MAX_STEPS + 1), end, step_s=1)
        assert reclaimable_pods(long, held, 0.1) == {IDLE}


def one_line_error_naming(url: str, call: Callable[[], object], match: str) -> KgweError:
    with pytest.raises(KgweError, match=match) as info:
        call()
    err = info.value
    assert url in str(err) and "\n" not in str(err)
    assert err.__cause__ is None and err.__suppress_context__  # printed alone, no chained traceback
    return err


def test_a_stopped_prometheus_is_a_clear_error_naming_its_url(prometheus, tmp_path):
    with prometheus({}, tmp_path / "prometheus") as prom:
        url = f"http://127.0.0.1:{prom.port}"
        client = PrometheusClient(url, timeout_s=5)
        end = datetime.now(UTC)
        assert client.pod_engine_activity(end - timedelta(minutes=1), end) == {}  # up, nothing scraped
    start = end - timedelta(minutes=1)
    one_line_error_naming(url, lambda: client.pod_engine_activity(start, end), "unreachable")


def test_a_url_that_is_not_prometheus_is_a_clear_error(exporters):
    url = f"http://{exporters[0]}"
    client = PrometheusClient(url, timeout_s=5)
    end = datetime.now(UTC)
    start = end - timedelta(minutes=1)
    one_line_error_naming(url, lambda: client.pod_engine_activity(start, end), "not JSON")


@pytest.mark.parametrize(
    "start, end, step_s, match",
    [
        (datetime(2026, 11, 1), datetime(2026, 11, 2), 30, "timezone-aware"),
        (datetime(2026, 11, 2, tzinfo=UTC), datetime(2026, 11, 1, tzinfo=UTC), 30, "start <= end"),
        (datetime(2026, 11, 1, tzinfo=UTC), datetime(2026, 11, 2, tzinfo=UTC), 0, "step >= 1"),
    ],
)
def test_a_bad_range_is_refused_before_any_request(start, end, step_s, match):
    # port 1 is closed: a request would fail "unreachable", so these messages prove none was made
    with pytest.raises(KgweError, match=match):
        PrometheusClient("http://127.0.0.1:1", timeout_s=1).pod_engine_activity(start, end, step_s)


def test_a_long_range_gets_the_smallest_step_prometheus_answers():
    october = datetime(2026, 10, 1, tzinfo=UTC), datetime(2026, 11, 1, tzinfo=UTC)
    assert fitting_step(*october, 60) == 244  # 2,678,400 s / 11,000 steps, rounded up
    assert fitting_step(october[0], october[0] + timedelta(hours=1), 30) == 30
