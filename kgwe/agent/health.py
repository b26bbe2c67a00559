"""GPU health from NVML: read each GPU once per agent period, classify, and hold the verdict with hysteresis.

Three parts, so each can be tested alone:
- `probe` reads one sample per GPU through NVML (the real `pynvml` or the fake); one GPU's NVML error never
  stops the others being read;
- `classify` turns a sample into the faults it shows (pure);
- `HealthTracker` remembers across periods: a GPU turns unhealthy on the first bad sample, and healthy again
  only after `recover_after_periods` clean periods in a row (an XID event counts as bad for
  `xid_hold_periods` periods), so a flapping GPU keeps its node steady.

The rules and the XID list are in docs/gpu-health.md.
"""

from __future__ import annotations

import ctypes
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TypeVar

from kgwe.topology.health import GPUFault
from kgwe.topology.nvml import DeviceHandle, Nvml

log = logging.getLogger(__name__)
_T = TypeVar("_T")

# XIDs the NVIDIA device plugin treats as application errors (the GPU stays healthy): every other XID it
# receives marks the device unhealthy. KGWE follows the same rule (docs/gpu-health.md).
APPLICATION_XIDS = frozenset({13, 31, 43, 45, 68})
# Named for the message; the full list and what each needs is NVIDIA's XID catalogue.
XID_MEANING = {
    48: "double-bit ECC error",
    61: "internal micro-controller breakpoint",
    62: "internal micro-controller halt",
    63: "ECC page retirement or row remapping event",
    64: "ECC page retirement or row remapper recording failure",
    74: "NVLink error",
    79: "GPU has fallen off the bus",
    92: "high single-bit ECC error rate",
    94: "contained ECC error",
    95: "uncontained ECC error",
    119: "GSP RPC timeout",
    120: "GSP error",
}
NVLINK_ERRORS_PER_PERIOD = 100  # CRC/replay counts rising faster than this per period mark the GPU
THERMAL_MASK = 0x40  # nvmlClocksEventReasonHwThermalSlowdown
POWER_BRAKE_MASK = 0x80  # nvmlClocksEventReasonHwPowerBrakeSlowdown


@dataclass(frozen=True)
class GPUSample:
    """What one agent period read from one GPU; None = not supported or not readable this period."""

    index: int
    lost: bool = False
    xids: tuple[int, ...] = ()
    ecc_uncorrected_volatile: int | None = None
    remap_pending: bool = False
    remap_failed: bool = False
    retired_pages_pending: bool = False
    clocks_event_reasons: int = 0
    nvlink_errors: int | None = None  # cumulative CRC + replay over all links


@dataclass(frozen=True)
class Finding:
    reason: str
    message: str


def classify(sample: GPUSample, previous_nvlink_errors: int | None) -> list[Finding]:
    """The faults one sample shows (XID events included; the tracker holds them). Pure."""
    out: list[Finding] = []
    for xid in sample.xids:  # first: the XID says why (79 comes with the GPU lost)
        if xid not in APPLICATION_XIDS:
            meaning = XID_MEANING.get(xid, "critical XID error")
            out.append(Finding(f"XID{xid}", f"XID {xid}: {meaning}"))
    if sample.lost:
        out.append(Finding("GPULost", "NVML: GPU is lost (fallen off the bus); the node needs a GPU reset"))
    if sample.ecc_uncorrected_volatile:
        out.append(
            Finding(
                "ECCUncorrectable",
                f"{sample.ecc_uncorrected_volatile} volatile uncorrectable ECC error(s) since the last reset",
            )
        )
    if sample.remap_failed:
        out.append(Finding("RowRemapFailure", "row remapping failed: the GPU needs servicing"))
    elif sample.remap_pending:
        out.append(Finding("RowRemapPending", "row remapping pending: the GPU needs a reset"))
    if sample.retired_pages_pending:
        out.append(Finding("RetiredPagesPending", "page retirement pending: the GPU needs a reset"))
    if sample.clocks_event_reasons & THERMAL_MASK:
        out.append(Finding("ThermalSlowdown", "hardware thermal slowdown is active"))
    if sample.clocks_event_reasons & POWER_BRAKE_MASK:
        out.append(Finding("PowerBrakeSlowdown", "hardware power brake slowdown is active"))
    if sample.nvlink_errors is not None and previous_nvlink_errors is not None:
        rise = sample.nvlink_errors - previous_nvlink_errors
        if rise > NVLINK_ERRORS_PER_PERIOD:
            out.append(Finding("NVLinkErrors", f"NVLink CRC/replay errors rose by {rise} in one period"))
    return out


