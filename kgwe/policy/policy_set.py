"""A policy repository as loaded: its valid objects by kind, where each came from, and every diagnostic
found while loading and checking it. The loader fills it, the cross-object checks read it and add to it."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Generic, TypeVar, cast, overload

from kgwe.errors import KgweError
from kgwe.policy.admission import ClusterView, PolicyView
from kgwe.policy.diagnostics import Diagnostic, Severity, format_path
from kgwe.policy.diagnostics import Path as FieldPath
from kgwe.policy.models import (
    GPUBudget,
    GPUInventory,
    GPUInventorySpec,
    GPUSharingStrategy,
    GPUWorkload,
    KgweObject,
    MIGStrategy,
    ObjectMeta,
    PricingCatalog,
    ScoringProfile,
    WorkloadRuntime,
)
from kgwe.policy.yaml_source import YamlBudget, YamlDocument

T = TypeVar("T", bound=KgweObject)
T_co = TypeVar("T_co", bound=KgweObject, covariant=True)


@dataclass(frozen=True)
class LoadedObject(Generic[T_co]):
    """A valid object plus where it came from (for diagnostics that cross objects); generic in the object's
    model so that `PolicySet.entries_of(MIGStrategy)` gives entries whose `.obj` is a MIGStrategy."""

    obj: T_co
    file: str
    doc: YamlDocument

    def where(self, path: FieldPath) -> tuple[int, int]:
        return self.doc.where(path)


@dataclass
class PolicySet:
    """The valid objects of a repository by kind, and every diagnostic found while loading it."""

    root: Path
    entries: list[LoadedObject[KgweObject]] = field(default_factory=list)
    diagnostics: list[Diagnostic] = field(default_factory=list)
    files: int = 0
    invalid_kinds: set[str] = field(default_factory=set)  # kinds with a document that failed validation
    bytes_read: int = 0
    yaml_budget: YamlBudget = field(default_factory=YamlBudget)  # fields left for the whole repository
    # What GPUWorkloads are checked against besides this set's own policy: a policy repository given apart
    # (`kgwe validate --policy DIR FILE`), what the cluster has (`--cluster`: a workloads ClusterView, and
    # the policy it runs as a PolicyView) and the namespace of workloads that name none
    policy: PolicySet | None = None
    cluster: ClusterView | None = None
    cluster_policy: PolicyView | None = None
    namespace: str | None = None

    # -- diagnostics ---------------------------------------------------------------------------------
    def add(
        self,
        severity: Severity,
        file: str,
        line: int,
        column: int,
        path: FieldPath | str,
        message: str,
        kind: str = "",
        name: str = "",
    ) -> None:
        p = path if isinstance(path, str) else format_path(path)
        self.diagnostics.append(Diagnostic(file, line, column, severity, p, message, kind, name))

    def report(
        self, entry: LoadedObject[KgweObject], path: FieldPath, message: str, severity: Severity = "error"
    ) -> None:
        line, column = entry.where(path)
        self.add(severity, entry.file, line, column, path, message, entry.obj.kind, entry.obj.name)

    @property
    def errors(self) -> list[Diagnostic]:
        return sorted(d for d in self.diagnostics if d.severity == "error")

    @property
    def warnings(self) -> list[Diagnostic]:
        return sorted(d for d in self.diagnostics if d.severity == "warning")

    @property
    def ok(self) -> bool:
        return not any(d.severity == "error" for d in self.diagnostics)

    def raise_for_errors(self) -> None:
        """KgweError listing every error (the controller keeps the last good revision on this)."""
        errors = self.errors
        if errors:
            lines = "\n".join(f"  {d}" for d in errors)
            raise KgweError(f"{len(errors)} error(s) in policy repository {self.root}:\n{lines}")

    # -- objects -------------------------------------------------------------------------------------
    @overload
    def objects(self) -> list[KgweObject]: ...
    @overload
    def objects(self, kind: type[T]) -> list[T]: ...
    def objects(self, kind: type[T] | None = None) -> list[T] | list[KgweObject]:
        if kind is None:
            return [e.obj for e in self.entries]
        return [e.obj for e in self.entries_of(kind)]

    def entries_of(self, kind: type[T]) -> list[LoadedObject[T]]:
        # the isinstance test on each entry's object is what makes the cast true
        return [cast("LoadedObject[T]", e) for e in self.entries if isinstance(e.obj, kind)]

    def source(self, obj: KgweObject) -> tuple[str, int]:
        """(file, line) an object was loaded from."""
        for e in self.entries:
            if e.obj is obj:
                return e.file, e.doc.line
        raise KeyError(obj.name)

    @property
    def mig_strategies(self) -> list[MIGStrategy]:
        return self.objects(MIGStrategy)

    @property
    def sharing_strategies(self) -> list[GPUSharingStrategy]:
        return self.objects(GPUSharingStrategy)

    @property
    def scoring_profiles(self) -> list[ScoringProfile]:
        return self.objects(ScoringProfile)

    @property
    def budgets(self) -> list[GPUBudget]:
        return self.objects(GPUBudget)

    @property
    def pricing_catalogs(self) -> list[PricingCatalog]:
        return self.objects(PricingCatalog)

    @property
    def inventories(self) -> list[GPUInventory]:
        return self.objects(GPUInventory)

    @property
    def workloads(self) -> list[GPUWorkload]:
        return self.objects(GPUWorkload)

    @property
    def runtimes(self) -> list[WorkloadRuntime]:
        return self.objects(WorkloadRuntime)

    def default_scoring_profile(self) -> ScoringProfile | None:
        """The profile marked `default: true`, or the only profile, or None."""
        profiles = self.scoring_profiles
        marked = [p for p in profiles if p.spec.default]
        if marked:
            return marked[0]
        return profiles[0] if len(profiles) == 1 else None

    def pricing_catalog(self) -> PricingCatalog | None:
        catalogs = self.pricing_catalogs
        return catalogs[0] if catalogs else None

    def inventory(self) -> GPUInventory | None:
        """The repository's GPUInventory; several are merged into one (node names are checked unique)."""
        inventories = self.inventories
        if len(inventories) <= 1:
            return inventories[0] if inventories else None
        nodes = [n for inv in inventories for n in inv.spec.nodes]
        return GPUInventory(metadata=ObjectMeta(name=inventories[0].name), spec=GPUInventorySpec(nodes=nodes))


# -- walking ----------------------------------------------------------------------------------------------
