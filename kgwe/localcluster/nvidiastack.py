"""NVIDIA's own GPU stack on the local cluster's real node, run the way the GPU Operator runs it.

`kgwe cluster up --gpu-profile P` makes the real node a GPU node: NVIDIA's mock NVML library and profile P
in the driver root (mocknvml.py), an `nvidia` runtime handler in containerd for the RuntimeClass `nvidia`,
and in the GPU Operator's namespace NVIDIA's device plugin v0.20.0 with config-manager (init container and
sidecar, sharing the plugin's process namespace) and GPU Feature Discovery with config-manager, as DaemonSets
with `runtimeClassName: nvidia`, the driver root at /driver-root and the kubelet's device-plugin directory
mounted. Their image is written here from the binaries hack/nvidia-bins.sh builds (nothing is pulled). The
node's `nvidia.com/gpu` allocatable then comes from NVIDIA's plugin, its `nvidia.com/*` labels from GFD.

What is not NVIDIA's (docs/nvidia-stack.md says why): the `nvidia` runtime handler is runc with a base OCI
spec that bind-mounts the driver root and puts its library directory on LD_LIBRARY_PATH (the NVIDIA
Container Toolkit's part: giving a GPU pod the driver's NVML); GFD writes its labels to a features file
and nfd.py's stand-in of Node Feature Discovery's worker turns them into node labels; the GPU Operator's own
node labels (`nvidia.com/gpu.present`, `nvidia.com/gpu.deploy.*`) are set here. The device plugin's config
volume is KGWE's ConfigMap, as the GPU Operator mounts it with `devicePlugin.config.name`.

The manifests are pure functions of plain values; `install` does the API calls.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from kgwe.errors import KgweError
from kgwe.localcluster import mocknvml
from kgwe.localcluster.controlplane import cache_base
from kgwe.localcluster.gpunodes import KWOK_NODE_LABEL
from kgwe.localcluster.mocknvml import DRIVER_ROOT, LIBRARY_DIR, OVERRIDES_TTL_SECONDS
from kgwe.localcluster.nvidiabins import DEVICE_PLUGIN_COMMANDS, NvidiaBinaries
from kgwe.localcluster.ociimage import ImageFile, ImageSpec, write_oci_archive
from kgwe.vocab import (
    DEVICE_PLUGIN_CONFIG_LABEL,
    DEVICE_PLUGIN_CONFIGMAP,
    DEVICE_PLUGIN_DAEMONSET,
    GPU_COUNT_LABEL,
    GPU_DEPLOY_LABEL_PREFIX,
    GPU_OPERATOR_NAMESPACE,
    GPU_PRESENT_LABEL,
    GPU_RESOURCE,
)

DEVICE_PLUGIN_REPOSITORY = "nvcr.io/nvidia/k8s-device-plugin"  # upstream's image: all three commands in it
CONTAINER_DRIVER_ROOT = "/driver-root"  # where the plugin and GFD look for the driver (their default)
KUBELET_DEVICE_PLUGINS = "/var/lib/kubelet/device-plugins"
FEATURES_DIR = "/etc/kubernetes/node-feature-discovery/features.d"  # GFD's output directory (NFD's)
GFD_FEATURES_FILE = "gfd"
CONFIG_SOURCE_DIR = "/available-configs"  # the GPU Operator's mount of devicePlugin.config.name
CONFIG_FILE = "/config/config.yaml"
DEFAULT_CONFIG_KEY = "default"  # devicePlugin.config.default (the key KGWE's render writes)
RUNTIME_HANDLER = "nvidia"  # the RuntimeClass `nvidia`'s handler
GFD_DAEMONSET = "gpu-feature-discovery"  # the GPU Operator's name for GFD's DaemonSet (pods `app=<name>`)
# Every NVIDIA container's last log lines become its termination message (the operator leaves Kubernetes'
# default): config-manager's refusal, the plugin's start failure, where `kgwe nodes` and kubectl describe
# show them.
LAST_WORDS = "FallbackToLogsOnError"
DEVICE_PLUGIN_ACCOUNT = "nvidia-device-plugin"
GFD_ACCOUNT = "nvidia-gpu-feature-discovery"
CONFIG_MANAGER_ROLE = "kgwe-local-nvidia-config-manager"
# The operands the GPU Operator labels a GPU node for; the kwok nodes' operands are KGWE's stand-ins.
OPERANDS = ("device-plugin", "gpu-feature-discovery")
_LDD_LINE = re.compile(r"(?:=>\s*)?(/\S+)\s+\(0x")


def image_reference(binaries: NvidiaBinaries) -> str:
    return f"{DEVICE_PLUGIN_REPOSITORY}:{binaries.device_plugin_version}"


def shared_libraries(program: Path) -> list[Path]:
    """The shared libraries `program` links (ldd), the loader included: CGo binaries need the C library."""
    out = subprocess.run(["ldd", str(program)], capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise KgweError(f"ldd {program} failed: {out.stderr.strip() or out.stdout.strip()}")
    return sorted({Path(m.group(1)) for m in map(_LDD_LINE.search, out.stdout.splitlines()) if m})


def image_spec(binaries: NvidiaBinaries) -> ImageSpec:
    """NVIDIA's device-plugin image, from the binaries: the three commands in /usr/bin (as upstream's) and
    the C library they link; runs as root, as upstream's (it writes the kubelet's device-plugin socket)."""
    commands = [ImageFile(f"/usr/bin/{c}", binaries.command(c)) for c in DEVICE_PLUGIN_COMMANDS]
    libraries = {lib for c in DEVICE_PLUGIN_COMMANDS for lib in shared_libraries(binaries.command(c))}
    files = commands + [ImageFile(str(lib), lib, 0o755) for lib in sorted(libraries)]
    return ImageSpec(
        image_reference(binaries),
        files,
        ["/usr/bin/nvidia-device-plugin"],
        user="0:0",
        env=("PATH=/usr/local/bin:/usr/bin:/bin",),
        directories={"/tmp": 0o1777, "/config": 0o755, "/available-configs": 0o755},
    )


def image_archive(binaries: NvidiaBinaries) -> tuple[Path, str]:
    """(archive, reference) of the image, written once per build into the cache."""
    spec = image_spec(binaries)
    key = json.dumps(
        [str(f.source.resolve()) + f":{f.source.stat().st_mtime_ns}" for f in spec.files], sort_keys=True
    )
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    archive = (
        cache_base() / "node-images" / f"k8s-device-plugin-{binaries.device_plugin_version}-{digest}.oci.tar"
    )
    if not archive.is_file():
        for stale in archive.parent.glob("k8s-device-plugin-*.oci.tar"):
            stale.unlink(missing_ok=True)
        write_oci_archive(spec, archive)
    return archive, spec.reference


# ---- the `nvidia` runtime handler (the NVIDIA Container Toolkit's part) --------------------------------


def runtime_base_spec(default_spec: Mapping[str, Any], driver_root: Path = DRIVER_ROOT) -> dict[str, Any]:
    """containerd's default OCI spec plus what the toolkit gives a pod of the RuntimeClass `nvidia`: the
    driver root, read-only, at its own path, and its library directory on LD_LIBRARY_PATH (so NVML clients
    such as nvidia-ml-py load the driver's libnvidia-ml.so.1)."""
    spec: dict[str, Any] = json.loads(json.dumps(default_spec))
    spec.setdefault("mounts", []).append(
        {
            "destination": str(driver_root),
            "type": "bind",
            "source": str(driver_root),
            "options": ["rbind", "ro", "nosuid", "nodev"],
        }
    )
    process = spec.setdefault("process", {})
    process.pop("rlimits", None)  # as containerd's CRI leaves them: a pod inherits the runtime's limits
    env = [e for e in process.get("env") or [] if not e.startswith("LD_LIBRARY_PATH=")]
    process["env"] = [*env, f"LD_LIBRARY_PATH={driver_root / LIBRARY_DIR}"]
    return spec


def runtime_handler(runc_options: Mapping[str, Any], base_spec: Path) -> dict[str, Any]:
    """containerd's runtime table for the handler `nvidia`: runc with the base spec above."""
    return {
        "runtime_type": "io.containerd.runc.v2",
        "base_runtime_spec": str(base_spec),
        "options": dict(runc_options),
    }


# ---- manifests ---------------------------------------------------------------------------------------


def operator_node_labels() -> dict[str, str]:
    """The labels the GPU Operator itself puts on a GPU node (GFD's come from GFD)."""
    return {GPU_PRESENT_LABEL: "true", **{GPU_DEPLOY_LABEL_PREFIX + o: "true" for o in OPERANDS}}


def _config_manager(name: str, process: str, default_config: str, *, oneshot: bool) -> dict[str, Any]:
    """config-manager as the GPU Operator configures it for devicePlugin.config (init or sidecar). It finds
    the process to signal by its argv[0] exactly, so every command here is the bare name (found on PATH),
    as upstream's entrypoint runs them."""
    env = {
        "ONESHOT": "true" if oneshot else "false",
        "KUBECONFIG": "",
        "NODE_LABEL": DEVICE_PLUGIN_CONFIG_LABEL,
        "CONFIG_FILE_SRCDIR": CONFIG_SOURCE_DIR,
        "CONFIG_FILE_DST": CONFIG_FILE,
        "DEFAULT_CONFIG": default_config,
        "FALLBACK_STRATEGIES": "empty",
        "SEND_SIGNAL": "false" if oneshot else "true",
        "SIGNAL": "" if oneshot else "1",  # SIGHUP
        "PROCESS_TO_SIGNAL": "" if oneshot else process,
    }
    return {
        "name": name,
        "command": ["config-manager"],
        "env": [{"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}]
        + [{"name": k, "value": v} for k, v in env.items()],
        "terminationMessagePolicy": LAST_WORDS,
        "volumeMounts": [
            {"name": "config", "mountPath": str(Path(CONFIG_FILE).parent)},
            {"name": "available-configs", "mountPath": CONFIG_SOURCE_DIR},
        ],
    }


def _pod_spec(
    account: str, containers: list[dict[str, Any]], init: dict[str, Any], volumes: list[dict[str, Any]]
) -> dict[str, Any]:
    return {
        "serviceAccountName": account,
        "runtimeClassName": RUNTIME_HANDLER,
        "priorityClassName": "system-node-critical",
        "shareProcessNamespace": True,  # config-manager signals the main process
        "nodeSelector": {},
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {
                            "matchExpressions": [
                                {
                                    "key": KWOK_NODE_LABEL[0],
                                    "operator": "NotIn",
                                    "values": [KWOK_NODE_LABEL[1]],
                                }
                            ]
                        }
                    ]
                }
            }
        },
        "tolerations": [{"key": GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}],
        "initContainers": [init],
        "containers": containers,
        "volumes": [
            {"name": "config", "emptyDir": {}},
            {"name": "available-configs", "configMap": {"name": DEVICE_PLUGIN_CONFIGMAP}},
            {"name": "driver-root", "hostPath": {"path": str(DRIVER_ROOT), "type": "Directory"}},
            *volumes,
        ],
    }


