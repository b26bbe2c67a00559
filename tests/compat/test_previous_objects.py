"""What the previous KGWE commit (tests/compat/previous-commit) wrote still reads the same today
(docs/api-compatibility.md): its `kgwe template` GPUWorkloads validate, and every object its renderer puts on
the cluster for the processes of the next version to read — the scoring profiles the extender loads, the
runtimes and pod-template policies the GPUWorkload controller loads, the mig-parted and device-plugin configs
the rollout and the GPU Operator read, the kube-scheduler configuration the scheduler's restart checks —
is read by today's readers without losing a field. When tests/compat/previous/cluster/ holds the objects
that version's controllers wrote on a cluster (dumped by the upgrade test), they validate too."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import orjson
import pytest
import yaml

from kgwe.extender.profile import profiles_from_document
from kgwe.localcluster.deviceplugin import parse_config
from kgwe.policy.cluster_kinds import PolicyRepositoryStatus
from kgwe.policy.loader import load_repository
from kgwe.policy.pod_template_policy import policies_from_json
from kgwe.policy.workload_runtime import WorkloadRuntimeSpec
from kgwe.reconcile.desired import mig_configs_of
from kgwe.reconcile.release import Key, LiveObject, NodeView, Written, plan_release
from kgwe.reconcile.repository import read_spec
from kgwe.render.scheduler_config import config_problem
from kgwe.timestamps import parse_rfc3339
from kgwe.vocab import (
    POD_TEMPLATE_POLICY_KEY,
    REQUESTED_AT_ANNOTATION,
    RUNTIMES_CONFIG_KEY,
    SCHEDULER_CONFIG_KEY,
    SCHEDULER_NAME,
    SCORING_CONFIG_KEY,
)

PREVIOUS = Path(__file__).parent / "previous"
RENDERED = PREVIOUS / "rendered"
CLUSTER = PREVIOUS / "cluster"


def _docs(path: Path) -> list[dict]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def _configmap(file: str) -> dict[str, str]:
    [cm] = [d for d in _docs(RENDERED / file) if d["kind"] == "ConfigMap"]
    return cm["data"]


def test_the_fixtures_are_the_previous_commits():
    assert (Path(__file__).parent / "previous-commit").read_text().strip() == (
        "8048cc638ec700763aead707e2f546da090fd633"
    )
    assert len(_docs(PREVIOUS / "gpuworkload-templates.yaml")) == 6
    assert {p.name for p in RENDERED.glob("*.yaml")} >= {
        "scoring.yaml",
        "runtimes.yaml",
        "mig-parted-config.yaml",
    }


def test_gpuworkloads_the_previous_version_wrote_validate_unchanged(tmp_path):
    ps = load_repository(PREVIOUS / "gpuworkload-templates.yaml")
    assert not ps.errors, [str(e) for e in ps.errors]
    assert not ps.warnings, [str(w) for w in ps.warnings]
    assert len(ps.entries) == 6


def test_scoring_profiles_it_rendered_load_in_the_extender_with_every_field():
    doc = orjson.loads(_configmap("scoring.yaml")[SCORING_CONFIG_KEY])
    profiles = profiles_from_document(doc)
    assert set(doc["profiles"]) <= set(profiles) and "" in profiles  # every profile, and the default


def test_runtimes_and_template_policies_it_rendered_load_in_the_workload_controller():
    runtimes = orjson.loads(_configmap("runtimes.yaml")[RUNTIMES_CONFIG_KEY])["runtimes"]
    assert runtimes and all(WorkloadRuntimeSpec.model_validate(spec) for spec in runtimes.values())
    text = _configmap("pod-template-policy.yaml")[POD_TEMPLATE_POLICY_KEY]
    assert len(policies_from_json(text)) == len(orjson.loads(text))


def test_gpu_operator_configs_it_rendered_read_the_same():
    mig = mig_configs_of(_configmap("mig-parted-config.yaml"))
    assert "all-disabled" in mig and all(k == "all-disabled" or k.startswith("kgwe-") for k in mig)
    named = {d["metadata"]["name"]: d for d in _docs(RENDERED / "node-mig-labels.yaml")}
    assert named and all(d["metadata"]["labels"]["nvidia.com/mig.config"] in mig for d in named.values())
    for key, text in _configmap("device-plugin-config.yaml").items():
        assert parse_config(text), key


def test_the_scheduler_configuration_it_rendered_passes_todays_check():
    assert (
        config_problem(_configmap("kube-scheduler-config.yaml")[SCHEDULER_CONFIG_KEY], SCHEDULER_NAME) is None
    )


@pytest.mark.parametrize("file", ["policyrepository.yaml", "gpuworkloads.yaml", "nodes.yaml"])
def test_objects_its_controllers_wrote_on_a_cluster_validate(file):
    path = CLUSTER / file  # written by the upgrade test (the module's docstring)
    for doc in _docs(path):
        if doc["kind"] == "PolicyRepository":
            spec = read_spec(doc)
            assert spec.deletion_policy == "Delete", "a PolicyRepository written before it is Delete"
            PolicyRepositoryStatus.model_validate(doc.get("status") or {})
        elif doc["kind"] == "Node":  # its rollout's marks: today's way out recognises them as KGWE's
            annotations = doc["metadata"]["annotations"]
            assert parse_rfc3339(annotations[REQUESTED_AT_ANNOTATION]) is not None
            node = NodeView(doc["metadata"]["name"], doc["metadata"]["labels"], annotations)
            mig_cm = Key("v1", "ConfigMap", "gpu-operator", "kgwe-mig-parted-config")
            written = Written(
                "kgwe-system.gpu-policy", [LiveObject(mig_cm, present=False)], [node], mig_cm, mig_cm
            )
            plan = plan_release(written, "Delete", datetime.now(UTC))
            assert [(a.kind, a.config) for a in plan.mig] == [("relabel", "all-disabled")], plan.message()
        elif doc["kind"] == "GPUWorkload":
            single = path.parent / f".{doc['metadata']['name']}.yaml"
            single.write_text(yaml.safe_dump(doc))
            try:
                ps = load_repository(single)
            finally:
                single.unlink()
            assert not ps.errors, [str(e) for e in ps.errors]
