"""The pure parts of the local GPU node: NVIDIA's DaemonSets as the GPU Operator renders them, the `nvidia`
runtime's base spec, the Node Feature Discovery stand-in's reading of GFD's file, the mock's overrides file,
and `kgwe cluster up --gpu-profile`'s refusals."""

from __future__ import annotations

import pytest
import yaml

from kgwe.errors import KgweError
from kgwe.localcluster import mocknvml, nvidiastack
from kgwe.localcluster.nfd import label_patch, parse_features
from kgwe.vocab import DEVICE_PLUGIN_CONFIG_LABEL, DEVICE_PLUGIN_CONFIGMAP, GPU_OPERATOR_NAMESPACE


def _env(container: dict) -> dict[str, str]:
    return {e["name"]: e.get("value", "") for e in container["env"] if "value" in e}


def test_the_device_plugin_daemonset_is_the_gpu_operators_with_kgwes_configmap():
    ds = nvidiastack.device_plugin_daemonset("nvcr.io/nvidia/k8s-device-plugin:v0.20.0")
    assert ds["metadata"] == {
        "name": "nvidia-device-plugin-daemonset",
        "namespace": GPU_OPERATOR_NAMESPACE,
        "labels": {"app": "nvidia-device-plugin-daemonset"},
    }
    spec = ds["spec"]["template"]["spec"]
    assert spec["runtimeClassName"] == "nvidia" and spec["shareProcessNamespace"] is True
    assert spec["nodeSelector"] == {"nvidia.com/gpu.deploy.device-plugin": "true"}
    excluded = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert excluded["nodeSelectorTerms"][0]["matchExpressions"] == [
        {"key": "type", "operator": "NotIn", "values": ["kwok"]}  # the kwok nodes' plugin is KGWE's stand-in
    ]
    [init] = spec["initContainers"]
    plugin, sidecar = spec["containers"]
    # config-manager finds the process to signal by argv[0] exactly: bare names, as upstream's entrypoint
    assert [c["command"] for c in (init, plugin, sidecar)] == [
        ["config-manager"],
        ["nvidia-device-plugin"],
        ["config-manager"],
    ]
    assert _env(sidecar) | {"KUBECONFIG": ""} == {
        "ONESHOT": "false", "KUBECONFIG": "", "NODE_LABEL": DEVICE_PLUGIN_CONFIG_LABEL,
        "CONFIG_FILE_SRCDIR": "/available-configs", "CONFIG_FILE_DST": "/config/config.yaml",
        "DEFAULT_CONFIG": "default", "FALLBACK_STRATEGIES": "empty", "SEND_SIGNAL": "true", "SIGNAL": "1",
        "PROCESS_TO_SIGNAL": "nvidia-device-plugin",
    }  # fmt: skip
    assert _env(init)["ONESHOT"] == "true" and _env(init)["SEND_SIGNAL"] == "false"
    assert _env(plugin)["CONFIG_FILE"] == "/config/config.yaml"
    assert _env(plugin)["DEVICE_LIST_STRATEGY"] == "envvar"
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes["available-configs"]["configMap"] == {"name": DEVICE_PLUGIN_CONFIGMAP}
    assert volumes["driver-root"]["hostPath"]["path"] == "/run/nvidia/driver"
    mounts = {m["mountPath"] for m in plugin["volumeMounts"]}
    assert {"/driver-root", "/var/lib/kubelet/device-plugins", "/config", "/available-configs"} <= mounts


def test_gfd_writes_its_features_file_where_the_nfd_stand_in_reads(tmp_path):
    ds = nvidiastack.gfd_daemonset("img", tmp_path / "features.d")
    spec = ds["spec"]["template"]["spec"]
    gfd, sidecar = spec["containers"]
    assert "--use-node-feature-api=false" in gfd["args"]
    assert f"--output-file={nvidiastack.FEATURES_DIR}/gfd" in gfd["args"]
    assert {v["name"]: v for v in spec["volumes"]}["output-dir"]["hostPath"]["path"] == str(
        tmp_path / "features.d"
    )
    assert _env(sidecar)["PROCESS_TO_SIGNAL"] == "gpu-feature-discovery"


def test_the_nvidia_runtime_gives_containers_the_driver_roots_nvml():
    default = {"process": {"env": ["PATH=/bin", "LD_LIBRARY_PATH=/x"]}, "mounts": [{"destination": "/proc"}]}
    spec = nvidiastack.runtime_base_spec(default)
    assert spec["process"]["env"] == ["PATH=/bin", "LD_LIBRARY_PATH=/run/nvidia/driver/usr/lib64"]
    assert spec["mounts"][-1] == {
        "destination": "/run/nvidia/driver", "type": "bind", "source": "/run/nvidia/driver",
        "options": ["rbind", "ro", "nosuid", "nodev"],
    }  # fmt: skip
    assert default["process"]["env"][1] == "LD_LIBRARY_PATH=/x", "the default spec is not changed"


