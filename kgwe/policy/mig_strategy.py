"""MIGStrategy: how the GPUs of one node pool are partitioned with MIG (docs/spec/migstrategy.md).

`preferredProfiles` is a list of one-key maps. A percentage (`1g.10gb: 70%`) is the profile's share of
the pool's compute slices; an integer (`3g.40gb: 4`) is an absolute number of instances in the pool.
One strategy uses one form or the other, never both (the planner's objective differs).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import timedelta
from decimal import Decimal
from typing import Annotated, Any, ClassVar, Literal

from pydantic import (
    Field,
    PlainSerializer,
    PlainValidator,
    ValidationInfo,
    WithJsonSchema,
    field_validator,
    model_validator,
)

from kgwe.policy.base import KgweModel, KgweObject, ObjectMeta
from kgwe.policy.types import (
    PERCENT_PATTERN,
    Duration,
    IntOrPercent,
    LabelMap,
    format_duration,
    format_percent,
    parse_int_or_percent,
    parse_percent,
)
from kgwe.vocab import (
    DEFAULT_REBALANCE_MAX_GPUS,
    DEFAULT_STABILIZATION_INTERVALS,
    MAX_REBALANCE_INTERVAL_SECONDS,
    MIN_REBALANCE_INTERVAL_SECONDS,
)

MIG_PROFILE_PATTERN = r"^\d+g\.\d+gb([+-][a-z.]+)?$"
_PROFILE_NAME = re.compile(MIG_PROFILE_PATTERN)


@dataclass(frozen=True)
class ProfileShare:
    """One entry of preferredProfiles: exactly one of `percent` (0-100) or `count` is set."""

    profile: str
    percent: Decimal | None = None
    count: int | None = None

    def to_yaml(self) -> dict[str, Any]:
        return {self.profile: format_percent(self.percent) if self.percent is not None else self.count}


def _parse_share(value: object) -> ProfileShare:
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


def _percent_of(value: int | Decimal, total: int) -> int:
    """A count, or a percentage of `total` rounded down but never below 1."""
    if isinstance(value, int):
        return value
    return max(1, int(Decimal(total) * value / 100))


class PartitionStrategy(KgweModel):
    """The pool's layout: preferred shares or counts, and, with `rebalanceInterval`, demand-driven
    rebalancing on top of them (docs/mig-rebalancing.md). Every rebalancing field needs the interval."""

    preferred_profiles: list[ProfileShareField] = Field(min_length=1)
    """One-key maps, each one MIG profile valid for the pool's GPU model with a percentage of compute
    slices (`"70%"`) or a whole count of instances in the pool; one form or the other, never both; shares
    add up to at most 100%."""
    rebalance_interval: Duration | None = None
    """Turns on demand-driven rebalancing (5s-24h; docs/mig-rebalancing.md): the controller measures the
    pool's MIG demand (unschedulable pods, held instances) and decides at most once per interval whether
    the layout follows it. Without it the pool keeps the strategy's layout."""
    min_utilization_threshold: float | None = Field(default=None, ge=0.0, le=1.0)
    """With `--prometheus` on the controller (0-1): a held instance whose pod's mean dcgm-exporter engine
    activity over the interval stays below this is not counted as demand (its GPU is still never
    repartitioned under it unless `drain`). Needs `rebalanceInterval`."""
    rebalance_max_gpus: IntOrPercent | None = Field(default=None, alias="rebalanceMaxGPUs")
    """GPUs one rebalance decision may repartition (default: 25%, at least 1). Needs
    `rebalanceInterval`."""
    rebalance_stabilization_window: Duration | None = None
    """Demand that falls is followed only after it stayed low this long (the peak over the window is in
    force); at least `rebalanceInterval` (default: 3 × `rebalanceInterval`). Needs `rebalanceInterval`."""

    @field_validator("rebalance_interval")
    @classmethod
    def _interval_bounds(cls, value: timedelta | None) -> timedelta | None:
        if value is None:
            return None
        seconds = value.total_seconds()
        if not MIN_REBALANCE_INTERVAL_SECONDS <= seconds <= MAX_REBALANCE_INTERVAL_SECONDS:
            raise ValueError(
                f"must be between {MIN_REBALANCE_INTERVAL_SECONDS}s and "
                f"{MAX_REBALANCE_INTERVAL_SECONDS // 3600}h, got {seconds:g}s"
            )
        return value

    @field_validator("min_utilization_threshold", "rebalance_max_gpus", "rebalance_stabilization_window")
    @classmethod
    def _needs_interval(
        cls, value: float | int | Decimal | timedelta | None, info: ValidationInfo
    ) -> float | int | Decimal | timedelta | None:
        if value is not None and info.data.get("rebalance_interval") is None:
            name = {
                "min_utilization_threshold": "minUtilizationThreshold",
                "rebalance_max_gpus": "rebalanceMaxGPUs",
                "rebalance_stabilization_window": "rebalanceStabilizationWindow",
            }[str(info.field_name)]
            if "rebalance_interval" not in info.data:  # the interval itself was invalid: said already
                return value
            raise ValueError(f"{name} has no effect without rebalanceInterval (rebalancing is off)")
        if info.field_name == "rebalance_max_gpus" and isinstance(value, int | Decimal) and not value > 0:
            raise ValueError("must allow at least one GPU (an integer >= 1 or a percentage above 0%)")
        interval = info.data.get("rebalance_interval")
        window = info.field_name == "rebalance_stabilization_window"
        if window and isinstance(value, timedelta) and interval is not None and value < interval:
            raise ValueError(
                f"must be at least rebalanceInterval ({format_duration(interval)}): a shorter window "
                "holds no demand across a decision"
            )
        return value

    def max_gpus_per_rebalance(self, pool_gpus: int) -> int:
        """GPUs one rebalance decision may repartition (rebalanceMaxGPUs, else the vocab default)."""
        value = self.rebalance_max_gpus
        if value is None:
            value = parse_int_or_percent(DEFAULT_REBALANCE_MAX_GPUS)
        return _percent_of(value, pool_gpus)

    @property
    def stabilization_window(self) -> timedelta | None:
        """How long falling demand must stay low before the pool follows it (None: no rebalancing)."""
        if self.rebalance_interval is None:
            return None
        return (
            self.rebalance_stabilization_window or self.rebalance_interval * DEFAULT_STABILIZATION_INTERVALS
        )

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
    """Nodes of the pool changing at once (relabelled and not yet switched, or draining): a count or a
    percentage (rounded down, never below 1)."""
    drain: bool = False
    """`true`: cordon and evict (Eviction API, PodDisruptionBudgets respected) a node whose GPUs are held
    before changing it; `false`: such nodes wait until idle."""
    pending_timeout: Duration | None = None
    """A node that has not switched this long after it was relabelled stalls the pool (MIG: none by
    default; the MIG manager can wedge in `pending`)."""

    def max_unavailable_nodes(self, pool_size: int) -> int:
        """Nodes that may change at once; a percentage rounds down but never below 1."""
        return _percent_of(self.max_unavailable, pool_size)


