"""One rollout action carried out on a node (relabel, cordon, evict, uncordon, acknowledge), and the Event
that tells it. The MIG and the sharing rollout word their Events for what the node is changed for."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from kgwe.cluster.nodes import NodeOps
from kgwe.reconcile.rollout import Action
from kgwe.vocab import RETRY_ANNOTATION

Record = Callable[[str, str, str], None]  # (type Normal|Warning, reason, message) about the repository


@dataclass(frozen=True)
class Wording:
    cordoned: str  # "node X cordoned <this>"
    uncordoned: str  # "node X uncordoned <this>"


def carry_out(
    ops: NodeOps, action: Action, now: datetime, revision: str | None, record: Record, wording: Wording
) -> None:
    """Carry out `action`; ApiException when the API refuses it."""
    if action.kind == "relabel":
        ops.relabel(action.node, action.config or "", now, revision)
    elif action.kind == "acknowledge":
        ops.acknowledge(action.node)
        record(
            "Normal",
            "MIGFailureAcknowledged",
            f"node {action.node}: {RETRY_ANNOTATION} taken; its pool's rollout no longer waits for it",
        )
    elif action.kind == "cordon":
        ops.cordon(action.node, action.config or "")
        record("Normal", "NodeCordoned", f"node {action.node} cordoned {wording.cordoned}")
    elif action.kind == "evict":
        outcome = ops.evict_gpu_pods(action.node)
        if outcome.blocked:
            record(
                "Warning",
                "EvictionBlocked",
                f"node {action.node}: a PodDisruptionBudget blocks evicting {', '.join(outcome.blocked)}; "
                "will retry",
            )
    elif action.kind == "uncordon":
        ops.uncordon(action.node)
        record("Normal", "NodeUncordoned", f"node {action.node} uncordoned {wording.uncordoned}")
