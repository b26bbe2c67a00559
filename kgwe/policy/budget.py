"""GPUBudget: what a team may spend per period, its namespaces' GPU quota, and when to alert."""

from __future__ import annotations

import re
from typing import ClassVar, Literal

from pydantic import Field, field_validator

from kgwe.policy.base import DnsLabel, KgweModel, KgweObject, ObjectMeta
from kgwe.policy.types import LabelValue, Money, Percent
from kgwe.vocab import (
    DEFAULT_CURRENCY,
    DEFAULT_PREDICTED_COST_ADMISSION,
    PredictedCostAdmission,
    quota_key,
)

_RESOURCE = re.compile(
    r"^(requests\.)?([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
)
CURRENCY_PATTERN = r"^[A-Z]{3}$"


class BudgetLimit(KgweModel):
    amount: Money
    currency: str = Field(default=DEFAULT_CURRENCY, pattern=CURRENCY_PATTERN)


class BudgetAlert(KgweModel):
    """At `at` of the limit: Notify (metric + Event) or Enforce (cap the quotas at current use)."""

    at: Percent
    action: Literal["Notify", "Enforce"] = "Notify"


class GPUBudgetSpec(KgweModel):
    team: LabelValue
    namespaces: list[DnsLabel] = Field(min_length=1)
    period: Literal["Daily", "Weekly", "Monthly", "Quarterly", "Yearly"] = "Monthly"
    limit: BudgetLimit
    quota: dict[str, int] = Field(default_factory=dict)  # resource name -> count, e.g. nvidia.com/gpu: 32
    alerts: list[BudgetAlert] = Field(default_factory=list)
    # Hold or Refuse a GPUWorkload of these namespaces whose expected cost exceeds what remains this period
    # (kgwe.optimizer.admission); Off: the quota alone decides, as without the optimizer
    predicted_cost_admission: PredictedCostAdmission = Field(
        default=DEFAULT_PREDICTED_COST_ADMISSION, alias="predictedCostAdmission"
    )

    @field_validator("quota")
    @classmethod
    def _quota_names(cls, quota: dict[str, int]) -> dict[str, int]:
        for name, count in quota.items():
            if not _RESOURCE.match(name):
                raise ValueError(f"{name!r} is not a resource name like 'nvidia.com/gpu'")
            if count < 0:
                raise ValueError(f"{name}: quota must be >= 0, got {count}")
        return quota

    def quota_hard(self) -> dict[str, str]:
        """ResourceQuota `spec.hard`: extended resources only exist in quota as `requests.<name>`."""
        hard = {quota_key(name): str(count) for name, count in self.quota.items()}
        return dict(sorted(hard.items()))


class GPUBudget(KgweObject):
    KIND: ClassVar[str] = "GPUBudget"
    kind: Literal["GPUBudget"] = "GPUBudget"
    metadata: ObjectMeta
    spec: GPUBudgetSpec
