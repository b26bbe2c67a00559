"""MIGStrategy: how the GPUs of one node pool are partitioned with MIG (docs/spec/migstrategy.md).

`preferredProfiles` is a list of one-key maps. A percentage (`1g.10gb: 70%`) is the profile's share of
the pool's compute slices; an integer (`3g.40gb: 4`) is an absolute number of instances in the pool.
One strategy uses one form or the other, never both (the planner's objective differs).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal
from typing import Annotated, Any, ClassVar, Literal

from pydantic import Field, PlainSerializer, PlainValidator, WithJsonSchema, model_validator

from kgwe.policy.base import KgweModel, KgweObject, ObjectMeta
from kgwe.policy.types import PERCENT_PATTERN, Duration, IntOrPercent, LabelMap, format_percent, parse_percent

_PROFILE_NAME = re.compile(r"^\d+g\.\d+gb([+-][a-z.]+)?$")


@dataclass(frozen=True)
class ProfileShare:
    """One entry of preferredProfiles: exactly one of `percent` (0-100) or `count` is set."""

    profile: str
    percent: Decimal | None = None
    count: int | None = None

    def to_yaml(self) -> dict[str, Any]:
        return {self.profile: format_percent(self.percent) if self.percent is not None else self.count}


def _parse_share(value: Any) -> ProfileShare:
    if isinstance(value, ProfileShare):
        return value
    if not isinstance(value, dict) or len(value) != 1:
        raise ValueError(f"expected a one-key map like {{1g.10gb: 70%}} or {{3g.40gb: 4}}, got {value!r}")
    ((profile, amount),) = value.items()
    if not isinstance(profile, str) or not _PROFILE_NAME.match(profile):
        raise ValueError(f"{profile!r} is not a MIG profile name like '1g.10gb'")
    if isinstance(amount, int) and not isinstance(amount, bool):
        if amount < 0:
            raise ValueError(f"{profile}: instance count must be >= 0, got {amount}")
        return ProfileShare(profile=profile, count=amount)
    try:
        percent = parse_percent(amount)
    except ValueError:
        raise ValueError(
            f"{profile}: expected a share like '70%' or an instance count like 4, got {amount!r}"
        ) from None
    if not Decimal(0) < percent <= Decimal(100):
        raise ValueError(f"{profile}: share must be in (0%, 100%], got {amount}")
    return ProfileShare(profile=profile, percent=percent)


ProfileShareField = Annotated[
    ProfileShare,
    PlainValidator(_parse_share),
    PlainSerializer(lambda s: s.to_yaml()),
    WithJsonSchema(
        {
            "type": "object",
            "minProperties": 1,
            "maxProperties": 1,
            "propertyNames": {"pattern": _PROFILE_NAME.pattern},
            "additionalProperties": {
                "anyOf": [{"type": "string", "pattern": PERCENT_PATTERN}, {"type": "integer", "minimum": 0}]
            },
        }
    ),
]


class PartitionStrategy(KgweModel):
    preferred_profiles: list[ProfileShareField] = Field(min_length=1)
    rebalance_interval: Duration | None = None
    min_utilization_threshold: float | None = Field(default=None, ge=0.0, le=1.0)

    @property
    def uses_counts(self) -> bool:
        return any(s.count is not None for s in self.preferred_profiles)

    @property
    def shares(self) -> dict[str, Decimal]:
        """profile -> percent (only for the percentage form)."""
        return {s.profile: s.percent for s in self.preferred_profiles if s.percent is not None}

    @property
    def counts(self) -> dict[str, int]:
        """profile -> instances in the pool (only for the count form)."""
        return {s.profile: s.count for s in self.preferred_profiles if s.count is not None}


class Rollout(KgweModel):
    """Safety gates for changing a pool's layouts (KGWE addition; docs/facts/mig.md §6, §9)."""

    max_unavailable: IntOrPercent = 1
    drain: bool = False
    pending_timeout: Duration | None = None  # how long a node may stay `pending` before the pool stalls

    def max_unavailable_nodes(self, pool_size: int) -> int:
        """Nodes that may change at once; a percentage rounds down but never below 1."""
        v = self.max_unavailable
        if isinstance(v, int):
            return v
        return max(1, int(Decimal(pool_size) * v / 100))


class MIGStrategySpec(KgweModel):
    node_selector: LabelMap = Field(default_factory=dict)
    mig_enabled: bool = True  # false: the selected nodes run with MIG disabled (whole GPUs)
    partition_strategy: PartitionStrategy | None = None
    rollout: Rollout = Field(default_factory=Rollout)

    @model_validator(mode="after")
    def _partition_matches_mode(self) -> MIGStrategySpec:
        if self.mig_enabled and self.partition_strategy is None:
            raise ValueError("partitionStrategy is required when migEnabled is true")
        if not self.mig_enabled and self.partition_strategy is not None:
            raise ValueError("partitionStrategy must be omitted when migEnabled is false")
        return self


class MIGStrategy(KgweObject):
    KIND: ClassVar[str] = "MIGStrategy"
    kind: Literal["MIGStrategy"] = "MIGStrategy"
    metadata: ObjectMeta
    spec: MIGStrategySpec

    def selects(self, labels: dict[str, str]) -> bool:
        return all(labels.get(k) == v for k, v in self.spec.node_selector.items())
