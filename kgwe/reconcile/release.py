"""Offboarding, the decision: what KGWE wrote for one PolicyRepository, and how to release it once the
PolicyRepository is deleted (docs/offboarding.md). Pure: the I/O step (kgwe.reconcile.release_step) reads
the cluster into `Written`, carries out the returned `ReleasePlan`, and asks again on the next pass until the
plan says `finished`; everything is read back from the cluster each time, so a new leader, or a controller
restarted mid-way, continues where the last one stopped and never repeats a change.

What KGWE wrote, read from the cluster alone (the policy in Git may be gone or unreachable):
- the objects `status.inventory` lists that still carry this repository's label: budget ResourceQuotas,
  the rendered ConfigMaps (scheduler config, scoring, runtimes, pod-template policy) and the GPU Operator's
  mig-parted and device-plugin ConfigMaps;
- on nodes, while those two ConfigMaps are this repository's (or gone): `nvidia.com/mig.config` set by KGWE
  (a `kgwe-` config, or KGWE's requested-at annotation), `nvidia.com/device-plugin.config` set by KGWE, its
  cordons, its rollout annotations and the audit stamp.

`Delete` (the default) releases it all under the rollout's own rules (kgwe.reconcile.rollout, reused
unchanged; docs/safety.md): KGWE's cordons are lifted first (a drain in progress is given up, nothing more
is evicted); a node's MIG label goes back to the GPU Operator's default `all-disabled` and its device-plugin
label to `default`, then away, only while no pod holds its GPUs and never while the MIG manager applies a
config, at most `maxUnavailable` nodes in flight; a node that fails stops the way out as it stops a rollout.
The two GPU Operator ConfigMaps go last, once no node names a config of theirs (never a dangling config);
every other object goes at once; an object annotated `kgwe.nvidia.io/prune: disabled` stays.

`Retain` leaves the policy in force, unmanaged: objects, labels and rollout annotations stay (a later
PolicyRepository takes them over where they stand); only what would stay stuck without KGWE is released:
Enforce caps on budget quotas are lifted to the budget's own limit, and KGWE's cordons are lifted.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime

from kgwe.gpu.sharing import NOT_SHARED, node_sharing
from kgwe.reconcile.rollout import (
    STATE_SUCCESS,
    Action,
    NodeState,
    PoolPolicy,
    PoolProgress,
    plan_rollout,
    resolve_max_unavailable,
)
from kgwe.render.sharing import DEFAULT_CONFIG_KEY
from kgwe.timestamps import parse_rfc3339
from kgwe.vocab import (
    ACKNOWLEDGED_ANNOTATION,
    CONFIG_NAME_PREFIX,
    CORDONED_ANNOTATION,
    DEFAULT_DELETION_POLICY,
    DEFAULT_PENDING_TIMEOUT_SECONDS,
    DELETE_POLICY,
    DELETION_POLICIES,
    DEVICE_PLUGIN_CONFIG_LABEL,
    MIG_ALL_DISABLED,
    MIG_CONFIG_LABEL,
    MIG_STATE_LABEL,
    PRUNE_ANNOTATION,
    PRUNE_DISABLED,
    REPOSITORY_LABEL,
    REQUESTED_AT_ANNOTATION,
    RETRY_ANNOTATION,
    ROLLOUT_REVISION_ANNOTATION,
    SHARING_CORDONED_ANNOTATION,
    SHARING_REQUESTED_AT_ANNOTATION,
    STAMP_ANNOTATIONS,
    UNCAPPED_HARD_ANNOTATION,
)

RELEASE_POOL_PREFIX = "release/"  # the pools the way out is reported under (status.rollout)
MIG_POOL = RELEASE_POOL_PREFIX + "mig"
SHARING_POOL = RELEASE_POOL_PREFIX + "sharing"
SHARING_POOL_PREFIX = "sharing/"  # the sharing rollout's pools in status.rollout
MIG_MARKS = (REQUESTED_AT_ANNOTATION, ROLLOUT_REVISION_ANNOTATION, ACKNOWLEDGED_ANNOTATION, RETRY_ANNOTATION)
SHARING_MARKS = (SHARING_REQUESTED_AT_ANNOTATION,)
MAX_NAMES_IN_MESSAGE = 10


@dataclass(frozen=True)
class Key:
    """An object KGWE applied (as status.inventory names it)."""

    api_version: str
    kind: str
    namespace: str | None
    name: str

    def __str__(self) -> str:
        return f"{self.kind}/{self.namespace + '/' if self.namespace else ''}{self.name}"


@dataclass(frozen=True)
class LiveObject:
    """One inventory entry as the cluster holds it now (`present` False: already gone)."""

    key: Key
    present: bool = True
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class NodeView:
    """A GPU node as read: its labels and annotations, and how many live pods hold its GPUs."""

    name: str
    labels: Mapping[str, str]
    annotations: Mapping[str, str]
    gpu_pods: int = 0


@dataclass(frozen=True)
class Written:
    """What the I/O step read for one PolicyRepository being deleted."""

    repository: str  # this repository's REPOSITORY_LABEL value
    objects: Sequence[LiveObject]  # status.inventory, read live
    nodes: Sequence[NodeView]
    mig_configmap: Key  # where KGWE writes the GPU Operator's configs (RenderOptions)
    device_plugin_configmap: Key
    rollout: Mapping[str, Mapping[str, object]] = field(default_factory=dict)  # status.rollout


@dataclass(frozen=True)
class Uncap:
    key: Key
    hard: Mapping[str, str]  # the budget's own limit, in place of the cap


@dataclass
class ReleasePlan:
    """This pass's writes, in the order they are made, and where the way out stands after them."""

    policy: str
    uncordon_mig: list[str] = field(default_factory=list)
    uncordon_sharing: list[str] = field(default_factory=list)
    mig: list[Action] = field(default_factory=list)  # relabel (to all-disabled), acknowledge
    sharing: list[Action] = field(default_factory=list)  # relabel (to default)
    unlabel_sharing: list[str] = field(default_factory=list)  # device-plugin label and mark removed
    forget: dict[str, tuple[str, ...]] = field(default_factory=dict)  # node -> KGWE annotations to remove
    uncap: list[Uncap] = field(default_factory=list)
    delete: list[Key] = field(default_factory=list)
    kept: list[Key] = field(default_factory=list)  # protected from prune: they stay
    waiting: list[str] = field(default_factory=list)  # what keeps the finalizer, in words
    pools: dict[str, PoolProgress] = field(default_factory=dict)

    @property
    def stalled(self) -> list[PoolProgress]:
        return [p for p in self.pools.values() if p.stopped]

    @property
    def finished(self) -> bool:
        """Nothing is left once this pass's writes are made: the finalizer may go."""
        return not self.waiting and not self.stalled

    def message(self) -> str:
        if self.finished:
            return f"released (deletionPolicy {self.policy})"
        parts = [p.message() for p in self.stalled] or self.waiting
        return f"releasing what KGWE wrote (deletionPolicy {self.policy}): " + "; ".join(parts)


