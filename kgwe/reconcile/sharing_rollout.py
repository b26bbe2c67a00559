"""The GPU sharing rollout: which nodes get their `nvidia.com/device-plugin.config` label next.

Switching a node's device-plugin config restarts the plugin and changes its allocatable GPUs, so it follows
the MIG rollout's rules (kgwe.reconcile.rollout, whose decision this reuses unchanged): a node whose GPUs
are held is switched only when the strategy drains (cordon, evict through the Eviction API, then relabel),
at most `maxUnavailable` nodes of a pool in flight, and a node that does not report the new sharing within
`pendingTimeout` stops its pool. The device plugin has no state label like the MIG manager's, so a node's
"state" is read from GFD: `success` once its `nvidia.com/gpu.replicas` and `nvidia.com/gpu.sharing-strategy`
report what its config asks for. Everything is read back from the nodes each pass (label, KGWE's
annotations), so a restarted controller continues where the last one stopped.

Pools are named `sharing/<strategy>`; nodes no strategy selects any more but still name a KGWE config go
back to `default` under the same gates.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime

from kubernetes.client.exceptions import ApiException

from kgwe.audit.log import NodeChange
from kgwe.cluster.inventory import GpuNodeFacts
from kgwe.cluster.nodes import NodeOps
from kgwe.gpu.sharing import GFD_STRATEGY, NOT_SHARED, node_sharing
from kgwe.policy.sharing_strategy import GPUSharingStrategy
from kgwe.reconcile.desired import max_unavailable_value
from kgwe.reconcile.node_actions import Record, Wording, carry_out
from kgwe.reconcile.rollout import (
    STATE_SUCCESS,
    Action,
    NodeState,
    PoolPolicy,
    PoolProgress,
    RolloutPlan,
    apply_actions,
    plan_rollout,
)
from kgwe.render.sharing import DEFAULT_CONFIG_KEY, config_key, device_plugin_configs
from kgwe.runtime.cluster import Cluster
from kgwe.runtime.kinds import CONFIG_MAP, NODE
from kgwe.runtime.leader import NotLeader
from kgwe.timestamps import format_rfc3339 as format_time
from kgwe.timestamps import parse_rfc3339 as parse_time
from kgwe.vocab import (
    CONFIG_NAME_PREFIX,
    DEFAULT_PENDING_TIMEOUT_SECONDS,
    DEVICE_PLUGIN_CONFIG_LABEL,
    SHARING_CORDONED_ANNOTATION,
    SHARING_REQUESTED_AT_ANNOTATION,
)

POOL_PREFIX = "sharing/"
UNSHARE_POOL = POOL_PREFIX + DEFAULT_CONFIG_KEY


@dataclass
class SharingProgress(PoolProgress):
    """A sharing pool's progress, worded for the device plugin (it reports no failure, only a timeout), with
    what NVIDIA's device-plugin pod on a switching node is doing when it is not running (config-manager's
    refusal, a crash loop): the plugin keeps its old config meanwhile, so that is where a person looks."""

    device_plugins: dict[str, str] = field(
        default_factory=dict
    )  # node -> its plugin pod's state, not Running

    def message(self) -> str:
        stuck = "; ".join(
            f"NVIDIA's device plugin on {n}: {s}" for n, s in sorted(self.device_plugins.items())
        )
        if self.timed_out:
            text = (
                f"pool {self.pool}: the device plugin did not report the new sharing in time on "
                f"{', '.join(self.timed_out)}; rollout stopped until the node reports it"
            )
        else:
            text = super().message().replace("waiting for idle GPUs", "waiting for idle GPUs (no drain)")
        return f"{text}; {stuck}" if stuck else text


def _progress(p: PoolProgress, device_plugins: Mapping[str, str]) -> SharingProgress:
    switching = set(p.in_progress) | set(p.timed_out)
    return SharingProgress(
        **{f.name: getattr(p, f.name) for f in fields(PoolProgress)},
        device_plugins={n: s for n, s in device_plugins.items() if n in switching and s != "Running"},
    )


def pool_policies(strategies: Sequence[GPUSharingStrategy]) -> dict[str, PoolPolicy]:
    out = {UNSHARE_POOL: PoolPolicy(UNSHARE_POOL)}
    for s in strategies:
        rollout = s.spec.rollout
        pending = rollout.pending_timeout
        timeout = pending.total_seconds() if pending else DEFAULT_PENDING_TIMEOUT_SECONDS
        out[POOL_PREFIX + s.name] = PoolPolicy(
            POOL_PREFIX + s.name, max_unavailable_value(rollout.max_unavailable), rollout.drain, timeout
        )
    return out


def _reports(facts: GpuNodeFacts, strategy: GPUSharingStrategy | None) -> bool:
    """Does GFD on this node report the sharing `strategy` asks for (None: not shared)?"""
    replicas, gfd = node_sharing(facts.labels)
    if strategy is None:
        return gfd == NOT_SHARED
    return replicas == strategy.spec.replicas and gfd == GFD_STRATEGY[strategy.spec.mode]


def sharing_node_states(
    strategies: Sequence[GPUSharingStrategy], facts: Sequence[GpuNodeFacts]
) -> list[NodeState]:
    """The rollout's view of every node a sharing strategy selects, or that still names a KGWE config."""
    ordered = sorted(strategies, key=lambda s: s.name)
    by_key = {config_key(s): s for s in ordered}
    states = []
    for f in facts:
        chosen = next((s for s in ordered if s.selects(f.labels)), None)
        current = f.labels.get(DEVICE_PLUGIN_CONFIG_LABEL)
        if chosen is None and not (current or "").startswith(CONFIG_NAME_PREFIX):
            # A node KGWE sent back to `default` stays in view until GFD reports it unshared: until then the
            # device plugin is still switching it, and the pool is not done.
            returning = current == DEFAULT_CONFIG_KEY and SHARING_REQUESTED_AT_ANNOTATION in f.annotations
            if not returning or _reports(f, None):
                continue
        desired = config_key(chosen) if chosen is not None else DEFAULT_CONFIG_KEY
        # `success` once GFD reports what the node's current label asks for (a config KGWE no longer
        # renders is taken as applied long ago); otherwise the plugin is still switching the node.
        if current == DEFAULT_CONFIG_KEY:
            settled = _reports(f, None)
        else:
            settled = current is not None and (current not in by_key or _reports(f, by_key[current]))
        state = STATE_SUCCESS if settled else None
        states.append(
            NodeState(
                name=f.name,
                pool=POOL_PREFIX + chosen.name if chosen is not None else UNSHARE_POOL,
                desired_config=desired,
                current_config=current,
                state=state,
                requested_at=parse_time(f.annotations.get(SHARING_REQUESTED_AT_ANNOTATION)),
                gpu_pods=len(f.gpu_pods),
                cordoned_by_kgwe=SHARING_CORDONED_ANNOTATION in f.annotations,
            )
        )
    return states


