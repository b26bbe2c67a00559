"""The image's `kgwe controller` against the real apiserver, from inside the image: `buildah run` on the host
network with a kubeconfig mounted, the policy served over HTTPS on loopback; `--once` reconciles and exits."""

from __future__ import annotations

import base64
import os
from pathlib import Path

import pytest
import yaml
from kubernetes import client

from kgwe.vocab import MIG_CONFIG_LABEL

pytestmark = [pytest.mark.image, pytest.mark.cluster, pytest.mark.timeout(3600)]

SYSTEM_NS = "kgwe-system"


def inline_kubeconfig(control_plane) -> str:
    """The harness's admin kubeconfig with the certificates inline: one file to mount."""

    def data(path: Path) -> str:
        return base64.b64encode(Path(path).read_bytes()).decode()

    pki = control_plane.pki
    cluster = {"server": control_plane.server_url, "certificate-authority-data": data(pki.ca_cert)}
    user = {"client-certificate-data": data(pki.admin_cert), "client-key-data": data(pki.admin_key)}
    return yaml.safe_dump(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "local", "cluster": cluster}],
            "users": [{"name": "admin", "user": user}],
            "contexts": [{"name": "local", "context": {"cluster": "local", "user": "admin"}}],
            "current-context": "local",
        }
    )


def test_the_images_controller_applies_a_policy_repository_once(image_container, control_plane, e2e):
    (node,) = e2e.make_nodes(1)
    sha = e2e.remote.commit(e2e.base)
    e2e.make_repository()
    kubeconfig = e2e.tmp / "kubeconfig"
    kubeconfig.write_text(inline_kubeconfig(control_plane))
    # The policy is served over HTTPS on loopback by the e2e fixture, with its own CA: the image's
    # controller trusts it through --git-ca-file, as a cluster with a private Git server would.
    git_ca = os.environ["GIT_SSL_CAINFO"]
    assert e2e.obj()["spec"]["url"].startswith("https://127.0.0.1:")

    proc = image_container.run(
        [
            *("kgwe", "controller", "--once", "--kubeconfig", "/kube/config", "--namespace", SYSTEM_NS),
            *("--git-ca-file", "/git/ca.pem", "--allow-git-network", "127.0.0.0/8"),  # the loopback server
        ],
        volumes=[f"{kubeconfig}:/kube/config:ro", f"{git_ca}:/git/ca.pem:ro"],
        host_network=True,
    )
    assert proc.returncode == 0, (proc.stdout, proc.stderr[-3000:])
    assert proc.stdout.startswith(f"{e2e.pool}: "), proc.stdout

    status = e2e.status()
    assert status["lastAppliedRevision"] == f"main@sha1:{sha}"
    applied = {(i["kind"], i.get("namespace"), i["name"]) for i in status["inventory"]}
    assert ("ConfigMap", "gpu-operator", "kgwe-mig-parted-config") in applied, applied
    for kind, namespace, name in applied:
        if kind == "ConfigMap":  # every object it reports applied is there, managed by KGWE
            cm = e2e.core.read_namespaced_config_map(name, namespace)
            assert cm.metadata.labels["app.kubernetes.io/managed-by"] == "kgwe"
    assert "1g.10gb" in e2e.labels(node)[MIG_CONFIG_LABEL]
    lease = client.CoordinationV1Api(e2e.core.api_client).read_namespaced_lease("kgwe-controller", SYSTEM_NS)
    assert not lease.spec.holder_identity  # it led for the run, then gave the Lease up
