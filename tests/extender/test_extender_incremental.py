"""The watch index applies an assumption (and the bind that confirms it) as a delta on the node's published
tally instead of replaying every pod of the node. After any sequence of decisions, binds, status updates,
deletions, expiries and agent reports, every node must hold exactly what replaying its pods from scratch
gives: bound pods in creation order, then assumed ones in the order they were first assumed."""

from __future__ import annotations

import orjson
from hypothesis import example, given, settings
from hypothesis import strategies as st

from kgwe.extender.engine import Engine
from kgwe.extender.index import ASSUME_SECONDS, FOREIGN_GPU, ClusterIndex
from kgwe.extender.k8s import account, node_state
from kgwe.extender.request import PodRequest, parse_pod
from kgwe.localcluster.gpunodes import machine, node_manifest
from kgwe.vocab import GPU_INDEX_ANNOTATION, GPU_PODS_ANNOTATION

NODES = {"a": "DGX-H100", "b": "A100-PCIE-NVLINK-PAIRS"}
UIDS = [f"u{i}" for i in range(6)]
# (limits, annotations) of the pod shapes: shares of two sizes (best fit: their order decides which GPU each
# takes), one whole GPU, two (topology choice on NVLink pairs)
SHAPES = [
    ({"nvidia.com/gpu.shared": "1", "cpu": "1"}, {"kgwe.nvidia.io/gpu-milli": "300"}),
    ({"nvidia.com/gpu.shared": "1"}, {"kgwe.nvidia.io/gpu-milli": "600"}),
    ({"nvidia.com/gpu": "1", "cpu": "2"}, {}),
    ({"nvidia.com/gpu": "2"}, {}),
]


def pod(uid: str, shape: int, created: int, node: str | None = None, index: str | None = None) -> dict:
    limits, annotations = SHAPES[shape]
    annotations = dict(annotations)
    if index is not None:
        annotations[GPU_INDEX_ANNOTATION] = index
    spec: dict = {
        "schedulerName": "kgwe-scheduler",
        "containers": [{"name": "c", "resources": {"limits": limits}}],
    }
    if node:
        spec["nodeName"] = node
    return {
        "metadata": {
            "name": uid,
            "namespace": "t",
            "uid": uid,
            "annotations": annotations,
            "creationTimestamp": f"2026-11-22T00:{created // 60:02d}:{created % 60:02d}Z",
        },
        "spec": spec,
        "status": {"phase": "Running" if node else "Pending"},
    }


def node(name: str, holders: dict[int, str]) -> dict:
    raw = node_manifest(name, machine(NODES[name]))
    if holders:
        raw["metadata"]["annotations"][GPU_PODS_ANNOTATION] = orjson.dumps(
            {str(k): v for k, v in holders.items()}
        ).decode()
    return raw


def replayed(idx: ClusterIndex, name: str, raw_node: dict) -> object:
    """The node as a full replay gives it, written out here from the index's inputs."""
    base = node_state(raw_node, idx._decode)
    pods = sorted((p for p in idx.pods.values() if p[0] == name), key=lambda p: p[1])
    known = {p[4] for p in pods}
    holders = idx.holders.get(name, {})
    held: list[tuple[PodRequest, tuple[int, ...] | None]] = [
        (FOREIGN_GPU, (i,)) for i in sorted(i for i, who in holders.items() if who not in known)
    ]
    held += [(p[2], p[3]) for p in pods]
    held += [(req, None) for n, req, _ in idx.assumed.values() if n == name]  # in the order first assumed
    return account(base, held, idx.engine.table.topology_chooser)


