"""Wire format: requests shaped exactly as kube-scheduler sends them (Go structs without json tags, so
PascalCase top-level keys; `Nodes` null with nodeCacheCapable, `NodeNames` null without), replies as
kube-scheduler decodes them."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from kgwe.extender.core import NodeTable
from kgwe.extender.engine import UNKNOWN_NODE, Engine
from kgwe.extender.nodes import NodeState
from kgwe.extender.profile import Profile, ProfileError, profiles_from_document
from kgwe.extender.request import RequestError, parse_pod
from kgwe.topology import known

GOLDEN = Path(__file__).parent / "golden"


def undecided(e: Engine) -> None:
    """Switch the engine to a default profile with decideInFilter off (filter, then prioritize)."""
    e.set_profiles(
        profiles_from_document({"profiles": [{"name": "d", "default": True, "decideInFilter": False}]})
    )


def engine() -> Engine:
    t = NodeTable()
    t.upsert(
        NodeState(
            "dgx-h100-01",
            gpus=8,
            product="NVIDIA-H100-80GB-HBM3",
            gpu_memory_mib=81559,
            topology=known.load("DGX-H100"),
            gpu_used_milli=[0, 0, 0, 0, 0, 0, 0, 500],
        )
    )
    t.upsert(
        NodeState(
            "a100-pcie-01",
            gpus=8,
            product="NVIDIA-A100-80GB-PCIe",
            topology=known.load("A100-PCIE-PAIRS-ADJACENT"),
            gpu_used_milli=[1000] * 7,
        )
    )
    e = Engine(t)
    e.ready = True
    return e


def test_filter_node_cache_capable_golden() -> None:
    reply = orjson.loads(engine().filter((GOLDEN / "filter_node_cache_capable.json").read_bytes()))
    assert set(reply) == {"Nodes", "NodeNames", "FailedNodes", "FailedAndUnresolvableNodes", "Error"}
    assert reply["Nodes"] is None and reply["Error"] == ""
    assert reply["NodeNames"] == ["dgx-h100-01"]
    # a node is left, so kube-scheduler places the pod: it never reads why the others failed
    assert reply["FailedNodes"] == {} and reply["FailedAndUnresolvableNodes"] == {}


def fitting_nowhere() -> bytes:
    """The golden request with 8 GPUs asked: the H100 node has 7 whole ones free, the A100 node one."""
    args = orjson.loads((GOLDEN / "filter_node_cache_capable.json").read_bytes())
    for part in ("limits", "requests"):
        args["Pod"]["spec"]["containers"][0]["resources"][part]["nvidia.com/gpu"] = "8"
    return orjson.dumps(args)


def test_a_pod_left_no_node_gets_every_failed_node_with_its_reason() -> None:
    reply = orjson.loads(engine().filter(fitting_nowhere()))
    assert reply["NodeNames"] == []
    assert reply["FailedNodes"] == {
        "dgx-h100-01": "kgwe: pod needs 8 whole GPUs, node has 7 of 8 free",
        "a100-pcie-01": "kgwe: pod needs 8 whole GPUs, node has 1 of 8 free",
        "cpu-01": UNKNOWN_NODE,
    }
    assert reply["FailedAndUnresolvableNodes"] == {"cpu-01": UNKNOWN_NODE}


def test_filter_full_node_list_returns_node_objects() -> None:
    body = (GOLDEN / "filter_full_nodes.json").read_bytes()
    sent = orjson.loads(body)["Nodes"]["items"]
    e = engine()
    reply = orjson.loads(e.filter(body))
    assert reply["NodeNames"] is None and reply["FailedNodes"] == {}
    # the share fits on the H100 node's half-used GPU and on the A100 node's idle GPU; decided in filter,
    # the answer is one of the Node objects sent, unchanged
    (chosen,) = reply["Nodes"]["items"]
    assert chosen in sent
    undecided(e)
    assert orjson.loads(e.filter(body))["Nodes"]["items"] == sent


def test_prioritize_golden_scores_in_range() -> None:
    reply = orjson.loads(engine().prioritize((GOLDEN / "prioritize_node_cache_capable.json").read_bytes()))
    assert [h["Host"] for h in reply] == ["dgx-h100-01", "a100-pcie-01"]
    assert all(set(h) == {"Host", "Score"} and 0 <= h["Score"] <= 10 for h in reply)
    assert reply[1]["Score"] == 0  # cannot take 2 GPUs
    assert reply[0]["Score"] > 0


def test_pod_without_gpus_passes_every_node() -> None:
    body = orjson.dumps(
        {
            "Pod": {"metadata": {"name": "web"}, "spec": {"containers": [{"name": "c"}]}},
            "Nodes": None,
            "NodeNames": ["x", "y"],
        }
    )
    reply = orjson.loads(engine().filter(body))
    assert reply["NodeNames"] == ["x", "y"] and reply["FailedNodes"] == {}


@pytest.mark.parametrize(
    "body,needle",
    [
        (b"{not json", "not valid JSON"),
        (b"[]", "JSON object"),
        (b"{}", "Pod is missing"),
        (b'{"Pod": {"metadata": {}, "spec": {}}}', "NodeNames"),
        (b'{"Pod": {"metadata": {}, "spec": {}}, "NodeNames": [1, 2]}', "list of strings"),
        (b'{"Pod": {"metadata": {}, "spec": {}}, "Nodes": {"items": [{}]}}', "metadata.name"),
        (b'{"Pod": 5, "NodeNames": []}', "Pod must be an object"),
    ],
)
def test_malformed_args_raise_request_error(body: bytes, needle: str) -> None:
    with pytest.raises(RequestError, match=needle):
        engine().filter(body)


def pod(resources: dict, annotations: dict | None = None, init: dict | None = None) -> dict:
    spec = {
        "containers": [
            {"name": "a", "resources": {"limits": resources}},
            {"name": "b", "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}}},
        ]
    }
    if init:
        spec["initContainers"] = [{"name": "i", "resources": {"limits": init}}]
    return {"metadata": {"annotations": annotations or {}}, "spec": spec}


def test_parse_pod_resources_and_annotations() -> None:
    r = parse_pod(
        pod(
            {"nvidia.com/gpu": "4", "cpu": "2"},
            {
                "kgwe.nvidia.io/min-memory-gb": "80",
                "kgwe.nvidia.io/gpu-product": "H100|H200",
                "kgwe.nvidia.io/min-bandwidth-gbps": "300",
                "kgwe.nvidia.io/scoring-profile": "training",
            },
        )
    )
    assert (r.gpus, r.gpu_milli, r.cpu_milli, r.memory_mib) == (4, 1000, 2500, 1024)
    assert r.products == ("h100", "h200") and r.min_bandwidth_gbps == 300 and r.profile == "training"
    assert r.min_memory_mib == 76293  # 80 decimal GB
    s = parse_pod(pod({"nvidia.com/gpu.shared": "1"}, {"kgwe.nvidia.io/gpu-milli": "250"}))
    assert s.shared and s.gpu_milli == 250
    m = parse_pod(pod({"nvidia.com/mig-1g.10gb": "2"}, init={"nvidia.com/mig-1g.10gb": "3"}))
    assert m.mig == (("1g.10gb", 3),)


@pytest.mark.parametrize(
    "resources,annotations,needle",
    [
        ({"nvidia.com/gpu": "1.5"}, {}, "whole number"),
        ({"nvidia.com/gpu": "1", "nvidia.com/gpu.shared": "1"}, {}, "not both"),
        ({"nvidia.com/gpu.shared": "1"}, {"kgwe.nvidia.io/gpu-milli": "1500"}, "between 1 and 1000"),
        ({"nvidia.com/gpu": "2"}, {"kgwe.nvidia.io/topology-preference": "Fastest"}, "not one of"),
        ({"nvidia.com/gpu": "2"}, {"kgwe.nvidia.io/min-bandwidth-gbps": "fast"}, "expected a number"),
        ({"cpu": "lots"}, {}, "cpu"),
    ],
)
def test_parse_pod_rejects_bad_values(resources: dict, annotations: dict, needle: str) -> None:
    with pytest.raises(RequestError, match=needle):
        parse_pod(pod(resources, annotations))


def test_profiles_document_formats() -> None:
    flat = profiles_from_document(
        {
            "profiles": [
                {
                    "name": "default",
                    "default": True,
                    "weights": {"topology": 50, "resource": 30, "balance": 20},
                    "strategy": "binpack",
                    "extender": {"weight": 3, "ignorable": True},
                },
                {"name": "inference", "strategy": "Spread", "fragmentation": 0},
            ]
        }
    )
    assert flat[""].name == "default" and flat[""].strategy == "BinPack" and flat[""].ignorable
    assert flat["inference"].fragmentation == 0
    objects = profiles_from_document(
        [
            {
                "apiVersion": "kgwe.nvidia.io/v1",
                "kind": "ScoringProfile",
                "metadata": {"name": "p"},
                "spec": {"strategy": "Random"},
            }
        ]
    )
    assert objects["p"].strategy == "Random" and objects[""] == Profile(is_default=True)
    with pytest.raises(ProfileError, match="not one of"):
        profiles_from_document([{"name": "x", "strategy": "Fastest"}])
    with pytest.raises(ProfileError, match="more than one default"):
        profiles_from_document([{"name": "a", "default": True}, {"name": "b", "default": True}])


def test_scoring_profile_annotation_selects_profile() -> None:
    e = engine()
    e.set_profiles(
        {
            "spread": Profile(name="spread", strategy="Spread", topology=0, balance=0, fragmentation=0),
            "": Profile(strategy="BinPack", topology=0, balance=0, fragmentation=0),
        }
    )

    def ask(profile: str | None) -> list[int]:
        ann = {"kgwe.nvidia.io/scoring-profile": profile} if profile else {}
        body = orjson.dumps(
            {"Pod": pod({"nvidia.com/gpu": "1"}, ann), "NodeNames": ["dgx-h100-01", "a100-pcie-01"]}
        )
        return [h["Score"] for h in orjson.loads(e.prioritize(body))]

    packed, spread = ask(None), ask("spread")
    assert packed[1] > packed[0]  # BinPack: the nearly full node
    assert spread[0] > spread[1]


@pytest.mark.parametrize("strategy", ["RoundRobin", "Random"])
def test_dynamic_strategies_vary_between_requests(strategy: str) -> None:
    e = engine()
    e.set_profiles({"": Profile(strategy=strategy, topology=0, balance=0, fragmentation=0)})
    seen = set()
    for i in range(12):
        meta = {"name": f"p{i}", "uid": f"u{i}"}
        body = orjson.dumps(
            {
                "Pod": {
                    "metadata": meta,
                    "spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
                },
                "NodeNames": ["dgx-h100-01", "a100-pcie-01"],
            }
        )
        scores = [h["Score"] for h in orjson.loads(e.prioritize(body))]
        seen.add(scores[0] > scores[1])
    assert seen == {True, False}


def test_reads_the_scoring_configmap_kgwe_render_writes() -> None:
    from kgwe.policy import load_repository
    from kgwe.render import render_repository
    from kgwe.resources import sample_repo_dir

    objs = render_repository(load_repository(sample_repo_dir()))
    (cm,) = [o for o in objs if o["kind"] == "ConfigMap" and o["metadata"]["name"] == "kgwe-scoring"]
    profiles = profiles_from_document(orjson.loads(cm["data"]["profiles.json"]))
    assert profiles[""].name == "default" and profiles[""].strategy == "BestFit"
    assert (profiles[""].topology, profiles[""].resource, profiles[""].balance) == (40, 35, 25)
    assert profiles[""].fragmentation == 50 and profiles[""].decide_in_filter
    # CostOptimized needs prices: render passes the PricingCatalog's on-demand prices to every profile.
    assert dict(profiles[""].prices)["nvidia-h100-80gb-hbm3"] > 0
    assert profiles["topology-first"].strategy == "BestFit" and profiles["topology-first"].weight == 10
    assert not profiles["topology-first"].is_default


def test_answers_do_not_depend_on_node_order_or_repetition() -> None:
    e = engine()
    pod_json = orjson.loads((GOLDEN / "prioritize_node_cache_capable.json").read_bytes())["Pod"]
    orders = [["dgx-h100-01", "a100-pcie-01", "x"], ["x", "a100-pcie-01", "dgx-h100-01"]] * 3
    seen = []
    for names in orders:  # repeated lists hit the per-list caches, new orders miss them
        body = orjson.dumps({"Pod": pod_json, "Nodes": None, "NodeNames": names})
        kept = orjson.loads(e.filter(body))["NodeNames"]  # filter first, as kube-scheduler does
        scores = {h["Host"]: h["Score"] for h in orjson.loads(e.prioritize(body))}
        seen.append((scores, sorted(kept)))
        assert list(scores) == names
    assert all(s == seen[0] for s in seen)


def test_decide_in_filter_returns_only_the_best_node() -> None:
    e = engine()
    e.set_profiles(
        profiles_from_document({"profiles": [{"name": "d", "default": True, "decideInFilter": True}]})
    )
    t = e.table
    t.upsert(
        NodeState("dgx-h100-02", gpus=8, product="NVIDIA-H100-80GB-HBM3", topology=known.load("DGX-H100"))
    )
    names = ["dgx-h100-01", "dgx-h100-02", "a100-pcie-01"]
    share = {
        "metadata": {"name": "s", "annotations": {"kgwe.nvidia.io/gpu-milli": "400"}},
        "spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu.shared": "1"}}}]},
    }
    body = orjson.dumps({"Pod": share, "Nodes": None, "NodeNames": names})
    reply = orjson.loads(e.filter(body))
    # all three fit; only the best comes back (kube-scheduler then skips prioritize); no failures listed
    assert len(reply["NodeNames"]) == 1 and reply["FailedNodes"] == {}
    scores = {h["Host"]: h["Score"] for h in orjson.loads(e.prioritize(body))}
    assert scores[reply["NodeNames"][0]] == max(scores.values())
    undecided(e)
    assert sorted(orjson.loads(e.filter(body))["NodeNames"]) == sorted(names)


def whole_gpu_pod(uid: str, spec_extra: dict | None = None) -> dict:
    spec = {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}
    return {"metadata": {"name": uid, "uid": uid}, "spec": {**spec, **(spec_extra or {})}}


PREFERRED_AFFINITY = {
    "affinity": {
        "nodeAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 50, "preference": {"matchExpressions": [{"key": "z", "operator": "Exists"}]}}
            ]
        }
    }
}
SCHEDULE_ANYWAY = {
    "topologySpreadConstraints": [
        {"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "ScheduleAnyway", "labelSelector": {}}
    ]
}


@pytest.mark.parametrize(
    "extra,decided",
    [
        ({}, True),
        (PREFERRED_AFFINITY, False),
        (SCHEDULE_ANYWAY, False),
        (
            {
                "topologySpreadConstraints": [
                    {**SCHEDULE_ANYWAY["topologySpreadConstraints"][0], "whenUnsatisfiable": "DoNotSchedule"}
                ]
            },
            True,
        ),  # a filter, not a wish
        ({"affinity": {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{}]}}}, False),
        ({"affinity": {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{}]}}}, True),
    ],
)
def test_soft_preferences_keep_prioritize_in_play(extra: dict, decided: bool) -> None:
    """Preferences only kube-scheduler's score plugins weigh: such pods get every feasible node."""
    e = engine()
    assumed = []
    e.on_assume = lambda uid, node, req: assumed.append((uid, node))
    body = orjson.dumps(
        {"Pod": whole_gpu_pod("u1", extra), "Nodes": None, "NodeNames": ["dgx-h100-01", "a100-pcie-01"]}
    )
    kept = orjson.loads(e.filter(body))["NodeNames"]
    assert (len(kept) == 1) is decided
    assert assumed == ([("u1", kept[0])] if decided else [])


