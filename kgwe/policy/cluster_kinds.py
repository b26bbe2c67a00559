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
    """What the condition is about, e.g. `Ready`."""
    status: Literal["True", "False", "Unknown"]
    """Whether it holds."""
    reason: str | None = None
    """Why, in one CamelCase word."""
    message: str | None = None
    """Why, for a person."""
    last_transition_time: str | None = None
    """When `status` last changed (RFC 3339)."""
    observed_generation: int | None = None
    """The generation of the spec the condition was set for."""


class GitRef(KgweModel):
    """What to track: exactly one of a branch, a tag or a commit."""

    branch: GitRefName | None = None
    """The branch to follow (`main` when no ref is given)."""
    tag: GitRefName | None = None
    """The tag to follow."""
    commit: str | None = Field(default=None, pattern=GIT_COMMIT_PATTERN)
    """The commit to pin (hex SHA, 7-40 digits)."""

    @model_validator(mode="after")
    def _exactly_one(self) -> GitRef:
        if sum(x is not None for x in (self.branch, self.tag, self.commit)) != 1:
            raise ValueError("set exactly one of branch, tag, commit")
        return self


class SecretRef(KgweModel):
    """A Secret of the PolicyRepository's namespace."""

    name: str = Field(min_length=1)
    """The Secret's name."""


class ReportsSpec(KgweModel):
    """Where and when cost reports, the inventory snapshot and the audit log are committed."""

    branch: GitRefName | None = None
    """The branch the reports are committed to (default: the synced branch)."""
    path: str = Field(default=DEFAULT_REPORTS_PATH, pattern=r"^[A-Za-z0-9_][A-Za-z0-9._/-]*$", max_length=255)
    """The folder for `<cluster>/<period>/...` reports, `gpu-inventory.yaml` and the audit log
    `audit/<YYYY-MM>.jsonl` (one line per reconcile that wrote to the cluster: commit, author, objects,
    nodes, budget quotas; docs/audit.md). It must lie outside the policy `path`."""
    schedule: str = Field(default=DEFAULT_REPORT_SCHEDULE, pattern=r"^\S+( \S+){4}$")
    """When reports are committed: a five-field cron expression, in UTC."""


def _folder(path: str) -> str:
    """A repository-relative folder without leading/trailing slashes or "./"; "" for the root."""
    folder = path.strip().strip("/")
    while folder.startswith("./"):
        folder = folder[2:].lstrip("/")
    return "" if folder == "." else folder


class PolicyRepositorySpec(KgweModel):
    """Which Git repository (and folder) holds the cluster's GPU policy, and how it is synced."""

    url: GitUrl
    """The Git URL: `https://`, `ssh://` or scp-like `git@host:path` (local paths, `file://` and
    `http://` only where the controller's operator allows them); no password in it."""
    ref: GitRef = Field(default_factory=lambda: GitRef(branch=DEFAULT_BRANCH))
    """What to track: exactly one of `branch`, `tag`, `commit` (default: branch `main`)."""
    path: str = Field(default=".", max_length=255)
    """The folder of the repository holding the policy."""
    interval: PositiveDuration = Field(default=timedelta(minutes=1))
    """How often to fetch and reconcile (with jitter)."""
    timeout: PositiveDuration | None = None
    """The limit for one Git fetch or push (default: 1m; at most 10m)."""
    secret_ref: SecretRef | None = None
    """A Secret of the same namespace with Git credentials (`username` and `password`, or `bearerToken`;
    `identity` and `known_hosts` for SSH), opted in with the label `kgwe.nvidia.io/git-credentials` and
    bound to hosts by the annotation `kgwe.nvidia.io/git-hosts`."""
    suspend: bool = False
    """`true`: nothing is fetched or applied until it is set back."""
    reports: ReportsSpec | None = None
    """Where cost reports, the inventory snapshot and the audit log are committed; absent: none are."""
    deletion_policy: DeletionPolicy = DEFAULT_DELETION_POLICY
    """What the controller releases when the PolicyRepository is deleted, before its finalizer
    `kgwe.nvidia.io/release` goes: `Delete` removes what KGWE wrote (quotas, rendered ConfigMaps; nodes'
    `nvidia.com/mig.config` back to `all-disabled` and `nvidia.com/device-plugin.config` removed, only
    while their GPUs are idle; KGWE's node marks); `Retain` leaves the policy in force and lifts only
    Enforce caps and KGWE's cordons. Why `Delete` is the default, and the way out step by step:
    docs/offboarding.md."""

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
    """One object the controller applied."""

    api_version: str = Field(alias="apiVersion")
    """Its apiVersion."""
    kind: str
    """Its kind."""
    name: str
    """Its name."""
    namespace: str | None = None
    """Its namespace (none for cluster-scoped objects)."""


class PolicyRepositoryStatus(KgweModel):
    """What the controller fetched, applied and rolled out (written by it). `rollout`, `rebalance` and
    `auditLog` are free-form, owned by the reconciler."""

    model_config = ConfigDict(extra="allow")

    observed_generation: int | None = None
    """The generation the conditions describe."""
    conditions: list[Condition] = Field(default_factory=list)
    """kstatus conditions: `Ready`, `Reconciling`, `Stalled`, `UtilizationAvailable`
    (docs/spec/policyrepository.md#conditions)."""
    last_applied_revision: str | None = None
    """The last revision applied in full (the one in force), `<branch>@sha1:<sha>`."""
    last_attempted_revision: str | None = None
    """The last revision fetched, `<branch>@sha1:<sha>`."""
    inventory: list[AppliedObject] = Field(default_factory=list)
    """Every object applied (what prune compares with)."""
    rollout: dict[str, Any] = Field(default_factory=dict)
    """Per pool: nodes done, in progress, draining, pending, waiting for idle GPUs (MIG pools by
    MIGStrategy name, device-plugin sharing pools as `sharing/<GPUSharingStrategy>`; once the
    PolicyRepository is deleted, the way out as `release/mig` and `release/sharing`, docs/offboarding.md)."""
    rebalance: dict[str, Any] = Field(default_factory=dict)
    """Per MIG pool with `rebalanceInterval`: the demand target in force, its decision number (`epoch`),
    the nodes it may change, when it was decided and last evaluated, the demand samples of the
    stabilization window, pending demand, and a message saying why (docs/mig-rebalancing.md)."""
    audit_log: dict[str, Any] = Field(default_factory=dict)
    """KGWE's own state of its audit log: the file it appends to (`path`), its `lines` and `bytes` there,
    the hash chain's `start` and `head`, whether it is `full`, a change counter `seq`, and `tampering`
    (`path`, `found`, `time`), the last tampering found (docs/audit.md)."""


class PolicyRepository(KgweObject):
    """Which Git repository holds the cluster's GPU policy. The controller fetches it every `interval`,
    validates the whole revision, applies what it renders with server-side apply, prunes what the revision
    no longer has and rolls MIG layouts out pool by pool; an invalid revision changes nothing."""

    KIND: ClassVar[str] = "PolicyRepository"
    kind: Literal["PolicyRepository"] = "PolicyRepository"
    metadata: ClusterObjectMeta
    spec: PolicyRepositorySpec
    """The repository, the folder and how they are synced."""
    status: PolicyRepositoryStatus | None = None
    """What the controller fetched, applied and rolled out."""
