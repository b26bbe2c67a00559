"""The Helm chart deploy/helm/kgwe with the real helm CLI (built from helm.sh/helm/v3): lint, the strict
values schema, the namespace guard, CRD switches, and deploy/ being exactly the chart's rendering."""

from __future__ import annotations

import json
import tarfile
import time

import pytest
import yaml

from kgwe.errors import KgweError
from kgwe.resources import deploy_dir
from tests.harness import chart
from tests.harness.chart import CHART_DIR, helm, template

pytestmark = pytest.mark.usefixtures("chart")  # every test runs helm

SEED = ("--set", "scheduler.enabled=true", "--set", "migController.enabled=true")


def _objects(stream: str) -> list[dict]:
    return [d for d in yaml.safe_load_all(stream) if d]


def _kinds(stream: str) -> set[tuple[str, str]]:
    return {(d["kind"], d["metadata"]["name"]) for d in _objects(stream)}


def _fails(*args: str) -> str:
    proc = helm("template", "kgwe", str(CHART_DIR), *args, check=False)
    assert proc.returncode != 0, f"helm template {' '.join(args)} should fail"
    return proc.stderr


def test_helm_lint_strict_with_default_values_and_every_ci_values_file():
    ci_files = sorted((CHART_DIR / "ci").glob("*-values.yaml"))
    assert ci_files, "ci/*-values.yaml: one values file per supported shape"
    for extra in [[]] + [["--values", str(f)] for f in ci_files]:
        proc = helm("lint", "--strict", "--namespace", "kgwe-system", str(CHART_DIR), *extra, check=False)
        assert proc.returncode == 0, f"helm lint --strict {extra}: {proc.stdout}{proc.stderr}"


def test_schema_rejects_a_misspelled_key_and_a_wrong_type_with_a_clear_message():
    err = _fails("--namespace", "kgwe-system", "--set", "schedular.enabled=true")
    assert "values don't meet the specifications of the schema" in err
    assert "schedular" in err and "additional properties" in err.lower()
    err = _fails(
        "--namespace", "kgwe-system", "--set", "scheduler.enabled=true", "--set", "scheduler.replica=3"
    )
    assert "replica" in err
    err = _fails("--namespace", "kgwe-system", "--set", "migController.replicas=two")
    assert "replicas" in err and "integer" in err
    err = _fails("--namespace", "kgwe-system", "--set", "policyRepository.create=true")
    assert "url" in err  # a PolicyRepository needs its Git URL


def test_global_values_are_accepted():
    """A parent chart's `global` reaches every subchart; the schema must not refuse it."""
    assert "kind: Deployment" in template("--set", "global.imageRegistry=registry.example.com")


def _by(stream: str) -> dict[tuple[str, str], dict]:
    return {(d["kind"], d["metadata"]["name"]): d for d in _objects(stream)}


def _args(container: dict) -> list[str]:
    return container.get("args") or container.get("command") or []


def _controller_args(by: dict) -> list[str]:
    return _args(by[("Deployment", "kgwe-controller")]["spec"]["template"]["spec"]["containers"][0])


def _pods(objs: list[dict]) -> dict[str, dict]:
    """Every pod template (and bare pod) of the rendering, by kind/name."""
    out = {}
    for d in objs:
        if d["kind"] in ("Deployment", "DaemonSet"):
            out[f"{d['kind']}/{d['metadata']['name']}"] = d["spec"]["template"]
        elif d["kind"] == "Pod":
            out[f"Pod/{d['metadata']['name']}"] = d
    return out


