"""Common shape of every KGWE object: camelCase YAML, unknown fields rejected, Kubernetes-style metadata."""

from __future__ import annotations

from typing import Annotated, Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from kgwe.policy.types import DNS_LABEL_PATTERN, DNS_SUBDOMAIN_PATTERN, LabelMap
from kgwe.vocab import API_VERSION, KgweApiVersion

DnsSubdomain = Annotated[str, Field(min_length=1, max_length=253, pattern=DNS_SUBDOMAIN_PATTERN)]
DnsLabel = Annotated[str, Field(min_length=1, max_length=63, pattern=DNS_LABEL_PATTERN)]


class KgweModel(BaseModel):
    """Base of every spec type: YAML keys are camelCase aliases, Python attributes snake_case."""

    model_config = ConfigDict(
        extra="forbid",
        populate_by_name=True,
        alias_generator=to_camel,
        validate_default=False,
        use_enum_values=True,
        # A field's docstring (the string under it) is its description: it reaches the JSON Schemas, the
        # CRDs (`kubectl explain`) and the field tables of docs/spec/ (kgwe.policy.spec_tables).
        use_attribute_docstrings=True,
    )

    def to_yaml_dict(self) -> dict[str, Any]:
        """The object as it is written in YAML/JSON (aliases, unset optional fields left out)."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)


class ObjectMeta(KgweModel):
    """metadata of a policy kind living in Git: only what a person writes."""

    name: DnsSubdomain
    """The object's name (a DNS subdomain), unique per kind and namespace."""
    namespace: DnsLabel | None = None
    """The namespace, for kinds that have one."""
    labels: LabelMap = Field(default_factory=dict)
    """Labels, as on any Kubernetes object."""
    annotations: LabelMap = Field(default_factory=dict)
    """Annotations, as on any Kubernetes object."""


class ClusterObjectMeta(ObjectMeta):
    """metadata of a cluster kind (CRD): the API server adds uid, resourceVersion, managedFields, ...

    Those are accepted and ignored so objects read back from the cluster validate too."""

    model_config = ConfigDict(extra="ignore")


# What the envelope's fields mean, for every kind (a kind re-declares `kind` and `metadata`, which drops the
# base's docstrings; the schema gets them back here).
_ENVELOPE = {
    "apiVersion": "The API group and version of every KGWE kind.",
    "kind": "The kind of the object.",
    "metadata": "Name, namespace, labels and annotations.",
}


def _describe_envelope(schema: dict[str, Any]) -> None:
    for name, text in _ENVELOPE.items():
        if name in schema.get("properties", {}):
            schema["properties"][name].setdefault("description", text)


class KgweObject(KgweModel):
    """apiVersion/kind/metadata/spec envelope. Subclasses pin `kind` and `spec`."""

    model_config = ConfigDict(json_schema_extra=_describe_envelope)

    api_version: KgweApiVersion = Field(default=API_VERSION, alias="apiVersion")
    kind: str
    metadata: ObjectMeta

    KIND: ClassVar[str] = ""  # the `kind` value; each subclass also pins `kind` as a Literal field

    @property
    def name(self) -> str:
        return self.metadata.name
