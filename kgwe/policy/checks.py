"""Checks across objects of one repository: what no single object's schema can see.

Each check adds Diagnostics to the PolicySet; none raises. GPU facts come from kgwe.gpu.catalog, so a
profile name is judged against the GPU model(s) a strategy really targets.
"""

from __future__ import annotations

import functools
from collections import defaultdict
from collections.abc import Sequence
from decimal import Decimal
from typing import Any

from kgwe.gpu import catalog
from kgwe.gpu.catalog import GPUModel
from kgwe.gpu.layouts import fit
from kgwe.policy.admission import ClusterView, PolicyView, findings
from kgwe.policy.diagnostics import Path as FieldPath
from kgwe.policy.diagnostics import did_you_mean
from kgwe.policy.gpu_workload import BATCH_TYPES, GPURequirements, NodeOffer
from kgwe.policy.models import (
    POLICY_KINDS,
    GPUBudget,
    GPUInventory,
    GPUSharingStrategy,
    GPUWorkload,
    InventoryNode,
    KgweObject,
    MIGStrategy,
    PodTemplatePolicy,
    PricingCatalog,
    ScoringProfile,
    WorkloadRuntime,
)
from kgwe.policy.policy_set import LoadedObject, PolicySet
from kgwe.policy.quota_namespaces import protected_namespace, refused_quota_namespace
from kgwe.policy.sharing_strategy import MPS_FULL_LIMIT_CAPABILITY, MPS_MAX_CLIENTS, MPS_MAX_CLIENTS_BELOW_7_5
from kgwe.policy.workload_runtime import framework_key
from kgwe.topology import known
from kgwe.vocab import MIG_RESOURCE_PREFIX, is_gpu_resource

Strategy = MIGStrategy | GPUSharingStrategy  # the kinds that select nodes and may not overlap


def _at(entry: LoadedObject[KgweObject]) -> str:
    return f"{entry.file}:{entry.doc.line}"


def _known_topologies() -> list[str]:
    """Names and aliases of the real topologies kgwe.topology.known ships."""
    return [*known.names(), *known.aliases()]


def check_duplicates(ps: PolicySet) -> None:
    seen: dict[tuple[str, str, str], LoadedObject[KgweObject]] = {}
    for entry in ps.entries:
        obj = entry.obj
        if not obj.name:
            continue
        ns = obj.metadata.namespace if obj.metadata and obj.metadata.namespace else ""
        key = (obj.kind, ns, obj.name)
        first = seen.get(key)
        if first is None:
            seen[key] = entry
        else:
            ps.report(
                entry,
                ("metadata", "name"),
                f'duplicate {obj.kind} "{obj.name}" (first defined at {_at(first)})',
            )


def _inventory_nodes(ps: PolicySet) -> list[tuple[LoadedObject[GPUInventory], int, InventoryNode]]:
    inventories = ps.entries_of(GPUInventory)
    return [(e, i, n) for e in inventories for i, n in enumerate(e.obj.spec.nodes)]


@functools.cache
def _topology_gpu_count(name: str) -> int:
    return len(known.load(name).gpus)


def check_inventory(ps: PolicySet) -> None:
    topologies = _known_topologies()
    known_upper = {t.upper() for t in topologies}
    seen: dict[str, LoadedObject[GPUInventory]] = {}
    for entry, i, node in _inventory_nodes(ps):
        base = ("spec", "nodes", i)
        if node.name in seen:
            ps.report(
                entry, (*base, "name"), f'node "{node.name}" listed twice (also in {_at(seen[node.name])})'
            )
        seen[node.name] = entry
        if node.topology is not None:
            if node.topology.upper() not in known_upper:
                hint = did_you_mean(node.topology, topologies)
                ps.report(
                    entry,
                    (*base, "topology"),
                    f'unknown topology "{node.topology}"{hint}; known: {", ".join(sorted(topologies))}',
                )
            elif (count := _topology_gpu_count(node.topology)) != node.gpus:
                ps.report(
                    entry,
                    (*base, "gpus"),
                    f"node lists {node.gpus} GPUs but topology {node.topology} has {count}",
                )
        model = catalog.model_for_product(node.product)
        if model is None:
            ps.report(
                entry,
                (*base, "product"),
                f'unknown GPU product "{node.product}"; KGWE treats the node as not MIG-capable',
                "warning",
            )
        for j, dev in enumerate(node.devices):
            if dev.mig is None:
                continue
            where = (*base, "devices", j, "mig")
            if model is None or not model.mig_capable:
                ps.report(
                    entry,
                    where,
                    f'GPU {dev.index} has MIG instances but "{node.product}" does not support MIG',
                )
                continue
            bad = [p for p in dev.mig if p not in model.profiles]
            if bad:
                ps.report(entry, where, _invalid_profiles_message(bad, model))
                continue
            if fit(model, dev.mig) is None:
                ps.report(
                    entry, where, f"GPU {dev.index}: {', '.join(dev.mig)} do not fit on one {model.key}"
                )


