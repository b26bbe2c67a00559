"""Rendered objects: valid Kubernetes objects, the formats KGWE's partners read, byte-identical output."""

from __future__ import annotations

import json
import shutil
from collections import Counter

import jinja2
import kubernetes_validate
import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from kgwe.cli import main
from kgwe.errors import KgweError
from kgwe.gpu import catalog
from kgwe.gpu.layouts import fit
from kgwe.policy import load_repository
from kgwe.render import RenderOptions, render, render_repository, write_files
from kgwe.render.environment import render_template, to_yaml, to_yaml_block
from kgwe.render.layouts import desired_layouts
from kgwe.render.render import cluster_objects, decide, standalone_extender_url
from kgwe.render.sharing import config_key
from kgwe.resources import sample_repo_dir
from kgwe.vocab import (
    DEFAULT_PERCENTAGE_OF_NODES_TO_SCORE,
    MANAGED_BY_LABEL,
    REPOSITORY_LABEL,
    UNCAPPED_HARD_ANNOTATION,
)

K8S_VERSION = "1.33"


@pytest.fixture(scope="module")
def sample():
    ps = load_repository(sample_repo_dir())
    assert ps.ok
    return ps


@pytest.fixture(scope="module")
def rendered(sample):
    return render(sample, options=RenderOptions(repository="gpu-policy", revision="abc123"))


def by_kind(objects, kind):
    return [o for o in objects if o["kind"] == kind]


def test_every_object_is_a_valid_kubernetes_object(rendered):
    assert rendered.objects
    for obj in rendered.objects:
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)


def test_every_object_carries_the_kgwe_labels(rendered):
    for obj in rendered.objects:
        labels = obj["metadata"]["labels"]
        assert labels[REPOSITORY_LABEL] == "gpu-policy"
        if obj["kind"] == "Node":  # label patches on nodes KGWE does not own: never pruned
            assert MANAGED_BY_LABEL not in labels
        else:
            assert labels[MANAGED_BY_LABEL] == "kgwe"
            assert obj["metadata"]["annotations"]["kgwe.nvidia.io/revision"] == "abc123"


def test_mig_parted_config_follows_the_v1_format_and_layouts_fit(sample, rendered):
    (cm,) = [
        o for o in by_kind(rendered.objects, "ConfigMap") if o["metadata"]["name"] == "kgwe-mig-parted-config"
    ]
    config = yaml.safe_load(cm["data"]["config.yaml"])
    assert set(config) == {"version", "mig-configs"} and config["version"] == "v1"
    assert "all-disabled" in config["mig-configs"]  # the GPU Operator's default label keeps working
    nodes = {n.name: n for n in sample.inventory().spec.nodes}
    for node, name in rendered.node_configs.items():
        entries = config["mig-configs"][name]
        model = catalog.model_for_product(nodes[node].product)
        for entry in entries:
            assert set(entry) == {"devices", "mig-enabled", "mig-devices"}
            assert entry["devices"] == "all" or all(isinstance(i, int) for i in entry["devices"])
            if not entry["mig-enabled"]:
                assert entry["mig-devices"] == {}
            else:
                profiles = [p for p, c in entry["mig-devices"].items() for _ in range(c)]
                assert fit(model, profiles) is not None, (node, profiles)


def test_node_labels_cover_the_strategy_pools(sample, rendered):
    nodes = by_kind(rendered.objects, "Node")
    labels = {
        n["metadata"]["name"]: n["metadata"]["labels"]["nvidia.com/mig.config"]
        for n in nodes
        if "nvidia.com/mig.config" in n["metadata"]["labels"]
    }
    assert labels == rendered.node_configs
    sharing = {
        n["metadata"]["name"]: n["metadata"]["labels"]["nvidia.com/device-plugin.config"]
        for n in nodes
        if "nvidia.com/device-plugin.config" in n["metadata"]["labels"]
    }
    assert (
        sharing
        == rendered.sharing_configs
        == {
            "l40s-01": config_key(sample.sharing_strategies[0]),
            "l40s-02": config_key(sample.sharing_strategies[0]),
        }
    )
    pools = Counter(
        n.labels["kgwe.nvidia.io/pool"] for n in sample.inventory().spec.nodes if n.name in labels
    )
    assert pools == {"inference": 8, "training": 10}  # L40S nodes: no MIG label, time-sliced instead
    assert {labels[f"dgx-a100-{i:02d}"] for i in range(1, 11)} == {"kgwe-all-disabled"}


