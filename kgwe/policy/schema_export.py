"""JSON Schemas (for editors and CI) and CRD openAPIV3Schemas (for the API server), both from the models.

One source of truth: the pydantic models. JSON Schema keeps `additionalProperties: false` so editors flag
typos; the CRD form is made *structural* (no $ref, no anyOf except int-or-string, nullable instead of
null unions, unknown-field preservation only where the model allows arbitrary content).
"""

from __future__ import annotations

import copy
import json
from datetime import timedelta
from pathlib import Path
from typing import Any

from pydantic.json_schema import GenerateJsonSchema

from kgwe.policy.models import KINDS, GPUWorkload, KgweObject, PolicyRepository
from kgwe.policy.types import format_duration
from kgwe.vocab import API_GROUP, CRD_VERSION

SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"


def schema_file_name(kind: str) -> str:
    return f"{kind.lower()}.schema.json"


class _Schema(GenerateJsonSchema):
    """Defaults as a person writes them: a duration `1m`, not pydantic's ISO 8601 `PT1M`, which the field's
    own pattern refuses."""

    def encode_default(self, dft: Any) -> Any:
        return format_duration(dft) if isinstance(dft, timedelta) else super().encode_default(dft)


def model_schema(model: type[KgweObject]) -> dict[str, Any]:
    """The model's JSON Schema, each description one paragraph (a docstring's line breaks are the source's
    wrapping, not the text's)."""
    schema = _flowed(model.model_json_schema(by_alias=True, mode="validation", schema_generator=_Schema))
    assert isinstance(schema, dict)  # a dict flowed is a dict
    return schema


def _flowed(node: object) -> object:
    if isinstance(node, dict):
        return {
            k: " ".join(v.split()) if k == "description" and isinstance(v, str) else _flowed(v)
            for k, v in node.items()
        }
    if isinstance(node, list):
        return [_flowed(v) for v in node]
    return node


def json_schema(model: type[KgweObject]) -> dict[str, Any]:
    return {"$schema": SCHEMA_DIALECT, "$id": schema_file_name(model.KIND), **model_schema(model)}


def dumps(data: object) -> str:
    """Stable text: same models, byte-identical files."""
    return json.dumps(data, indent=2, ensure_ascii=False) + "\n"


def write_schemas(out_dir: str | Path) -> list[Path]:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for kind, model in KINDS.items():
        path = out / schema_file_name(kind)
        path.write_text(dumps(json_schema(model)), encoding="utf-8")
        written.append(path)
    return written


# -- structural schema for CRDs ------------------------------------------------------------------------------

_DROP = ("title", "default", "$schema", "$id", "propertyNames", "examples")


def default_text(value: object) -> str:
    """A field's default as a person writes it (`true`, `1m`, `USD`); "" for none, an empty list or map."""
    if value is None or value == {} or value == []:
        return ""
    return value if isinstance(value, str) else json.dumps(value)


def _inline(node: object, defs: dict[str, Any]) -> object:
    if isinstance(node, dict):
        if "$ref" in node:
            target = defs[node["$ref"].rsplit("/", 1)[-1]]
            merged = {**copy.deepcopy(target), **{k: v for k, v in node.items() if k != "$ref"}}
            return _inline(merged, defs)
        return {k: _inline(v, defs) for k, v in node.items() if k != "$defs"}
    if isinstance(node, list):
        return [_inline(v, defs) for v in node]
    return node


def _structural(node: dict[str, Any]) -> dict[str, Any]:
    # A CRD carries no defaults (the API server would write them into every object); `kubectl explain`
    # tells them in the description instead.
    default = default_text(node.get("default"))
    if default and "description" in node and "const" not in node:
        node = {**node, "description": f"{node['description'].rstrip()} Default: `{default}`."}
    node = {k: v for k, v in node.items() if k not in _DROP}
    if "anyOf" in node:
        options = node.pop("anyOf")
        non_null = [o for o in options if o.get("type") != "null"]
        nullable = len(non_null) < len(options)
        types = sorted({o.get("type") for o in non_null})
        if len(non_null) == 1:
            node = {**_structural(non_null[0]), **node}
        elif types == ["integer", "string"]:
            node = {**node, "x-kubernetes-int-or-string": True}
        elif types == ["integer", "number"]:
            node = {**node, "type": "number"}
        else:
            node = {**node, "x-kubernetes-preserve-unknown-fields": True}
        if nullable:
            node["nullable"] = True
    if isinstance(node.get("type"), list):  # e.g. label values: string|boolean|number -> string
        node["type"] = "string"
    if "const" in node:
        node["enum"] = [node.pop("const")]
    if "properties" in node:
        node["properties"] = {k: _structural(v) for k, v in node["properties"].items()}
    if "items" in node:
        node["items"] = _structural(node["items"])
    ap = node.get("additionalProperties")
    if ap is False:
        del node["additionalProperties"]  # structural schemas prune unknown fields instead
    elif ap is True or ap == {}:
        del node["additionalProperties"]
        node["x-kubernetes-preserve-unknown-fields"] = True
        node.setdefault("type", "object")
    elif isinstance(ap, dict):
        node["additionalProperties"] = _structural(ap)
    if node.get("type") == "object" and not any(
        k in node for k in ("properties", "additionalProperties", "x-kubernetes-preserve-unknown-fields")
    ):
        node["x-kubernetes-preserve-unknown-fields"] = True
    return node