def _invalid_profiles_message(bad: list[str], model: GPUModel) -> str:
    names = ", ".join(f'"{b}"' for b in bad)  # the valid names follow; a guess would only mislead
    return f"MIG profile {names} not valid for {model.key} (valid: {', '.join(model.profiles)})"


def _models_named_by(selector: dict[str, str]) -> set[GPUModel] | None:
    """Models the selector's label values name (intersection), None when no value names a model."""
    named: set[GPUModel] | None = None
    for value in selector.values():
        models = set(catalog.models_matching(value))
        if models:
            named = models if named is None else named & models
    return named


def _check_profiles(ps: PolicySet, entry: LoadedObject[MIGStrategy], nodes: list[InventoryNode]) -> None:
    strategy: MIGStrategy = entry.obj
    part = strategy.spec.partition_strategy
    if part is None:
        return
    shares_path = ("spec", "partitionStrategy", "preferredProfiles")
    if nodes:
        models: set[GPUModel] = set()
        for node in nodes:
            model = catalog.model_for_product(node.product)
            if model is None or not model.mig_capable:
                ps.report(
                    entry,
                    ("spec", "nodeSelector"),
                    f'selects node "{node.name}" whose GPU "{node.product}" does not support MIG',
                )
            else:
                models.add(model)
        for i, share in enumerate(part.preferred_profiles):
            lacking = sorted((m for m in models if share.profile not in m.profiles), key=lambda m: m.key)
            for model in lacking:
                ps.report(entry, (*shares_path, i), _invalid_profiles_message([share.profile], model))
        return
    named = _models_named_by(strategy.spec.node_selector)
    candidates = [m for m in (catalog.all_models() if named is None else named) if m.mig_capable]
    candidates.sort(key=lambda m: m.key)
    if not candidates:
        names = ", ".join(sorted(m.key for m in named or ()))
        message = (
            f"selects GPUs that do not support MIG ({names})"
            if names
            else "the nodeSelector's label values name GPU models that exclude each other"
        )
        ps.report(entry, ("spec", "nodeSelector"), message)
        return
    valid_everywhere = True
    for i, share in enumerate(part.preferred_profiles):
        if not any(share.profile in m.profiles for m in candidates):
            valid_everywhere = False
            known = sorted({p for m in candidates for p in m.profiles})
            scope = ", ".join(m.key for m in candidates) if named is not None else "any known GPU"
            ps.report(
                entry,
                (*shares_path, i),
                f'MIG profile "{share.profile}"{did_you_mean(share.profile, known)} is not valid for {scope}',
            )
    wanted = {s.profile for s in part.preferred_profiles}
    if valid_everywhere and not any(wanted <= set(m.profiles) for m in candidates):
        ps.report(
            entry,
            shares_path,
            f"no single GPU model offers all of {', '.join(sorted(wanted))}; "
            "profile names differ between models (e.g. 1g.10gb on H100-80GB vs 1g.12gb on H100 NVL)",
        )


