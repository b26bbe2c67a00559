"""Run the KGWE kube-scheduler extender: POST /filter and /prioritize (urlPrefix http://HOST:PORT),
GET /healthz, /readyz, /metrics.

  kgwe extender --inventory inventory.yaml --listen 127.0.0.1:8888      # static GPUInventory, no cluster
  kgwe extender --kubeconfig ~/.kube/config --listen 0.0.0.0:8888       # watch Nodes, Pods, kgwe-scoring
  kgwe extender --in-cluster --listen 0.0.0.0:8443 --tls-cert-file tls.crt --tls-key-file tls.key \
                --client-ca-file ca.crt                                   # HTTPS, client certificate required
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import threading
from pathlib import Path

import orjson

from kgwe.cluster.names import EXTENDER_PORT, SCHEDULER_NAME
from kgwe.errors import KgweError
from kgwe.extender.app import MAX_REQUEST_BYTES, Metrics, make_handler, make_probe_handler
from kgwe.extender.core import NodeTable
from kgwe.extender.engine import Engine
from kgwe.extender.profile import ProfileError, profiles_from_document
from kgwe.httpd import JSON, MAX_CONNECTIONS, error_body, serve
from kgwe.tlsfiles import ServingTLS


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--inventory", type=Path, help="static mode: GPUInventory YAML (no cluster)")
    parser.add_argument("--kubeconfig", help="cluster mode: kubeconfig (default: in-cluster config)")
    parser.add_argument(
        "--in-cluster", action="store_true", help="cluster mode with the pod's service account"
    )
    parser.add_argument("--listen", default=f"127.0.0.1:{EXTENDER_PORT}", help="HOST:PORT to listen on")
    parser.add_argument("--namespace", default="kgwe-system", help="namespace of the kgwe-scoring ConfigMap")
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
        help="also serve GET /healthz, /readyz, /metrics in plain HTTP here (kubelet probes, Prometheus)",
    )
    parser.add_argument(
        "--max-connections", type=int, default=MAX_CONNECTIONS, help="open connections at most"
    )
    parser.add_argument("--log-level", default="INFO")


def parse_listen(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise KgweError(f"--listen: expected HOST:PORT, got {text!r}")
    return host.strip("[]") or "0.0.0.0", int(port)


async def _main_port(args, engine: Engine, metrics: Metrics, main, tls: ServingTLS | None, stop) -> None:
    """The extender's API port; with TLS, opened once the certificate files exist (a mounted Secret the
    controller or cert-manager writes), then served with whatever those files hold at each handshake."""
    if tls is not None and not tls.loaded:
        waiting = threading.Event()
        watcher = asyncio.ensure_future(stop.wait())
        watcher.add_done_callback(lambda _: waiting.set())
        loaded = await asyncio.to_thread(tls.wait, waiting, what="--tls-cert-file / --tls-key-file")
        watcher.cancel()
        if not loaded:
            return
    await serve(
        make_handler(engine, metrics),
        *main,
        request_timeout=args.request_timeout,
        max_connections=args.max_connections,
        max_body=MAX_REQUEST_BYTES,
        tls=tls.context() if tls is not None else None,
        stop=stop,
    )


def _probe_port_handler(engine: Engine, metrics: Metrics, tls: ServingTLS | None):
    """The probe handler, not ready while the API port still waits for its certificate."""
    probes = make_probe_handler(engine, metrics)

    def handle(method: str, path: str, body: bytes) -> tuple[int, bytes, bytes]:
        if path == "/readyz" and method == "GET" and tls is not None and not tls.loaded:
            return 503, error_body("waiting for the TLS certificate files"), JSON
        return probes(method, path, body)

    return handle


async def _serve_all(args, engine: Engine, metrics: Metrics, main, probe, tls: ServingTLS | None) -> None:
    """The extender port and, when asked, the plain probe port; both end on SIGTERM/SIGINT."""
    stop = asyncio.Event()
    servers = [_main_port(args, engine, metrics, main, tls, stop)]
    if probe is not None:
        servers.append(
            serve(
                _probe_port_handler(engine, metrics, tls),
                *probe,
                request_timeout=args.request_timeout,
                stop=stop,
                label="kgwe extender probes (GET /healthz /readyz /metrics) on",
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
    if args.max_connections < 1:
        raise KgweError("--max-connections must be at least 1")
    metrics = Metrics()
    from kgwe.observability import tracing

    tracing.configure("kgwe-extender")  # only when OTEL_EXPORTER_OTLP_ENDPOINT is set
    if args.inventory:
        engine = static_engine(args.inventory, args.profiles)
        index = None
    elif args.kubeconfig or args.in_cluster:
        from kgwe.extender.index import ClusterIndex

        engine = Engine()
        load_profiles(engine, args.profiles)  # until the kgwe-scoring ConfigMap says otherwise
        index = ClusterIndex(
            engine,
            kubeconfig=args.kubeconfig,
            namespace=args.namespace,
            metrics=metrics,
            scheduler_name=None if args.all_pods else args.scheduler_name,
        )
        index.start()
    else:
        raise KgweError("give --inventory FILE (static mode) or --kubeconfig / --in-cluster (cluster mode)")
    gc.collect()
    gc.freeze()  # startup objects (catalog, topology tables, index) never need scanning again
    try:
        asyncio.run(_serve_all(args, engine, metrics, (host, port), probe, tls))
    except OSError as exc:
        raise KgweError(f"cannot listen on {args.listen}: {exc.strerror or exc}") from None
    finally:
        if index is not None:
            index.stop()
    return 0
