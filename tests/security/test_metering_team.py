"""Who pays is decided by the namespace, not by the pod: before this, a pod labelled with another team's
name was billed to that team. Real control plane, real metering watch, real store."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

import pytest
from kubernetes import client

from kgwe.cost.metering import UNASSIGNED_TEAM, namespace_teams
from kgwe.cost.metering_watch import MeteringWatch
from kgwe.cost.store import CostStore
from kgwe.cost.usage import Period
from tests.harness.pods import gpu_pod
from tests.harness.pytest_cluster import delete_namespace
from tests.harness.waiting import wait_for

pytestmark = pytest.mark.cluster


@pytest.fixture
def store(tmp_path):
    s = CostStore(f"sqlite:///{tmp_path / 'cost.db'}")
    s.migrate()
    yield s
    s.close()


def test_a_pod_cannot_choose_the_team_that_pays(k8s_api, namespace, gpu_node, store) -> None:
    core = client.CoreV1Api(k8s_api)
    node = gpu_node("DGX-H100")
    extra = [f"{namespace}-{suffix}" for suffix in ("claimed", "bogus", "plain")]
    for ns in extra:
        core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=ns)))
    core.patch_namespace(namespace, {"metadata": {"labels": {"kgwe.nvidia.io/team": "blue"}}})
    core.patch_namespace(extra[1], {"metadata": {"labels": {"kgwe.nvidia.io/team": "Team_Of_Someone"}}})
    # the GPUBudget of team "green" claims extra[0]; its own label says otherwise
    core.patch_namespace(extra[0], {"metadata": {"labels": {"kgwe.nvidia.io/team": "blue"}}})
    watch = MeteringWatch(k8s_api, store, watch_timeout_s=2, budget_teams=lambda: {extra[0]: "green"})
    stop = threading.Event()
    thread = threading.Thread(target=watch.run, args=(stop,), daemon=True)
    thread.start()
    try:
        wait_for("first sync", watch.synced.is_set)
        thief = {"kgwe.nvidia.io/team": "red", "team": "red"}
        core.create_namespaced_pod(namespace, gpu_pod("labelled-red", node, labels=thief))
        for ns in extra:
            core.create_namespaced_pod(ns, gpu_pod("p", node, labels=thief))

        def billed() -> dict[str, str]:
            now = datetime.now(UTC)
            window = Period(now - timedelta(days=1), now + timedelta(days=1))
            return {iv.namespace: iv.team for iv in store.usage(window) if iv.namespace.startswith(namespace)}

        wait_for("all four metered", lambda: len(billed()) == 4)
        assert billed() == {
            namespace: "blue",  # the namespace's label, not the pod's
            extra[0]: "green",  # the GPUBudget that claims it wins over the label
            extra[1]: UNASSIGNED_TEAM,  # a malformed label counts as none
            extra[2]: UNASSIGNED_TEAM,  # nobody claimed it: one line for all such namespaces
        }
    finally:
        stop.set()
        thread.join(30)
        for ns in extra:
            delete_namespace(core, ns)


def test_team_labels_are_bounded() -> None:
    def ns(name: str, team: str) -> dict:
        return {"metadata": {"name": name, "labels": {"kgwe.nvidia.io/team": team}}}

    teams = namespace_teams([ns("a", "ml-team"), ns("b", "x" * 64), ns("c", "a b"), ns("d", "UPPER")])
    assert teams == {"a": "ml-team"}