def test_the_nfd_stand_in_publishes_only_nvidia_labels_and_removes_what_went_away():
    text = (
        "# GFD\nnvidia.com/gpu.count=8\nnvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3\n"
        "kubernetes.io/hostname=evil\nnvidia.com/gpu.memory=not a value!\nno-equals\n"
    )
    labels, problems = parse_features(text)
    assert labels == {"nvidia.com/gpu.count": "8", "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    assert len(problems) == 3 and "kubernetes.io/hostname" in problems[0]
    current = {"nvidia.com/gpu.count": "8", "nvidia.com/gpu.replicas": "4", "other": "x"}
    patch = label_patch(current, {"nvidia.com/gpu.count", "nvidia.com/gpu.replicas"}, labels)
    assert patch == {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "nvidia.com/gpu.replicas": None}
    assert label_patch({**current, **labels}, set(labels), labels) == {}


def _profile_root(tmp_path):
    root = tmp_path / "driver"
    (root / "config").mkdir(parents=True)
    devices = [{"index": i, "uuid": f"GPU-{i}"} for i in range(8)]
    (root / "config" / "config.yaml").write_text(yaml.safe_dump({"version": "1.0", "devices": devices}))
    return root


def test_failures_are_written_to_the_mocks_overrides_file(tmp_path):
    root = _profile_root(tmp_path)
    assert [g.uuid for g in mocknvml.profile_gpus(root)] == [f"GPU-{i}" for i in range(8)]
    mocknvml.inject_failure(3, "ecc_uncorrectable", 48, root)
    mocknvml.inject_failure(5, "lost", None, root)
    doc = yaml.safe_load((root / "config" / "overrides.yaml").read_text())
    assert doc == {
        "version": 1,
        "devices": {
            "3": {"failure": {"mode": "ecc_uncorrectable", "xid": {"code": 48}}},
            "5": {"failure": {"mode": "lost"}},
        },
    }
    assert mocknvml.injected_failures(root) == {3: doc["devices"]["3"]["failure"], 5: {"mode": "lost"}}
    mocknvml.clear_failures(root)
    assert mocknvml.injected_failures(root) == {}


def test_a_new_occurrence_of_a_failure_changes_its_block(tmp_path):
    """The mock keeps a device's tripped state (and its Xid delivered) while the failure block is unchanged;
    a new occurrence must change it, with the inert `seed`, and nothing else."""
    root = _profile_root(tmp_path)
    first = mocknvml.inject_failure(3, "ecc_uncorrectable", 48, root)["devices"]["3"]["failure"]
    again = mocknvml.inject_failure(3, "ecc_uncorrectable", 48, root, occurrence=2)["devices"]["3"]["failure"]
    assert first == {"mode": "ecc_uncorrectable", "xid": {"code": 48}}
    assert again == {**first, "seed": 2}
    assert mocknvml.injected_failures(root) == {3: again}


@pytest.mark.parametrize(
    ("mode", "xid", "withdrawn"),
    [
        ("ecc_uncorrectable", 48, True),
        ("ecc_uncorrectable", 79, True),
        ("ecc_uncorrectable", 13, False),  # an application Xid: NVIDIA's plugin ignores it
        ("ecc_uncorrectable", 109, False),
        ("ecc_uncorrectable", None, False),  # no Xid, no event
        ("lost", 79, False),  # the plugin cannot start: every GPU goes, not one
    ],
)
def test_which_failures_nvidias_plugin_withdraws_one_gpu_for(mode, xid, withdrawn):
    assert nvidiastack.plugin_withdraws(mode, xid) is withdrawn


def test_a_withdrawal_is_what_the_running_plugin_logs():
    log = (
        "I1206 health.go:169] XidCriticalError: Xid=79 on Device=GPU-4; marking device as unhealthy.\n"
        "I1206 health.go:169] XidCriticalError: Xid=79 on Device=GPU-4; marking device as unhealthy.\n"
        "I1206 server.go:279] 'nvidia.com/gpu' device marked unhealthy: GPU-4\n"
    )
    assert nvidiastack.withdrawals(log, "GPU-4") == 1  # the stopped run's health check only logs the Xid
    assert nvidiastack.withdrawals(log, "GPU-3") == 0
    assert nvidiastack.xid_claims(log, "GPU-4", 79) == 2
    assert nvidiastack.xid_claims(log, "GPU-4", 48) == 0


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((8, "lost", None), "no GPU 8 on this node: the profile has GPUs 0..7"),
        ((1, "melted", None), "unknown failure mode 'melted'"),
        ((1, "ecc_uncorrectable", 0), "Xid 0 is not an Xid code"),
    ],
)
def test_a_failure_the_mock_cannot_have_is_refused(tmp_path, args, message):
    root = _profile_root(tmp_path)
    with pytest.raises(KgweError, match=message):
        mocknvml.inject_failure(*args, root=root)
    assert not (root / "config" / "overrides.yaml").exists()


