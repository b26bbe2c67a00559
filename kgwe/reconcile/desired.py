"""The build step of a reconcile: what the cluster should hold for one policy on the GPU nodes as read.

Plain data in, plain data out (policy, node facts, the live mig-parted configs, the rebalancing records):
the planner chooses MIG layouts, kgwe.render renders the objects, and the MIG rollout gets each node's
target config and its pool's gates. The reconciler keeps the result while its inputs are unchanged
(kgwe.reconcile.memo); the budget quotas are rendered apart (`quota_objects`), every pass, because their
Enforce caps change with spend, not with the policy.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

import orjson

from kgwe.cluster.inventory import GpuNodeFacts, config_layout, inventory_document
from kgwe.observability import tracing
from kgwe.planner.from_policy import plan_layouts
from kgwe.planner.rebalance import Record
from kgwe.policy.loader import PolicySet
from kgwe.policy.mig_strategy import MIGStrategy
from kgwe.policy.models import GPUInventory
from kgwe.policy.yaml_source import YamlSyntaxError, load_one
from kgwe.reconcile.rollout import NodeState, PoolPolicy
from kgwe.render.render import RenderOptions, cluster_objects, decide
from kgwe.vocab import DEFAULT_PENDING_TIMEOUT_SECONDS

MigConfigs = dict[str, list[dict[str, Any]]]  # mig-parted config name -> its entries


@dataclass(frozen=True)
class Inventory:
    """The GPU nodes as planning reads them: the GPUInventory document (also the snapshot committed back)
    and its validated model. Neither is changed by anyone reading them, so one is kept while the node facts
    and live mig-parted configs it was read from stay the same."""

    doc: dict[str, Any]
    model: GPUInventory


def read_inventory(facts: Sequence[GpuNodeFacts], live_configs: MigConfigs, name: str) -> Inventory:
    """The inventory of `facts`, their current layouts read from the live mig-parted configs."""
    doc = inventory_document(facts, name=name, mig_configs=live_configs)
    return Inventory(doc, GPUInventory.model_validate(doc))


@dataclass(frozen=True)
class Desired:
    objects: list[
        dict[str, Any]
    ]  # everything to server-side apply (no Node objects: nodes go through the rollout)
    node_configs: dict[str, str]  # node -> mig-parted config name
    pools: dict[str, PoolPolicy]
    node_pool: dict[str, str]
    inventory_doc: dict[str, Any]
    mig_configs: MigConfigs  # config name -> mig-parted entries, as rendered (plus the live ones)
    revisions: dict[str, str] = field(default_factory=dict)  # pool -> rollout revision (strategy digest)


def max_unavailable_value(value: int | str | Decimal | float) -> int | str:
    if isinstance(value, int):
        return value
    if isinstance(value, Decimal | float):
        return f"{value}%"
    return str(value)


def rollout_revision(strategy: MIGStrategy) -> str:
    """Names one revision of a pool's MIGStrategy (its name and a digest of its spec): nodes changed for it
    are recorded with it, so commits that leave the strategy alone never re-plan nodes already changed."""
    spec = strategy.spec.model_dump(mode="json", by_alias=True)
    digest = hashlib.sha256(orjson.dumps(spec, option=orjson.OPT_SORT_KEYS)).hexdigest()[:16]
    return f"{strategy.name[:40]}.{digest}"


def pool_policy(strategy: MIGStrategy) -> PoolPolicy:
    """The rollout gates of a MIGStrategy's pool."""
    rollout = strategy.spec.rollout
    timeout = (
        rollout.pending_timeout.total_seconds()
        if rollout.pending_timeout
        else DEFAULT_PENDING_TIMEOUT_SECONDS
    )
    return PoolPolicy(strategy.name, max_unavailable_value(rollout.max_unavailable), rollout.drain, timeout)