def _daemonset(name: str, operand: str, pod_spec: dict[str, Any], image: str) -> dict[str, Any]:
    for container in pod_spec["initContainers"] + pod_spec["containers"]:
        container.setdefault("terminationMessagePolicy", LAST_WORDS)
        container.setdefault("image", image)
        container.setdefault("imagePullPolicy", "IfNotPresent")
    pod_spec["nodeSelector"] = {GPU_DEPLOY_LABEL_PREFIX + operand: "true"}
    labels = {"app": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": name, "namespace": GPU_OPERATOR_NAMESPACE, "labels": dict(labels)},
        "spec": {
            "selector": {"matchLabels": dict(labels)},
            "template": {"metadata": {"labels": dict(labels)}, "spec": pod_spec},
        },
    }


def device_plugin_daemonset(image: str, default_config: str = DEFAULT_CONFIG_KEY) -> dict[str, Any]:
    """nvidia-device-plugin-daemonset as the GPU Operator renders it with devicePlugin.config set, minus
    what needs the real toolkit (its validation init container) or device nodes (PASS_DEVICE_SPECS)."""
    plugin = {
        "name": "nvidia-device-plugin",
        "command": ["nvidia-device-plugin"],
        "env": [
            {"name": k, "value": v}
            for k, v in {
                "CONFIG_FILE": CONFIG_FILE,
                "FAIL_ON_INIT_ERROR": "true",
                "DEVICE_LIST_STRATEGY": "envvar",
                "DEVICE_ID_STRATEGY": "uuid",
                "PASS_DEVICE_SPECS": "false",  # the mock's GPUs have no /dev/nvidia* device nodes
                "NVIDIA_VISIBLE_DEVICES": "all",
                "NVIDIA_DRIVER_CAPABILITIES": "all",
            }.items()
        ],
        "volumeMounts": [
            {"name": "device-plugin", "mountPath": KUBELET_DEVICE_PLUGINS},
            *_driver_and_config_mounts(),
        ],
    }
    sidecar = _config_manager("config-manager", "nvidia-device-plugin", default_config, oneshot=False)
    init = _config_manager("config-manager-init", "", default_config, oneshot=True)
    volumes = [{"name": "device-plugin", "hostPath": {"path": KUBELET_DEVICE_PLUGINS}}]
    spec = _pod_spec(DEVICE_PLUGIN_ACCOUNT, [plugin, sidecar], init, volumes)
    return _daemonset(DEVICE_PLUGIN_DAEMONSET, "device-plugin", spec, image)


