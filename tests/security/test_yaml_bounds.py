"""Bounded YAML: whoever commits to a policy repository cannot crash or exhaust the process that reads it.

Each attack is run through `kgwe validate` in a child process, so a crash (libyaml segfaults near depth
50,000) fails the test instead of killing the test run, and the child's peak memory is measured."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from kgwe.policy.loader import load_repository
from kgwe.policy.yaml_source import MAX_ALIAS_FIELDS, MAX_REPOSITORY_FIELDS

HEADER = "apiVersion: kgwe.nvidia.io/v1\nkind: ScoringProfile\nmetadata: {name: x}\nspec:\n  weights: "


def laughs(levels: int = 10, width: int = 9) -> str:
    """The classic alias bomb: `width ** levels` strings from a few hundred bytes."""
    lines = ['a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for i in range(1, levels):
        refs = ",".join([f"*a{i - 1}"] * width)
        lines.append(f"a{i}: &a{i} [{refs}]")
    return "\n".join(lines) + "\n"


# The child reports its own peak (VmHWM belongs to its address space since exec). getrusage's ru_maxrss
# would not do: Linux carries the forking parent's peak over exec, and a pytest process is itself big.
_PEAK_REPORTER = """
import atexit, os, sys
def _peak():
    with open("/proc/self/status") as f:
        kib = next(line.split()[1] for line in f if line.startswith("VmHWM:"))
    with open(os.environ["KGWE_TEST_PEAK_FILE"], "w") as out:
        out.write(kib)
atexit.register(_peak)
from kgwe.cli import main
sys.exit(main())
"""


def validate(path: Path) -> tuple[int, str, int]:
    """Exit status, output and peak memory (KiB) of `kgwe validate path` in a child process."""
    peak_file = path.parent / f"{path.name}.peak-kib"
    proc = subprocess.run(
        [sys.executable, "-c", _PEAK_REPORTER, "validate", str(path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env={**os.environ, "KGWE_TEST_PEAK_FILE": str(peak_file)},
        check=False,
    )
    peak_kib = int(peak_file.read_text()) if peak_file.exists() else -1  # -1: it died before exit
    return proc.returncode, proc.stdout.decode(), peak_kib


@pytest.mark.parametrize("depth", [2_000, 50_000])
def test_deep_flow_nesting_is_a_policy_error_not_a_crash(tmp_path: Path, depth: int) -> None:
    (tmp_path / "deep.yaml").write_text(HEADER + "[" * depth + "]" * depth + "\n")
    code, out, _ = validate(tmp_path)
    assert code == 1, out
    assert "deep.yaml:5:" in out and "nesting deeper than 64 levels" in out
    assert "internal error" not in out and "Traceback" not in out


def test_deep_block_nesting_is_a_policy_error(tmp_path: Path) -> None:
    block = "".join(" " * i + "a:\n" for i in range(1_000))  # under 1 MiB
    compact = "- " * 50_000 + "x\n"
    (tmp_path / "block.yaml").write_text(block)
    (tmp_path / "compact.yaml").write_text(compact)
    code, out, _ = validate(tmp_path)
    assert code == 1, out
    assert "block.yaml:65:65: error: nesting deeper than 64 levels" in out
    assert "compact.yaml:1:1: error: nesting deeper than 64 levels" in out


def test_a_1_kib_alias_bomb_costs_little(tmp_path: Path) -> None:
    bomb = laughs()
    assert len(bomb) < 1024
    (tmp_path / "bomb.yaml").write_text(("---\n" + bomb) * 2)  # several documents: no fresh budget each
    code, out, peak_kib = validate(tmp_path)
    assert code == 1, out
    assert f"error: aliases expand to more than {MAX_ALIAS_FIELDS} fields in one file" in out
    assert "bomb.yaml:2:" in out  # the line of the expanded anchor
    assert peak_kib < 256 * 1024, f"peak memory {peak_kib} KiB"


def test_fields_are_capped_per_repository(tmp_path: Path) -> None:
    # Each file stays under the per-file caps (150 uses of a 600-item list: 90,000 fields through aliases)
    # but together they hold more fields than a repository may.
    items = ",".join(["1"] * 600)
    text = f"base: &b [{items}]\nuses: [" + ",".join(["*b"] * 150) + "]\n"
    for i in range(25):
        (tmp_path / f"f{i}.yaml").write_text(text)
    ps = load_repository(tmp_path, checks=False)
    messages = [f"{d.file}:{d.line}: {d.message}" for d in ps.errors]
    assert any(f"more than {MAX_REPOSITORY_FIELDS} fields" in m for m in messages), messages
    assert ps.yaml_budget.exhausted
