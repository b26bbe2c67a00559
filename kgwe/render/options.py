"""How rendered objects are named and wired: where they go, which extender the scheduler calls, how."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from kgwe.cluster.names import SCHEDULER_NAME

# deploy/: kube-scheduler calls the extender Service over mutual TLS, its client certificate mounted here
DEFAULT_EXTENDER_URL = "https://kgwe-extender.kgwe-system.svc:8443"
DEFAULT_EXTENDER_CLIENT_CERT_DIR = "/etc/kgwe/extender-client"


@dataclass(frozen=True)
class RenderOptions:
    repository: str = "local"  # PolicyRepository name, put in a label on every object
    # kgwe-scheduler-config, kgwe-scoring, kgwe-runtimes and kgwe-pod-template-policy
    namespace: str = "kgwe-system"
    mig_namespace: str = "gpu-operator"  # where the GPU Operator's MIG manager reads its config
    mig_config_name: str = "kgwe-mig-parted-config"
    # the device plugin's config ConfigMap (ClusterPolicy devicePlugin.config.name), in mig_namespace
    device_plugin_config_name: str = "kgwe-device-plugin-config"
    extender_url: str = DEFAULT_EXTENDER_URL
    # kube-scheduler's client certificate for mutual TLS with the extender: a directory holding tls.crt,
    # tls.key and ca.crt (a mounted kubernetes.io/tls Secret); needs an https:// extender_url. None:
    # DEFAULT_EXTENDER_CLIENT_CERT_DIR for https, none for plain http
    extender_client_cert_dir: str | None = None
    scheduler_name: str = SCHEDULER_NAME  # the profile of the second scheduler GPU pods name
    scheduler_kubeconfig: str | None = None
    scheduler_leader_elect: bool = True  # on its own Lease (scheduler_name in `namespace`)
    revision: str | None = None  # Git revision, as an annotation when given


MigConfigs = dict[str, list[dict]]  # mig-parted config name -> its entries
QuotaCaps = Mapping[str, Mapping[str, str]]  # namespace -> ResourceQuota spec.hard of an enforced budget


def extender_client_cert_dir(url: str, given: str | None) -> str | None:
    """The client-certificate directory for an extender URL: the one given, else the deploy/ default for
    https and none for plain http (a command-line default that fits either scheme)."""
    if given:
        return given
    return DEFAULT_EXTENDER_CLIENT_CERT_DIR if url.startswith("https://") else None
