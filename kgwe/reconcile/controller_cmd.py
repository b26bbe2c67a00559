"""Run the KGWE controller: sync every PolicyRepository of a namespace from Git to the cluster, safely.

Serves POST /hooks/git (GitHub-style HMAC, secret from $KGWE_WEBHOOK_SECRET or --webhook-secret-file),
GET /healthz and /readyz on --listen. GET /metrics (budgets and costs) off loopback is served over TLS only,
on --metrics-listen, and answers only a bearer token the API server lets `get /metrics` (kgwe.httpd.access,
kgwe.httpd.metrics_port), unless --insecure-public-metrics. With several replicas, one leads (a
coordination.k8s.io Lease) and the others wait. The leader also meters GPU usage into the cost store, keeps
budget status and alerts, caps the quotas of an exhausted `Enforce` budget, and commits cost reports on each
repository's schedule.
"""

from __future__ import annotations

import argparse
import ipaddress
import logging
import os
import signal
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from kgwe.audit.log import COMMIT_INTERVAL_SECONDS
from kgwe.errors import KgweError
from kgwe.httpd import metrics_port
from kgwe.httpd.exposure import INSECURE_PUBLIC_METRICS
from kgwe.vocab import CONTROLLER_NAME, GPU_OPERATOR_NAMESPACE, KGWE_NAMESPACE

