"""The inventory snapshot carries the measured MIG demand (`migDemand`) that `kgwe plan` previews the next
rebalance from: what the controller writes validates as a GPUInventory and gives the same decision offline."""

from __future__ import annotations

from datetime import UTC, datetime

import yaml

from kgwe.planner.rebalance import Record
from kgwe.policy import GPUInventory
from kgwe.policy.loader import load_repository
from kgwe.reconcile.rebalancing import preview, snapshot_demand
from kgwe.resources import sample_repo_dir

NOW = datetime(2026, 11, 25, 12, 0, tzinfo=UTC)


def test_snapshot_demand_round_trips_through_the_gpuinventory_and_drives_the_preview() -> None:
    ps = load_repository(sample_repo_dir())
    assert not ps.errors
    doc = yaml.safe_load((sample_repo_dir() / "inventory" / "prod.yaml").read_text())
    record = Record(
        "inference-h100.x",
        epoch=2,
        target={"1g.10gb": 3},
        evaluated_at=NOW,  # timestamps and samples stay out of the snapshot: no commit per evaluation
        pending={"3g.40gb": 30},
        pending_pods={"3g.40gb": 30},
    )
    doc["spec"]["migDemand"] = snapshot_demand({"inference-h100": record})
    assert doc["spec"]["migDemand"] == {
        "inference-h100": {
            "pending": {"3g.40gb": 30},
            "pendingPods": {"3g.40gb": 30},
            "target": {"1g.10gb": 3},
            "epoch": 2,
        }
    }
    inventory = GPUInventory.model_validate(yaml.safe_load(yaml.safe_dump(doc)))
    (only,) = preview(ps.mig_strategies, inventory, NOW)
    assert only.pool == "inference-h100" and only.decision is not None and only.decision.taken
    assert only.decision.record.target["3g.40gb"] >= 30


def test_a_pool_without_measured_demand_is_said_so() -> None:
    ps = load_repository(sample_repo_dir())
    doc = yaml.safe_load((sample_repo_dir() / "inventory" / "prod.yaml").read_text())
    doc["spec"].pop("migDemand")
    (only,) = preview(ps.mig_strategies, GPUInventory.model_validate(doc), NOW)
    assert only.decision is None and only.note == "the inventory has no measured demand for this pool"
