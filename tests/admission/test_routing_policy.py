"""The routing MutatingAdmissionPolicy: what the chart renders is what kgwe.admission.policy builds, and on a
real API server (1.37: admissionregistration.k8s.io/v1 served, the MutatingAdmissionPolicy plugin on by
default, no flag) it routes exactly the pods the webhook's pure decision routes (tests/admission/
routing_cases.py), in opted-in namespaces only."""

from __future__ import annotations

import copy
import secrets
from collections.abc import Iterator

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from kgwe.admission.decision import decide
from kgwe.admission.policy import POLICY_NAME, routing_objects
from kgwe.policy.schema_export import routing_policy_text
from kgwe.resources import deploy_dir
from kgwe.vocab import SCHEDULER_NAME, SCHEDULING_ENABLED, SCHEDULING_NAMESPACE_LABEL
from tests.admission.routing_cases import CASES, pod
from tests.harness.waiting import wait_for

CHART_FILE = deploy_dir() / "helm" / "kgwe" / "files" / "admission" / "routing.yaml"


def test_the_chart_renders_what_kgwe_builds():
    """`make schemas` wrote the chart's copy; a change to the decision's names shows here until it does."""
    assert CHART_FILE.read_text(encoding="utf-8") == routing_policy_text()


def test_the_expressions_are_built_from_the_decisions_names():
    (policy, binding) = routing_objects("gpu-scheduler")
    text = str(policy["spec"])
    assert "nvidia.com/gpu" in text and "nvidia.com/gpu.shared" in text and "nvidia.com/mig-" in text
    assert '"gpu-scheduler"' in text and "kgwe-scheduler" not in text
    assert policy["spec"]["failurePolicy"] == "Fail"  # fails closed: see kgwe.admission.policy
    assert binding["spec"]["matchResources"]["namespaceSelector"] == {
        "matchLabels": {SCHEDULING_NAMESPACE_LABEL: SCHEDULING_ENABLED}
    }


def _created(core: client.CoreV1Api, namespace: str, manifest: dict) -> str:
    """The schedulerName the API server stores for this pod (a server-side dry run: admission runs, nothing
    is persisted)."""
    body = copy.deepcopy(manifest)
    body["metadata"] = {"name": f"p-{secrets.token_hex(3)}"}
    created = core.create_namespaced_pod(namespace, body, dry_run="All")
    return created.spec.scheduler_name


@pytest.fixture
def routing_policy(k8s_api: client.ApiClient, namespace: str) -> Iterator[str]:
    """The policy and binding applied (the namespace labelled), active once a probe pod is routed; removed
    afterwards, and gone once a probe is not (other tests of this control plane never see it)."""
    admission = client.AdmissionregistrationV1Api(k8s_api)
    core = client.CoreV1Api(k8s_api)
    opt_in = {SCHEDULING_NAMESPACE_LABEL: SCHEDULING_ENABLED}
    core.patch_namespace(namespace, {"metadata": {"labels": opt_in}})
    policy, binding = routing_objects()
    admission.create_mutating_admission_policy(policy)
    admission.create_mutating_admission_policy_binding(binding)
    probe = pod({"limits": {"nvidia.com/gpu": "1"}})
    try:
        routed = lambda: _created(core, namespace, probe) == SCHEDULER_NAME  # noqa: E731
        wait_for("the policy routing a probe pod", routed, 60)
        yield namespace
    finally:
        for delete in (
            admission.delete_mutating_admission_policy_binding,
            admission.delete_mutating_admission_policy,
        ):
            try:
                delete(POLICY_NAME)
            except ApiException as exc:
                if exc.status != 404:
                    raise
        wait_for("the policy gone", lambda: _created(core, namespace, probe) != SCHEDULER_NAME, 60)


def test_the_api_server_routes_as_the_webhooks_decision(
    routing_policy: str, k8s_api: client.ApiClient
) -> None:
    """Every case of the table, through the real admission chain; then the same GPU pod in a namespace that
    did not opt in is left alone."""
    core = client.CoreV1Api(k8s_api)
    wrong = []
    for case, manifest, routed in CASES:
        decided = decide(manifest)
        assert bool(decided.patch) == routed, case  # the table's own claim, checked against the decision
        own = manifest["spec"].get("schedulerName") or "default-scheduler"
        expected = SCHEDULER_NAME if decided.patch else own
        got = _created(core, routing_policy, manifest)
        if got != expected:
            wrong.append(f"{case}: the API server set {got!r}, the webhook would set {expected!r}")
    assert not wrong, wrong
    other = f"not-opted-in-{secrets.token_hex(3)}"
    core.create_namespace({"metadata": {"name": other}})
    try:
        wait_for(
            f"the default ServiceAccount of {other}",
            lambda: core.list_namespaced_service_account(other, field_selector="metadata.name=default").items,
            30,
        )
        assert _created(core, other, pod({"limits": {"nvidia.com/gpu": "1"}})) == "default-scheduler"
    finally:
        core.delete_namespace(other)
