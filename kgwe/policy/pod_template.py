"""A pod template checked the way the API server reads a Job's `spec.template`, offline and bounded.

GPUWorkload templates reach the cluster through a CRD field that preserves unknown fields, so the API server
accepts anything there; the Jobs and Deployments KGWE makes from them are where a wrong type or a typo would
first be refused, long after `kgwe validate` said yes. This module checks a template against the real
`io.k8s.api.core.v1.PodTemplateSpec` schema of the Kubernetes release the project builds against
(`pod_template_spec.json`, generated from that release's published OpenAPI by `make schemas`) plus the few
rules the API server adds in code for every pod template (a container needs an image, container names are
unique DNS labels, quantities parse). Pure: plain data in, (field path, message) findings out; the walk is
iterative and stops after MAX_FINDINGS findings or MAX_NODES values, whatever the input.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterator, Mapping
from importlib import resources
from typing import Any

from kgwe.policy.diagnostics import did_you_mean, format_path
from kgwe.quantity import parse_quantity

Path = tuple[str | int, ...]

SCHEMA_FILE = "pod_template_spec.json"
ROOT = "io.k8s.api.core.v1.PodTemplateSpec"
CONTAINER = "io.k8s.api.core.v1.Container"
MAX_FINDINGS = 20  # per template: enough to fix a file, little enough to read
MAX_NODES = 200_000  # values visited per template (the YAML loader caps a file's fields anyway)
_INT32 = (-(2**31), 2**31 - 1)
# resource.Quantity's grammar (apimachinery/pkg/api/resource): sign, digits, optional fraction, suffix.
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_KEEP = ("type", "format", "properties", "items", "additionalProperties", "required", "enum", "oneOf")


class TemplateErrors(ValueError):
    """Findings inside one template: (path below the template, message). A pydantic validator raises it, so
    the policy loader can point each finding at its own line."""

    def __init__(self, findings: list[tuple[Path, str]]) -> None:
        self.findings = findings
        shown = "; ".join(f"{format_path(p) or '(template)'}: {m}" for p, m in findings[:3])
        more = f" (and {len(findings) - 3} more)" if len(findings) > 3 else ""
        super().__init__(shown + more)


# -- the schema file -------------------------------------------------------------------------------------


def compact_schema(openapi: Mapping[str, Any], version: str, source: str) -> dict[str, Any]:
    """The schemas PodTemplateSpec reaches in a Kubernetes OpenAPI v3 document, without descriptions:
    what `make schemas` writes to pod_template_spec.json."""
    all_schemas = openapi["components"]["schemas"]
    out: dict[str, Any] = {}
    todo = [ROOT]
    while todo:
        name = todo.pop()
        if name in out:
            continue
        compact = _compact(all_schemas[name], todo)
        out[name] = compact
    return {
        "kubernetes": version,
        "source": source,
        "root": ROOT,
        "schemas": dict(sorted(out.items())),
    }


def _compact(node: object, todo: list[str]) -> object:
    if not isinstance(node, Mapping):
        return node
    if "$ref" in node:
        name = node["$ref"].rsplit("/", 1)[-1]
        todo.append(name)
        return {"$ref": name}
    if "allOf" in node and len(node["allOf"]) == 1:  # OpenAPI v3's way of giving a $ref a description
        return _compact(node["allOf"][0], todo)
    out: dict[str, Any] = {}
    for key in _KEEP:
        if key not in node:
            continue
        value = node[key]
        if key == "properties":
            out[key] = {k: _compact(v, todo) for k, v in sorted(value.items())}
        elif key in ("items", "additionalProperties") and isinstance(value, Mapping):
            out[key] = _compact(value, todo)
        elif key == "oneOf":
            out[key] = [_compact(v, todo) for v in value]
        else:
            out[key] = value
    return out


@functools.cache
def schema() -> dict[str, Any]:
    """The shipped schema document (generated, never edited by hand)."""
    text = resources.files("kgwe.policy").joinpath(SCHEMA_FILE).read_text(encoding="utf-8")
    document: dict[str, Any] = json.loads(text)
    return document


def kubernetes_version() -> str:
    return str(schema()["kubernetes"])


# -- checking ------------------------------------------------------------------------------------------


# What a YAML value is, in words (bool before int: True is an int in Python)
_TYPE_NAMES: tuple[tuple[type, str], ...] = (
    (bool, "a boolean"),
    (int, "an integer"),
    (float, "a number"),
    (str, "a string"),
    (list, "a list"),
    (Mapping, "a map"),
)


def _type_name(value: object) -> str:
    return next((name for kind, name in _TYPE_NAMES if isinstance(value, kind)), type(value).__name__)


def _short(name: str) -> str:
    return name.rsplit(".", 1)[-1]


def _type_ok(value: object, node: Mapping[str, Any]) -> str | None:
    """None when `value` has the node's type, else what was expected."""
    fmt = node.get("format")
    if fmt == "int-or-string":
        return (
            None
            if isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))
            else ("an integer or a string")
        )
    if "oneOf" in node:  # Quantity: string or number
        kinds = {o.get("type") for o in node["oneOf"]}
        if "string" in kinds and isinstance(value, str):
            return None
        if "number" in kinds and isinstance(value, int | float) and not isinstance(value, bool):
            return None
        return " or ".join(sorted(f"a {k}" for k in kinds if k))
    typ = node.get("type")
    if typ is None:
        return None
    if typ == "object":
        return None if isinstance(value, Mapping) else "a map"
    if typ == "array":
        return None if isinstance(value, list) else "a list"
    if typ == "string":
        return None if isinstance(value, str) else "a string"
    if typ == "boolean":
        return None if isinstance(value, bool) else "true or false"
    if typ == "integer":
        if isinstance(value, bool) or not isinstance(value, int):
            if isinstance(value, float) and value.is_integer():
                return None  # JSON has one number type; 3.0 decodes into an int field
            return "an integer"
        if fmt == "int32" and not _INT32[0] <= value <= _INT32[1]:
            return "a 32-bit integer"
        return None
    if typ == "number":
        return None if isinstance(value, int | float) and not isinstance(value, bool) else "a number"
    return None


