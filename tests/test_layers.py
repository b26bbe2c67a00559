"""The import structure holds: every module stands in one layer of the import-linter layers contract
(pyproject.toml, checked by `make lint`), and no import, at a module's top or inside a function, closes a
cycle of modules, nor a cycle of folders (kgwe.policy importing kgwe.workloads while kgwe.workloads imports
kgwe.policy: each module may sit in its layer and still tie two folders together)."""

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


def _cycles(graph: grimp.ImportGraph) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(graph.modules):
        if start in index:
            continue
        work = [(start, iter(sorted(graph.find_modules_directly_imported_by(start))))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.find_modules_directly_imported_by(child)))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def _folders(graph: grimp.ImportGraph) -> grimp.ImportGraph:
    """The import graph with each folder of the package (kgwe.policy, kgwe.workloads, ...) as one module; a
    module of the package's root stands as itself."""
    folders = grimp.ImportGraph()

    def folder(module: str) -> str:
        return ".".join(module.split(".")[:2])

    for module in graph.modules:
        folders.add_module(folder(module))
    for module in graph.modules:
        for imported in graph.find_modules_directly_imported_by(module):
            if folder(module) != folder(imported):
                folders.add_import(importer=folder(module), imported=folder(imported))
    return folders


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


def test_no_import_closes_a_cycle() -> None:
    """Function-level imports included: an import moved into a function still ties the two modules."""
    cycles = _cycles(grimp.build_graph("kgwe"))
    assert not cycles, "\n".join(" <-> ".join(c) for c in cycles)


def test_no_import_between_folders_closes_a_cycle() -> None:
    """A folder's modules build on the folders below it only: pure code two folders need lives in the lower
    one, and a command that needs several folders lives in one above them all."""
    cycles = _cycles(_folders(grimp.build_graph("kgwe")))
    assert not cycles, "\n".join(" <-> ".join(c) for c in cycles)


def test_the_cycle_finder_finds_a_cycle() -> None:
    graph = grimp.ImportGraph()
    for module in ("a", "a.x", "a.y", "a.z"):
        graph.add_module(module)
    graph.add_import(importer="a.x", imported="a.y")
    graph.add_import(importer="a.y", imported="a.x")
    graph.add_import(importer="a.z", imported="a.x")
    assert _cycles(graph) == [["a.x", "a.y"]]
    folders = grimp.ImportGraph()
    for module in ("a", "a.p", "a.p.x", "a.p.w", "a.q", "a.q.y", "a.q.z", "a.r"):
        folders.add_module(module)
    folders.add_import(importer="a.p.x", imported="a.q.y")
    folders.add_import(importer="a.q.z", imported="a.p.w")
    folders.add_import(importer="a.r", imported="a.p.x")
    assert _cycles(folders) == []  # no module cycle ...
    assert _cycles(_folders(folders)) == [["a.p", "a.q"]]  # ... but a folder cycle
    assert _layer_of("kgwe.policy.loader", [{"kgwe.cli"}, {"kgwe.policy"}]) == [1]