@dataclass
class _GPUState:
    fault: GPUFault | None = None
    clean_periods: int = 0
    xid_hold: int = 0  # periods an XID still counts as bad
    xid_finding: Finding | None = None
    nvlink_errors: int | None = None


@dataclass(frozen=True)
class Transition:
    """A GPU changed verdict this period (for Events)."""

    index: int
    healthy: bool
    reason: str
    message: str


@dataclass
class HealthTracker:
    """Per-GPU verdicts across periods, with hysteresis."""

    recover_after_periods: int = 3
    xid_hold_periods: int = 10
    _gpus: dict[int, _GPUState] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.recover_after_periods < 1 or self.xid_hold_periods < 1:
            raise ValueError("recovery and XID hold periods must be at least 1")

    def update(self, samples: Iterable[GPUSample], now: datetime | None = None) -> list[Transition]:
        """Fold one period's samples in; returns the GPUs whose verdict changed."""
        when = (now or datetime.now(UTC)).astimezone(UTC).replace(microsecond=0)
        changes: list[Transition] = []
        for sample in samples:
            state = self._gpus.setdefault(sample.index, _GPUState())
            findings = classify(sample, state.nvlink_errors)
            if sample.nvlink_errors is not None:
                state.nvlink_errors = sample.nvlink_errors
            xid = next((f for f in findings if f.reason.startswith("XID")), None)
            if xid is not None:
                state.xid_hold, state.xid_finding = self.xid_hold_periods, xid
            elif state.xid_hold > 0:
                state.xid_hold -= 1
                if state.xid_hold > 0 and state.xid_finding is not None:
                    findings.append(state.xid_finding)
            if findings:
                first = findings[0]
                message = "; ".join(f.message for f in findings)
                state.clean_periods = 0
                if state.fault is None:
                    state.fault = GPUFault(first.reason, message, when)
                    changes.append(Transition(sample.index, False, first.reason, message))
                elif (state.fault.reason, state.fault.message) != (first.reason, message):
                    state.fault = GPUFault(first.reason, message, state.fault.since)
                continue
            state.clean_periods += 1
            if state.fault is not None and state.clean_periods >= self.recover_after_periods:
                old = state.fault
                state.fault = None
                changes.append(
                    Transition(
                        sample.index,
                        True,
                        "GPUHealthy",
                        f"healthy again after {state.clean_periods} clean periods (was {old.reason})",
                    )
                )
        return changes

    def faults(self) -> dict[int, GPUFault]:
        """GPU index -> its fault, for every GPU currently unhealthy."""
        return {i: s.fault for i, s in sorted(self._gpus.items()) if s.fault is not None}


