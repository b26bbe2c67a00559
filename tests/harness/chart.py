"""The Helm chart deploy/helm/kgwe is the single source of KGWE's install manifests; deploy/ is its rendering.

`render_deploy(out)` runs the real helm CLI (`helm template` with the chart's default values plus the
Namespace object a kustomize base needs) and writes each template's output to the same relative path under
`out` (templates/controller/deployment.yaml -> deploy/controller/deployment.yaml), plus a kustomization.yaml
listing them, and the chart's README of values (tests.harness.chart_values). `make deploy` writes deploy/
this way; a test renders again and fails on any difference. The rendering is for the Kubernetes version the
local cluster runs (`--kube-version`: kube-scheduler's image tag follows it).

    python -m tests.harness.chart [--out deploy]
"""

from __future__ import annotations

import argparse
import functools
import os
import re
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from kgwe.errors import KgweError
from kgwe.localcluster.controlplane import pinned_kubernetes_version
from kgwe.localcluster.gotools import tool_dir
from kgwe.resources import deploy_dir
from tests.harness.chart_values import readme

CHART_DIR = deploy_dir() / "helm" / "kgwe"
RELEASE = "kgwe"
NAMESPACE = "kgwe-system"
# What the kustomize base adds to the chart's defaults: Helm creates the namespace (--create-namespace).
DEPLOY_SET = ("namespace.create=true",)
# Optional kustomize overlays beside the base: folder -> (extra --set values, templates it holds).
OVERLAYS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "monitoring": (
        (
            "monitoring.serviceMonitor.enabled=true",
            "monitoring.prometheusRule.enabled=true",
            "monitoring.dashboards.enabled=true",
        ),
        ("monitoring/servicemonitor.yaml", "monitoring/prometheusrule.yaml", "monitoring/dashboards.yaml"),
    ),
}
# Templates that are not part of an install: `helm test`'s pod, and the Helm hooks (Jobs around install,
# upgrade and uninstall: with kustomize, `kgwe hook ...` is run by hand, docs/install.md "Uninstall").
TEST_TEMPLATES = ("tests/", "hooks/")
# Folders of deploy/ that are not the rendering: the chart itself and the GitOps examples.
NOT_RENDERED = ("helm", "examples")
_SOURCE = re.compile(r"^# Source: [^/\n]+/templates/(?P<path>\S+)\n", re.MULTILINE)


@functools.cache
def helm_binary() -> Path:
    """The helm CLI built from hack/helm (helm.sh/helm/v3), once per process."""
    return tool_dir("helm") / "helm"