step = st.one_of(
    st.tuples(st.just("assume"), st.sampled_from(UIDS), st.sampled_from(sorted(NODES)), st.integers(0, 3)),
    st.tuples(st.just("bind"), st.sampled_from(UIDS), st.sampled_from(sorted(NODES)), st.integers(0, 7)),
    st.tuples(st.just("status"), st.sampled_from(UIDS), st.just(""), st.just(0)),
    st.tuples(st.just("delete"), st.sampled_from(UIDS), st.just(""), st.just(0)),
    st.tuples(st.just("end"), st.sampled_from(UIDS), st.just(""), st.just(0)),
    st.tuples(st.just("expire"), st.just(""), st.just(""), st.integers(0, 2)),
    st.tuples(st.just("agent"), st.sampled_from(UIDS), st.sampled_from(sorted(NODES)), st.integers(0, 7)),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(step, max_size=40))
def test_incremental_assumptions_equal_a_full_replay(steps: list[tuple[str, str, str, int]]) -> None:
    engine = Engine()
    idx = ClusterIndex(engine, verify_decisions=False)
    now = [0.0]
    idx.clock = lambda: now[0]
    holders: dict[str, dict[int, str]] = {n: {} for n in NODES}
    idx._apply_nodes([node(n, {}) for n in NODES])
    shape_of = {uid: i % len(SHAPES) for i, uid in enumerate(UIDS)}
    created = {uid: 0 for uid in UIDS}
    last: dict[str, dict] = {}  # uid -> the pod as the watch last showed it bound
    for clock, (op, uid, where, k) in enumerate(steps):
        now[0] += 1.0
        if op == "assume":
            shape_of[uid] = k
            if uid not in last:
                created[uid] = clock
            idx.assume(uid, where, parse_pod(pod(uid, k, created[uid])))
        elif op == "bind":
            index = str(k) if k >= 6 else None  # now and then the agent has written the GPU index
            if uid not in last:
                created[uid] = clock
            last[uid] = pod(uid, shape_of[uid], created[uid], where, index)
            idx._any_pod_event("MODIFIED", last[uid])
        elif op == "status" and uid in last:
            last[uid]["status"]["podIP"] = f"10.0.0.{clock % 250}"
            idx._any_pod_event("MODIFIED", last[uid])
        elif op == "end" and uid in last:  # the pod ran to completion: it holds nothing any more
            last[uid] = {**last[uid], "status": {"phase": "Succeeded"}}
            idx._any_pod_event("MODIFIED", last[uid])
        elif op == "delete" and uid in last:
            idx._any_pod_event("DELETED", last.pop(uid))
        elif op == "expire":
            now[0] += ASSUME_SECONDS * k / 2
            idx.expire_assumed()
        elif op == "agent":
            holders[where][k] = f"t/{uid}"
            idx._node_event("MODIFIED", node(where, holders[where]))
        for name in NODES:
            row = engine.table.rows[name]
            assert engine.table.nodes[row] == replayed(idx, name, node(name, holders[name])), (name, steps)


def test_the_usual_bind_leaves_the_node_as_its_assumption_made_it() -> None:
    """A decision, then the watch's bind and status update of that pod: the node is written once."""
    engine = Engine()
    idx = ClusterIndex(engine, verify_decisions=False)
    idx._apply_nodes([node("a", {})])
    idx._any_pod_event("ADDED", pod("old", 2, 1, "a"))
    row = engine.table.rows["a"]
    before = engine.table.version[row]
    idx.assume("new", "a", parse_pod(pod("new", 2, 2)))
    assumed = engine.table.version[row]
    assert assumed != before and sum(engine.node_view("a")["gpuUsedMilli"]) == 2000
    bound = pod("new", 2, 2, "a")
    idx._any_pod_event("MODIFIED", bound)
    bound["status"]["podIP"] = "10.0.0.9"
    idx._any_pod_event("MODIFIED", bound)
    assert idx.assumed == {} and set(idx.pods) == {"old", "new"}
    assert engine.table.version[row] == assumed and sum(engine.node_view("a")["gpuUsedMilli"]) == 2000


