"""The controller's certificate keeper on the real API server: it issues the CA and the certificates into
Secrets, puts the bundle into the webhook configuration's caBundle (and nowhere else), writes nothing when
all fits, rotates on request with the old CA kept in the bundle, and writes nothing once it is not leader."""

from __future__ import annotations

import base64
import secrets
from collections.abc import Iterator

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from kgwe.certs import x509
from kgwe.certs.rotation import PREVIOUS_CA_UNTIL_ANNOTATION, ROTATE_ANNOTATION, ROTATED_ANNOTATION
from kgwe.cluster.events import EventRecorder
from kgwe.reconcile.certificates import CertificateKeeper
from kgwe.runtime.leader import NotLeader
from kgwe.vocab import (
    CA_SECRET,
    CERTIFICATE_ISSUED_ANNOTATION,
    CONTROLLER_DEPLOYMENT,
    EXTENDER_CLIENT_SECRET,
    EXTENDER_TLS_SECRET,
    WEBHOOK_SERVICE,
    WEBHOOK_TLS_SECRET,
)

SECRETS = (CA_SECRET, WEBHOOK_TLS_SECRET, EXTENDER_TLS_SECRET, EXTENDER_CLIENT_SECRET)


@pytest.fixture
def webhook_config(k8s_api: client.ApiClient, namespace: str) -> Iterator[str]:
    """A MutatingWebhookConfiguration with our webhook and another one KGWE must leave alone."""
    name = f"kgwe-scheduling-{secrets.token_hex(3)}"
    admission = client.AdmissionregistrationV1Api(k8s_api)

    def hook(hook_name: str, service: str, ns: str) -> dict:
        return {
            "name": hook_name,
            "admissionReviewVersions": ["v1"],
            "sideEffects": "None",
            "failurePolicy": "Ignore",
            "clientConfig": {"service": {"name": service, "namespace": ns, "path": "/mutate-pods"}},
            "namespaceSelector": {"matchLabels": {"never": "matches"}},
        }

    admission.create_mutating_webhook_configuration(
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "MutatingWebhookConfiguration",
            "metadata": {"name": name},
            "webhooks": [
                hook("scheduling.kgwe.nvidia.io", WEBHOOK_SERVICE, namespace),
                hook("someone-else.example.com", "theirs", namespace),
            ],
        }
    )
    yield name
    admission.delete_mutating_webhook_configuration(name)


def _secret(api: client.ApiClient, ns: str, name: str) -> client.V1Secret:
    return client.CoreV1Api(api).read_namespaced_secret(name, ns)


def _data(secret: client.V1Secret, key: str) -> bytes:
    return base64.b64decode(secret.data[key])


def _ca_bundles(api: client.ApiClient, name: str) -> dict[str, str | None]:
    config = client.AdmissionregistrationV1Api(api).read_mutating_webhook_configuration(name)
    return {h.name: h.client_config.ca_bundle for h in config.webhooks}