def test_shared_gpu_pods_are_decided_even_with_soft_preferences() -> None:
    """KGWE alone accounts nvidia.com/gpu.shared, so its node choice must be the one kube-scheduler binds."""
    e = engine()
    assumed = []
    e.on_assume = lambda uid, node, req: assumed.append((uid, node, req.gpu_milli))
    pod = {
        "metadata": {"name": "s", "uid": "u2", "annotations": {"kgwe.nvidia.io/gpu-milli": "300"}},
        "spec": {
            "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu.shared": "1"}}}],
            **PREFERRED_AFFINITY,
        },
    }
    body = orjson.dumps({"Pod": pod, "Nodes": None, "NodeNames": ["dgx-h100-01", "a100-pcie-01"]})
    (node,) = orjson.loads(e.filter(body))["NodeNames"]
    assert assumed == [("u2", node, 300)]


def test_a_single_feasible_node_is_assumed_without_deciding() -> None:
    """With decideInFilter off, a filter answer of one node is still where kube-scheduler will bind."""
    e = engine()
    undecided(e)
    assumed = []
    e.on_assume = lambda uid, node, req: assumed.append((uid, node))
    two = whole_gpu_pod("u3")
    two["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = "2"  # the A100 node has 1 free
    body = orjson.dumps({"Pod": two, "Nodes": None, "NodeNames": ["dgx-h100-01", "a100-pcie-01"]})
    assert orjson.loads(e.filter(body))["NodeNames"] == ["dgx-h100-01"]
    body = orjson.dumps(
        {"Pod": whole_gpu_pod("u4"), "Nodes": None, "NodeNames": ["dgx-h100-01", "a100-pcie-01"]}
    )
    assert len(orjson.loads(e.filter(body))["NodeNames"]) == 2
    assert assumed == [("u3", "dgx-h100-01")]


def test_filter_failures_are_counted_when_the_pod_is_left_no_node() -> None:
    """The failure metrics count what FailedNodes lists: the nodes of answers that placed the pod nowhere."""
    from kgwe.extender.app import Metrics, make_handler

    e, metrics = engine(), Metrics()
    handle = make_handler(e, metrics)
    placed = handle("POST", "/filter", (GOLDEN / "filter_node_cache_capable.json").read_bytes())
    assert placed[0] == 200 and metrics.failed_nodes._value.get() == 0
    replies = [handle("POST", "/filter", fitting_nowhere()) for _ in range(2)]
    assert [status for status, _, _ in replies] == [200, 200] and replies[0][1] == replies[1][1]
    counted = {r: metrics.filter_failures.labels(r)._value.get() for r in ("whole", "unknown_node")}
    assert counted == {"whole": 4, "unknown_node": 2}
    assert metrics.failed_nodes._value.get() == 6