def deletion_policy(spec: Mapping[str, object]) -> str | None:
    """spec.deletionPolicy, its default when unset; None when it names no policy (the CRD refuses that)."""
    value = spec.get("deletionPolicy", DEFAULT_DELETION_POLICY)
    return value if isinstance(value, str) and value in DELETION_POLICIES else None


def plan_release(written: Written, policy: str, now: datetime) -> ReleasePlan:
    """The next writes of the way out, and what still keeps the finalizer after them."""
    plan = ReleasePlan(policy)
    ours = [o for o in written.objects if o.present and o.labels.get(REPOSITORY_LABEL) == written.repository]
    mig_ours = _configmap_ours(written, written.mig_configmap)
    sharing_ours = _configmap_ours(written, written.device_plugin_configmap)
    for node in written.nodes:
        if mig_ours and CORDONED_ANNOTATION in node.annotations:
            plan.uncordon_mig.append(node.name)
        if sharing_ours and SHARING_CORDONED_ANNOTATION in node.annotations:
            plan.uncordon_sharing.append(node.name)
    if policy != DELETE_POLICY:
        plan.uncap = [
            Uncap(o.key, hard)
            for o in ours
            if o.key.kind == "ResourceQuota" and (hard := uncapped_hard(o.annotations)) is not None
        ]
        return plan
    held_mig = _release_mig(plan, written, now) if mig_ours else set()
    held_sharing = _release_sharing(plan, written, now) if sharing_ours else set()
    if mig_ours or sharing_ours:  # the audit stamp goes with a node's last mark
        for n in written.nodes:
            if n.name not in held_mig | held_sharing and (stamps := _marks(n, STAMP_ANNOTATIONS)):
                plan.forget[n.name] = plan.forget.get(n.name, ()) + stamps
    named = {written.mig_configmap: bool(held_mig), written.device_plugin_configmap: bool(held_sharing)}
    for o in ours:
        if o.annotations.get(PRUNE_ANNOTATION) == PRUNE_DISABLED:
            plan.kept.append(o.key)
        elif named.get(o.key):  # never a dangling config: it goes once no node names one of its configs
            plan.waiting.append(f"{o.key} stays while a node names one of its configs")
        else:
            plan.delete.append(o.key)
    return plan