def test_the_release_namespace_is_used_everywhere():
    stream = template("--namespace", "gpu-stuff", "--set", "extender.mode=standalone")
    assert "kgwe-system" not in stream
    elsewhere = {
        ("DaemonSet", "kgwe-agent"): "gpu-operator",  # beside the GPU Operator's privileged pods
        ("ServiceAccount", "kgwe-agent"): "gpu-operator",
        ("Role", "kgwe-controller-mig-config"): "gpu-operator",
        ("RoleBinding", "kgwe-controller-mig-config"): "gpu-operator",
        ("Role", "kgwe-agent-events"): "default",
        ("RoleBinding", "kgwe-agent-events"): "default",
        ("RoleBinding", "kgwe-scheduler-extension-apiserver-authentication-reader"): "kube-system",
    }
    for d in _objects(stream):
        ns = d["metadata"].get("namespace")
        if ns is not None:
            assert ns == elsewhere.get((d["kind"], d["metadata"]["name"]), "gpu-stuff"), d["metadata"]
        for subject in d.get("subjects") or []:
            want = "gpu-operator" if subject["name"] == "kgwe-agent" else "gpu-stuff"
            assert subject["namespace"] == want, (d["kind"], d["metadata"]["name"])
    by = _by(stream)
    hook = by[("MutatingWebhookConfiguration", "kgwe-scheduling")]["webhooks"][0]
    assert hook["clientConfig"]["service"]["namespace"] == "gpu-stuff"
    assert "--extender-url=https://kgwe-extender.gpu-stuff.svc:8443" in _controller_args(by)
    policy = by[("ValidatingAdmissionPolicy", "kgwe-agent-own-node")]["spec"]["matchConditions"][0]
    assert "system:serviceaccount:gpu-operator:kgwe-agent" in policy["expression"]


def test_every_object_carries_the_standard_labels_and_selectors_only_the_stable_ones():
    objs = _objects(template(*SEED, "--set", "monitoring.serviceMonitor.enabled=true"))
    for d in objs:
        if d["kind"] == "CustomResourceDefinition":
            continue  # verbatim from `kgwe schema`
        labels = d["metadata"]["labels"]
        assert labels["app.kubernetes.io/name"] == "kgwe" and labels["app.kubernetes.io/instance"] == "kgwe"
        assert labels["app.kubernetes.io/managed-by"] == "Helm"
        assert labels["app.kubernetes.io/version"] == "0.1.0" and labels["helm.sh/chart"] == "kgwe-0.1.0"
        assert labels["app.kubernetes.io/component"]
        selector = (d.get("spec") or {}).get("selector")
        if d["kind"] in ("Deployment", "DaemonSet", "PodDisruptionBudget", "ServiceMonitor"):
            selector = selector["matchLabels"]
        if selector:
            assert set(selector) == {
                "app.kubernetes.io/name",
                "app.kubernetes.io/instance",
                "app.kubernetes.io/component",
            }, (d["kind"], d["metadata"]["name"])


def test_the_scheduler_pod_carries_the_extender_and_starts_from_kgwes_own_configuration():
    by = _by(template(*SEED))
    assert ("Deployment", "kgwe-extender") not in by  # the default: a container of each scheduler pod
    pod = by[("Deployment", "kgwe-scheduler")]["spec"]["template"]["spec"]
    (init,) = pod["initContainers"]
    assert init["image"] == "ghcr.io/kgwe/kgwe:0.1.0" and init["args"][0] == "scheduler-config"
    assert "--extender-url=http://127.0.0.1:8888" in init["args"]
    scheduler, extender = pod["containers"]
    assert scheduler["image"] == "registry.k8s.io/kube-scheduler:v1.37.2"  # the cluster's version
    assert "--listen=127.0.0.1:8888" in extender["args"] and "--in-cluster" in extender["args"]
    assert extender["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "probes"}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["policy-config"]["configMap"] == {"name": "kgwe-scheduler-config", "optional": True}
    assert "extender-client" not in volumes  # no TLS on the loopback
    assert "--extender-url=http://127.0.0.1:8888" in _controller_args(by)  # what it renders into policy
    binding = by[("ClusterRoleBinding", "kgwe-extender")]
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "kgwe-scheduler", "namespace": "kgwe-system"}
    ]
    service = by[("Service", "kgwe-extender")]["spec"]  # probes and metrics: the API stays on the loopback
    assert [p["name"] for p in service["ports"]] == ["probes", "metrics"]
    assert service["selector"]["app.kubernetes.io/component"] == "scheduler"


def test_the_kube_scheduler_image_follows_the_cluster_unless_set():
    def image(*args: str) -> str:
        pod = _by(template(*SEED, *args))[("Deployment", "kgwe-scheduler")]
        return pod["spec"]["template"]["spec"]["containers"][0]["image"]

    assert image("--kube-version", "v1.31.4") == "registry.k8s.io/kube-scheduler:v1.31.4"
    assert image("--kube-version", "1.30.4-eks-a737599") == "registry.k8s.io/kube-scheduler:v1.30.4"
    assert image("--set", "scheduler.image.tag=v1.36.9") == "registry.k8s.io/kube-scheduler:v1.36.9"