def _walk(value: object, require_containers: bool) -> Iterator[tuple[Path, str]]:
    doc = schema()
    schemas = doc["schemas"]
    stack: list[tuple[Any, Mapping[str, Any], Path, str]] = [(value, {"$ref": doc["root"]}, (), doc["root"])]
    visited = 0
    while stack:
        value, node, path, name = stack.pop()
        visited += 1
        if visited > MAX_NODES:
            yield path, f"more than {MAX_NODES} values in one pod template"
            return
        if "$ref" in node:
            name = node["$ref"]
            node = schemas[name]
        if value is None:
            continue  # JSON null leaves a field unset, as the API server decodes it
        expected = _type_ok(value, node)
        if expected is not None:
            what = f" ({_short(name)})" if node.get("type") == "object" and "properties" in node else ""
            shown = _shown(value)
            yield path, f"expected {expected}{what}, got {_type_name(value)}" + (f" {shown}" if shown else "")
            continue
        if "enum" in node and value not in node["enum"]:
            hint = did_you_mean(str(value), [str(e) for e in node["enum"]])
            yield path, f"{value!r} is not one of {', '.join(map(str, node['enum']))}{hint}"
            continue
        if "oneOf" in node and isinstance(value, str) and _short(name) == "Quantity":
            try:
                parse_quantity(value)
            except ValueError as exc:
                yield path, str(exc)
            continue
        if isinstance(value, Mapping):
            props = node.get("properties")
            if props is not None:
                required = [r for r in node.get("required", ()) if r not in value]
                if name == "io.k8s.api.core.v1.PodSpec" and not require_containers:
                    required = [r for r in required if r != "containers"]
                for field in required:
                    yield (*path, field), f'required field "{field}" is missing'
                for key in sorted(value, key=str, reverse=True):
                    if key not in props:
                        hint = did_you_mean(str(key), props)
                        yield (*path, str(key)), f'unknown field "{key}" in {_short(name)}{hint}'
                        continue
                    stack.append((value[key], props[key], (*path, str(key)), name))
                if name == "io.k8s.api.core.v1.PodSpec":
                    yield from _container_rules(value, path)
            elif isinstance(node.get("additionalProperties"), Mapping):
                for key in sorted(value, key=str, reverse=True):
                    stack.append((value[key], node["additionalProperties"], (*path, str(key)), name))
        elif isinstance(value, list) and isinstance(node.get("items"), Mapping):
            for i in range(len(value) - 1, -1, -1):
                stack.append((value[i], node["items"], (*path, i), name))


