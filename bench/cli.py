"""CLI start-up figures: wall time of `kgwe --help` and `kgwe validate sample-repo`, in fresh interpreters.

Each command runs N times (--quick: fewer) as `python -m kgwe.cli ...`, alternating with the baseline
`python -c "import yaml, pydantic"` (the least any `kgwe` command must load), so a busy machine slows all
three alike; ratios are taken against the baseline's median of the same run. The heavy modules each command
imports are read from `-X importtime`.

Prints the figures, then (last line) one JSON object:
  help_seconds, validate_seconds     medians of wall time
  python_seconds                     the baseline's median
  help_ratio_to_python, validate_ratio_to_python
  help_heavy_imports, validate_heavy_imports   top-level heavy modules imported (goal for validate: none)
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
HEAVY = ("scipy", "statsmodels", "kubernetes", "sqlalchemy", "sqlmodel", "git", "numpy", "jinja2")
COMMANDS = {
    "python": [sys.executable, "-c", "import yaml, pydantic"],
    "help": [sys.executable, "-m", "kgwe.cli", "--help"],
    "validate": [sys.executable, "-m", "kgwe.cli", "validate", "sample-repo"],
}


def wall_seconds(argv: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(argv, cwd=REPO, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def heavy_imports(argv: list[str]) -> list[str]:
    """Top-level heavy packages in the `-X importtime` log of one run."""
    out = subprocess.run(
        [argv[0], "-X", "importtime", *argv[1:]], cwd=REPO, capture_output=True, text=True, check=True
    )
    loaded = set()
    for line in out.stderr.splitlines():
        if line.startswith("import time:") and line.count("|") == 2:
            loaded.add(line.rsplit("|", 1)[1].strip().split(".")[0])
    return sorted(loaded & set(HEAVY))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="3 runs instead of 11")
    parser.add_argument("--runs", type=int, help="runs per command")
    args = parser.parse_args()
    runs = args.runs or (3 if args.quick else 11)

    for argv in COMMANDS.values():  # warm the page cache and the bytecode caches
        wall_seconds(argv)
    times: dict[str, list[float]] = {name: [] for name in COMMANDS}
    for _ in range(runs):
        for name, argv in COMMANDS.items():
            times[name].append(wall_seconds(argv))
    median = {name: statistics.median(values) for name, values in times.items()}
    heavy = {name: heavy_imports(COMMANDS[name]) for name in ("help", "validate")}

    for name in COMMANDS:
        ratio = median[name] / median["python"]
        shown = ", ".join(heavy.get(name, [])) or "none"
        extra = f"; heavy imports: {shown}" if name in heavy else ""
        print(
            f"{name:9s} median {median[name]:.3f} s over {runs} runs "
            f"(min {min(times[name]):.3f}, max {max(times[name]):.3f}); {ratio:.2f}x the baseline{extra}"
        )
    print(
        json.dumps(
            {
                "runs": runs,
                "python_seconds": round(median["python"], 4),
                "help_seconds": round(median["help"], 4),
                "validate_seconds": round(median["validate"], 4),
                "help_ratio_to_python": round(median["help"] / median["python"], 3),
                "validate_ratio_to_python": round(median["validate"] / median["python"], 3),
                "help_heavy_imports": heavy["help"],
                "validate_heavy_imports": heavy["validate"],
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
