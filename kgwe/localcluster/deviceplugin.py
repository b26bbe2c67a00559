"""Stand-in for the NVIDIA device plugin and GFD under the GPU Operator, following the sharing label protocol.

On a real cluster the device plugin's config-manager sidecar watches its node's
`nvidia.com/device-plugin.config` label, copies that key of the config ConfigMap (or the default key when
the label is absent) into place and restarts the plugin, which then advertises `replicas` schedulable GPUs
per physical GPU (`nvidia.com/gpu`, or `nvidia.com/gpu.shared` when renamed); GFD labels the node
`nvidia.com/gpu.replicas`, `nvidia.com/gpu.sharing-strategy` and appends `-SHARED` to
`nvidia.com/gpu.product` when the resource is shared and not renamed (docs/facts/sharing.md). This stand-in
does the same through the API against simulated nodes, after a configurable delay (the plugin restart).

`parse_config` reads a config with the rules of the plugin's own `api/config/v1` package (v0.20.0, restated
from its source and cited in docs/facts/sharing.md §1) for the stand-in, which runs many times per test. It
is stricter than the plugin in one way: an unknown key is an error (the plugin drops it silently), so a
misspelt field KGWE renders cannot pass unnoticed. `nvidia_loader_reads` runs NVIDIA's own loader (v0.19.0,
the newest release the module proxy serves here) on a config, through the small command under hack/dpconfig.
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
import subprocess
import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from kgwe.errors import KgweError
from kgwe.gpu.products import base_product
from kgwe.localcluster.gpunodes import KWOK_NODE_SELECTOR
from kgwe.localcluster.watching import watch_loop
from kgwe.policy.yaml_source import YamlSyntaxError, load_one
from kgwe.runtime.errors import is_not_found
from kgwe.vocab import (
    DEVICE_PLUGIN_CONFIG_LABEL,
    DEVICE_PLUGIN_CONFIGMAP,
    GPU_COUNT_LABEL,
    GPU_NODE_SELECTOR,
    GPU_OPERATOR_NAMESPACE,
    GPU_PRODUCT_LABEL,
    GPU_REPLICAS_LABEL,
    GPU_RESOURCE,
    GPU_SHARING_STRATEGY_LABEL,
    NVIDIA_RESOURCE_PREFIX,
    SHARED_GPU_RESOURCE,
)

log = logging.getLogger(__name__)

# api/config/v1 field names (json tags) per struct: anything else is refused here.
_CONFIG_KEYS = {"version", "flags", "resources", "sharing", "imex"}
_FLAG_KEYS = {
    "migStrategy",
    "failOnInitError",
    "mpsRoot",
    "nvidiaDriverRoot",
    "nvidiaDevRoot",
    "gdrcopyEnabled",
    "gdsEnabled",
    "mofedEnabled",
    "useNodeFeatureAPI",
    "deviceDiscoveryStrategy",
    "plugin",
    "gfd",
}
_SHARING_KEYS = {"timeSlicing", "mps"}
_REPLICATED_KEYS = {"renameByDefault", "failRequestsGreaterThanOne", "resources"}
_RESOURCE_KEYS = {"name", "rename", "devices", "replicas"}
_MIG_STRATEGIES = ("none", "single", "mixed")
_RESOURCE_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_MAX_RESOURCE_NAME = 63


class InvalidDevicePluginConfig(KgweError):
    """The device plugin would refuse this config (its error text where it has one)."""


def nvidia_loader_reads(text: str) -> dict[str, Any]:
    """The Config NVIDIA's own loader (`api/config/v1.NewConfig`, what `nvidia-device-plugin --config-file`
    runs at start) reads from config `text`, as its JSON; InvalidDevicePluginConfig with the loader's message
    when it refuses the file. Builds hack/dpconfig on first use (Go)."""
    from kgwe.localcluster.gotools import tool_dir

    binary = tool_dir("dpconfig") / "dpconfig"
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", encoding="utf-8") as fh:
        fh.write(text)
        fh.flush()
        done = subprocess.run([str(binary), fh.name], capture_output=True, text=True, check=False, timeout=60)
    if done.returncode != 0:
        raise InvalidDevicePluginConfig(done.stderr.strip().removeprefix(f"{fh.name}: "))
    parsed: dict[str, Any] = json.loads(done.stdout)
    return parsed


@dataclass(frozen=True)
class ReplicatedResource:
    name: str
    replicas: int
    rename: str  # "" when not renamed


@dataclass(frozen=True)
class DevicePluginConfig:
    """What the plugin understood of one config."""

    mig_strategy: str | None
    strategy: str  # GFD's nvidia.com/gpu.sharing-strategy value: none, time-slicing, mps
    rename_by_default: bool = False
    fail_requests_greater_than_one: bool = False
    resources: tuple[ReplicatedResource, ...] = field(default=())

    def replicated(self, resource: str) -> ReplicatedResource | None:
        return next((r for r in self.resources if r.name == resource), None)


def _keys(where: str, value: object, allowed: set[str]) -> dict[str, object]:
    if not isinstance(value, dict):
        raise InvalidDevicePluginConfig(f"{where}: expected a map, got {type(value).__name__}")
    unknown = sorted(set(value) - allowed)
    if unknown:
        raise InvalidDevicePluginConfig(f"{where}: unknown field(s) {', '.join(unknown)}")
    return value


def _bool(where: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise InvalidDevicePluginConfig(f"{where}: expected true or false, got {value!r}")
    return value


def _resource_name(where: str, value: object) -> str:
    if not isinstance(value, str) or not value:
        raise InvalidDevicePluginConfig(f"{where}: no resource name specified")
    full = value if value.startswith(NVIDIA_RESOURCE_PREFIX) else NVIDIA_RESOURCE_PREFIX + value
    if len(full) > _MAX_RESOURCE_NAME or not _RESOURCE_NAME.match(full.removeprefix(NVIDIA_RESOURCE_PREFIX)):
        raise InvalidDevicePluginConfig(f"{where}: incorrect format for resource name '{value}'")
    return full


def _devices(where: str, value: object) -> None:
    if isinstance(value, str):
        if value != "all":
            raise InvalidDevicePluginConfig(
                f"{where}: devices set as '{value}' but the only valid string input is 'all'"
            )
    elif isinstance(value, int) and not isinstance(value, bool):
        if value <= 0:
            raise InvalidDevicePluginConfig(f"{where}: a count of devices must be > 0")
    elif not isinstance(value, list):
        raise InvalidDevicePluginConfig(f"{where}: unrecognized type for devices spec")


def _replicated(where: str, raw: object) -> tuple[bool, bool | None, tuple[ReplicatedResource, ...]]:
    block = _keys(where, raw, _REPLICATED_KEYS)
    rename_default = _bool(f"{where}.renameByDefault", block.get("renameByDefault", False))
    fail = block.get("failRequestsGreaterThanOne")
    fail = None if fail is None else _bool(f"{where}.failRequestsGreaterThanOne", fail)
    resources = block.get("resources")
    if not isinstance(resources, list) or not resources:
        raise InvalidDevicePluginConfig(f"{where}: no resources specified")
    out = []
    for i, entry in enumerate(resources):
        at = f"{where}.resources[{i}]"
        entry = _keys(at, entry, _RESOURCE_KEYS)
        name = _resource_name(at, entry.get("name"))
        _devices(at, entry.get("devices", "all"))
        replicas = entry.get("replicas")
        if replicas is None:
            raise InvalidDevicePluginConfig(f"{at}: no replicas specified")
        if not isinstance(replicas, int) or isinstance(replicas, bool):
            raise InvalidDevicePluginConfig(f"{at}: replicas must be an integer")
        if replicas < 2:
            raise InvalidDevicePluginConfig(f"{at}: number of replicas must be >= 2")
        raw_rename = entry.get("rename")
        if raw_rename:
            rename = _resource_name(f"{at}.rename", raw_rename)
        elif rename_default:
            rename = name + ".shared"
        else:
            rename = ""
        out.append(ReplicatedResource(name, replicas, rename))
    return rename_default, fail, tuple(out)


def parse_config(text: str) -> DevicePluginConfig:
    """One device-plugin config as the plugin reads it; InvalidDevicePluginConfig where it would refuse."""
    try:
        doc = load_one(text)
    except YamlSyntaxError as exc:
        raise InvalidDevicePluginConfig(f"unmarshal error: {exc}") from None
    doc = _keys("config", doc if doc is not None else {}, _CONFIG_KEYS)
    version = doc.get("version") or "v1"
    if version != "v1":
        raise InvalidDevicePluginConfig(f"unknown version: {version}")
    flags = _keys("flags", doc.get("flags") or {}, _FLAG_KEYS)
    mig_strategy = flags.get("migStrategy")
    if mig_strategy is not None and mig_strategy not in _MIG_STRATEGIES:
        raise InvalidDevicePluginConfig(f"flags.migStrategy: unknown MIG strategy {mig_strategy!r}")
    sharing = _keys("sharing", doc.get("sharing") or {}, _SHARING_KEYS)
    # Both set: MPS wins and time-slicing is ignored (Sharing.ReplicatedResources).
    key = "mps" if sharing.get("mps") is not None else "timeSlicing"
    if sharing.get(key) is None:
        return DevicePluginConfig(mig_strategy=mig_strategy, strategy="none")
    if "timeSlicing" in sharing and sharing["timeSlicing"] is not None:
        _replicated("sharing.timeSlicing", sharing["timeSlicing"])  # still unmarshalled, so still checked
    rename_default, fail, resources = _replicated(f"sharing.{key}", sharing[key])
    strategy = "mps" if key == "mps" else "time-slicing"
    if strategy == "mps":
        if mig_strategy == "mixed":
            raise InvalidDevicePluginConfig("using --mig-strategy=mixed is not supported with MPS")
        fail = True if fail is None else fail
    return DevicePluginConfig(
        mig_strategy=mig_strategy,
        strategy=strategy,
        rename_by_default=rename_default,
        fail_requests_greater_than_one=bool(fail),
        resources=resources,
    )


def advertised(config: DevicePluginConfig, gpus: int, product: str) -> tuple[dict[str, int], dict[str, str]]:
    """(allocatable GPU resources, GFD labels) of a node with `gpus` whole GPUs under `config`."""
    base = base_product(product)
    shared = config.replicated(GPU_RESOURCE)
    if shared is None:
        labels = {GPU_REPLICAS_LABEL: "1", GPU_SHARING_STRATEGY_LABEL: "none", GPU_PRODUCT_LABEL: base}
        return {GPU_RESOURCE: gpus}, labels
    labels = {
        GPU_REPLICAS_LABEL: str(shared.replicas),
        GPU_SHARING_STRATEGY_LABEL: config.strategy,
        GPU_PRODUCT_LABEL: base if shared.rename else f"{base}-SHARED",
    }
    return {(shared.rename or GPU_RESOURCE): gpus * shared.replicas}, labels


class DevicePluginStandIn:
    """Watches kwok GPU nodes and applies `nvidia.com/device-plugin.config` changes after `delay_seconds`
    (a real node's device plugin, when it has one, is NVIDIA's)."""

    def __init__(
        self,
        api_client: client.ApiClient,
        *,
        delay_seconds: float = 0.5,
        config_namespace: str = GPU_OPERATOR_NAMESPACE,
        config_map: str = DEVICE_PLUGIN_CONFIGMAP,
        default_key: str = "default",
        node_selector: str = f"{GPU_NODE_SELECTOR},{KWOK_NODE_SELECTOR}",
    ) -> None:
        self._core = client.CoreV1Api(api_client)
        self.delay_seconds = delay_seconds
        self.config_namespace = config_namespace
        self.config_map = config_map
        self.default_key = default_key
        self.node_selector = node_selector
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="device-plugin")
        self._lock = threading.Lock()
        self._seen: dict[str, str | None] = {}
        self.applies: list[tuple[str, str]] = []  # (node, config key) for every restart, in order
        self.errors: list[tuple[str, str]] = []  # (node, message) for every config the plugin refused

    def __enter__(self) -> DevicePluginStandIn:
        self._thread = threading.Thread(
            target=watch_loop,
            args=(self._core.list_node, self._on_node, self._stop),
            kwargs={"label_selector": self.node_selector},
            name="device-plugin-standin",
            daemon=True,
        )
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        self._pool.shutdown(wait=True, cancel_futures=True)

    def _on_node(self, event_type: str, node: client.V1Node) -> None:
        name = node.metadata.name
        wanted = (node.metadata.labels or {}).get(DEVICE_PLUGIN_CONFIG_LABEL)
        with self._lock:
            if event_type == "DELETED":
                self._seen.pop(name, None)
                return
            if name in self._seen and self._seen[name] == wanted:
                return
            first = name not in self._seen
            self._seen[name] = wanted
        if first and wanted is None:
            return  # the plugin started with its default config; the node advertises it already
        with contextlib.suppress(RuntimeError):  # shutting down
            self._pool.submit(self._apply, name)

    def _config_text(self, key: str) -> str:
        try:
            cm = self._core.read_namespaced_config_map(self.config_map, self.config_namespace)
        except ApiException as exc:
            if is_not_found(exc):
                raise InvalidDevicePluginConfig(f"ConfigMap {self.config_map} not found") from None
            raise
        data = cm.data or {}
        if key not in data:  # config-manager: "specified config X does not exist"
            raise InvalidDevicePluginConfig(f"specified config {key} does not exist")
        return str(data[key])

    def _apply(self, name: str) -> None:
        try:
            self._restart(name)
        except Exception as exc:  # a thread pool drops exceptions: keep them where tests look
            if not self._stop.is_set():
                log.warning("device plugin stand-in failed on %s: %r", name, exc)
                with self._lock:
                    self.errors.append((name, repr(exc)))

    def _restart(self, name: str) -> None:
        if self._stop.wait(self.delay_seconds):  # the plugin and GFD restart
            return
        try:
            node = self._core.read_node(name)
        except ApiException as exc:
            if is_not_found(exc):
                return
            raise
        labels = node.metadata.labels or {}
        key = labels.get(DEVICE_PLUGIN_CONFIG_LABEL) or self.default_key
        try:
            config = parse_config(self._config_text(key))
        except InvalidDevicePluginConfig as exc:
            log.info("device plugin stand-in: %s: %s", name, exc)
            with self._lock:
                self.errors.append((name, str(exc)))
            return  # the plugin keeps its previous config; GFD labels do not change
        try:
            gpus = int(labels.get(GPU_COUNT_LABEL, "0"))
        except ValueError:
            gpus = 0
        resources, gfd = advertised(config, gpus, labels.get(GPU_PRODUCT_LABEL, ""))
        allocatable = (node.status.allocatable or {}) if node.status else {}
        # A resource the plugin stops advertising stays on a real node at 0 (the kubelet zeroes it, does not
        # remove it): checked against NVIDIA's plugin (tests/localcluster/test_nvidia_gpu_node.py).
        patch: dict[str, Any] = {k: "0" for k in (GPU_RESOURCE, SHARED_GPU_RESOURCE) if k in allocatable}
        patch.update({k: str(v) for k, v in resources.items()})
        self._core.patch_node_status(name, {"status": {"allocatable": patch, "capacity": patch}})
        self._core.patch_node(name, {"metadata": {"labels": gfd}})
        with self._lock:
            self.applies.append((name, key))