def _check_shares(ps: PolicySet, entry: LoadedObject[MIGStrategy], nodes: list[InventoryNode]) -> None:
    part = entry.obj.spec.partition_strategy
    if part is None:
        return
    path = ("spec", "partitionStrategy", "preferredProfiles")
    seen: dict[str, int] = {}
    for i, share in enumerate(part.preferred_profiles):
        if share.profile in seen:
            ps.report(
                entry,
                (*path, i),
                f'profile "{share.profile}" listed twice (also at index {seen[share.profile]})',
            )
        seen.setdefault(share.profile, i)
    percents = [s.percent for s in part.preferred_profiles if s.percent is not None]
    counts = [s for s in part.preferred_profiles if s.count is not None]
    if percents and counts:
        ps.report(entry, path, "mixes shares (70%) and instance counts (4); use one form per strategy")
        return
    if percents:
        total = sum(percents, Decimal(0))
        if total != 100:
            ps.report(entry, path, f"shares add up to {total.normalize():f}%; they must add up to 100%")
    if counts and nodes:
        capacity = 0
        needed = 0
        for node in nodes:
            model = catalog.model_for_product(node.product)
            if model is not None and model.mig_capable:
                capacity += node.gpus * model.compute_slots
                needed_model = model
        if capacity:
            for s in counts:
                prof = needed_model.profiles.get(s.profile)
                needed += (prof.compute_slices if prof else 0) * (s.count or 0)
            if needed > capacity:
                ps.report(
                    entry,
                    path,
                    f"instance counts need {needed} compute slices but the selected nodes have {capacity}",
                )


class _NodeIndex:
    """Inventory nodes by label (key, value), so a selector finds its nodes without scanning them all."""

    def __init__(self, nodes: list[InventoryNode]) -> None:
        self.nodes = nodes
        self.by_label: dict[tuple[str, str], set[int]] = defaultdict(set)
        for i, node in enumerate(nodes):
            for item in node.labels.items():
                self.by_label[item].add(i)

    def select(self, selector: dict[str, str]) -> list[InventoryNode]:
        if not selector:
            return list(self.nodes)
        sets = sorted((self.by_label.get(item, set()) for item in selector.items()), key=len)
        hits = set.intersection(*sets) if sets else set()
        return [self.nodes[i] for i in sorted(hits)]


def _compatible_pairs(selectors: list[dict[str, str]]) -> list[tuple[int, int]]:
    """(earlier, later) index pairs of selectors one node could satisfy together (no key with two values).

    Selectors are grouped by key set and, per pair of key sets, by their values on the shared keys, so the
    work is linear in the number of strategies for the usual repository with few distinct key sets."""
    groups: dict[frozenset[str], list[int]] = defaultdict(list)
    for i, sel in enumerate(selectors):
        groups[frozenset(sel)].append(i)
    keysets = list(groups)
    pairs: set[tuple[int, int]] = set()
    for a_pos, ka in enumerate(keysets):
        for kb in keysets[a_pos:]:
            shared = sorted(ka & kb)
            by_projection: dict[tuple[str, ...], list[int]] = defaultdict(list)
            for i in groups[ka]:
                by_projection[tuple(selectors[i][k] for k in shared)].append(i)
            for j in groups[kb] if kb != ka else []:
                for i in by_projection.get(tuple(selectors[j][k] for k in shared), ()):
                    pairs.add((min(i, j), max(i, j)))
            if kb == ka:
                for members in by_projection.values():
                    pairs.update((x, y) for n, x in enumerate(members) for y in members[n + 1 :])
    return sorted(pairs, key=lambda p: (p[1], p[0]))


def _selected_nodes(ps: PolicySet, entry: LoadedObject[Strategy], index: _NodeIndex) -> list[InventoryNode]:
    """The inventory nodes a strategy's nodeSelector selects; a warning when it selects none."""
    nodes = index.select(entry.obj.spec.node_selector)
    if index.nodes and not nodes:
        ps.report(
            entry,
            ("spec", "nodeSelector"),
            "selects no node of the GPUInventory (the strategy has no effect there)",
            "warning",
        )
    return nodes


def check_mig_strategies(ps: PolicySet) -> None:
    entries = ps.entries_of(MIGStrategy)
    index = _NodeIndex([n for _, _, n in _inventory_nodes(ps)])
    selected: list[list[InventoryNode]] = []
    for entry in entries:
        strategy: MIGStrategy = entry.obj
        nodes = _selected_nodes(ps, entry, index)
        selected.append(nodes)
        if strategy.spec.mig_enabled:
            _check_profiles(ps, entry, nodes)
            _check_shares(ps, entry, nodes)
    _report_overlaps(
        ps, entries, selected, "MIGStrategy", "give the selectors a label key with different values"
    )


