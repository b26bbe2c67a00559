"""The kinds: seed documents load verbatim, field types parse and print back, unknown fields are refused."""

from __future__ import annotations

import re
from datetime import timedelta
from decimal import Decimal
from pathlib import Path

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from kgwe.policy import KINDS, GPUInventory, GPUWorkload, MIGStrategy, PricingCatalog
from kgwe.policy.types import format_duration, parse_duration, parse_money, parse_percent

SPEC_DOCS = Path(__file__).resolve().parents[2] / "docs" / "spec"

SEED_MIG_STRATEGY = """
apiVersion: kgwe.nvidia.io/v1
kind: MIGStrategy
metadata:
  name: inference-optimized
spec:
  nodeSelector:
    gpu.nvidia.com/class: H100
  partitionStrategy:
    preferredProfiles:
      - 1g.10gb: 70%
      - 2g.20gb: 20%
      - 3g.40gb: 10%
    rebalanceInterval: 5m
    minUtilizationThreshold: 0.3
"""

SEED_GPU_WORKLOAD = """
apiVersion: kgwe.nvidia.io/v1
kind: GPUWorkload
metadata:
  name: llm-training
  namespace: ml-training
spec:
  gpuRequirements:
    count: 8
    minMemoryGB: 40
    topology:
      preference: NVLinkOptimal
      minBandwidthGBps: 600
  workloadType: Training
  framework: PyTorch
  distributedConfig:
    strategy: DDP
    backend: nccl
    worldSize: 16
  podTemplate:
    spec:
      containers:
        - name: trainer
          image: nvcr.io/nvidia/pytorch:24.05-py3
"""


def spec_page_examples() -> list[dict]:
    docs = []
    for page in sorted(SPEC_DOCS.glob("*.md")):
        for block in re.findall(r"```yaml\n(.*?)```", page.read_text(encoding="utf-8"), flags=re.S):
            docs.extend(d for d in yaml.safe_load_all(block) if d)
    return docs


def test_spec_page_examples_load():
    docs = spec_page_examples()
    kinds = [d["kind"] for d in docs]
    assert set(kinds) == set(KINDS), kinds  # docs/spec has an example of every kind
    for doc in docs:
        KINDS[doc["kind"]].model_validate(doc)


def _field_paths(schema: dict, defs: dict, prefix: str) -> list[str]:
    out = []
    for name, prop in schema.get("properties", {}).items():
        ref = prop.get("$ref") or next((a["$ref"] for a in prop.get("anyOf", []) if "$ref" in a), None)
        target = defs[ref.rsplit("/", 1)[1]] if ref else prop
        if target.get("type") == "array" and "$ref" in target.get("items", {}):
            target = defs[target["items"]["$ref"].rsplit("/", 1)[1]]
            name += "[]"
        path = f"{prefix}.{name}"
        out.append(path)
        out += _field_paths(target, defs, path)
    return out


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_spec_page_names_every_field(kind):
    page = (SPEC_DOCS / f"{kind.lower()}.md").read_text(encoding="utf-8")
    schema = KINDS[kind].model_json_schema(by_alias=True)
    spec = schema["properties"]["spec"]
    ref = spec.get("$ref") or next(a["$ref"] for a in spec.get("anyOf", []) if "$ref" in a)
    defs = schema.get("$defs", {})
    paths = _field_paths(defs[ref.rsplit("/", 1)[1]], defs, "spec")
    leaves = [p for p in paths if not any(q.startswith(p + ".") for q in paths)]  # objects: their fields
    assert [p for p in leaves if f"`{p}`" not in page] == [], f"docs/spec/{kind.lower()}.md"


def test_seed_mig_strategy_shares_parse_to_decimals():
    strategy = MIGStrategy.model_validate(yaml.safe_load(SEED_MIG_STRATEGY))
    part = strategy.spec.partition_strategy
    assert part is not None
    assert part.shares == {"1g.10gb": Decimal(70), "2g.20gb": Decimal(20), "3g.40gb": Decimal(10)}
    assert part.rebalance_interval == timedelta(minutes=5)
    assert strategy.to_yaml_dict()["spec"]["partitionStrategy"]["preferredProfiles"][0] == {"1g.10gb": "70%"}


