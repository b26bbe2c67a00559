"""The one way KGWE writes an object's status: from the whole new status (a status model, or its JSON
form with None for "absent"), nothing at all when it equals the live one, else a JSON merge patch from the
live status to the new one under KGWE's field manager (the cluster's). Only the condition types the writer
owns are its to set or remove: conditions of other types on the live object are kept."""

from __future__ import annotations

import copy
from collections.abc import Collection, Mapping
from typing import Any

from pydantic import BaseModel

from kgwe.runtime.cluster import Cluster
from kgwe.runtime.kinds import Kind
from kgwe.runtime.leader import Gate, check


def without_none(value: Any) -> Any:
    """A JSON value with every None-valued key left out (None meaning absent), at any depth."""
    if isinstance(value, Mapping):
        return {k: without_none(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [without_none(v) for v in value]
    return value


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: `patch` applied to `target` — maps merged key by key, a null removes the key, anything else
    replaces."""
    if not isinstance(patch, Mapping):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, Mapping) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out


def merge_diff(old: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Any]:
    """The JSON merge patch (RFC 7386) that turns `old` into `new`: removed keys null, maps recursed,
    anything else (lists included) replaced."""
    out: dict[str, Any] = {key: None for key in old if key not in new}
    for key, value in new.items():
        before = old.get(key)
        if isinstance(value, Mapping) and isinstance(before, Mapping):
            inner = merge_diff(before, value)
            if inner:
                out[key] = inner
        elif key not in old or before != value:
            out[key] = value
    return out


class StatusPatcher:
    def __init__(
        self,
        cluster: Cluster,
        kind: Kind,
        *,
        owned: Collection[str] | None = None,
        gate: Gate | None = None,
    ) -> None:
        self.cluster = cluster
        self.kind = kind
        self.owned = owned  # the condition types this writer sets and removes (None: all of them)
        self.gate = gate  # asked before each write (NotLeader when closed); None: always write
        self.writes = 0

    def desired(self, live: Mapping[str, Any], new: Mapping[str, Any] | BaseModel) -> dict[str, Any]:
        """The status to hold: `new`, with the live conditions of types this writer does not own."""
        doc = (
            new.model_dump(mode="json", by_alias=True, exclude_none=True)
            if isinstance(new, BaseModel)
            else new
        )
        status: dict[str, Any] = without_none(doc)
        if self.owned is not None:
            mine = [c for c in status.get("conditions") or [] if c.get("type") in self.owned]
            others = [c for c in live.get("conditions") or [] if c.get("type") not in self.owned]
            if mine or others:
                status["conditions"] = mine + others
        return status

    def write(self, obj: Mapping[str, Any], new: Mapping[str, Any] | BaseModel) -> bool:
        """Write `new` as `obj`'s status unless the live status (`obj`'s) already says it; True if written."""
        live = obj.get("status") or {}
        status = self.desired(live, new)
        if status == live:
            return False
        check(self.gate, "the status write")
        meta = obj.get("metadata") or {}
        self.cluster.patch_status(
            self.kind, str(meta.get("name")), {"status": merge_diff(live, status)}, meta.get("namespace")
        )
        self.writes += 1
        return True