def openapi_schema(model: type[KgweObject]) -> dict[str, Any]:
    raw = model_schema(model)
    inlined = _inline(raw, raw.get("$defs", {}))
    assert isinstance(inlined, dict)  # a dict inlined is a dict
    schema = _structural(inlined)
    # The API server owns metadata's schema; a CRD may not describe it beyond `type: object`.
    schema["properties"]["metadata"] = {"type": "object"}
    schema["required"] = [r for r in schema.get("required", []) if r != "metadata"]
    if not schema["required"]:
        del schema["required"]
    return schema


_PRINTER_COLUMNS: dict[str, list[dict[str, Any]]] = {
    "PolicyRepository": [
        {"name": "URL", "type": "string", "jsonPath": ".spec.url"},
        {"name": "Ready", "type": "string", "jsonPath": '.status.conditions[?(@.type=="Ready")].status'},
        {"name": "Revision", "type": "string", "jsonPath": ".status.lastAppliedRevision"},
        {
            "name": "Status",
            "type": "string",
            "priority": 1,
            "jsonPath": '.status.conditions[?(@.type=="Ready")].message',
        },
        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    ],
    "GPUWorkload": [
        {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
        {"name": "GPUs", "type": "integer", "jsonPath": ".status.gpus"},
        {"name": "Nodes", "type": "string", "jsonPath": ".status.nodes"},
        {"name": "Type", "type": "string", "priority": 1, "jsonPath": ".spec.workloadType"},
        {"name": "Runtime", "type": "string", "priority": 1, "jsonPath": ".status.runtime"},
        {
            "name": "Reason",
            "type": "string",
            "priority": 1,
            "jsonPath": '.status.conditions[?(@.type=="Admitted")].reason',
        },
        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    ],
}
_SHORT_NAMES = {"PolicyRepository": ["gpr"], "GPUWorkload": ["gwl"]}


def crd(model: type[KgweObject]) -> dict[str, Any]:
    kind = model.KIND
    plural = kind.lower()[:-1] + "ies" if kind.endswith("y") else kind.lower() + "s"
    columns = _PRINTER_COLUMNS.get(kind, [])
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": f"{plural}.{API_GROUP}",
            "labels": {"app.kubernetes.io/name": "kgwe", "app.kubernetes.io/part-of": "kgwe"},
        },
        "spec": {
            "group": API_GROUP,
            "names": {
                "kind": kind,
                "listKind": f"{kind}List",
                "plural": plural,
                "singular": kind.lower(),
                "shortNames": _SHORT_NAMES.get(kind, []),
                "categories": ["kgwe"],
            },
            "scope": "Namespaced",
            "versions": [
                {
                    "name": CRD_VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": columns,
                    "schema": {"openAPIV3Schema": openapi_schema(model)},
                }
            ],
        },
    }


CRD_KINDS = (PolicyRepository, GPUWorkload)


def write_crds(out_dir: str | Path) -> list[Path]:
    """<out_dir>/<plural>.yaml from the models of the JSON Schemas (`make schemas`: the chart's files/)."""
    import yaml

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for model in CRD_KINDS:
        doc = crd(model)
        path = out / f"{doc['metadata']['name']}.yaml"
        header = "# Generated by `kgwe schema` from kgwe/policy models; do not edit by hand.\n"
        text = yaml.safe_dump(doc, sort_keys=False, width=100, allow_unicode=True)
        path.write_text(header + text, encoding="utf-8")
        written.append(path)
    return written


ROUTING_POLICY_HEADER = (
    "# Generated by `kgwe schema --admission` from kgwe/admission/policy.py (the webhook's routing\n"
    "# decision as a MutatingAdmissionPolicy and its binding); the chart renders it. Do not edit by hand.\n"
)


def routing_policy_text() -> str:
    """The chart's files/admission/routing.yaml: the policy's and its binding's specs."""
    import yaml

    from kgwe.admission.policy import routing_policy

    return ROUTING_POLICY_HEADER + yaml.safe_dump(routing_policy(), sort_keys=False, width=100)


def write_routing_policy(path: str | Path) -> Path:
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(routing_policy_text(), encoding="utf-8")
    return out