def test_issue_patch_settle_rotate_and_stop_when_not_leader(k8s_api, namespace, webhook_config):
    core, apps = client.CoreV1Api(k8s_api), client.AppsV1Api(k8s_api)
    owner = apps.create_namespaced_deployment(
        namespace,
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": CONTROLLER_DEPLOYMENT},
            "spec": {
                "replicas": 0,
                "selector": {"matchLabels": {"app": "c"}},
                "template": {
                    "metadata": {"labels": {"app": "c"}},
                    "spec": {"containers": [{"name": "c", "image": "x"}]},
                },
            },
        },
    )
    webhook = apps.create_namespaced_deployment(  # its pods wait for kgwe-webhook-tls
        namespace,
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "kgwe-webhook"},
            "spec": {
                "replicas": 0,
                "selector": {"matchLabels": {"app": "w"}},
                "template": {
                    "metadata": {"labels": {"app": "w"}},
                    "spec": {"containers": [{"name": "w", "image": "x"}]},
                },
            },
        },
    )
    leading = {"yes": True}
    keeper = CertificateKeeper(
        k8s_api,
        namespace,
        ["webhook", "extender"],
        guard=lambda: leading["yes"],
        recorder=EventRecorder(k8s_api),
        webhook_configuration=webhook_config,
    )
    first = keeper.sync()
    assert list(first.written) == list(SECRETS) and first.ca_bundle_patched
    # created, not renewed: the webhook's pods are rolled to mount it now (no kgwe-extender or kgwe-scheduler
    # Deployment here: nothing to roll for their Secrets)
    assert first.rolled == ("kgwe-webhook",)
    rolled = apps.read_namespaced_deployment("kgwe-webhook", namespace)
    assert CERTIFICATE_ISSUED_ANNOTATION in rolled.spec.template.metadata.annotations
    assert rolled.metadata.generation == webhook.metadata.generation + 1
    assert {m.manager for m in rolled.metadata.managed_fields} >= {"kgwe-certificates"}
    ca = _secret(k8s_api, namespace, CA_SECRET)
    bundle = _data(ca, "ca.crt")
    assert bundle == _data(ca, "tls.crt") and x509.read(bundle).is_ca
    for name in SECRETS:
        secret = _secret(k8s_api, namespace, name)
        assert secret.type == "kubernetes.io/tls" and _data(secret, "ca.crt") == bundle
        assert [o.uid for o in secret.metadata.owner_references] == [owner.metadata.uid]
    webhook_cert = _data(_secret(k8s_api, namespace, WEBHOOK_TLS_SECRET), "tls.crt")
    assert f"{WEBHOOK_SERVICE}.{namespace}.svc" in x509.read(webhook_cert).dns_names
    assert x509.signed_by(webhook_cert, bundle)
    client_cert = _data(_secret(k8s_api, namespace, EXTENDER_CLIENT_SECRET), "tls.crt")
    assert x509.read(client_cert).usages == {"client"}
    bundles = _ca_bundles(k8s_api, webhook_config)
    assert bundles == {
        "scheduling.kgwe.nvidia.io": base64.b64encode(bundle).decode(),
        "someone-else.example.com": None,
    }
    events = core.list_namespaced_event(namespace, field_selector="reason=CertificateIssued").items
    assert {e.involved_object.name for e in events} == set(SECRETS)

    versions = {n: _secret(k8s_api, namespace, n).metadata.resource_version for n in SECRETS}
    settled = keeper.sync()
    assert settled.written == {} and not settled.ca_bundle_patched
    assert versions == {n: _secret(k8s_api, namespace, n).metadata.resource_version for n in SECRETS}

    # a person asks for a rotation, as `kubectl annotate secret kgwe-ca kgwe.nvidia.io/rotate=...` does
    core.patch_namespaced_secret(
        CA_SECRET, namespace, {"metadata": {"annotations": {ROTATE_ANNOTATION: "r1"}}}
    )
    leading["yes"] = False
    with pytest.raises(NotLeader):
        keeper.sync()
    assert (
        versions[CA_SECRET] != _secret(k8s_api, namespace, CA_SECRET).metadata.resource_version
    )  # the annotation only
    assert _data(_secret(k8s_api, namespace, CA_SECRET), "tls.crt") == bundle  # nothing rotated by a standby
    leading["yes"] = True
    rotated = keeper.sync()
    assert list(rotated.written) == list(SECRETS) and rotated.ca_bundle_patched
    assert rotated.rolled == ()  # renewed in place: the pods reread their files, nothing restarts
    ca = _secret(k8s_api, namespace, CA_SECRET)
    new_bundle = _data(ca, "ca.crt")
    assert x509.split_bundle(new_bundle) == [_data(ca, "tls.crt"), bundle]  # the old CA stays trusted
    assert ca.metadata.annotations[ROTATE_ANNOTATION] == "r1" == ca.metadata.annotations[ROTATED_ANNOTATION]
    assert PREVIOUS_CA_UNTIL_ANNOTATION in ca.metadata.annotations
    assert (
        _ca_bundles(k8s_api, webhook_config)["scheduling.kgwe.nvidia.io"]
        == base64.b64encode(new_bundle).decode()
    )
    new_webhook_cert = _data(_secret(k8s_api, namespace, WEBHOOK_TLS_SECRET), "tls.crt")
    assert new_webhook_cert != webhook_cert and x509.signed_by(new_webhook_cert, _data(ca, "tls.crt"))
    assert keeper.sync().written == {}


def test_a_foreign_secret_of_another_type_is_reported_not_overwritten(k8s_api, namespace):
    """A Secret of the same name someone made as Opaque: the API server refuses the type change, the keeper
    raises (its loop logs it and retries) and the Secret keeps its content."""
    core = client.CoreV1Api(k8s_api)
    core.create_namespaced_secret(
        namespace, {"metadata": {"name": WEBHOOK_TLS_SECRET}, "type": "Opaque", "data": {"x": "eA=="}}
    )
    keeper = CertificateKeeper(k8s_api, namespace, ["webhook"], webhook_configuration="absent-config")
    with pytest.raises(ApiException) as refused:
        keeper.sync()
    assert refused.value.status == 422
    assert _secret(k8s_api, namespace, WEBHOOK_TLS_SECRET).data == {"x": "eA=="}
