"""Generate the protobuf code of kgwe/agent/proto/*.proto (podresources_pb2.py and its .pyi for mypy).

Generated code is a build output, never committed: hatchling runs this as a build hook for every wheel and
editable install (pyproject.toml [tool.hatch.build.hooks.custom]; `make venv` is one), with grpcio-tools
pinned in [build-system] requires so the protoc that writes the code and the protobuf runtime KGWE pins
agree. `python hack/protos.py` regenerates by hand (grpcio-tools is a dev dependency too).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

PROTO_DIR = Path("kgwe") / "agent" / "proto"


def generate(root: Path) -> list[str]:
    """Run protoc (grpcio-tools) on every .proto of PROTO_DIR; the generated files, relative to root."""
    sources = sorted((root / PROTO_DIR).glob("*.proto"))
    out = str(root / PROTO_DIR)
    subprocess.run(
        [sys.executable, "-m", "grpc_tools.protoc", f"-I{out}", f"--python_out={out}", f"--pyi_out={out}"]
        + [str(p) for p in sources],
        check=True,
    )
    return [str(PROTO_DIR / f"{p.stem}_pb2{ext}") for p in sources for ext in (".py", ".pyi")]


try:
    from hatchling.builders.hooks.plugin.interface import BuildHookInterface
except ImportError:  # run by hand, outside a build
    BuildHookInterface = object  # type: ignore[assignment,misc]


class ProtoBuildHook(BuildHookInterface):  # type: ignore[misc,valid-type]
    """hatchling's build hook: the generated files go into the wheel although git ignores them."""

    PLUGIN_NAME = "custom"

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        build_data["artifacts"].extend(generate(Path(self.root)))


if __name__ == "__main__":
    for path in generate(Path(__file__).resolve().parent.parent):
        print(f"wrote {path}")
