"""deploy/'s KGWE scheduler and webhook agree with the names the code uses (no cluster needed)."""

from __future__ import annotations

import yaml

from kgwe.admission.server import MUTATE_PATH
from kgwe.cluster.names import (
    SCHEDULER_CONFIG_KEY,
    SCHEDULER_CONFIGMAP,
    SCHEDULER_DEPLOYMENT,
    SCHEDULER_NAME,
    SCHEDULING_ENABLED,
    SCHEDULING_NAMESPACE_LABEL,
)
from kgwe.localcluster.controlplane import pinned_kubernetes_version
from kgwe.resources import deploy_dir
from tests.harness.kgwe_scheduler import IN_CLUSTER_CLIENT_DIR, rendered_config_text


def docs() -> list[dict]:
    kustomization = yaml.safe_load((deploy_dir() / "kustomization.yaml").read_text())
    return [
        d
        for rel in kustomization["resources"]
        for d in yaml.safe_load_all((deploy_dir() / rel).read_text())
        if d
    ]


def find(kind: str, name: str) -> dict:
    return next(d for d in docs() if d["kind"] == kind and d["metadata"]["name"] == name)


def test_the_scheduler_deployment_runs_the_rendered_config_from_its_configmap():
    pod = find("Deployment", SCHEDULER_DEPLOYMENT)["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["image"] == f"registry.k8s.io/kube-scheduler:{pinned_kubernetes_version()}"
    volumes = {v["name"]: v for v in pod["volumes"]}
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    assert volumes["config"]["configMap"]["name"] == SCHEDULER_CONFIGMAP
    assert f"--config={mounts['config']}/{SCHEDULER_CONFIG_KEY}" in container["command"]
    assert volumes["extender-client"]["secret"] == {
        "secretName": "kgwe-scheduler-extender-client",
        "optional": True,
    }
    assert mounts["extender-client"] == IN_CLUSTER_CLIENT_DIR
    for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
        assert container[probe]["httpGet"] == {"path": "/healthz", "port": "https", "scheme": "HTTPS"}
    assert {"name": "https", "containerPort": 10259} in container["ports"]
    assert "--secure-port=10259" in container["command"]


def test_the_scheduler_rbac_covers_its_own_lease_as_rendered():
    election = yaml.safe_load(rendered_config_text("http://x"))["leaderElection"]
    role = find("Role", "kgwe-scheduler-lease")
    assert role["metadata"]["namespace"] == election["resourceNamespace"]
    assert role["rules"][0]["resourceNames"] == [election["resourceName"]] == [SCHEDULER_NAME]
    bound = {
        d["roleRef"]["name"]
        for d in docs()
        if d["kind"] in ("ClusterRoleBinding", "RoleBinding")
        and {"kind": "ServiceAccount", "name": "kgwe-scheduler", "namespace": "kgwe-system"} in d["subjects"]
    }
    assert bound == {
        "system:kube-scheduler",
        "system:volume-scheduler",
        "kgwe-scheduler-lease",
        "extension-apiserver-authentication-reader",
    }


def test_the_webhook_configuration_never_blocks_and_selects_opted_in_namespaces():
    (hook,) = find("MutatingWebhookConfiguration", "kgwe-scheduling")["webhooks"]
    assert hook["failurePolicy"] == "Ignore" and hook["sideEffects"] == "None"
    assert hook["timeoutSeconds"] <= 5 and hook["admissionReviewVersions"] == ["v1"]
    assert hook["namespaceSelector"] == {"matchLabels": {SCHEDULING_NAMESPACE_LABEL: SCHEDULING_ENABLED}}
    assert hook["rules"] == [
        {
            "apiGroups": [""],
            "apiVersions": ["v1"],
            "operations": ["CREATE"],
            "resources": ["pods"],
            "scope": "Namespaced",
        }
    ]
    service = hook["clientConfig"]["service"]
    assert service["path"] == MUTATE_PATH
    svc = find("Service", service["name"])
    assert svc["metadata"]["namespace"] == service["namespace"]
    assert any(p["port"] == service["port"] for p in svc["spec"]["ports"])
    pod = find("Deployment", "kgwe-webhook")["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    mount = container["volumeMounts"][0]["mountPath"]
    assert f"--tls-cert-file={mount}/tls.crt" in container["args"]
    assert pod["volumes"][0]["secret"]["secretName"] == "kgwe-webhook-tls"
