"""Run the KGWE kube-scheduler extender: POST /filter and /prioritize (urlPrefix http://HOST:PORT),
GET /healthz, /readyz, /metrics.

  kgwe extender --inventory inventory.yaml --listen 127.0.0.1:8888      # static GPUInventory, no cluster
  kgwe extender --kubeconfig ~/.kube/config --listen 0.0.0.0:8888       # watch Nodes, Pods, kgwe-scoring
  kgwe extender --in-cluster --listen 0.0.0.0:8443 --tls-cert-file tls.crt --tls-key-file tls.key \
                --client-ca-file ca.crt                                   # HTTPS, client certificate required

Who may call it (kgwe.httpd.exposure): plain HTTP only on loopback (kube-scheduler in the same pod), TLS only
with a client CA, unless --insecure-any-client. /metrics on a non-loopback address is served over TLS only
(the API port with TLS, or --metrics-listen: kgwe.httpd.metrics_port) and needs a token the API server lets
`get /metrics` (cluster mode) unless the port verifies client certificates; --insecure-public-metrics opens
it.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import threading
from pathlib import Path
from typing import TYPE_CHECKING

import orjson

from kgwe.errors import KgweError
from kgwe.extender.app import MAX_REQUEST_BYTES, Metrics, make_handler, make_probe_handler
from kgwe.extender.core import NodeTable
from kgwe.extender.engine import Engine
from kgwe.extender.profile import ProfileError, profiles_from_document
from kgwe.httpd import (
    JSON,
    MAX_CONNECTIONS,
    AccessGuard,
    Handler,
    Limits,
    check_client_auth,
    error_body,
    metrics_need_token,
    metrics_port,
    serve,
)
from kgwe.httpd.exposure import INSECURE_ANY_CLIENT, INSECURE_PUBLIC_METRICS
from kgwe.tlsfiles import ServingTLS
from kgwe.vocab import EXTENDER_NAME, EXTENDER_PORT, KGWE_NAMESPACE, SCHEDULER_NAME

if TYPE_CHECKING:
    from kubernetes import client

    from kgwe.extender.index import ClusterIndex

# kubelet probes and a Prometheus scrape: GETs only, a few connections at a time
PROBE_LIMITS = Limits(max_connections=64, max_body_bytes=4096, max_buffered_bytes=4 * 1024 * 1024)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--inventory", type=Path, help="static mode: GPUInventory YAML (no cluster)")
    parser.add_argument("--kubeconfig", help="cluster mode: kubeconfig (default: in-cluster config)")
    parser.add_argument(
        "--in-cluster", action="store_true", help="cluster mode with the pod's service account"
    )
    parser.add_argument("--listen", default=f"127.0.0.1:{EXTENDER_PORT}", help="HOST:PORT to listen on")
    parser.add_argument("--namespace", default=KGWE_NAMESPACE, help="namespace of the kgwe-scoring ConfigMap")
    parser.add_argument(
        "--scheduler-name",
        default=SCHEDULER_NAME,
        help="cluster mode: watch the bound pods of this scheduler only (GPUs of other pods come from the "
        "node agent's kgwe.nvidia.io/gpu-pods annotation)",
    )
    parser.add_argument(
        "--all-pods",
        action="store_true",
        help="cluster mode: watch every bound pod (the extender configured into the default scheduler)",
    )
    parser.add_argument(
        "--profiles", type=Path, help="kgwe-scoring JSON document (cluster mode: until the ConfigMap exists)"
    )
    parser.add_argument("--request-timeout", type=float, default=10.0, help="seconds to receive one request")
    parser.add_argument("--tls-cert-file", help="serve HTTPS with this certificate (PEM)")
    parser.add_argument("--tls-key-file", help="private key of --tls-cert-file (PEM)")
    parser.add_argument(
        "--client-ca-file", help="require client certificates signed by this CA (kube-scheduler's, PEM)"
    )
    parser.add_argument(
        "--probe-listen",
        metavar="HOST:PORT",
        help="also serve GET /healthz, /readyz in plain HTTP here (kubelet probes; /metrics too on loopback)",
    )
    metrics_port.add_arguments(parser)
    parser.add_argument(
        "--max-connections", type=int, default=MAX_CONNECTIONS, help="open connections at most"
    )
    parser.add_argument(
        INSECURE_ANY_CLIENT,
        action="store_true",
        help="serve the API port to clients nobody verifies: TLS without --client-ca-file, or plain HTTP on "
        "an address other than loopback",
    )
    parser.add_argument(
        INSECURE_PUBLIC_METRICS,
        action="store_true",
        help="/metrics on an address other than loopback without a token (default: a token the API server "
        "lets get /metrics)",
    )
    parser.add_argument("--log-level", default="INFO")


def parse_listen(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise KgweError(f"--listen: expected HOST:PORT, got {text!r}")
    return host.strip("[]") or "0.0.0.0", int(port)


def api_limits(args: argparse.Namespace) -> Limits:
    return Limits(
        header_timeout_seconds=min(5.0, args.request_timeout),
        request_timeout_seconds=args.request_timeout,
        max_connections=args.max_connections,
        max_body_bytes=MAX_REQUEST_BYTES,
    )


Address = tuple[str, int]  # (host, port) a server listens on
# /metrics guards of the API port, the probe port and the TLS metrics port (None: open)
Guards = tuple[AccessGuard | None, AccessGuard | None, AccessGuard | None]


def _plain_metrics_only_on_loopback(handler: Handler, host: str, args: argparse.Namespace) -> Handler:
    """`handler` on a plain-HTTP port: off loopback its /metrics says where it is served over TLS instead
    (kgwe.httpd.metrics_port)."""
    if metrics_port.plain_metrics(host, args.insecure_public_metrics):
        return handler

    def handle(method: str, path: str, body: bytes) -> tuple[int, bytes, bytes]:
        return metrics_port.refused(method, path, body) if path == "/metrics" else handler(method, path, body)

    return handle


async def _main_port(
    args: argparse.Namespace,
    engine: Engine,
    metrics: Metrics,
    main: Address,
    tls: ServingTLS | None,
    guard: AccessGuard | None,
    stop: asyncio.Event,
) -> None:
    """The extender's API port; with TLS, opened once the certificate files exist (a mounted Secret the
    controller or cert-manager writes), then served with whatever those files hold now."""
    if tls is not None and not tls.loaded:
        waiting = threading.Event()
        watcher = asyncio.ensure_future(stop.wait())
        watcher.add_done_callback(lambda _: waiting.set())
        loaded = await asyncio.to_thread(tls.wait, waiting, what="--tls-cert-file / --tls-key-file")
        watcher.cancel()
        if not loaded:
            return
    handler = make_handler(engine, metrics)
    await serve(
        handler if tls is not None else _plain_metrics_only_on_loopback(handler, main[0], args),
        *main,
        limits=api_limits(args),
        tls=tls.current if tls is not None else None,
        guard=guard,
        stop=stop,
    )


def _probe_port_handler(engine: Engine, metrics: Metrics, tls: ServingTLS | None) -> Handler:
    """The probe handler, not ready while the API port still waits for its certificate."""
    probes = make_probe_handler(engine, metrics)

    def handle(method: str, path: str, body: bytes) -> tuple[int, bytes, bytes]:
        if path == "/readyz" and method == "GET" and tls is not None and not tls.loaded:
            return 503, error_body("waiting for the TLS certificate files"), JSON
        return probes(method, path, body)

    return handle


async def _serve_all(
    args: argparse.Namespace,
    engine: Engine,
    metrics: Metrics,
    main: Address,
    probe: Address | None,
    tls: ServingTLS | None,
    guards: Guards,
) -> None:
    """The extender port and, when asked, the plain probe port and the TLS metrics port; all end on
    SIGTERM/SIGINT."""
    stop = asyncio.Event()
    servers = [_main_port(args, engine, metrics, main, tls, guards[0], stop)]
    if probe is not None:
        servers.append(
            serve(
                _plain_metrics_only_on_loopback(_probe_port_handler(engine, metrics, tls), probe[0], args),
                *probe,
                limits=PROBE_LIMITS,
                guard=guards[1],
                stop=stop,
                label="kgwe extender probes (GET /healthz /readyz /metrics) on",
            )
        )
    port = metrics_port.metrics_port(args)
    if port is not None:
        probes = make_probe_handler(engine, metrics)
        address, files = port
        metrics_tls = ServingTLS(*files) if files is not None else None
        servers.append(
            serve(
                metrics_port.handler(lambda: probes("GET", "/metrics", b"")),
                *address,
                limits=metrics_port.LIMITS,
                tls=metrics_tls.current if metrics_tls is not None else None,
                guard=guards[2],
                stop=stop,
                label="kgwe extender /metrics on",
            )
        )
    await asyncio.gather(*servers)


def serving_tls(args: argparse.Namespace) -> ServingTLS | None:
    """The HTTPS files the flags ask for, loaded now when present (None for plain HTTP). Missing files are
    waited for; files that exist but do not load are an error at start."""
    cert, key, ca = args.tls_cert_file, args.tls_key_file, args.client_ca_file
    if not cert and not key:
        if ca:
            raise KgweError("--client-ca-file needs --tls-cert-file and --tls-key-file")
        return None
    if not cert or not key:
        raise KgweError("give both --tls-cert-file and --tls-key-file")
    tls = ServingTLS(cert, key, ca)
    if not tls.missing() and not tls.reload(force=True):
        raise KgweError(f"cannot load the TLS files: {tls.last_error}")
    return tls


def metrics_guards(
    args: argparse.Namespace, main_host: str, probe: Address | None, api: client.ApiClient | None
) -> Guards:
    """The /metrics guard of the API port, the probe port and the TLS metrics port (None: open). A token is
    needed where /metrics is served off loopback over TLS: the API port with TLS but no client CA (with one,
    it answers only kube-scheduler), and --metrics-listen; a plain port off loopback does not serve /metrics
    at all (kgwe.httpd.metrics_port). Static mode (no API server) cannot check a token."""
    port = metrics_port.metrics_port(args)
    main_tls = bool(args.tls_cert_file) and not args.client_ca_file
    need = [
        main_tls and metrics_need_token(main_host, args.insecure_public_metrics),
        False,
        port is not None and metrics_need_token(port[0][0], args.insecure_public_metrics),
    ]
    if not any(need):
        return None, None, None
    if api is None:
        raise KgweError(
            "/metrics off loopback needs a token the API server reviews, and static mode has none: "
            f"listen on 127.0.0.1, or give {INSECURE_PUBLIC_METRICS}"
        )
    from kgwe.cluster.access_review import metrics_guard

    guard: AccessGuard = metrics_guard(api)
    return (guard if need[0] else None, guard if need[1] else None, guard if need[2] else None)


def cluster_index(
    args: argparse.Namespace, engine: Engine, api: client.ApiClient, metrics: Metrics | None
) -> ClusterIndex:
    """The watches feeding `engine`. Decisions are verified against the pending-pod watch only when the port
    serves clients nobody verifies; otherwise kube-scheduler is the only caller (kgwe.httpd.exposure)."""
    from kgwe.extender.index import ClusterIndex

    return ClusterIndex(
        engine,
        api_client=api,
        namespace=args.namespace,
        metrics=metrics,
        scheduler_name=None if args.all_pods else args.scheduler_name,
        verify_decisions=args.insecure_any_client,
    )


def static_engine(inventory: Path, profiles: Path | None = None) -> Engine:
    from kgwe.extender.inventory import load_inventory

    nodes = load_inventory(inventory)
    table = NodeTable(max_gpus=max(8, max(n.gpus for n in nodes)), capacity=len(nodes) + 16)
    for n in nodes:
        table.upsert(n)
    engine = Engine(table)
    load_profiles(engine, profiles)
    engine.ready = True
    return engine


def load_profiles(engine: Engine, path: Path | None) -> None:
    """Profiles from a kgwe-scoring JSON file (static mode; initial profiles in cluster mode)."""
    if path is None:
        return
    try:
        engine.set_profiles(profiles_from_document(orjson.loads(path.read_bytes())))
    except (OSError, orjson.JSONDecodeError, ProfileError) as exc:
        raise KgweError(f"--profiles {path}: {exc}") from None


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s %(message)s")
    host, port = parse_listen(args.listen)
    probe = parse_listen(args.probe_listen) if args.probe_listen else None
    tls = serving_tls(args)
    check_client_auth(
        "kgwe extender",
        host,
        tls=tls is not None,
        client_ca=bool(args.client_ca_file),
        insecure_any_client=args.insecure_any_client,
    )
    if args.max_connections < 1:
        raise KgweError("--max-connections must be at least 1")
    if args.request_timeout <= 0:
        raise KgweError("--request-timeout must be positive")
    metrics = Metrics()
    from kgwe.observability import tracing

    tracing.configure(EXTENDER_NAME)  # only when OTEL_EXPORTER_OTLP_ENDPOINT is set
    if args.inventory:
        guards = metrics_guards(args, host, probe, None)
        engine = static_engine(args.inventory, args.profiles)
        index = None
    elif args.kubeconfig or args.in_cluster:
        from kgwe.cluster.client import api_client

        api = api_client(args.kubeconfig)
        guards = metrics_guards(args, host, probe, api)
        engine = Engine()
        load_profiles(engine, args.profiles)  # until the kgwe-scoring ConfigMap says otherwise
        index = cluster_index(args, engine, api, metrics)
        index.start()
    else:
        raise KgweError("give --inventory FILE (static mode) or --kubeconfig / --in-cluster (cluster mode)")
    gc.collect()
    gc.freeze()  # startup objects (catalog, topology tables, index) never need scanning again
    try:
        asyncio.run(_serve_all(args, engine, metrics, (host, port), probe, tls, guards))
    except OSError as exc:
        raise KgweError(f"cannot listen on {args.listen}: {exc.strerror or exc}") from None
    finally:
        if index is not None:
            index.stop()
    return 0
