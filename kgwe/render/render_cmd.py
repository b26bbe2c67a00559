"""Render the Kubernetes objects a policy repository asks for: the mig-parted ConfigMap and node
`nvidia.com/mig.config` labels, the device plugin's sharing ConfigMap and node
`nvidia.com/device-plugin.config` labels, the KubeSchedulerConfiguration with the KGWE extender, the
kgwe-scoring, kgwe-runtimes and kgwe-pod-template-policy ConfigMaps and one ResourceQuota per budgeted
namespace. Deterministic: same input, byte-identical files."""

from __future__ import annotations

import argparse

from kgwe.errors import KgweError
from kgwe.policy.loader import load_repository
from kgwe.policy.models import GPUInventory
from kgwe.render.output import write_files
from kgwe.render.render import DEFAULT_EXTENDER_URL, RenderOptions, extender_client_cert_dir, render
from kgwe.vocab import GPU_OPERATOR_NAMESPACE, KGWE_NAMESPACE, SCHEDULER_NAME


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("path", nargs="?", default=".", help="policy repository (default: .)")
    parser.add_argument(
        "--inventory", metavar="FILE", help="GPUInventory file (default: the repository's own)"
    )
    parser.add_argument("--out", metavar="DIR", required=True, help="directory for the rendered YAML files")
    parser.add_argument("--repository", default="local", help="PolicyRepository name for the objects' label")
    parser.add_argument("--namespace", default=KGWE_NAMESPACE, help="namespace of the KGWE ConfigMaps")
    parser.add_argument(
        "--mig-namespace", default=GPU_OPERATOR_NAMESPACE, help="namespace of the GPU Operator"
    )
    parser.add_argument("--extender-url", default=DEFAULT_EXTENDER_URL, help="urlPrefix of the KGWE extender")
    parser.add_argument(
        "--extender-client-cert-dir",
        metavar="DIR",
        help="kube-scheduler's client certificate for the extender (DIR/tls.crt, tls.key, ca.crt; "
        "default for https: /etc/kgwe/extender-client)",
    )
    parser.add_argument(
        "--scheduler-name",
        default=SCHEDULER_NAME,
        help="profile schedulerName (default-scheduler when the extender goes into the default scheduler)",
    )
    parser.add_argument("--revision", help="Git revision to record in an annotation")


def _inventory(path: str) -> GPUInventory:
    ps = load_repository(path)
    ps.raise_for_errors()
    inventory = ps.inventory()
    if inventory is None:
        raise KgweError(f"{path}: no GPUInventory in it")
    return inventory


def run(args: argparse.Namespace) -> int:
    ps = load_repository(args.path)
    for warning in ps.warnings:
        print(warning)
    ps.raise_for_errors()
    inventory = _inventory(args.inventory) if args.inventory else ps.inventory()
    options = RenderOptions(
        repository=args.repository,
        namespace=args.namespace,
        mig_namespace=args.mig_namespace,
        extender_url=args.extender_url,
        extender_client_cert_dir=extender_client_cert_dir(args.extender_url, args.extender_client_cert_dir),
        scheduler_name=args.scheduler_name,
        revision=args.revision,
    )
    result = render(ps, inventory, options=options)
    paths = write_files(result.files, args.out)
    configs = sorted(set(result.node_configs.values()))
    print(
        f"rendered {len(result.objects)} objects into {len(paths)} files in {args.out}: "
        f"{len(result.node_configs)} node MIG labels using {len(configs)} mig-parted configs"
        + _sharing_summary(result.sharing_configs)
    )
    for path in paths:
        print(f"  {path}")
    return 0


def _sharing_summary(sharing_configs: dict[str, str]) -> str:
    if not sharing_configs:
        return ""
    used = len(set(sharing_configs.values()))
    return f", {len(sharing_configs)} node device-plugin labels using {used} sharing config(s)"
