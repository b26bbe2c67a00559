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


def test_another_namespace_is_refused_with_the_reason():
    err = _fails("--namespace", "gpu-stuff")
    assert "install with --namespace kgwe-system" in err and '"gpu-stuff"' in err


def test_seed_values_render_every_component_and_the_crds_kept_on_uninstall():
    objs = _objects(template(*SEED))
    by = {(d["kind"], d["metadata"]["name"]): d for d in objs}
    for kind, name in [
        ("Deployment", "kgwe-controller"),
        ("Deployment", "kgwe-extender"),
        ("Deployment", "kgwe-scheduler"),
        ("DaemonSet", "kgwe-agent"),
        ("CustomResourceDefinition", "policyrepositories.kgwe.nvidia.io"),
        ("CustomResourceDefinition", "gpuworkloads.kgwe.nvidia.io"),
    ]:
        assert (kind, name) in by, f"{kind}/{name} missing from the seed install"
    crd = by[("CustomResourceDefinition", "policyrepositories.kgwe.nvidia.io")]
    assert crd["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    assert ("Namespace", "kgwe-system") not in by  # --create-namespace makes it; the release must not own it
    agent = by[("DaemonSet", "kgwe-agent")]["spec"]["template"]["spec"]
    assert agent["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    scheduler = by[("Deployment", "kgwe-scheduler")]["spec"]["template"]["spec"]["containers"][0]
    assert scheduler["image"].startswith("registry.k8s.io/kube-scheduler:v1.")


def test_values_switch_and_size_components():
    out = template(
        "--set", "crds.install=false",
        "--set", "agent.enabled=false",
        "--set", "extender.replicas=3",
        "--set", "migController.priorityClassName=gpu-critical",
        "--set", "migController.costs.databaseSecret.name=kgwe-cost-db",
        "--set", "migController.costs.enabled=true",
        "--set-json", 'extender.tolerations=[{"key":"infra","operator":"Exists","effect":"NoSchedule"}]',
        "--set", "image.tag=9.9.9",
    )  # fmt: skip
    objs = _objects(out)
    kinds = {d["kind"] for d in objs}
    assert "CustomResourceDefinition" not in kinds and "DaemonSet" not in kinds
    by = {(d["kind"], d["metadata"]["name"]): d for d in objs}
    ext = by[("Deployment", "kgwe-extender")]["spec"]
    assert ext["replicas"] == 3
    assert ext["template"]["spec"]["tolerations"] == [
        {"key": "infra", "operator": "Exists", "effect": "NoSchedule"}
    ]
    ctl = by[("Deployment", "kgwe-controller")]["spec"]["template"]["spec"]
    assert ctl["priorityClassName"] == "gpu-critical"
    env = {e["name"]: e for e in ctl["containers"][0]["env"]}
    assert env["KGWE_COST_DB"]["valueFrom"]["secretKeyRef"] == {"name": "kgwe-cost-db", "key": "url"}
    assert ctl["containers"][0]["image"] == "ghcr.io/kgwe/kgwe:9.9.9"
    no_keep = _objects(
        template("--set", "crds.keep=false", "--show-only", "templates/crds/gpuworkloads.kgwe.nvidia.io.yaml")
    )
    assert "annotations" not in no_keep[0]["metadata"]


def test_webhook_certificates_from_cert_manager_or_an_existing_secret():
    by_cm = {
        (d["kind"], d["metadata"]["name"]): d
        for d in _objects(template("--set", "webhook.tls.certManager.enabled=true"))
    }
    cert = by_cm[("Certificate", "kgwe-webhook")]["spec"]
    assert cert["secretName"] == "kgwe-webhook-tls" and "kgwe-webhook.kgwe-system.svc" in cert["dnsNames"]
    hook = by_cm[("MutatingWebhookConfiguration", "kgwe-scheduling")]
    assert hook["metadata"]["annotations"]["cert-manager.io/inject-ca-from"] == "kgwe-system/kgwe-webhook"
    own = {
        (d["kind"], d["metadata"]["name"]): d
        for d in _objects(
            template("--set", "webhook.tls.secretName=mine", "--set", "webhook.tls.caBundle=Q0E=")
        )
    }
    assert not any(kind == "Certificate" for kind, _ in own)
    hook = own[("MutatingWebhookConfiguration", "kgwe-scheduling")]
    assert hook["webhooks"][0]["clientConfig"]["caBundle"] == "Q0E=" and "annotations" not in hook["metadata"]
    volumes = own[("Deployment", "kgwe-webhook")]["spec"]["template"]["spec"]["volumes"]
    assert volumes == [{"name": "tls", "secret": {"secretName": "mine"}}]


def _args(container: dict) -> list[str]:
    return container.get("args") or container.get("command") or []


def test_extender_mutual_tls_by_default_and_plain_http_when_off():
    by = {(d["kind"], d["metadata"]["name"]): d for d in _objects(template())}
    ext = by[("Deployment", "kgwe-extender")]["spec"]["template"]["spec"]
    assert {"--listen=0.0.0.0:8443", "--client-ca-file=/etc/kgwe/tls/ca.crt"} <= set(
        _args(ext["containers"][0])
    )
    assert ext["volumes"] == [
        {"name": "tls", "secret": {"secretName": "kgwe-extender-tls", "defaultMode": 0o440}}
    ]
    ctl = _args(by[("Deployment", "kgwe-controller")]["spec"]["template"]["spec"]["containers"][0])
    assert "--extender-url=https://kgwe-extender.kgwe-system.svc:8443" in ctl
    assert "--extender-client-cert-dir=/etc/kgwe/extender-client" in ctl
    policy = by[("NetworkPolicy", "kgwe-extender")]["spec"]["ingress"][0]
    scheduler = by[("Deployment", "kgwe-scheduler")]["spec"]["template"]["metadata"]["labels"]
    assert policy["from"][0]["podSelector"]["matchLabels"] == scheduler  # the scheduler's pods, really
    plain = {
        (d["kind"], d["metadata"]["name"]): d
        for d in _objects(template("--set", "extender.tls.enabled=false"))
    }
    ext = plain[("Deployment", "kgwe-extender")]["spec"]["template"]["spec"]
    assert "--listen=0.0.0.0:8080" in _args(ext["containers"][0]) and "volumes" not in ext
    assert not any(a.startswith("--tls") for a in _args(ext["containers"][0]))
    ctl = _args(plain[("Deployment", "kgwe-controller")]["spec"]["template"]["spec"]["containers"][0])
    assert "--extender-url=http://kgwe-extender.kgwe-system.svc:8080" in ctl
    assert not any(a.startswith("--extender-client-cert-dir") for a in ctl)
    issued = _objects(template("--set", "extender.tls.certManager.enabled=true"))
    certs = {d["metadata"]["name"]: d["spec"] for d in issued if d["kind"] == "Certificate"}
    assert certs["kgwe-extender"]["secretName"] == "kgwe-extender-tls"
    assert certs["kgwe-scheduler-extender-client"]["usages"] == ["client auth"]
    assert certs["kgwe-extender"]["issuerRef"] == certs["kgwe-scheduler-extender-client"]["issuerRef"]


def test_optional_policy_repository_is_created_after_the_crds():
    out = template(
        "--set", "policyRepository.create=true",
        "--set", "policyRepository.spec.url=https://git.example.com/platform/gpu-policy.git",
        "--set", "policyRepository.spec.path=clusters/prod",
    )  # fmt: skip
    # a hook: `helm template` prints hooks too, but helm install creates them after the CRDs
    repo = next(d for d in _objects(out) if d["kind"] == "PolicyRepository")
    assert repo["metadata"]["annotations"]["helm.sh/hook"] == "post-install,post-upgrade"
    assert repo["spec"]["url"].startswith("https://") and repo["spec"]["path"] == "clusters/prod"


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
