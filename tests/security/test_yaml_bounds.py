"""Bounded YAML: whoever writes a YAML text KGWE reads (a policy committer, a GPUWorkload author, whoever can
commit an inventory snapshot under reports/ for `kgwe plan` to read) cannot crash or exhaust the process that
reads it.

Each attack runs the real command in a child process, so a crash (libyaml up to 0.2.5 segfaults near depth
50,000) fails the test instead of killing the test run, and the child's peak memory is measured. Every
attack runs twice: under the development PyYAML and under the PyYAML the image pins
(hack/image/requirements.lock, installed with its hashes into a private folder), which is what the
controller really runs."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kgwe.localcluster.controlplane import cache_base
from kgwe.policy.loader import load_repository
from kgwe.policy.yaml_source import MAX_ALIAS_FIELDS, MAX_REPOSITORY_FIELDS, MAX_TEXT_BYTES
from kgwe.resources import sample_repo_dir
from tests.security.conftest import sample_files, sh_git

ROOT = Path(__file__).resolve().parents[2]
LOCK = ROOT / "hack" / "image" / "requirements.lock"
HEADER = "apiVersion: kgwe.nvidia.io/v1\nkind: ScoringProfile\nmetadata: {name: x}\nspec:\n  weights: "
DEEP = 50_000


def laughs(levels: int = 10, width: int = 9) -> str:
    """The classic alias bomb: `width ** levels` strings from a few hundred bytes."""
    lines = ['a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for i in range(1, levels):
        refs = ",".join([f"*a{i - 1}"] * width)
        lines.append(f"a{i}: &a{i} [{refs}]")
    return "\n".join(lines) + "\n"


def quoted_escape(depth: int = DEEP) -> str:
    """Nesting behind an escaped quote: a text scanner that ends the string at `\\"` sees the brackets as
    quoted; the YAML parser sees them as nesting."""
    return HEADER + '["a\\", ", ' + "[" * depth + "]" * depth + "]\n"


def hidden_line(brk: str, depth: int = DEEP) -> str:
    """Nesting on a line a text scanner reading only "\\n" takes for the rest of a comment."""
    return HEADER + f"1 # comment{brk}  extra: " + "[" * depth + "]" * depth + "\n"


# The child reports its own peak (VmHWM belongs to its address space since exec) and the PyYAML it ran
# under. getrusage's ru_maxrss would not do: Linux carries the forking parent's peak over exec.
_REPORTER = """
import atexit, os, sys
def _report():
    import yaml
    with open("/proc/self/status") as f:
        kib = next(line.split()[1] for line in f if line.startswith("VmHWM:"))
    with open(os.environ["KGWE_TEST_REPORT_FILE"], "w") as out:
        out.write(f"{kib} {yaml.__version__}")
