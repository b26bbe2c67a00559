"""The `kgwe` command imports a subcommand's module only when that subcommand runs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from kgwe import cli

REPO = Path(__file__).resolve().parents[1]
HEAVY = ("scipy", "statsmodels", "kubernetes", "sqlalchemy", "sqlmodel", "git", "numpy", "jinja2")

# Runs `kgwe ARGS` in a fresh interpreter, then reports the exit code, the heavy top-level modules and the
# command modules of the table that it imported.
_PROBE = """
import sys
from kgwe import cli
try:
    code = cli.main(sys.argv[1:])
except SystemExit as exc:
    code = exc.code
print("CODE:" + str(code))
print("HEAVY:" + ",".join(sorted(m for m in HEAVY if m in sys.modules)))
print("COMMANDS:" + ",".join(sorted(c.module for c in cli.COMMANDS.values() if c.module in sys.modules)))
"""


def _run(*argv: str) -> dict[str, str]:
    probe = f"HEAVY = {HEAVY!r}\n{_PROBE}"
    out = subprocess.run(
        [sys.executable, "-c", probe, *argv], capture_output=True, text=True, cwd=REPO, timeout=300
    )
    assert out.returncode == 0, out.stderr
    result = {"stdout": out.stdout}
    for key in ("CODE", "HEAVY", "COMMANDS"):
        result[key] = next(line for line in out.stdout.splitlines() if line.startswith(key + ":"))[
            len(key) + 1 :
        ]
    return result


def test_validate_imports_no_heavy_module():
    result = _run("validate", "sample-repo")
    assert result["CODE"] == "0", result["stdout"]
    assert "sample-repo: valid" in result["stdout"]
    assert result["HEAVY"] == ""
    assert result["COMMANDS"] == "kgwe.fleet.validate_cmd"


def test_help_lists_every_command_without_importing_any():
    result = _run("--help")
    assert result["CODE"] == "0"
    for name, command in cli.COMMANDS.items():
        assert f"    {name}" in result["stdout"]
        assert command.help.split()[0] in result["stdout"]
    assert result["COMMANDS"] == ""
    assert result["HEAVY"] == ""


def test_only_the_chosen_command_is_loaded():
    parser = cli.build_parser(load="validate")
    args = parser.parse_args(["validate", "sample-repo"])
    assert args._run.__module__ == cli.COMMANDS["validate"].module
    with pytest.raises(SystemExit):
        parser.parse_args(["render", "sample-repo"])  # not loaded, so it takes no arguments


def test_a_subcommand_help_describes_its_arguments(capsys):
    with pytest.raises(SystemExit):
        cli.main(["validate", "--help"])
    assert "--output" in capsys.readouterr().out


def test_no_command_prints_help_and_exits_2(capsys):
    assert cli.main([]) == 2
    assert "COMMAND" in capsys.readouterr().out


def test_unknown_command_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["frobnicate"])
    assert exit_info.value.code == 2
    assert "invalid choice" in capsys.readouterr().err
