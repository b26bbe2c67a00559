"""Which devices each pod holds, from the kubelet PodResources API (v1, gRPC on the kubelet's socket).

Only `List` is needed. Its messages are the protobuf code generated from kgwe/agent/proto/podresources.proto
at build time (hack/protos.py): device-plugin devices (`devices`) and Dynamic Resource Allocation devices
(`dynamic_resources`, one entry per allocated device of each ResourceClaim).
"""

from __future__ import annotations

from dataclasses import dataclass

from google.protobuf.message import DecodeError

from kgwe.agent.proto.podresources_pb2 import ListPodResourcesRequest, ListPodResourcesResponse
from kgwe.errors import KgweError
from kgwe.vocab import NVIDIA_RESOURCE_PREFIX

DEFAULT_SOCKET = "/var/lib/kubelet/pod-resources/kubelet.sock"
LIST_METHOD = "/v1.PodResourcesLister/List"


@dataclass(frozen=True)
class DeviceHolding:
    """One container's devices of one resource: a device plugin's (e.g. nvidia.com/gpu -> GPU UUIDs), or
    a DRA driver's (resource = the driver, e.g. gpu.nvidia.com -> its device names, with the claim)."""

    namespace: str
    pod: str
    container: str
    resource: str
    device_ids: tuple[str, ...]
    claim: str = ""  # "namespace/name" of the ResourceClaim, for a DRA device
    pool: str = ""  # the DRA driver's pool (usually the node) the device belongs to


def encode_list_response(holdings: list[DeviceHolding]) -> bytes:
    """Serialize a ListPodResourcesResponse (used by tests and the demo's stand-in kubelet)."""
    response = ListPodResourcesResponse()
    pods: dict[tuple[str, str], dict[str, list[DeviceHolding]]] = {}
    for h in holdings:
        pods.setdefault((h.namespace, h.pod), {}).setdefault(h.container, []).append(h)
    for (namespace, pod), containers in pods.items():
        entry = response.pod_resources.add(name=pod, namespace=namespace)
        for container, held in containers.items():
            resources = entry.containers.add(name=container)
            for h in held:
                if not h.claim:
                    resources.devices.add(resource_name=h.resource, device_ids=h.device_ids)
                    continue
                claim_namespace, _, claim_name = h.claim.rpartition("/")
                dynamic = resources.dynamic_resources.add(
                    claim_name=claim_name, claim_namespace=claim_namespace
                )
                for device in h.device_ids:
                    dynamic.claim_resources.add(driver_name=h.resource, pool_name=h.pool, device_name=device)
    return response.SerializeToString()


def decode_list_response(data: bytes) -> list[DeviceHolding]:
    """Parse a ListPodResourcesResponse; fields KGWE does not read (cpu_ids, memory, ...) are skipped."""
    try:
        response = ListPodResourcesResponse.FromString(data)
    except DecodeError as exc:
        raise KgweError(f"kubelet PodResources answer is malformed: {exc}") from None
    out: list[DeviceHolding] = []
    for pod in response.pod_resources:
        for c in pod.containers:
            out += [
                DeviceHolding(pod.namespace, pod.name, c.name, d.resource_name, tuple(d.device_ids))
                for d in c.devices
            ]
            out += [
                DeviceHolding(
                    pod.namespace,
                    pod.name,
                    c.name,
                    r.driver_name,
                    (r.device_name,),
                    claim=f"{claim.claim_namespace}/{claim.claim_name}",
                    pool=r.pool_name,
                )
                for claim in c.dynamic_resources
                for r in claim.claim_resources
            ]
    return out


def list_pod_resources(
    socket_path: str = DEFAULT_SOCKET, timeout_seconds: float = 5.0
) -> list[DeviceHolding]:
    """Ask the kubelet which devices each container holds (gRPC over its unix socket)."""
    try:
        import grpc
    except ImportError:  # pragma: no cover - grpcio is a dependency
        raise KgweError("grpcio is not installed; cannot read the kubelet PodResources API") from None
    target = socket_path if socket_path.startswith("unix:") else f"unix://{socket_path}"
    with grpc.insecure_channel(target) as channel:
        call = channel.unary_unary(
            LIST_METHOD,
            request_serializer=ListPodResourcesRequest.SerializeToString,
            response_deserializer=lambda raw: raw,  # decoded below, with its own error
        )
        try:
            raw = call(ListPodResourcesRequest(), timeout=timeout_seconds)
        except grpc.RpcError as exc:
            raise KgweError(f"kubelet PodResources API at {socket_path} failed: {exc.code().name}") from None
    return decode_list_response(raw)


def gpu_holders(holdings: list[DeviceHolding], uuid_to_index: dict[str, int]) -> dict[int, str]:
    """GPU index -> "namespace/pod" for every whole GPU a pod holds (nvidia.com/* resources by UUID)."""
    out: dict[int, str] = {}
    for h in holdings:
        if not h.resource.startswith(NVIDIA_RESOURCE_PREFIX):
            continue
        for device in h.device_ids:
            index = uuid_to_index.get(device.split("::")[0])  # time-sliced replicas are "<uuid>::<n>"
            if index is not None:
                out[index] = f"{h.namespace}/{h.pod}"
    return out
