"""What the chart's Helm hooks do (`kgwe hook`, docs/install.md "Uninstall"), also runnable by hand around
`kubectl delete -k deploy/`:

- `policy_repository`: create or update the chart's PolicyRepository in place (server-side apply). A Helm
  hook resource is deleted and created again on every upgrade, and deleting a PolicyRepository releases
  what KGWE wrote; a hook Job that applies it never deletes it.
- `release`: before uninstall, while the controller still runs: delete the namespace's PolicyRepositories
  and wait until the controller has released each (its finalizer gone, as its spec.deletionPolicy says).
  A GPU a pod holds keeps its node's labels until it is free, so this may not finish in time: it then says
  what is held; KGWE keeps releasing, and the uninstall can be run again.
- `leftovers`: after uninstall, once KGWE's pods are gone: what the agent wrote on nodes (the fields its
  field manager owns: labels, annotations, the GPUHealthy condition, and its taint) and the GPUWorkload
  controller's RoleBindings (kgwe-workloads) in opted-in namespaces.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from kgwe.cluster.client import list_items
from kgwe.errors import KgweError
from kgwe.runtime.conditions import READY, find, of
from kgwe.runtime.errors import is_not_found
from kgwe.vocab import (
    AGENT_FIELD_MANAGER,
    ANNOTATION_PREFIX,
    API_GROUP,
    CHART_FIELD_MANAGER,
    COMPONENT_SELECTOR,
    CONTROLLER_DEPLOYMENT,
    CRD_VERSION,
    GPU_HEALTH_CONDITION,
    GPU_UNHEALTHY_TAINT,
    MANAGED_BY_LABEL,
    MANAGED_BY_VALUE,
    POLICY_REPOSITORY_FINALIZER,
    POLICY_REPOSITORY_PLURAL,
    WORKLOAD_ROLEBINDING,
)

POLL_SECONDS = 2.0
Say = Callable[[str], None]


def policy_repository(api: client.ApiClient, manifest: Mapping[str, Any]) -> str:
    """Server-side apply the chart's PolicyRepository (its spec only; status stays the controller's)."""
    meta = manifest.get("metadata") or {}
    if manifest.get("kind") != "PolicyRepository" or not meta.get("name") or not meta.get("namespace"):
        raise KgweError("the manifest is not a PolicyRepository with metadata.name and metadata.namespace")
    client.CustomObjectsApi(api).patch_namespaced_custom_object(
        API_GROUP,
        CRD_VERSION,
        meta["namespace"],
        POLICY_REPOSITORY_PLURAL,
        meta["name"],
        dict(manifest),
        field_manager=CHART_FIELD_MANAGER,
        force=True,
        _content_type="application/apply-patch+yaml",
    )
    return f"PolicyRepository {meta['namespace']}/{meta['name']} applied"


def release(api: client.ApiClient, namespace: str, wait_seconds: float, say: Say) -> list[str]:
    """Delete the namespace's PolicyRepositories and wait for KGWE to release them; those still held after
    `wait_seconds`, each with what its status says keeps it ([] when every one is gone)."""
    custom = client.CustomObjectsApi(api)
    where = (API_GROUP, CRD_VERSION, namespace, POLICY_REPOSITORY_PLURAL)
    repos = _repositories(custom, where)
    held = [r for r in repos if POLICY_REPOSITORY_FINALIZER in (r["metadata"].get("finalizers") or [])]
    if held and not _controller_ready(api, namespace):
        names = ", ".join(r["metadata"]["name"] for r in held)
        raise KgweError(
            f"the KGWE controller (Deployment {namespace}/{CONTROLLER_DEPLOYMENT}) has no ready replica, so "
            f"nothing can release {names}: start it, or to leave what KGWE wrote in place remove the "
            f"finalizer: kubectl -n {namespace} patch policyrepository NAME --type merge "
            '-p \'{"metadata":{"finalizers":null}}\''
        )
    for repo in repos:
        if not repo["metadata"].get("deletionTimestamp"):
            say(f"deleting PolicyRepository {namespace}/{repo['metadata']['name']}")
            try:
                custom.delete_namespaced_custom_object(*where, repo["metadata"]["name"])
            except ApiException as exc:
                if not is_not_found(exc):
                    raise
    deadline = time.monotonic() + wait_seconds
    last: list[str] = []
    while True:
        left = [f"{r['metadata']['name']}: {_ready_message(r)}" for r in _repositories(custom, where)]
        if left != last and left:
            say("still releasing: " + "; ".join(left))
        last = left
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(POLL_SECONDS)


@dataclass
class Leftovers:
    nodes: dict[str, list[str]] = field(default_factory=dict)  # node -> what was removed from it
    role_bindings: list[str] = field(default_factory=list)  # namespace/name deleted


def leftovers(api: client.ApiClient, namespaces: tuple[str, ...], wait_seconds: float, say: Say) -> Leftovers:
    """Once no KGWE pod runs in `namespaces` (KGWE's and the agent's), remove what the agent wrote on nodes
    and the GPUWorkload controller's RoleBindings."""
    core = client.CoreV1Api(api)
    deadline = time.monotonic() + wait_seconds
    while running := [
        f"{ns}/{p['metadata']['name']}"
        for ns in namespaces
        for p in list_items(core.list_namespaced_pod, namespace=ns, label_selector=COMPONENT_SELECTOR)
        if p["metadata"].get("labels", {}).get("app.kubernetes.io/component") in ("agent", "controller")
    ]:
        if time.monotonic() >= deadline:
            raise KgweError(f"KGWE's pods are still running ({', '.join(running[:5])}): nothing removed yet")
        time.sleep(POLL_SECONDS)
    done = Leftovers()
    for node in list_items(core.list_node):
        removed = _agent_marks(core, node)
        if removed:
            done.nodes[node["metadata"]["name"]] = removed
            say(f"node {node['metadata']['name']}: removed {', '.join(removed)}")
    rbac = client.RbacAuthorizationV1Api(api)
    for binding in list_items(
        rbac.list_role_binding_for_all_namespaces,
        field_selector=f"metadata.name={WORKLOAD_ROLEBINDING}",
        label_selector=f"{MANAGED_BY_LABEL}={MANAGED_BY_VALUE}",
    ):
        ns = binding["metadata"]["namespace"]
        try:
            rbac.delete_namespaced_role_binding(WORKLOAD_ROLEBINDING, ns)
        except ApiException as exc:
            if not is_not_found(exc):
                raise
        done.role_bindings.append(f"{ns}/{WORKLOAD_ROLEBINDING}")
        say(f"deleted RoleBinding {ns}/{WORKLOAD_ROLEBINDING}")
    return done


