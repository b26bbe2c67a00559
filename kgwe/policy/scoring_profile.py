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
    resource: int = Field(default=DEFAULT_RESOURCE_WEIGHT, ge=0, le=100)
    balance: int = Field(default=DEFAULT_BALANCE_WEIGHT, ge=0, le=100)

    @model_validator(mode="after")
    def _not_all_zero(self) -> Weights:
        if self.topology + self.resource + self.balance == 0:
            raise ValueError("at least one weight must be greater than 0")
        return self


class ExtenderSettings(KgweModel):
    """The kube-scheduler `extenders:` entry fields KGWE lets policy choose (docs/spec/scoringprofile.md)."""

    weight: int = Field(
        default=DEFAULT_EXTENDER_WEIGHT, ge=1, le=100
    )  # kube-scheduler requires > 0 with a prioritizeVerb
    ignorable: bool = False
    http_timeout: Duration = Field(
        default=timedelta(seconds=DEFAULT_HTTP_TIMEOUT_SECONDS), alias="httpTimeout"
    )
    # kube-scheduler-wide, so only the default profile's counts: 100 = every feasible node reaches the
    # extender (exact, slower at scale), 0 = kube-scheduler's adaptive sample of feasible nodes
    percentage_of_nodes_to_score: int = Field(
        default=DEFAULT_PERCENTAGE_OF_NODES_TO_SCORE, ge=0, le=100, alias="percentageOfNodesToScore"
    )

    @model_validator(mode="after")
    def _timeout_positive(self) -> ExtenderSettings:
        if self.http_timeout.total_seconds() <= 0 or self.http_timeout.total_seconds() > 300:
            raise ValueError("httpTimeout must be > 0s and <= 5m")
        return self


class ScoringProfileSpec(KgweModel):
    default: bool = False
    weights: Weights = Field(default_factory=Weights)
    # BestFit by default: with the fragmentation term it packs the openb trace best (kgwe simulate).
    strategy: ScoringStrategy = DEFAULT_STRATEGY
    # Weight of the fragmentation-aware (FGD) term that keeps future requests placeable; 0 turns it off.
    fragmentation: float = Field(default=DEFAULT_FRAGMENTATION, ge=0, le=100)
    # Filter answers a GPU pod with the single best node, so kube-scheduler skips prioritize: one HTTP call
    # per pod, full score precision, and the extender counts the pod on that node before its bind is seen.
    # Pods with soft preferences (preferred affinity, ScheduleAnyway spread) still get prioritize, except
    # shared-GPU pods, which KGWE alone accounts. false: filter + prioritize for every pod.
    decide_in_filter: bool = True
    extender: ExtenderSettings = Field(default_factory=ExtenderSettings)


class ScoringProfile(KgweObject):
    KIND: ClassVar[str] = "ScoringProfile"
    kind: Literal["ScoringProfile"] = "ScoringProfile"
    metadata: ObjectMeta
    spec: ScoringProfileSpec = Field(default_factory=ScoringProfileSpec)
