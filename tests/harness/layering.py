"""KGWE's layers declared by package: an import-linter contract type (`kgwe_layers`, pyproject.toml).

A layer is declared by the packages and modules it holds; a module stands in the layer of the longest
declared name that is the module itself or a package holding it, and a module named `*_cmd` is a command
wherever it lives (a pattern entry). So a new module needs no list: it takes its package's layer. The
contract then checks, with import-linter's own contracts on the concrete modules:

- layers: a module imports from its own layer and the layers below, never above;
- the pure core (the last layer) imports none of `core_forbidden` (Kubernetes, databases, Git, ...), even
  indirectly.

A package whose modules stand in different layers is checked module by module; its face (`__init__`) holds
re-exports only and is not placed.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import grimp
from importlinter.contracts.forbidden import ForbiddenContract
from importlinter.contracts.layers import LayersContract
from importlinter.domain import fields
from importlinter.domain.contract import Contract, ContractCheck, InvalidContractOptions


def parse_layers(lines: Sequence[str]) -> list[tuple[str, list[str]]]:
    """`["commands: kgwe.cli *_cmd", "core: kgwe"]` -> [("commands", ["kgwe.cli", "*_cmd"]), ...]."""
    out = []
    for line in lines:
        name, sep, entries = line.partition(":")
        if not sep or not name.strip() or not entries.split():
            raise ValueError(f"a layer is 'name: module-or-package ...', got {line!r}")
        out.append((name.strip(), entries.split()))
    return out


def layer_of(module: str, layers: Sequence[tuple[str, Sequence[str]]]) -> str | None:
    """The layer a module stands in: a matching pattern (`*_cmd`) first, else the longest declared name
    that is the module or a package holding it; None when nothing holds it."""
    best: tuple[int, str] | None = None
    for name, entries in layers:
        for entry in entries:
            if "*" in entry:
                if fnmatch.fnmatchcase(module.rsplit(".", 1)[-1], entry):
                    return name
            elif (module == entry or module.startswith(entry + ".")) and (
                best is None or len(entry) > best[0]
            ):
                best = (len(entry), name)
    return None if best is None else best[1]


def placement(modules: Iterable[str], layers: Sequence[tuple[str, Sequence[str]]]) -> dict[str, list[str]]:
    """Per layer (in order), the fewest names covering its modules: a package whose modules all stand in
    one layer is named once; a package split across layers is named module by module, its face left out."""
    modules = set(modules)
    where = {m: layer_of(m, layers) for m in modules}

    def subtree(package: str) -> set[str | None]:
        return {where[m] for m in modules if m == package or m.startswith(package + ".")}

    out: dict[str, list[str]] = {name: [] for name, _ in layers}
    for module in sorted(modules):
        layer = where[module]
        if layer is None or len(subtree(module)) > 1:
            continue  # nothing holds it, or a face over several layers
        parent = module.rpartition(".")[0]
        if parent in modules and len(subtree(parent)) == 1:
            continue  # its package is named whole
        out[layer].append(module)
    return out


class PackageLayersContract(Contract):
    """import-linter contract type `kgwe_layers` (registered in pyproject.toml's [tool.importlinter])."""

    type_name = "kgwe_layers"

    layers = fields.ListField(subfield=fields.StringField())
    core_forbidden = fields.ListField(subfield=fields.StringField(), required=False)

    def _parsed(self) -> list[tuple[str, list[str]]]:
        try:
            return parse_layers(self.layers)  # type: ignore[arg-type]
        except ValueError as exc:
            raise InvalidContractOptions({"layers": str(exc)}) from None

    def check(self, graph: grimp.ImportGraph, verbose: bool) -> ContractCheck:
        layers = self._parsed()
        root = self.session_options.get("root_package", "kgwe")
        placed = placement((m for m in graph.modules if m == root or m.startswith(root + ".")), layers)
        layered = LayersContract(
            f"{self.name} (layers)",
            self.session_options,
            {"layers": [" : ".join(placed[name]) for name, _ in layers if placed[name]]},
        )
        checks: dict[str, tuple[Contract, ContractCheck]] = {
            "layers": (layered, layered.check(graph, verbose))
        }
        core = placed[layers[-1][0]]
        if self.core_forbidden and core:
            pure = ForbiddenContract(
                f"{self.name} (pure core)",
                self.session_options,
                {"source_modules": core, "forbidden_modules": list(self.core_forbidden)},  # type: ignore[arg-type]
            )
            checks["pure core"] = (pure, pure.check(graph, verbose))
        return ContractCheck(
            kept=all(check.kept for _, check in checks.values()),
            warnings=[w for _, check in checks.values() for w in check.warnings],
            metadata={"checks": checks},
        )

    def render_broken_contract(self, check: ContractCheck) -> None:
        checks: Mapping[str, tuple[Contract, ContractCheck]] = check.metadata["checks"]
        for contract, sub in checks.values():
            if not sub.kept:
                contract.render_broken_contract(sub)


def describe(contract_options: Mapping[str, Any]) -> list[tuple[str, list[str]]]:
    """The layers of a `kgwe_layers` contract's options, parsed (for the tests)."""
    return parse_layers(contract_options["layers"])