def _driver_and_config_mounts() -> list[dict[str, Any]]:
    """What the plugin and GFD both mount: the driver root (NVML) read-only, the config file config-manager
    writes, and the ConfigMap's configs it chooses from."""
    return [
        {"name": "driver-root", "mountPath": CONTAINER_DRIVER_ROOT, "readOnly": True},
        {"name": "config", "mountPath": str(Path(CONFIG_FILE).parent)},
        {"name": "available-configs", "mountPath": CONFIG_SOURCE_DIR},
    ]


def gfd_daemonset(image: str, features_dir: Path, default_config: str = DEFAULT_CONFIG_KEY) -> dict[str, Any]:
    """gpu-feature-discovery with config-manager, writing its labels to `features_dir` on the host (NFD's
    features.d, where nfd.py's stand-in reads them)."""
    gfd = {
        "name": "gpu-feature-discovery",
        "command": ["gpu-feature-discovery"],
        "args": ["--use-node-feature-api=false", f"--output-file={FEATURES_DIR}/{GFD_FEATURES_FILE}"],
        "env": [
            {"name": "CONFIG_FILE", "value": CONFIG_FILE},
            {"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"},
        ],
        "volumeMounts": [{"name": "output-dir", "mountPath": FEATURES_DIR}, *_driver_and_config_mounts()],
    }
    sidecar = _config_manager("config-manager", "gpu-feature-discovery", default_config, oneshot=False)
    init = _config_manager("config-manager-init", "", default_config, oneshot=True)
    volumes = [{"name": "output-dir", "hostPath": {"path": str(features_dir), "type": "DirectoryOrCreate"}}]
    spec = _pod_spec(GFD_ACCOUNT, [gfd, sidecar], init, volumes)
    return _daemonset(GFD_DAEMONSET, "gpu-feature-discovery", spec, image)


