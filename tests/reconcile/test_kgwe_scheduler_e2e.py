"""The deployed shape end to end, on the real control plane: deploy/ applied server-side; `kgwe controller`
as a process against sample-repo in Git renders kgwe-scheduler-config and stamps its hash on the
kgwe-scheduler Deployment; the real kube-scheduler runs as the second scheduler with the configuration READ
BACK from that ConfigMap (kwok cannot run the Deployment's pods: rewritten for this machine are only the
kubeconfig — the kgwe-scheduler ServiceAccount, impersonated, so deploy/'s RBAC is what it runs with — and
the extender's URL, to the extender running locally over HTTP); `kgwe webhook` serves locally over TLS,
registered by deploy/'s MutatingWebhookConfiguration with only its clientConfig pointed here.

Checked: the webhook routes a GPU pod of an opted-in namespace, the extender is called, the pod lands on
the NVLink pair; a pod naming another scheduler is left alone; a scoring change in Git restarts the KGWE
scheduler (new hash); a config the cluster refuses keeps the running scheduler and says why in the
PolicyRepository's status; with the webhook stopped, a GPU pod is refused and any other created at once.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import re
import subprocess
import time
from pathlib import Path
from urllib.request import urlopen

import orjson
import pytest
import yaml
from kubernetes import client, dynamic
from kubernetes.client.exceptions import ApiException

from kgwe.cluster.client import ensure_namespace
from kgwe.localcluster.extender_process import start_extender
from kgwe.policy import load_repository
from kgwe.reconcile.status import condition
from kgwe.render.scheduler_config import config_hash
from kgwe.resources import sample_repo_dir
from kgwe.topology import known
from kgwe.vocab import (
    SCHEDULER_CONFIG_HASH_ANNOTATION,
    SCHEDULER_CONFIG_KEY,
    SCHEDULER_CONFIGMAP,
    SCHEDULER_DEPLOYMENT,
    SCHEDULING_ENABLED,
    SCHEDULING_NAMESPACE_LABEL,
)
from tests.harness.deployed import apply_docs, deploy_docs, eventually
from tests.harness.kgwe_scheduler import LocalScheduler, local_config
from tests.harness.processes import LISTENING, start_kgwe, stop

pytestmark = pytest.mark.cluster
wait = functools.partial(eventually, timeout=120)  # a shared, loaded machine
SYSTEM_NS = "kgwe-system"
SCHEDULER_SA = "system:serviceaccount:kgwe-system:kgwe-scheduler"


def impersonating_kubeconfig(admin: Path, user: str, path: Path) -> Path:
    """The admin kubeconfig acting as `user` (a ServiceAccount, with its groups)."""
    config = yaml.safe_load(admin.read_text())
    ns = user.split(":")[2]
    for entry in config["users"]:
        entry["user"]["as"] = user
        entry["user"]["as-groups"] = [
            "system:serviceaccounts",
            f"system:serviceaccounts:{ns}",
            "system:authenticated",
        ]
    path.write_text(yaml.safe_dump(config))
    return path


def gpu_pod(name: str, gpus: int, selector: dict, scheduler: str | None = None) -> dict:
    spec: dict = {
        "nodeSelector": selector,
        "terminationGracePeriodSeconds": 0,
        "tolerations": [{"operator": "Exists"}],
        "containers": [
            {"name": "main", "image": "trainer", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}
        ],
    }
    if scheduler:
        spec["schedulerName"] = scheduler
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "annotations": {"kgwe.nvidia.io/topology-preference": "NVLinkOptimal"}},
        "spec": spec,
    }


def filter_calls(port: int) -> float:
    text = urlopen(f"http://127.0.0.1:{port}/metrics").read().decode()
    return sum(
        float(n) for n in re.findall(r'kgwe_extender_requests_total\{[^}]*verb="filter"[^}]*\} (\S+)', text)
    )


def test_gpu_pod_goes_through_webhook_kgwe_scheduler_and_extender(
    control_plane, k8s_api, kgwe_crds, e2e, gpu_node, tmp_path
) -> None:
    core, apps = client.CoreV1Api(k8s_api), client.AppsV1Api(k8s_api)
    docs = deploy_docs()
    kinds = {(d["kind"], d["metadata"]["name"]) for d in docs}
    assert {
        ("Deployment", SCHEDULER_DEPLOYMENT),
        ("ServiceAccount", "kgwe-scheduler"),
        ("ClusterRoleBinding", "kgwe-scheduler-as-kube-scheduler"),
        ("MutatingWebhookConfiguration", "kgwe-scheduling"),
    } <= kinds
    apply_docs(k8s_api, docs)

    # sample-repo in Git (its budget namespaces exist, as on a real cluster), and the controller as a process
    ps = load_repository(sample_repo_dir())
    for budget in ps.budgets:
        for ns in budget.spec.namespaces:
            ensure_namespace(k8s_api, ns)
    files = {
        f"policy/{p.relative_to(sample_repo_dir())}": p.read_text()
        for p in sorted(sample_repo_dir().rglob("*.yaml"))
    }
    e2e.remote.commit(files, "sample-repo")
    e2e.make_repository(interval="2s")
    procs: list[subprocess.Popen] = []
    scheduler = None
    webhook_config = next(d for d in docs if d["kind"] == "MutatingWebhookConfiguration")
    try:
        controller, _ = start_kgwe(
            [
                "controller",
                "--kubeconfig",
                str(control_plane.kubeconfig_path),
                "--namespace",
                SYSTEM_NS,
                "--listen",
                "127.0.0.1:0",
                "--cache-dir",
                str(tmp_path / "controller"),
                "--no-leader-election",
                "--no-costs",
            ],
            tmp_path / "controller.log",
        )
        procs.append(controller)

        def config_text() -> str:
            return core.read_namespaced_config_map(SCHEDULER_CONFIGMAP, SYSTEM_NS).data[SCHEDULER_CONFIG_KEY]

        def stamped() -> str | None:
            ann = apps.read_namespaced_deployment(
                SCHEDULER_DEPLOYMENT, SYSTEM_NS
            ).spec.template.metadata.annotations
            return (ann or {}).get(SCHEDULER_CONFIG_HASH_ANNOTATION)

        first = wait(lambda: stamped() == config_hash(config_text()) and stamped(), "the hash annotation")
        managers = apps.read_namespaced_deployment(SCHEDULER_DEPLOYMENT, SYSTEM_NS).metadata.managed_fields
        ours = [m for m in managers if m.manager == "kgwe-controller"]
        assert len(ours) == 1 and ours[0].operation == "Apply"
        owned = orjson.dumps(ours[0].fields_v1).decode()
        assert SCHEDULER_CONFIG_HASH_ANNOTATION in owned and '"f:containers"' not in owned  # that field only

        # the extender and the second scheduler, with the configuration read back from the ConfigMap
        tag = {"kgwe-e2e": e2e.pool}
        pairs = gpu_node("A100-PCIE-NVLINK-PAIRS", labels=tag)
        gpu_node("L40S-8-PCIE", labels=tag)
        extender, ext_port = start_extender(control_plane.kubeconfig_path, "--namespace", SYSTEM_NS)
        procs.append(extender)
        text = config_text()
        config = local_config(
            text,
            kubeconfig=impersonating_kubeconfig(
                control_plane.kubeconfig_path, SCHEDULER_SA, tmp_path / "sa.kubeconfig"
            ),
            extender_url=f"http://127.0.0.1:{ext_port}",
        )
        for ext in config["extenders"]:  # the local extender speaks HTTP
            ext["enableHTTPS"] = False
            ext.pop("tlsConfig", None)
        assert config["profiles"] == yaml.safe_load(text)["profiles"] == [{"schedulerName": "kgwe-scheduler"}]
        scheduler = LocalScheduler(control_plane.binaries, tmp_path / "kgwe-scheduler", config).start()
        wait(
            lambda: (
                client.CoordinationV1Api(k8s_api)
                .read_namespaced_lease("kgwe-scheduler", SYSTEM_NS)
                .spec.holder_identity
            ),
            "the KGWE scheduler holds its own Lease",
        )

        # the webhook over TLS, registered through deploy/'s configuration with a local clientConfig
        pki = control_plane.pki
        webhook, hook_port = start_kgwe(
            [
                "webhook",
                "--listen",
                "127.0.0.1:0",
                "--tls-cert-file",
                str(pki.serving_cert),
                "--tls-key-file",
                str(pki.serving_key),
                "--insecure-any-client",  # this API server presents no client certificate to webhooks
            ],
            tmp_path / "webhook.log",
            LISTENING,
        )
        procs.append(webhook)
        local_hook = orjson.loads(orjson.dumps(webhook_config))
        local_hook["webhooks"][0]["clientConfig"] = {
            "url": f"https://127.0.0.1:{hook_port}/mutate-pods",
            "caBundle": base64.b64encode(pki.ca_cert.read_bytes()).decode(),
        }
        admission = client.AdmissionregistrationV1Api(k8s_api)
        admission.delete_mutating_webhook_configuration("kgwe-scheduling")  # other managers may own service:
        admission.create_mutating_webhook_configuration(local_hook)  # a clientConfig holds url XOR service
        ns = e2e.namespace
        core.patch_namespace(ns, {"metadata": {"labels": {SCHEDULING_NAMESPACE_LABEL: SCHEDULING_ENABLED}}})

        # 1. a 2-GPU pod without schedulerName: routed, decided by the extender, on an NVLink pair
        calls = filter_calls(ext_port)

        wait(  # the configuration reaches the apiserver's webhook cache asynchronously; dry run
            lambda: (
                core.create_namespaced_pod(ns, gpu_pod("probe", 2, tag), dry_run="All").spec.scheduler_name
                == "kgwe-scheduler"
            ),
            "the webhook routing a GPU pod",
        )
        core.create_namespaced_pod(ns, gpu_pod("two-gpus", 2, tag))
        assert core.read_namespaced_pod("two-gpus", ns).spec.scheduler_name == "kgwe-scheduler"
        node = wait(lambda: core.read_namespaced_pod("two-gpus", ns).spec.node_name, "pod bound")
        assert node == pairs
        assert filter_calls(ext_port) > calls
        view = orjson.loads(urlopen(f"http://127.0.0.1:{ext_port}/debug/nodes/{pairs}").read())
        used = [i for i, milli in enumerate(view["gpuUsedMilli"]) if milli]
        topo = known.load(gpu_node_topology := "A100-PCIE-PAIRS-ADJACENT")
        assert len(used) == 2 and topo.has_nvlink(*used), (gpu_node_topology, used)

        # 2. a pod that names another scheduler is left alone
        core.create_namespaced_pod(ns, gpu_pod("elsewhere", 1, tag, scheduler="volcano"))
        assert core.read_namespaced_pod("elsewhere", ns).spec.scheduler_name == "volcano"

        # 3. a scoring change in Git: new config, new hash on the Deployment
        scoring = files["policy/scoring/default.yaml"].replace("httpTimeout: 2s", "httpTimeout: 3s")
        assert scoring != files["policy/scoring/default.yaml"]
        e2e.remote.commit({"policy/scoring/default.yaml": scoring}, "extender timeout 3s")
        second = wait(
            lambda: (
                "httpTimeout: 3s" in config_text() and stamped() == config_hash(config_text()) and stamped()
            ),
            "the new configuration's hash on the Deployment",
        )
        assert second != first

        # 4. a configuration the cluster refuses: the scheduler keeps running, the status says why
        policy = {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicy",
            "metadata": {"name": "freeze-kgwe-scheduler-config"},
            "spec": {
                "failurePolicy": "Fail",
                "matchConstraints": {
                    "resourceRules": [
                        {
                            "apiGroups": [""],
                            "apiVersions": ["v1"],
                            "operations": ["CREATE", "UPDATE"],
                            "resources": ["configmaps"],
                        }
                    ]
                },
                "validations": [
                    {
                        "expression": f"object.metadata.name != '{SCHEDULER_CONFIGMAP}'",
                        "message": "scheduler configuration frozen by the platform team",
                    }
                ],
            },
        }
        binding = {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicyBinding",
            "metadata": {"name": "freeze-kgwe-scheduler-config"},
            "spec": {"policyName": "freeze-kgwe-scheduler-config", "validationActions": ["Deny"]},
        }
        apply_docs(k8s_api, [policy, binding])
        core = client.CoreV1Api(k8s_api)

        def enforced() -> bool:  # the API server loads admission policies a moment after they are stored
            probe = client.V1ConfigMap(metadata=client.V1ObjectMeta(name=SCHEDULER_CONFIGMAP))
            try:
                core.create_namespaced_config_map("default", probe, dry_run="All")
            except ApiException as exc:
                return "scheduler configuration frozen" in (exc.body or "")
            return False

        eventually(enforced, "the admission policy enforced")
        e2e.remote.commit(
            {"policy/scoring/default.yaml": scoring.replace("httpTimeout: 3s", "httpTimeout: 4s")}
        )

        def refused() -> str | None:
            ready = condition(e2e.status(), "Ready") or {}
            return (
                ready.get("message")
                if ready.get("status") == "False" and SCHEDULER_CONFIGMAP in ready.get("message", "")
                else None
            )

        message = wait(refused, "the refused configuration in the PolicyRepository status")
        assert "frozen by the platform team" in message
        assert "httpTimeout: 3s" in config_text() and stamped() == second  # the running scheduler stays
        dyn = dynamic.DynamicClient(k8s_api)
        for kind in ("ValidatingAdmissionPolicyBinding", "ValidatingAdmissionPolicy"):
            res = dyn.resources.get(api_version="admissionregistration.k8s.io/v1", kind=kind)
            res.delete(name="freeze-kgwe-scheduler-config")

        # 5. the webhook down: a GPU pod is refused (never created unrouted), any other pod is created at
        # once (the matchConditions send only GPU pods; failurePolicy Fail for them)
        stop(webhook)
        with pytest.raises(ApiException) as refused:
            core.create_namespaced_pod(ns, gpu_pod("while-down", 1, tag))
        assert "scheduling.kgwe.nvidia.io" in (refused.value.body or "")
        core.create_namespaced_pod(ns, gpu_pod("while-down", 1, tag, scheduler="volcano"))
        started = time.monotonic()
        plain = gpu_pod("cpu-only", 1, tag)
        plain["spec"]["containers"][0]["resources"] = {"limits": {"cpu": "100m"}}
        core.create_namespaced_pod(ns, plain)
        created_in = time.monotonic() - started
        assert core.read_namespaced_pod("cpu-only", ns).spec.scheduler_name == "default-scheduler"
        print(f"a pod without GPUs created in {created_in:.2f} s with the webhook down")
    finally:
        if scheduler is not None:
            scheduler.stop()
        for proc in procs:
            stop(proc)
        with contextlib.suppress(ApiException):
            client.AdmissionregistrationV1Api(k8s_api).delete_mutating_webhook_configuration(
                "kgwe-scheduling"
            )