def test_an_update_that_changes_nothing_the_index_reads_is_not_parsed_again(monkeypatch) -> None:
    """A pod's status update (its IP, conditions) and a node's heartbeat cost a compare: the pod is not
    parsed again, the node not rebuilt. A change to what the index reads still counts."""
    import kgwe.extender.index as index

    parsed: list[str] = []
    built: list[str] = []
    real_holds, real_state = index.pod_holds, index.node_state
    monkeypatch.setattr(
        index, "pod_holds", lambda raw: parsed.append(raw["metadata"]["uid"]) or real_holds(raw)
    )
    monkeypatch.setattr(
        index, "node_state", lambda raw, d: built.append(raw["metadata"]["name"]) or real_state(raw, d)
    )
    engine = Engine()
    idx = ClusterIndex(engine, verify_decisions=False)
    idx._apply_nodes([node("a", {})])
    idx._any_pod_event("ADDED", pod("p", 2, 1, "a"))
    parsed.clear(), built.clear()
    update = pod("p", 2, 1, "a")
    update["status"] = {"phase": "Running", "podIP": "10.0.0.3"}  # after "Pending": what kwok writes next
    update["metadata"]["resourceVersion"] = "99"
    idx._any_pod_event("MODIFIED", update)
    heartbeat = node("a", {})
    heartbeat["status"]["conditions"] = [{"type": "Ready", "status": "True", "lastHeartbeatTime": "now"}]
    idx._node_event("MODIFIED", heartbeat)
    assert parsed == [] and built == []

    idx._any_pod_event("MODIFIED", pod("p", 2, 1, "a", index="5"))
    idx._node_event("MODIFIED", node("a", {3: "t/other"}))
    assert parsed == ["p"] and built == ["a"]
    assert engine.node_view("a")["gpuUsedMilli"] == [0, 0, 0, 1000, 0, 1000, 0, 0]
    done = pod("p", 2, 1, "a", index="5")
    done["status"]["phase"] = "Succeeded"
    idx._any_pod_event("MODIFIED", done)
    assert parsed == ["p", "p"] and engine.node_view("a")["gpuUsedMilli"] == [0, 0, 0, 1000, 0, 0, 0, 0]


def reference_mix(keys: list[tuple]) -> tuple[dict, dict, int]:
    """The fragmentation mix's bookkeeping as the rule states it, every observation counted: refresh at
    the first shape and every MIX_REFRESH_EVERY after, halve the counts, adopt a mix that moved > 0.1."""
    from collections import Counter

    from kgwe.extender.engine import MIX_REFRESH_EVERY

    counts: Counter = Counter()
    adopted: dict = {}
    since = 0
    for key in keys:
        counts[key] += 1
        since += 1
        if since >= MIX_REFRESH_EVERY or (len(counts) == 1 and since == 1):
            since = 0
            total = sum(counts.values())
            mix = {k: n / total for k, n in counts.most_common(32)}
            for k in list(counts):
                counts[k] = counts[k] // 2 or 1
            if sum(abs(mix.get(k, 0.0) - adopted.get(k, 0.0)) for k in set(mix) | set(adopted)) > 0.1:
                adopted = mix
    return dict(counts), adopted, since


@settings(max_examples=30, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2), st.integers(1, 700)), max_size=5))
@example([(0, 1), (1, 3), (0, 600)])  # a refresh of two shapes that leaves the adopted mix as it was
def test_the_workload_mix_skips_no_observation_that_matters(runs: list[tuple[int, int]]) -> None:
    """A stream of one shape skips the refresh that would end where it starts; the mix is as if every
    observation had been counted."""
    requests = [PodRequest(gpus=1), PodRequest(gpus=2, cpu_milli=4000), PodRequest(gpus=1, gpu_milli=500)]
    engine = Engine()
    keys = []
    for shape, n in runs:
        req = requests[shape]
        keys += [(req.gpus, req.gpu_milli, req.cpu_milli, req.memory_mib, req.products)] * n
        for _ in range(n):
            engine.observe(req)
    counts, adopted, since = reference_mix(keys)
    assert (dict(engine._mix), engine._mix_set, engine._since_mix) == (counts, adopted, since)
