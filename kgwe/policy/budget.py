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
    """The spend limit per period."""

    amount: Money
    """The spend limit per period, a quoted decimal."""
    currency: str = Field(default=DEFAULT_CURRENCY, pattern=CURRENCY_PATTERN)
    """ISO 4217 code; it must match the PricingCatalog's currency."""


class BudgetAlert(KgweModel):
    """At `at` of the limit: Notify (metric + Event) or Enforce (cap the quotas at current use)."""

    at: Percent
    """The threshold, a percentage of the limit."""
    action: Literal["Notify", "Enforce"] = "Notify"
    """`Notify`: a Warning Event (and a metric); `Enforce`: also cap the namespaces' quotas at current
    use."""


class GPUBudgetSpec(KgweModel):
    """What a team may spend per period, its namespaces' GPU quota, and when to alert."""

    team: LabelValue
    """The team the spend is charged to (chargeback `team`); a Kubernetes label value (letters, digits,
    `-`, `_`, `.`, at most 63, starting and ending alphanumeric): it lands in labels, reports and
    terminals."""
    namespaces: list[DnsLabel] = Field(min_length=1)
    """Namespaces whose GPU use counts (at least one); a namespace belongs to at most one budget."""
    period: Literal["Daily", "Weekly", "Monthly", "Quarterly", "Yearly"] = "Monthly"
    """The budget period (UTC calendar)."""
    limit: BudgetLimit
    """The spend limit per period."""
    quota: dict[str, int] = Field(default_factory=dict)
    """GPU resource name to count, e.g. `nvidia.com/gpu: 32`: the `kgwe-budget` ResourceQuota
    (`requests.<resource>`) in each namespace; MIG resources must exist on the cluster's GPUs. Leave out
    the GPUs of namespaces where Kueue admits GPUWorkloads: Kueue's ClusterQueue counts them there, and a
    GPUWorkload Kueue would admit against a quota on the same GPUs is refused `BudgetCountedTwice`
    (docs/spec/gpuworkload.md#kueue)."""
    alerts: list[BudgetAlert] = Field(default_factory=list)
    """Thresholds of the limit and what happens at each."""
    predicted_cost_admission: PredictedCostAdmission = Field(
        default=DEFAULT_PREDICTED_COST_ADMISSION, alias="predictedCostAdmission"
    )
    """What to do with a GPUWorkload of these namespaces whose expected cost (the optimizer's predicted
    duration × its GPUs × the catalog's price, docs/optimizer.md) exceeds what remains of the limit this
    period: `Hold` keeps it `Admitted=False`, reason `PredictedCostHeld`, and admits it once the budget has
    room (a new period, a raised limit); `Refuse` fails it (`Failed=True`, reason `PredictedCostOverBudget`);
    `Off`: the quota alone decides. Needs the controller's metering (on unless `--no-costs`) and a
    PricingCatalog; a workload whose cost cannot be predicted (no price) is admitted as with `Off`."""

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
    """What a team may spend on GPUs per period, its namespaces' GPU quota, and when to alert."""

    KIND: ClassVar[str] = "GPUBudget"
    kind: Literal["GPUBudget"] = "GPUBudget"
    metadata: ObjectMeta
    spec: GPUBudgetSpec
    """The team, its namespaces, the limit, the quota and the alerts."""
