"""The Kueue route, pure: what Kueue's Configuration says it manages, which route a workload takes for it,
the pods KGWE makes for a Kueue pod group, and what KGWE reads back (tests/workloads/test_kueue_cluster.py
runs them through a real Kueue)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from kgwe.policy import GPUWorkload
from kgwe.policy.admission import ClusterView, PolicyView, findings
from kgwe.policy.kueue_setup import (
    KueueConfigError,
    KueueNamespace,
    assumed_setup,
    parse_setup,
    selector_matches,
)
from kgwe.policy.workload_resolution import Facts, kueue_pod_names, resolve_backend
from kgwe.workloads import status as st
from kgwe.workloads.plan import plan_children

EXAMPLES = Path(__file__).parents[2] / "docs" / "examples" / "gpuworkloads"
SHIPPED = """
apiVersion: config.kueue.x-k8s.io/v1beta2
kind: Configuration
integrations:
  frameworks: ["batch/job", "pod", "deployment"]
"""


def _wl(name: str = "distributed-16gpu.yaml", **gang: object) -> GPUWorkload:
    doc = yaml.safe_load((EXAMPLES / name).read_text())
    doc["spec"].setdefault("gang", {}).update(gang)
    return GPUWorkload.model_validate(doc)


def _two_roles(**gang: object) -> GPUWorkload:
    """A launcher and two workers: one gang across roles."""
    doc = yaml.safe_load((EXAMPLES / "distributed-16gpu.yaml").read_text())
    doc["spec"]["roles"] = [{"name": "launcher", "replicas": 1}, {"name": "worker", "replicas": 2}]
    doc["spec"].pop("distributedConfig")
    doc["spec"]["gang"] = {**doc["spec"].get("gang", {}), **gang}
    return GPUWorkload.model_validate(doc)


def _here(text: str = SHIPPED, *, queues: tuple[str, ...] = (), labels: dict | None = None) -> KueueNamespace:
    return KueueNamespace("ml-team", parse_setup(text), labels or {}, frozenset(queues))


def test_the_configuration_is_read_as_kueue_reads_it():
    setup = parse_setup(SHIPPED)
    assert setup.frameworks == {"batch/job", "pod", "deployment"} and not setup.manage_without_queue_name
    assert setup.source == "read from kueue-manager-config"
    # Kueue's own defaults for what the text leaves out: batch/job only, its namespace and kube-system out
    bare = parse_setup("apiVersion: config.kueue.x-k8s.io/v1beta2\nkind: Configuration\nnamespace: q\n")
    assert bare.frameworks == {"batch/job"}
    assert not selector_matches(bare.namespace_selector, {"kubernetes.io/metadata.name": "q"})
    assert selector_matches(bare.namespace_selector, {"kubernetes.io/metadata.name": "ml-team"})
    for bad in (
        "[1, 2]",
        "integrations: {frameworks: pod}",
        "manageJobsWithoutQueueName: yes please",
        "a: [b",
    ):
        with pytest.raises(KueueConfigError):
            parse_setup(bad)
    assert "assumed as Kueue's manifests ship it" in assumed_setup("ConfigMap x/y not found").source


@pytest.mark.parametrize(
    ("selector", "labels", "match"),
    [
        (None, {}, True),
        ({}, {"a": "1"}, True),
        ({"matchLabels": {"team": "ml"}}, {"team": "ml"}, True),
        ({"matchLabels": {"team": "ml"}}, {"team": "web"}, False),
        ({"matchExpressions": [{"key": "t", "operator": "In", "values": ["a"]}]}, {"t": "a"}, True),
        ({"matchExpressions": [{"key": "t", "operator": "In", "values": ["a"]}]}, {}, False),
        ({"matchExpressions": [{"key": "t", "operator": "NotIn", "values": ["a"]}]}, {}, True),
        ({"matchExpressions": [{"key": "t", "operator": "Exists"}]}, {"t": ""}, True),
        ({"matchExpressions": [{"key": "t", "operator": "DoesNotExist"}]}, {"t": ""}, False),
        ({"matchExpressions": [{"key": "t", "operator": "Gt", "values": ["1"]}]}, {"t": "2"}, False),
    ],
)
def test_label_selectors(selector, labels, match):
    assert selector_matches(selector, labels) is match


def test_what_kueue_takes_and_what_it_would_admit():
    assert _here().takes_every_job() is None
    manage = _here(SHIPPED + "manageJobsWithoutQueueName: true\n")
    assert "manageJobsWithoutQueueName: true" in (manage.takes_every_job() or "")
    default_queue = _here(queues=("default",))
    assert 'LocalQueue "default"' in (default_queue.takes_every_job() or "")
    outside = _here(
        SHIPPED + "managedJobsNamespaceSelector: {matchLabels: {kueue: on}}\n", queues=("default",)
    )
    assert outside.takes_every_job() is None and "outside" in (outside.pod_group_problem("q") or "")
    assert _here(queues=("team-a",)).pod_group_problem("team-a") is None
    assert 'no LocalQueue "team-b"' in (_here(queues=("team-a",)).pod_group_problem("team-b") or "")
    assert "would not queue its pods" in (_here().pod_group_problem(None) or "")
    assert "hold its pods" in (manage.pod_group_problem(None) or "")  # managed, but no queue to admit from
    assert default_queue.pod_group_problem(None) is None
    no_pods = _here('integrations: {frameworks: ["batch/job"]}\n', queues=("team-a",))
    assert 'lacks "pod"' in (no_pods.pod_group_problem("team-a") or "")


def test_the_route_where_kueue_takes_every_job_is_one_kueue_pod_group():
    takes = _here(SHIPPED + "manageJobsWithoutQueueName: true\n", queues=("default",))
    # every batch workload, one pod or many, Auto or None, even with native PodGroups served
    for wanted, pods in (("Auto", 4), ("None", 4), ("Auto", 1), ("Kueue", 2)):
        assert resolve_backend(wanted, pods, True, True, True, takes) == ("Kueue", None)
    backend, problem = resolve_backend("Native", 2, True, True, True, takes)
    assert backend == "None" and "each Job would be admitted on its own" in (problem or "")
    assert resolve_backend("Auto", 4, True, True, False, takes) == ("None", None)  # serving: Deployments
    stuck = _here(SHIPPED + "manageJobsWithoutQueueName: true\n")  # no queue to admit from
    _, problem = resolve_backend("Auto", 1, True, True, True, stuck)
    assert "must go through Kueue as one group, but" in (problem or "")


def test_the_route_elsewhere():
    queued = _here(queues=("team-a",))
    assert resolve_backend("Auto", 2, True, True, True, queued, "team-a") == ("Native", None)
    assert resolve_backend("Auto", 2, False, True, True, queued, "team-a") == ("Kueue", None)
    assert resolve_backend("Kueue", 2, True, True, True, queued, "team-a") == ("Kueue", None)
    _, problem = resolve_backend("Kueue", 2, True, True, True, queued, None)
    assert "names no LocalQueue" in (problem or "")
    _, problem = resolve_backend("Auto", 2, False, True, True, queued, None)
    assert problem and problem.startswith("no gang engine") and "Kueue: spec.gang.queueName" in problem
    _, problem = resolve_backend("Kueue", 2, True, False, True)
    assert problem == "Kueue is not installed (no kueue.x-k8s.io API)"
    assert resolve_backend("Auto", 1, False, True, True, queued) == ("None", None)  # one pod, not taken


def test_validate_says_why_kueue_would_not_admit_the_gang():
    wl = _wl(backend="Kueue", queueName="team-b")
    cluster = ClusterView(
        native_gang=False, kueue=True, kueue_namespaces={"ml-team": _here(queues=("team-a",))}
    )
    (problem,) = [f for f in findings(wl, "ml-team", PolicyView(), cluster) if f.reason == "NoGangEngine"]
    assert 'no LocalQueue "team-b" in namespace "ml-team" (have: team-a)' in problem.message


def test_one_budget_counts_the_gpus_kueue_admits():
    """The Kueue route with a kgwe-budget quota on its GPUs: refused, saying which budget to change."""
    wl = _wl(backend="Kueue", queueName="team-a")
    here = {"ml-team": _here(queues=("team-a",))}
    quota = {
        "metadata": {"annotations": {"kgwe.nvidia.io/budget": "ml-research"}},
        "spec": {"hard": {"requests.nvidia.com/gpu": "64"}},
    }
    cluster = ClusterView(native_gang=True, kueue=True, kueue_namespaces=here, quotas={"ml-team": quota})
    (twice,) = [f for f in findings(wl, "ml-team", PolicyView(), cluster) if f.reason == "BudgetCountedTwice"]
    assert "remove spec.quota from GPUBudget ml-research" in twice.message and twice.severity == "error"
    # the same quota on another route counts the GPUs alone; a budget without quota leaves them to Kueue
    native = ClusterView(native_gang=True, kueue=True, kueue_namespaces=here, quotas={"ml-team": quota})
    auto = _wl(queueName="team-a")
    assert not [
        f for f in findings(auto, "ml-team", PolicyView(), native) if f.reason == "BudgetCountedTwice"
    ]
    bare = {"ml-team": {"metadata": {}, "spec": {"hard": {}}}}
    free = ClusterView(native_gang=True, kueue=True, kueue_namespaces=here, quotas=bare)
    assert not [f for f in findings(wl, "ml-team", PolicyView(), free) if f.reason == "BudgetCountedTwice"]
    # offline, from the repository's budgets: the same
    policy = PolicyView(budget_quotas={"ml-team": ("ml-research", {"requests.nvidia.com/gpu": "64"})})
    offline = ClusterView(native_gang=True, kueue=True, kueue_namespaces=here)
    assert [f for f in findings(wl, "ml-team", policy, offline) if f.reason == "BudgetCountedTwice"]


def test_a_kueue_run_is_pods_of_one_group_across_roles():
    wl = _two_roles(backend="Kueue", queueName="team-a")
    objs = plan_children(wl, "ml-team", "u1", Facts(gang_backend="Kueue", run=3))
    kinds = [o["kind"] for o in objs]
    assert kinds == ["Service", "Pod", "Pod", "Pod"]  # no Job for Kueue to admit on its own, no PodGroup
    pods = objs[1:]
    assert [p["metadata"]["name"] for p in pods] == kueue_pod_names(wl, 3)
    assert kueue_pod_names(wl, 3) == [
        "llm-pretrain-r3-launcher-0",
        "llm-pretrain-r3-worker-0",
        "llm-pretrain-r3-worker-1",
    ]
    for pod in pods:
        labels, annotations = pod["metadata"]["labels"], pod["metadata"]["annotations"]
        assert labels["kueue.x-k8s.io/pod-group-name"] == "llm-pretrain-r3"
        assert labels["kueue.x-k8s.io/queue-name"] == "team-a"
        assert annotations["kueue.x-k8s.io/pod-group-total-count"] == "3"
        assert pod["metadata"]["ownerReferences"][0]["kind"] == "GPUWorkload"
        spec = pod["spec"]
        assert spec["hostname"] == pod["metadata"]["name"] and spec["subdomain"] == "llm-pretrain"
        assert spec["restartPolicy"] == "Never" and spec["schedulerName"] == "kgwe-scheduler"
        assert "suspend" not in spec and "schedulingGates" not in spec  # Kueue's fields stay Kueue's
    env = {e["name"]: e.get("value") for e in pods[2]["spec"]["containers"][0]["env"]}
    assert env["MASTER_ADDR"] == "llm-pretrain-r3-launcher-0.llm-pretrain"  # the Job's pods' hostnames
    assert pods[2]["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"] == "1"
    wl.spec.suspend = True  # a pod cannot be suspended: a suspended run has none
    assert [o["kind"] for o in plan_children(wl, "ml-team", "u1", Facts(gang_backend="Kueue"))] == ["Service"]


def _pod(name: str, phase: str = "Running", disrupted: bool = False) -> dict:
    conditions = [{"type": "DisruptionTarget", "status": "True"}] if disrupted else []
    return {
        "metadata": {"name": name},
        "status": {"phase": phase, "conditions": conditions, "reason": "Error"},
    }


def test_what_kgwe_reads_back_from_a_kueue_run():
    wl = _two_roles(backend="Kueue")
    names = kueue_pod_names(wl, 0)
    view = st.RunView(pods=[_pod(n) for n in names])
    assert st.member_failure(view, kueue=True) is None and not st.run_complete(view, wl, kueue=True)
    view.pods[1] = _pod(names[1], "Failed")
    assert st.member_failure(view, kueue=True) == f"Pod {names[1]} failed (Error)"
    view.pods[1] = _pod(names[1], "Failed", disrupted=True)  # preempted or evicted: replaced, not counted
    assert st.member_failure(view, kueue=True) is None
    assert st.kueue_replacements(view, names) == ([names[1]], False)
    assert st.kueue_replacements(st.RunView(pods=view.pods[:1]), names) == ([], True)  # Kueue deleted them
    done = st.RunView(pods=[_pod(n, "Succeeded") for n in names])
    assert st.run_complete(done, wl, kueue=True)


def test_what_kueue_says_becomes_condition_kueue_admitted():
    assert st.kueue_admission(None, "w-r0", 3)[0:2] == ("False", "Pending")
    pending = {
        "spec": {"queueName": "team-a"},
        "status": {
            "conditions": [
                {
                    "type": "QuotaReserved",
                    "status": "False",
                    "reason": "Pending",
                    "message": "insufficient quota",
                }
            ]
        },
    }
    assert st.kueue_admission(pending, "w-r0", 3) == (
        "False",
        "Pending",
        "Kueue holds Workload w-r0 (team-a): insufficient quota",
    )
    admitted = {
        "spec": {"queueName": "team-a"},
        "status": {
            "admission": {"clusterQueue": "gpus"},
            "conditions": [{"type": "Admitted", "status": "True"}],
        },
    }
    assert st.kueue_admission(admitted, "w-r0", 3)[:2] == ("True", "Admitted")
    evicted = {
        "status": {
            "conditions": [{"type": "Evicted", "status": "True", "reason": "Preempted", "message": "m"}]
        }
    }
    assert st.kueue_admission(evicted, "w-r0", 3) == ("False", "EvictedPreempted", "m")