def uncapped_hard(annotations: Mapping[str, str]) -> dict[str, str] | None:
    """The budget's own limit a capped `kgwe-budget` quota carries; None when it is not capped (or the
    annotation is not a flat map of strings, which KGWE never writes)."""
    text = annotations.get(UNCAPPED_HARD_ANNOTATION)
    if text is None or len(text) > 4096:
        return None
    try:
        hard = json.loads(text)
    except ValueError:
        return None
    if not isinstance(hard, dict) or not all(isinstance(v, str) for v in hard.values()):
        return None
    return {str(k): v for k, v in hard.items()}


def _configmap_ours(written: Written, key: Key) -> bool:
    """Nodes' GPU Operator labels are this repository's to release while the ConfigMap their configs come
    from is its own (in its inventory, carrying its label) or already gone; another repository's stay."""
    for o in written.objects:
        if o.key == key:
            return not o.present or o.labels.get(REPOSITORY_LABEL) == written.repository
    return False


def _gate(written: Written, pool: str, sharing: bool, nodes: int) -> PoolPolicy:
    """The way out's gate, no drain (nothing is evicted on the way out) and at most maxUnavailable nodes
    in flight: the one its first pass chose (status.rollout keeps it), else the smallest maxUnavailable the
    repository's pools of that kind last showed, at least 1."""
    counts = [
        value
        for name, progress in written.rollout.items()
        if (name == pool or (name.startswith(SHARING_POOL_PREFIX) == sharing and pool not in written.rollout))
        and not (name.startswith(RELEASE_POOL_PREFIX) and name != pool)
        and isinstance(value := progress.get("maxUnavailable"), int)
    ]
    budget = resolve_max_unavailable(min(counts) if counts else 1, nodes)
    return PoolPolicy(pool, budget, drain=False, timeout_seconds=DEFAULT_PENDING_TIMEOUT_SECONDS)


def _release_mig(plan: ReleasePlan, written: Written, now: datetime) -> set[str]:
    """Nodes whose `nvidia.com/mig.config` KGWE set go back to `all-disabled`, then lose KGWE's marks; the
    nodes still held after this pass. A label someone else set since is not KGWE's: only the marks go."""
    marked = [
        n for n in written.nodes if _mig_label_ours(n) or _carries(n, (*MIG_MARKS, CORDONED_ANNOTATION))
    ]
    states = [
        NodeState(
            name=n.name,
            pool=MIG_POOL,
            desired_config=MIG_ALL_DISABLED,
            current_config=n.labels.get(MIG_CONFIG_LABEL),
            state=n.labels.get(MIG_STATE_LABEL),
            requested_at=parse_rfc3339(n.annotations.get(REQUESTED_AT_ANNOTATION)),
            gpu_pods=n.gpu_pods,
            retry_requested=RETRY_ANNOTATION in n.annotations,
            failure_acknowledged=ACKNOWLEDGED_ANNOTATION in n.annotations,
        )
        for n in marked
        if _mig_label_ours(n)
    ]
    back = _plan_pool(plan, plan.mig, states, _gate(written, MIG_POOL, False, len(states)), now)
    released = {n.name for n in marked if n.name in back or not _mig_label_ours(n)}
    for n in marked:
        if n.name in released:
            plan.forget[n.name] = _marks(n, MIG_MARKS)
    return {n.name for n in marked} - released


def _mig_label_ours(node: NodeView) -> bool:
    """KGWE's config on the node, or the way out's `all-disabled` it has not seen applied yet."""
    label = node.labels.get(MIG_CONFIG_LABEL) or ""
    return label.startswith(CONFIG_NAME_PREFIX) or (
        label == MIG_ALL_DISABLED and REQUESTED_AT_ANNOTATION in node.annotations
    )