def _report_overlaps(
    ps: PolicySet,
    entries: Sequence[LoadedObject[Strategy]],
    selected: list[list[InventoryNode]],
    kind: str,
    advice: str,
) -> None:
    """Each later strategy of `kind` whose nodeSelector can match a node an earlier one matches is an error
    on its nodeSelector, naming a node both select when the inventory has one."""
    selectors = [e.obj.spec.node_selector for e in entries]
    for i, j in _compatible_pairs(selectors):
        earlier, later = entries[i], entries[j]
        names_i = {n.name for n in selected[i]}
        both = [n.name for n in selected[j] if n.name in names_i]
        example = f" (e.g. node {both[0]})" if both else ""
        ps.report(
            later,
            ("spec", "nodeSelector"),
            f'claims the same nodes as {kind} "{earlier.obj.name}" ({_at(earlier)}){example}; {advice}',
        )


def mps_client_limit(model: GPUModel) -> int:
    """MPS clients one GPU of this model serves: 48, or 16 below compute capability 7.5."""
    cc = model.compute_capability
    return MPS_MAX_CLIENTS_BELOW_7_5 if cc is not None and cc < MPS_FULL_LIMIT_CAPABILITY else MPS_MAX_CLIENTS


def _sharing_models(strategy: GPUSharingStrategy, nodes: list[InventoryNode]) -> set[GPUModel]:
    """GPU models a sharing strategy reaches: its inventory nodes' products, else what its selector names."""
    if nodes:
        return {m for n in nodes if (m := catalog.model_for_product(n.product)) is not None}
    return _models_named_by(strategy.spec.node_selector) or set()


def check_sharing_strategies(ps: PolicySet) -> None:
    entries = ps.entries_of(GPUSharingStrategy)
    if not entries:
        return
    index = _NodeIndex([n for _, _, n in _inventory_nodes(ps)])
    selected: list[list[InventoryNode]] = []
    for entry in entries:
        strategy: GPUSharingStrategy = entry.obj
        nodes = _selected_nodes(ps, entry, index)
        selected.append(nodes)
        if strategy.spec.mode == "MPS":
            for model in sorted(_sharing_models(strategy, nodes), key=lambda m: m.key):
                limit = mps_client_limit(model)
                if strategy.spec.replicas > limit:
                    ps.report(
                        entry,
                        ("spec", "replicas"),
                        f"MPS serves at most {limit} clients per GPU on {model.key}, "
                        f"replicas is {strategy.spec.replicas}",
                    )
    _report_overlaps(
        ps,
        entries,
        selected,
        "GPUSharingStrategy",
        "a node has one device-plugin config: give the selectors a label key with different values",
    )
    sharing_selectors = [e.obj.spec.node_selector for e in entries]
    migs = [e for e in ps.entries_of(MIGStrategy) if e.obj.spec.mig_enabled]
    selectors = [e.obj.spec.node_selector for e in migs] + sharing_selectors
    for i, j in _compatible_pairs(selectors):
        if i >= len(migs) or j < len(migs):
            continue  # only a MIG strategy paired with a sharing strategy
        mig, sharing = migs[i], entries[j - len(migs)]
        what = (
            "MPS is not supported on MIG devices"
            if sharing.obj.spec.mode == "MPS"
            else "KGWE time-slices whole GPUs only"
        )
        ps.report(
            sharing,
            ("spec", "nodeSelector"),
            f'{what}: claims the same nodes as MIGStrategy "{mig.obj.name}" ({_at(mig)}), which enables '
            "MIG; select nodes whose MIGStrategy has `migEnabled: false` or none",
        )


