"""Each shared word and default lives in kgwe.vocab (or kgwe.money, kgwe.gpu.products), and every part that
uses it agrees: the policy models, the extender, the cost arithmetic and the controller."""

from __future__ import annotations

import subprocess
import sys
from datetime import timedelta
from decimal import Decimal

import pytest
from pydantic import ValidationError

from kgwe import vocab
from kgwe.cost.pricing import PriceBook, pricebook, pricebook_from_catalog
from kgwe.errors import KgweError
from kgwe.extender import profile as extender_profile
from kgwe.extender import request as extender_request
from kgwe.policy.cluster_kinds import PolicyRepositorySpec, ReportsSpec, TopologyRequirement
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


def test_cluster_names_come_from_vocab():
    from kgwe.cluster import names

    shared = [
        "BUDGET_QUOTA_NAME",
        "GPU_RESOURCE",
        "MIG_CONFIG_LABEL",
        "MIG_RESOURCE_PREFIX",
        "MIG_STATE_LABEL",
        "SHARED_GPU_RESOURCE",
        "TOPOLOGY_ANNOTATION",
    ]
    for key in shared:
        assert getattr(names, key) is getattr(vocab, key)


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
    from kgwe import API_VERSION
    from kgwe.policy.base import KgweObject

    assert KgweObject.model_fields["api_version"].default == API_VERSION
