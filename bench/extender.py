"""Extender latency / throughput / memory at 1,000 and 5,000 GPU nodes.

Starts `kgwe extender --inventory` (static GPUInventory) as its own process and drives it from a separate
load-generator process over loopback with 32 keep-alive connections, sending requests shaped exactly as
kube-scheduler sends them with `nodeCacheCapable: true` and `percentageOfNodesToScore: 100` (every node name
in every request: the largest requests; the rendered default samples fewer nodes at these sizes). Pods cycle
through 1-GPU, 2-GPU NVLinkOptimal, 8-GPU, 300-milli shared and MIG requests.

Two phases per cluster size:
- latency: open loop at a fixed offered load (default 500 req/s in total, spread over the 32 connections,
  filter and prioritize alternating); p50/p99 per verb from send to last byte received.
- throughput: the 32 connections closed-loop as fast as the server answers; requests per second.
RSS: the server's peak resident set (VmHWM) after both phases.

Last line: {"filter_p99_ms_1000", "prioritize_p99_ms_1000", "rps_1000", "filter_p99_ms_5000",
"prioritize_p99_ms_5000", "rss_mb_5000"}.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from urllib.request import urlopen

import orjson

REPO = Path(__file__).resolve().parents[1]
MACHINES = [  # (product, topology, share of the fleet)
    ("NVIDIA-H100-80GB-HBM3", "DGX-H100", 0.4),
    ("NVIDIA-A100-SXM4-80GB", "DGX-A100", 0.3),
    ("NVIDIA-A100-80GB-PCIe", "A100-PCIE-PAIRS-ADJACENT", 0.15),
    ("NVIDIA-L40S", "L40S-8-PCIE", 0.15),
]


def write_inventory(path: Path, n: int) -> list[str]:
    """n GPU nodes, about a third partly busy (some GPUs held) and a tenth with MIG instances."""
    lines = [
        "apiVersion: kgwe.nvidia.io/v1",
        "kind: GPUInventory",
        "metadata: {name: bench}",
        "spec:",
        "  nodes:",
    ]
    names = []
    i = 0
    for product, topology, share in MACHINES:
        for _ in range(round(n * share)):
            if i >= n:
                break
            name = f"gpu-{i:05d}"
            names.append(name)
            devices = []
            if i % 3 == 0:
                devices = [f"{{index: {g}, busy: true}}" for g in range(i % 7)]
            if i % 10 == 1 and product.startswith("NVIDIA-H100"):
                devices.append("{index: 7, mig: [1g.10gb, 1g.10gb, 1g.10gb, 3g.40gb], inUse: [1g.10gb]}")
            dev = f", devices: [{', '.join(devices)}]" if devices else ""
            lines.append(f"    - {{name: {name}, gpus: 8, product: {product}, topology: {topology}{dev}}}")
            i += 1
    path.write_text("\n".join(lines) + "\n")
    return names


def pod(i: int) -> dict:
    kind = i % 5
    ann: dict[str, str] = {}
    if kind == 0:
        res = {"nvidia.com/gpu": "1"}
    elif kind == 1:
        res = {"nvidia.com/gpu": "2"}
        ann["kgwe.nvidia.io/topology-preference"] = "NVLinkOptimal"
    elif kind == 2:
        res = {"nvidia.com/gpu": "8"}
    elif kind == 3:
        res = {"nvidia.com/gpu.shared": "1"}
        ann["kgwe.nvidia.io/gpu-milli"] = "300"
    else:
        res = {"nvidia.com/mig-1g.10gb": "1"}
    return {
        "metadata": {
            "name": f"bench-{i}",
            "namespace": "bench",
            "uid": f"00000000-0000-0000-0000-{i:012d}",
            "annotations": ann,
        },
        "spec": {
            "containers": [{"name": "main", "image": "x", "resources": {"limits": res, "requests": res}}],
            "schedulerName": "default-scheduler",
        },
        "status": {"phase": "Pending"},
    }


def requests_for(names: list[str], count: int = 50) -> list[tuple[str, bytes]]:
    out = []
    for i in range(count):
        body = orjson.dumps({"Pod": pod(i), "Nodes": None, "NodeNames": names})
        for verb in ("filter", "prioritize"):
            head = (
                f"POST /{verb} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(body)}\r\n\r\n"
            ).encode()
            out.append((verb, head + body))
    return out


async def _one(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, payload: bytes) -> int:
    writer.write(payload)
    head = await reader.readuntil(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    length = int(re.search(rb"Content-Length: (\d+)", head).group(1))
    await reader.readexactly(length)
    return status


async def _drive(port: int, reqs: list[tuple[str, bytes]], clients: int, seconds: float, rate: float | None):
    lat: dict[str, list[float]] = {"filter": [], "prioritize": []}
    errors = 0
    done = 0
    t_end = time.perf_counter() + seconds

    async def client(k: int) -> None:
        nonlocal errors, done
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        j = k
        interval = clients / rate if rate else 0.0
        next_at = time.perf_counter() + (k * interval / clients if rate else 0.0)
        while time.perf_counter() < t_end:
            if rate:
                delay = next_at - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
                next_at += interval
            verb, payload = reqs[j % len(reqs)]
            j += clients
            t0 = time.perf_counter()
            status = await _one(reader, writer, payload)
            lat[verb].append((time.perf_counter() - t0) * 1000.0)
            done += 1
            if status != 200:
                errors += 1
        writer.close()

    t0 = time.perf_counter()
    await asyncio.gather(*(client(k) for k in range(clients)))
    return lat, done / (time.perf_counter() - t0), errors


def _loadgen(port: int, names: list[str], clients: int, seconds: float, rate: float | None, out) -> None:
    reqs = requests_for(names)
    lat, rps, errors = asyncio.run(_drive(port, reqs, clients, seconds, rate))
    out.send((lat, rps, errors))


def run_loadgen(port: int, names: list[str], clients: int, seconds: float, rate: float | None):
    """The load generator runs in its own process (it must not share the server's interpreter)."""
    parent, child = mp.Pipe()
    p = mp.Process(target=_loadgen, args=(port, names, clients, seconds, rate, child))
    p.start()
    result = parent.recv()
    p.join()
    return result


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    s = sorted(values)
    return s[min(len(s) - 1, int(q / 100.0 * len(s)))]


def wait_port(proc: subprocess.Popen) -> int:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        m = re.search(r"listening on 127\.0\.0\.1:(\d+)", line)
        if m:
            return int(m.group(1))
        if not line and proc.poll() is not None:
            break
    raise SystemExit(f"extender did not start: exit {proc.poll()}")


def schedstat(pid: int) -> tuple[float, float]:
    """(CPU seconds, seconds runnable but waiting for a CPU) of a process: how contended the machine is.

    Summed over all its threads (/proc/PID/schedstat alone is the main thread's: a Go server or the
    extender's watch threads would be missed). Threads that already ended are not counted.
    """
    run = wait = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            r, w, _ = (task / "schedstat").read_text().split()
        except OSError:  # the thread ended meanwhile
            continue
        run, wait = run + int(r), wait + int(w)
    return run / 1e9, wait / 1e9


def handler_buckets(port: int) -> dict[float, float]:
    """Cumulative counts of the server's own request-time histogram (both verbs), from /metrics."""
    text = urlopen(f"http://127.0.0.1:{port}/metrics").read().decode()
    out: dict[float, float] = {}
    for le, n in re.findall(
        r'kgwe_extender_request_seconds_bucket\{le="([^"]+)",verb="[a-z]+"\} (\S+)', text
    ):
        key = float("inf") if le == "+Inf" else float(le)
        out[key] = out.get(key, 0.0) + float(n)
    return out


def handler_p99_ms(before: dict[float, float], after: dict[float, float]) -> float:
    """Upper bucket bound holding the 99th percentile of handler time during a phase."""
    diff = sorted((le, after[le] - before.get(le, 0.0)) for le in after)
    total = diff[-1][1] if diff else 0.0
    for le, n in diff:
        if total and n >= 0.99 * total:
            return le * 1000.0
    return float("nan")


def peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024.0
    return float("nan")


def measure(n: int, clients: int, seconds: float, rate: float, tmp: Path) -> dict:
    inv = tmp / f"inventory-{n}.yaml"
    names = write_inventory(inv, n)
    proc = subprocess.Popen(
        [sys.executable, "-m", "kgwe.cli", "extender", "--inventory", str(inv), "--listen", "127.0.0.1:0"],
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )
    try:
        port = wait_port(proc)
        run_loadgen(port, names, 4, 2.0, None)  # warm the per-shape caches
        cpu0, wait0 = schedstat(proc.pid)
        h0 = handler_buckets(port)
        lat, offered_rps, err1 = run_loadgen(port, names, clients, seconds, rate)
        h1 = handler_buckets(port)
        cpu1, wait1 = schedstat(proc.pid)
        _, rps, err2 = run_loadgen(port, names, clients, seconds, None)
        rss = peak_rss_mb(proc.pid)
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    row = {
        "nodes": n,
        "server_cpu_s": round(cpu1 - cpu0, 2),
        "server_handler_p99_le_ms": handler_p99_ms(h0, h1),
        "server_runqueue_wait_s": round(wait1 - wait0, 2),
        "filter_p50_ms": round(pct(lat["filter"], 50), 2),
        "filter_p99_ms": round(pct(lat["filter"], 99), 2),
        "prioritize_p50_ms": round(pct(lat["prioritize"], 50), 2),
        "prioritize_p99_ms": round(pct(lat["prioritize"], 99), 2),
        "offered_rps": rate,
        "achieved_rps_at_offered": round(offered_rps, 1),
        "max_rps": round(rps, 1),
        "errors": err1 + err2,
        "rss_mb": round(rss, 1),
    }
    print(
        f"{n:>5} nodes: filter p50 {row['filter_p50_ms']} ms p99 {row['filter_p99_ms']} ms | prioritize p50 "
        f"{row['prioritize_p50_ms']} ms p99 {row['prioritize_p99_ms']} ms at {rate:g} req/s offered "
        f"({row['achieved_rps_at_offered']} achieved) | max {row['max_rps']} req/s"
        f" | peak RSS {row['rss_mb']} MB"
        f" | errors {row['errors']}",
        flush=True,
    )
    print(
        f"       latency phase: server used {row['server_cpu_s']} s CPU and waited"
        f" {row['server_runqueue_wait_s']} s"
        f" for a CPU in {seconds:g} s; server-side handler p99 <= {row['server_handler_p99_le_ms']:g} ms"
        f" (load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores)",
        flush=True,
    )
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="short phases (3 s)")
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--clients", type=int, default=32)
    ap.add_argument("--rate", type=float, default=500.0, help="offered req/s for the latency phase")
    args = ap.parse_args()
    seconds = 3.0 if args.quick else args.seconds
    with tempfile.TemporaryDirectory() as d:
        r1 = measure(1000, args.clients, seconds, args.rate, Path(d))
        r5 = measure(5000, args.clients, seconds, args.rate, Path(d))
    print(
        json.dumps(
            {
                "filter_p99_ms_1000": r1["filter_p99_ms"],
                "prioritize_p99_ms_1000": r1["prioritize_p99_ms"],
                "rps_1000": r1["max_rps"],
                "filter_p99_ms_5000": r5["filter_p99_ms"],
                "prioritize_p99_ms_5000": r5["prioritize_p99_ms"],
                "rss_mb_5000": r5["rss_mb"],
            }
        )
    )


if __name__ == "__main__":
    main()
