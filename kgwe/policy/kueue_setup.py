"""What Kueue is configured to manage, and what it would do with the children KGWE makes in a namespace
(pure: Kueue's Configuration text, a namespace's labels and LocalQueues in; decisions and their reasons out).

KGWE's Kueue route (docs/spec/gpuworkload.md, "Kueue"): a batch run goes through Kueue as ONE pod group —
KGWE creates the run's pods itself, labelled kueue.x-k8s.io/pod-group-name (all roles in one
Kueue Workload), so Kueue admits the gang whole and owns the pods' scheduling gate; KGWE writes no field
Kueue also writes. That needs Kueue's `pod` integration, and Kueue managing plain pods in the namespace:
the namespace matches managedJobsNamespaceSelector, and the pods name a LocalQueue (spec.gang.queueName),
or the namespace has the LocalQueue `default`, or Kueue manages pods without a queue name. Where Kueue takes
every Job (manageJobsWithoutQueueName, or a `default` LocalQueue), the Jobs of the other routes would each
become a Kueue Workload of their own, with Kueue toggling their spec.suspend: there every batch workload
takes the Kueue route. Facts: docs/facts/kueue.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import yaml

from kgwe.vocab import (
    KUEUE_CONFIGMAP,
    KUEUE_DEFAULT_LOCAL_QUEUE,
    KUEUE_JOB_FRAMEWORK,
    KUEUE_NAMESPACE,
    KUEUE_POD_FRAMEWORK,
)

NAME_LABEL = "kubernetes.io/metadata.name"  # every namespace carries its name as this label
MAX_CONFIG_BYTES = 256 * 1024  # far above any Configuration; bounds the parse of what a ConfigMap holds
# The frameworks Kueue's own manifests and chart configure (docs/facts/kueue.md): what KGWE assumes when it
# may not read the configuration.
SHIPPED_FRAMEWORKS = frozenset({KUEUE_JOB_FRAMEWORK, KUEUE_POD_FRAMEWORK, "deployment", "statefulset"})


class KueueConfigError(ValueError):
    """Kueue's Configuration cannot be read as Kueue reads it."""


@dataclass(frozen=True)
class KueueSetup:
    """Kueue's Configuration, the parts that decide what it does with KGWE's children."""

    frameworks: frozenset[str]
    manage_without_queue_name: bool = False
    namespace_selector: Mapping[str, Any] | None = None  # a LabelSelector; None: every namespace
    source: str = ""  # where it was read, or what was assumed and why

    def describe(self) -> str:
        return (
            f"integrations.frameworks [{', '.join(sorted(self.frameworks))}], manageJobsWithoutQueueName "
            f"{str(self.manage_without_queue_name).lower()} ({self.source})"
        )


def default_selector(kueue_namespace: str) -> dict[str, Any]:
    """Kueue's default managedJobsNamespaceSelector: every namespace but kube-system and its own."""
    return {
        "matchExpressions": [
            {"key": NAME_LABEL, "operator": "NotIn", "values": ["kube-system", kueue_namespace]}
        ]
    }


def assumed_setup(why: str, kueue_namespace: str = KUEUE_NAMESPACE) -> KueueSetup:
    """What Kueue's shipped configuration says, when KGWE may not read the one installed."""
    return KueueSetup(
        frameworks=SHIPPED_FRAMEWORKS,
        namespace_selector=default_selector(kueue_namespace),
        source=f"assumed as Kueue's manifests ship it: {why}",
    )


def parse_setup(
    text: str, kueue_namespace: str = KUEUE_NAMESPACE, source: str = KUEUE_CONFIGMAP
) -> KueueSetup:
    """Kueue's Configuration (YAML), with Kueue's own defaults for what it leaves out."""
    if len(text.encode()) > MAX_CONFIG_BYTES:
        raise KueueConfigError(f"{source}: more than {MAX_CONFIG_BYTES} bytes")
    try:
        doc = yaml.safe_load(text) or {}
    except yaml.YAMLError as exc:
        raise KueueConfigError(f"{source}: not YAML: {exc}") from None
    if not isinstance(doc, Mapping):
        raise KueueConfigError(f"{source}: not a Configuration (a mapping)")
    namespace = doc.get("namespace") or kueue_namespace
    integrations = doc.get("integrations") or {}
    frameworks = integrations.get("frameworks") if isinstance(integrations, Mapping) else None
    if frameworks is not None and not (
        isinstance(frameworks, list) and all(isinstance(f, str) for f in frameworks)
    ):
        raise KueueConfigError(f"{source}: integrations.frameworks is not a list of names")
    manage = doc.get("manageJobsWithoutQueueName", False)
    if not isinstance(manage, bool):
        raise KueueConfigError(f"{source}: manageJobsWithoutQueueName is not true or false")
    selector = doc.get("managedJobsNamespaceSelector")
    if selector is None:
        selector = default_selector(str(namespace))
    elif not isinstance(selector, Mapping):
        raise KueueConfigError(f"{source}: managedJobsNamespaceSelector is not a label selector")
    return KueueSetup(
        frameworks=frozenset(frameworks or [KUEUE_JOB_FRAMEWORK]),
        manage_without_queue_name=manage,
        namespace_selector=dict(selector),
        source=f"read from {source}",
    )


