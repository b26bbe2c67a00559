"""The node annotation `kgwe.nvidia.io/gpu-health`: which GPUs of a Node are unhealthy, why, since when.

Written by the agent from NVML (XID events, ECC, remapped rows, slowdowns, NVLink errors, a GPU off the
bus); read by the extender (never place on an unhealthy GPU), the MIG planner (never lay out onto one),
the controller and the CLI. Only unhealthy GPUs are listed, so a healthy node carries `{}` and the value
stays small:

  {"3": {"reason": "XID79", "message": "GPU has fallen off the bus", "since": "2026-11-23T22:00:00Z"}}

`reason` is a short CamelCase/word token (bounded label value); `message` is for humans.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

import orjson

from kgwe.errors import KgweError
from kgwe.timestamps import format_rfc3339, parse_rfc3339
from kgwe.vocab import GPU_HEALTH_ANNOTATION

ANNOTATION_KEY = GPU_HEALTH_ANNOTATION
MAX_BYTES = 16 * 1024
MAX_GPU_INDEX = 255
MAX_REASON_CHARS = 64
MAX_MESSAGE_CHARS = 512


@dataclass(frozen=True, slots=True)
class GPUFault:
    """Why one GPU is unhealthy, and since when (timezone-aware UTC)."""

    reason: str
    message: str
    since: datetime


def encode(faults: Mapping[int, GPUFault]) -> str:
    """The annotation value (deterministic: sorted by GPU index; `{}` when every GPU is healthy)."""
    doc = {
        str(i): {
            "reason": f.reason[:MAX_REASON_CHARS],
            "message": f.message[:MAX_MESSAGE_CHARS],
            "since": format_rfc3339(f.since),
        }
        for i, f in sorted(faults.items())
    }
    return orjson.dumps(doc).decode()


def decode(value: str | None) -> dict[int, GPUFault]:
    """GPU index -> fault; absent or `{}` -> no faults. Raises KgweError on a malformed or oversized value."""
    if not value:
        return {}
    if len(value) > MAX_BYTES:
        raise KgweError(f"{ANNOTATION_KEY}: {len(value)} bytes, more than {MAX_BYTES}")
    try:
        doc = orjson.loads(value)
    except orjson.JSONDecodeError as exc:
        raise KgweError(f"{ANNOTATION_KEY}: not JSON ({exc})") from None
    if not isinstance(doc, dict):
        raise KgweError(f"{ANNOTATION_KEY}: expected an object of GPU index -> fault")
    out: dict[int, GPUFault] = {}
    for key, item in doc.items():
        if not (isinstance(key, str) and key.isdigit() and int(key) <= MAX_GPU_INDEX):
            raise KgweError(f"{ANNOTATION_KEY}: {key!r} is not a GPU index 0..{MAX_GPU_INDEX}")
        if not isinstance(item, dict):
            raise KgweError(f"{ANNOTATION_KEY}: GPU {key}: expected an object")
        reason, message, since = item.get("reason"), item.get("message", ""), item.get("since")
        if (
            not isinstance(reason, str)
            or not reason
            or not isinstance(message, str)
            or not isinstance(since, str)
        ):
            raise KgweError(f"{ANNOTATION_KEY}: GPU {key}: needs string reason, message and since")
        when = parse_rfc3339(since)
        if when is None:
            raise KgweError(f"{ANNOTATION_KEY}: GPU {key}: since {since!r} is not RFC 3339 UTC")
        out[int(key)] = GPUFault(reason[:MAX_REASON_CHARS], message[:MAX_MESSAGE_CHARS], when)
    return out