def test_pull_secrets_annotations_extra_args_and_security_contexts_reach_every_pod():
    stream = template("-f", str(CHART_DIR / "ci" / "full-values.yaml"))
    pods = _pods(_objects(stream))
    assert set(pods) >= {
        "Deployment/kgwe-controller", "Deployment/kgwe-scheduler", "Deployment/kgwe-webhook",
        "DaemonSet/kgwe-agent", "Pod/kgwe-install-test",
    }  # fmt: skip
    for name, pod in pods.items():
        spec = pod["spec"]
        assert spec["imagePullSecrets"] == [{"name": "registry-example"}], name
        if name != "Pod/kgwe-install-test":
            assert pod["metadata"]["annotations"]["example.com/owner"] == "platform", name
        if name != "DaemonSet/kgwe-agent":
            assert "securityContext" not in spec, name  # podSecurityContext: {} (OpenShift)
            for c in spec["containers"] + spec.get("initContainers", []):
                assert c["securityContext"] == {
                    "allowPrivilegeEscalation": False,
                    "capabilities": {"drop": ["ALL"]},
                    "privileged": False,
                    "readOnlyRootFilesystem": True,
                }, name
    by = _by(stream)
    sched = by[("Deployment", "kgwe-scheduler")]["spec"]["template"]
    assert sched["metadata"]["annotations"] == {
        "example.com/owner": "platform",
        "example.com/scrape": "false",
    }
    scheduler, extender = sched["spec"]["containers"]
    assert scheduler["command"][-1] == "--v=2" and extender["args"][-1] == "--log-level=DEBUG"
    agent = by[("DaemonSet", "kgwe-agent")]
    assert agent["metadata"]["namespace"] == "nvidia-gpu-operator"
    assert agent["spec"]["template"]["spec"]["runtimeClassName"] == "nvidia-cdi"
    assert _args(agent["spec"]["template"]["spec"]["containers"][0])[-1] == "--recover-after-periods=5"
    assert by[("Role", "kgwe-controller-mig-config")]["metadata"]["namespace"] == "nvidia-gpu-operator"
    assert "--mig-namespace=nvidia-gpu-operator" in _controller_args(by)
    controller = by[("Deployment", "kgwe-controller")]["spec"]["template"]["spec"]
    assert "--git-ca-file=/etc/kgwe/git-ca/ca.crt" in _controller_args(by)  # a private Git server's CA
    assert "--allow-git-network=169.254.10.0/24" in _controller_args(by)  # a Git server on a special address
    assert "--audit-interval=60" in _controller_args(by)
    assert {"name": "git-ca", "mountPath": "/etc/kgwe/git-ca", "readOnly": True} in controller["containers"][
        0
    ]["volumeMounts"]
    assert {
        "name": "git-ca",
        "secret": {"secretName": "corp-git-ca", "items": [{"key": "ca.crt", "path": "ca.crt"}]},
    } in controller["volumes"]


def test_default_security_contexts_fit_pod_security_restricted_and_the_agent_runs_as_root_without_caps():
    for name, pod in _pods(_objects(template(*SEED))).items():
        spec = pod["spec"]
        if name == "DaemonSet/kgwe-agent":
            assert spec["securityContext"] == {
                "runAsUser": 0,
                "runAsNonRoot": False,
                "seccompProfile": {"type": "RuntimeDefault"},
            }
            assert spec["runtimeClassName"] == "nvidia"
            (c,) = spec["containers"]
            assert c["securityContext"]["capabilities"] == {"drop": ["ALL"]}
            assert c["securityContext"]["readOnlyRootFilesystem"] is True
            assert spec["volumes"][0]["hostPath"]["path"] == "/var/lib/kubelet/pod-resources"
            continue
        assert spec["securityContext"]["runAsNonRoot"] is True and spec["securityContext"]["seccompProfile"]
        for c in spec["containers"] + spec.get("initContainers", []):
            sc = c["securityContext"]
            assert sc["allowPrivilegeEscalation"] is False and sc["capabilities"] == {"drop": ["ALL"]}, name
        assert not any("hostPath" in v for v in spec.get("volumes", [])), name