class SharingNodeOps(NodeOps):
    """The node writes of the sharing rollout: its own label and annotations, NodeOps' eviction."""

    label = DEVICE_PLUGIN_CONFIG_LABEL

    def relabel(
        self, name: str, config: str, now: datetime | None = None, revision: str | None = None
    ) -> None:
        self._patch(
            name,
            {
                "metadata": {
                    "labels": {DEVICE_PLUGIN_CONFIG_LABEL: config},
                    "annotations": {SHARING_REQUESTED_AT_ANNOTATION: format_time(now or datetime.now(UTC))},
                }
            },
            NodeChange(name, "relabel", self.label, config),
        )

    def cordon(self, name: str, config: str) -> None:
        self._patch(
            name,
            {
                "spec": {"unschedulable": True},
                "metadata": {"annotations": {SHARING_CORDONED_ANNOTATION: config}},
            },
            NodeChange(name, "cordon"),
        )

    def uncordon(self, name: str) -> None:
        meta = (self.cluster.get(NODE, name) or {}).get("metadata") or {}
        if SHARING_CORDONED_ANNOTATION not in (meta.get("annotations") or {}):
            return
        self._patch(
            name,
            {
                "spec": {"unschedulable": None},
                "metadata": {"annotations": {SHARING_CORDONED_ANNOTATION: None}},
            },
            NodeChange(name, "uncordon"),
        )