def test_rendered_layouts_approach_the_strategy_shares(sample):
    layouts = desired_layouts(sample.mig_strategies, sample.inventory())
    slices = Counter()
    for node, gpus in layouts.items():
        if node.startswith("dgx-h100"):
            for gpu in gpus:
                for p in gpu or ():
                    slices[p] += int(p[0])
    total = sum(slices.values())
    assert abs(slices["1g.10gb"] / total - 0.70) < 0.1


def test_scheduler_configuration(rendered):
    (cm,) = [
        o for o in by_kind(rendered.objects, "ConfigMap") if o["metadata"]["name"] == "kgwe-scheduler-config"
    ]
    config = yaml.safe_load(cm["data"]["scheduler-config.yaml"])
    assert config["apiVersion"] == "kubescheduler.config.k8s.io/v1"
    assert config["kind"] == "KubeSchedulerConfiguration"
    assert config["percentageOfNodesToScore"] == DEFAULT_PERCENTAGE_OF_NODES_TO_SCORE
    (ext,) = config["extenders"]
    # the default install: the extender container of kube-scheduler's own pod, on its loopback
    assert ext["urlPrefix"] == "http://127.0.0.1:8888"
    assert ext["enableHTTPS"] is False and "tlsConfig" not in ext
    assert ext["nodeCacheCapable"] is True
    assert (ext["filterVerb"], ext["prioritizeVerb"]) == ("filter", "prioritize")
    assert ext["weight"] == 5 and ext["httpTimeout"] == "2s" and ext["ignorable"] is False
    names = [r["name"] for r in ext["managedResources"]]
    assert names == [
        "nvidia.com/gpu",
        "nvidia.com/gpu.shared",
        "nvidia.com/mig-1g.10gb",
        "nvidia.com/mig-2g.20gb",
        "nvidia.com/mig-3g.40gb",
    ]
    assert len(set(names)) == len(names)


def test_the_standalone_extender_is_called_over_mutual_tls(sample):
    url = standalone_extender_url("kgwe-system")
    objs = render_repository(sample, options=RenderOptions(extender_url=url))
    (cm,) = [o for o in objs if o["metadata"]["name"] == "kgwe-scheduler-config"]
    ext = yaml.safe_load(cm["data"]["scheduler-config.yaml"])["extenders"][0]
    assert ext["urlPrefix"] == "https://kgwe-extender.kgwe-system.svc:8443"
    assert ext["enableHTTPS"] is True
    assert ext["tlsConfig"] == {
        "certFile": "/etc/kgwe/extender-client/tls.crt",
        "keyFile": "/etc/kgwe/extender-client/tls.key",
        "caFile": "/etc/kgwe/extender-client/ca.crt",
    }


def test_extender_url_is_configurable(sample):
    objs = render_repository(sample, options=RenderOptions(extender_url="https://ext.example:8443"))
    (cm,) = [o for o in objs if o["metadata"]["name"] == "kgwe-scheduler-config"]
    ext = yaml.safe_load(cm["data"]["scheduler-config.yaml"])["extenders"][0]
    assert ext["urlPrefix"] == "https://ext.example:8443" and ext["enableHTTPS"] is True


def test_scoring_configmap_holds_every_profile(rendered):
    import json

    (cm,) = [o for o in by_kind(rendered.objects, "ConfigMap") if o["metadata"]["name"] == "kgwe-scoring"]
    data = json.loads(cm["data"]["profiles.json"])
    assert data["default"] == "default"
    assert set(data["profiles"]) == {"default", "least-loaded", "topology-first"}
    assert data["profiles"]["default"]["weights"] == {"topology": 40, "resource": 35, "balance": 25}


def test_one_resource_quota_per_budgeted_namespace(sample, rendered):
    quotas = by_kind(rendered.objects, "ResourceQuota")
    namespaces = sorted(ns for b in sample.budgets for ns in b.spec.namespaces)
    assert sorted(q["metadata"]["namespace"] for q in quotas) == namespaces
    assert {q["metadata"]["name"] for q in quotas} == {"kgwe-budget"}
    ds = next(q for q in quotas if q["metadata"]["namespace"] == "ds-notebooks")
    assert ds["spec"]["hard"]["requests.nvidia.com/gpu"] == "4"


