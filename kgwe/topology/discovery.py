"""NVML discovery: ask the driver (through nvidia-ml-py, or the fake that replays a known matrix) what GPUs
a node has and how they are connected, and build the NodeTopology the agent publishes.

The `nvml` argument is the `pynvml` module or a `FakeNvml`; nothing else differs. NVML quirks handled here
(docs/facts/topology.md §3.2, §4):
- NVLink: every index 0..NVML_NVLINK_MAX_LINKS-1 is tried; NOT_SUPPORTED / INVALID_ARGUMENT mean "no such
  link" and are skipped (not the end of the list); inactive links are skipped and counted.
- A link's far end is matched by PCI domain/bus/device, not by string: the remote `busId` and the device's
  `busId` may differ in domain width or case.
- NVSwitch systems: links end at switches, never at the peer GPU (go-gpuallocator's TODO). Links whose
  remote type is SWITCH count into the fabric; so do links to an unknown device that is not one of our
  GPUs (NVSwitches invisible in a VM, GH NVIDIA/nccl#1182).
- `NVML_P2P_CAPS_INDEX_READ` is the tuple `(0,)` in nvidia-ml-py 13.615.71: normalised before use.
- Strings may come back as bytes (PCI busId always does): decoded.
- A GPU lost from the bus (Xid 79) fails its handle, or any later call with NVML_ERROR_GPU_IS_LOST: it is
  left out with a warning instead of failing the whole discovery (GH NVIDIA/k8s-device-plugin#2038).
- CPU affinity is an array of 64-bit words (CPU = 64*word + bit); the NUMA node comes from the memory
  affinity (what nvidia-smi prints), and `nvmlDeviceGetNumaNodeId` is kept only where it differs, i.e.
  where GPU memory is its own NUMA node (Grace); negative ids mean unknown.
- MIG mode is `[current, pending]`: a pending change is reported as a warning.
- NVLinks present but all down on an SXM board usually means the fabric manager is not running.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from dataclasses import dataclass, field

from kgwe.errors import KgweError
from kgwe.topology.model import GPU, LEVEL_BY_NVML, MigDevice, NodeTopology, Rates
from kgwe.topology.nvml import DeviceHandle, Nvml

NVLINK_GBPS_BY_VERSION = {1: 20.0, 2: 25.0, 3: 25.0, 4: 25.0, 5: 25.0, 6: 25.0, 7: 50.0, 8: 50.0}
PCIE_GBPS_BY_GEN = {1: 3.0, 2: 6.0, 3: 12.0, 4: 24.0, 5: 48.0, 6: 96.0}
_CPU_WORDS = 32  # 2048 CPUs
_NUMA_WORDS = 4


class NoDriverError(KgweError):
    """No usable NVIDIA driver / NVML library on this machine."""

    exit_code = 3


@dataclass
class Discovery:
    """What the agent found: the topology plus what does not belong in the annotation."""

    topology: NodeTopology
    driver_version: str
    mig_profiles: dict[int, dict[str, tuple[tuple[int, int], ...]]] = field(default_factory=dict)
    mig_pending: dict[int, bool] = field(default_factory=dict)
    inactive_links: dict[int, int] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)


def _text(value: object) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes | bytearray) else str(value)


def bus_key(bus_id: object) -> tuple[int, int, int] | None:
    """(domain, bus, device) of a PCI bus id in any width/case, e.g. "00000000:07:00.0" or "0000:07:00.0"."""
    text = _text(bus_id).strip()
    try:
        dom, bus, devfn = text.split(":")
        return int(dom, 16), int(bus, 16), int(devfn.split(".")[0], 16)
    except ValueError:
        return None


def cpu_ranges(words: Iterable[int]) -> str:
    """Compress an affinity bitmask (64-bit words) into "0-19,40-59"."""
    cpus = [64 * w + b for w, word in enumerate(words) for b in range(64) if int(word) >> b & 1]
    parts: list[str] = []
    start: int | None = None
    prev: int | None = None
    for cpu in [*cpus, None]:
        if start is not None and prev is not None and (cpu is None or cpu != prev + 1):
            parts.append(str(start) if start == prev else f"{start}-{prev}")
            start = None
        if cpu is not None and start is None:
            start = cpu
        prev = cpu
    return ",".join(parts)


def _first_bit(words: Iterable[int]) -> int | None:
    for w, word in enumerate(words):
        word = int(word)
        if word:
            return 64 * w + (word & -word).bit_length() - 1
    return None


def p2p_read_index(nvml: Nvml) -> int:
    """NVML_P2P_CAPS_INDEX_READ as an int (nvidia-ml-py 13.615.71 defines it as the tuple `(0,)`)."""
    value = getattr(nvml, "NVML_P2P_CAPS_INDEX_READ", 0)
    return int(value[0] if isinstance(value, tuple) else value)


def discover(nvml: Nvml, name: str | None = None, sys_gbps: float = 16.0) -> Discovery:
    """Run discovery. Raises NoDriverError (one line, no traceback) when NVML cannot start."""
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as exc:
        raise NoDriverError(f"no NVIDIA driver: NVML failed to initialise ({exc})") from None
    except OSError as exc:  # e.g. libnvidia-ml.so present but unloadable
        raise NoDriverError(f"no NVIDIA driver: {exc}") from None
    try:
        return _discover(nvml, name, sys_gbps)
    finally:
        with contextlib.suppress(nvml.NVMLError):
            nvml.nvmlShutdown()


def _discover(nvml: Nvml, name: str | None, sys_gbps: float) -> Discovery:
    NVMLError = nvml.NVMLError
    warnings: list[str] = []
    driver = _text(nvml.nvmlSystemGetDriverVersion())
    handles: list[tuple[int, DeviceHandle]] = []
    for index in range(nvml.nvmlDeviceGetCount()):
        try:
            handles.append((index, nvml.nvmlDeviceGetHandleByIndex(index)))
        except NVMLError as exc:
            warnings.append(
                f"GPU{index} left out: {exc} (lost from the bus or failed; check dmesg for Xid 79)"
            )
    gpus: list[GPU] = []
    mig_profiles: dict[int, dict[str, tuple[tuple[int, int], ...]]] = {}
    mig_pending: dict[int, bool] = {}
    described: list[tuple[int, DeviceHandle]] = []
    for index, h in handles:
        try:
            gpu, profiles, pending = _describe_gpu(nvml, index, h, warnings)
        except NVMLError as exc:
            if getattr(exc, "value", None) != nvml.NVML_ERROR_GPU_IS_LOST:
                raise
            # Lost between its handle and its description (NVIDIA's mock trips a lost GPU on the first
            # such call, as a GPU falling off the bus mid-discovery does): left out like a lost handle.
            warnings.append(f"GPU{index} left out: {exc} (lost from the bus; check dmesg for Xid 79)")
            continue
        described.append((index, h))
        gpus.append(gpu)
        if profiles:
            mig_profiles[index] = profiles
        if pending is not None:
            mig_pending[index] = pending
    handles = described
    n = len(gpus)
    pos_by_bus = {bus_key(g.pci_bus_id): p for p, g in enumerate(gpus)}
    direct = [[0] * n for _ in range(n)]
    switch_links = [0] * n
    inactive: dict[int, int] = {}
    versions: set[int] = set()
    for p, (index, h) in enumerate(handles):
        for link in range(int(nvml.NVML_NVLINK_MAX_LINKS)):
            try:
                state = nvml.nvmlDeviceGetNvLinkState(h, link)
            except NVMLError:
                continue  # NOT_SUPPORTED / INVALID_ARGUMENT: no such link on this GPU
            if state != nvml.NVML_FEATURE_ENABLED:
                inactive[index] = inactive.get(index, 0) + 1
                continue
            with contextlib.suppress(NVMLError):
                versions.add(int(nvml.nvmlDeviceGetNvLinkVersion(h, link)))
            try:
                remote_type = int(nvml.nvmlDeviceGetNvLinkRemoteDeviceType(h, link))
            except NVMLError:
                remote_type = None  # older drivers: decide by the remote PCI id alone
            try:
                remote = bus_key(nvml.nvmlDeviceGetNvLinkRemotePciInfo(h, link).busId)
            except NVMLError:
                remote = None
            peer = pos_by_bus.get(remote)
            if peer is not None and peer != p and remote_type in (None, nvml.NVML_NVLINK_DEVICE_TYPE_GPU):
                direct[p][peer] += 1
            elif remote_type == nvml.NVML_NVLINK_DEVICE_TYPE_GPU:
                warnings.append(f"GPU{index} NVLink {link} ends at a GPU that is not visible ({remote})")
            elif remote_type == getattr(nvml, "NVML_NVLINK_DEVICE_TYPE_IBMNPU", 1):
                continue  # a CPU link (POWER9), not GPU-to-GPU bandwidth
            else:
                switch_links[p] += 1
    for i in range(n):
        for j in range(i + 1, n):
            if direct[i][j] != direct[j][i]:
                warnings.append(
                    f"GPU{gpus[i].index}->GPU{gpus[j].index} has {direct[i][j]} NVLinks but the reverse has "
                    f"{direct[j][i]}; using the smaller"
                )
                direct[i][j] = direct[j][i] = min(direct[i][j], direct[j][i])
    if inactive and not any(switch_links) and not any(map(any, direct)):
        warnings.append(
            "NVLinks are present but all down (is nvidia-fabricmanager running?); pairs fall back to PCIe"
        )
    pcie = [["X"] * n for _ in range(n)]
    no_p2p: set[tuple[int, int]] = set()
    read = p2p_read_index(nvml)
    ancestor_failed = False
    for i in range(n):
        for j in range(i + 1, n):
            hi, hj = handles[i][1], handles[j][1]
            try:
                level = LEVEL_BY_NVML.get(int(nvml.nvmlDeviceGetTopologyCommonAncestor(hi, hj)), "SYS")
            except NVMLError:
                level, ancestor_failed = "SYS", True
            pcie[i][j] = pcie[j][i] = level
            try:
                if int(nvml.nvmlDeviceGetP2PStatus(hi, hj, read)) != nvml.NVML_P2P_STATUS_OK:
                    no_p2p.add((i, j))
            except NVMLError:
                pass
    if ancestor_failed:
        warnings.append("NVML could not tell the PCIe level of some GPU pairs (Linux only); assumed SYS")
    gpus = [_with_switch_links(g, switch_links[p]) for p, g in enumerate(gpus)]
    nvlink_gbps = min((NVLINK_GBPS_BY_VERSION.get(v, 25.0) for v in versions), default=0.0)
    pcie_gbps = _pcie_gbps(nvml, handles)
    topo = NodeTopology(
        name=name or (f"{n}x {gpus[0].name}" if gpus else "no GPUs"),
        gpus=tuple(gpus),
        nvlinks=tuple(tuple(r) for r in direct),
        pcie=tuple(tuple(r) for r in pcie),
        rates=Rates(nvlink_gbps_per_link=nvlink_gbps, pcie_gbps=pcie_gbps, sys_gbps=sys_gbps),
        no_p2p=frozenset(no_p2p),
    )
    return Discovery(
        topology=topo,
        driver_version=driver,
        mig_profiles=mig_profiles,
        mig_pending=mig_pending,
        inactive_links=inactive,
        warnings=warnings,
    )


def _with_switch_links(gpu: GPU, links: int) -> GPU:
    from dataclasses import replace

    return replace(gpu, nvswitch_links=links) if links != gpu.nvswitch_links else gpu


def _pcie_gbps(nvml: Nvml, handles: list[tuple[int, DeviceHandle]]) -> float:
    gens = []
    for _, h in handles:
        with contextlib.suppress(nvml.NVMLError):
            gens.append(int(nvml.nvmlDeviceGetMaxPcieLinkGeneration(h)))
    return PCIE_GBPS_BY_GEN.get(min(gens), 24.0) if gens else 24.0


def _describe_gpu(
    nvml: Nvml, index: int, h: DeviceHandle, warnings: list[str]
) -> tuple[GPU, dict[str, tuple[tuple[int, int], ...]], bool | None]:
    NVMLError = nvml.NVMLError
    name = _text(nvml.nvmlDeviceGetName(h))
    uuid = _text(nvml.nvmlDeviceGetUUID(h))
    bus_id = _text(nvml.nvmlDeviceGetPciInfo(h).busId)
    memory_mib = int(nvml.nvmlDeviceGetMemoryInfo(h).total) // (1024 * 1024)
    try:
        cpus = cpu_ranges(nvml.nvmlDeviceGetCpuAffinity(h, _CPU_WORDS))
    except NVMLError:
        cpus = ""
    numa: int | None = None
    with contextlib.suppress(NVMLError):
        numa = _first_bit(nvml.nvmlDeviceGetMemoryAffinity(h, _NUMA_WORDS, nvml.NVML_AFFINITY_SCOPE_NODE))
    gpu_numa: int | None = None
    with contextlib.suppress(NVMLError):
        value = int(nvml.nvmlDeviceGetNumaNodeId(h))
        if value >= 0:
            if numa is None:
                numa = value
            elif value != numa:
                gpu_numa = value  # GPU memory is its own NUMA node (Grace)
    mig_enabled = False
    pending: bool | None = None
    profiles: dict[str, tuple[tuple[int, int], ...]] = {}
    devices: list[MigDevice] = []
    current: int | None
    pend: int | None
    try:
        current, pend = (int(x) for x in nvml.nvmlDeviceGetMigMode(h))
    except NVMLError:
        current = pend = None  # not MIG capable
    if current is not None:
        mig_enabled = current == nvml.NVML_DEVICE_MIG_ENABLE
        pending = pend != current
        if pending:
            warnings.append(
                f"GPU{index}: MIG mode change to {'on' if pend else 'off'} is pending a GPU reset"
            )
        profiles, devices = _mig_details(nvml, h, mig_enabled)
    gpu = GPU(
        index=index,
        uuid=uuid,
        pci_bus_id=bus_id,
        name=name,
        memory_mib=memory_mib,
        numa_node=numa,
        cpu_affinity=cpus,
        mig_enabled=mig_enabled,
        gpu_numa_id=gpu_numa,
        mig_devices=tuple(sorted(devices, key=lambda d: (d.start, d.profile))),
    )
    return gpu, profiles, pending


def _mig_details(
    nvml: Nvml, h: DeviceHandle, mig_enabled: bool
) -> tuple[dict[str, tuple[tuple[int, int], ...]], list[MigDevice]]:
    """Profiles with the placements the driver reports, and the GPU instances that exist now."""
    import ctypes

    NVMLError = nvml.NVMLError
    profiles: dict[str, tuple[tuple[int, int], ...]] = {}
    devices: list[MigDevice] = []
    for profile_index in range(int(nvml.NVML_GPU_INSTANCE_PROFILE_COUNT)):
        try:
            info = nvml.nvmlDeviceGetGpuInstanceProfileInfo(h, profile_index)
        except NVMLError:
            continue  # this GPU has no such profile
        profile = _text(info.name).removeprefix("MIG ").strip()
        size = max(int(info.instanceCount), 1) * 8
        placements = (nvml.c_nvmlGpuInstancePlacement_t * size)()
        count = ctypes.c_uint(0)
        try:
            nvml.nvmlDeviceGetGpuInstancePossiblePlacements(h, info.id, placements, ctypes.byref(count))
            profiles[profile] = tuple((int(p.start), int(p.size)) for p in placements[: count.value])
        except NVMLError:
            profiles[profile] = ()
        if not mig_enabled:
            continue
        instances = (nvml.c_nvmlGpuInstance_t * size)()
        count = ctypes.c_uint(0)
        try:
            nvml.nvmlDeviceGetGpuInstances(h, info.id, instances, ctypes.byref(count))
        except NVMLError:
            continue
        for k in range(count.value):
            gi = nvml.nvmlGpuInstanceGetInfo(instances[k])
            devices.append(MigDevice(profile, int(gi.placement.start), int(gi.placement.size)))
    return profiles, devices