def build_desired(
    policy: PolicySet,
    facts: Sequence[GpuNodeFacts],
    read: Inventory,
    options: RenderOptions,
    live_configs: MigConfigs,
    sharing_named: Mapping[str, str],
    records: Mapping[str, Record],
) -> Desired:
    """Plan and render for the nodes `facts` (`read`: their inventory, `read_inventory`). `records`: the
    rebalancing record in force per pool (kgwe.planner.rebalance): its demand target is planned for, nodes
    changed under it are annotated with its revision, and once a decision was taken (epoch >= 1) only the
    nodes it named may change until the next one."""
    inventory = read.model
    strategies = sorted(policy.mig_strategies, key=lambda s: s.name)
    pools = {s.name: pool_policy(s) for s in strategies}
    revisions = {
        s.name: r.rollout_revision() if (r := records.get(s.name)) else rollout_revision(s)
        for s in strategies
    }
    selected: dict[str, str] = {}  # node -> the pool of the first strategy (by name) selecting it
    for strategy in strategies:
        for node in inventory.spec.nodes:
            if node.name not in selected and strategy.selects(node.labels):
                selected[node.name] = strategy.name
    with tracing.span("kgwe.reconcile.plan"):
        layouts = plan_layouts(
            policy.mig_strategies,
            inventory,
            pinned=_pinned(facts, selected, revisions, records),
            demand={p: dict(r.target) for p, r in records.items() if r.target},
            fewest_changes={p for p, r in records.items() if r.epoch > 0 and r.grow},  # as decided
        )
    # Every config a node's label names stays defined until no node names it (the MIG manager re-reads
    # it on any restart); the mig-parted ConfigMap is applied before any label points at a new config.
    named = {
        f.mig_config: live_configs[f.mig_config]
        for f in facts
        if f.mig_config and f.mig_config in live_configs
    }
    decided = decide(policy, inventory, layouts, named, sharing_named)
    objects = cluster_objects(policy, decided, options)
    node_pool = {n: pool for n, pool in selected.items() if n in decided.node_configs}
    configs = {
        **live_configs,
        **rendered_mig_configs(objects, options.mig_namespace, options.mig_config_name),
    }
    return Desired(objects, dict(decided.node_configs), pools, node_pool, read.doc, configs, revisions)


def _pinned(
    facts: Sequence[GpuNodeFacts],
    selected: Mapping[str, str],
    revisions: Mapping[str, str],
    records: Mapping[str, Record],
) -> set[str]:
    """Nodes whose layout stays: changed already for their pool's current strategy (one change per
    revision), or outside what the pool's last rebalancing decision named."""
    pinned = {
        f.name for f in facts if f.name in selected and f.rollout_revision == revisions[selected[f.name]]
    }
    decided = {p: r for p, r in records.items() if r.epoch > 0}
    return pinned | {n for n, p in selected.items() if p in decided and n not in decided[p].nodes}


def rendered_mig_configs(objects: Sequence[Mapping[str, Any]], namespace: str, name: str) -> MigConfigs:
    """The `mig-configs` of the rendered mig-parted ConfigMap ({} when it is not among `objects`)."""
    for obj in objects:
        meta = obj.get("metadata") or {}
        if obj.get("kind") == "ConfigMap" and meta.get("name") == name and meta.get("namespace") == namespace:
            return mig_configs_of(obj.get("data") or {})
    return {}


def mig_configs_of(data: Mapping[str, str]) -> MigConfigs:
    """The `mig-configs` of a mig-parted ConfigMap's data ({} when no key holds one). The live ConfigMap is
    anyone's with write access to its namespace, so it is read within the YAML loader's bounds."""
    for text in data.values():
        try:
            doc = load_one(text)
        except YamlSyntaxError:
            continue
        if isinstance(doc, dict) and isinstance(doc.get("mig-configs"), dict):
            configs: dict[str, list[dict[str, Any]]] = doc["mig-configs"]
            return configs
    return {}


def node_states(desired: Desired, facts: Sequence[GpuNodeFacts]) -> list[NodeState]:
    """What the rollout decision needs of each node a MIGStrategy manages, as read from the cluster."""
    return [
        NodeState(
            name=f.name,
            pool=desired.node_pool[f.name],
            desired_config=_same_or(desired, f),
            current_config=f.mig_config,
            state=f.mig_state,
            requested_at=f.requested_at,
            gpu_pods=len(f.gpu_pods),
            cordoned_by_kgwe=f.cordoned_by_kgwe,
            retry_requested=f.retry_requested,
            failure_acknowledged=f.failure_acknowledged,
        )
        for f in facts
        if f.name in desired.node_pool
    ]


def _same_or(desired: Desired, facts: GpuNodeFacts) -> str:
    """The config to select on a node: its current one when that already means the same layout (e.g. the
    GPU Operator's `all-disabled` vs KGWE's `kgwe-all-disabled`): no node is paused or drained for nothing."""
    wanted = desired.node_configs[facts.name]
    current = facts.mig_config
    if current and current != wanted:
        now = config_layout(desired.mig_configs.get(current), facts.gpus)
        if now is not None and now == config_layout(desired.mig_configs.get(wanted), facts.gpus):
            return current
    return wanted
