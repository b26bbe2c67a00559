"""Stand-in for the GPU Operator's MIG manager, following its node-label protocol (docs/facts/mig.md §6).

On a real cluster the `nvidia-mig-manager` DaemonSet watches its node's `nvidia.com/mig.config` label, looks
the name up in the mig-parted ConfigMap, and reports through `nvidia.com/mig.config.state`: `failed` when the
config is not valid for the node, else `pending` while it pauses the GPU operands and repartitions, then
`success`; the device plugin then advertises the new `nvidia.com/mig-<profile>` resources. This stand-in does
the same through the API against simulated nodes, so KGWE code that drives MIG changes (and its tests) works
unchanged on a real cluster. The only fake part is the hardware: the geometry check uses the catalog
(kgwe.gpu) instead of NVML, "applying" is a configurable delay (per node and config: a real apply takes
tens of seconds to minutes), and tests can make a node's GPUs fail to apply.

Like the real one (an informer whose update handler compares the old and new label value), it acts only
when a node's `nvidia.com/mig.config` value changes, or on its first sight of the node (the informer's add)
— which `restart` repeats for one node, as deleting its nvidia-mig-manager pod would.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from kgwe.errors import KgweError
from kgwe.gpu import catalog, layouts
from kgwe.localcluster.gpunodes import (
    KWOK_NODE_SELECTOR,
    OPERAND_DEPLOY_LABELS,
    MigLayout,
    gpu_resources,
)
from kgwe.localcluster.watching import watch_loop
from kgwe.policy.yaml_source import YamlSyntaxError, load_one
from kgwe.runtime.errors import is_not_found
from kgwe.vocab import (
    GPU_COUNT_LABEL,
    GPU_OPERATOR_NAMESPACE,
    GPU_PRODUCT_LABEL,
    MIG_CONFIG_LABEL,
    MIG_DEVICES_KEY,
    MIG_ENABLED_KEY,
    MIG_MANAGER_DEPLOY_LABEL,
    MIG_RESOURCE_PREFIX,
    MIG_STATE_LABEL,
    MIG_STRATEGY_LABEL,
)

log = logging.getLogger(__name__)

PAUSED_VALUE = "paused-for-mig-change"


class InvalidMigConfig(KgweError):
    """The selected mig-parted config cannot be applied to this node (state `failed`)."""


def _device_filter_matches(entry: Mapping[str, Any], model: catalog.GPUModel) -> bool:
    wanted = entry.get("device-filter")
    if wanted is None:
        return True
    wanted_ids = {wanted.lower()} if isinstance(wanted, str) else {str(w).lower() for w in wanted}
    return bool(wanted_ids & {pci.lower() for pci in model.pci_device_ids})


def plan_layout(
    mig_configs: Mapping[str, Any],
    config_name: str,
    model: catalog.GPUModel,
    gpu_count: int,
    current: MigLayout,
) -> list[Sequence[str] | None]:
    """Per-GPU layout after applying `config_name` (mig-parted semantics); InvalidMigConfig if it cannot be.

    GPUs no entry selects keep their current layout, as mig-parted leaves unselected devices alone.
    """
    entries = mig_configs.get(config_name)
    if not entries:
        raise InvalidMigConfig(f"mig-parted config {config_name!r} not found")
    result: list[Sequence[str] | None] = list(current)
    for entry in entries:
        if not _device_filter_matches(entry, model):
            continue
        devices = entry.get("devices")
        if devices == "all":
            indices = list(range(gpu_count))
        elif isinstance(devices, list) and all(isinstance(i, int) for i in devices):
            indices = devices
        else:
            raise InvalidMigConfig(f"{config_name}: 'devices' must be 'all' or a list of GPU indices")
        if any(i < 0 or i >= gpu_count for i in indices):
            raise InvalidMigConfig(f"{config_name}: device index out of range for {gpu_count} GPUs")
        enabled = entry.get(MIG_ENABLED_KEY)
        if not isinstance(enabled, bool):
            raise InvalidMigConfig(f"{config_name}: 'mig-enabled' must be true or false")
        mig_devices = entry.get(MIG_DEVICES_KEY) or {}
        if not enabled:
            if mig_devices:
                raise InvalidMigConfig(f"{config_name}: 'mig-devices' must be empty when MIG is disabled")
            for i in indices:
                result[i] = None
            continue
        if not model.mig_capable:
            raise InvalidMigConfig(f"{config_name}: {model.key} GPUs are not MIG capable")
        names = [p for p, n in sorted(mig_devices.items()) for _ in range(int(n))]
        try:
            fitted = layouts.fit(model, names)
        except KgweError as exc:  # unknown profile for this model
            raise InvalidMigConfig(f"{config_name}: {exc}") from None
        if fitted is None:
            raise InvalidMigConfig(f"{config_name}: {dict(mig_devices)} does not fit on one {model.key}")
        for i in indices:
            result[i] = tuple(names)
    return result


class MigManagerStandIn:
    """Watches MIG-managed nodes and applies `nvidia.com/mig.config` changes after `delay_seconds` (a number,
    or a function of node and config name giving each apply's duration). Nodes in `failing` report `failed`
    after the delay, as a GPU that refuses the new geometry would."""

    def __init__(
        self,
        api_client: client.ApiClient,
        *,
        delay_seconds: float | Callable[[str, str], float] = 1.0,
        config_namespace: str = GPU_OPERATOR_NAMESPACE,
        config_map: str = "default-mig-parted-config",
        config_key: str = "config.yaml",
        node_selector: str = f"{MIG_MANAGER_DEPLOY_LABEL}=true,{KWOK_NODE_SELECTOR}",
    ) -> None:
        self._core = client.CoreV1Api(api_client)
        self.delay_seconds = delay_seconds
        self.config_namespace = config_namespace
        self.config_map = config_map
        self.config_key = config_key
        self.node_selector = node_selector
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="mig-manager")
        self._lock = threading.Lock()
        self._applied: dict[str, str] = {}  # node -> config name the (fake) GPUs are in
        self._layouts: dict[str, list[Sequence[str] | None]] = {}
        self._busy: set[str] = set()
        self._again: set[str] = set()
        self._seen: dict[str, str | None] = {}  # node -> the label value the watch saw last
        self.failing: set[str] = set()
        self.applies: list[tuple[str, str]] = []  # (node, config) for every apply started, in order

    def __enter__(self) -> MigManagerStandIn:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        self._thread = threading.Thread(
            target=watch_loop,
            args=(self._core.list_node, self._on_node, self._stop),
            kwargs={"label_selector": self.node_selector},
            name="mig-manager-standin",
            daemon=True,
        )
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        self._pool.shutdown(wait=True, cancel_futures=True)

    # ---- event handling ---------------------------------------------------------------------------
    def restart(self, name: str) -> None:
        """Act on the node's current label as a freshly started MIG manager does (e.g. after a person fixed
        the node and deleted its nvidia-mig-manager pod)."""
        self._trigger(name)

    def _on_node(self, event_type: str, node: client.V1Node) -> None:
        name = node.metadata.name
        labels = node.metadata.labels or {}
        if event_type == "DELETED":
            with self._lock:
                self._applied.pop(name, None)
                self._layouts.pop(name, None)
                self._seen.pop(name, None)
            return
        wanted = labels.get(MIG_CONFIG_LABEL)
        with self._lock:
            first = name not in self._seen
            changed = self._seen.get(name) != wanted
            self._seen[name] = wanted
            if wanted is None or not (first or changed):
                return
            if first and labels.get(MIG_STATE_LABEL) == "success":
                # First sight of a node that already reports success: its GPUs are in that config.
                self._applied[name] = wanted
                return
        self._trigger(name)

    def _trigger(self, name: str) -> None:
        with self._lock:
            if name in self._busy:
                self._again.add(name)
                return
            self._busy.add(name)
        try:
            self._pool.submit(self._run, name)
        except RuntimeError:  # shutting down
            with self._lock:
                self._busy.discard(name)

    def _run(self, name: str) -> None:
        try:
            while not self._stop.is_set():
                self._reconfigure(name)
                with self._lock:
                    if name not in self._again:
                        break
                    self._again.discard(name)
        except Exception as exc:
            if not self._stop.is_set():
                log.warning("MIG manager stand-in failed on %s: %r", name, exc)
        finally:
            with self._lock:
                self._busy.discard(name)

    # ---- the protocol -----------------------------------------------------------------------------
    def _reconfigure(self, name: str) -> None:
        try:
            node = self._core.read_node(name)
        except ApiException as exc:
            if is_not_found(exc):
                return
            raise
        labels = node.metadata.labels or {}
        wanted = labels.get(MIG_CONFIG_LABEL)
        if wanted is None:
            return
        with self._lock:
            already = self._applied.get(name) == wanted
        if already:  # `assert` says applied: success without touching anything
            self._set_labels(name, {MIG_STATE_LABEL: "success"})
            return
        try:
            layout = self._plan(node, wanted)
        except InvalidMigConfig as exc:
            log.info("MIG manager stand-in: %s: %s", name, exc)
            self._set_labels(name, {MIG_STATE_LABEL: "failed"})
            return

        # Operands are paused for the change (values `false` stay `false`), restored to `true` after.
        paused = {k: PAUSED_VALUE for k in OPERAND_DEPLOY_LABELS if labels.get(k) == "true"}
        with self._lock:
            self.applies.append((name, wanted))
        self._set_labels(name, {MIG_STATE_LABEL: "pending", **paused})
        delay = self.delay_seconds(name, wanted) if callable(self.delay_seconds) else self.delay_seconds
        if self._stop.wait(delay):
            return
        if name in self.failing:  # the apply went wrong on the GPUs: operands back, state failed
            log.info("MIG manager stand-in: %s: simulated failure applying %s", name, wanted)
            self._set_labels(name, {**{k: "true" for k in paused}, MIG_STATE_LABEL: "failed"})
            return
        strategy = labels.get(MIG_STRATEGY_LABEL, "mixed")
        resources = gpu_resources(len(layout), layout, strategy)
        allocatable = (node.status.allocatable or {}) if node.status else {}
        patch: dict[str, Any] = {k: None for k in allocatable if k.startswith(MIG_RESOURCE_PREFIX)}
        patch.update({k: str(v) for k, v in resources.items()})
        self._core.patch_node_status(name, {"status": {"allocatable": patch, "capacity": patch}})
        with self._lock:
            self._applied[name] = wanted
            self._layouts[name] = layout
        self._set_labels(name, {**{k: "true" for k in paused}, MIG_STATE_LABEL: "success"})

    def _plan(self, node: client.V1Node, config_name: str) -> list[Sequence[str] | None]:
        labels = node.metadata.labels or {}
        model = catalog.model_for_product(labels.get(GPU_PRODUCT_LABEL, ""))
        if model is None:
            raise InvalidMigConfig(f"unknown GPU product {labels.get(GPU_PRODUCT_LABEL)!r}")
        try:
            gpu_count = int(labels.get(GPU_COUNT_LABEL, "0"))
        except ValueError:
            raise InvalidMigConfig(f"{GPU_COUNT_LABEL} is not a number") from None
        configs = self._mig_configs()
        with self._lock:
            current = self._layouts.get(node.metadata.name) or [None] * gpu_count
        return plan_layout(configs, config_name, model, gpu_count, current)

    def _mig_configs(self) -> Mapping[str, Any]:
        try:
            cm = self._core.read_namespaced_config_map(self.config_map, self.config_namespace)
        except ApiException as exc:
            if is_not_found(exc):
                raise InvalidMigConfig(
                    f"ConfigMap {self.config_namespace}/{self.config_map} not found"
                ) from None
            raise
        try:
            doc = load_one((cm.data or {}).get(self.config_key, "")) or {}
        except YamlSyntaxError as exc:
            raise InvalidMigConfig(f"{self.config_map}/{self.config_key} is not YAML: {exc}") from None
        configs = doc.get("mig-configs") if isinstance(doc, dict) else None
        if not isinstance(doc, dict) or not isinstance(configs, dict) or doc.get("version") != "v1":
            raise InvalidMigConfig(f"{self.config_map}/{self.config_key} is not a mig-parted v1 config")
        return configs

    def _set_labels(self, name: str, labels: Mapping[str, str]) -> None:
        self._core.patch_node(name, {"metadata": {"labels": dict(labels)}})
