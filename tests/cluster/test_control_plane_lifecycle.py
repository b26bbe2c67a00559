"""Starting and stopping the control plane leaves nothing behind; build prerequisites fail loudly."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from kgwe.testing.controlplane import BUILD_SCRIPT, ControlPlane, ControlPlaneError, find_binaries


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.mark.cluster
def test_stop_kills_every_process_and_removes_temp_dirs(control_plane: ControlPlane) -> None:
    cp = ControlPlane(control_plane.binaries, start_scheduler=True)
    cp.start()
    try:
        pids = cp.pids
        workdir = cp.workdir
        assert set(pids) == {"etcd", "kube-apiserver", "kube-scheduler", "kwok"}
        assert all(_alive(p) for p in pids.values())
        assert cp.version()["gitVersion"] == cp.binaries.kubernetes_version
        kept = cp.keep_logs()
    finally:
        cp.stop()
    assert not [name for name, pid in pids.items() if _alive(pid)]
    assert workdir is not None and not workdir.exists()
    assert (kept / "kube-apiserver.log").stat().st_size > 0
    shutil.rmtree(kept)


def test_build_script_without_go_says_what_to_install(tmp_path: Path) -> None:
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "KGWE_CACHE_DIR": str(tmp_path / "cache")}
    if shutil.which("go", path=env["PATH"]):
        pytest.fail("this test needs a PATH without go; /usr/bin or /bin has one")
    proc = subprocess.run(["bash", str(BUILD_SCRIPT)], env=env, capture_output=True, text=True, check=False)
    assert proc.returncode != 0
    assert "Go is not installed" in proc.stderr
    assert "go.dev/dl" in proc.stderr


def test_binary_dir_override_must_be_complete(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KGWE_K8S_BIN_DIR", str(tmp_path))
    with pytest.raises(ControlPlaneError, match="MANIFEST"):
        find_binaries()
