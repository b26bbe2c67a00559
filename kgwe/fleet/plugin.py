"""`kubectl kgwe ...`: kubectl runs any `kubectl-<name>` executable on PATH as `kubectl <name>`, passing the
remaining arguments; this entry point is that executable, and it is the `kgwe` command itself."""

from __future__ import annotations

import sys


def main() -> int:
    from kgwe.cli import main as kgwe_main

    return kgwe_main(sys.argv[1:], prog="kubectl kgwe")
