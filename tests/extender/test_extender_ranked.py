"""A pod decided in filter is answered from the index's ranking and a search of the NodeNames bytes; the
answer must be one the full path (decode every name, score the listed nodes) could give: a listed node of
the best score among the listed nodes that fit."""

from __future__ import annotations

import random

import numpy as np
import orjson
import pytest

from kgwe.extender import nodenames
from kgwe.extender.core import OK, NodeTable
from kgwe.extender.engine import RANKED_PROBES, Engine
from kgwe.extender.nodes import NodeState
from kgwe.extender.request import parse_pod

H100 = "NVIDIA-H100-80GB-HBM3"


def gpu_pod(uid: str, gpus: int = 1) -> dict:
    return {
        "metadata": {"name": uid, "namespace": "t", "uid": uid},
        "spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]},
    }


def fleet(n: int = 40, seed: int = 7) -> Engine:
    rng = random.Random(seed)
    t = NodeTable()
    for i in range(n):
        used = [1000 if rng.random() < 0.5 else 0 for _ in range(8)]
        t.upsert(NodeState(f"node-{i:03d}", gpus=8, product=H100, gpu_used_milli=used))
    e = Engine(t)
    e.ready = True
    return e


def full_path_best(e: Engine, pod: dict, names: list[str]) -> tuple[float, set[str]]:
    """(best score of the listed nodes that fit, the listed nodes that have it), as the full path sees it."""
    req = parse_pod(pod)
    rows = np.array([e.table.rows[n] for n in names])
    reason, score, _ = e.cache.answer(rows, req, e.profile_for(req))
    fit = reason == OK
    best = score[fit].max()
    return best, {n for n, s, f in zip(names, score, fit, strict=True) if f and s == best}


@pytest.mark.parametrize("seed", range(6))
def test_the_ranked_answer_is_a_best_listed_node(seed: int) -> None:
    e = fleet(seed=seed)
    rng = random.Random(seed)
    names = [n for n in e.table.rows if rng.random() < 0.6]
    rng.shuffle(names)
    pod = gpu_pod("u1", gpus=rng.choice([1, 2, 4]))
    ranked = e._filter_ranked(orjson.dumps({"Pod": pod, "Nodes": None, "NodeNames": names}))
    assert ranked is not None, "a plain request of a pod decided in filter takes the ranked path"
    reply, (uid, node, _) = ranked
    (chosen,) = orjson.loads(reply)["NodeNames"]
    _, best = full_path_best(e, pod, names)
    assert chosen in best and (uid, node) == ("u1", chosen)


def test_the_best_node_of_the_index_is_skipped_when_not_listed() -> None:
    e = fleet()
    pod = gpu_pod("u1")
    everywhere = list(e.table.rows)
    (first,) = orjson.loads(e._filter(orjson.dumps({"Pod": pod, "NodeNames": everywhere}))[0])["NodeNames"]
    rest = [n for n in everywhere if n != first]
    (second,) = orjson.loads(e._filter(orjson.dumps({"Pod": pod, "NodeNames": rest}))[0])["NodeNames"]
    assert second != first and second in full_path_best(e, pod, rest)[1]


def test_when_no_well_ranked_node_is_listed_the_full_path_answers() -> None:
    """The listed nodes all rank below RANKED_PROBES others: every name is resolved instead."""
    e = fleet(n=RANKED_PROBES + 8)
    pod = gpu_pod("u1")
    req = parse_pod(pod)
    rows = e._live_rows()
    reason, score, _ = e.cache.answer(rows, req, e.profile_for(req))
    ranked = [e.table.names[r] for r in rows[np.argsort(-np.where(reason == OK, score, -1.0), kind="stable")]]
    worst = [n for n in ranked[RANKED_PROBES:] if e.table.rows[n] in rows[reason == OK]]
    assert worst, "the fleet should have fitting nodes below the probed ones"
    body = orjson.dumps({"Pod": pod, "NodeNames": worst})
    assert e._filter_ranked(body) is None
    (chosen,) = orjson.loads(e._filter(body)[0])["NodeNames"]
    assert chosen in full_path_best(e, pod, worst)[1]


def test_a_body_the_bytes_check_refuses_gets_the_same_decision() -> None:
    e = fleet()
    names = list(e.table.rows)  # in row order: both paths break ties between equal scores the same way
    args = {"Pod": gpu_pod("u1"), "Nodes": None, "NodeNames": names}
    compact, spaced = orjson.dumps(args), orjson.dumps(args, option=orjson.OPT_INDENT_2)
    assert nodenames.compact_tail(spaced) is None
    assert orjson.loads(e._filter(compact)[0]) == orjson.loads(e._filter(spaced)[0])


@pytest.mark.parametrize(
    "tail",
    [
        b'"NodeNames":["a","b"]}',
        b'"NodeNames":[]}',
        b'"NodeNames":["gpu-pool-1.example.com"]}',
    ],
)
def test_compact_name_lists_are_read_from_bytes(tail: bytes) -> None:
    body = b'{"Pod":{},"Nodes":null,' + tail
    assert nodenames.compact_tail(body) == tail
    assert orjson.loads(nodenames.head(body, tail)) == {"Pod": {}, "Nodes": None, "NodeNames": None}
    for name in orjson.loads(b"{" + tail)["NodeNames"]:
        assert nodenames.holds(tail, name)
    assert not nodenames.holds(tail, "b.example.com")


@pytest.mark.parametrize(
    "tail",
    [
        b'"NodeNames": ["a"]}',  # whitespace
        b'"NodeNames":["a", "b"]}',
        b'"NodeNames":["a\\"b"]}',  # an escape
        b'"NodeNames":["a","b"]} ',
        b'"NodeNames":["a",,"b"]}',
        b'"NodeNames":["a""b"]}',
        b'"NodeNames":[",""x"]}',
        b'"NodeNames":["a",1]}',
        b'"NodeNames":["a\x01"]}',  # a control byte
        '"NodeNames":["nöde"]}'.encode(),  # not ASCII
        b'"NodeNames":null}',
        b'"NodeNames":["a"]}}',
    ],
)
def test_anything_else_is_left_to_the_json_decoder(tail: bytes) -> None:
    assert nodenames.compact_tail(b'{"Pod":{},' + tail) is None


def test_a_name_inside_another_is_not_held() -> None:
    tail = nodenames.compact_tail(b'{"Pod":{},"NodeNames":["node-10","xnode-1"]}')
    assert tail is not None
    assert not nodenames.holds(tail, "node-1") and nodenames.holds(tail, "node-10")