class MIGStrategySpec(KgweModel):
    """The pool, its MIG layout, and how a change rolls out."""

    node_selector: LabelMap = Field(default_factory=dict)
    """The pool: nodes carrying all these labels. Two strategies may not claim the same node."""
    mig_enabled: bool = True
    """`false`: MIG is turned off on the pool's GPUs, which run whole (unless a GPU is busy and drain is
    off)."""
    partition_strategy: PartitionStrategy | None = None
    """The pool's layout; required when `migEnabled`, absent otherwise."""
    rollout: Rollout = Field(default_factory=Rollout)
    """How fast the pool changes; a node has changed when the MIG manager reports `success`."""

    @model_validator(mode="after")
    def _partition_matches_mode(self) -> MIGStrategySpec:
        if self.mig_enabled and self.partition_strategy is None:
            raise ValueError("partitionStrategy is required when migEnabled is true")
        if not self.mig_enabled and self.partition_strategy is not None:
            raise ValueError("partitionStrategy must be omitted when migEnabled is false")
        return self


class MIGStrategy(KgweObject):
    """How the GPUs of one node pool are partitioned with MIG, and how fast changes roll out."""

    KIND: ClassVar[str] = "MIGStrategy"
    kind: Literal["MIGStrategy"] = "MIGStrategy"
    metadata: ObjectMeta
    spec: MIGStrategySpec
    """The pool, the layout and the rollout."""

    def selects(self, labels: dict[str, str]) -> bool:
        return all(labels.get(k) == v for k, v in self.spec.node_selector.items())
