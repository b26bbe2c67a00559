"""The KGWE scheduler as tests and benchmarks run it: the real kube-scheduler binary as a second scheduler
(beside the harness's default one), started with the configuration KGWE renders — never a hand-built one.

`local_config` takes the rendered KubeSchedulerConfiguration text (from `kgwe render`'s pipeline or read
back from the `kgwe-scheduler-config` ConfigMap) and rewrites only what differs between a pod in the
cluster and a process on this machine: the kubeconfig, the extender's urlPrefix, the directory of the
extender client certificates, and, when asked, leader election (off where the kgwe-system namespace for
its Lease does not exist).
"""

from __future__ import annotations

import contextlib
import ssl
import subprocess
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from kgwe.localcluster.controlplane import Binaries, ControlPlaneError, free_port, stop_process_group, tail
from kgwe.policy.loader import PolicySet
from kgwe.render.render import RenderOptions, render, scheduler_config_text
from tests.harness.waiting import wait_for

IN_CLUSTER_CLIENT_DIR = "/etc/kgwe/extender-client"  # where the Deployment mounts the extender client Secret


def rendered_config_text(extender_url: str, policy: PolicySet | None = None) -> str:
    """The KubeSchedulerConfiguration KGWE renders for `policy` (none: built-in defaults)."""
    ps = policy if policy is not None else PolicySet(root=Path("."))
    return scheduler_config_text(render(ps, options=RenderOptions(extender_url=extender_url)).objects)


def _rewrite_paths(value: Any, old: str, new: str) -> Any:
    if isinstance(value, str) and value.startswith(old):
        return new + value[len(old) :]
    if isinstance(value, dict):
        return {k: _rewrite_paths(v, old, new) for k, v in value.items()}
    if isinstance(value, list):
        return [_rewrite_paths(v, old, new) for v in value]
    return value


def local_config(
    text: str,
    *,
    kubeconfig: Path,
    extender_url: str | None = None,
    client_dir: Path | None = None,
    leader_elect: bool | None = None,
    client_connection: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The rendered configuration with this machine's kubeconfig, extender URL and certificate paths."""
    config = yaml.safe_load(text)
    config["clientConnection"] = {
        **(config.get("clientConnection") or {}),
        **(client_connection or {}),
        "kubeconfig": str(kubeconfig),
    }
    for ext in config.get("extenders") or []:
        if extender_url is not None:
            ext["urlPrefix"] = extender_url
        if client_dir is not None and "tlsConfig" in ext:
            ext["tlsConfig"] = _rewrite_paths(ext["tlsConfig"], IN_CLUSTER_CLIENT_DIR, str(client_dir))
    if leader_elect is not None:
        config["leaderElection"] = {**(config.get("leaderElection") or {}), "leaderElect": leader_elect}
    return config


class LocalScheduler:
    """One kube-scheduler process with a given KubeSchedulerConfiguration; `stop()` ends it."""

    def __init__(
        self, binaries: Binaries, workdir: Path, config: Mapping[str, Any], name: str = "kgwe-scheduler"
    ):
        self.binaries = binaries
        self.workdir = Path(workdir)
        self.config = dict(config)
        self.name = name
        self.port = 0
        self.proc: subprocess.Popen | None = None
        self.log_path = self.workdir / f"{name}.log"

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def start(self, timeout_seconds: float = 120.0) -> LocalScheduler:
        self.workdir.mkdir(parents=True, exist_ok=True)
        path = self.workdir / f"{self.name}.yaml"
        path.write_text(yaml.safe_dump(self.config, sort_keys=False))
        kubeconfig = self.config["clientConnection"]["kubeconfig"]
        self.port = free_port()
        argv = [
            str(self.binaries.path("kube-scheduler")),
            f"--config={path}",
            "--bind-address=127.0.0.1",
            f"--secure-port={self.port}",
            f"--authentication-kubeconfig={kubeconfig}",
            f"--authorization-kubeconfig={kubeconfig}",
            "--authentication-skip-lookup=true",
            "--v=2",
        ]
        with self.log_path.open("ab") as log:
            log.write(f"$ {' '.join(argv)}\n".encode())
            log.flush()
            self.proc = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        ctx = ssl._create_unverified_context()  # kube-scheduler serves a self-signed cert on loopback
        proc = self.proc

        def ready() -> bool:
            if proc.poll() is not None:
                raise ControlPlaneError(
                    f"{self.name} exited with code {proc.returncode}; log {self.log_path}:\n"
                    f"{tail(self.log_path, 15)}"
                )
            with (
                contextlib.suppress(OSError),
                urllib.request.urlopen(f"https://127.0.0.1:{self.port}/readyz", timeout=5, context=ctx) as r,
            ):
                return r.status == 200
            return False

        try:
            wait_for(f"{self.name} ready", ready, timeout_seconds, describe=lambda: tail(self.log_path, 15))
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        if self.proc is not None:
            stop_process_group(self.proc)