def _release_sharing(plan: ReleasePlan, written: Written, now: datetime) -> set[str]:
    """Nodes whose `nvidia.com/device-plugin.config` KGWE set go back to `default` (unshared), then lose the
    label and KGWE's marks while no pod holds their GPUs; the nodes still held after this pass."""
    marked = [n for n in written.nodes if _sharing_label_ours(n) or _carries(n, SHARING_MARKS)]
    marked += [n for n in written.nodes if SHARING_CORDONED_ANNOTATION in n.annotations and n not in marked]
    states = []
    for n in marked:
        if not _sharing_label_ours(n):
            continue
        current = n.labels.get(DEVICE_PLUGIN_CONFIG_LABEL)
        # `success` once GFD reports what the label asks for: unshared for `default`; a KGWE config is
        # taken as applied (the sharing rollout's own reading, kgwe.reconcile.sharing_rollout)
        settled = current != DEFAULT_CONFIG_KEY or node_sharing(n.labels)[1] == NOT_SHARED
        states.append(
            NodeState(
                name=n.name,
                pool=SHARING_POOL,
                desired_config=DEFAULT_CONFIG_KEY,
                current_config=current,
                state=STATE_SUCCESS if settled else None,
                requested_at=parse_rfc3339(n.annotations.get(SHARING_REQUESTED_AT_ANNOTATION)),
                gpu_pods=n.gpu_pods,
            )
        )
    back = _plan_pool(plan, plan.sharing, states, _gate(written, SHARING_POOL, True, len(states)), now)
    busy = sorted(n.name for n in marked if n.name in back and n.gpu_pods)
    if busy:  # back to `default`; the label itself goes while nothing holds a GPU
        plan.waiting.append(
            f"{DEVICE_PLUGIN_CONFIG_LABEL}: stays until their GPUs are free on {_names(busy)}"
        )
    released = set()
    for n in marked:
        if n.name in back and not n.gpu_pods:
            plan.unlabel_sharing.append(n.name)
        elif _sharing_label_ours(n):
            continue
        released.add(n.name)
        plan.forget[n.name] = plan.forget.get(n.name, ()) + _marks(n, SHARING_MARKS)
    return {n.name for n in marked} - released


def _sharing_label_ours(node: NodeView) -> bool:
    """KGWE's device-plugin config on the node, or `default` KGWE set on it."""
    label = node.labels.get(DEVICE_PLUGIN_CONFIG_LABEL) or ""
    return label.startswith(CONFIG_NAME_PREFIX) or (
        label == DEFAULT_CONFIG_KEY and SHARING_REQUESTED_AT_ANNOTATION in node.annotations
    )


def _carries(node: NodeView, annotations: Sequence[str]) -> bool:
    return any(k in node.annotations for k in annotations)


def _plan_pool(
    plan: ReleasePlan, actions: list[Action], states: list[NodeState], gate: PoolPolicy, now: datetime
) -> set[str]:
    """Run the rollout decision towards the release target; the nodes already there (done)."""
    if not states:
        return set()
    # KGWE's cordons are lifted this pass: the decision sees the nodes as they will be
    rollout = plan_rollout([replace(s, cordoned_by_kgwe=False) for s in states], {gate.name: gate}, now)
    progress = rollout.pools[gate.name]
    plan.pools[gate.name] = progress
    actions.extend(a for a in rollout.actions if a.kind in ("relabel", "acknowledge"))
    if not progress.complete and not progress.stopped:
        label = MIG_CONFIG_LABEL if gate.name == MIG_POOL else DEVICE_PLUGIN_CONFIG_LABEL
        plan.waiting.append(_progress_words(progress, label))
    return set(progress.done)


def _progress_words(progress: PoolProgress, label: str) -> str:
    words = [f"{len(progress.done)}/{progress.total} nodes back"]
    if progress.in_progress:
        words.append(f"in progress on {_names(progress.in_progress)}")
    if progress.pending:
        words.append(f"{len(progress.pending)} pending (at most {progress.max_unavailable} at a time)")
    if progress.waiting_busy:
        words.append(f"{label} stays until their GPUs are free on {_names(progress.waiting_busy)}")
    if progress.acknowledged:
        words.append(f"failed and acknowledged on {_names(progress.acknowledged)}")
    return f"{label}: " + ", ".join(words)


def _names(nodes: Sequence[str]) -> str:
    shown = sorted(nodes)
    more = len(shown) - MAX_NAMES_IN_MESSAGE
    return ", ".join(shown[:MAX_NAMES_IN_MESSAGE]) + (f" and {more} more" if more > 0 else "")


def _marks(node: NodeView, marks: Sequence[str]) -> tuple[str, ...]:
    """The given KGWE annotations the node carries."""
    return tuple(k for k in marks if k in node.annotations)
