"""Each shared word and default lives in kgwe.vocab (or kgwe.money, kgwe.gpu.products), and every part that
uses it agrees: the policy models, the extender, the cost arithmetic and the controller."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from collections.abc import Iterator
from datetime import timedelta
from decimal import Decimal
from pathlib import Path

import pytest
from pydantic import ValidationError

from kgwe import vocab
from kgwe.cost.pricing import PriceBook, pricebook, pricebook_from_catalog
from kgwe.errors import KgweError
from kgwe.extender import profile as extender_profile
from kgwe.extender import request as extender_request
from kgwe.policy.cluster_kinds import PolicyRepositorySpec, ReportsSpec
from kgwe.policy.gpu_workload import TopologyRequirement
from kgwe.policy.pricing import PricingCatalogSpec
from kgwe.policy.scoring_profile import ExtenderSettings, ScoringProfileSpec
from kgwe.policy.types import format_duration
from kgwe.topology import choice


def _enum(model: type, field: str) -> tuple[str, ...]:
    schema = model.model_json_schema(by_alias=True)
    prop = schema["properties"][field]
    if "$ref" in prop:
        prop = schema["$defs"][prop["$ref"].rsplit("/", 1)[1]]
    return tuple(prop["enum"])


def test_scoring_defaults_agree_between_policy_and_extender():
    spec = ScoringProfileSpec()
    flat = extender_profile.profile_from_dict({"name": "p"})
    for p in (flat, extender_profile.DEFAULT_PROFILE):
        assert p.strategy == spec.strategy == vocab.DEFAULT_STRATEGY
        assert (p.topology, p.resource, p.balance) == (
            spec.weights.topology,
            spec.weights.resource,
            spec.weights.balance,
        )
        assert p.fragmentation == spec.fragmentation == vocab.DEFAULT_FRAGMENTATION
        assert p.weight == spec.extender.weight == vocab.DEFAULT_EXTENDER_WEIGHT
        assert p.decide_in_filter is spec.decide_in_filter is True


def test_http_timeout_default_is_one_value():
    policy = ExtenderSettings().http_timeout
    assert policy == timedelta(seconds=vocab.DEFAULT_HTTP_TIMEOUT_SECONDS)
    assert extender_profile.profile_from_dict({"name": "p"}).http_timeout == format_duration(policy)
    assert extender_profile.DEFAULT_PROFILE.http_timeout == format_duration(policy)


def test_strategy_names_are_one_list():
    assert _enum(ScoringProfileSpec, "strategy") == vocab.STRATEGIES
    for name in vocab.STRATEGIES:
        assert extender_profile.profile_from_dict({"name": "p", "strategy": name.lower()}).strategy == name
    with pytest.raises(extender_profile.ProfileError, match="BestFit"):
        extender_profile.profile_from_dict({"name": "p", "strategy": "Nearest"})


def test_topology_preferences_are_one_list():
    assert _enum(TopologyRequirement, "preference") == vocab.TOPOLOGY_PREFERENCES
    assert extender_request.PREFERENCES == choice.PREFERENCES == vocab.TOPOLOGY_PREFERENCES


def test_pricing_modes_are_one_list():
    assert _enum(PricingCatalogSpec, "migPricing") == vocab.MIG_PRICING
    assert _enum(PricingCatalogSpec, "idleCost") == vocab.IDLE_COST
    spec = PricingCatalogSpec.model_validate({"gpus": [{"product": "X", "onDemandPerHour": "1"}]})
    book = pricebook([{"product": "X", "onDemandPerHour": "1"}])
    assert (spec.mig_pricing, spec.idle_cost, spec.currency) == (
        book.mig_pricing,
        book.idle_cost,
        book.currency,
    )
    assert (book.mig_pricing, book.idle_cost, book.currency) == (
        vocab.DEFAULT_MIG_PRICING,
        vocab.DEFAULT_IDLE_COST,
        vocab.DEFAULT_CURRENCY,
    )


def test_report_schedule_default_is_one_value():
    assert ReportsSpec().schedule == vocab.DEFAULT_REPORT_SCHEDULE
    assert ReportsSpec().path == vocab.DEFAULT_REPORTS_PATH

    def spec(**extra):
        return PolicyRepositorySpec.model_validate(
            {"url": "https://git.example.com/p.git", "path": "policy", **extra}
        )

    # what the controller reads: `reports:` without a schedule reports daily at the default; none, never
    assert spec(reports={}).reports.schedule == vocab.DEFAULT_REPORT_SCHEDULE
    assert spec(reports={"path": "reports/prod"}).reports.schedule == vocab.DEFAULT_REPORT_SCHEDULE
    assert spec(reports={"schedule": "*/5 * * * *"}).reports.schedule == "*/5 * * * *"
    assert spec().reports is None


@pytest.mark.parametrize("amount", [4.1, True, "-1", "1e3", "4,10", "NaN", -2, Decimal("-1"), None])
def test_money_is_parsed_by_one_rule(amount):
    row = {"product": "X", "onDemandPerHour": amount}
    with pytest.raises(ValidationError):
        PricingCatalogSpec.model_validate({"gpus": [row]})
    with pytest.raises(KgweError, match="not a price"):
        pricebook([row])


@pytest.mark.parametrize("amount", ["4.10", 4, Decimal("0.5"), " 2.933 "])
def test_money_accepted_by_one_rule(amount):
    row = {"product": "X", "onDemandPerHour": amount}
    policy = PricingCatalogSpec.model_validate({"gpus": [row]}).gpus[0].on_demand_per_hour
    assert pricebook([row]).gpus["X"].on_demand_per_hour == policy


H100 = "NVIDIA-H100-80GB-HBM3"


@pytest.mark.parametrize(
    "product",
    [
        H100,
        H100.lower(),
        H100 + "-MIG-1g.10gb",
        H100.upper() + "-SHARED",
        "nvidia-h100-80gb-hbm3-mig-3g.40gb",
    ],
)
def test_validate_and_chargeback_find_the_same_price(product):
    spec = PricingCatalogSpec.model_validate(
        {"gpus": [{"product": H100, "onDemandPerHour": "4.10"}, {"product": "L40S", "onDemandPerHour": "1"}]}
    )
    book: PriceBook = pricebook_from_catalog(spec)
    policy = spec.price_for(product)
    cost = book.price(product)
    assert policy is not None and cost is not None
    assert policy.on_demand_per_hour == cost.on_demand_per_hour == Decimal("4.10")


def test_an_unpriced_product_is_unpriced_for_both():
    spec = PricingCatalogSpec.model_validate({"gpus": [{"product": H100, "onDemandPerHour": "4.10"}]})
    assert spec.price_for("NVIDIA-A100-SXM4-80GB") is None
    assert pricebook_from_catalog(spec).price("NVIDIA-A100-SXM4-80GB") is None


def test_shared_modules_import_only_the_standard_library():
    code = (
        "import sys; before = set(sys.modules)\n"
        "import kgwe.vocab, kgwe.money, kgwe.gpu.products\n"
        "new = {m.split('.')[0] for m in set(sys.modules) - before}\n"
        "print(sorted(new - set(sys.stdlib_module_names) - {'kgwe'}))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_api_version_is_one_value():
    from kgwe.policy.base import KgweObject

    assert KgweObject.model_fields["api_version"].default == vocab.API_VERSION


# Values of kgwe.vocab that are also ordinary words elsewhere (an apiVersion `v1`, a label value `enabled`,
# an Event reason): code may spell these for another meaning. The words of a Literal list (strategies,
# preferences, pricing modes) are what the code compares against; their defaults are held to one value by
# the tests above.
_WORDS = {"v1", "kgwe", "enabled", "disabled", "reports", "GPUHealthy", "default", "pod"} | {
    *vocab.STRATEGIES,
    *vocab.TOPOLOGY_PREFERENCES,
    *vocab.MIG_PRICING,
    *vocab.IDLE_COST,
    *vocab.WORKLOAD_CLASSES,  # "inference", "unknown": words of the optimizer's classes and of much else
}
# The same text meaning something else in one module: a Grafana dashboard's uid, the CA certificate's subject.
_OTHER_MEANINGS = {
    ("kgwe/observability/dashboards.py", "kgwe-scheduling"),
    ("kgwe/certs/rotation.py", "kgwe-ca"),
}
_NAMES: dict[str, str] = {}  # value -> the first vocab name holding it
for _name, _value in vars(vocab).items():
    if _name.isupper() and isinstance(_value, str) and _value not in _WORDS:
        _NAMES.setdefault(_value, _name)
_ROOT = Path(__file__).resolve().parent.parent


def _string_constants(tree: ast.AST) -> Iterator[tuple[int, str]]:
    """The string constants of a module with their lines, docstrings left out (they describe, not name)."""
    docstrings = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and body:
            first = body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                docstrings.add(id(first.value))
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            yield node.lineno, node.value


def _spelled_again(text: str) -> str | None:
    """The vocab name `text` spells: one of its values, or a name of KGWE's own (`kgwe.nvidia.io/...`)."""
    if text in _NAMES:
        return _NAMES[text]
    if text.startswith(vocab.ANNOTATION_PREFIX):
        return "ANNOTATION_PREFIX"
    return None


