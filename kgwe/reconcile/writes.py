"""Where a reconcile's writes to the cluster go out: server-side apply and prune of the rendered objects,
the node patches of the MIG and sharing rollouts, and the KGWE scheduler's restart. Every writer asks the
leader gate before each write (NotLeader stops the pass at once); `taken` sums what they wrote. Each write
carries the stamp `begin` set (the policy commit that caused it and its author, kgwe.audit.stamp), and
`node_changes` lists the Node writes for the audit log."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from kgwe.audit.log import NodeChange
from kgwe.audit.stamp import Stamp
from kgwe.cluster.apply import Applier, ObjectRef, SyncResult
from kgwe.cluster.nodes import NodeOps
from kgwe.reconcile.scheduler_restart import SchedulerRestarter, SchedulerSync
from kgwe.reconcile.sharing_rollout import SharingNodeOps
from kgwe.runtime.cluster import Cluster
from kgwe.runtime.leader import Gate


class ClusterWrites:
    def __init__(
        self,
        cluster: Cluster,
        repository_label: str,
        *,
        scheduler_namespace: str,
        is_leader: Gate,
        on_node_write: Callable[[str, str], None] | None = None,
    ) -> None:
        self.applier = Applier(cluster, repository_label, guard=is_leader)
        self.mig_nodes = NodeOps(cluster, guard=is_leader, on_write=on_node_write)
        self.sharing_nodes = SharingNodeOps(cluster, guard=is_leader, on_write=on_node_write)
        self.scheduler = SchedulerRestarter(cluster, scheduler_namespace, guard=is_leader)
        self._applied = 0

    def begin(self, stamp: Stamp | None) -> None:
        """Stamp every write from now on with `stamp` (None: no stamp); Node writes of a pass cut short
        (NotLeader) are forgotten, not put on this one."""
        self.node_changes()
        annotations = stamp.annotations() if stamp is not None else {}
        for writer in (self.applier, self.mig_nodes, self.sharing_nodes, self.scheduler):
            writer.stamp = annotations

    def node_changes(self) -> list[NodeChange]:
        """The Node writes of both rollouts since the last call."""
        return self.mig_nodes.changes() + self.sharing_nodes.changes()

    def apply(self, objects: Sequence[dict[str, Any]], previous: Iterable[ObjectRef]) -> SyncResult:
        """Server-side apply what differs from the live objects, then prune what is no longer rendered."""
        sync = self.applier.sync(objects, previous)
        self._applied += sync.writes
        return sync

    def restart_scheduler(self) -> SchedulerSync:
        """Roll the KGWE scheduler onto the applied configuration when it changed."""
        return self.scheduler.sync()

    def taken(self) -> int:
        """API writes made since the last call."""
        count = self._applied + self.mig_nodes.writes + self.sharing_nodes.writes + self.scheduler.writes
        self._applied = self.mig_nodes.writes = self.sharing_nodes.writes = self.scheduler.writes = 0
        return count
