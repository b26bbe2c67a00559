"""Checked-in JSON Schemas, CRDs and docs/spec field tables equal what the models generate; every field is
described; sample files validate against the schemas."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import kubernetes_validate
import pytest
import yaml

from kgwe.policy import KINDS
from kgwe.policy.schema_export import CRD_KINDS, crd, json_schema, write_crds, write_schemas
from kgwe.policy.spec_tables import MissingMarkers, render_page, rows, table
from kgwe.resources import deploy_dir, sample_repo_dir, schemas_dir

SPEC_DOCS = Path(__file__).resolve().parents[2] / "docs" / "spec"

K8S_VERSION = "1.33"


def test_checked_in_schemas_match_regeneration(tmp_path):
    written = write_schemas(tmp_path)
    assert len(written) == len(KINDS)
    for path in written:
        checked_in = schemas_dir() / path.name
        assert checked_in.is_file(), f"{checked_in} missing: run `make schemas`"
        assert checked_in.read_bytes() == path.read_bytes(), f"{path.name} is stale: run `make schemas`"


def test_checked_in_crds_match_regeneration(tmp_path):
    for path in write_crds(tmp_path):
        checked_in = deploy_dir() / "helm" / "kgwe" / "files" / "crds" / path.name  # the chart holds them
        assert checked_in.read_bytes() == path.read_bytes(), f"{path.name} is stale: run `make schemas`"


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_checked_in_spec_tables_match_regeneration(kind):
    page = SPEC_DOCS / f"{kind.lower()}.md"
    text = page.read_text(encoding="utf-8")
    assert render_page(text, KINDS[kind]) == text, f"{page.name}: field tables are stale: run `make schemas`"


def test_a_page_without_markers_is_refused():
    with pytest.raises(MissingMarkers, match="spec table of GPUBudget"):
        render_page("# GPUBudget\n\n| field | meaning |\n", KINDS["GPUBudget"])


def test_cli_refuses_pages_without_markers(tmp_path, capsys):
    from kgwe.cli import main

    (tmp_path / "gpubudget.md").write_text("# GPUBudget\n")
    assert main(["schema", "--docs", str(tmp_path)]) == 1
    assert "kgwe schema --docs:" in capsys.readouterr().err


def test_a_table_row_carries_type_default_and_docstring():
    by_path = {r.path: r for r in rows(KINDS["GPUWorkload"], "spec")}
    count = by_path["spec.gpuRequirements.count"]
    assert (count.type, count.default) == ("integer", "`1`")
    assert count.meaning.startswith("Whole GPUs per pod")
    assert by_path["spec.gpuRequirements"].default == "required"
    assert by_path["spec.checkpointInterval"].type == "duration"
    assert "spec.roles[].replicas" in by_path  # a list's items
    assert "spec.roles[].gpuRequirements.count" not in by_path  # documented once, under spec
    inventory = {r.path for r in rows(KINDS["GPUInventory"], "spec")}
    assert "spec.migDemand.*.pendingPods" in inventory  # a map's values
    interval = {r.path: r for r in rows(KINDS["PolicyRepository"], "spec")}["spec.interval"]
    assert interval.default == "`1m`"  # as written, not ISO 8601
    assert "[docs/audit.md](../audit.md)" in table(KINDS["PolicyRepository"], "spec")


def _properties(node, path=()):
    """(path, property schema) of every property below node, list items and map values included."""
    if isinstance(node, dict):
        for name, prop in (node.get("properties") or {}).items():
            yield (*path, name), prop
        for key, value in node.items():
            yield from _properties(value, (*path, key) if key not in ("properties",) else path)
    elif isinstance(node, list):
        for value in node:
            yield from _properties(value, path)


@pytest.mark.parametrize("model", CRD_KINDS, ids=lambda m: m.KIND)
def test_every_crd_field_is_described(model):
    """What `kubectl explain` prints: the API server describes metadata, the models everything else."""
    schema = crd(model)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    assert schema.get("description")
    bare = [
        ".".join(p) for p, prop in _properties(schema) if p[-1] != "metadata" and not prop.get("description")
    ]
    assert bare == []


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_every_json_schema_field_is_described(kind):
    schema = json_schema(KINDS[kind])

    def described(prop):  # a field of a model type may leave its description to the model's
        ref = prop.get("$ref") or next((o["$ref"] for o in prop.get("anyOf", []) if "$ref" in o), None)
        return prop.get("description") or (ref and schema["$defs"][ref.rsplit("/", 1)[1]].get("description"))

    bare = [".".join(p) for p, prop in _properties(schema) if not described(prop)]
    assert bare == [], "give each field a docstring in its model"


def _walk(node, path=()):
    if isinstance(node, dict):
        yield path, node
        for k, v in node.items():
            yield from _walk(v, (*path, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _walk(v, (*path, i))


@pytest.mark.parametrize("model", CRD_KINDS, ids=lambda m: m.KIND)
def test_crd_is_valid_and_structural(model):
    doc = crd(model)
    kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
    version = doc["spec"]["versions"][0]
    assert version["subresources"] == {"status": {}}
    assert version["additionalPrinterColumns"]
    schema = version["schema"]["openAPIV3Schema"]
    for path, node in _walk(schema):
        assert "$ref" not in node and "const" not in node, path
        assert node.get("additionalProperties") is not False, path
        if "anyOf" in node:
            raise AssertionError(f"anyOf at {path}")
        if path[-2:-1] == ("properties",) or path[-1:] == ("items",):
            special = node.get("x-kubernetes-int-or-string") or node.get(
                "x-kubernetes-preserve-unknown-fields"
            )
            assert "type" in node or special, f"no type at {path}"


def test_sample_repo_files_name_their_schema_and_validate():
    files = sorted(sample_repo_dir().rglob("*.yaml"))
    assert files
    for path in files:
        first = path.read_text().splitlines()[0]
        assert first.startswith("# yaml-language-server: $schema="), path
        schema_path = (path.parent / first.split("$schema=", 1)[1].strip()).resolve()
        schema = json.loads(Path(schema_path).read_text())
        doc = yaml.safe_load(path.read_text())
        jsonschema.validate(doc, schema)
        assert schema["properties"]["kind"]["const"] == doc["kind"]


def test_json_schema_rejects_a_typo():
    schema = json.loads((schemas_dir() / "migstrategy.schema.json").read_text())
    doc = yaml.safe_load((sample_repo_dir() / "mig" / "inference-h100.yaml").read_text())
    doc["spec"]["rollout"]["maxUnavailible"] = 1
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(doc, schema)


def test_cli_schema_prints_every_kind(capsys):
    from kgwe.cli import main

    assert main(["schema"]) == 0
    assert set(json.loads(capsys.readouterr().out)) == set(KINDS)
