"""RFC 3339 times as the Kubernetes API carries them, in one place.

KGWE writes second-precision UTC (`2026-11-23T22:00:00Z`) into annotations and status; it reads whatever the
API returns (fractional seconds or an offset included) as timezone-aware UTC. Standard library only, so the
pure core may use it.
"""

from __future__ import annotations

from datetime import UTC, datetime


def format_rfc3339(when: datetime) -> str:
    """RFC 3339 UTC with second precision, as KGWE writes times."""
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_rfc3339(text: object) -> datetime | None:
    """A timezone-aware UTC datetime; None when absent, not a string or malformed."""
    if not isinstance(text, str) or not text:
        return None
    try:
        value = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return value.astimezone(UTC) if value.tzinfo else value.replace(tzinfo=UTC)