WORDING = Wording(cordoned="to switch its GPU sharing", uncordoned="after its GPU sharing switched")


def run_sharing_rollout(
    ops: SharingNodeOps,
    strategies: Sequence[GPUSharingStrategy],
    facts: Sequence[GpuNodeFacts],
    now: datetime,
    *,
    record: Record,
    device_plugins: Mapping[str, str] | None = None,
) -> RolloutPlan:
    """Decide and carry out this pass's sharing actions; the plan as it stands after them.
    `device_plugins`: node -> the state of NVIDIA's device-plugin pod on it (kgwe.fleet.nodes), where one
    runs; a switching node's plugin that is not running is named in its pool's progress and an Event."""
    states = sharing_node_states(strategies, facts)
    policies = pool_policies(strategies)
    plan = plan_rollout(states, policies, now)
    done: list[Action] = []
    failed_nodes: set[str] = set()
    for action in plan.actions:  # a node's actions are in order (cordon before evict)
        if action.node in failed_nodes or action.kind == "acknowledge":
            continue
        try:
            carry_out(ops, action, now, None, record, WORDING)
        except NotLeader:
            raise
        except ApiException as exc:
            record("Warning", "RolloutActionFailed", f"{action.kind} {action.node}: {exc.reason}")
            failed_nodes.add(action.node)
            continue
        done.append(action)
    selected: dict[str, list[str]] = {}
    for action in done:
        if action.kind == "relabel":
            selected.setdefault(action.config or "", []).append(action.node)
    for config, names in sorted(selected.items()):
        shown = ", ".join(sorted(names)[:10]) + (", ..." if len(names) > 10 else "")
        record(
            "Normal",
            "DevicePluginConfigSelected",
            f"{DEVICE_PLUGIN_CONFIG_LABEL}={config} on {len(names)} node(s): {shown}",
        )
    after = plan_rollout(apply_actions(states, done, now), policies, now)
    pools = {name: _progress(p, device_plugins or {}) for name, p in after.pools.items()}
    for progress in pools.values():
        for node, state in sorted(progress.device_plugins.items()):
            record(
                "Warning",
                "DevicePluginNotRunning",
                f"NVIDIA's device plugin on {node} is not running ({state}): the node keeps its former GPU "
                f"sharing until it does; see kubectl -n <GPU Operator namespace> describe pod on {node}",
            )
    return RolloutPlan(tuple(done), pools)


def named_sharing_configs(
    cluster: Cluster, namespace: str, name: str, facts: Sequence[GpuNodeFacts]
) -> dict[str, str]:
    """The live device-plugin configs (key -> text) that nodes name through KGWE's label values (`default`
    or `kgwe-...`), so the rendered ConfigMap keeps them; {} when no node names one."""
    named = {
        value
        for f in facts
        if (value := f.labels.get(DEVICE_PLUGIN_CONFIG_LABEL))
        and (value == DEFAULT_CONFIG_KEY or value.startswith(CONFIG_NAME_PREFIX))
    }
    if not named:
        return {}
    live = (cluster.get(CONFIG_MAP, name, namespace) or {}).get("data") or {}
    kept = {key: live[key] for key in sorted(named) if key in live}
    kept.setdefault(DEFAULT_CONFIG_KEY, device_plugin_configs(())[DEFAULT_CONFIG_KEY])
    return kept


def merge(mig: RolloutPlan, sharing: RolloutPlan) -> RolloutPlan:
    """One plan for status: the MIG pools and the sharing pools side by side."""
    return RolloutPlan(mig.actions + sharing.actions, {**mig.pools, **sharing.pools})