if TYPE_CHECKING:  # imported where used: `kgwe controller --help` loads none of them
    from kubernetes import client

    from kgwe.reconcile.certificates import CertificateKeeper
    from kgwe.reconcile.costs import CostDuties
    from kgwe.reconcile.status import Outcome
    from kgwe.render.render import RenderOptions


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--kubeconfig", help="kubeconfig file (default: $KUBECONFIG, else in-cluster)")
    parser.add_argument(
        "--namespace",
        default=os.environ.get("POD_NAMESPACE", KGWE_NAMESPACE),
        help="namespace of the PolicyRepositories and the leader Lease",
    )
    parser.add_argument(
        "--listen",
        default="0.0.0.0:8080",
        help="address of the Git push hook, health and (on loopback) metrics server",
    )
    metrics_port.add_arguments(parser)
    parser.add_argument(
        INSECURE_PUBLIC_METRICS,
        action="store_true",
        help="/metrics without a token on an address other than loopback (default: a token the API server "
        "lets get /metrics)",
    )
    parser.add_argument(
        "--cache-dir",
        default=os.environ.get("KGWE_CACHE_DIR", "/tmp/kgwe-controller"),
        help="where Git mirrors and the commit-back clone live",
    )
    parser.add_argument("--webhook-secret-file", help="file holding the webhook HMAC secret")
    parser.add_argument("--identity", default=os.environ.get("POD_NAME"), help="leader election identity")
    parser.add_argument("--lease-duration", type=float, default=15.0, help="seconds")
    parser.add_argument("--renew-deadline", type=float, default=10.0, help="seconds")
    parser.add_argument("--retry-period", type=float, default=2.0, help="seconds")
    parser.add_argument("--no-leader-election", action="store_true", help="act alone (one replica only)")
    parser.add_argument(
        "--db",
        default=os.environ.get("KGWE_COST_DB"),
        help="cost store: SQLite path or postgresql:// URL (default CACHE_DIR/kgwe-cost.db)",
    )
    parser.add_argument(
        "--cluster", default=os.environ.get("KGWE_CLUSTER", "default"), help="cluster name in cost reports"
    )
    parser.add_argument(
        "--prometheus",
        help="Prometheus URL with dcgm-exporter metrics: rightsizing, and the idle instances MIG rebalancing "
        "may reclaim (minUtilizationThreshold)",
    )
    parser.add_argument("--no-costs", action="store_true", help="no metering, budgets or cost reports")
    parser.add_argument(
        "--git-ca-file", help="CA bundle trusted for https:// policy repositories (a private Git server)"
    )
    parser.add_argument(
        "--git-credentials-from-env",
        action="store_true",
        help="repositories without spec.secretRef use $KGWE_GIT_TOKEN / $KGWE_GIT_SSH_KEY_FILE, sent only to "
        "the hosts in $KGWE_GIT_HOSTS (off: a tenant's PolicyRepository must never borrow the controller's "
        "own credentials)",
    )
    parser.add_argument(
        "--allow-local-git-urls",
        action="store_true",
        help="also allow local paths, file:// and http:// URLs and loopback hosts (tests and local "
        "experiments only)",
    )
    parser.add_argument(
        "--allow-git-network",
        action="append",
        type=_network,
        metavar="CIDR",
        help="a network of special addresses git may reach all the same (refused by default: loopback, "
        "link-local such as 169.254.169.254, unspecified, multicast, reserved); repeatable (default: "
        "$KGWE_ALLOW_GIT_NETWORKS, comma-separated)",
    )
    parser.add_argument(
        "--audit-interval",
        type=float,
        default=COMMIT_INTERVAL_SECONDS,
        metavar="SECONDS",
        help="commit the audit log (<reports path>/audit/<YYYY-MM>.jsonl) at most this often; it also goes "
        "out with each GPU inventory snapshot commit (default: %(default)s)",
    )
    parser.add_argument("--no-workloads", action="store_true", help="do not reconcile GPUWorkloads")
    parser.add_argument(
        "--once",
        action="store_true",
        help="reconcile each PolicyRepository once as the leader, print the outcomes, then exit: 0 when "
        "every one applied (ready or rolling out), 1 otherwise (no HTTP server, metering or GPUWorkloads)",
    )
    parser.add_argument(
        "--extender-url",
        default=None,
        help="urlPrefix of the KGWE extender in the rendered KubeSchedulerConfiguration",
    )
    parser.add_argument(
        "--extender-client-cert-dir",
        metavar="DIR",
        help="where kube-scheduler finds its client certificate for the extender (DIR/tls.crt, tls.key, "
        "ca.crt; default for https: /etc/kgwe/extender-client); rendered as tlsConfig",
    )
    parser.add_argument(
        "--mig-namespace",
        default=GPU_OPERATOR_NAMESPACE,
        help="the NVIDIA GPU Operator's namespace, where the MIG manager and the device plugin read the "
        "configs KGWE renders",
    )
    parser.add_argument(
        "--certificates",
        default="",
        metavar="COMPONENTS",
        help="comma-separated: keep the TLS certificates of these components as the leader (webhook: the "
        "admission webhook's, with the caBundle of its configuration; extender: the standalone extender's "
        "mutual TLS); empty: none (cert-manager or you provide them)",
    )
    parser.add_argument("--log-level", default="INFO")


