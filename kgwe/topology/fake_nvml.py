"""A stand-in for the `pynvml` module that replays a known topology (the only GPU fake KGWE allows).

It answers the same nvidia-ml-py calls the real discovery makes, with the same types: ctypes structures
and arrays from pynvml itself (`nvmlPciInfo_t` with bytes `busId`, `c_ulonglong` affinity words, caller-
allocated placement arrays filled through `byref` counts), pynvml's constants (including the
`NVML_P2P_CAPS_INDEX_READ = (0,)` tuple) and pynvml's exception classes. On NVSwitch systems every NVLink
ends at a switch (remote device type SWITCH, remote PCI id of the switch), as on a real DGX/HGX.

Quirks can be switched on to exercise the discovery's handling of them: a GPU lost from the bus, NVLinks
down (fabric manager not running), NVSwitches invisible in a VM, MIG instances and a pending MIG change.

Faults can be injected to exercise the agent's health checks (docs/gpu-health.md), from the `faults`
argument, the environment variable KGWE_FAKE_NVML_FAULTS, or the file named by KGWE_FAKE_NVML_FAULTS_FILE
(re-read on every call, so a test can inject and clear faults while the agent runs). The syntax is entries
separated by `,` or `;` or newlines, each `GPU:KIND[=VALUE][@SECONDS]` (SECONDS after the FakeNvml was
created):

  xid=N           one XID event (nvmlEventTypeXidCriticalError) on that GPU
  ecc=N           N volatile uncorrectable ECC errors (nvmlDeviceGetTotalEccErrors)
  remap-pending   a row remapping pending (nvmlDeviceGetRemappedRows isPending)
  remap-failure   a row remapping failed (failureOccurred)
  retired-pending retired pages pending (nvmlDeviceGetRetiredPagesPendingStatus)
  thermal         HW thermal slowdown in nvmlDeviceGetCurrentClocksEventReasons
  power-brake     HW power brake slowdown
  nvlink=N        every NVLink's CRC/replay counters rise by N per read
  lost            every call on that GPU fails with NVML_ERROR_GPU_IS_LOST (fallen off the bus)

e.g. KGWE_FAKE_NVML_FAULTS="3:xid=79@10,3:lost@10,1:ecc=2".
"""

from __future__ import annotations

import ctypes
import os
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict, Unpack, cast

import pynvml

from kgwe.topology import known
from kgwe.topology.model import GPU, PCIE_LEVELS, NodeTopology
from kgwe.topology.nvml import DeviceHandle, GpuInstanceInfo, MemoryInfo, PciInfo, ProfileInfo

if TYPE_CHECKING:
    from kgwe.gpu.catalog import GPUModel, MigProfile

_NVLINK_VERSION_BY_GPU = (
    ("P100", 1),
    ("V100", 2),
    ("A100", 4),
    ("H100", 6),
    ("H200", 6),
    ("B200", 7),
    ("GB200", 7),
)
_PCIE_GEN_BY_GBPS = {12.0: 3, 24.0: 4, 48.0: 5, 96.0: 6}
_SWITCH_DOMAIN = 8  # remote PCI domain of NVSwitch links, as GH NVIDIA/go-nvml#166 shows on A100
_BASE_PROFILE_INDEX = {1: 0x0, 2: 0x1, 3: 0x2, 4: 0x3, 7: 0x4, 8: 0x5, 6: 0x6}
# The driver FakeNvml (and the kwok GPU nodes' GFD labels) claim, and the CUDA version that driver reports.
DRIVER_VERSION = "570.133.20"
CUDA_DRIVER_VERSION = "12.8"


def _err(code: int) -> pynvml.NVMLError:
    return pynvml.NVMLError(code)


def _cpu_list(text: str) -> list[int]:
    cpus: list[int] = []
    for part in filter(None, text.split(",")):
        lo, _, hi = part.partition("-")
        cpus.extend(range(int(lo), int(hi or lo) + 1))
    return cpus


