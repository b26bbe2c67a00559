"""Which devices each pod holds, from the kubelet PodResources API (v1, gRPC on the kubelet's socket).

Only `List` is needed, and its messages are small, so they are encoded/decoded here directly in protobuf
wire format instead of generating stubs (field numbers from k8s.io/kubelet/pkg/apis/podresources/v1
api.proto):

  ListPodResourcesResponse { repeated PodResources pod_resources = 1; }
  PodResources             { string name = 1; string namespace = 2;
                             repeated ContainerResources containers = 3; }
  ContainerResources       { string name = 1; repeated ContainerDevices devices = 2; ... }
  ContainerDevices         { string resource_name = 1; repeated string device_ids = 2; ... }
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from kgwe.errors import KgweError
from kgwe.vocab import NVIDIA_RESOURCE_PREFIX

DEFAULT_SOCKET = "/var/lib/kubelet/pod-resources/kubelet.sock"
LIST_METHOD = "/v1.PodResourcesLister/List"


@dataclass(frozen=True)
class DeviceHolding:
    """One container's devices of one resource (e.g. nvidia.com/gpu -> GPU UUIDs)."""

    namespace: str
    pod: str
    container: str
    resource: str
    device_ids: tuple[str, ...]


# --- protobuf wire format (only what these messages use) ------------------------------------------------
def _varint(data: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(data):
            raise ValueError("truncated varint")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7


def _fields(data: bytes) -> Iterator[tuple[int, bytes | int]]:
    """(field number, value) for each field; length-delimited values as bytes, varints as int."""
    pos = 0
    while pos < len(data):
        key, pos = _varint(data, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(data, pos)
            yield number, value
        elif wire == 2:
            length, pos = _varint(data, pos)
            if pos + length > len(data):
                raise ValueError("truncated field")
            yield number, data[pos : pos + length]
            pos += length
        elif wire == 1:
            pos += 8
        elif wire == 5:
            pos += 4
        else:
            raise ValueError(f"unsupported wire type {wire}")


def _encode_varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    return _encode_varint(number << 3 | 2) + _encode_varint(len(payload)) + payload


def encode_list_response(holdings: list[DeviceHolding]) -> bytes:
    """Serialize a ListPodResourcesResponse (used by tests and the demo's stand-in kubelet)."""
    pods: dict[tuple[str, str], dict[str, list[DeviceHolding]]] = {}
    for h in holdings:
        pods.setdefault((h.namespace, h.pod), {}).setdefault(h.container, []).append(h)
    out = b""
    for (namespace, pod), containers in pods.items():
        body = _field(1, pod.encode()) + _field(2, namespace.encode())
        for container, devs in containers.items():
            cbody = _field(1, container.encode())
            for d in devs:
                dbody = _field(1, d.resource.encode()) + b"".join(_field(2, i.encode()) for i in d.device_ids)
                cbody += _field(2, dbody)
            body += _field(3, cbody)
        out += _field(1, body)
    return out


def decode_list_response(data: bytes) -> list[DeviceHolding]:
    """Parse a ListPodResourcesResponse; unknown fields (cpu_ids, memory, DRA) are skipped."""
    out: list[DeviceHolding] = []
    try:
        for number, pod in _fields(data):
            if number != 1 or not isinstance(pod, bytes):
                continue
            name = namespace = ""
            containers: list[bytes] = []
            for n, v in _fields(pod):
                if n == 1 and isinstance(v, bytes):
                    name = v.decode()
                elif n == 2 and isinstance(v, bytes):
                    namespace = v.decode()
                elif n == 3 and isinstance(v, bytes):
                    containers.append(v)
            for c in containers:
                container = ""
                devices: list[bytes] = []
                for n, v in _fields(c):
                    if n == 1 and isinstance(v, bytes):
                        container = v.decode()
                    elif n == 2 and isinstance(v, bytes):
                        devices.append(v)
                for d in devices:
                    resource = ""
                    ids: list[str] = []
                    for n, v in _fields(d):
                        if n == 1 and isinstance(v, bytes):
                            resource = v.decode()
                        elif n == 2 and isinstance(v, bytes):
                            ids.append(v.decode())
                    out.append(DeviceHolding(namespace, name, container, resource, tuple(ids)))
    except (ValueError, UnicodeDecodeError) as exc:
        raise KgweError(f"kubelet PodResources answer is malformed: {exc}") from None
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
            request_serializer=lambda _: b"",
            response_deserializer=lambda raw: raw,
        )
        try:
            raw = call(None, timeout=timeout_seconds)
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