def test_an_unknown_gpu_profile_names_the_ones_there_are(tmp_path):
    from kgwe.localcluster.nvidiabins import NvidiaBinaries, UnknownGpuProfile

    configs = tmp_path / "mock" / "configs"
    configs.mkdir(parents=True)
    for name in ("h100", "a100"):
        (configs / f"mock-nvml-config-{name}.yaml").write_text("version: '1.0'\n")
    binaries = NvidiaBinaries(tmp_path / "mock", tmp_path / "plugin")
    assert binaries.profile("h100") == configs / "mock-nvml-config-h100.yaml"
    with pytest.raises(
        UnknownGpuProfile, match="unknown GPU profile 'h200': the mock NVML library ships a100, h100"
    ):
        binaries.profile("h200")


def _pod(*containers: dict, phase: str = "Running") -> dict:
    init = {"name": "config-manager-init", "state": {"terminated": {"reason": "Completed", "exitCode": 0}}}
    return {
        "status": {"phase": phase, "initContainerStatuses": [init], "containerStatuses": list(containers)}
    }


def test_the_device_plugin_pods_state_says_what_a_person_needs():
    from kgwe.fleet.nodes import device_plugin_state, device_plugin_states

    running = {"name": "nvidia-device-plugin", "state": {"running": {}}, "restartCount": 0}
    words = "E1206 main.go:209] specified config kgwe-x does not exist"
    refusal = f"I1206 main.go:249] Label change detected\n{words}\n"
    looping = {
        "name": "config-manager",
        "state": {"waiting": {"reason": "CrashLoopBackOff"}},
        "lastState": {
            "terminated": {"exitCode": 1, "message": refusal, "finishedAt": "2026-12-06T03:41:54Z"}
        },
        "restartCount": 3,
    }
    assert (
        device_plugin_state(_pod(running, {**looping, "state": {"running": {}}, "restartCount": 0}))
        == "Running"
    )
    assert (
        device_plugin_state(_pod(running, looping))
        == f"config-manager: CrashLoopBackOff (restarts 3): {words}"
    )
    between_crashes = {**looping, "state": {"running": {}}}
    assert device_plugin_state(_pod(running, between_crashes)) == (
        f"Running; config-manager restarted 3 time(s), last exit 1 at 2026-12-06T03:41:54Z: {words}"
    )
    assert device_plugin_state({"status": {"phase": "Pending"}}) == "Pending"
    pods = [{"spec": {"nodeName": "n1"}, **_pod(running)}, {"spec": {}, **_pod(looping)}]
    assert device_plugin_states(pods) == {"n1": "Running"}


def test_every_failing_container_of_the_plugin_pod_is_named():
    """config-manager refused a key earlier and runs; the plugin crash-loops (between two crashes it runs):
    both say why, the one that is down first."""
    from kgwe.fleet.nodes import device_plugin_state

    def failed(name: str, words: str, running: bool) -> dict:
        state = {"running": {}} if running else {"waiting": {"reason": "CrashLoopBackOff"}}
        last = {"exitCode": 1, "message": f"log\n{words}\n", "finishedAt": "T"}
        return {"name": name, "state": state, "lastState": {"terminated": last}, "restartCount": 2}

    refused = failed("config-manager", "specified config x does not exist", running=True)
    lost = "error getting device memory info: ERROR_GPU_IS_LOST"
    assert device_plugin_state(_pod(refused, failed("nvidia-device-plugin", lost, running=False))) == (
        f"nvidia-device-plugin: CrashLoopBackOff (restarts 2): {lost}; "
        "config-manager restarted 2 time(s), last exit 1 at T: specified config x does not exist"
    )
    assert device_plugin_state(_pod(refused, failed("nvidia-device-plugin", lost, running=True))).endswith(
        f"; nvidia-device-plugin restarted 2 time(s), last exit 1 at T: {lost}"
    )
