"""The routing decision of kgwe.admission.decision as a MutatingAdmissionPolicy
(admissionregistration.k8s.io/v1, GA in Kubernetes 1.36): the API server itself sets
`spec.schedulerName: kgwe-scheduler` on the GPU pods of opted-in namespaces, with no server, no certificate
and nothing that can be down. Pure.

The CEL expressions are built here from the same names the webhook's decision uses (the GPU resources of
kgwe.vocab.is_gpu_resource, the scheduler names, the namespace label), and tests hold the two to the same
cases on a real API server. `make schemas` writes the result into the chart (files/admission/routing.yaml),
which renders it on clusters that serve the kind.

Failure: the policy fails closed (failurePolicy Fail): a pod whose routing the API server cannot evaluate
is refused with the API server's message, never let through to another scheduler unnoticed. Its expressions
guard every optional field, so that takes an API server fault, not a pod. (The webhook fails closed too, but
it is a server that can be down: then every GPU pod it routes is refused.)
"""

from __future__ import annotations

from typing import Any

from kgwe.vocab import (
    DEFAULT_SCHEDULER_NAME,
    GPU_RESOURCE,
    MIG_RESOURCE_PREFIX,
    SCHEDULER_NAME,
    SCHEDULING_ENABLED,
    SCHEDULING_NAMESPACE_LABEL,
    SHARED_GPU_RESOURCE,
    WEBHOOK_CONFIGURATION,
)

POLICY_API_VERSION = "admissionregistration.k8s.io/v1"
POLICY_NAME = WEBHOOK_CONFIGURATION  # kgwe-scheduling: the one name of "the thing that routes GPU pods"
FAILURE_POLICY = "Fail"


def _quoted(text: str) -> str:
    """A CEL string literal (the names are KGWE's own constants: letters, digits, '.', '-', '/')."""
    if not all(c.isalnum() or c in "./-_" for c in text):
        raise ValueError(f"not a plain name for a CEL literal: {text!r}")
    return f'"{text}"'


def gpu_resource_expression(name: str) -> str:
    """CEL true when the resource `name` is one is_gpu_resource() counts: whole, shared or MIG."""
    whole, shared, mig = _quoted(GPU_RESOURCE), _quoted(SHARED_GPU_RESOURCE), _quoted(MIG_RESOURCE_PREFIX)
    return f"{name} == {whole} || {name} == {shared} || {name}.startsWith({mig})"


def _asks(part: str) -> str:
    return (
        f"has(c.resources) && has(c.resources.{part}) && "
        f"c.resources.{part}.exists(r, {gpu_resource_expression('r')})"
    )


def routing_policy(scheduler_name: str = SCHEDULER_NAME) -> dict[str, Any]:
    """The MutatingAdmissionPolicy and its binding's spec, as {"policy": spec, "binding": spec}."""
    scheduler = _quoted(scheduler_name)
    containers = (
        "(has(object.spec.containers) ? object.spec.containers : []) + "
        "(has(object.spec.initContainers) ? object.spec.initContainers : [])"
    )
    named = 'has(object.spec.schedulerName) ? object.spec.schedulerName : ""'
    policy = {
        "failurePolicy": FAILURE_POLICY,
        "reinvocationPolicy": "Never",
        "matchConstraints": {
            "resourceRules": [
                {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]}
            ]
        },
        "variables": [
            {"name": "named", "expression": named},
            {
                "name": "gpu",
                "expression": f"({containers}).exists(c, ({_asks('requests')}) || ({_asks('limits')}))",
            },
        ],
        # a pod naming another scheduler is never changed: someone chose it
        "matchConditions": [
            {
                "name": "names-no-other-scheduler",
                "expression": f"!has(object.spec.schedulerName) || object.spec.schedulerName in "
                f'["", {_quoted(DEFAULT_SCHEDULER_NAME)}, {scheduler}]',
            }
        ],
        "mutations": [
            {
                "patchType": "JSONPatch",
                "jsonPatch": {
                    "expression": f"variables.gpu && variables.named != {scheduler} ? "
                    f'[JSONPatch{{op: "add", path: "/spec/schedulerName", value: {scheduler}}}] : []'
                },
            }
        ],
    }
    opted_in = {"matchLabels": {SCHEDULING_NAMESPACE_LABEL: SCHEDULING_ENABLED}}
    binding = {"policyName": POLICY_NAME, "matchResources": {"namespaceSelector": opted_in}}
    return {"policy": policy, "binding": binding}


def routing_objects(scheduler_name: str = SCHEDULER_NAME) -> list[dict[str, Any]]:
    """The policy and its binding as objects to apply (what the chart renders, labels aside)."""
    specs = routing_policy(scheduler_name)
    return [
        {
            "apiVersion": POLICY_API_VERSION,
            "kind": "MutatingAdmissionPolicy",
            "metadata": {"name": POLICY_NAME},
            "spec": specs["policy"],
        },
        {
            "apiVersion": POLICY_API_VERSION,
            "kind": "MutatingAdmissionPolicyBinding",
            "metadata": {"name": POLICY_NAME},
            "spec": specs["binding"],
        },
    ]