def check_scoring_profiles(ps: PolicySet) -> None:
    entries = ps.entries_of(ScoringProfile)
    defaults = [e for e in entries if e.obj.spec.default]
    for extra in defaults[1:]:
        ps.report(
            extra,
            ("spec", "default"),
            f'a second default ScoringProfile ("{defaults[0].obj.name}" at {_at(defaults[0])} is default)',
        )
    # a profile that did not load may be the default one: its own error says enough
    unreadable = any(d.kind == ScoringProfile.KIND for d in ps.errors)
    if len(entries) > 1 and not defaults and not unreadable:
        ps.report(entries[0], ("metadata", "name"), "several ScoringProfiles and none has `default: true`")


def check_pricing(ps: PolicySet) -> None:
    catalogs = ps.entries_of(PricingCatalog)
    for extra in catalogs[1:]:
        ps.report(
            extra,
            ("metadata", "name"),
            f"only one PricingCatalog per repository (another at {_at(catalogs[0])})",
        )
    for entry in catalogs:
        seen: dict[str, int] = {}
        for i, price in enumerate(entry.obj.spec.gpus):
            key = price.product.lower()
            if key in seen:
                ps.report(entry, ("spec", "gpus", i, "product"), f'product "{price.product}" priced twice')
            seen.setdefault(key, i)
    nodes = _inventory_nodes(ps)
    if not nodes:
        return
    if not catalogs:
        if PricingCatalog.KIND in ps.invalid_kinds:
            return  # its own errors are reported; "no catalog" would mislead
        inv = nodes[0][0]
        ps.report(
            inv,
            ("spec", "nodes"),
            "no PricingCatalog in the repository: GPU costs cannot be computed",
            "warning",
        )
        return
    pricing = catalogs[0].obj
    reported: set[str] = set()
    for inventory, i, node in nodes:
        if node.product in reported or pricing.spec.price_for(node.product) is not None:
            continue
        reported.add(node.product)
        ps.report(
            inventory,
            ("spec", "nodes", i, "product"),
            f'no price for GPU product "{node.product}" in PricingCatalog "{pricing.name}" '
            f"({_at(catalogs[0])})",
        )


def _mig_resource_ok(resource: str) -> tuple[bool, list[str]]:
    name = resource.removeprefix("requests.")
    if not name.startswith(MIG_RESOURCE_PREFIX):
        return True, []
    profile = name.removeprefix(MIG_RESOURCE_PREFIX)
    known = sorted({p.replace("+", ".") for m in catalog.all_models() for p in m.profiles})
    return profile in known, known


def check_budgets(ps: PolicySet) -> None:
    owner: dict[str, LoadedObject[GPUBudget]] = {}
    catalogs = ps.pricing_catalogs
    currency = catalogs[0].spec.currency if catalogs else None
    for entry in ps.entries_of(GPUBudget):
        budget: GPUBudget = entry.obj
        for i, ns in enumerate(budget.spec.namespaces):
            refused = refused_quota_namespace(ns)
            if refused:
                ps.report(entry, ("spec", "namespaces", i), refused)
            first = owner.get(ns)
            if first is not None and first is not entry:
                ps.report(
                    entry,
                    ("spec", "namespaces", i),
                    f'namespace "{ns}" is already claimed by GPUBudget "{first.obj.name}" ({_at(first)})',
                )
            elif first is entry:
                ps.report(entry, ("spec", "namespaces", i), f'namespace "{ns}" listed twice')
            owner.setdefault(ns, entry)
        previous = None
        for i, alert in enumerate(budget.spec.alerts):
            if alert.at <= 0:
                ps.report(entry, ("spec", "alerts", i, "at"), "alert threshold must be greater than 0%")
            if previous is not None and alert.at <= previous:
                ps.report(
                    entry,
                    ("spec", "alerts", i, "at"),
                    f"alert thresholds must increase: {alert.at.normalize():f}% comes after "
                    f"{previous.normalize():f}%",
                )
            previous = alert.at
        for resource in budget.spec.quota:
            ok, known = _mig_resource_ok(resource)
            if not ok:
                profile = resource.removeprefix("requests.").removeprefix(MIG_RESOURCE_PREFIX)
                ps.report(
                    entry,
                    ("spec", "quota", resource),
                    f'"{resource}" names no MIG profile of any known GPU{did_you_mean(profile, known)}',
                )
        if currency is not None and budget.spec.limit.currency != currency:
            ps.report(
                entry,
                ("spec", "limit", "currency"),
                f"budget in {budget.spec.limit.currency} but the PricingCatalog prices in {currency}",
            )