atexit.register(_report)
from kgwe.cli import main
sys.exit(main())
"""


def pinned_requirement(lock_text: str, name: str) -> tuple[str, str]:
    """(version, requirement lines with every hash) of `name` in a pip-compile lock."""
    found = re.search(rf"^{name}==(\S+) \\\n(?:[ ]+--hash=\S+(?: \\)?\n)+", lock_text, re.M | re.I)
    assert found, f"{name} is not pinned in {LOCK}"
    return found.group(1), found.group(0)


@pytest.fixture(scope="session")
def image_pyyaml() -> tuple[str, Path]:
    """The image's PyYAML (version, folder to put first on PYTHONPATH), installed by hash like the image;
    kept in the cache under the pinned requirement's hash, so later runs and xdist workers reuse it."""
    version, requirement = pinned_requirement(LOCK.read_text(), "pyyaml")
    tag = hashlib.sha256(f"{sys.version_info[:2]} {requirement}".encode()).hexdigest()[:16]
    kept = cache_base() / "test-pyyaml" / f"{version}-{tag}"
    if not kept.is_dir():
        stage = kept.parent / f".{kept.name}.{os.getpid()}"  # beside it: the rename below is atomic
        stage.mkdir(parents=True, exist_ok=True)
        (stage / "requirements.txt").write_text(requirement)
        subprocess.run(
            [
                *(sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--require-hashes"),
                *(
                    "--only-binary=:all:",
                    "--target",
                    str(stage / "site"),
                    "-r",
                    str(stage / "requirements.txt"),
                ),
            ],
            check=True,
        )
        try:
            stage.rename(kept)
        except OSError:  # another process kept its copy first
            shutil.rmtree(stage, ignore_errors=True)
    return version, kept / "site"


@pytest.fixture(params=["dev", "image"])
def pyyaml(request) -> tuple[str, Path | None]:
    """Which PyYAML the child runs under: (expected version, folder first on PYTHONPATH or None)."""
    if request.param == "image":
        return request.getfixturevalue("image_pyyaml")
    import yaml

    return yaml.__version__, None


class Kgwe:
    """`kgwe ARGS` in a child process under one PyYAML: exit status, output, peak memory (KiB)."""

    def __init__(self, pyyaml: tuple[str, Path | None], tmp: Path) -> None:
        self.version, self.site = pyyaml
        self.tmp = tmp

    def __call__(self, *args: str, cwd: Path | None = None) -> tuple[int, str, int]:
        report = self.tmp / "child-report"
        report.unlink(missing_ok=True)
        env = {**os.environ, "KGWE_TEST_REPORT_FILE": str(report)}
        if self.site is not None:
            env["PYTHONPATH"] = os.pathsep.join([str(self.site), str(ROOT)])
        proc = subprocess.run(
            [sys.executable, "-c", _REPORTER, *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=cwd,
            check=False,
        )
        out = proc.stdout.decode()
        assert report.exists(), f"kgwe died (status {proc.returncode}):\n{out[-2000:]}"
        peak_kib, version = report.read_text().split()
        assert version == self.version  # it really ran under that PyYAML
        return proc.returncode, out, int(peak_kib)


@pytest.fixture
def kgwe(pyyaml, tmp_path: Path) -> Kgwe:
    return Kgwe(pyyaml, tmp_path)


def test_the_image_pins_a_pyyaml_whose_libyaml_bounds_nesting(image_pyyaml) -> None:
    """Defence in depth under KGWE's own bound: libyaml >= 0.2.6 refuses 1,000 levels by itself."""
    version, site = image_pyyaml
    probe = "import yaml; yaml.compose('[' * 5000 + ']' * 5000, Loader=yaml.CSafeLoader)"
    done = subprocess.run(
        [sys.executable, "-c", probe], env={**os.environ, "PYTHONPATH": str(site)}, capture_output=True
    )
    assert done.returncode == 1 and b"exceeded maximum nesting depth" in done.stderr, (version, done)


@pytest.mark.parametrize("depth", [2_000, DEEP])
def test_deep_flow_nesting_is_a_policy_error_not_a_crash(kgwe, tmp_path: Path, depth: int) -> None:
    (tmp_path / "deep.yaml").write_text(HEADER + "[" * depth + "]" * depth + "\n")
    code, out, _ = kgwe("validate", str(tmp_path / "deep.yaml"))
    assert code == 1, out
    assert "deep.yaml:5:" in out and "nesting deeper than 64 levels" in out
    assert "internal error" not in out and "Traceback" not in out


@pytest.mark.parametrize(
    "attack",
    [
        pytest.param(quoted_escape(), id="escaped-quote-in-flow"),
        *(pytest.param(hidden_line(brk), id=f"line-break-{ord(brk):04x}") for brk in "\r\x85\u2028\u2029"),
    ],
)
def test_nesting_the_parser_sees_is_counted_whatever_the_text_looks_like(kgwe, tmp_path, attack) -> None:
    (tmp_path / "deep.yaml").write_text(attack, encoding="utf-8")
    code, out, _ = kgwe("validate", str(tmp_path / "deep.yaml"))
    assert code == 1, out
    assert "deep.yaml:" in out and "nesting deeper than 64 levels" in out, out
    assert "internal error" not in out and "Traceback" not in out


def test_nesting_just_inside_the_bound_is_read(tmp_path: Path) -> None:
    # 64 levels: spec, weights, then 62 lists; the validation error proves the file was parsed and built
    (tmp_path / "ok.yaml").write_text(HEADER + "[" * 62 + "]" * 62 + "\n")
    ps = load_repository(tmp_path, checks=False)
    assert ps.errors and all("nesting" not in d.message for d in ps.errors)
    (tmp_path / "ok.yaml").write_text(HEADER + "[" * 63 + "]" * 63 + "\n")
    assert "nesting deeper than 64 levels" in load_repository(tmp_path, checks=False).errors[0].message


def test_deep_block_nesting_is_a_policy_error(kgwe, tmp_path: Path) -> None:
    block = "".join(" " * i + "a:\n" for i in range(1_000))  # under 1 MiB
    compact = "- " * DEEP + "x\n"
    (tmp_path / "block.yaml").write_text(block)
    (tmp_path / "compact.yaml").write_text(compact)
    code, out, _ = kgwe("validate", str(tmp_path))
    assert code == 1, out
    assert "block.yaml:65:65: error: nesting deeper than 64 levels" in out
    assert "compact.yaml:1:129: error: nesting deeper than 64 levels" in out


def test_nesting_built_through_aliases_is_bounded_too(tmp_path: Path) -> None:
    # each anchor holds 40 levels and the next one 40 more through the alias: 120 levels built
    text = "a: &a " + "[" * 40 + "]" * 40 + "\nb: &b " + "[" * 39 + "*a" + "]" * 39
    text += "\nc: " + "[" * 39 + "*b" + "]" * 39 + "\n"
    (tmp_path / "alias.yaml").write_text(text)
    (error,) = load_repository(tmp_path, checks=False).errors
    assert "nesting deeper than 64 levels (through YAML aliases)" in error.message


def test_a_1_kib_alias_bomb_costs_little(kgwe, tmp_path: Path) -> None:
    bomb = laughs()
    assert len(bomb) < 1024
    (tmp_path / "bomb.yaml").write_text(("---\n" + bomb) * 2)  # several documents: no fresh budget each
    code, out, peak_kib = kgwe("validate", str(tmp_path))
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


def test_recursive_data_is_refused(tmp_path: Path) -> None:
    (tmp_path / "loop.yaml").write_text("a: &x [1, *x]\n")
    (error,) = load_repository(tmp_path, checks=False).errors
    assert error.line == 1 and "an alias inside the node it names" in error.message


# ---- every other entry point that reads YAML someone else wrote ------------------------------------------


@pytest.fixture
def pr_repo(policy_repo) -> Path:
    """sample-repo in Git; a commit carries an inventory snapshot under reports/ built to crash (whoever may
    commit can write there too), and a pull request follows it (`kgwe plan` reads the snapshot from its
    base)."""
    policy_repo.push(sample_files("policy"))
    policy_repo.push({"reports/gpu-inventory.yaml": quoted_escape()})
    policy_repo.push({"policy/README.md": "a pull request\n"})
    return policy_repo.work


def test_kgwe_plan_reads_the_snapshot_at_its_base_through_the_bounds(kgwe, pr_repo: Path) -> None:
    code, out, _ = kgwe("plan", "--repo", str(pr_repo), "--base", "HEAD~1", "--head", "HEAD", "policy")
    assert code == 1, out
    assert "reports/gpu-inventory.yaml:5:" in out and "nesting deeper than 64 levels" in out, out
    assert "internal error" not in out and "Traceback" not in out


def test_kgwe_plan_refuses_a_snapshot_blob_over_the_bound_before_reading_it(kgwe, pr_repo: Path) -> None:
    (pr_repo / "reports" / "gpu-inventory.yaml").write_text("# x\n" * (MAX_TEXT_BYTES // 4 + 1))
    sh_git(pr_repo, "commit", "-qam", "big snapshot")
    (pr_repo / "policy" / "README.md").write_text("another pull request\n")
    sh_git(pr_repo, "commit", "-qam", "a pull request")
    code, out, _ = kgwe("plan", "--repo", str(pr_repo), "--base", "HEAD~1", "--head", "HEAD", "policy")
    assert code == 1 and f"over the {MAX_TEXT_BYTES}-byte bound; refused" in out, out


@pytest.mark.parametrize("command", ["convert", "plan-inventory", "plan-mig", "submit"])
def test_every_cli_input_goes_through_the_bounds(kgwe, tmp_path: Path, pr_repo: Path, command: str) -> None:
    attack = tmp_path / "attack.yaml"
    attack.write_text(hidden_line("\r").replace("ScoringProfile", "GPUWorkload"))
    args = {
        "convert": ["convert", str(attack)],
        "plan-inventory": [
            *("plan", "--repo", str(pr_repo), "--base", "HEAD~1", "--head", "HEAD"),
            *("--inventory", str(attack), "policy"),
        ],
        "plan-mig": ["plan-mig", str(sample_repo_dir()), "--demand", str(attack)],
        "submit": ["submit", str(attack), "--dry-run=client"],
    }[command]
    code, out, _ = kgwe(*args)
    assert code == 1, out
    assert "nesting deeper than 64 levels" in out, out
    assert "internal error" not in out and "Traceback" not in out
