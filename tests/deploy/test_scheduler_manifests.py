"""deploy/'s KGWE scheduler and webhook agree with the names the code uses (no cluster needed)."""

from __future__ import annotations

import yaml

from kgwe.admission.server import MUTATE_PATH
from kgwe.localcluster.controlplane import pinned_kubernetes_version
from kgwe.render.render import DEFAULT_EXTENDER_URL
from kgwe.resources import deploy_dir
from kgwe.vocab import (
    DEFAULT_SCHEDULER_NAME,
    EXTENDER_PORT,
    GPU_RESOURCE,
    MIG_RESOURCE_PREFIX,
    SCHEDULER_CONFIG_KEY,
    SCHEDULER_CONFIGMAP,
    SCHEDULER_DEPLOYMENT,
    SCHEDULER_NAME,
    SCHEDULING_ENABLED,
    SCHEDULING_NAMESPACE_LABEL,
    SHARED_GPU_RESOURCE,
    WEBHOOK_CONFIGURATION,
    WEBHOOK_SERVICE,
    WEBHOOK_TLS_SECRET,
)
from tests.harness.kgwe_scheduler import rendered_config_text


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


def test_the_scheduler_pod_runs_the_policy_config_or_kgwes_default_and_its_extender_on_loopback():
    pod = find("Deployment", SCHEDULER_DEPLOYMENT)["spec"]["template"]["spec"]
    (init,) = pod["initContainers"]
    scheduler, extender = pod["containers"]
    assert scheduler["image"] == f"registry.k8s.io/kube-scheduler:{pinned_kubernetes_version()}"
    volumes = {v["name"]: v for v in pod["volumes"]}
    init_mounts = {m["name"]: m["mountPath"] for m in init["volumeMounts"]}
    mounts = {m["name"]: m["mountPath"] for m in scheduler["volumeMounts"]}
    assert volumes["policy-config"]["configMap"] == {"name": SCHEDULER_CONFIGMAP, "optional": True}
    assert f"--policy-config={init_mounts['policy-config']}/{SCHEDULER_CONFIG_KEY}" in init["args"]
    assert "emptyDir" in volumes["config"] and init_mounts["config"] == mounts["config"]
    written = next(a.split("=", 1)[1] for a in init["args"] if a.startswith("--out="))
    assert f"--config={written}" in scheduler["command"] and written.startswith(mounts["config"] + "/")
    # the URL the init container and the controller render is where the extender container listens
    controller = find("Deployment", "kgwe-controller")["spec"]["template"]["spec"]["containers"][0]
    assert f"--extender-url={DEFAULT_EXTENDER_URL}" in init["args"]
    assert f"--extender-url={DEFAULT_EXTENDER_URL}" in controller["args"]
    assert f"--listen=127.0.0.1:{EXTENDER_PORT}" in extender["args"]
    assert f"http://127.0.0.1:{EXTENDER_PORT}" == DEFAULT_EXTENDER_URL
    for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
        assert scheduler[probe]["httpGet"] == {"path": "/healthz", "port": "https", "scheme": "HTTPS"}
    assert {"name": "https", "containerPort": 10259} in scheduler["ports"]
    assert "--secure-port=10259" in scheduler["command"]


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
        "kgwe-extender",  # what its extender container watches (Role and ClusterRole)
        "system:auth-delegator",  # its extender's /metrics reviews the caller's token
    }


def test_the_webhook_configuration_fails_closed_for_gpu_pods_of_opted_in_namespaces_only():
    (hook,) = find("MutatingWebhookConfiguration", "kgwe-scheduling")["webhooks"]
    assert hook["failurePolicy"] == "Fail" and hook["sideEffects"] == "None"
    conditions = " ".join(c["expression"] for c in hook["matchConditions"])
    for word in (GPU_RESOURCE, SHARED_GPU_RESOURCE, MIG_RESOURCE_PREFIX, DEFAULT_SCHEDULER_NAME):
        assert f"'{word}'" in conditions  # the names kgwe.admission.decision routes by
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
    assert service["path"] == MUTATE_PATH and service["name"] == WEBHOOK_SERVICE
    assert (
        find("MutatingWebhookConfiguration", WEBHOOK_CONFIGURATION)["metadata"]["name"]
        == WEBHOOK_CONFIGURATION
    )
    svc = find("Service", service["name"])
    assert svc["metadata"]["namespace"] == service["namespace"]
    assert any(p["port"] == service["port"] for p in svc["spec"]["ports"])
    pod = find("Deployment", "kgwe-webhook")["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    mount = container["volumeMounts"][0]["mountPath"]
    assert f"--tls-cert-file={mount}/tls.crt" in container["args"]
    assert pod["volumes"][0]["secret"] == {"secretName": WEBHOOK_TLS_SECRET, "optional": True}
