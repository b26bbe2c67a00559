"""What tracing costs the extender's hot path: in-process filter decisions at 1,000 GPU nodes with tracing
off (the default: OTEL_EXPORTER_OTLP_ENDPOINT unset) and on (spans to a do-nothing exporter, so only
KGWE's and the SDK's own work is measured), the two runs interleaved in rounds.

Each decision changes one node first (as a bind would), so every filter computes its answer rather than
repeating a remembered one. Last line: {"filter_p99_us_off", "filter_p99_us_on", "ratio_on_to_off",
"filter_mean_us_off", "filter_mean_us_on"}.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import orjson

from kgwe.extender.engine import Engine
from kgwe.extender.nodes import NodeState
from kgwe.observability import tracing


class _Discard:
    """A SpanExporter that drops spans (export cost is the collector's, not the extender's)."""

    def export(self, spans):
        from opentelemetry.sdk.trace.export import SpanExportResult

        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        pass

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True


def _engine(nodes: int) -> tuple[Engine, list[str]]:
    engine = Engine()
    names = [f"gpu-{i:05d}" for i in range(nodes)]
    for name in names:
        engine.table.upsert(NodeState(name=name, gpus=8, product="NVIDIA-H100-80GB-HBM3"))
    return engine, names


def _round(engine: Engine, names: list[str], bodies: list[bytes]) -> list[float]:
    out = []
    for k, body in enumerate(bodies):
        node = names[k % len(names)]
        engine.table.upsert(
            NodeState(
                name=node, gpus=8, product="NVIDIA-H100-80GB-HBM3", gpu_used_milli=[k % 2 * 1000] + [0] * 7
            )
        )
        t0 = time.perf_counter()
        engine.filter(body)
        out.append((time.perf_counter() - t0) * 1e6)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--decisions", type=int, default=400, help="per round and mode")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    engine, names = _engine(args.nodes)
    bodies = [
        orjson.dumps(
            {
                "Pod": {
                    "metadata": {"name": f"p{k}", "namespace": "ml", "uid": f"uid-{k}"},
                    "spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
                },
                "NodeNames": names,
            }
        )
        for k in range(args.decisions)
    ]
    off: list[float] = []
    on: list[float] = []
    for _ in range(args.rounds):
        tracing.disable()
        off += _round(engine, names, bodies)
        tracing.configure("kgwe-bench", exporter=_Discard())
        on += _round(engine, names, bodies)
    tracing.disable()

    def p99(xs: list[float]) -> float:
        return statistics.quantiles(xs, n=100)[98]

    result = {
        "nodes": args.nodes,
        "filter_p99_us_off": round(p99(off), 1),
        "filter_p99_us_on": round(p99(on), 1),
        "ratio_on_to_off": round(p99(on) / p99(off), 3),
        "filter_mean_us_off": round(statistics.fmean(off), 1),
        "filter_mean_us_on": round(statistics.fmean(on), 1),
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