def test_certificates_come_from_the_controller_by_default_and_from_cert_manager_when_asked():
    by = _by(template(*SEED))
    assert "--certificates=webhook,metrics" in _controller_args(by)
    hook = by[("MutatingWebhookConfiguration", "kgwe-scheduling")]
    assert "caBundle" not in hook["webhooks"][0]["clientConfig"] and "annotations" not in hook["metadata"]
    webhook = by[("Deployment", "kgwe-webhook")]["spec"]["template"]["spec"]
    assert webhook["volumes"] == [
        {"name": "tls", "secret": {"secretName": "kgwe-webhook-tls", "optional": True}}
    ]
    assert webhook["containers"][0]["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "probes"}
    role = by[("Role", "kgwe-controller")]["rules"]
    assert {
        "apiGroups": [""], "resources": ["secrets"],
        "resourceNames": ["kgwe-ca", "kgwe-webhook-tls", "kgwe-metrics-tls"], "verbs": ["patch"],
    } in role  # fmt: skip
    assert {
        "apiGroups": ["admissionregistration.k8s.io"], "resources": ["mutatingwebhookconfigurations"],
        "resourceNames": ["kgwe-scheduling"], "verbs": ["get", "patch"],
    } in by[("ClusterRole", "kgwe-controller")]["rules"]  # fmt: skip
    assert not any(kind == "Certificate" for kind, _ in by)

    cm = _by(template(*SEED, "--set", "certManager.enabled=true"))
    assert not any(a.startswith("--certificates") for a in _controller_args(cm))
    cert = cm[("Certificate", "kgwe-webhook")]["spec"]
    assert cert["secretName"] == "kgwe-webhook-tls" and "kgwe-webhook.kgwe-system.svc" in cert["dnsNames"]
    hook = cm[("MutatingWebhookConfiguration", "kgwe-scheduling")]
    assert hook["metadata"]["annotations"]["cert-manager.io/inject-ca-from"] == "kgwe-system/kgwe-webhook"
    rules = cm[("ClusterRole", "kgwe-controller")]["rules"]
    assert not any(r["resources"] == ["mutatingwebhookconfigurations"] for r in rules)


MAP = "admissionregistration.k8s.io/v1/MutatingAdmissionPolicy"


def test_gpu_pods_are_routed_by_the_policy_where_the_cluster_serves_it_else_by_the_webhook():
    """webhook.routeWith Auto: the MutatingAdmissionPolicy when Helm sees the cluster serve it (here told
    with --api-versions, as discovery tells `helm install`), the webhook server otherwise (`helm template`
    alone, clusters before 1.36). The policy is kgwe.admission.policy's, with no webhook server, Service,
    certificate, or the controller's right to patch a webhook configuration."""
    from kgwe.admission.policy import routing_objects

    offline = _by(template(*SEED))
    assert ("Deployment", "kgwe-webhook") in offline and (
        "MutatingAdmissionPolicy",
        "kgwe-scheduling",
    ) not in offline
    for served in (
        template(*SEED, "--api-versions", MAP),
        template(*SEED, "--set", "webhook.routeWith=Policy"),
    ):
        by = _by(served)
        for want in routing_objects():
            got = by[(want["kind"], want["metadata"]["name"])]
            assert got["spec"] == want["spec"] and got["apiVersion"] == want["apiVersion"]
        assert not [key for key in by if key[1] == "kgwe-webhook" or key[0] == "MutatingWebhookConfiguration"]
        kept = [
            a.split("=", 1)[1].split(",") for a in _controller_args(by) if a.startswith("--certificates=")
        ]
        assert kept and not [c for c in kept[0] if c == "webhook"]  # metrics' and the extender's stay
        rules = by[("ClusterRole", "kgwe-controller")]["rules"]
        assert not any(r["resources"] == ["mutatingwebhookconfigurations"] for r in rules)
    forced = _by(template(*SEED, "--api-versions", MAP, "--set", "webhook.routeWith=Webhook"))
    assert ("MutatingWebhookConfiguration", "kgwe-scheduling") in forced
    assert ("MutatingAdmissionPolicy", "kgwe-scheduling") not in forced
    off = _by(template(*SEED, "--api-versions", MAP, "--set", "webhook.enabled=false"))
    assert not [key for key in off if key[1] == "kgwe-scheduling"]


def test_values_that_cannot_work_together_fail_with_what_to_set():
    err = _fails("--namespace", "kgwe-system", "--set", "migController.enabled=false")
    assert "the webhook's certificate comes from the KGWE controller or cert-manager" in err
    err = _fails(
        "--namespace", "kgwe-system", "--set", "migController.enabled=false",
        "--set", "webhook.enabled=false", "--set", "extender.mode=standalone",
    )  # fmt: skip
    assert "extender.standalone.tls.enabled=false" in err
    err = _fails("--namespace", "kgwe-system", "--set", "extender.mode=sidecars")
    assert "mode" in err and "sidecar" in err


def test_the_standalone_extender_serves_mutual_tls_with_certificates_from_the_controller():
    by = _by(template("--set", "extender.mode=standalone"))
    ext = by[("Deployment", "kgwe-extender")]["spec"]["template"]["spec"]
    assert {"--listen=0.0.0.0:8443", "--client-ca-file=/etc/kgwe/tls/ca.crt"} <= set(
        _args(ext["containers"][0])
    )
    assert ext["volumes"] == [
        {"name": "metrics-tls", "secret": {"secretName": "kgwe-metrics-tls", "optional": True}},
        {
            "name": "tls",
            "secret": {"secretName": "kgwe-extender-tls", "defaultMode": 0o440, "optional": True},
        },
    ]
    ctl = _controller_args(by)
    assert "--extender-url=https://kgwe-extender.kgwe-system.svc:8443" in ctl
    assert "--extender-client-cert-dir=/etc/kgwe/extender-client" in ctl
    assert "--certificates=webhook,extender,metrics" in ctl
    sched = by[("Deployment", "kgwe-scheduler")]["spec"]["template"]["spec"]
    assert [c["name"] for c in sched["containers"]] == ["kube-scheduler"]
    assert "--extender-client-cert-dir=/etc/kgwe/extender-client" in sched["initContainers"][0]["args"]
    volumes = {v["name"]: v for v in sched["volumes"]}
    assert volumes["extender-client"]["secret"] == {
        "secretName": "kgwe-scheduler-extender-client",
        "optional": True,
    }
    policy = by[("NetworkPolicy", "kgwe-extender")]["spec"]["ingress"][0]
    scheduler_labels = by[("Deployment", "kgwe-scheduler")]["spec"]["selector"]["matchLabels"]
    assert policy["from"][0]["podSelector"]["matchLabels"] == scheduler_labels  # the scheduler's pods, really
    assert by[("ClusterRoleBinding", "kgwe-extender")]["subjects"][0]["name"] == "kgwe-extender"
    role = by[("Role", "kgwe-controller")]["rules"]
    names = next(
        r["resourceNames"] for r in role if r.get("resources") == ["secrets"] and "resourceNames" in r
    )
    assert names == [
        "kgwe-ca",
        "kgwe-webhook-tls",
        "kgwe-extender-tls",
        "kgwe-scheduler-extender-client",
        "kgwe-metrics-tls",
    ]
    plain = _by(
        template("--set", "extender.mode=standalone", "--set", "extender.standalone.tls.enabled=false")
    )
    ext = plain[("Deployment", "kgwe-extender")]["spec"]["template"]["spec"]
    assert "--listen=0.0.0.0:8080" in _args(ext["containers"][0])
    assert [v["name"] for v in ext["volumes"]] == ["metrics-tls"]
    ctl = _controller_args(plain)
    assert (
        "--extender-url=http://kgwe-extender.kgwe-system.svc:8080" in ctl
        and "--certificates=webhook,metrics" in ctl
    )
    issued = _objects(template("--set", "extender.mode=standalone", "--set", "certManager.enabled=true"))
    certs = {d["metadata"]["name"]: d["spec"] for d in issued if d["kind"] == "Certificate"}
    assert certs["kgwe-extender"]["secretName"] == "kgwe-extender-tls"
    assert certs["kgwe-scheduler-extender-client"]["usages"] == ["client auth"]
    assert certs["kgwe-extender"]["issuerRef"] == certs["kgwe-scheduler-extender-client"]["issuerRef"]


def test_the_helm_test_hook_checks_each_part_through_its_service():
    (pod,) = [d for d in _objects(template(*SEED)) if d["kind"] == "Pod"]
    assert pod["metadata"]["annotations"]["helm.sh/hook"] == "test"
    script = pod["spec"]["containers"][0]["args"][0]
    for url in (
        "http://kgwe-controller.kgwe-system.svc:8080/readyz",
        "https://kgwe-webhook.kgwe-system.svc:443/healthz",
        "http://kgwe-extender.kgwe-system.svc:8081/readyz",
    ):
        assert url in script


def test_the_values_readme_lists_every_value_with_its_meaning():
    from tests.harness import chart_values

    listed = chart_values.values(CHART_DIR / "values.yaml")
    schema = json.loads((CHART_DIR / "values.schema.json").read_text())
    assert chart_values.undocumented(listed) == [], "values.yaml: comment every value"
    assert chart_values.not_in_schema(listed, schema) == [], "values.schema.json must know every value"
    assert chart_values.uncovered(listed, schema) == [], "values.yaml must show every value of the schema"
    assert (CHART_DIR / "README.md").read_text() == chart_values.readme(CHART_DIR), (
        "deploy/helm/kgwe/README.md is stale: run `make deploy`"
    )


def test_optional_policy_repository_is_applied_after_the_crds_and_updated_in_place():
    out = template(
        "--set", "policyRepository.create=true",
        "--set", "policyRepository.spec.url=https://git.example.com/platform/gpu-policy.git",
        "--set", "policyRepository.spec.path=clusters/prod",
        "--set", "policyRepository.spec.deletionPolicy=Retain",
    )  # fmt: skip
    # a hook Job applies it after the CRDs: a hook resource would be deleted and created again on every
    # upgrade, and deleting a PolicyRepository releases what KGWE wrote
    objects = _objects(out)
    assert not [d for d in objects if d["kind"] == "PolicyRepository"]
    job = next(d for d in objects if d["kind"] == "Job" and d["metadata"]["name"] == "kgwe-policy-repository")
    assert job["metadata"]["annotations"]["helm.sh/hook"] == "post-install,post-upgrade"
    args = job["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[:3] == ["hook", "policy-repository", "--manifest"]
    repo = json.loads(args[3])
    assert (repo["kind"], repo["metadata"]["name"], repo["metadata"]["namespace"]) == (
        "PolicyRepository", "gpu-policy", "kgwe-system",
    )  # fmt: skip
    assert repo["spec"]["url"].startswith("https://") and repo["spec"]["path"] == "clusters/prod"
    assert repo["spec"]["deletionPolicy"] == "Retain"
    sa = next(d for d in objects if d["kind"] == "ServiceAccount" and d["metadata"]["name"] == "kgwe-hooks")
    assert sa["metadata"]["annotations"]["helm.sh/hook"] == "post-install,post-upgrade,pre-delete,post-delete"


def test_uninstall_hooks_release_first_then_remove_leftovers_and_stay_out_of_deploy():
    objects = _objects(template(*SEED))
    jobs = {d["metadata"]["name"]: d for d in objects if d["kind"] == "Job"}
    assert set(jobs) == {"kgwe-pre-delete", "kgwe-post-delete"}
    pre, post = jobs["kgwe-pre-delete"], jobs["kgwe-post-delete"]
    assert pre["metadata"]["annotations"]["helm.sh/hook"] == "pre-delete"
    assert pre["spec"]["template"]["spec"]["containers"][0]["args"] == [
        "hook", "pre-delete", "--wait-seconds", "240",
    ]  # fmt: skip
    assert post["spec"]["template"]["spec"]["containers"][0]["args"] == [
        "hook", "post-delete", "--agent-namespace", "gpu-operator",
    ]  # fmt: skip
    assert all(j["spec"]["template"]["spec"]["serviceAccountName"] == "kgwe-hooks" for j in jobs.values())
    role = next(d for d in objects if d["kind"] == "ClusterRole" and d["metadata"]["name"] == "kgwe-hooks")
    assert {"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["rolebindings"],
            "resourceNames": ["kgwe-workloads"], "verbs": ["delete"]} in role["rules"]  # fmt: skip
    off = _objects(template(*SEED, "--set", "uninstall.release=false"))
    assert not [d for d in off if d["kind"] == "Job" or d["metadata"]["name"] == "kgwe-hooks"]
    # with namespace.create the namespace goes with the release: no post-delete Job could run in it
    with_ns = _objects(template(*SEED, "--set", "namespace.create=true"))
    assert {d["metadata"]["name"] for d in with_ns if d["kind"] == "Job"} == {"kgwe-pre-delete"}
    # the kustomize base has no hooks: `kgwe hook ...` is run by hand there
    assert not (deploy_dir() / "hooks").exists()


def test_every_replicated_part_has_a_disruption_budget_and_a_single_replica_none():
    objects = _objects(template(*SEED, "--set", "extender.mode=standalone"))
    budgets = {d["metadata"]["name"]: d["spec"] for d in objects if d["kind"] == "PodDisruptionBudget"}
    assert set(budgets) == {"kgwe-controller", "kgwe-scheduler", "kgwe-webhook", "kgwe-extender"}
    for name, spec in budgets.items():
        assert spec["maxUnavailable"] == 1 and spec["unhealthyPodEvictionPolicy"] == "AlwaysAllow"
        assert spec["selector"]["matchLabels"]["app.kubernetes.io/component"] == name.removeprefix("kgwe-")
    single = _objects(template(*SEED, "--set", "migController.replicas=1", "--set", "webhook.replicas=1"))
    names = {d["metadata"]["name"] for d in single if d["kind"] == "PodDisruptionBudget"}
    assert names == {"kgwe-scheduler"}, "a budget on one replica would block every drain of its node"
    off = _objects(template(*SEED, "--set", "scheduler.podDisruptionBudget.enabled=false"))
    assert "kgwe-scheduler" not in {d["metadata"]["name"] for d in off if d["kind"] == "PodDisruptionBudget"}


def test_policy_repository_values_cover_the_crd_spec_exactly():
    """values.schema.json lists the PolicyRepository spec fields itself (strict); they must be the CRD's."""
    schema = json.loads((CHART_DIR / "values.schema.json").read_text())
    crd = yaml.safe_load(
        (CHART_DIR / "files" / "crds" / "policyrepositories.kgwe.nvidia.io.yaml").read_text()
    )
    crd_spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    values_spec = schema["properties"]["policyRepository"]["properties"]["spec"]

    def fields(node: dict, path: str = "") -> set[str]:
        out = set()
        for key, sub in (node.get("properties") or {}).items():
            out.add(f"{path}{key}")
            out |= fields(sub, f"{path}{key}.")
        return out

    assert fields(values_spec) == fields(crd_spec)


def test_deploy_is_the_chart_rendered_with_default_values():
    """deploy/ cannot drift from the chart: each rendered file is checked in byte for byte, nothing else."""
    t0 = time.monotonic()
    stream = template(*[a for p in chart.DEPLOY_SET for a in ("--set", p)])
    template_seconds = time.monotonic() - t0
    files = chart.deploy_files(stream)
    root = deploy_dir()
    stale = [
        rel for rel, text in files.items() if not (root / rel).is_file() or (root / rel).read_text() != text
    ]
    extra = sorted(set(chart.rendered_paths(root)) - set(files))
    assert not stale and not extra, (
        f"deploy/ differs from the chart (stale: {stale}, not rendered: {extra}): "
        "edit deploy/helm/kgwe and run `make deploy`"
    )
    print(
        json.dumps(
            {"helm_template_seconds": round(template_seconds, 3), "chart_objects": len(_objects(stream))}
        )
    )


def test_render_deploy_reports_helm_errors_without_a_traceback(tmp_path):
    broken = tmp_path / "kgwe"
    broken.mkdir()
    (broken / "Chart.yaml").write_text("apiVersion: v2\nname: kgwe\nversion: 0.1.0\n")
    (broken / "templates").mkdir()
    (broken / "templates" / "x.yaml").write_text("{{ .Values.nope.deeper }}\n")
    with pytest.raises(KgweError, match=r"nil pointer|nope"):
        template(chart=broken)


def test_packaged_chart_renders_the_same_as_the_folder(tmp_path):
    """`helm package` keeps everything the templates read (files/crds/ included), drops ci/."""
    helm("package", str(CHART_DIR), "--destination", str(tmp_path))
    (packaged,) = tmp_path.glob("kgwe-*.tgz")
    assert template(*SEED, chart=packaged) == template(*SEED)
    with tarfile.open(packaged) as tar:
        listing = tar.getnames()
    assert "kgwe/files/crds/policyrepositories.kgwe.nvidia.io.yaml" in listing
    assert not any("/ci/" in name for name in listing)