def rbac_objects() -> list[dict[str, Any]]:
    """config-manager watches its own Node's label: get, list and watch Nodes, for both accounts."""
    accounts = (DEVICE_PLUGIN_ACCOUNT, GFD_ACCOUNT)
    objects: list[dict[str, Any]] = [
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": a, "namespace": GPU_OPERATOR_NAMESPACE},
        }
        for a in accounts
    ]
    objects.append(
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": CONFIG_MANAGER_ROLE},
            "rules": [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch"]}],
        }
    )
    objects.append(
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": CONFIG_MANAGER_ROLE},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": CONFIG_MANAGER_ROLE,
            },
            "subjects": [
                {"kind": "ServiceAccount", "name": a, "namespace": GPU_OPERATOR_NAMESPACE} for a in accounts
            ],
        }
    )
    return objects


# ---- API calls ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Installed:
    image: str
    daemonsets: tuple[str, ...]


def install(
    api: client.ApiClient, image: str, node: str, features_dir: Path, default_configs: Mapping[str, str]
) -> Installed:
    """Create NVIDIA's DaemonSets and their RBAC, KGWE's device-plugin ConfigMap with `default_configs` when
    it does not exist yet (the GPU Operator mounts it; KGWE's controller takes it over), and label `node` as
    the GPU Operator does. Idempotent."""
    from kubernetes.utils import create_from_dict

    from kgwe.cluster.client import ensure_namespace

    ensure_namespace(api, GPU_OPERATOR_NAMESPACE)
    core = client.CoreV1Api(api)
    try:
        core.create_namespaced_config_map(
            GPU_OPERATOR_NAMESPACE,
            {"metadata": {"name": DEVICE_PLUGIN_CONFIGMAP}, "data": dict(default_configs)},
        )
    except ApiException as exc:
        if exc.status != 409:
            raise
    objects = [*rbac_objects(), device_plugin_daemonset(image), gfd_daemonset(image, features_dir)]
    for obj in objects:
        try:
            create_from_dict(api, obj, namespace=obj["metadata"].get("namespace"))
        except Exception as exc:  # kubernetes.utils wraps ApiExceptions in FailToCreateError
            if "AlreadyExists" not in str(exc) and "409" not in str(exc):
                raise
    core.patch_node(node, {"metadata": {"labels": operator_node_labels()}})
    return Installed(image, (DEVICE_PLUGIN_DAEMONSET, GFD_DAEMONSET))


