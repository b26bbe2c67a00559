"""Which scheduler configurations the controller rolls the KGWE scheduler onto (pure)."""

from __future__ import annotations

import pytest
import yaml

from kgwe.policy import load_repository
from kgwe.render.render import render, scheduler_config_text
from kgwe.render.scheduler_config import config_hash, config_problem
from kgwe.resources import sample_repo_dir


@pytest.fixture(scope="module")
def rendered_text() -> str:
    return scheduler_config_text(render(load_repository(sample_repo_dir())).objects)


def test_the_rendered_configuration_is_accepted(rendered_text):
    assert config_problem(rendered_text) is None
    doc = yaml.safe_load(rendered_text)
    assert doc["profiles"] == [{"schedulerName": "kgwe-scheduler"}]
    assert doc["leaderElection"] == {
        "leaderElect": True,
        "resourceLock": "leases",
        "resourceName": "kgwe-scheduler",
        "resourceNamespace": "kgwe-system",
    }


def edited(text: str, change) -> str:
    doc = yaml.safe_load(text)
    change(doc)
    return yaml.safe_dump(doc)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d.update(kind="KubeProxyConfiguration"), "is not a kubescheduler.config.k8s.io/v1"),
        (
            lambda d: d.update(profiles=[{"schedulerName": "default-scheduler"}]),
            "no profile with schedulerName",
        ),
        (lambda d: d.pop("profiles"), "no profile"),
        (lambda d: d.update(extenders=[]), "calls no extender"),
        (lambda d: d["extenders"][0].pop("urlPrefix"), "extenders[0].urlPrefix"),
        (lambda d: d["leaderElection"].pop("resourceName"), "default scheduler's Lease"),
        (lambda d: d.pop("leaderElection"), "default scheduler's Lease"),
    ],
)
def test_malformed_configurations_are_refused_with_the_reason(rendered_text, change, message):
    problem = config_problem(edited(rendered_text, change))
    assert problem is not None and message in problem


def test_not_yaml_or_not_a_mapping(rendered_text):
    assert "not valid YAML (line 2)" in config_problem("a: b\n  c: [d\n")
    assert config_problem("- a\n") == "is not a YAML mapping"
    assert config_problem(None) == "has no KubeSchedulerConfiguration"
    assert "larger than" in config_problem("#" * (1024 * 1024 + 1))


def test_the_hash_follows_the_text(rendered_text):
    assert config_hash(rendered_text) == config_hash(rendered_text)
    assert config_hash(rendered_text) != config_hash(rendered_text + "\n")
    assert len(config_hash(rendered_text)) == 16
