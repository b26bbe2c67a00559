"""Where KGWE may write ResourceQuotas: only namespaces a GPUBudget claims, and never the cluster's own
(`kube-*`) nor KGWE's namespace — a budget there could cap the control plane or KGWE itself. Checked when
a repository is validated (with file:line) and again when quotas are rendered."""

from __future__ import annotations

KGWE_NAMESPACE = "kgwe-system"
_SYSTEM_PREFIXES = ("kube-",)


def refused_quota_namespace(namespace: str, kgwe_namespace: str = KGWE_NAMESPACE) -> str | None:
    """Why no ResourceQuota may be written to `namespace`; None when it may."""
    if namespace.startswith(_SYSTEM_PREFIXES):
        return f'namespace "{namespace}" belongs to Kubernetes itself; KGWE writes no quota there'
    if namespace in (kgwe_namespace, KGWE_NAMESPACE):
        return f'namespace "{namespace}" is KGWE\'s own; KGWE writes no quota there'
    return None
