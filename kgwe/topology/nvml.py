"""The part of NVML that KGWE calls (discovery, the agent's health probe), as a Protocol: what the `pynvml`
module offers (nvidia-ml-py ships no types, so the module passes unchecked) and what FakeNvml implements
(checked against it). Only what KGWE reads of each NVML structure is named."""

from __future__ import annotations

import ctypes
from collections.abc import Iterable, Sequence
from typing import NewType, Protocol

# An opaque device handle: pynvml's c_nvmlDevice_t, or the fake's; only NVML calls look inside.
DeviceHandle = NewType("DeviceHandle", object)


class PciInfo(Protocol):
    busId: bytes | str


class MemoryInfo(Protocol):
    total: int


class ProfileInfo(Protocol):
    """nvmlDeviceGetGpuInstanceProfileInfo's c_nvmlGpuInstanceProfileInfo_v2_t."""

    id: int
    instanceCount: int
    name: bytes | str


class Placement(Protocol):
    start: int
    size: int


class GpuInstanceInfo(Protocol):
    placement: Placement


class EventData(Protocol):
    """nvmlEventSetWait's c_nvmlEventData_t (read only)."""

    @property
    def device(self) -> DeviceHandle: ...

    @property
    def eventType(self) -> int: ...

    @property
    def eventData(self) -> int: ...


class Nvml(Protocol):
    """The NVML calls and constants discovery and the health probe use (positional, as pynvml takes them)."""

    NVMLError: type[Exception]
    NVML_ERROR_GPU_IS_LOST: int
    NVML_ERROR_NOT_SUPPORTED: int
    NVML_FEATURE_ENABLED: int
    NVML_NVLINK_MAX_LINKS: int
    NVML_NVLINK_DEVICE_TYPE_GPU: int
    NVML_NVLINK_ERROR_DL_CRC_FLIT: int
    NVML_NVLINK_ERROR_DL_REPLAY: int
    NVML_P2P_STATUS_OK: int
    NVML_AFFINITY_SCOPE_NODE: int
    NVML_DEVICE_MIG_ENABLE: int
    NVML_GPU_INSTANCE_PROFILE_COUNT: int
    NVML_MEMORY_ERROR_TYPE_UNCORRECTED: int
    NVML_VOLATILE_ECC: int
    nvmlEventTypeXidCriticalError: int
    c_nvmlGpuInstancePlacement_t: type[ctypes.Structure]
    c_nvmlGpuInstance_t: type[ctypes._Pointer[ctypes.Structure]]  # a pointer to an opaque GPU instance

    def nvmlInit(self) -> object: ...

    def nvmlShutdown(self) -> object: ...

    def nvmlSystemGetDriverVersion(self) -> bytes | str: ...

    def nvmlDeviceGetCount(self) -> int: ...

    def nvmlDeviceGetHandleByIndex(self, index: int, /) -> DeviceHandle: ...

    def nvmlDeviceGetIndex(self, handle: DeviceHandle, /) -> int: ...

    def nvmlDeviceGetName(self, handle: DeviceHandle, /) -> bytes | str: ...

    def nvmlDeviceGetUUID(self, handle: DeviceHandle, /) -> bytes | str: ...

    def nvmlDeviceGetPciInfo(self, handle: DeviceHandle, /) -> PciInfo: ...

    def nvmlDeviceGetMemoryInfo(self, handle: DeviceHandle, /) -> MemoryInfo: ...

    def nvmlDeviceGetCpuAffinity(self, handle: DeviceHandle, words: int, /) -> Iterable[int]: ...

    def nvmlDeviceGetMemoryAffinity(
        self, handle: DeviceHandle, words: int, scope: int, /
    ) -> Iterable[int]: ...

    def nvmlDeviceGetNumaNodeId(self, handle: DeviceHandle, /) -> int: ...

    def nvmlDeviceGetTopologyCommonAncestor(self, first: DeviceHandle, second: DeviceHandle, /) -> int: ...

    def nvmlDeviceGetP2PStatus(self, first: DeviceHandle, second: DeviceHandle, index: int, /) -> int: ...

    def nvmlDeviceGetMaxPcieLinkGeneration(self, handle: DeviceHandle, /) -> int: ...

    def nvmlDeviceGetNvLinkState(self, handle: DeviceHandle, link: int, /) -> int: ...

    def nvmlDeviceGetNvLinkVersion(self, handle: DeviceHandle, link: int, /) -> int: ...

    def nvmlDeviceGetNvLinkRemotePciInfo(self, handle: DeviceHandle, link: int, /) -> PciInfo: ...

    def nvmlDeviceGetNvLinkRemoteDeviceType(self, handle: DeviceHandle, link: int, /) -> int: ...

    def nvmlDeviceGetNvLinkErrorCounter(self, handle: DeviceHandle, link: int, counter: int, /) -> int: ...

    def nvmlDeviceGetMigMode(self, handle: DeviceHandle, /) -> Sequence[int]: ...

    def nvmlDeviceGetGpuInstanceProfileInfo(self, handle: DeviceHandle, profile: int, /) -> ProfileInfo: ...

    def nvmlDeviceGetGpuInstancePossiblePlacements(
        self,
        handle: DeviceHandle,
        profile_id: int,
        placements: ctypes.Array[ctypes.Structure],
        count: object,
        /,
    ) -> object: ...

    def nvmlDeviceGetGpuInstances(
        self,
        handle: DeviceHandle,
        profile_id: int,
        instances: ctypes.Array[ctypes._Pointer[ctypes.Structure]],
        count: object,
        /,
    ) -> object: ...

    def nvmlGpuInstanceGetInfo(self, instance: object, /) -> GpuInstanceInfo: ...

    def nvmlDeviceGetTotalEccErrors(
        self, handle: DeviceHandle, error_type: int, counter_type: int, /
    ) -> int: ...

    def nvmlDeviceGetRemappedRows(self, handle: DeviceHandle, /) -> Sequence[int]: ...

    def nvmlDeviceGetRetiredPagesPendingStatus(self, handle: DeviceHandle, /) -> int: ...

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, handle: DeviceHandle, /) -> int: ...

    def nvmlEventSetCreate(self) -> object: ...

    def nvmlDeviceRegisterEvents(
        self, handle: DeviceHandle, event_types: int, event_set: object, /
    ) -> object: ...

    def nvmlEventSetWait(self, event_set: object, timeout_ms: int, /) -> EventData: ...
