"""Pure planning of a GPUWorkload's children and of its status."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import yaml

from kgwe.policy import GPUWorkload
from kgwe.policy.admission import quota_admission
from kgwe.policy.gpu_workload import RetryPolicy
from kgwe.policy.workload_resolution import (
    Facts,
    PlanError,
    resolve_backend,
    resolve_priority,
    resolve_profile,
)
from kgwe.runtime.conditions import set_condition
from kgwe.workloads.plan import plan_children
from kgwe.workloads.status import backoff_seconds, derive_phase

EXAMPLES = Path(__file__).parents[2] / "docs" / "examples" / "gpuworkloads"


def _load(name: str) -> GPUWorkload:
    return GPUWorkload.model_validate(yaml.safe_load((EXAMPLES / name).read_text()))


def _by_kind(objs):
    out: dict[str, list] = {}
    for o in objs:
        out.setdefault(o["kind"], []).append(o)
    return out


def _env(container) -> dict:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}


def test_readme_workload_is_one_indexed_job_with_placement_annotations():
    wl = _load("kgwe-readme-llm-training.yaml")
    objs = _by_kind(plan_children(wl, "ml-team", "u1", Facts(scoring_profile="training")))
    assert set(objs) == {"Service", "Job"}  # one pod: no gang object
    job = objs["Job"][0]
    assert job["metadata"]["name"] == "llm-training-r0-worker"
    assert job["metadata"]["ownerReferences"][0] == {
        "apiVersion": "kgwe.nvidia.io/v1",
        "kind": "GPUWorkload",
        "name": "llm-training",
        "uid": "u1",
        "controller": True,
        "blockOwnerDeletion": True,
    }
    spec = job["spec"]
    assert (spec["completionMode"], spec["completions"], spec["backoffLimit"]) == ("Indexed", 1, 0)
    rule = spec["podFailurePolicy"]["rules"][0]
    assert rule["action"] == "Ignore" and rule["onPodConditions"][0]["type"] == "DisruptionTarget"
    pod = spec["template"]
    assert pod["spec"]["schedulerName"] == "kgwe-scheduler"
    assert pod["spec"]["subdomain"] == "llm-training"
    assert pod["spec"]["restartPolicy"] == "Never"
    assert pod["metadata"]["annotations"] == {
        "kgwe.nvidia.io/topology-preference": "NVLinkOptimal",
        "kgwe.nvidia.io/min-bandwidth-gbps": "300",  # 600 both ways = 300 per direction
        "kgwe.nvidia.io/min-memory-gb": "40",
        "kgwe.nvidia.io/scoring-profile": "training",
    }
    c = pod["spec"]["containers"][0]
    assert c["resources"]["limits"] == {"nvidia.com/gpu": "8"}
    env = _env(c)
    assert env["PET_NNODES"] == "1" and env["PET_NPROC_PER_NODE"] == "8" and env["WORLD_SIZE"] == "8"
    assert env["PET_MASTER_ADDR"] == env["MASTER_ADDR"] == "llm-training-r0-worker-0.llm-training"
    assert env["PET_MASTER_PORT"] == "29500"
    assert env["KGWE_DISTRIBUTED_BACKEND"] == "NCCL"
    assert env["PET_NODE_RANK"] == {
        "fieldRef": {
            "apiVersion": "v1",
            "fieldPath": "metadata.annotations['batch.kubernetes.io/job-completion-index']",
        }
    }
    svc = objs["Service"][0]
    assert svc["spec"]["clusterIP"] == "None" and svc["spec"]["publishNotReadyAddresses"] is True


def test_distributed_job_gets_a_native_podgroup_first_and_links_pods():
    wl = _load("distributed-16gpu.yaml")
    objs = plan_children(wl, "ml-team", "u1", Facts(run=2, gang_backend="Native"))
    assert [o["kind"] for o in objs] == ["PodGroup", "Service", "Job"]
    pg = objs[0]
    assert pg["apiVersion"] == "scheduling.k8s.io/v1beta1"
    assert pg["metadata"]["name"] == "llm-pretrain-r2"
    assert pg["spec"] == {"schedulingPolicy": {"gang": {"minCount": 2}}}
    job = objs[2]
    assert job["spec"]["completions"] == job["spec"]["parallelism"] == 2
    pod = job["spec"]["template"]
    assert pod["spec"]["schedulingGroup"] == {"podGroupName": "llm-pretrain-r2"}
    assert pod["metadata"]["labels"]["kgwe.nvidia.io/team"] == "ml-research"
    assert pod["metadata"]["labels"]["kgwe.nvidia.io/run"] == "2"
    env = _env(pod["spec"]["containers"][0])
    assert env["PET_NNODES"] == "2" and env["WORLD_SIZE"] == "16"


def test_kueue_backend_is_one_pod_group_of_plain_pods():
    """Through Kueue the pods are KGWE's own, one Kueue pod group (tests/workloads/test_kueue_route.py)."""
    wl = _load("distributed-16gpu.yaml")
    wl.spec.gang.queue_name = "team-a"
    objs = plan_children(wl, "ml-team", "u1", Facts(gang_backend="Kueue"))
    assert [o["kind"] for o in objs] == ["Service", "Pod", "Pod"]
    pod = objs[-1]
    assert pod["metadata"]["labels"]["kueue.x-k8s.io/pod-group-name"] == "llm-pretrain-r0"
    assert pod["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-a"
    assert pod["metadata"]["annotations"]["kueue.x-k8s.io/pod-group-total-count"] == "2"
    assert "schedulingGroup" not in pod["spec"]


def test_inference_on_mig_is_a_deployment():
    wl = _load("inference-mig.yaml")
    (dep,) = plan_children(wl, "inference", "u1", Facts())
    assert dep["kind"] == "Deployment" and dep["spec"]["replicas"] == 2
    assert dep["metadata"]["name"] == "chat-small-server"
    c = dep["spec"]["template"]["spec"]["containers"][0]
    assert c["resources"]["limits"] == {"nvidia.com/mig-1g.10gb": "1"}
    assert "restartPolicy" not in dep["spec"]["template"]["spec"]
    wl.spec.suspend = True
    assert plan_children(wl, "inference", "u1", Facts())[0]["spec"]["replicas"] == 0


def test_shared_gpu_and_exclusive_access():
    wl = GPUWorkload.model_validate(
        {
            "metadata": {"name": "nb"},
            "spec": {
                "gpuRequirements": {"gpuMilli": 250},
                "workloadType": "Interactive",
                "podTemplate": {
                    "spec": {
                        "containers": [
                            {
                                "name": "a",
                                "image": "x",
                                "resources": {"limits": {"nvidia.com/gpu": "4", "cpu": "1"}},
                            }
                        ]
                    }
                },
            },
        }
    )
    pod = plan_children(wl, "ns", "u", Facts())[0]["spec"]["template"]
    assert pod["spec"]["containers"][0]["resources"]["limits"] == {"cpu": "1", "nvidia.com/gpu.shared": "1"}
    assert pod["metadata"]["annotations"]["kgwe.nvidia.io/gpu-milli"] == "250"
    wl.spec.gpu_requirements.gpu_milli = None
    wl.spec.exclusive_access = True
    pod = plan_children(wl, "ns", "u", Facts())[0]["spec"]["template"]
    terms = pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert [t["matchExpressions"][0]["operator"] for t in terms["nodeSelectorTerms"]] == [
        "DoesNotExist",
        "In",
    ]


def test_two_roles_share_a_rendezvous_and_rank_offsets():
    wl = GPUWorkload.model_validate(
        {
            "metadata": {"name": "mpi"},
            "spec": {
                "gpuRequirements": {"count": 4},
                "workloadType": "HPC",
                "framework": "PyTorch",
                "roles": [
                    {"name": "launcher", "gpuRequirements": {"count": 1}},
                    {"name": "worker", "replicas": 3},
                ],
                "podTemplate": {"spec": {"containers": [{"name": "a", "image": "x"}]}},
            },
        }
    )
    jobs = [o for o in plan_children(wl, "ns", "u", Facts(gang_backend="Native")) if o["kind"] == "Job"]
    envs = [_env(j["spec"]["template"]["spec"]["containers"][0]) for j in jobs]
    assert [e["KGWE_RANK_OFFSET"] for e in envs] == ["0", "1"]
    assert {e["MASTER_ADDR"] for e in envs} == {"mpi-r0-launcher-0.mpi"}
    assert all("PET_NODE_RANK" not in e for e in envs)  # an env var cannot add the offset
    assert {e["PET_NNODES"] for e in envs} == {"4"}


def test_resolution_helpers():
    assert resolve_backend("Auto", 1, native=True, kueue=True) == ("None", None)
    assert resolve_backend("Auto", 2, native=True, kueue=True) == ("Native", None)
    assert resolve_backend("Auto", 2, native=False, kueue=True) == ("Kueue", None)
    backend, problem = resolve_backend("Auto", 2, native=False, kueue=False)
    assert backend == "None" and "no gang engine" in problem
    assert resolve_backend("Native", 2, native=False, kueue=True)[1] is not None
    assert resolve_backend("Auto", 2, native=False, kueue=False, batch=False) == ("None", None)  # serving
    assert resolve_priority(150, {"low": 100, "high": 1000, "mid": 150}) == "mid"
    assert resolve_priority(5, {"low": 100}) is None
    with pytest.raises(PlanError):
        resolve_priority("urgent", {"low": 100})
    wl = _load("kgwe-readme-llm-training.yaml")
    wl.spec.scheduling_strategy = "LeastLoaded"
    assert resolve_profile(wl, {"b": "LeastLoaded", "a": "BinPack"}) == "b"
    with pytest.raises(PlanError) as err:
        resolve_profile(wl, {"a": "BinPack"})
    assert err.value.reason == "NoScoringProfile"


def test_backoff_doubles_to_the_cap_with_bounded_jitter():
    policy = RetryPolicy(backoff_seconds=10, max_backoff_seconds=60, jitter=0)
    assert [backoff_seconds(policy, n) for n in range(5)] == [10, 20, 40, 60, 60]
    jittery = RetryPolicy(backoff_seconds=10, max_backoff_seconds=600, jitter=0.2)
    rng = random.Random(1)
    delays = [backoff_seconds(jittery, 1, rng) for _ in range(200)]
    assert 16 <= min(delays) < 18 and 22 < max(delays) <= 24
    assert len(set(delays)) > 100


def test_quota_admission_names_the_budget():
    quota = {
        "metadata": {"annotations": {"kgwe.nvidia.io/budget": "ml-research"}},
        "spec": {"hard": {"requests.nvidia.com/gpu": "8"}},
        "status": {"used": {"requests.nvidia.com/gpu": "8"}},
    }
    reason, message = quota_admission(quota, {"requests.nvidia.com/gpu": 8})
    assert reason == "BudgetExhausted" and "GPUBudget ml-research" in message
    quota["status"]["used"]["requests.nvidia.com/gpu"] = "4"
    assert quota_admission(quota, {"requests.nvidia.com/gpu": 8})[0] == "QuotaExceeded"
    assert quota_admission(quota, {"requests.nvidia.com/gpu": 4}) is None
    assert quota_admission(None, {"requests.nvidia.com/gpu": 4}) is None


def test_conditions_keep_transition_time_and_phase_follows():
    now = datetime(2026, 11, 1, tzinfo=UTC)
    conds: list = []
    later = now + timedelta(seconds=5)
    assert set_condition(conds, "PodsScheduled", "False", "Pending", "0/2", generation=1, now=now)
    assert not set_condition(conds, "PodsScheduled", "False", "Pending", "0/2", generation=1, now=later)
    assert conds[0].last_transition_time == "2026-11-01T00:00:00Z"
    assert derive_phase(conds) == "Pending"
    set_condition(
        conds, "PodsScheduled", "True", "AllScheduled", "2/2", generation=2, now=later + timedelta(4)
    )
    assert conds[0].last_transition_time == "2026-11-05T00:00:05Z" and conds[0].observed_generation == 2
    assert derive_phase(conds) == "Scheduled"
    set_condition(conds, "PodsReady", "True", "AllReady", "", generation=2, now=now)
    assert derive_phase(conds) == "Running"
    set_condition(conds, "Failed", "True", "BackoffLimitExceeded", "", generation=2, now=now)
    assert derive_phase(conds) == "Failed"


def test_name_too_long_is_a_plan_error():
    wl = _load("distributed-16gpu.yaml")
    wl.metadata.name = "x" * 60
    with pytest.raises(PlanError) as err:
        plan_children(wl, "ns", "u", Facts())
    assert err.value.reason == "NameTooLong"
