"""Probes and memory of KGWE's servers under attack: each real process (`kgwe webhook` over TLS, the
extender's probe port, the controller's port) faces hundreds of connections that dribble a request and
never finish it (reopened as soon as they are dropped), then the webhook faces piled headers and bodies,
while a kubelet-like client probes /healthz from another address.

Figures per server: probes answered 200 out of those sent, probe latency p50/p99 (rough: the attackers and
the server share this machine's cores), connections the server dropped (evicted or cut at a deadline), and
the webhook's peak resident memory against its 256 MiB pod limit. Last line: one JSON object.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import statistics
import tempfile
import threading
import time
from pathlib import Path

from kgwe.admission.server import MAX_BODY_BYTES
from kgwe.localcluster.pki import write_pki
from kgwe.resources import sample_repo_dir
from tests.harness.http_attack import (
    Dribblers,
    client_tls,
    peak_rss_mib,
    pile_bodies,
    pile_headers,
    probe,
)
from tests.harness.processes import start_kgwe, stop

INVENTORY = sample_repo_dir() / "inventory" / "prod.yaml"


def controller_port(ports) -> None:
    """The controller's webhook/health/metrics server (what `kgwe controller` serves, without a cluster)."""
    from kgwe.gitops.webhook import ControllerHTTPServer

    server = ControllerHTTPServer(
        ("127.0.0.1", 0),
        secret=b"s",
        on_push=lambda _: None,
        get_routes={"/healthz": lambda: (200, "text/plain", b"ok")},
    ).start()
    ports.put(server.port)
    threading.Event().wait()


def timed_probes(port: int, rounds: int, tls=None) -> tuple[int, list[float]]:
    ok, took = 0, []
    for _ in range(rounds):
        t0 = time.perf_counter()
        ok += probe(port, tls=tls) == 200
        took.append((time.perf_counter() - t0) * 1000)
        time.sleep(0.05)
    return ok, took


def attack(port: int, dribblers: int, rounds: int, tls=None, handshake: bool = True) -> dict:
    with Dribblers(port, dribblers, tls=tls, handshake=handshake) as d:
        ok, took = timed_probes(port, rounds, tls)
    took.sort()
    return {
        "probes_ok": ok,
        "probes": rounds,
        "probe_p50_ms": round(statistics.median(took), 1),
        "probe_p99_ms": round(took[min(len(took) - 1, int(len(took) * 0.99))], 1),
        "dropped_by_server": d.dropped_by_server,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer probes and attackers")
    args = parser.parse_args()
    dribblers, rounds = (300, 40) if args.quick else (600, 200)
    out: dict = {"dribblers": dribblers, "load_average": os.getloadavg()[0]}
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        pki = write_pki(tmp / "pki")
        procs = []
        ctl = None
        try:
            hook, hook_port = start_kgwe(
                [
                    *("webhook", "--listen", "127.0.0.1:0", "--insecure-any-client"),
                    *("--tls-cert-file", str(pki.serving_cert), "--tls-key-file", str(pki.serving_key)),
                ],
                tmp / "webhook.log",
                r"listening on 127\.0\.0\.1:(\d+)",
            )
            procs.append(hook)
            ext, probe_port = start_kgwe(
                [
                    *("extender", "--inventory", str(INVENTORY)),
                    *("--listen", "127.0.0.1:0", "--probe-listen", "127.0.0.1:0"),
                ],
                tmp / "extender.log",
                r"probes .* on 127\.0\.0\.1:(\d+)",
            )
            procs.append(ext)
            ports: multiprocessing.Queue = multiprocessing.Queue()
            ctl = multiprocessing.Process(target=controller_port, args=(ports,), daemon=True)
            ctl.start()
            ctl_port = ports.get(timeout=60)
            tls = client_tls()
            out["webhook_rss_start_mib"] = round(peak_rss_mib(hook.pid), 1)
            out["webhook_slow_tls"] = attack(hook_port, dribblers, rounds, tls)
            out["webhook_unfinished_handshakes"] = attack(hook_port, dribblers, rounds, tls, handshake=False)
            held = pile_headers(hook_port, 48, tls=tls) + pile_bodies(
                hook_port, 32, body_bytes=MAX_BODY_BYTES, tls=tls
            )
            out["webhook_probe_under_piles"] = probe(hook_port, tls=tls)
            for s in held:
                s.close()
            out["webhook_peak_rss_mib"] = round(peak_rss_mib(hook.pid), 1)
            out["webhook_limit_mib"] = 256
            out["extender_probe_port"] = attack(probe_port, dribblers, rounds)
            out["controller_port"] = attack(ctl_port, dribblers, rounds)
        finally:
            for p in procs:
                stop(p)
            if ctl is not None:
                ctl.terminate()
                ctl.join(10)
    for key, value in out.items():
        print(f"{key}: {value}")
    print(json.dumps(out))


if __name__ == "__main__":
    main()
