"""The leader gate: a replica writes only while it holds the controller's Lease (kgwe.cluster.lease's
LeaderElector.is_leader; a process acting alone is always leader). Every writer asks the gate before each
write and stops the pass with NotLeader when it is closed, so a deposed leader stops within one write."""

from __future__ import annotations

from collections.abc import Callable

from kgwe.errors import KgweError

Gate = Callable[[], bool]  # True while this replica may write


class NotLeader(KgweError):
    """Raised before a write when this replica no longer holds the leader Lease."""


def alone() -> bool:
    """The gate of a process acting alone (no leader election)."""
    return True


def check(gate: Gate | None, before: str = "the next write") -> None:
    """Raise NotLeader unless the gate is open (None: no gate)."""
    if gate is not None and not gate():
        raise NotLeader(f"lost leadership; stopping before {before}")
