"""The import structure holds: every module stands in one layer of the import-linter layers contract
(pyproject.toml, checked by `make lint`). That no import closes a cycle, of modules or of packages, is the
contract `acyclic_siblings` there."""

from __future__ import annotations

import tomllib
from pathlib import Path

import grimp

_ROOT = Path(__file__).resolve().parent.parent
_FACES_OK = {"kgwe"}  # the package itself: its face holds the version only


def _layers() -> list[set[str]]:
    contracts = tomllib.loads((_ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    (layered,) = [c for c in contracts if c["type"] == "layers"]
    return [{m.strip() for m in layer.split(":")} for layer in layered["layers"]]


def _layer_of(module: str, layers: list[set[str]]) -> list[int]:
    inside = [any(module == m or module.startswith(m + ".") for m in layer) for layer in layers]
    return [i for i, yes in enumerate(inside) if yes]


def _is_face(module: str) -> bool:
    return (_ROOT / Path(*module.split(".")) / "__init__.py").exists()


def test_every_module_stands_in_one_layer() -> None:
    """A new module is placed in the layers contract; a package's face (its __init__) is placed only when
    all its modules share one layer (then the package stands there as a whole)."""
    layers = _layers()
    graph = grimp.build_graph("kgwe")
    problems = []
    for module in sorted(graph.modules):
        where = _layer_of(module, layers)
        if _is_face(module) and module not in {m for layer in layers for m in layer}:
            continue  # a face whose modules sit in several layers, or the package root
        if len(where) != 1:
            problems.append(f"{module}: in {len(where)} layers of pyproject.toml's layers contract")
    assert not problems, "\n".join(problems)


def test_a_module_is_in_the_layer_of_its_package() -> None:
    assert _layer_of("kgwe.policy.loader", [{"kgwe.cli"}, {"kgwe.policy"}]) == [1]
