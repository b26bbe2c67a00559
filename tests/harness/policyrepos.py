"""PolicyRepositories in tests that are not about offboarding: deleted with KGWE's finalizer taken off, so
no controller needs to release what the test's reconciles wrote (tests/reconcile/test_release_e2e.py is
where the way out itself is tested)."""

from __future__ import annotations

import contextlib

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from kgwe.vocab import API_GROUP, CRD_VERSION, POLICY_REPOSITORY_PLURAL


def delete_unreleased(api: client.CustomObjectsApi, namespace: str, name: str) -> None:
    """Delete the PolicyRepository and drop its finalizers (gone already: nothing to do)."""
    where = (API_GROUP, CRD_VERSION, namespace, POLICY_REPOSITORY_PLURAL, name)
    with contextlib.suppress(ApiException):
        api.delete_namespaced_custom_object(*where)
    with contextlib.suppress(ApiException):
        api.patch_namespaced_custom_object(
            *where, {"metadata": {"finalizers": None}}, _content_type="application/merge-patch+json"
        )
