"""Cluster kinds (CRDs): PolicyRepository (what to sync); GPUWorkload lives in gpu_workload.py."""

from __future__ import annotations

from datetime import timedelta
from typing import Any, ClassVar, Literal

from pydantic import ConfigDict, Field, ValidationInfo, field_validator, model_validator

from kgwe.policy.base import ClusterObjectMeta, KgweModel, KgweObject
from kgwe.policy.types import GIT_COMMIT_PATTERN, GitRefName, GitUrl, PositiveDuration
from kgwe.vocab import DEFAULT_DELETION_POLICY, DEFAULT_REPORT_SCHEDULE, DEFAULT_REPORTS_PATH, DeletionPolicy

# A Git fetch or push may take at most this long (spec.timeout): a slow or hostile server cannot hold a
# worker longer, and the controller kills the git process when it is up.
MAX_GIT_TIMEOUT = timedelta(minutes=10)
DEFAULT_GIT_TIMEOUT = timedelta(seconds=60)
DEFAULT_BRANCH = "main"


class Condition(KgweModel):
    """kstatus / metav1.Condition."""

    type: str
    status: Literal["True", "False", "Unknown"]
    reason: str | None = None
    message: str | None = None
    last_transition_time: str | None = None
    observed_generation: int | None = None


class GitRef(KgweModel):
    """What to track: exactly one of a branch, a tag or a commit."""

    branch: GitRefName | None = None
    tag: GitRefName | None = None
    commit: str | None = Field(default=None, pattern=GIT_COMMIT_PATTERN)

    @model_validator(mode="after")
    def _exactly_one(self) -> GitRef:
        if sum(x is not None for x in (self.branch, self.tag, self.commit)) != 1:
            raise ValueError("set exactly one of branch, tag, commit")
        return self


class SecretRef(KgweModel):
    name: str = Field(min_length=1)


class ReportsSpec(KgweModel):
    branch: GitRefName | None = None  # default: the synced branch
    path: str = Field(default=DEFAULT_REPORTS_PATH, pattern=r"^[A-Za-z0-9_][A-Za-z0-9._/-]*$", max_length=255)
    # cron, UTC; `reports:` absent means no reports at all
    schedule: str = Field(default=DEFAULT_REPORT_SCHEDULE, pattern=r"^\S+( \S+){4}$")


def _folder(path: str) -> str:
    """A repository-relative folder without leading/trailing slashes or "./"; "" for the root."""
    folder = path.strip().strip("/")
    while folder.startswith("./"):
        folder = folder[2:].lstrip("/")
    return "" if folder == "." else folder


class PolicyRepositorySpec(KgweModel):
    url: GitUrl
    ref: GitRef = Field(default_factory=lambda: GitRef(branch=DEFAULT_BRANCH))
    path: str = Field(default=".", max_length=255)
    interval: PositiveDuration = Field(default=timedelta(minutes=1))
    timeout: PositiveDuration | None = None  # each git fetch/push; default 60s, at most 10m
    secret_ref: SecretRef | None = None
    suspend: bool = False
    reports: ReportsSpec | None = None
    # what the controller releases when the PolicyRepository is deleted (docs/offboarding.md)
    deletion_policy: DeletionPolicy = DEFAULT_DELETION_POLICY

    @field_validator("timeout")
    @classmethod
    def _timeout_bounded(cls, value: timedelta | None) -> timedelta | None:
        if value is not None and value > MAX_GIT_TIMEOUT:
            raise ValueError(f"timeout may be at most {int(MAX_GIT_TIMEOUT.total_seconds() // 60)}m")
        return value

    @field_validator("path")
    @classmethod
    def _path_inside(cls, value: str) -> str:
        folder = _folder(value)
        if folder.startswith("-") or ".." in folder.split("/"):
            raise ValueError(f"path {value!r} must stay inside the repository")
        return value

    @field_validator("reports")
    @classmethod
    def _reports_outside_policy(cls, value: ReportsSpec | None, info: ValidationInfo) -> ReportsSpec | None:
        if value is None or "path" not in info.data:
            return value
        reports, policy = value.path.strip("/"), _folder(info.data["path"])
        if ".." in reports.split("/"):
            raise ValueError(f"reports.path {value.path!r} must stay inside the repository")
        if not policy or reports == policy or reports.startswith(policy + "/"):
            raise ValueError(
                f"reports.path {reports!r} lies inside the policy path {info.data['path']!r}: reports must "
                "be written outside the policy KGWE reads"
            )
        return value

    # Default-filling accessors: the controller reads these, never the raw fields.
    @property
    def policy_path(self) -> str:
        """The policy folder inside the repository, "" for its root."""
        return _folder(self.path)

    @property
    def reports_path(self) -> str:
        return (self.reports.path if self.reports else DEFAULT_REPORTS_PATH).strip("/")

    @property
    def reports_branch(self) -> str:
        return (self.reports.branch if self.reports else None) or self.ref.branch or DEFAULT_BRANCH

    @property
    def timeout_seconds(self) -> float:
        return (self.timeout or DEFAULT_GIT_TIMEOUT).total_seconds()

    @property
    def interval_seconds(self) -> float:
        return self.interval.total_seconds()


class AppliedObject(KgweModel):
    api_version: str = Field(alias="apiVersion")
    kind: str
    name: str
    namespace: str | None = None


class PolicyRepositoryStatus(KgweModel):
    """Written by the controller. `rollout` is per-pool MIG rollout progress, `rebalance` per-pool MIG
    rebalancing (docs/mig-rebalancing.md) and `auditLog` KGWE's own state of its audit log (docs/audit.md);
    all free-form, owned by the reconciler."""

    model_config = ConfigDict(extra="allow")

    observed_generation: int | None = None
    conditions: list[Condition] = Field(default_factory=list)
    last_applied_revision: str | None = None
    last_attempted_revision: str | None = None
    inventory: list[AppliedObject] = Field(default_factory=list)
    rollout: dict[str, Any] = Field(default_factory=dict)
    rebalance: dict[str, Any] = Field(default_factory=dict)  # per pool: the MIG rebalancing record
    # what KGWE wrote to its audit log (file, counts, hash chain head) and the last tampering found
    audit_log: dict[str, Any] = Field(default_factory=dict)


class PolicyRepository(KgweObject):
    KIND: ClassVar[str] = "PolicyRepository"
    kind: Literal["PolicyRepository"] = "PolicyRepository"
    metadata: ClusterObjectMeta
    spec: PolicyRepositorySpec
    status: PolicyRepositoryStatus | None = None