def _per_role(wl: GPUWorkload, attribute: str, key: str) -> list[tuple[FieldPath, Any]]:
    """A field the workload sets for all roles and each role may override (`key` in YAML), with its field
    path: the workload's, then every role's own."""
    out: list[tuple[FieldPath, Any]] = [(("spec", key), getattr(wl.spec, attribute))]
    for i, role in enumerate(wl.spec.roles or []):
        if getattr(role, attribute) is not None:
            out.append((("spec", "roles", i, key), getattr(role, attribute)))
    return out


def _requirements(wl: GPUWorkload) -> list[tuple[FieldPath, GPURequirements]]:
    """Every gpuRequirements block of a workload with its field path."""
    return _per_role(wl, "gpu_requirements", "gpuRequirements")


def inventory_offers(nodes: list[InventoryNode]) -> list[NodeOffer]:
    """What each inventory node can give one pod (MIG profiles: those its GPU model supports)."""
    offers = []
    for node in nodes:
        model = catalog.model_for_product(node.product)
        profiles = frozenset(model.profiles) if model and model.mig_capable else frozenset()
        offers.append(NodeOffer(gpus=node.gpus, product=node.product, mig_profiles=profiles))
    return offers


def _known(ps: PolicySet, kind: type[KgweObject], sets: list[PolicySet]) -> bool:
    """Whether the objects of `kind` in `sets` are all there is: none of its documents failed to load."""
    return not any(kind.KIND in s.invalid_kinds for s in sets)


def workload_policy_view(ps: PolicySet) -> PolicyView:
    """What the GPUWorkloads of `ps` are checked against: its own policy objects plus `ps.policy`'s; nothing
    when `ps` holds no policy at all (a manifest validated on its own). A kind with a document that failed
    to load is not known (its errors are reported; a refusal built on a partial list would mislead)."""
    sets = [ps, *([ps.policy] if ps.policy is not None else [])]
    policy_kinds = tuple(k for k in POLICY_KINDS if k is not GPUInventory)
    if not any(isinstance(e.obj, policy_kinds) for s in sets for e in s.entries) and ps.policy is None:
        return ps.cluster_policy or PolicyView()
    profiles = {p.name: p.spec.strategy for s in sets for p in s.scoring_profiles}
    runtimes = {r.name: r.spec for s in sets for r in s.runtimes}
    quotas = {
        ns: (b.name, b.spec.quota_hard())
        for s in sets
        for b in s.budgets
        if b.spec.quota
        for ns in b.spec.namespaces
    }
    template_policies = [p for s in sets for p in s.objects(PodTemplatePolicy)]
    return PolicyView(
        profiles=profiles if _known(ps, ScoringProfile, sets) else None,
        runtimes=runtimes if _known(ps, WorkloadRuntime, sets) else None,
        budget_quotas=quotas if _known(ps, GPUBudget, sets) else None,
        template_policies=template_policies if _known(ps, PodTemplatePolicy, sets) else None,
    )


