"""The controller's scheduler restart against the real API server: a checked configuration is stamped on the
kgwe-scheduler Deployment by SSA of that one annotation (and the Deployment gets the stamp of the policy
commit that caused it); a missing or malformed one changes nothing."""

from __future__ import annotations

import pytest
from kubernetes import client

from kgwe.audit.stamp import Stamp
from kgwe.reconcile.scheduler_restart import SchedulerRestarter
from kgwe.render.scheduler_config import config_hash
from kgwe.runtime.kube import KubeCluster
from kgwe.vocab import SCHEDULER_CONFIG_HASH_ANNOTATION, SCHEDULER_CONFIG_KEY, SCHEDULER_CONFIGMAP
from tests.harness.kgwe_scheduler import rendered_config_text

pytestmark = pytest.mark.cluster


def deployment(namespace: str) -> dict:
    labels = {"app": "kgwe-scheduler-test"}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "kgwe-scheduler", "namespace": namespace},
        "spec": {
            "replicas": 0,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels, "annotations": {"team": "platform"}},
                "spec": {
                    "containers": [
                        {"name": "kube-scheduler", "image": "registry.k8s.io/kube-scheduler:v1.37.2"}
                    ]
                },
            },
        },
    }


def annotations(apps: client.AppsV1Api, namespace: str) -> dict:
    return (
        apps.read_namespaced_deployment("kgwe-scheduler", namespace).spec.template.metadata.annotations or {}
    )


def test_restart_stamps_only_the_hash_and_refuses_bad_configs(k8s_api, namespace) -> None:
    core, apps = client.CoreV1Api(k8s_api), client.AppsV1Api(k8s_api)
    restarter = SchedulerRestarter(KubeCluster(k8s_api), namespace)
    assert restarter.sync().outcome == "invalid"  # no ConfigMap at all
    text = rendered_config_text("http://kgwe-extender.kgwe-system.svc:8080")
    core.create_namespaced_config_map(
        namespace,
        client.V1ConfigMap(
            metadata=client.V1ObjectMeta(name=SCHEDULER_CONFIGMAP), data={SCHEDULER_CONFIG_KEY: text}
        ),
    )
    assert restarter.sync().outcome == "no-deployment"  # the extender may live in the default scheduler
    apps.create_namespaced_deployment(namespace, deployment(namespace))

    stamp = Stamp.of("main", "c" * 40, "Ada", "ada@example.com")  # the policy commit that caused it
    restarter.stamp = stamp.annotations()
    result = restarter.sync()
    assert result.outcome == "restarted" and result.config_hash == config_hash(text)
    assert annotations(apps, namespace) == {
        "team": "platform",
        SCHEDULER_CONFIG_HASH_ANNOTATION: config_hash(text),
    }
    live = apps.read_namespaced_deployment("kgwe-scheduler", namespace)
    assert stamp.annotations().items() <= live.metadata.annotations.items()
    (ours,) = [m for m in live.metadata.managed_fields if m.manager == "kgwe-controller"]
    assert ours.operation == "Apply"
    assert ours.fields_v1 == {
        "f:metadata": {"f:annotations": {f"f:{key}": {} for key in stamp.annotations()}},
        "f:spec": {
            "f:template": {"f:metadata": {"f:annotations": {f"f:{SCHEDULER_CONFIG_HASH_ANNOTATION}": {}}}}
        },
    }
    generation = live.metadata.generation
    assert restarter.sync().outcome == "unchanged" and restarter.writes == 1
    assert apps.read_namespaced_deployment("kgwe-scheduler", namespace).metadata.generation == generation

    for bad, reason in (
        ("{broken", "is not valid YAML"),
        (
            text.replace("kgwe-scheduler", "default-scheduler"),
            "no profile with schedulerName 'kgwe-scheduler'",
        ),
    ):
        core.patch_namespaced_config_map(
            SCHEDULER_CONFIGMAP, namespace, {"data": {SCHEDULER_CONFIG_KEY: bad}}
        )
        result = restarter.sync()
        assert result.outcome == "invalid" and reason in result.message
        assert "keeps its running configuration" in result.message
        assert annotations(apps, namespace)[SCHEDULER_CONFIG_HASH_ANNOTATION] == config_hash(text)

    core.delete_namespaced_config_map(SCHEDULER_CONFIGMAP, namespace)
    result = restarter.sync()
    assert result.outcome == "invalid" and "is missing" in result.message
    assert annotations(apps, namespace)[SCHEDULER_CONFIG_HASH_ANNOTATION] == config_hash(text)
