"""The PodResources client against a real gRPC server on a unix socket (the kubelet's transport)."""

from __future__ import annotations

from concurrent import futures

import grpc
import pytest

from kgwe.agent import podresources
from kgwe.agent.podresources import DeviceHolding
from kgwe.errors import KgweError

HOLDINGS = [
    DeviceHolding("ml", "train-0", "main", "nvidia.com/gpu", ("GPU-aaa", "GPU-bbb")),
    DeviceHolding("ml", "train-0", "main", "example.com/nic", ("eth1",)),
    DeviceHolding("ml", "train-0", "sidecar", "nvidia.com/gpu", ("GPU-ccc::2",)),
    DeviceHolding("web", "infer-1", "srv", "nvidia.com/mig-1g.10gb", ("MIG-xyz",)),
]


@pytest.fixture
def kubelet_socket(tmp_path):
    """A real gRPC server answering v1.PodResourcesLister/List like the kubelet does."""
    seen = []

    def list_handler(request: bytes, context) -> bytes:
        seen.append(request)
        return podresources.encode_list_response(HOLDINGS)

    handler = grpc.method_handlers_generic_handler(
        "v1.PodResourcesLister",
        {"List": grpc.unary_unary_rpc_method_handler(list_handler)},
    )
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=1))
    server.add_generic_rpc_handlers((handler,))
    path = tmp_path / "kubelet.sock"
    server.add_insecure_port(f"unix://{path}")
    server.start()
    yield str(path), seen
    server.stop(grace=None)


def test_list_over_grpc_and_map_to_gpu_indices(kubelet_socket):
    path, seen = kubelet_socket
    got = podresources.list_pod_resources(path)
    assert got == HOLDINGS
    assert seen == [b""]
    holders = podresources.gpu_holders(got, {"GPU-aaa": 0, "GPU-bbb": 3, "GPU-ccc": 5})
    assert holders == {0: "ml/train-0", 3: "ml/train-0", 5: "ml/train-0"}


def _field(number: int, payload: bytes) -> bytes:
    """One length-delimited protobuf field (short payloads): what a newer kubelet may add."""
    return bytes([number << 3 | 2, len(payload)]) + payload


def test_unknown_fields_are_skipped():
    # ContainerResources.cpu_ids (field 3, packed varints) and an unknown varint field in PodResources
    container = _field(1, b"c") + _field(3, b"\x01\x02") + bytes([0x28, 0x07])
    pod = _field(1, b"p") + _field(2, b"ns") + bytes([0x20, 0x01]) + _field(3, container)
    assert podresources.decode_list_response(_field(1, pod)) == []  # no devices, no crash
    assert podresources.decode_list_response(b"") == []


def test_dynamic_resources_are_read_per_device_of_each_claim():
    held = [
        DeviceHolding("ml", "train-0", "main", "nvidia.com/gpu", ("GPU-aaa",)),
        DeviceHolding("ml", "train-0", "main", "gpu.nvidia.com", ("gpu-0",), claim="ml/two-gpus", pool="n1"),
        DeviceHolding("ml", "train-0", "main", "gpu.nvidia.com", ("gpu-1",), claim="ml/two-gpus", pool="n1"),
    ]
    got = podresources.decode_list_response(podresources.encode_list_response(held))
    assert got == held
    assert podresources.gpu_holders(got, {"GPU-aaa": 4}) == {4: "ml/train-0"}  # DRA names are no UUIDs


def test_malformed_answer_and_unreachable_kubelet_are_clear_errors(tmp_path):
    with pytest.raises(KgweError, match="malformed"):
        podresources.decode_list_response(b"\x0a\x05ab")
    with pytest.raises(KgweError, match="PodResources API"):
        podresources.list_pod_resources(str(tmp_path / "nobody.sock"), timeout_seconds=0.5)


def test_agent_reports_which_pod_holds_which_gpu(tmp_path, capsys):
    import orjson

    from kgwe.cli import main
    from kgwe.topology import known

    uuid2, uuid5 = known.synthesized_uuid("HGX-H100", 2), known.synthesized_uuid("HGX-H100", 5)
    holdings = [DeviceHolding("ml", "trainer", "main", "nvidia.com/gpu", (uuid2, uuid5))]
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=1))
    server.add_generic_rpc_handlers(
        (
            grpc.method_handlers_generic_handler(
                "v1.PodResourcesLister",
                {
                    "List": grpc.unary_unary_rpc_method_handler(
                        lambda req, ctx: podresources.encode_list_response(holdings)
                    )
                },
            ),
        )
    )
    path = tmp_path / "kubelet.sock"
    server.add_insecure_port(f"unix://{path}")
    server.start()
    try:
        rc = main(
            [
                "agent",
                "--once",
                "--print",
                "--json",
                "--no-publish",
                "--fake-nvml",
                "HGX-H100",
                "--pod-resources-socket",
                str(path),
            ]
        )
    finally:
        server.stop(grace=None)
    assert rc == 0
    out = orjson.loads(capsys.readouterr().out)
    assert out["gpu_holders"] == {"2": "ml/trainer", "5": "ml/trainer"}
    assert out["holders_note"].startswith("2 GPU(s) held by pods")
