"""Checked-in JSON Schemas and CRDs equal what the models generate; sample files validate against them."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import kubernetes_validate
import pytest
import yaml

from kgwe.policy import KINDS
from kgwe.policy.schema_export import CRD_KINDS, crd, write_crds, write_schemas
from kgwe.resources import deploy_dir, sample_repo_dir, schemas_dir

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
