"""Offboarding, the I/O step: a PolicyRepository's finalizer, and each pass of releasing what KGWE wrote
once it is deleted. It reads the cluster into plain data, asks kgwe.reconcile.release what to do, and
carries that out through the reconcile's own writers (leader-gated: NotLeader stops the pass at once, and
the next leader reads everything back and goes on). The finalizer goes only after a pass whose plan left
nothing behind and whose every write succeeded.

The reconciler calls `ensure_finalizer` at the start of every pass and `step` instead of the pass when the
PolicyRepository carries a deletionTimestamp; `step`'s Outcome is written as status like any other
(phases `releasing`, `release_stalled`, `release_failed`), None once the finalizer is gone.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime
from typing import Any

from kubernetes.client.exceptions import ApiException

from kgwe.cluster.apply import ObjectRef
from kgwe.cluster.nodes import LIVE_PODS, NodeOps, gpu_pods_on_nodes
from kgwe.reconcile.mig_rollout import WORDING as MIG_WORDING
from kgwe.reconcile.node_actions import Record, carry_out
from kgwe.reconcile.release import (
    Key,
    LiveObject,
    NodeView,
    ReleasePlan,
    Written,
    deletion_policy,
    plan_release,
)
from kgwe.reconcile.sharing_rollout import WORDING as SHARING_WORDING
from kgwe.reconcile.status import Outcome
from kgwe.reconcile.writes import ClusterWrites
from kgwe.render.options import RenderOptions
from kgwe.runtime.cluster import Cluster
from kgwe.runtime.errors import is_conflict, is_not_found
from kgwe.runtime.kinds import NODE, POD, POLICY_REPOSITORY, RESOURCE_QUOTA
from kgwe.runtime.leader import check
from kgwe.vocab import (
    DELETION_POLICIES,
    DEVICE_PLUGIN_CONFIG_LABEL,
    GPU_NODE_SELECTOR,
    POLICY_REPOSITORY_FINALIZER,
    UNCAPPED_HARD_ANNOTATION,
)

log = logging.getLogger(__name__)


def deleting(repo: Mapping[str, Any]) -> bool:
    """The PolicyRepository is being deleted (its finalizer keeps it until KGWE has released)."""
    return bool((repo.get("metadata") or {}).get("deletionTimestamp"))


class Release:
    """The way out of one PolicyRepository (`namespace`/`name`, applied objects labelled
    `repository_label`), written through `writes` (the reconciler's, so the leader gate is the same)."""

    def __init__(
        self,
        cluster: Cluster,
        namespace: str,
        name: str,
        *,
        options: RenderOptions,
        writes: ClusterWrites,
        record: Callable[[Mapping[str, Any], str, str, str], None],
        is_leader: Callable[[], bool],
        now: Callable[[], datetime],
    ) -> None:
        self.cluster = cluster
        self.namespace, self.name = namespace, name
        self.options = options
        self.writes = writes
        self.record = record
        self.is_leader = is_leader
        self.now = now

    # -- the finalizer -----------------------------------------------------------------------------
    def ensure_finalizer(self, repo: Mapping[str, Any]) -> None:
        """Add KGWE's finalizer once (the leader only; a conflicting write is retried next pass)."""
        meta = repo.get("metadata") or {}
        finalizers = list(meta.get("finalizers") or [])
        if POLICY_REPOSITORY_FINALIZER in finalizers or deleting(repo) or not self.is_leader():
            return
        self._set_finalizers(meta, [*finalizers, POLICY_REPOSITORY_FINALIZER])

    def _set_finalizers(self, meta: Mapping[str, Any], finalizers: list[str]) -> None:
        # a merge patch replaces the list: resourceVersion makes it fail (409) rather than drop a
        # finalizer someone else added meanwhile
        body = {"metadata": {"finalizers": finalizers, "resourceVersion": meta.get("resourceVersion")}}
        try:
            self.cluster.patch(POLICY_REPOSITORY, self.name, body, self.namespace)
        except ApiException as exc:
            if not (is_not_found(exc) or is_conflict(exc)):
                raise
            log.info("finalizers of %s/%s changed meanwhile; next pass", self.namespace, self.name)

    # -- a pass of the way out ---------------------------------------------------------------------
    def step(self, repo: Mapping[str, Any]) -> Outcome | None:
        """Release what the plan says may go now; the status to write, or None once released."""
        meta = repo.get("metadata") or {}
        if POLICY_REPOSITORY_FINALIZER not in (meta.get("finalizers") or []):
            return None  # not ours to hold (deleted before KGWE added it, or released already)
        policy = deletion_policy(repo.get("spec") or {})
        if policy is None:
            wanted = ", ".join(DELETION_POLICIES)
            return Outcome("release_failed", f"spec.deletionPolicy: not one of {wanted}; set it to go on")
        self.writes.begin(None)  # the way out is caused by the deletion, not by a policy commit
        status = repo.get("status") or {}
        inventory = [ObjectRef.from_status(e) for e in status.get("inventory") or []]
        written = self._read(inventory, status.get("rollout") or {})
        plan = plan_release(written, policy, self.now())
        failures = self._carry_out(repo, plan)
        remaining = [r for r in inventory if _key(r) not in plan.delete and self._present(r, written)]
        rollout = {name: progress.as_status() for name, progress in plan.pools.items()}
        if failures:
            message = f"releasing (deletionPolicy {policy}) failed for " + "; ".join(failures[:5])
            return Outcome("release_failed", message, inventory=_entries(remaining), rollout=rollout)
        if not plan.finished:
            phase = "release_stalled" if plan.stalled else "releasing"
            return Outcome(phase, plan.message(), inventory=_entries(remaining), rollout=rollout)
        kept = f"; kept (prune disabled): {', '.join(map(str, plan.kept))}" if plan.kept else ""
        self.record(repo, "Normal", "Released", f"{plan.message()}{kept}; finalizer removed")
        finalizers = [f for f in meta.get("finalizers") or [] if f != POLICY_REPOSITORY_FINALIZER]
        self._set_finalizers(meta, finalizers)
        return None

    def _read(self, inventory: Iterable[ObjectRef], rollout: Mapping[str, Any]) -> Written:
        objects = []
        for ref in inventory:
            live = self.writes.applier.read(ref)
            meta = (live or {}).get("metadata") or {}
            objects.append(
                LiveObject(
                    _key(ref),
                    live is not None,
                    dict(meta.get("labels") or {}),
                    dict(meta.get("annotations") or {}),
                )
            )
        nodes = self.cluster.list(NODE, labels=GPU_NODE_SELECTOR)
        held = gpu_pods_on_nodes(self.cluster.list(POD, fields=LIVE_PODS))
        views = [
            NodeView(
                n["metadata"]["name"],
                dict(n["metadata"].get("labels") or {}),
                dict(n["metadata"].get("annotations") or {}),
                len(held.get(n["metadata"]["name"], [])),
            )
            for n in nodes
        ]
        opts = self.options
        return Written(
            repository=self.writes.applier.repository,
            objects=objects,
            nodes=views,
            mig_configmap=Key("v1", "ConfigMap", opts.mig_namespace, opts.mig_config_name),
            device_plugin_configmap=Key(
                "v1", "ConfigMap", opts.mig_namespace, opts.device_plugin_config_name
            ),
            rollout={k: v for k, v in rollout.items() if isinstance(v, Mapping)},
        )

    def _carry_out(self, repo: Mapping[str, Any], plan: ReleasePlan) -> list[str]:
        """Make the plan's writes in order (a node whose earlier write the API refused gets no later one
        this pass); what the API refused, in words (the finalizer stays; the next pass tries again)."""
        failures: list[str] = []
        failed_nodes: set[str] = set()
        now = self.now()

        def record(kind: str, reason: str, message: str) -> None:
            self.record(repo, kind, reason, message)

        def attempt(what: str, node: str | None, write: Callable[..., object], *args: Any) -> None:
            if node is not None and node in failed_nodes:
                return
            try:
                write(*args)
            except ApiException as exc:
                failures.append(f"{what}: {exc.reason}")
                if node is not None:
                    failed_nodes.add(node)

        mig, sharing = self.writes.mig_nodes, self.writes.sharing_nodes
        for ops, names in ((mig, plan.uncordon_mig), (sharing, plan.uncordon_sharing)):
            for name in names:
                attempt(f"uncordon {name}", name, _uncordon, ops, name, record)
        for ops, actions, wording in ((mig, plan.mig, MIG_WORDING), (sharing, plan.sharing, SHARING_WORDING)):
            for action in actions:
                attempt(
                    f"{action.kind} {action.node}",
                    action.node,
                    carry_out,
                    ops,
                    action,
                    now,
                    None,
                    record,
                    wording,
                )
        released = sorted(set(plan.forget) | set(plan.unlabel_sharing))
        for name in released:
            labels = [DEVICE_PLUGIN_CONFIG_LABEL] if name in plan.unlabel_sharing else []
            attempt(f"release node {name}", name, mig.remove, name, labels, plan.forget.get(name, ()))
        for uncap in plan.uncap:
            attempt(f"lift the cap of {uncap.key}", None, self._uncap, uncap.key, uncap.hard)
        for key in plan.delete:
            attempt(f"delete {key}", None, self.writes.applier.delete, _ref(key))
        relabelled = [a.node for a in plan.mig + plan.sharing if a.kind == "relabel"]
        uncordoned = len(plan.uncordon_mig) + len(plan.uncordon_sharing)
        summary = [
            f"{uncordoned} node(s) uncordoned" if uncordoned else "",
            f"GPU Operator labels given back on {len(relabelled)} node(s)" if relabelled else "",
            f"KGWE's marks removed from {len(released)} node(s)" if released else "",
            f"{len(plan.uncap)} budget cap(s) lifted" if plan.uncap else "",
            f"deleted {', '.join(map(str, plan.delete))}" if plan.delete else "",
        ]
        if any(summary):
            record("Normal", "Releasing", "; ".join(s for s in summary if s))
        return failures

    def _uncap(self, key: Key, hard: Mapping[str, str]) -> None:
        """A capped budget quota back at the budget's own limit (deletionPolicy Retain)."""
        check(self.is_leader)
        body = {"metadata": {"annotations": {UNCAPPED_HARD_ANNOTATION: None}}, "spec": {"hard": dict(hard)}}
        self.cluster.patch(RESOURCE_QUOTA, key.name, body, key.namespace)

    def _present(self, ref: ObjectRef, written: Written) -> bool:
        return any(o.key == _key(ref) and o.present for o in written.objects)


def _uncordon(ops: NodeOps, name: str, record: Record) -> None:
    """Give up a drain KGWE started: the node back, nothing more evicted."""
    ops.uncordon(name)
    record("Normal", "NodeUncordoned", f"node {name} uncordoned: the PolicyRepository is deleted")


def _key(ref: ObjectRef) -> Key:
    return Key(ref.api_version, ref.kind, ref.namespace, ref.name)


def _ref(key: Key) -> ObjectRef:
    return ObjectRef(key.api_version, key.kind, key.namespace, key.name)


def _entries(refs: Iterable[ObjectRef]) -> list[dict[str, Any]]:
    return [r.as_status() for r in refs]
