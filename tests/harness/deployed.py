"""deploy/ as tests apply it, and waiting for the cluster to catch up.

`deploy_docs` is what `kubectl kustomize deploy/` prints (the dev extras install kubectl beside the
interpreter; else the one on PATH; else the base's plain `resources`, all the base uses); `apply_docs`
server-side applies them as a platform team would.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Callable, Iterable
from pathlib import Path

import yaml
from kubernetes import client, dynamic

from kgwe.resources import deploy_dir
from tests.harness.waiting import wait_for


def deploy_docs(root: Path | None = None) -> list[dict]:
    root = root or deploy_dir()
    kubectl = shutil.which("kubectl", path=str(Path(sys.executable).parent)) or shutil.which("kubectl")
    if kubectl:
        out = subprocess.run(
            [kubectl, "kustomize", str(root)], check=True, capture_output=True, text=True, timeout=120
        ).stdout
        return [d for d in yaml.safe_load_all(out) if d]
    kustomization = yaml.safe_load((root / "kustomization.yaml").read_text())
    return [
        d for rel in kustomization["resources"] for d in yaml.safe_load_all((root / rel).read_text()) if d
    ]


def apply_docs(api: client.ApiClient, docs: Iterable[dict], field_manager: str = "platform-team") -> None:
    dyn = dynamic.DynamicClient(api)
    for doc in docs:
        resource = dyn.resources.get(api_version=doc["apiVersion"], kind=doc["kind"])
        dyn.server_side_apply(
            resource,
            body=doc,
            namespace=doc["metadata"].get("namespace"),
            field_manager=field_manager,
            force_conflicts=True,
        )


def eventually(check: Callable[[], object], what: str, timeout: float = 30.0) -> object:
    """The first truthy result of `check`; exceptions count as not yet (the API may not have caught up)."""
    return wait_for(what, check, timeout, retry_on=(Exception,))