def agent_owned(node: Mapping[str, Any]) -> tuple[list[str], list[str], bool]:
    """(labels, annotations, GPUHealthy condition) of a Node the agent's field manager owns: KGWE's own
    names only, so another writer's field is never taken for the agent's."""
    labels: list[str] = []
    annotations: list[str] = []
    condition = False
    for entry in (node.get("metadata") or {}).get("managedFields") or []:
        if entry.get("manager") != AGENT_FIELD_MANAGER:
            continue
        fields = entry.get("fieldsV1") or {}
        meta = fields.get("f:metadata") or {}
        labels += [k[2:] for k in meta.get("f:labels") or {} if k.startswith("f:" + ANNOTATION_PREFIX)]
        annotations += [
            k[2:] for k in meta.get("f:annotations") or {} if k.startswith("f:" + ANNOTATION_PREFIX)
        ]
        conditions = (fields.get("f:status") or {}).get("f:conditions") or {}
        condition = condition or f'k:{{"type":"{GPU_HEALTH_CONDITION}"}}' in conditions
    return sorted(set(labels)), sorted(set(annotations)), condition


def _agent_marks(core: client.CoreV1Api, node: Mapping[str, Any]) -> list[str]:
    name = node["metadata"]["name"]
    labels, annotations, condition = agent_owned(node)
    meta = node["metadata"]
    labels = [k for k in labels if k in (meta.get("labels") or {})]
    annotations = [k for k in annotations if k in (meta.get("annotations") or {})]
    taints = (node.get("spec") or {}).get("taints") or []
    kept = [t for t in taints if t.get("key") != GPU_UNHEALTHY_TAINT]
    removed = [f"label {k}" for k in labels] + [f"annotation {k}" for k in annotations]
    body: dict[str, Any] = {}
    if labels or annotations:
        body["metadata"] = {"labels": dict.fromkeys(labels), "annotations": dict.fromkeys(annotations)}
    if len(kept) != len(taints):
        body["spec"] = {"taints": kept}  # taints have no merge key: the whole list, others' kept
        removed.append(f"taint {GPU_UNHEALTHY_TAINT}")
    if body:
        core.patch_node(name, body)
    if condition and find(of(node), GPU_HEALTH_CONDITION) is not None:
        patch = {"status": {"conditions": [{"type": GPU_HEALTH_CONDITION, "$patch": "delete"}]}}
        core.patch_node_status(name, patch)
        removed.append(f"condition {GPU_HEALTH_CONDITION}")
    return removed


def _repositories(custom: client.CustomObjectsApi, where: tuple[str, str, str, str]) -> list[dict[str, Any]]:
    try:
        items: list[dict[str, Any]] = custom.list_namespaced_custom_object(*where).get("items", [])
    except ApiException as exc:
        if is_not_found(exc):  # the CRD is not installed: there is nothing to release
            return []
        raise
    return items


def _controller_ready(api: client.ApiClient, namespace: str) -> bool:
    try:
        deployment = client.AppsV1Api(api).read_namespaced_deployment(CONTROLLER_DEPLOYMENT, namespace)
    except ApiException as exc:
        if is_not_found(exc):
            return False
        raise
    return bool((deployment.status and deployment.status.ready_replicas) or 0)


def _ready_message(repo: Mapping[str, Any]) -> str:
    ready = find(of(repo), READY)
    if ready is None:
        return "not reconciled yet"
    return str(ready.get("message") or ready.get("reason") or "")