def allocatable_gpus(api: client.ApiClient, node: str, resource: str) -> int:
    """The node's allocatable `resource` as a number (0 when absent)."""
    found = client.CoreV1Api(api).read_node(node)
    value = (found.status.allocatable or {}).get(resource, "0") if found.status else "0"
    try:
        return int(value)
    except ValueError:
        return 0


def pods_state(
    api: client.ApiClient,
    names: Sequence[str] = (DEVICE_PLUGIN_DAEMONSET, GFD_DAEMONSET),
    log_lines: int = 15,
) -> str:
    """One line per NVIDIA pod: its containers' states and last termination messages, then the last
    `log_lines` lines of its main container's log (for errors)."""
    core = client.CoreV1Api(api)
    lines = []
    for name in names:
        for pod in core.list_namespaced_pod(GPU_OPERATOR_NAMESPACE, label_selector=f"app={name}").items:
            statuses = (pod.status.init_container_statuses or []) + (pod.status.container_statuses or [])
            parts = []
            for s in statuses:
                state = (
                    "running"
                    if s.state.running
                    else (s.state.waiting.reason if s.state.waiting else "terminated")
                )
                last = (
                    s.last_state.terminated.message.strip()[-200:]
                    if s.last_state and s.last_state.terminated and s.last_state.terminated.message
                    else ""
                )
                parts.append(f"{s.name}={state}(restarts {s.restart_count}){': ' + last if last else ''}")
            lines.append(f"{pod.metadata.name} {pod.status.phase}: {' '.join(parts)}")
            if log_lines and pod.status.phase == "Running":
                container = pod.spec.containers[0].name
                try:
                    log = core.read_namespaced_pod_log(
                        pod.metadata.name, GPU_OPERATOR_NAMESPACE, container=container, tail_lines=log_lines
                    )
                except ApiException as exc:
                    log = f"(no log: {exc.reason})"
                lines += [f"  {container}| {line}" for line in log.splitlines()]
    return "\n".join(lines) or "no NVIDIA pods"


def wait_gpu_node(
    api: client.ApiClient, node: str, gpus: int, timeout_seconds: float = 300.0, poll_seconds: float = 0.5
) -> float:
    """Block until NVIDIA's plugin advertises `gpus` whole GPUs on `node` and GFD's labels are on it;
    returns the seconds waited. On timeout the error says what NVIDIA's pods are doing."""
    core = client.CoreV1Api(api)
    t0 = time.monotonic()
    while True:
        found = core.read_node(node)
        allocatable = (found.status.allocatable or {}) if found.status else {}
        labels = found.metadata.labels or {}
        if allocatable.get(GPU_RESOURCE) == str(gpus) and labels.get(GPU_COUNT_LABEL) == str(gpus):
            return time.monotonic() - t0
        if time.monotonic() - t0 > timeout_seconds:
            raise KgweError(
                f"{node} did not become a GPU node in {timeout_seconds:.0f}s (allocatable {GPU_RESOURCE}="
                f"{allocatable.get(GPU_RESOURCE, 'none')}, "
                f"{GPU_COUNT_LABEL}={labels.get(GPU_COUNT_LABEL, 'none')}); "
                f"NVIDIA's pods in {GPU_OPERATOR_NAMESPACE}:\n{pods_state(api)}"
            )
        time.sleep(poll_seconds)


def restart_device_plugin(cgroup_root: str) -> int:
    """Restart NVIDIA's device plugin in place, as config-manager does (SIGHUP to the process whose name it
    is, in the real node's containers: `cgroup_root`, e.g. `/kgwe-node/`): it reads its GPUs again with the
    library it loaded, so a failure injected into the mock since trips there (mocknvml.py). Returns how many
    processes got the signal. It first lets the mock's re-read interval pass (OVERRIDES_TTL_SECONDS): a
    restart within it would read its GPUs before it saw a failure written just before."""
    time.sleep(OVERRIDES_TTL_SECONDS)
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            comm = (entry / "comm").read_text().strip()
            cgroup = (entry / "cgroup").read_text()
        except OSError:
            continue
        if comm == "nvidia-device-plugin"[:15] and cgroup_root in cgroup:  # comm keeps 15 characters
            found.append(int(entry.name))
    for pid in found:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGHUP)
    return len(found)