def test_an_enforced_budget_caps_its_namespace_quota_and_no_other(sample, rendered):
    capped_hard = {"requests.nvidia.com/gpu": "1"}
    caps = render(
        sample,
        options=RenderOptions(repository="gpu-policy", revision="abc123"),
        quota_caps={"ds-notebooks": capped_hard},
    )
    before = {q["metadata"]["namespace"]: q for q in by_kind(rendered.objects, "ResourceQuota")}
    after = {q["metadata"]["namespace"]: q for q in by_kind(caps.objects, "ResourceQuota")}
    assert after["ds-notebooks"]["spec"]["hard"] == capped_hard
    # the capped quota carries the budget's own limit (offboarding with deletionPolicy Retain lifts the cap)
    uncapped = after["ds-notebooks"]["metadata"]["annotations"].pop(UNCAPPED_HARD_ANNOTATION)
    assert json.loads(uncapped) == before["ds-notebooks"]["spec"]["hard"]
    assert after["ds-notebooks"]["metadata"] == before["ds-notebooks"]["metadata"]
    assert {ns: q for ns, q in after.items() if ns != "ds-notebooks"} == {
        ns: q for ns, q in before.items() if ns != "ds-notebooks"
    }
    # everything but the quota is the same text
    assert {k: v for k, v in caps.files.items() if k != "resource-quotas.yaml"} == {
        k: v for k, v in rendered.files.items() if k != "resource-quotas.yaml"
    }


def test_the_controller_applies_what_render_gives(sample, rendered):
    """cluster_objects (what the reconciler server-side applies) holds every rendered object but the Node
    label patches (the rollout's) and the budget quotas (rendered apart, with the caps of the pass)."""
    opts = RenderOptions(repository="gpu-policy", revision="abc123")
    decided = decide(sample, sample.inventory(), None, None, None)
    applied = cluster_objects(sample, decided, opts)
    assert applied == [o for o in rendered.objects if o["kind"] not in ("Node", "ResourceQuota")]
    names = {o["metadata"]["name"] for o in applied}
    assert {"kgwe-runtimes", "kgwe-pod-template-policy", "kgwe-scoring", "kgwe-scheduler-config"} <= names


def test_render_is_byte_identical(sample, tmp_path):
    first = render(sample, options=RenderOptions(repository="r"))
    second = render(load_repository(sample_repo_dir()), options=RenderOptions(repository="r"))
    write_files(first.files, tmp_path / "a")
    write_files(second.files, tmp_path / "b")
    names = sorted(p.name for p in (tmp_path / "a").iterdir())
    assert names == sorted(p.name for p in (tmp_path / "b").iterdir())
    for name in names:
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()


def test_cli_render_writes_files_and_removes_stale_ones(tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["render", str(sample_repo_dir()), "--out", str(out)]) == 0
    first = {p.name: p.read_bytes() for p in out.iterdir()}
    assert "mig-parted-config.yaml" in first and "resource-quotas.yaml" in first
    (out / "keep.txt").write_text("not ours")
    repo = tmp_path / "repo"
    shutil.copytree(sample_repo_dir(), repo)
    shutil.rmtree(repo / "budgets")
    assert main(["render", str(repo), "--out", str(out)]) == 0
    assert not (out / "resource-quotas.yaml").exists()
    assert (out / "keep.txt").exists()
    assert (out / "mig-parted-config.yaml").read_bytes() == first["mig-parted-config.yaml"]


def test_cli_render_with_separate_inventory(tmp_path, capsys):
    repo = tmp_path / "repo"
    shutil.copytree(sample_repo_dir(), repo)
    inventory = tmp_path / "inventory.yaml"
    shutil.move(repo / "inventory" / "prod.yaml", inventory)
    assert main(["render", str(repo), "--inventory", str(inventory), "--out", str(tmp_path / "out")]) == 0
    assert "18 node MIG labels" in capsys.readouterr().out


def scheduler_config_of(repo) -> dict:
    (cm,) = [
        o
        for o in by_kind(render(load_repository(repo)).objects, "ConfigMap")
        if o["metadata"]["name"] == "kgwe-scheduler-config"
    ]
    return yaml.safe_load(cm["data"]["scheduler-config.yaml"])