def _template_names(text: str) -> list[str]:
    """The vocab names a template spells as text (outside its comments) instead of taking `vocab.NAME`."""
    text = re.sub(r"\{#.*?#\}", "", text, flags=re.S)
    return [
        name
        for value, name in _NAMES.items()
        if len(value) > 3 and re.search(rf"(?<![\w./-]){re.escape(value)}(?![\w-])", text)
    ]


def test_names_on_the_cluster_are_spelled_only_in_vocab():
    """Every module names the cluster's labels, annotations, objects and KGWE's API through kgwe.vocab, so a
    name changes in one place; the templates get them as `vocab.NAME`."""
    found = []
    for path in sorted((_ROOT / "kgwe").rglob("*.py")):
        if path == _ROOT / "kgwe" / "vocab.py":
            continue
        relative = str(path.relative_to(_ROOT))
        for line, text in _string_constants(ast.parse(path.read_text(), str(path))):
            name = _spelled_again(text)
            if name and (relative, text) not in _OTHER_MEANINGS:
                found.append(f"{relative}:{line}: {text!r} is vocab.{name}")
    for path in sorted((_ROOT / "templates").rglob("*.j2")):
        found += [f"{path.relative_to(_ROOT)}: vocab.{n}" for n in _template_names(path.read_text())]
    assert not found, "\n".join(found)


def test_the_check_finds_a_name_spelled_again():
    """The check above can fail: a label, KGWE's own annotation and a default each count as spelled again."""
    assert _spelled_again("nvidia.com/gpu.product") == "GPU_PRODUCT_LABEL"
    assert _spelled_again("kgwe.nvidia.io/anything") == "ANNOTATION_PREFIX"
    assert _spelled_again("USD") == "DEFAULT_CURRENCY"
    assert _spelled_again("kgwe-scheduler") == "SCHEDULER_NAME"
    assert _spelled_again("enabled") is None
    source = 'CURRENCY = "USD"\nX = 1\n"""kgwe-scheduler, in a string."""\n'
    assert [t for _, t in _string_constants(ast.parse(source))] == [
        "USD",
        "kgwe-scheduler, in a string.",
    ]
    assert _template_names("{# kgwe-scoring #}name: kgwe-scoring\n{{ vocab.SCORING_CONFIGMAP }}") == [
        "SCORING_CONFIGMAP"
    ]
    assert _template_names("name: {{ vocab.SCORING_CONFIGMAP | yaml }}") == []