def _network(text: str) -> ipaddress.IPv4Network | ipaddress.IPv6Network:
    try:
        return ipaddress.ip_network(text, strict=False)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _listen(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    try:
        return host or "0.0.0.0", int(port)
    except ValueError as exc:
        raise KgweError(f"--listen {text!r} is not HOST:PORT") from exc


def _cost_duties(args: argparse.Namespace) -> CostDuties:
    from kgwe.reconcile.costs import cost_duties

    cache = Path(args.cache_dir)
    cache.mkdir(parents=True, exist_ok=True)
    db = args.db or str(cache / "kgwe-cost.db")
    return cost_duties(
        db, cluster=args.cluster, prometheus_url=args.prometheus, spool_path=cache / "metering-spool.jsonl"
    )


def _render_options(args: argparse.Namespace) -> RenderOptions:
    from kgwe.render.render import DEFAULT_EXTENDER_URL, RenderOptions, extender_client_cert_dir

    url = args.extender_url or DEFAULT_EXTENDER_URL
    if args.extender_client_cert_dir and not url.startswith("https://"):
        raise KgweError("--extender-client-cert-dir needs an https:// --extender-url")
    return RenderOptions(
        namespace=args.namespace,
        mig_namespace=args.mig_namespace,
        extender_url=url,
        extender_client_cert_dir=extender_client_cert_dir(url, args.extender_client_cert_dir),
    )


def _certificates(
    args: argparse.Namespace, api: client.ApiClient, is_leader: Callable[[], bool]
) -> CertificateKeeper | None:
    """The certificate keeper `--certificates` asks for (None: none)."""
    components = [c.strip() for c in args.certificates.split(",") if c.strip()]
    if not components or args.once:
        return None
    from kgwe.cluster.events import EventRecorder
    from kgwe.reconcile.certificates import CertificateKeeper

    return CertificateKeeper(
        api, args.namespace, components, guard=is_leader, recorder=EventRecorder(api, allowed=is_leader)
    )


# Outcomes of `--once` that count as applied: the revision is in force (a MIG rollout may still be running).
_APPLIED_PHASES = frozenset({"ready", "progressing"})


def _report_once(outcomes: Mapping[str, Outcome | None]) -> int:
    if not outcomes:
        print("no PolicyRepository to reconcile")
        return 1
    failed = 0
    for name, outcome in outcomes.items():
        if outcome is None:
            print(f"{name}: skipped (suspended or deleted)")
            continue
        print(f"{name}: {outcome.phase}: {outcome.message}")
        failed += outcome.phase not in _APPLIED_PHASES
    return 1 if failed else 0


def run(args: argparse.Namespace) -> int:
    from kgwe.cluster.client import api_client
    from kgwe.gitops.gitcmd import GitAccess, operator_networks
    from kgwe.observability import tracing
    from kgwe.reconcile.controller import Controller

    metrics_tls_port = metrics_port.metrics_port(args)  # its flags checked before anything starts
    fmt = "%(asctime)s %(levelname)s %(name)s: %(message)s"
    logging.basicConfig(level=args.log_level.upper(), format=fmt)
    tracing.configure(CONTROLLER_NAME)  # only when OTEL_EXPORTER_OTLP_ENDPOINT is set
    secret = os.environ.get("KGWE_WEBHOOK_SECRET", "").encode()
    if args.webhook_secret_file:
        try:
            secret = Path(args.webhook_secret_file).read_bytes().strip()
        except OSError as exc:
            raise KgweError(f"cannot read {args.webhook_secret_file}: {exc.strerror}") from exc
    render_options = _render_options(args)
    costs = None if args.no_costs or args.once else _cost_duties(args)
    # every Kubernetes call ends well inside the lease: a leader stuck in a call cannot outlive its lease
    timeout = max(1.0, min(args.renew_deadline, args.lease_duration - args.renew_deadline) / 2)
    controller = Controller(
        api_client(args.kubeconfig, request_timeout_s=timeout),
        args.namespace,
        cache_dir=Path(args.cache_dir),
        identity=args.identity,
        webhook_secret=secret,
        listen=None if args.once else _listen(args.listen),
        lease_duration_seconds=args.lease_duration,
        renew_deadline_seconds=args.renew_deadline,
        retry_period_seconds=args.retry_period,
        leader_election=not args.no_leader_election,
        costs=costs,
        render_options=render_options,
        git_access=GitAccess(
            allow_local_urls=args.allow_local_git_urls,
            credentials_from_env=args.git_credentials_from_env,
            ca_file=args.git_ca_file,
            allowed_networks=(
                tuple(args.allow_git_network) if args.allow_git_network else operator_networks()
            ),
        ),
        workloads=not (args.no_workloads or args.once),
        prometheus_url=args.prometheus,
        public_metrics=args.insecure_public_metrics,
        audit_interval_seconds=args.audit_interval,
        metrics_tls_port=None if args.once else metrics_tls_port,
    )
    controller.certificates = _certificates(args, controller.api_client, controller.is_leader)
    if args.once:
        return _report_once(controller.reconcile_once(leader_wait_seconds=2 * args.lease_duration))
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    controller.run(stop)
    return 0
