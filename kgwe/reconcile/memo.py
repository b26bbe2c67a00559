"""What a reconcile may keep from the last one: the pure work on an unchanged revision and inventory.

Loading and validating a revision depends only on its commit and the policy path; planning and rendering
only on that policy, the GPU nodes as read (labels, annotations, GPUs, the pods holding them: the busy set)
and the live mig-parted configs; the inventory planning reads (validated) only on those nodes and configs,
so a new policy on an unchanged fleet plans on the inventory kept. A no-op reconcile at fleet size spent
most of its time redoing that work, so it is kept under a key covering every input. A key that misses an
input would apply a stale plan, so the keys hash whole inputs, not chosen fields of them; a key that changes
too often only costs the work.
The one exception: Node annotations other components own (the TTL controller's, which follows the cluster's
size, say), which no planning reads.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Hashable, Sequence
from dataclasses import replace
from typing import Generic, TypeVar

import orjson
from cachetools import LRUCache

from kgwe.cluster.inventory import GpuNodeFacts
from kgwe.vocab import ANNOTATION_PREFIX, NVIDIA_RESOURCE_PREFIX

V = TypeVar("V")

# annotations of KGWE and the NVIDIA GPU Operator: the only ones planning may read
_PLANNED_ANNOTATION_PREFIXES = (ANNOTATION_PREFIX, NVIDIA_RESOURCE_PREFIX)


def fingerprint(*parts: object) -> str:
    """A digest of plain data (dicts, lists, dataclasses, strings, numbers); key order does not matter."""
    data = orjson.dumps(parts, option=orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS, default=repr)
    return hashlib.sha256(data).hexdigest()


def planned_facts(facts: Sequence[GpuNodeFacts]) -> list[GpuNodeFacts]:
    """The node facts planning reads: all of them, but only KGWE's and the GPU Operator's annotations."""
    return [
        replace(
            f,
            annotations={
                k: v for k, v in f.annotations.items() if k.startswith(_PLANNED_ANNOTATION_PREFIXES)
            },
        )
        for f in facts
    ]


class Memo(Generic[V]):
    """The values of the last `size` keys, least recently used dropped first; `misses` counts computations."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.misses = 0
        self._values: LRUCache[Hashable, V] = LRUCache(maxsize=size)

    def get(
        self, key: Hashable, compute: Callable[[], V], *, keep: Callable[[V], bool] = lambda _: True
    ) -> V:
        """The value for `key`, computed once; a computed value `keep` refuses is returned but not kept."""
        if key in self._values:
            return self._values[key]  # and it becomes the most recently used
        self.misses += 1
        value = compute()
        if keep(value):
            self._values[key] = value
        return value

    def clear(self) -> None:
        self._values.clear()
