"""The core benchmarks on two commits back to back on this machine, each figure's ratio HEAD/BASE: a change
that slows a hot path is seen in its own commit.

    .venv/bin/python bench/compare.py BASE HEAD [--runs N] [--only extender,policy] [--e2e]
    .venv/bin/python bench/compare.py BASE HEAD --script 'extender_e2e.py --profile-only' [--script ...]

Each commit is checked out into a temporary directory (`git worktree add --detach`, removed afterwards) and
its OWN bench scripts run there, one benchmark at a time, the two commits alternating (BASE HEAD, then HEAD
BASE on the next run, and so on), so both see the same machine. Python: this venv with PYTHONPATH set to the
checkout when the commit's pyproject.toml is this checkout's (the venv was built from it), else a venv of the
commit's own (`pip install -e .[dev]`, pip's cache makes it quick). Trace data: $KGWE_DATA, else the
`shared/data` this checkout finds.

Every numeric figure of each benchmark's last line (one JSON object; nested objects flattened with dots) is
compared: the median over the runs on each side and the ratio HEAD/BASE. Whether higher is better depends on
the figure (pods/s up, seconds down); the ratio only says how it moved. Other values that differ are listed.
On this shared 2-core machine single runs move by 10-30 %; --runs 3 and a quiet machine narrow that. The load
average is printed before each pair. A benchmark that fails on one side is reported, not fatal.

Last line: one JSON object {"base", "head", "runs", "load_average", "figures": {"bench.figure": {"base",
"head", "ratio"}}, "changed": {"bench.figure": [base, head]}, "failed": [...]}.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BENCHES: dict[str, list[str]] = {  # name -> script and arguments
    "extender": ["extender.py", "--quick"],
    "policy": ["policy.py"],
    "mig_planner": ["mig_planner.py", "--quick"],
    "cost": ["cost.py", "--quick"],
    "topology": ["topology.py"],
    "cli": ["cli.py"],
}
E2E: dict[str, list[str]] = {"extender_e2e": ["extender_e2e.py", "--quick"]}
TIMEOUT_SECONDS = 3600


def git(*args: str) -> str:
    return subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, text=True, check=True).stdout


@contextmanager
def checkout(rev: str, where: Path) -> Iterator[Path]:
    """`rev` checked out (detached) at `where` for the block."""
    git("worktree", "add", "--detach", "--quiet", str(where), rev)
    try:
        yield where
    finally:
        subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(where)], check=False)


def python_for(tree: Path) -> tuple[str, dict[str, str]]:
    """(interpreter, environment) to run `tree`'s benchmarks with."""
    env = {**os.environ, "KGWE_DATA": data_dir()}
    if (tree / "pyproject.toml").read_bytes() == (REPO / "pyproject.toml").read_bytes():
        return sys.executable, {**env, "PYTHONPATH": str(tree)}
    venv = tree / ".venv"
    print(f"{tree.name}: pyproject.toml differs from this checkout's, making its own venv", flush=True)
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q"]
    subprocess.run([*pip, "--upgrade", "pip"], check=True)
    subprocess.run([*pip, "-e", f"{tree}[dev]"], check=True)
    return str(venv / "bin" / "python"), env


def data_dir() -> str:
    if os.environ.get("KGWE_DATA"):
        return os.environ["KGWE_DATA"]
    from kgwe.errors import KgweError
    from kgwe.resources import shared_data_dir

    try:
        return str(shared_data_dir())
    except KgweError:
        return ""  # the benchmarks that need traces will say so


def run(python: str, env: dict[str, str], tree: Path, script: list[str]) -> dict:
    """The last line of one benchmark run, as JSON; {"error": ...} when it failed."""
    proc = subprocess.run(
        ["nice", "-n", "10", python, str(tree / "bench" / script[0]), *script[1:]],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_SECONDS,
        check=False,
    )
    lines = [line for line in proc.stdout.splitlines() if line.strip()]
    try:
        out = json.loads(lines[-1]) if proc.returncode == 0 and lines else None
    except json.JSONDecodeError:
        out = None
    if not isinstance(out, dict):
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        return {"error": f"exit {proc.returncode}: " + " | ".join(tail)}
    return out


