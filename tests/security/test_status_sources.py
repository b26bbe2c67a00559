"""`kgwe status` shows as KGWE's only what KGWE's controller reported: anyone who may create Events can write
one that looks like a budget alert about a PolicyRepository, and such an Event is not shown."""

from __future__ import annotations

import copy
import json
import secrets

import pytest
from kubernetes import client

from kgwe import cli
from kgwe.cluster.events import EventRecorder
from kgwe.fleet.status import budget_rows
from kgwe.vocab import API_GROUP as GROUP
from kgwe.vocab import CRD_VERSION as VERSION

REPOSITORY = {"metadata": {"name": "gpu-policy", "namespace": "kgwe-system", "uid": "repo-uid"}}
GENUINE = {
    "metadata": {"namespace": "kgwe-system", "name": "gpu-policy.1"},
    "involvedObject": {
        "kind": "PolicyRepository",
        "namespace": "kgwe-system",
        "name": "gpu-policy",
        "uid": "repo-uid",
    },
    "source": {"component": "kgwe-controller"},
    "reportingComponent": "kgwe-controller",
    "reason": "BudgetThreshold",
    "message": "budget ml-research (ml-research) reached 80% of 1000 USD in 2026-11: spent 812.40",
    "lastTimestamp": "2026-11-23T22:00:00Z",
}


def _forged(**changes: object) -> dict:
    event = copy.deepcopy(GENUINE)
    event["message"] = "budget ml-research (ml-research) reached 100% of 1000 USD: quota capped, call +1-555"
    for path, value in changes.items():
        where, _, key = path.partition("__")
        if key:
            event[where][key] = value
        else:
            event[where] = value
    return event


@pytest.mark.parametrize(
    "event",
    [
        _forged(involvedObject__uid=None),  # names the repository by name only
        _forged(involvedObject__uid="another-uid"),
        _forged(metadata__namespace="tenant"),  # written in the tenant's namespace about KGWE's repository
        _forged(source={"component": "tenant-bot"}, reportingComponent="tenant-bot"),
        _forged(source={}, reportingComponent="kgwe-controller"),
        _forged(reportingComponent="tenant-bot"),
    ],
)
def test_a_look_alike_budget_event_is_not_shown(event):
    assert budget_rows([event], [], [REPOSITORY]) == []
    shown = budget_rows([GENUINE, event], [], [REPOSITORY])
    assert [r["message"] for r in shown] == [GENUINE["message"]]


@pytest.mark.cluster
def test_status_ignores_events_a_tenant_writes(
    k8s_api, policy_crds, namespace, control_plane, capsys, monkeypatch
):
    monkeypatch.setenv("KUBECONFIG", str(control_plane.kubeconfig_path))
    custom, core = client.CustomObjectsApi(k8s_api), client.CoreV1Api(k8s_api)
    repo = custom.create_namespaced_custom_object(
        GROUP,
        VERSION,
        namespace,
        "policyrepositories",
        {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "PolicyRepository",
            "metadata": {"name": "gpu-policy"},
            "spec": {"url": "https://git.example.com/gpu-policy.git", "ref": {"branch": "main"}},
        },
    )
    # the controller's own alert, as its EventRecorder writes it
    EventRecorder(k8s_api).record(repo, "Warning", "BudgetThreshold", f"budget real-{namespace} reached 90%")
    # a tenant's look-alikes in its own namespace (the API server keeps an Event beside its object): one
    # naming KGWE's repository by uid, one a repository of that name there
    tenant = f"{namespace}-tenant"
    core.create_namespace({"metadata": {"name": tenant}})
    forged = {
        "metadata": {"name": f"gpu-policy.{secrets.token_hex(4)}"},
        "involvedObject": {
            "kind": "PolicyRepository",
            "apiVersion": f"{GROUP}/{VERSION}",
            "namespace": tenant,
            "name": "gpu-policy",
            "uid": repo["metadata"]["uid"],
        },
        "source": {"component": "kgwe-controller"},
        "reason": "BudgetEnforced",
        "type": "Warning",
        "message": f"budget forged-{namespace} exhausted: every GPU quota capped",
        "lastTimestamp": "2026-11-23T22:00:00Z",
        "firstTimestamp": "2026-11-23T22:00:00Z",
        "count": 1,
    }
    core.create_namespaced_event(tenant, forged)
    forged["metadata"]["name"] += "-2"
    del forged["involvedObject"]["uid"]
    core.create_namespaced_event(tenant, forged)
    try:
        assert cli.main(["status", "-o", "json"]) == 0
        messages = [b["message"] for b in json.loads(capsys.readouterr().out)["budgets"]]
        assert f"budget real-{namespace} reached 90%" in messages
        assert not [m for m in messages if f"forged-{namespace}" in m]
    finally:
        core.delete_namespace(tenant)