def selector_matches(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    """A Kubernetes LabelSelector (matchLabels, matchExpressions In/NotIn/Exists/DoesNotExist) against
    labels; an empty selector matches everything, an unknown operator nothing."""
    if selector is None:
        return True
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expression in selector.get("matchExpressions") or []:
        key, operator = expression.get("key"), expression.get("operator")
        values = set(expression.get("values") or [])
        present = key in labels
        if operator == "In":
            ok = present and labels[key] in values
        elif operator == "NotIn":
            ok = not present or labels[key] not in values
        elif operator == "Exists":
            ok = present
        elif operator == "DoesNotExist":
            ok = not present
        else:
            return False
        if not ok:
            return False
    return True


@dataclass(frozen=True)
class KueueNamespace:
    """Kueue, as it would treat KGWE's children in one namespace."""

    namespace: str
    setup: KueueSetup
    labels: Mapping[str, str] = field(default_factory=dict)  # the namespace's labels
    local_queues: frozenset[str] = frozenset()

    @property
    def selected(self) -> bool:
        labels = {NAME_LABEL: self.namespace, **self.labels}
        return selector_matches(self.setup.namespace_selector, labels)

    def takes_every_job(self) -> str | None:
        """Why Kueue would make each Job KGWE creates here a Kueue Workload of its own (suspending it until
        admitted); None when it would leave them alone."""
        if KUEUE_JOB_FRAMEWORK not in self.setup.frameworks or not self.selected:
            return None
        if self.setup.manage_without_queue_name:
            return (
                f'Kueue manages every Job in namespace "{self.namespace}" (manageJobsWithoutQueueName: '
                f"true; {self.setup.source})"
            )
        if KUEUE_DEFAULT_LOCAL_QUEUE in self.local_queues:
            return (
                f'Kueue queues every Job in namespace "{self.namespace}" to its LocalQueue '
                f'"{KUEUE_DEFAULT_LOCAL_QUEUE}"'
            )
        return None

    def pod_group_problem(self, queue_name: str | None) -> str | None:
        """Why Kueue would not admit KGWE's pods here as one pod group; None when it would."""
        if KUEUE_POD_FRAMEWORK not in self.setup.frameworks:
            return (
                "Kueue does not manage plain pods: its integrations.frameworks lacks "
                f'"{KUEUE_POD_FRAMEWORK}" '
                f"({self.setup.describe()})"
            )
        if not self.selected:
            return (
                f'namespace "{self.namespace}" is outside Kueue\'s managedJobsNamespaceSelector '
                f"({self.setup.source})"
            )
        queues = ", ".join(sorted(self.local_queues)) or "none"
        if queue_name:
            if queue_name not in self.local_queues:
                return f'no LocalQueue "{queue_name}" in namespace "{self.namespace}" (have: {queues})'
            return None
        if KUEUE_DEFAULT_LOCAL_QUEUE in self.local_queues:
            return None
        held = (
            "Kueue would hold its pods with no queue to admit them from"
            if self.setup.manage_without_queue_name
            else "Kueue would not queue its pods at all"
        )
        return (
            f'spec.gang.queueName names no LocalQueue and namespace "{self.namespace}" has no LocalQueue '
            f'"{KUEUE_DEFAULT_LOCAL_QUEUE}": {held} (LocalQueues here: {queues})'
        )

    def queue_for(self, queue_name: str | None) -> str | None:
        """The LocalQueue the pods land in (None: Kueue's, for pods without a queue name)."""
        if queue_name:
            return queue_name
        return KUEUE_DEFAULT_LOCAL_QUEUE if KUEUE_DEFAULT_LOCAL_QUEUE in self.local_queues else None