def flatten(doc: dict, prefix: str = "") -> dict[str, object]:
    out: dict[str, object] = {}
    for key, value in doc.items():
        if isinstance(value, dict):
            out.update(flatten(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def number(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def compare(results: dict[str, dict[str, list[dict]]]) -> tuple[dict, dict, list[str]]:
    """(figures, changed non-numeric values, failures) from each side's runs of each benchmark."""
    figures: dict[str, dict[str, float | None]] = {}
    changed: dict[str, list[object]] = {}
    failed: list[str] = []
    for bench, sides in results.items():
        flat = {side: [flatten(r) for r in runs if "error" not in r] for side, runs in sides.items()}
        for side, runs in sides.items():
            failed += [f"{bench} ({side}): {r['error']}" for r in runs if "error" in r]
        if not flat["base"] or not flat["head"]:
            continue
        for key in sorted(set(flat["base"][0]) | set(flat["head"][0])):
            values = {side: [r.get(key) for r in runs] for side, runs in flat.items()}
            nums = {side: [n for n in map(number, vals) if n is not None] for side, vals in values.items()}
            name = f"{bench}.{key}"
            if nums["base"] and nums["head"]:
                base, head = statistics.median(nums["base"]), statistics.median(nums["head"])
                ratio = round(head / base, 3) if base else None
                figures[name] = {"base": base, "head": head, "ratio": ratio}
            elif values["base"][0] != values["head"][0]:
                changed[name] = [values["base"][0], values["head"][0]]
    return figures, changed, failed


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("base", help="the commit to compare against (any git revision)")
    ap.add_argument("head", help="the commit compared")
    ap.add_argument("--runs", type=int, default=1, help="runs of each benchmark on each side (medians)")
    ap.add_argument("--only", help="comma-separated benchmark names: " + ", ".join([*BENCHES, *E2E]))
    ap.add_argument("--e2e", action="store_true", help="also bench/extender_e2e.py --quick (~4 min a side)")
    ap.add_argument(
        "--script",
        action="append",
        default=[],
        metavar="'SCRIPT ARGS'",
        help="compare this bench script invocation instead (repeatable): 'extender_e2e.py --profile-only'",
    )
    args = ap.parse_args()
    benches = {**BENCHES, **(E2E if args.e2e else {})}
    if args.script:
        benches = {" ".join(s.split()): s.split() for s in args.script}
    elif args.only:
        wanted = args.only.split(",")
        unknown = set(wanted) - set(BENCHES) - set(E2E)
        if unknown:
            raise SystemExit(f"unknown benchmark(s): {', '.join(sorted(unknown))}")
        benches = {name: script for name, script in {**BENCHES, **E2E}.items() if name in wanted}
    revs = {"base": git("rev-parse", args.base).strip(), "head": git("rev-parse", args.head).strip()}
    loads: list[float] = []
    results: dict[str, dict[str, list[dict]]] = {b: {"base": [], "head": []} for b in benches}
    with (
        tempfile.TemporaryDirectory(prefix="kgwe-compare-") as tmp,
        checkout(revs["base"], Path(tmp) / "base") as base,
        checkout(revs["head"], Path(tmp) / "head") as head,
    ):
        trees = {"base": base, "head": head}
        pythons = {side: python_for(tree) for side, tree in trees.items()}
        for bench, script in benches.items():
            for i in range(args.runs):
                order = ("base", "head") if i % 2 == 0 else ("head", "base")
                loads.append(round(os.getloadavg()[0], 1))
                print(f"{bench} run {i + 1}/{args.runs}, load average {loads[-1]}", flush=True)
                for side in order:
                    python, env = pythons[side]
                    results[bench][side].append(run(python, env, trees[side], script))
    figures, changed, failed = compare(results)
    moved = {k: f for k, f in figures.items() if f["base"] != f["head"]}
    width = max((len(k) for k in moved), default=10)
    print(f"{'figure':{width}}  {'base':>12}  {'head':>12}  head/base")
    for name, f in moved.items():
        ratio = "" if f["ratio"] is None else f"{f['ratio']:.3f}"
        print(f"{name:{width}}  {f['base']:12.4g}  {f['head']:12.4g}  {ratio}")
    print(f"({len(figures) - len(moved)} more figures equal on both sides)")
    for name, (b, h) in changed.items():
        print(f"{name}: {b!r} -> {h!r}")
    for line in failed:
        print(f"FAILED {line}")
    summary = {
        "base": revs["base"],
        "head": revs["head"],
        "runs": args.runs,
        "load_average": [min(loads, default=0.0), max(loads, default=0.0)],
        "figures": figures,
        "changed": changed,
        "failed": failed,
    }
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
