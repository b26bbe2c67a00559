"""ScoringProfile: how the scheduler extender ranks nodes, and how kube-scheduler calls it."""

from __future__ import annotations

from datetime import timedelta
from typing import ClassVar, Literal

from pydantic import Field, model_validator

from kgwe.policy.base import KgweModel, KgweObject, ObjectMeta
from kgwe.policy.types import Duration
from kgwe.vocab import (
    DEFAULT_BALANCE_WEIGHT,
    DEFAULT_EXTENDER_WEIGHT,
    DEFAULT_FRAGMENTATION,
    DEFAULT_HTTP_TIMEOUT_SECONDS,
    DEFAULT_PERCENTAGE_OF_NODES_TO_SCORE,
    DEFAULT_RESOURCE_WEIGHT,
    DEFAULT_STRATEGY,
    DEFAULT_TOPOLOGY_WEIGHT,
    ScoringStrategy,
)


class Weights(KgweModel):
    """Relative weights of the three score components, each 0..100."""

    topology: int = Field(default=DEFAULT_TOPOLOGY_WEIGHT, ge=0, le=100)
    """Weight of the topology term (0-100): the quality of the best free GPU set for multi-GPU pods."""
    resource: int = Field(default=DEFAULT_RESOURCE_WEIGHT, ge=0, le=100)
    """Weight of the strategy's term (0-100)."""
    balance: int = Field(default=DEFAULT_BALANCE_WEIGHT, ge=0, le=100)
    """Weight of the balance term (0-100); not all three weights may be 0."""

    @model_validator(mode="after")
    def _not_all_zero(self) -> Weights:
        if self.topology + self.resource + self.balance == 0:
            raise ValueError("at least one weight must be greater than 0")
        return self


class ExtenderSettings(KgweModel):
    """The kube-scheduler `extenders:` entry fields KGWE lets policy choose (docs/spec/scoringprofile.md)."""

    weight: int = Field(default=DEFAULT_EXTENDER_WEIGHT, ge=1, le=100)
    """kube-scheduler's weight for the extender's prioritize score (1-100; kube-scheduler requires more
    than 0 with a prioritize verb)."""
    ignorable: bool = False
    """`true`: kube-scheduler schedules on its own counts when the extender fails (fail open)."""
    http_timeout: Duration = Field(
        default=timedelta(seconds=DEFAULT_HTTP_TIMEOUT_SECONDS), alias="httpTimeout"
    )
    """How long kube-scheduler waits for the extender (more than 0s, at most 5m)."""
    percentage_of_nodes_to_score: int = Field(
        default=DEFAULT_PERCENTAGE_OF_NODES_TO_SCORE, ge=0, le=100, alias="percentageOfNodesToScore"
    )
    """kube-scheduler-wide, so only the default profile's is rendered: `100`, every feasible node reaches
    the extender (exact); `0`, kube-scheduler's adaptive sample of feasible nodes (420 of 1,000; all below
    100), the extender choosing among those (less scheduler CPU, a few pods retried). The trade-off is
    measured in docs/scheduler.md#how-many-nodes-the-extender-sees."""

    @model_validator(mode="after")
    def _timeout_positive(self) -> ExtenderSettings:
        if self.http_timeout.total_seconds() <= 0 or self.http_timeout.total_seconds() > 300:
            raise ValueError("httpTimeout must be > 0s and <= 5m")
        return self


class ScoringProfileSpec(KgweModel):
    """How the extender ranks nodes, and how kube-scheduler calls it."""

    default: bool = False
    """The profile for pods that name none; at most one per repository (with several profiles, one must be
    the default)."""
    weights: Weights = Field(default_factory=Weights)
    """Relative weights of the three score terms."""
    # BestFit by default: with the fragmentation term it packs the openb trace best (kgwe simulate).
    strategy: ScoringStrategy = DEFAULT_STRATEGY
    """How the resource term ranks nodes (BestFit: least left over; CostOptimized: cheapest product per the
    PricingCatalog; Priority: the node label `kgwe.nvidia.io/node-priority`)."""
    fragmentation: float = Field(default=DEFAULT_FRAGMENTATION, ge=0, le=100)
    """Weight of the fragmentation-aware (FGD) term that keeps future requests placeable (0-100); `0` turns
    it off."""
    decide_in_filter: bool = True
    """Filter answers a GPU pod with its single best node, so kube-scheduler skips prioritize: one round
    trip, exact placement, and the extender counts the pod on that node before its bind is seen. Pods with
    soft preferences (preferred affinity, ScheduleAnyway spread) still get prioritize, except shared-GPU
    pods, which KGWE alone accounts. `false`: filter and prioritize for every pod."""
    extender: ExtenderSettings = Field(default_factory=ExtenderSettings)
    """The kube-scheduler `extenders:` entry fields policy may choose."""


class ScoringProfile(KgweObject):
    """How the scheduler extender ranks the nodes that can run a GPU pod (a pod picks one with the
    annotation `kgwe.nvidia.io/scoring-profile`, else the default profile is used)."""

    KIND: ClassVar[str] = "ScoringProfile"
    kind: Literal["ScoringProfile"] = "ScoringProfile"
    metadata: ObjectMeta
    spec: ScoringProfileSpec = Field(default_factory=ScoringProfileSpec)
    """The weights, the strategy and the extender's settings."""