def _container_rules(pod_spec: Mapping[str, Any], path: Path) -> Iterator[tuple[Path, str]]:
    """What the API server's pod template validation adds to the schema for every container."""
    seen: dict[str, Path] = {}
    for kind in ("initContainers", "containers"):
        items = pod_spec.get(kind)
        if not isinstance(items, list):
            continue
        for i, c in enumerate(items):
            if not isinstance(c, Mapping):
                continue
            where = (*path, kind, i)
            name = c.get("name")
            if isinstance(name, str):
                if not _DNS_LABEL.match(name) or len(name) > 63:
                    yield (
                        (*where, "name"),
                        f"{name!r} is not a DNS label (lower case, digits, '-'; 63 at most)",
                    )
                elif name in seen:
                    yield (
                        (*where, "name"),
                        f'container name "{name}" is used twice (also {format_path(seen[name])})',
                    )
                seen.setdefault(name, where)
            image = c.get("image")
            if not isinstance(image, str) or not image.strip():
                yield (
                    (*where, "image"),
                    "required: the API server refuses a pod template container without an image",
                )
            yield from _resource_rules(c.get("resources"), (*where, "resources"))


def _resource_rules(resources: object, path: Path) -> Iterator[tuple[Path, str]]:
    """The API server's rules for a container's resource amounts (quantities the schema check has read):
    never negative, and an extended resource (nvidia.com/gpu, ...) only in whole units."""
    if not isinstance(resources, Mapping):
        return
    for part in ("limits", "requests"):
        amounts = resources.get(part)
        if not isinstance(amounts, Mapping):
            continue
        for name, value in amounts.items():
            try:
                amount = parse_quantity(value)
            except ValueError:
                continue  # said by the schema check
            where = (*path, part, str(name))
            if amount < 0:
                yield where, f"{value!r}: a resource amount must not be negative"
            elif _extended(str(name)) and amount != amount.to_integral_value():
                yield where, f"{value!r}: {name} is an extended resource, counted in whole units"


def _extended(name: str) -> bool:
    """An extended resource: a domain-qualified name outside kubernetes.io (not hugepages, cpu, memory)."""
    domain, slash, _ = name.partition("/")
    return bool(slash) and not (domain == "kubernetes.io" or domain.endswith(".kubernetes.io"))


def _shown(value: object) -> str:
    if isinstance(value, Mapping | list):
        return ""
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def template_findings(template: object, *, require_containers: bool = True) -> list[tuple[Path, str]]:
    """(path below the template, message) for every way `template` is not a valid pod template, at most
    MAX_FINDINGS. `require_containers=False` for a GPUWorkload's own template, which may leave the
    containers to a WorkloadRuntime."""
    out = []
    for finding in _walk(template, require_containers):
        out.append(finding)
        if len(out) >= MAX_FINDINGS:
            break
    return out


def check_template(template: object, *, require_containers: bool = True) -> None:
    """TemplateErrors with every finding, or nothing."""
    findings = template_findings(template, require_containers=require_containers)
    if findings:
        raise TemplateErrors(findings)


def main(argv: list[str]) -> int:
    """OPENAPI_JSON VERSION OUT: what hack/pod-template-schema.sh runs."""
    openapi_file, version, out = argv
    with open(openapi_file, encoding="utf-8") as fh:
        openapi = json.load(fh)
    source = "api/openapi-spec/v3/" + openapi_file.rsplit("/", 1)[-1]
    text = json.dumps(compact_schema(openapi, version, source), indent=1, sort_keys=False) + "\n"
    with open(out, "w", encoding="utf-8") as fh:
        fh.write(text)
    return 0
