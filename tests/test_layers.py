"""The layers are declared by package (pyproject.toml's `kgwe_layers` contract, checked by `make lint`): every
module of kgwe stands in exactly one layer, a new module takes its package's layer with no list to edit, and
a package split across layers is checked module by module. That no import closes a cycle, of modules or of
packages, is the contract `acyclic_siblings` there."""

from __future__ import annotations

import tomllib
from pathlib import Path

import grimp

from tests.harness.layering import describe, layer_of, placement

_ROOT = Path(__file__).resolve().parent.parent


def _declared() -> list[tuple[str, list[str]]]:
    contracts = tomllib.loads((_ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    (layered,) = [c for c in contracts if c["type"] == "kgwe_layers"]
    return describe(layered)


def _covers(name: str, module: str) -> bool:
    return module == name or module.startswith(name + ".")


def test_every_module_stands_in_one_layer() -> None:
    """Each module is named, or held by a named package, in exactly one layer of the contract's placement;
    only a package's face over several layers (re-exports) stands in none."""
    layers = _declared()
    modules = set(grimp.build_graph("kgwe").modules)
    placed = placement(modules, layers)
    problems = []
    for module in sorted(modules):
        holders = [layer for layer, names in placed.items() if any(_covers(n, module) for n in names)]
        spread = {layer_of(m, layers) for m in modules if _covers(module, m)}
        if len(holders) != 1 and not (not holders and len(spread) > 1):
            problems.append(f"{module}: in {holders or 'no layer'}")
    assert not problems, "\n".join(problems)


def test_a_new_module_takes_its_package_layer() -> None:
    layers = [
        ("commands", ["kgwe.cli", "*_cmd"]),
        ("services", ["kgwe.reconcile", "kgwe.cost.service"]),
        ("io", ["kgwe.cluster", "kgwe.cost.store"]),
        ("core", ["kgwe"]),
    ]
    assert layer_of("kgwe.reconcile.brand_new", layers) == "services"  # its package's
    assert layer_of("kgwe.optimizer.solver", layers) == "core"  # a new package: the core, until declared
    assert layer_of("kgwe.cost.store", layers) == "io"  # the longest name wins over kgwe.cost's
    assert layer_of("kgwe.cost.allocate", layers) == "core"
    assert layer_of("kgwe.optimizer.optimize_cmd", layers) == "commands"  # a command wherever it lives
    assert layer_of("elsewhere.x", layers) is None


def test_a_package_split_across_layers_is_named_module_by_module() -> None:
    layers = [("commands", ["*_cmd"]), ("io", ["p.q.store"]), ("core", ["p"])]
    modules = ["p", "p.q", "p.q.a", "p.q.store", "p.r", "p.r.x", "p.r.y", "p.r.run_cmd", "p.s", "p.s.z"]
    placed = placement(modules, layers)
    assert placed == {
        "commands": ["p.r.run_cmd"],
        "io": ["p.q.store"],
        "core": ["p.q.a", "p.r.x", "p.r.y", "p.s"],  # p.s whole; the faces p, p.q and p.r span layers
    }
