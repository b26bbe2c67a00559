"""Install KGWE's CustomResourceDefinitions (deploy/crds/) into a cluster and wait until they are served.

The one installer: `kgwe demo`, the tests and the benchmarks call it.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from typing import Any

import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from kgwe.errors import KgweError
from kgwe.resources import deploy_dir
from kgwe.runtime.conditions import is_true
from kgwe.runtime.errors import is_conflict


def repo_crds() -> list[dict[str, Any]]:
    """Every CustomResourceDefinition document under deploy/crds/ (sorted by file name)."""
    crd_dir = deploy_dir() / "crds"
    docs: list[dict[str, Any]] = []
    for path in sorted(crd_dir.glob("*.y*ml")) if crd_dir.is_dir() else []:
        docs += [
            d
            for d in yaml.safe_load_all(path.read_text())
            if isinstance(d, dict) and d.get("kind") == "CustomResourceDefinition"
        ]
    return docs


def install_crds(
    api: client.ApiClient,
    crds: Iterable[Mapping[str, Any]] | None = None,
    timeout_seconds: float = 60.0,
    *,
    update: bool = False,
) -> list[str]:
    """Create CRDs (deploy/crds/ by default) and wait until each is Established; returns their names.
    An existing CRD is kept as it is, or replaced by the given one with `update`."""
    ext = client.ApiextensionsV1Api(api)
    wanted = list(repo_crds() if crds is None else crds)
    for crd in wanted:
        try:
            ext.create_custom_resource_definition(dict(crd))
        except ApiException as exc:
            if not is_conflict(exc):
                raise
            if update:
                name = crd["metadata"]["name"]
                current = ext.read_custom_resource_definition(name)
                body = {
                    **crd,
                    "metadata": {**crd["metadata"], "resourceVersion": current.metadata.resource_version},
                }
                ext.replace_custom_resource_definition(name, body)
    names = [crd["metadata"]["name"] for crd in wanted]
    deadline = time.monotonic() + timeout_seconds
    for name in names:
        while True:
            conditions = ext.read_custom_resource_definition(name).status.conditions or []
            if is_true(conditions, "Established"):
                break
            if time.monotonic() > deadline:
                raise KgweError(f"CRD {name} not Established after {timeout_seconds:.0f}s")
            time.sleep(0.1)
    return names