# ---- NVML --------------------------------------------------------------------------------------------
class Probe:
    """Reads GPUSamples through an NVML module (real pynvml or the fake), keeping one XID event set."""

    def __init__(self, nvml: Nvml) -> None:
        self.nvml = nvml
        self._events: object | None = None
        self._registered: set[int] = set()
        self._index_of: dict[object, int] = {}  # handle key -> index, for events of a GPU now lost

    def _handles(self) -> tuple[dict[int, DeviceHandle], set[int]]:
        nvml = self.nvml
        handles: dict[int, DeviceHandle] = {}
        lost: set[int] = set()
        for index in range(nvml.nvmlDeviceGetCount()):
            try:
                handles[index] = nvml.nvmlDeviceGetHandleByIndex(index)
            except nvml.NVMLError as exc:
                if _code(exc) == nvml.NVML_ERROR_GPU_IS_LOST:
                    lost.add(index)
                else:
                    log.warning("GPU%d: no NVML handle: %s", index, exc)
        return handles, lost

    def _register(self, handles: Mapping[int, DeviceHandle]) -> None:
        nvml = self.nvml
        if self._events is None:
            try:
                self._events = nvml.nvmlEventSetCreate()
            except nvml.NVMLError as exc:
                log.warning("no NVML event set, XID events unavailable: %s", exc)
                return
        for index, handle in handles.items():
            if index in self._registered:
                continue
            self._index_of[_handle_key(handle)] = index
            try:
                nvml.nvmlDeviceRegisterEvents(handle, nvml.nvmlEventTypeXidCriticalError, self._events)
                self._registered.add(index)
            except nvml.NVMLError as exc:
                log.warning("GPU%d: XID events not available: %s", index, exc)
                self._registered.add(index)  # do not retry every period

    def _drain_xids(self, handles: Mapping[int, DeviceHandle], limit: int = 256) -> dict[int, list[int]]:
        nvml = self.nvml
        out: dict[int, list[int]] = {}
        if self._events is None:
            return out
        for _ in range(limit):
            try:
                data = nvml.nvmlEventSetWait(self._events, 0)
            except nvml.NVMLError:
                break  # NVML_ERROR_TIMEOUT: nothing pending
            if not data.eventType & nvml.nvmlEventTypeXidCriticalError:
                continue
            index = self._index_of.get(_handle_key(data.device))
            if index is None:
                try:
                    index = int(nvml.nvmlDeviceGetIndex(data.device))
                except nvml.NVMLError:
                    continue
            out.setdefault(index, []).append(int(data.eventData))
        return out

    def sample(self) -> list[GPUSample]:
        """One sample per GPU NVML counts (lost GPUs included)."""
        handles, lost = self._handles()
        self._register(handles)
        xids = self._drain_xids(handles)
        samples = [GPUSample(i, lost=True, xids=tuple(xids.get(i, ()))) for i in sorted(lost)]
        for index, handle in sorted(handles.items()):
            samples.append(self._one(index, handle, tuple(xids.get(index, ()))))
        return sorted(samples, key=lambda s: s.index)

    def _one(self, index: int, handle: DeviceHandle, xids: tuple[int, ...]) -> GPUSample:
        nvml = self.nvml

        def read(what: str, call: Callable[[], _T], default: _T) -> _T:
            try:
                return call()
            except nvml.NVMLError as exc:
                if _code(exc) == nvml.NVML_ERROR_GPU_IS_LOST:
                    raise
                if _code(exc) != nvml.NVML_ERROR_NOT_SUPPORTED:
                    log.warning("GPU%d: reading %s failed: %s", index, what, exc)
                return default

        try:
            ecc = read(
                "ECC",
                lambda: int(
                    nvml.nvmlDeviceGetTotalEccErrors(
                        handle, nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nvml.NVML_VOLATILE_ECC
                    )
                ),
                None,
            )
            no_rows: Sequence[int] = (0, 0, 0, 0)
            remap = read("remapped rows", lambda: nvml.nvmlDeviceGetRemappedRows(handle), no_rows)
            retired = read(
                "retired pages",
                lambda: nvml.nvmlDeviceGetRetiredPagesPendingStatus(handle) == nvml.NVML_FEATURE_ENABLED,
                False,
            )
            reasons = read("clock event reasons", lambda: _clock_reasons(nvml, handle), 0)
            nvlink = read("NVLink errors", lambda: _nvlink_errors(nvml, handle), None)
        except nvml.NVMLError:
            return GPUSample(index, lost=True, xids=xids)
        return GPUSample(
            index,
            xids=xids,
            ecc_uncorrected_volatile=ecc,
            remap_pending=bool(remap[2]),
            remap_failed=bool(remap[3]),
            retired_pages_pending=bool(retired),
            clocks_event_reasons=int(reasons),
            nvlink_errors=nvlink,
        )


def _handle_key(handle: DeviceHandle) -> object:
    """A hashable identity for an NVML device handle: the pointer value of pynvml's c_nvmlDevice_t, or the
    handle itself (the fake's)."""
    if isinstance(handle, ctypes._Pointer):
        return ctypes.cast(handle, ctypes.c_void_p).value
    return handle


def _code(exc: Exception) -> int | None:
    return getattr(exc, "value", None)


def _clock_reasons(nvml: Nvml, handle: DeviceHandle) -> int:
    getter = getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or (
        nvml.nvmlDeviceGetCurrentClocksThrottleReasons
    )
    return int(getter(handle))


def _nvlink_errors(nvml: Nvml, handle: DeviceHandle) -> int | None:
    """CRC + replay counters summed over the GPU's active NVLinks; None without NVLink."""
    total, any_link = 0, False
    for link in range(nvml.NVML_NVLINK_MAX_LINKS):
        try:
            if nvml.nvmlDeviceGetNvLinkState(handle, link) != nvml.NVML_FEATURE_ENABLED:
                continue
            for counter in (nvml.NVML_NVLINK_ERROR_DL_CRC_FLIT, nvml.NVML_NVLINK_ERROR_DL_REPLAY):
                total += int(nvml.nvmlDeviceGetNvLinkErrorCounter(handle, link, counter))
            any_link = True
        except nvml.NVMLError as exc:
            if _code(exc) == nvml.NVML_ERROR_GPU_IS_LOST:
                raise
            break  # NOT_SUPPORTED / INVALID_ARGUMENT: past the last link
    return total if any_link else None
