"""PodTemplatePolicy: what the pod templates of GPUWorkloads may set that an ordinary tenant pod may not
(docs/spec/podtemplatepolicy.md).

The GPUWorkload controller creates Jobs and Deployments with its own rights, so a workload's template must
not be a way around the rules of the namespace it runs in. Host namespaces (network, PID, IPC) and host
ports, hostPath volumes, privileged containers (and Windows host processes), added Linux capabilities,
`system-*` PriorityClasses and any ServiceAccount but `default` are refused unless a platform team allows
them here, in Git — per namespace, or for every namespace no other policy names. Without a policy all of
them are refused. `template_violations()` is the one check `kgwe validate` and the controller both run.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import orjson
from pydantic import Field, field_validator

from kgwe.policy.base import DnsLabel, DnsSubdomain, KgweModel, KgweObject, ObjectMeta

SYSTEM_PRIORITY_PREFIX = "system-"
DEFAULT_SERVICE_ACCOUNT = "default"
CONTAINER_KINDS = ("initContainers", "containers", "ephemeralContainers")
CAPABILITY_PATTERN = r"^(?:CAP_)?[A-Z][A-Z0-9_]*$"


class HostPathAllowance(KgweModel):
    """hostPath volumes under `pathPrefix` (whole path components: /data allows /data/x, not /database)."""

    path_prefix: str = Field(pattern=r"^/", max_length=4096)
    """An absolute path: hostPath volumes at or below it are allowed (whole path components, no `..`)."""
    read_only: bool = True
    """Every mount of such a volume must be `readOnly: true`."""

    @field_validator("path_prefix")
    @classmethod
    def _no_dots(cls, v: str) -> str:
        if ".." in v.split("/"):
            raise ValueError("a path prefix may not contain '..'")
        return v


class PodTemplatePolicySpec(KgweModel):
    """What pod templates in the policy's namespaces may set beyond an ordinary pod."""

    namespaces: list[DnsLabel] = Field(default_factory=list, max_length=1000)
    """Where the policy applies; empty: every namespace no other PodTemplatePolicy names."""
    host_network: bool = Field(default=False, alias="hostNetwork")
    """Pods may use the node's network namespace."""
    host_pid: bool = Field(default=False, alias="hostPID")
    """Pods may use the node's process namespace."""
    host_ipc: bool = Field(default=False, alias="hostIPC")
    """Pods may use the node's IPC namespace."""
    host_ports: bool = False
    """Containers may bind ports on the node."""
    privileged: bool = False
    """Containers may be privileged (or Windows host processes)."""
    host_paths: list[HostPathAllowance] = Field(default_factory=list, max_length=100)
    """The hostPath volumes pods may mount."""
    capabilities: list[str] = Field(default_factory=list, max_length=100)
    """Linux capabilities containers may add, e.g. `IPC_LOCK` for RDMA, `SYS_NICE` (with or without
    `CAP_`; `ALL` only if listed)."""
    priority_classes: list[DnsSubdomain] = Field(default_factory=list, max_length=100)
    """`system-*` PriorityClasses the pods may use (other classes are always allowed)."""
    service_accounts: list[DnsSubdomain] = Field(default_factory=list, max_length=100)
    """ServiceAccounts of the namespace the pods may run as, besides `default`."""

    @field_validator("capabilities")
    @classmethod
    def _capability_names(cls, v: list[str]) -> list[str]:
        import re

        for name in v:
            if not re.match(CAPABILITY_PATTERN, name):
                raise ValueError(f"{name!r} is not a Linux capability name (e.g. IPC_LOCK, SYS_NICE)")
        return v


class PodTemplatePolicy(KgweObject):
    """What GPUWorkloads' pod templates may set beyond an ordinary pod, in some namespaces."""

    KIND: ClassVar[str] = "PodTemplatePolicy"
    kind: Literal["PodTemplatePolicy"] = "PodTemplatePolicy"
    metadata: ObjectMeta
    spec: PodTemplatePolicySpec = Field(default_factory=PodTemplatePolicySpec)
    """The namespaces and what their pod templates may set."""


DEFAULT_SPEC = PodTemplatePolicySpec()  # what holds without any policy: everything listed refused

Path = tuple[str | int, ...]


def pod_template_policies_json(policies: Sequence[PodTemplatePolicy]) -> str:
    """The policies as the controller reads them (rendered into a ConfigMap): name and spec, sorted."""
    docs = [{"name": p.name, "spec": p.spec.to_yaml_dict()} for p in sorted(policies, key=lambda p: p.name)]
    return orjson.dumps(docs, option=orjson.OPT_SORT_KEYS | orjson.OPT_INDENT_2).decode() + "\n"


def policies_from_json(text: str) -> list[PodTemplatePolicy]:
    """What `pod_template_policies_json` wrote; ValueError (pydantic's included) when it is not that."""
    docs = orjson.loads(text)
    if not isinstance(docs, list) or not all(isinstance(d, dict) for d in docs):
        raise ValueError("expected a list of {name, spec} objects")
    return [
        PodTemplatePolicy.model_validate({"metadata": {"name": d.get("name")}, "spec": d.get("spec") or {}})
        for d in docs
    ]


@dataclass(frozen=True)
class Violation:
    """A template field no policy allowed: where, what it does, and the policy field that would allow it."""

    path: Path
    what: str
    allowance: str

    def message(self, policy: PodTemplatePolicy | None) -> str:
        if policy is None:
            return f"{self.what}: refused unless a PodTemplatePolicy allows it (spec.{self.allowance})"
        return f'{self.what}: PodTemplatePolicy "{policy.name}" does not allow it (spec.{self.allowance})'


