"""Namespaces KGWE never writes into for a tenant: the cluster's own (`kube-*`) and KGWE's. No ResourceQuota
goes there (a budget could cap the control plane or KGWE itself; checked when a repository is validated,
with file:line, and again when quotas are rendered), and no GPUWorkload runs there."""

from __future__ import annotations

from kgwe.vocab import KGWE_NAMESPACE

_SYSTEM_PREFIXES = ("kube-",)


def protected_namespace(namespace: str, kgwe_namespace: str = KGWE_NAMESPACE) -> str | None:
    """Whose `namespace` is when it is protected ("belongs to Kubernetes itself", "is KGWE's own"); None
    when it is a tenant's."""
    if namespace.startswith(_SYSTEM_PREFIXES):
        return f'namespace "{namespace}" belongs to Kubernetes itself'
    if namespace in (kgwe_namespace, KGWE_NAMESPACE):
        return f'namespace "{namespace}" is KGWE\'s own'
    return None


def refused_quota_namespace(namespace: str, kgwe_namespace: str = KGWE_NAMESPACE) -> str | None:
    """Why no ResourceQuota may be written to `namespace`; None when it may."""
    protected = protected_namespace(namespace, kgwe_namespace)
    return f"{protected}; KGWE writes no quota there" if protected else None
