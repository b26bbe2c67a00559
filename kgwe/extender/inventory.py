"""Static mode: a GPUInventory YAML file (kgwe.policy's model) -> NodeStates for the scoring core."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import ValidationError

from kgwe.errors import KgweError
from kgwe.extender.nodes import NodeState
from kgwe.gpu.catalog import model_for_product
from kgwe.vocab import GPU_FAMILY_LABEL, GPU_MEMORY_LABEL

if TYPE_CHECKING:
    from kgwe.policy.inventory import GPUInventory
    from kgwe.topology.model import NodeTopology

LABEL_MEMORY = GPU_MEMORY_LABEL
LABEL_FAMILY = GPU_FAMILY_LABEL


def _catalog_memory(product: str) -> int:
    model = model_for_product(product)
    return model.memory_mib if model else 0


def _topology(name: str | None) -> NodeTopology | None:
    if not name:
        return None
    from kgwe.topology import known

    return known.load(name)


def load_inventory(path: str | Path) -> list[NodeState]:
    """Every GPUInventory document in the file, validated by kgwe.policy; KgweError with the reason."""
    from kgwe.policy.inventory import GPUInventory
    from kgwe.policy.yaml_source import MAX_TEXT_BYTES, YamlSyntaxError, load_all

    p = Path(path)
    try:
        with p.open("rb") as fh:
            docs = [d for d in load_all(fh.read(MAX_TEXT_BYTES + 1)) if d]
    except OSError as exc:
        raise KgweError(f"cannot read inventory {p}: {exc.strerror}") from None
    except YamlSyntaxError as exc:
        raise KgweError(f"inventory {p}:{exc.line}:{exc.column}: {exc}") from None
    nodes: list[NodeState] = []
    for doc in docs:
        if not isinstance(doc, dict) or doc.get("kind") != "GPUInventory":
            continue
        try:
            inv = GPUInventory.model_validate(doc)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(x) for x in first["loc"])
            raise KgweError(f"inventory {p}: {where}: {first['msg']}") from None
        nodes += node_states(inv)
    if not nodes:
        raise KgweError(f"inventory {p}: no GPUInventory nodes found")
    return nodes


def node_states(
    inv: GPUInventory,
    *,
    layouts: Mapping[str, Sequence[Sequence[str] | None]] | None = None,
    idle: bool = False,
) -> list[NodeState]:
    """One GPUInventory model's nodes as the scoring core sees them. `layouts` (node -> per-GPU MIG
    instances, None = MIG off, as rendered from a policy) replaces a node's MIG state; `idle` forgets what
    is in use (the impact replay starts from an empty cluster)."""
    nodes: list[NodeState] = []
    for n in inv.spec.nodes:
        used = [0] * n.gpus
        mig_free: Counter[str] = Counter()
        planned = (layouts or {}).get(n.name)
        devices = {d.index: d for d in n.devices}
        for i in range(n.gpus):
            d = devices.get(i)
            mig = (
                (planned[i] if i < len(planned) else None)
                if planned is not None
                else (d.mig if d is not None else None)
            )
            if d is not None and d.busy and not idle:
                used[i] = 1000
            if mig is not None:
                used[i] = 1000  # a MIG-enabled GPU is not available as a whole GPU
                mig_free.update(mig)
                if d is not None and not idle and planned is None:
                    mig_free.subtract(d.in_use)
        labels = dict(n.labels)
        try:
            mem = int(labels.get(LABEL_MEMORY) or 0) or _catalog_memory(n.product)
        except ValueError:
            mem = _catalog_memory(n.product)
        nodes.append(
            NodeState(
                name=n.name,
                gpus=n.gpus,
                gpu_used_milli=used,
                product=n.product,
                model=n.product,
                family=labels.get(LABEL_FAMILY, ""),
                gpu_memory_mib=mem,
                mig_free={k: v for k, v in mig_free.items() if v > 0},
                topology=_topology(n.topology),
                labels=labels,
            )
        )
    return nodes