def helm(
    *args: str, check: bool = True, timeout_seconds: float = 900, env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run helm (extra environment: KUBECONFIG, HELM_*_HOME); with check, a failure raises KgweError."""
    proc = subprocess.run(
        [str(helm_binary()), *args],
        capture_output=True,
        text=True,
        timeout=timeout_seconds,
        check=False,
        env={**os.environ, **(env or {})},
    )
    if check and proc.returncode != 0:
        raise KgweError(f"helm {' '.join(args)}: exit {proc.returncode}: {proc.stderr.strip()}")
    return proc


def template(*extra: str, chart: Path = CHART_DIR) -> str:
    """`helm template` of the chart as release kgwe in kgwe-system for the local cluster's Kubernetes version
    (unless `extra` names another); the manifests as one YAML stream."""
    version = [] if "--kube-version" in extra else ["--kube-version", pinned_kubernetes_version()]
    return helm("template", RELEASE, str(chart), "--namespace", NAMESPACE, *version, *extra).stdout


def split_by_template(stream: str) -> dict[str, str]:
    """Documents of a `helm template` stream grouped by the template that produced them (path -> YAML)."""
    files: dict[str, list[str]] = {}
    for doc in stream.split("\n---\n"):
        match = _SOURCE.search(doc)
        if match is None:
            continue
        body = (doc[: match.start()] + doc[match.end() :]).strip("\n")
        body = body.removeprefix("---\n")
        if body.strip():
            files.setdefault(match.group("path"), []).append(body + "\n")
    return {path: "---\n".join(docs) for path, docs in files.items()}


def deploy_files(stream: str | None = None) -> dict[str, str]:
    """deploy/'s files (relative path -> text) rendered from the chart: the base (from `stream` when given)
    with its kustomization.yaml, and the optional overlays."""
    by_template = split_by_template(stream if stream is not None else template(*_sets(DEPLOY_SET)))
    out = {}
    for path, text in by_template.items():
        if path.startswith(TEST_TEMPLATES):
            continue
        header = (
            f"# Rendered from deploy/helm/kgwe/templates/{path} with the chart's default values\n"
            "# by `make deploy`;"
            " edit the chart, not this file.\n"
        )
        out[path] = header + text
    resources = sorted(out, key=lambda p: (not p.startswith("crds/"), p != "controller/namespace.yaml", p))
    out["kustomization.yaml"] = _kustomization(
        "KGWE's kustomize base: `kubectl apply -k deploy/` (or point Argo CD / Flux at this folder).",
        resources,
    )
    for folder, (sets, templates) in OVERLAYS.items():
        only = [a for t in templates for a in ("--show-only", f"templates/{t}")]
        names = []
        for path, text in split_by_template(template(*_sets((*DEPLOY_SET, *sets)), *only)).items():
            names.append(path.rsplit("/", 1)[-1])
            out[f"{folder}/{names[-1]}"] = (
                f"# Rendered from deploy/helm/kgwe/templates/{path} with {', '.join(sets)}\n"
                "# by `make deploy`; edit the chart, not this file.\n" + text
            )
        purpose = f"Optional, applied after the base: `kubectl apply -k deploy/{folder}` ({', '.join(sets)})."
        out[f"{folder}/kustomization.yaml"] = _kustomization(purpose, names)
    return out


def _kustomization(purpose: str, resources: Sequence[str]) -> str:
    return (
        f"# {purpose}\n"
        "# Rendered from the Helm chart deploy/helm/kgwe by `make deploy`; edit the chart, not this file.\n"
        "apiVersion: kustomize.config.k8s.io/v1beta1\n"
        "kind: Kustomization\n"
        "resources:\n" + "".join(f"  - {p}\n" for p in resources)
    )


def rendered_paths(root: Path) -> list[str]:
    """Files under deploy/ that the rendering owns (everything but the chart and the examples)."""
    return sorted(
        str(p.relative_to(root))
        for p in root.rglob("*")
        if p.is_file() and p.relative_to(root).parts[0] not in NOT_RENDERED
    )


CHART_README = CHART_DIR / "README.md"


def render_deploy(out: Path) -> list[str]:
    """Write the rendering into `out`, removing rendered files the chart no longer produces, and the
    chart's README of values."""
    CHART_README.write_text(readme(CHART_DIR), encoding="utf-8")
    files = deploy_files()
    for stale in set(rendered_paths(out)) - set(files) if out.is_dir() else ():
        (out / stale).unlink()
    for rel, text in files.items():
        target = out / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
    for d in sorted((p for p in out.rglob("*") if p.is_dir()), reverse=True):
        if d.relative_to(out).parts[0] not in NOT_RENDERED and not any(d.iterdir()):
            d.rmdir()
    return sorted(files)


def _sets(pairs: Sequence[str]) -> list[str]:
    return [arg for pair in pairs for arg in ("--set", pair)]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Render deploy/ from the Helm chart deploy/helm/kgwe.")
    parser.add_argument("--out", type=Path, default=deploy_dir(), help="where to write (default: deploy/)")
    args = parser.parse_args(argv)
    try:
        written = render_deploy(args.out)
    except KgweError as exc:
        print(f"render-deploy: {exc}", file=sys.stderr)
        return 1
    print(f"render-deploy: {len(written)} files in {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
