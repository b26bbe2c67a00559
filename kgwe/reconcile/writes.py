"""Where a reconcile's writes to the cluster go out: server-side apply and prune of the rendered objects,
the node patches of the MIG and sharing rollouts, and the KGWE scheduler's restart. Every writer asks the
leader gate before each write (NotLeader stops the pass at once); `taken` sums what they wrote."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from kubernetes import client

from kgwe.cluster.apply import Applier, ObjectRef, SyncResult
from kgwe.cluster.nodes import NodeOps
from kgwe.reconcile.scheduler_restart import SchedulerRestarter, SchedulerSync
from kgwe.reconcile.sharing_rollout import SharingNodeOps


class ClusterWrites:
    def __init__(
        self,
        api_client: client.ApiClient,
        repository_label: str,
        *,
        scheduler_namespace: str,
        is_leader: Callable[[], bool],
        on_node_write: Callable[[str, str], None] | None = None,
    ) -> None:
        # kept for the reconciler's life: the Applier's API discovery is costly on a busy API server
        self.applier = Applier(api_client, repository_label, guard=is_leader)
        self.mig_nodes = NodeOps(api_client, guard=is_leader, on_write=on_node_write)
        self.sharing_nodes = SharingNodeOps(api_client, guard=is_leader, on_write=on_node_write)
        self.scheduler = SchedulerRestarter(api_client, scheduler_namespace, guard=is_leader)
        self._applied = 0

    def apply(self, objects: Sequence[dict], previous: Iterable[ObjectRef]) -> SyncResult:
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
