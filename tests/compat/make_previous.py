"""Write tests/compat/previous/ from the KGWE commit in tests/compat/previous-commit: what that version's own
commands write (`kgwe template` of every workload type, `kgwe render sample-repo`), run from its checkout.
The objects its controllers write on a cluster (cluster/*.yaml) come from the upgrade test, which runs that
version for real: KGWE_WRITE_COMPAT_FIXTURES=1 makes tests/deploy/test_upgrade_real_node.py dump them.

    python -m tests.compat.make_previous CHECKOUT   # a checkout of it (hack/previous-image.sh makes one)
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
OUT = HERE / "previous"
WORKLOAD_TYPES = ("Training", "DistributedTraining", "Batch", "HPC", "Inference", "Interactive")


def _kgwe(checkout: Path, *args: str) -> str:
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    proc = subprocess.run(
        [sys.executable, "-m", "kgwe.cli", *args], cwd=checkout, env=env, capture_output=True, text=True
    )
    if proc.returncode != 0:
        raise SystemExit(f"kgwe {' '.join(args)} (previous version) failed: {proc.stderr}")
    return proc.stdout


def main(checkout: Path) -> None:
    commit = subprocess.run(
        ["git", "-C", str(checkout), "rev-parse", "HEAD"], capture_output=True, text=True, check=True
    ).stdout.strip()
    if commit != (HERE / "previous-commit").read_text().strip():
        raise SystemExit(f"{checkout} is at {commit}, not at tests/compat/previous-commit")
    (OUT / "rendered").mkdir(parents=True, exist_ok=True)
    templates = [
        _kgwe(checkout, "template", "--type", t, "--name", f"compat-{t.lower()}") for t in WORKLOAD_TYPES
    ]
    (OUT / "gpuworkload-templates.yaml").write_text("---\n".join(templates))
    with tempfile.TemporaryDirectory() as tmp:
        _kgwe(checkout, "render", "sample-repo", "--out", tmp)
        for path in sorted(Path(tmp).glob("*.yaml")):
            (OUT / "rendered" / path.name).write_text(path.read_text())
    print(f"wrote {OUT} from {commit}")


if __name__ == "__main__":
    main(Path(sys.argv[1]).resolve())