def _bus_fields(bus_id: str) -> tuple[int, int, int]:
    dom, bus, devfn = bus_id.split(":")
    return int(dom, 16), int(bus, 16), int(devfn.split(".")[0], 16)


FAULTS_ENV = "KGWE_FAKE_NVML_FAULTS"
FAULTS_FILE_ENV = "KGWE_FAKE_NVML_FAULTS_FILE"
FAULT_KINDS = (
    "xid",
    "ecc",
    "remap-pending",
    "remap-failure",
    "retired-pending",
    "thermal",
    "power-brake",
    "nvlink",
    "lost",
)
_MAX_FAULT_TEXT = 64 * 1024


@dataclass(frozen=True)
class Fault:
    """One injected fault: on GPU `gpu`, `kind` (with `value`) from `after_seconds` on."""

    gpu: int
    kind: str
    value: int = 1
    after_seconds: float = 0.0


def parse_faults(text: str) -> list[Fault]:
    """`GPU:KIND[=VALUE][@SECONDS]` entries separated by `,` `;` or newlines; ValueError names a bad one."""
    if len(text) > _MAX_FAULT_TEXT:
        raise ValueError(f"fault list longer than {_MAX_FAULT_TEXT} characters")
    faults: list[Fault] = []
    for raw in text.replace(";", ",").replace("\n", ",").split(","):
        entry = raw.strip()
        if not entry or entry.startswith("#"):
            continue
        try:
            gpu, _, rest = entry.partition(":")
            rest, _, after = rest.partition("@")
            kind, _, value = rest.partition("=")
            fault = Fault(int(gpu), kind.strip(), int(value) if value else 1, float(after) if after else 0.0)
        except ValueError:
            raise ValueError(f"fault {entry!r}: expected GPU:KIND[=VALUE][@SECONDS]") from None
        if fault.kind not in FAULT_KINDS:
            raise ValueError(f"fault {entry!r}: kind {fault.kind!r} is not one of {', '.join(FAULT_KINDS)}")
        faults.append(fault)
    return faults


@dataclass(frozen=True)
class _EventData:
    """What nvmlEventSetWait returns: the fields of pynvml's c_nvmlEventData_t."""

    device: DeviceHandle
    eventType: int
    eventData: int
    gpuInstanceId: int = 0xFFFFFFFF
    computeInstanceId: int = 0xFFFFFFFF


@dataclass(frozen=True)
class _Handle:
    """Opaque device handle, like pynvml's c_nvmlDevice_t."""

    index: int


class Quirks(TypedDict, total=False):
    """FakeNvml's faults and quirks, as for_known passes them on (mypy checks the two agree)."""

    lost: Iterable[int]
    nvlink_down: bool
    hidden_switches: bool
    mig: Mapping[int, Iterable[tuple[str, int]]] | None
    mig_pending: Iterable[int]
    no_driver: bool
    faults: Iterable[Fault] | None
    clock: Callable[[], float]


def _out_count(ref: object) -> ctypes.c_uint:
    """The c_uint an NVML call writes a count into (passed by ctypes.byref, or as is)."""
    target = getattr(ref, "_obj", ref)
    if not isinstance(target, ctypes.c_uint):
        raise ctypes.ArgumentError("count: wrong type")
    return target