def check_workloads(ps: PolicySet) -> None:
    """Each GPUWorkload against what the controller would refuse (kgwe.policy.admission): errors for what
    the manifest and the policy tell, warnings for what only the cluster can (errors with a ClusterView)."""
    entries = ps.entries_of(GPUWorkload)
    if not entries:
        return
    policy = workload_policy_view(ps)
    profiles = set(policy.profiles or ()) or {p.name for p in ps.scoring_profiles}
    known_profiles = sorted({p for m in catalog.all_models() for p in m.profiles})
    cluster = ps.cluster
    if cluster is None:
        inventory = ps.inventory() or (ps.policy.inventory() if ps.policy is not None else None)
        offers = inventory_offers(inventory.spec.nodes) if inventory else None
        cluster = ClusterView(offers=offers, offers_from="the GPUInventory")
    for entry in entries:
        wl: GPUWorkload = entry.obj
        if wl.metadata is None:
            ps.report(entry, (), "no metadata.name: the API server will reject it without a name", "warning")
        for base, req in _requirements(wl):
            if req.mig_profile and req.mig_profile not in known_profiles:
                ps.report(
                    entry,
                    (*base, "migProfile"),
                    f'"{req.mig_profile}" is not a MIG profile of any known GPU'
                    + did_you_mean(req.mig_profile, known_profiles),
                )
            if req.product and not catalog.models_matching(req.product):
                ps.report(entry, (*base, "product"), f'"{req.product}" names no known GPU model')
        namespace = (wl.metadata.namespace if wl.metadata else None) or ps.namespace
        for f in findings(wl, namespace, policy, cluster):
            ps.report(entry, f.path, f"{f.message} [{f.reason}]" if f.reason else f.message, f.severity)
        if wl.spec.scoring_profile and profiles and wl.spec.scoring_profile not in profiles:
            ps.report(
                entry,
                ("spec", "scoringProfile"),
                f'no ScoringProfile "{wl.spec.scoring_profile}" in this repository'
                + did_you_mean(wl.spec.scoring_profile, profiles),
                "warning",
            )


def check_runtimes(ps: PolicySet) -> None:
    """One runtime per framework and workload type; a launcher only where pods get a rendezvous."""
    owner: dict[tuple[str, str], LoadedObject[WorkloadRuntime]] = {}
    for entry in ps.entries_of(WorkloadRuntime):
        spec = entry.obj.spec
        for i, wtype in enumerate(spec.workload_types):
            key = (framework_key(spec.framework), wtype)
            first = owner.setdefault(key, entry)
            if first is not entry:
                ps.report(
                    entry,
                    ("spec", "workloadTypes", i),
                    f'{spec.framework} {wtype} is already served by WorkloadRuntime "{first.obj.name}" '
                    f"({_at(first)}); a workload could not tell which to use",
                )
        if spec.launcher != "None" and not any(t in BATCH_TYPES for t in spec.workload_types):
            ps.report(
                entry,
                ("spec", "launcher"),
                f"launcher {spec.launcher} wires a rendezvous between a job's pods, but "
                f"{', '.join(spec.workload_types)} pods are served by a Deployment without one; use None",
            )
        for j, container in enumerate((spec.template.get("spec") or {}).get("containers") or []):
            for section in ("limits", "requests"):
                for resource in (container.get("resources") or {}).get(section) or {}:
                    if is_gpu_resource(resource):
                        ps.report(
                            entry,
                            ("spec", "template", "spec", "containers", j, "resources", section, resource),
                            "GPU resources come from each workload's gpuRequirements; this one is replaced",
                            "warning",
                        )


def check_pod_template_policies(ps: PolicySet) -> None:
    """One policy per namespace, one for every other namespace; none for namespaces no workload runs in."""
    everywhere: LoadedObject[PodTemplatePolicy] | None = None
    claims: dict[str, LoadedObject[PodTemplatePolicy]] = {}
    for entry in ps.entries_of(PodTemplatePolicy):
        policy: PodTemplatePolicy = entry.obj
        if not policy.spec.namespaces:
            if everywhere is not None:
                ps.report(
                    entry,
                    ("spec",),
                    "a second PodTemplatePolicy for every other namespace (the first is at "
                    f"{_at(everywhere)}); name the namespaces this one is for",
                )
            everywhere = everywhere or entry
        for i, ns in enumerate(policy.spec.namespaces):
            first = claims.setdefault(ns, entry)
            if first is not entry:
                ps.report(
                    entry,
                    ("spec", "namespaces", i),
                    f'namespace "{ns}" already has PodTemplatePolicy "{first.obj.name}" ({_at(first)})',
                )
            protected = protected_namespace(ns)
            if protected:
                ps.report(
                    entry, ("spec", "namespaces", i), f"{protected}: no GPUWorkload runs there", "warning"
                )


CHECKS = (
    check_duplicates,
    check_inventory,
    check_mig_strategies,
    check_sharing_strategies,
    check_scoring_profiles,
    check_pricing,
    check_budgets,
    check_runtimes,
    check_workloads,
    check_pod_template_policies,
)


def run_checks(ps: PolicySet) -> None:
    for check in CHECKS:
        check(ps)
