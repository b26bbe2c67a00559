"""The node annotation round-trips every known topology and stays compact."""

from __future__ import annotations

import dataclasses

import orjson
import pytest

from kgwe.errors import KgweError
from kgwe.topology import annotation, known
from kgwe.topology.model import MigDevice


@pytest.mark.parametrize("name", known.names())
def test_round_trip(name):
    topo = known.load(name)
    text = annotation.encode(topo)
    back = annotation.decode(text)
    assert back == topo
    assert back.bandwidth_gbps == topo.bandwidth_gbps
    assert back.key == topo.key
    assert annotation.encode(back) == text


def test_sixteen_gpus_fit_in_16_kib_with_mig_devices():
    topo = known.load("DGX-2")
    assert topo.size == 16
    gpus = tuple(
        dataclasses.replace(
            g, mig_enabled=True, mig_devices=tuple(MigDevice("1g.5gb", s, 1) for s in range(7))
        )
        for g in topo.gpus
    )
    busy = dataclasses.replace(topo, gpus=gpus, no_p2p=frozenset({(0, 9)}))
    text = annotation.encode(busy)
    assert len(text.encode()) <= annotation.MAX_BYTES
    back = annotation.decode(text)
    assert back == busy and back.gpus[3].mig_devices[6] == MigDevice("1g.5gb", 6, 1)
    assert back.bandwidth_gbps[0][9] == back.bandwidth_gbps[0][1]  # fabric NVLink is unaffected by P2P


@pytest.mark.parametrize(
    "text, message",
    [
        ("{not json", "not valid JSON"),
        ("[]", "must be a JSON object"),
        ('{"v": 99}', "unsupported version 99"),
        ('{"v": 1, "name": "x", "r": [25, 24, 16], "g": []}', "malformed"),
    ],
)
def test_bad_annotations_raise_clear_errors(text, message):
    with pytest.raises(KgweError, match=message):
        annotation.decode(text)


def test_wrong_pair_count_is_malformed():
    doc = orjson.loads(annotation.encode(known.load("DGX-A100")))
    doc["pcie"] = doc["pcie"][:-1]
    with pytest.raises(KgweError, match="malformed"):
        annotation.decode(orjson.dumps(doc).decode())