def test_seed_gpu_workload_loads():
    wl = GPUWorkload.model_validate(yaml.safe_load(SEED_GPU_WORKLOAD))
    assert wl.spec.gpu_requirements.topology.preference == "NVLinkOptimal"
    assert wl.spec.gpu_requirements.topology.min_bandwidth_gbps == 600
    assert wl.spec.gpu_requirements.min_memory_gb == 40
    assert wl.spec.pod_template["spec"]["containers"][0]["name"] == "trainer"


def test_absolute_counts_and_int_max_unavailable():
    doc = yaml.safe_load(SEED_MIG_STRATEGY)
    doc["spec"]["partitionStrategy"]["preferredProfiles"] = [{"3g.40gb": 4}, {"1g.10gb": 14}]
    doc["spec"]["rollout"] = {"maxUnavailable": 2, "drain": True}
    strategy = MIGStrategy.model_validate(doc)
    assert strategy.spec.partition_strategy.counts == {"3g.40gb": 4, "1g.10gb": 14}
    assert strategy.spec.rollout.max_unavailable_nodes(10) == 2


def test_percent_max_unavailable_rounds_down_but_not_to_zero():
    doc = yaml.safe_load(SEED_MIG_STRATEGY)
    doc["spec"]["rollout"] = {"maxUnavailable": "10%"}
    strategy = MIGStrategy.model_validate(doc)
    assert strategy.spec.rollout.max_unavailable_nodes(25) == 2
    assert strategy.spec.rollout.max_unavailable_nodes(3) == 1


def test_unknown_field_is_an_error():
    doc = yaml.safe_load(SEED_MIG_STRATEGY)
    doc["spec"]["nodeSelecter"] = {}
    with pytest.raises(ValidationError, match="nodeSelecter"):
        MIGStrategy.model_validate(doc)


def test_money_is_decimal_and_floats_are_refused():
    base = {"apiVersion": "kgwe.nvidia.io/v1", "kind": "PricingCatalog", "metadata": {"name": "p"}}
    ok = PricingCatalog.model_validate(
        {**base, "spec": {"gpus": [{"product": "X", "onDemandPerHour": "4.10"}]}}
    )
    assert ok.spec.gpus[0].on_demand_per_hour == Decimal("4.10")
    with pytest.raises(ValidationError, match="quoted string"):
        PricingCatalog.model_validate({**base, "spec": {"gpus": [{"product": "X", "onDemandPerHour": 4.1}]}})


def test_inventory_devices_consistency():
    base = {"apiVersion": "kgwe.nvidia.io/v1", "kind": "GPUInventory", "metadata": {"name": "i"}}
    node = {"name": "n1", "gpus": 2, "product": "NVIDIA-H100-80GB-HBM3"}
    inv = GPUInventory.model_validate(
        {
            **base,
            "spec": {
                "nodes": [{**node, "devices": [{"index": 1, "mig": ["3g.40gb"], "inUse": ["3g.40gb"]}]}]
            },
        }
    )
    assert inv.spec.nodes[0].current_layouts() == [None, ("3g.40gb",)]
    assert inv.spec.nodes[0].in_use() == [(), ("3g.40gb",)]
    with pytest.raises(ValidationError, match="index 2"):
        GPUInventory.model_validate({**base, "spec": {"nodes": [{**node, "devices": [{"index": 2}]}]}})
    with pytest.raises(ValidationError, match="not in `mig`"):
        GPUInventory.model_validate(
            {
                **base,
                "spec": {"nodes": [{**node, "devices": [{"index": 0, "mig": [], "inUse": ["1g.10gb"]}]}]},
            }
        )


@pytest.mark.parametrize(
    ("text", "seconds"), [("5m", 300), ("2s", 2), ("1h30m", 5400), ("500ms", 0.5), ("1.5h", 5400)]
)
def test_durations(text, seconds):
    assert parse_duration(text).total_seconds() == seconds


@given(st.integers(min_value=0, max_value=10**7))
def test_duration_format_round_trips(ms):
    d = timedelta(milliseconds=ms)
    assert parse_duration(format_duration(d)) == d


@pytest.mark.parametrize("bad", ["70", 70, 0.7, "70 %%", "-5%", None])
def test_percent_needs_the_percent_sign(bad):
    with pytest.raises(ValueError):
        parse_percent(bad)


@pytest.mark.parametrize("bad", ["4,10", "-1", "abc", True, 1.5])
def test_money_rejects(bad):
    with pytest.raises(ValueError):
        parse_money(bad)
