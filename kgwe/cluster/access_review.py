"""The API server's word on a bearer token, for kgwe.httpd.access: who it is (TokenReview) and whether that
user may `get` a path (SubjectAccessReview of a nonResourceURL). Needs `create` on tokenreviews and
subjectaccessreviews (the built-in ClusterRole system:auth-delegator)."""

from __future__ import annotations

import logging

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from kgwe.httpd.access import ALLOWED, AccessGuard, Reviewer, Verdict

log = logging.getLogger(__name__)

REVIEW_TIMEOUT_SECONDS = 5.0


def token_reviewer(api: client.ApiClient) -> Reviewer:
    """A kgwe.httpd.access.Reviewer backed by the API server `api` talks to."""
    authn = client.AuthenticationV1Api(api)
    authz = client.AuthorizationV1Api(api)

    def review(token: str, path: str) -> Verdict:
        try:
            tr = authn.create_token_review(
                {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": token}},
                _request_timeout=REVIEW_TIMEOUT_SECONDS,
            )
            status = tr.status
            if status is None or not status.authenticated or status.user is None:
                return Verdict(401, "the token is not valid")
            user = status.user
            sar = authz.create_subject_access_review(
                {
                    "apiVersion": "authorization.k8s.io/v1",
                    "kind": "SubjectAccessReview",
                    "spec": {
                        "user": user.username,
                        "groups": user.groups or [],
                        "uid": user.uid,
                        "extra": user.extra or {},
                        "nonResourceAttributes": {"path": path, "verb": "get"},
                    },
                },
                _request_timeout=REVIEW_TIMEOUT_SECONDS,
            )
        except (ApiException, OSError) as exc:
            log.warning("token review for %s failed: %s", path, getattr(exc, "reason", exc))
            return Verdict(503, "cannot ask the API server about the token now; retry")
        if sar.status is not None and sar.status.allowed:
            return ALLOWED
        return Verdict(403, f"{user.username} may not get {path}")

    return review


def metrics_guard(api: client.ApiClient) -> AccessGuard:
    """/metrics for whoever the API server lets `get` it (Prometheus's service account, say)."""
    return AccessGuard(token_reviewer(api), frozenset({"/metrics"}))