def test_percentage_of_nodes_to_score_is_the_default_profiles(tmp_path):
    """The scheduler-wide setting comes from the default ScoringProfile only; out of range is refused."""
    repo = tmp_path / "repo"
    shutil.copytree(sample_repo_dir(), repo)
    default, other = repo / "scoring" / "default.yaml", repo / "scoring" / "topology-first.yaml"
    other.write_text(other.read_text().replace("2s}", "2s, percentageOfNodesToScore: 30}"))
    assert scheduler_config_of(repo)["percentageOfNodesToScore"] == DEFAULT_PERCENTAGE_OF_NODES_TO_SCORE
    text = default.read_text()
    assert DEFAULT_PERCENTAGE_OF_NODES_TO_SCORE == 100  # exact unless the policy asks for a sample
    default.write_text(text.replace("httpTimeout: 2s}", "httpTimeout: 2s, percentageOfNodesToScore: 0}"))
    assert scheduler_config_of(repo)["percentageOfNodesToScore"] == 0
    default.write_text(text.replace("httpTimeout: 2s}", "httpTimeout: 2s, percentageOfNodesToScore: 101}"))
    assert not load_repository(repo).ok


def test_render_refuses_an_invalid_repository(tmp_path, capsys):
    repo = tmp_path / "repo"
    shutil.copytree(sample_repo_dir(), repo)
    path = repo / "mig" / "inference-h100.yaml"
    path.write_text(path.read_text().replace("70%", "60%"))
    with pytest.raises(KgweError, match="add up to 90%"):
        render(load_repository(repo))
    assert main(["render", str(repo), "--out", str(tmp_path / "out")]) == 1
    assert not (tmp_path / "out").exists()


def test_explicit_layouts_are_rendered(sample):
    layouts = {"dgx-h100-01": [["7g.80gb"]] * 4 + [["3g.40gb", "3g.40gb"]] * 4}
    result = render(sample, layouts=layouts)
    config = yaml.safe_load(yaml.safe_load(result.files["mig-parted-config.yaml"])["data"]["config.yaml"])
    (name,) = set(result.node_configs.values())
    entries = config["mig-configs"][name]
    assert [e["mig-devices"] for e in entries] == [{"7g.80gb": 1}, {"3g.40gb": 2}]
    assert [e["devices"] for e in entries] == [[0, 1, 2, 3], [4, 5, 6, 7]]


def test_templates_use_strict_undefined():
    with pytest.raises(jinja2.UndefinedError):
        render_template("resource-quotas.yaml.j2", quotas=[{"namespace": "a"}], repository="r")


TRICKY = [
    *["yes", "no", "on", "1e3", "0x10", "null", "~", "1.0", "true", "...", "---", "a..."],
    "a: b",
    "- x",
    "#x",
    "",
    " x",
    "é",
    "x\n...",
]


@pytest.mark.parametrize("value", TRICKY)  # YAML's words, numbers, markers ("..." ends a document)
def test_yaml_filter_keeps_tricky_strings_strings(value):
    assert yaml.safe_load(f"k: {to_yaml(value)}") == {"k": value}


@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(max_size=20),
        lambda children: (
            st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=8), children, max_size=3)
        ),
        max_leaves=10,
    )
)
def test_yaml_filter_round_trips(value):
    assert yaml.safe_load(f"k: {to_yaml(value)}") == {"k": value}


@given(st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=80))
def test_yaml_block_round_trips(text):
    assert yaml.safe_load("k: " + to_yaml_block(text, 2) + "\n") == {"k": text}  # as in a template line


@pytest.mark.parametrize("shares", [(70, 20, 10), (10, 10, 80), (34, 33, 33), (100, 0, 0)])
def test_rendered_layouts_are_always_valid(sample, shares):
    from kgwe.policy import MIGStrategy

    profiles = [{p: f"{s}%"} for p, s in zip(("1g.10gb", "2g.20gb", "3g.40gb"), shares, strict=True) if s]
    doc = sample.mig_strategies[0].to_yaml_dict()
    doc["spec"]["partitionStrategy"]["preferredProfiles"] = profiles
    strategy = MIGStrategy.model_validate(doc)
    layouts = desired_layouts([strategy], sample.inventory())
    assert len(layouts) == 8
    model = catalog.model_for_product("NVIDIA-H100-80GB-HBM3")
    for gpus in layouts.values():
        for gpu in gpus:
            assert gpu and fit(model, gpu) is not None