class FakeNvml:
    """Use where `pynvml` would be used: `discover(FakeNvml.for_known("DGX-A100"))`.

    Attribute lookups it does not define (constants, structures, errors) come from pynvml itself.
    """

    def __init__(
        self,
        topo: NodeTopology,
        *,
        nvswitches: int = 0,
        lost: Iterable[int] = (),
        nvlink_down: bool = False,
        hidden_switches: bool = False,
        mig: Mapping[int, Iterable[tuple[str, int]]] | None = None,
        mig_pending: Iterable[int] = (),
        no_driver: bool = False,
        faults: Iterable[Fault] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._topo = topo
        self._faults = list(faults) if faults is not None else None
        self._clock = clock
        self._born = clock()
        self._delivered: set[Fault] = set()  # XID events already handed out
        self._event_sets: dict[int, set[int]] = {}  # id(event set) -> registered GPU indices
        self._nvlink_reads: dict[tuple[int, int, int], int] = {}
        self._lost = frozenset(lost)
        self._nvlink_down = nvlink_down
        self._hidden_switches = hidden_switches
        self._no_driver = no_driver
        self._mig = {int(k): list(v) for k, v in (mig or {}).items()}
        self._mig_pending = frozenset(mig_pending)
        self._initialized = 0  # NVML counts nvmlInit calls; each nvmlShutdown undoes one
        self._switches = max(nvswitches, 1 if any(g.nvswitch_links for g in topo.gpus) else 0)
        self._links = [self._link_table(pos) for pos in range(topo.size)]
        self._instances: dict[
            int, tuple[int, int, int, int]
        ] = {}  # addressof -> (gpu, id, profile id, start)
        self._instance_objects: list[Any] = []

    @classmethod
    def for_known(cls, name: str, **quirks: Unpack[Quirks]) -> FakeNvml:
        """Replay the known topology `name` (see kgwe.topology.known)."""
        meta = known.facts(name)
        return cls(known.load(name), nvswitches=int(meta.get("nvswitches", "0").split()[0]), **quirks)

    def __getattr__(self, name: str) -> Any:  # Any: pynvml's constants and structures, untyped
        return getattr(pynvml, name)

    # --- internals -------------------------------------------------------------------------------------
    def _link_table(self, pos: int) -> list[tuple[str, int]]:
        """(remote bus id, remote device type) per NVLink of the GPU at `pos`."""
        topo = self._topo
        links: list[tuple[str, int]] = []
        for other in range(topo.size):
            links += [(topo.gpus[other].pci_bus_id, pynvml.NVML_NVLINK_DEVICE_TYPE_GPU)] * topo.nvlinks[pos][
                other
            ]
        for k in range(topo.gpus[pos].nvswitch_links):
            switch = k % self._switches
            links.append((f"{_SWITCH_DOMAIN:08X}:{switch:02X}:00.0", pynvml.NVML_NVLINK_DEVICE_TYPE_SWITCH))
        return links

    def _pos(self, handle: DeviceHandle) -> int:
        if not self._initialized:
            raise _err(pynvml.NVML_ERROR_UNINITIALIZED)
        if not isinstance(handle, _Handle):
            raise ctypes.ArgumentError("argument 1: wrong type")
        if self._active(handle.index, "lost"):
            raise _err(pynvml.NVML_ERROR_GPU_IS_LOST)
        return self._topo.position(handle.index)

    def active_faults(self) -> list[Fault]:
        """The injected faults whose time has come (argument, else the file, else the environment)."""
        if self._faults is not None:
            faults = self._faults
        elif path := os.environ.get(FAULTS_FILE_ENV):
            try:
                faults = parse_faults(Path(path).read_text()[:_MAX_FAULT_TEXT])
            except (OSError, ValueError):
                faults = []  # a missing or half-written file injects nothing this call
        else:
            faults = parse_faults(os.environ.get(FAULTS_ENV, ""))
        now = self._clock() - self._born
        return [f for f in faults if f.after_seconds <= now]

    def _active(self, gpu: int, kind: str) -> list[Fault]:
        return [f for f in self.active_faults() if f.gpu == gpu and f.kind == kind]

    def _gpu(self, handle: DeviceHandle) -> GPU:
        return self._topo.gpus[self._pos(handle)]

    def _model(self, handle: DeviceHandle) -> GPUModel | None:
        from kgwe.gpu import catalog

        matches = catalog.models_matching(self._gpu(handle).name)
        return matches[0] if matches and matches[0].mig_capable else None

    def _profiles(self, handle: DeviceHandle) -> list[tuple[int, int, MigProfile]]:
        """(NVML profile index, profile id, MigProfile) for the GPU's MIG profiles."""
        model = self._model(handle)
        if model is None:
            return []
        out: list[tuple[int, int, MigProfile]] = []
        for pid, profile in enumerate(model.profiles.values()):
            name = profile.name
            if "+me" in name:
                index = 0x7 if profile.compute_slices == 1 else 0x8
            elif "+gfx" in name:
                index = {1: 0xA, 2: 0xB, 4: 0xC, 3: 0x11}.get(profile.compute_slices, 0x11)
            elif "-me" in name:
                index = 0xD if profile.compute_slices == 1 else 0xE
            elif profile.compute_slices == 1 and profile.memory_slices == 2:
                index = 0x9
            else:
                index = _BASE_PROFILE_INDEX.get(profile.compute_slices, 0x6)
            if index not in {i for i, _, _ in out}:
                out.append((index, pid, profile))
        return out

    # --- pynvml API ----------------------------------------------------------------------------------
    def nvmlInit(self) -> None:
        if self._no_driver:
            raise _err(pynvml.NVML_ERROR_DRIVER_NOT_LOADED)
        self._initialized += 1

    nvmlInitWithFlags = nvmlInit

    def nvmlShutdown(self) -> None:
        if not self._initialized:
            raise _err(pynvml.NVML_ERROR_UNINITIALIZED)
        self._initialized -= 1

    def nvmlSystemGetDriverVersion(self) -> str:
        return DRIVER_VERSION

    def nvmlDeviceGetCount(self) -> int:
        if not self._initialized:
            raise _err(pynvml.NVML_ERROR_UNINITIALIZED)
        return max(g.index for g in self._topo.gpus) + 1

    def nvmlDeviceGetHandleByIndex(self, index: int) -> DeviceHandle:
        if not self._initialized:
            raise _err(pynvml.NVML_ERROR_UNINITIALIZED)
        if index in self._lost or self._active(index, "lost"):
            raise _err(pynvml.NVML_ERROR_GPU_IS_LOST)
        self._topo.position(index)
        return DeviceHandle(_Handle(index))

    def nvmlDeviceGetName(self, handle: DeviceHandle) -> str:
        return self._gpu(handle).name

    def nvmlDeviceGetUUID(self, handle: DeviceHandle) -> str:
        return self._gpu(handle).uuid

    def nvmlDeviceGetPciInfo(self, handle: DeviceHandle) -> PciInfo:
        return self._pci_info(self._gpu(handle).pci_bus_id)

    @staticmethod
    def _pci_info(bus_id: str) -> PciInfo:
        info = pynvml.nvmlPciInfo_t()
        dom, bus, dev = _bus_fields(bus_id)
        info.domain, info.bus, info.device = dom, bus, dev
        info.busId = bus_id.encode()
        info.busIdLegacy = f"{dom:04X}:{bus:02X}:{dev:02X}.0".encode()  # the 4-digit-domain form
        info.pciDeviceId = 0x10DE
        return cast(PciInfo, info)  # a pynvml structure (untyped)

    def nvmlDeviceGetMemoryInfo(self, handle: DeviceHandle, version: int | None = None) -> MemoryInfo:
        mem = pynvml.c_nvmlMemory_t()
        mem.total = self._gpu(handle).memory_mib * 1024 * 1024
        mem.free = mem.total
        return cast(MemoryInfo, mem)  # a pynvml structure (untyped)

    def nvmlDeviceGetCpuAffinity(
        self, handle: DeviceHandle, cpuSetSize: int
    ) -> ctypes.Array[ctypes.c_ulonglong]:
        words = (ctypes.c_ulonglong * cpuSetSize)()
        for cpu in _cpu_list(self._gpu(handle).cpu_affinity):
            if cpu // 64 < cpuSetSize:
                words[cpu // 64] |= 1 << (cpu % 64)
        return words

    def nvmlDeviceGetCpuAffinityWithinScope(
        self, handle: DeviceHandle, cpuSetSize: int, scope: int
    ) -> ctypes.Array[ctypes.c_ulonglong]:
        return self.nvmlDeviceGetCpuAffinity(handle, cpuSetSize)

    def nvmlDeviceGetMemoryAffinity(
        self, handle: DeviceHandle, nodeSetSize: int, scope: int
    ) -> ctypes.Array[ctypes.c_ulonglong]:
        words = (ctypes.c_ulonglong * nodeSetSize)()
        numa = self._gpu(handle).numa_node
        if numa is not None and numa // 64 < nodeSetSize:
            words[numa // 64] |= 1 << (numa % 64)
        return words

    def nvmlDeviceGetNumaNodeId(self, handle: DeviceHandle) -> int:
        gpu = self._gpu(handle)
        if gpu.gpu_numa_id is not None:
            return gpu.gpu_numa_id
        return gpu.numa_node if gpu.numa_node is not None else -1

    def nvmlDeviceGetTopologyCommonAncestor(self, device1: DeviceHandle, device2: DeviceHandle) -> int:
        a, b = self._pos(device1), self._pos(device2)
        if a == b:
            return int(pynvml.NVML_TOPOLOGY_INTERNAL)
        return PCIE_LEVELS[self._topo.pcie[a][b]]

    def nvmlDeviceGetP2PStatus(self, device1: DeviceHandle, device2: DeviceHandle, p2pIndex: object) -> int:
        if not isinstance(p2pIndex, int):  # what ctypes does with pynvml's `NVML_P2P_CAPS_INDEX_READ = 0,`
            raise ctypes.ArgumentError(
                "argument 3: <class 'TypeError'>: Don't know how to convert parameter 3"
            )
        a, b = self._pos(device1), self._pos(device2)
        if (a, b) in self._topo.no_p2p or (b, a) in self._topo.no_p2p:
            return int(pynvml.NVML_P2P_STATUS_GPU_NOT_SUPPORTED)
        return int(pynvml.NVML_P2P_STATUS_OK)

    def _link(self, handle: DeviceHandle, link: int) -> tuple[str, int]:
        links = self._links[self._pos(handle)]
        if not 0 <= link < pynvml.NVML_NVLINK_MAX_LINKS:
            raise _err(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        if link >= len(links):
            raise _err(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return links[link]

    def nvmlDeviceGetNvLinkState(self, device: DeviceHandle, link: int) -> int:
        self._link(device, link)
        return int(pynvml.NVML_FEATURE_DISABLED if self._nvlink_down else pynvml.NVML_FEATURE_ENABLED)

    def nvmlDeviceGetNvLinkVersion(self, device: DeviceHandle, link: int) -> int:
        self._link(device, link)
        name = self._gpu(device).name.upper()
        return next((v for key, v in _NVLINK_VERSION_BY_GPU if key in name), 4)

    def nvmlDeviceGetNvLinkRemotePciInfo(self, device: DeviceHandle, link: int) -> PciInfo:
        bus_id, kind = self._link(device, link)
        if kind == pynvml.NVML_NVLINK_DEVICE_TYPE_SWITCH and self._hidden_switches:
            return self._pci_info("FFFFFFFF:FF:1F.0")
        return self._pci_info(bus_id)

    def nvmlDeviceGetNvLinkRemoteDeviceType(self, handle: DeviceHandle, link: int) -> int:
        _, kind = self._link(handle, link)
        if kind == pynvml.NVML_NVLINK_DEVICE_TYPE_SWITCH and self._hidden_switches:
            return int(pynvml.NVML_NVLINK_DEVICE_TYPE_UNKNOWN)
        return kind

    def nvmlDeviceGetMaxPcieLinkGeneration(self, handle: DeviceHandle) -> int:
        self._pos(handle)
        return _PCIE_GEN_BY_GBPS.get(self._topo.rates.pcie_gbps, 4)

    nvmlDeviceGetCurrPcieLinkGeneration = nvmlDeviceGetMaxPcieLinkGeneration

    def nvmlDeviceGetMigMode(self, device: DeviceHandle) -> list[int]:
        if self._model(device) is None:
            raise _err(pynvml.NVML_ERROR_NOT_SUPPORTED)
        index = self._gpu(device).index
        current = int(index in self._mig)
        pending = 1 - current if index in self._mig_pending else current
        return [current, pending]

    def nvmlDeviceGetGpuInstanceProfileInfo(
        self, device: DeviceHandle, profile: int, version: int = 2
    ) -> ProfileInfo:
        for index, pid, mig_profile in self._profiles(device):
            if index == profile:
                info = pynvml.c_nvmlGpuInstanceProfileInfo_v2_t()
                info.id = pid
                info.sliceCount = mig_profile.compute_slices
                info.instanceCount = mig_profile.max_count
                info.memorySizeMB = mig_profile.memory_mib
                info.name = f"MIG {mig_profile.name}".encode()
                return cast(ProfileInfo, info)  # a pynvml structure (untyped)
        if self._model(device) is None:
            raise _err(pynvml.NVML_ERROR_NOT_SUPPORTED)
        raise _err(pynvml.NVML_ERROR_INVALID_ARGUMENT)

    def _profile_by_id(self, device: DeviceHandle, profile_id: int) -> MigProfile:
        for _, pid, mig_profile in self._profiles(device):
            if pid == profile_id:
                return mig_profile
        raise _err(pynvml.NVML_ERROR_INVALID_ARGUMENT)

    def nvmlDeviceGetGpuInstancePossiblePlacements(
        self,
        device: DeviceHandle,
        profileId: int,
        placementsRef: ctypes.Array[ctypes.Structure] | None,
        countRef: object,
    ) -> int:
        placements = self._profile_by_id(device, profileId).placements
        count = _out_count(countRef)
        if placementsRef is None or len(placementsRef) < len(placements):
            count.value = len(placements)
            raise _err(pynvml.NVML_ERROR_INSUFFICIENT_SIZE)
        for k, (start, size) in enumerate(placements):
            placementsRef[k].start, placementsRef[k].size = start, size
        count.value = len(placements)
        return int(pynvml.NVML_SUCCESS)

    def nvmlDeviceGetGpuInstances(
        self,
        device: DeviceHandle,
        profileId: int,
        gpuInstancesRef: ctypes.Array[ctypes._Pointer[ctypes.Structure]],
        countRef: object,
    ) -> int:
        profile = self._profile_by_id(device, profileId)
        gpu_index = self._gpu(device).index
        count = _out_count(countRef)
        found = 0
        for gi_id, (name, start) in enumerate(self._mig.get(gpu_index, ()), start=1):
            if name != profile.name:
                continue
            obj = pynvml.struct_c_nvmlGpuInstance_t()
            self._instance_objects.append(obj)
            self._instances[ctypes.addressof(obj)] = (gpu_index, gi_id, profileId, start)
            gpuInstancesRef[found] = ctypes.pointer(obj)
            found += 1
        count.value = found
        return int(pynvml.NVML_SUCCESS)

    def nvmlGpuInstanceGetInfo(self, gpuInstance: object) -> GpuInstanceInfo:
        if not isinstance(gpuInstance, ctypes._Pointer):
            raise ctypes.ArgumentError("argument 1: wrong type")
        gpu_index, gi_id, profile_id, start = self._instances[ctypes.addressof(gpuInstance.contents)]
        info = pynvml.c_nvmlGpuInstanceInfo_t()
        info.id = gi_id
        info.profileId = profile_id
        info.placement.start = start
        info.placement.size = self._profile_by_id(DeviceHandle(_Handle(gpu_index)), profile_id).memory_slices
        return cast(GpuInstanceInfo, info)  # a pynvml structure (untyped)

    # --- health (what `kgwe agent` reads each period) --------------------------------------------------
    def nvmlDeviceGetIndex(self, handle: DeviceHandle) -> int:
        return self._gpu(handle).index

    def nvmlEventSetCreate(self) -> object:
        event_set = object()
        self._event_sets[id(event_set)] = set()
        return event_set

    def nvmlDeviceRegisterEvents(self, handle: DeviceHandle, eventTypes: int, eventSet: object) -> None:
        index = self._gpu(handle).index
        if id(eventSet) not in self._event_sets:
            raise _err(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        if eventTypes & pynvml.nvmlEventTypeXidCriticalError:
            self._event_sets[id(eventSet)].add(index)

    def nvmlDeviceGetSupportedEventTypes(self, handle: DeviceHandle) -> int:
        self._pos(handle)
        return int(pynvml.nvmlEventTypeXidCriticalError)

    def nvmlEventSetWait_v2(self, eventSet: object, timeoutms: int) -> _EventData:
        """The next XID event of a registered GPU; NVML_ERROR_TIMEOUT (without waiting) when none."""
        registered = self._event_sets.get(id(eventSet))
        if registered is None:
            raise _err(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        for fault in self.active_faults():
            if fault.kind == "xid" and fault.gpu in registered and fault not in self._delivered:
                self._delivered.add(fault)
                return _EventData(
                    DeviceHandle(_Handle(fault.gpu)), pynvml.nvmlEventTypeXidCriticalError, fault.value
                )
        raise _err(pynvml.NVML_ERROR_TIMEOUT)

    nvmlEventSetWait = nvmlEventSetWait_v2

    def nvmlEventSetFree(self, eventSet: object) -> None:
        self._event_sets.pop(id(eventSet), None)

    def nvmlDeviceGetTotalEccErrors(self, handle: DeviceHandle, errorType: int, counterType: int) -> int:
        index = self._gpu(handle).index
        if errorType != pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED:
            return 0
        return sum(f.value for f in self._active(index, "ecc"))

    def nvmlDeviceGetRemappedRows(self, handle: DeviceHandle) -> tuple[int, int, int, int]:
        """(correctable rows, uncorrectable rows, isPending, failureOccurred), as pynvml returns them."""
        index = self._gpu(handle).index
        model = self._gpu(handle).name.upper()
        if not any(k in model for k in ("A100", "H100", "H200", "B200", "A30")):
            raise _err(pynvml.NVML_ERROR_NOT_SUPPORTED)
        pending, failed = (
            bool(self._active(index, "remap-pending")),
            bool(self._active(index, "remap-failure")),
        )
        return 0, int(pending or failed), int(pending), int(failed)

    def nvmlDeviceGetRetiredPagesPendingStatus(self, device: DeviceHandle) -> int:
        index = self._gpu(device).index
        pending = self._active(index, "retired-pending")
        return int(pynvml.NVML_FEATURE_ENABLED if pending else pynvml.NVML_FEATURE_DISABLED)

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: DeviceHandle) -> int:
        index = self._gpu(handle).index
        reasons = int(pynvml.nvmlClocksEventReasonGpuIdle)
        if self._active(index, "thermal"):
            reasons |= pynvml.nvmlClocksEventReasonHwThermalSlowdown
        if self._active(index, "power-brake"):
            reasons |= pynvml.nvmlClocksEventReasonHwPowerBrakeSlowdown
        return reasons

    nvmlDeviceGetCurrentClocksThrottleReasons = nvmlDeviceGetCurrentClocksEventReasons

    def nvmlDeviceGetNvLinkErrorCounter(self, device: DeviceHandle, link: int, counter: int) -> int:
        """Cumulative per-link error counters; an `nvlink=N` fault makes them rise by N per read."""
        self._link(device, link)
        index = self._gpu(device).index
        rise = sum(f.value for f in self._active(index, "nvlink"))
        key = (index, link, counter)
        self._nvlink_reads[key] = self._nvlink_reads.get(key, 0) + rise
        return self._nvlink_reads[key]
