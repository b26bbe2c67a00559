"""How rendered objects are named and wired: where they go, which extender the scheduler calls, how."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kgwe.vocab import (
    DEVICE_PLUGIN_CONFIGMAP,
    EXTENDER_PORT,
    EXTENDER_SERVICE,
    EXTENDER_TLS_PORT,
    GPU_OPERATOR_NAMESPACE,
    KGWE_NAMESPACE,
    MIG_PARTED_CONFIGMAP,
    SCHEDULER_NAME,
)

# The default install: kube-scheduler calls the extender container of its own pod on the loopback.
DEFAULT_EXTENDER_URL = f"http://127.0.0.1:{EXTENDER_PORT}"
# The standalone extender (its own Deployment and Service): mutual TLS, kube-scheduler's client certificate
# mounted in DEFAULT_EXTENDER_CLIENT_CERT_DIR.
DEFAULT_EXTENDER_CLIENT_CERT_DIR = "/etc/kgwe/extender-client"


def standalone_extender_url(namespace: str) -> str:
    """The standalone extender Service's URL (mutual TLS) in KGWE's namespace."""
    return f"https://{EXTENDER_SERVICE}.{namespace}.svc:{EXTENDER_TLS_PORT}"


@dataclass(frozen=True)
class RenderOptions:
    repository: str = "local"  # PolicyRepository name, put in a label on every object
    # kgwe-scheduler-config, kgwe-scoring, kgwe-runtimes and kgwe-pod-template-policy
    namespace: str = KGWE_NAMESPACE
    mig_namespace: str = GPU_OPERATOR_NAMESPACE  # where the GPU Operator's MIG manager reads its config
    mig_config_name: str = MIG_PARTED_CONFIGMAP
    # the device plugin's config ConfigMap (ClusterPolicy devicePlugin.config.name), in mig_namespace
    device_plugin_config_name: str = DEVICE_PLUGIN_CONFIGMAP
    extender_url: str = DEFAULT_EXTENDER_URL
    # kube-scheduler's client certificate for mutual TLS with the extender: a directory holding tls.crt,
    # tls.key and ca.crt (a mounted kubernetes.io/tls Secret); needs an https:// extender_url. None:
    # DEFAULT_EXTENDER_CLIENT_CERT_DIR for https, none for plain http
    extender_client_cert_dir: str | None = None
    scheduler_name: str = SCHEDULER_NAME  # the profile of the second scheduler GPU pods name
    scheduler_kubeconfig: str | None = None
    scheduler_leader_elect: bool = True  # on its own Lease (scheduler_name in `namespace`)
    revision: str | None = None  # Git revision, as an annotation when given


MigConfigs = dict[str, list[dict[str, Any]]]  # mig-parted config name -> its entries
QuotaCaps = Mapping[str, Mapping[str, str]]  # namespace -> ResourceQuota spec.hard of an enforced budget


def extender_client_cert_dir(url: str, given: str | None) -> str | None:
    """The client-certificate directory for an extender URL: the one given, else the deploy/ default for
    https and none for plain http (a command-line default that fits either scheme)."""
    if given:
        return given
    return DEFAULT_EXTENDER_CLIENT_CERT_DIR if url.startswith("https://") else None
