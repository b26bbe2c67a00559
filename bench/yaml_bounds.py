"""How long the bounded YAML loader takes, and how much memory, on the worst texts an attacker can send.

Each text is at most the 1 MiB a YAML text may have; each is either read or refused with file:line. Prints one
line per attack (best of N runs, seconds and peak traced MiB), then (last line) one JSON object:
  worst_seconds    the slowest attack
  worst_peak_mib   the largest peak of memory allocated while parsing one text
Targets: well under a second and 256 MiB each (the controller parses one file at a time).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import time
import tracemalloc

from kgwe.policy.yaml_source import MAX_TEXT_BYTES, YamlSyntaxError, parse_documents


def laughs(levels: int = 10, width: int = 9) -> str:
    lines = ['a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for i in range(1, levels):
        lines.append(f"a{i}: &a{i} [" + ",".join([f"*a{i - 1}"] * width) + "]")
    return "\n".join(lines) + "\n"


def attacks() -> dict[str, str]:
    half = MAX_TEXT_BYTES // 2 - 8
    return {
        "alias bomb (1 KiB)": laughs(),
        "flow nesting, 1 MiB of [": "[" * half + "]" * half,
        "block nesting, compact '- '": "- " * half + "x\n",
        "nesting behind an escaped quote": '["a\\", ", ' + "[" * (half - 16) + "]" * (half - 16) + "]\n",
        "nesting after a \\r line break": "a: 1 # c\rb: " + "[" * (half - 16) + "]" * (half - 16) + "\n",
        "1 MiB flat list of numbers": "[" + "1," * (half - 1) + "1]\n",
        "1 MiB of short keys": "".join(f"k{i}: {i}\n" for i in range(MAX_TEXT_BYTES // 16)),
        "1 MiB of anchors and aliases": "".join(f"- &a{i} x\n- *a{i}\n" for i in range(MAX_TEXT_BYTES // 26)),
    }


def measure(text: str, runs: int) -> tuple[float, float, str]:
    best = float("inf")
    outcome = ""
    for _ in range(runs):
        started = time.perf_counter()
        try:
            parse_documents(text)
            outcome = "read"
        except YamlSyntaxError as exc:
            outcome = f"refused at {exc.line}:{exc.column}: {str(exc)[:60]}"
        best = min(best, time.perf_counter() - started)
    tracemalloc.start()
    with contextlib.suppress(YamlSyntaxError):
        parse_documents(text)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return best, peak / 2**20, outcome


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one run each instead of three")
    args = parser.parse_args()
    worst_seconds = worst_peak = 0.0
    for name, text in attacks().items():
        seconds, peak_mib, outcome = measure(text, 1 if args.quick else 3)
        worst_seconds, worst_peak = max(worst_seconds, seconds), max(worst_peak, peak_mib)
        print(f"{name:34} {len(text):>8} chars  {seconds:6.3f} s  {peak_mib:6.1f} MiB  {outcome}")
    print(json.dumps({"worst_seconds": round(worst_seconds, 3), "worst_peak_mib": round(worst_peak, 1)}))


if __name__ == "__main__":
    main()