def policy_for(namespace: str | None, policies: Sequence[PodTemplatePolicy]) -> PodTemplatePolicy | None:
    """The policy naming `namespace`, else the one naming none, else None (DEFAULT_SPEC holds)."""
    if namespace:
        for policy in policies:
            if namespace in policy.spec.namespaces:
                return policy
    return next((p for p in policies if not p.spec.namespaces), None)


def template_violations(template: Mapping[str, Any], allow: PodTemplatePolicySpec) -> list[Violation]:
    """Each field of a core/v1 PodTemplateSpec that `allow` does not permit, with its path in the template.
    Fields of the wrong type are the template schema's business, not this check's: they are skipped."""
    spec = template.get("spec")
    if not isinstance(spec, Mapping):
        return []
    out: list[Violation] = []
    for field, allowed, what in (
        ("hostNetwork", allow.host_network, "the node's network namespace"),
        ("hostPID", allow.host_pid, "the node's process namespace"),
        ("hostIPC", allow.host_ipc, "the node's IPC namespace"),
    ):
        if spec.get(field) is True and not allowed:
            out.append(Violation(("spec", field), what, field))
    for field in ("serviceAccountName", "serviceAccount"):  # serviceAccount: the deprecated alias
        name = spec.get(field)
        if isinstance(name, str) and name and name not in (DEFAULT_SERVICE_ACCOUNT, *allow.service_accounts):
            out.append(Violation(("spec", field), f'ServiceAccount "{name}"', "serviceAccounts"))
    name = spec.get("priorityClassName")
    if isinstance(name, str) and priority_refused(name, allow):
        out.append(Violation(("spec", "priorityClassName"), priority_what(name), "priorityClasses"))
    mounts: dict[str, list[tuple[Path, bool]]] = {}
    for path, container in _containers(spec):
        out += _container(path, container, allow)
        for j, mount in enumerate(_list(container.get("volumeMounts"))):
            if isinstance(mount, Mapping) and isinstance(mount.get("name"), str):
                mounts.setdefault(mount["name"], []).append(
                    ((*path, "volumeMounts", j), mount.get("readOnly") is True)
                )
    for i, volume in enumerate(_list(spec.get("volumes"))):
        if isinstance(volume, Mapping) and isinstance(volume.get("hostPath"), Mapping):
            out += _host_path(("spec", "volumes", i), volume, mounts, allow)
    return out


def priority_refused(name: str, allow: PodTemplatePolicySpec) -> bool:
    """A system-* PriorityClass the policy does not list (also where GPUWorkload spec.priority names one)."""
    return name.startswith(SYSTEM_PRIORITY_PREFIX) and name not in allow.priority_classes


def priority_what(name: str) -> str:
    return f'PriorityClass "{name}", meant for the cluster\'s own components'


def _list(value: object) -> list[Any]:
    return value if isinstance(value, list) else []


def _containers(spec: Mapping[str, Any]) -> Iterator[tuple[Path, Mapping[str, Any]]]:
    for kind in CONTAINER_KINDS:
        for i, container in enumerate(_list(spec.get(kind))):
            if isinstance(container, Mapping):
                yield ("spec", kind, i), container


def _capability(name: str) -> str:
    return name.upper().removeprefix("CAP_")


def _container(path: Path, container: Mapping[str, Any], allow: PodTemplatePolicySpec) -> list[Violation]:
    out: list[Violation] = []
    ctx = container.get("securityContext")
    ctx = ctx if isinstance(ctx, Mapping) else {}
    if ctx.get("privileged") is True and not allow.privileged:
        out.append(
            Violation((*path, "securityContext", "privileged"), "a privileged container", "privileged")
        )
    windows = ctx.get("windowsOptions")
    if isinstance(windows, Mapping) and windows.get("hostProcess") is True and not allow.privileged:
        where = (*path, "securityContext", "windowsOptions", "hostProcess")
        out.append(Violation(where, "a Windows host process", "privileged"))
    caps = ctx.get("capabilities")
    allowed = {_capability(c) for c in allow.capabilities}
    for k, cap in enumerate(_list(caps.get("add") if isinstance(caps, Mapping) else None)):
        if isinstance(cap, str) and _capability(cap) not in allowed:
            where = (*path, "securityContext", "capabilities", "add", k)
            out.append(Violation(where, f"the capability {cap}", "capabilities"))
    for k, port in enumerate(_list(container.get("ports"))):
        if isinstance(port, Mapping) and port.get("hostPort") not in (None, 0) and not allow.host_ports:
            out.append(Violation((*path, "ports", k, "hostPort"), "a port on the node", "hostPorts"))
    return out


def _under(path: str, prefix: str) -> bool:
    """`path` is `prefix` or below it, by whole components, without any '..'."""
    parts, want = [p for p in path.split("/") if p], [p for p in prefix.split("/") if p]
    return path.startswith("/") and ".." not in parts and parts[: len(want)] == want


def _host_path(
    where: Path,
    volume: Mapping[str, Any],
    mounts: Mapping[str, list[tuple[Path, bool]]],
    allow: PodTemplatePolicySpec,
) -> list[Violation]:
    path = volume["hostPath"].get("path")
    path = path if isinstance(path, str) else ""
    fitting = [a for a in allow.host_paths if _under(path, a.path_prefix)]
    if not fitting:
        return [Violation((*where, "hostPath", "path"), f'the node\'s directory "{path}"', "hostPaths")]
    if any(not a.read_only for a in fitting):
        return []
    name = volume.get("name")
    return [
        Violation(mount, f'a writable mount of the node\'s directory "{path}"', "hostPaths[].readOnly")
        for mount, read_only in mounts.get(name if isinstance(name, str) else "", [])
        if not read_only
    ]