# The Xids NVIDIA's plugin v0.20.0 never marks a device unhealthy for (application errors;
# docs/facts/nvidia-stack.md §2): an injected one is received and ignored.
DEVICE_PLUGIN_IGNORED_XIDS = frozenset({13, 31, 43, 45, 68, 109})
WITHDRAW_ATTEMPTS = 5
WITHDRAW_WAIT_SECONDS = 30.0
# The running plugin logs a withdrawal right after the Xid (same process, a channel apart); this long after
# the Xid without one, the stopped run took it.
CLAIM_GRACE_SECONDS = 5.0


def plugin_withdraws(mode: str, xid: int | None) -> bool:
    """Whether NVIDIA's plugin withdraws a GPU failing so (the one GPU, not the node's every GPU): only an
    uncorrectable ECC error with a critical Xid; a lost GPU stops the plugin from starting at all."""
    return mode == "ecc_uncorrectable" and xid is not None and xid not in DEVICE_PLUGIN_IGNORED_XIDS


def _device_plugin_log(api: client.ApiClient) -> str:
    """The log of NVIDIA's plugin in its running pod ("" when none runs)."""
    core = client.CoreV1Api(api)
    selector = f"app={DEVICE_PLUGIN_DAEMONSET}"
    for pod in core.list_namespaced_pod(GPU_OPERATOR_NAMESPACE, label_selector=selector).items:
        if pod.status.phase == "Running":
            container = pod.spec.containers[0].name
            return str(
                core.read_namespaced_pod_log(pod.metadata.name, GPU_OPERATOR_NAMESPACE, container=container)
            )
    return ""


def withdrawals(log: str, uuid: str) -> int:
    """How often the plugin's running server withdrew GPU `uuid` (v0.20.0 logs `'<resource>' device marked
    unhealthy: <id>` when it tells the kubelet; the health check of a stopped run only logs the Xid)."""
    return log.count(f"device marked unhealthy: {uuid}")


def xid_claims(log: str, uuid: str, xid: int) -> int:
    """How often a health check of the plugin took Xid `xid` of GPU `uuid` (logged whether or not its run
    still serves: the stopped run's logs this line alone, the running one's this line then a withdrawal)."""
    return log.count(f"XidCriticalError: Xid={xid} on Device={uuid};")


def fail_and_withdraw(
    api: client.ApiClient,
    cgroup_root: str,
    gpu: int,
    xid: int,
    attempts: int = WITHDRAW_ATTEMPTS,
    wait_seconds: float = WITHDRAW_WAIT_SECONDS,
    poll_seconds: float = 0.5,
) -> int:
    """Inject an uncorrectable ECC error with Xid `xid` into GPU `gpu` and restart NVIDIA's plugin until its
    running server withdraws that GPU (tells the kubelet it is unhealthy); returns the attempts it took.

    Why more than one (docs/nvidia-stack.md): the GPU trips in the plugin's process while the restarted run
    reads its GPUs, and the mock delivers the Xid once, to whichever health check waits first: the new run's
    (it withdraws the GPU) or the stopped run's, still in its 5-second event wait (nobody reads what it
    marks). Then the failure is injected anew (a new occurrence, mocknvml.inject_failure) and the plugin
    restarted again. A new process would not do: the mock makes its GPUs anew between its start and its
    health check, so the Xid never reaches it."""
    uuid = {g.index: g.uuid for g in mocknvml.profile_gpus()}[gpu]
    for attempt in range(1, attempts + 1):
        log = _device_plugin_log(api)
        withdrawn, claimed = withdrawals(log, uuid), xid_claims(log, uuid, xid)
        mocknvml.inject_failure(gpu, "ecc_uncorrectable", xid, occurrence=attempt - 1)
        if not restart_device_plugin(cgroup_root):
            raise KgweError(f"NVIDIA's device plugin does not run:\n{pods_state(api)}")
        deadline = time.monotonic() + wait_seconds
        claimed_at: float | None = None
        while time.monotonic() < deadline:
            log = _device_plugin_log(api)
            if withdrawals(log, uuid) > withdrawn:
                return attempt
            if claimed_at is None and xid_claims(log, uuid, xid) > claimed:
                claimed_at = time.monotonic()
            if claimed_at is not None and time.monotonic() - claimed_at > CLAIM_GRACE_SECONDS:
                break  # the stopped run took the Xid: the running one will not see it
            time.sleep(poll_seconds)
    raise KgweError(
        f"NVIDIA's device plugin did not withdraw GPU {gpu} ({uuid}) in {attempts} restarts with Xid {xid} "
        f"injected; NVIDIA's pods:\n{pods_state(api)}"
    )
