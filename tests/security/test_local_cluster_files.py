"""Root writing where others can: `kgwe cluster up` runs as root, so every directory it writes in must be
root's alone, no file is written through a planted link, keys are 0600 from their first byte, and `kgwe
cluster down` removes only what its own node made when another node shares the host.

"Another user" is uid 65534 (nobody); what it plants is made here as root and handed over with chown."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from kgwe.cli import main
from kgwe.errors import KgweError
from kgwe.localcluster import cluster_cmd, hoststate
from kgwe.localcluster.controlplane import Binaries, ControlPlane, ControlPlaneError
from kgwe.localcluster.pki import write_pki
from tests.harness.waiting import wait_for

NOBODY = 65534
KEYS = ("ca.key", "apiserver.key", "admin.key", "sa.key")


def _owned_by_nobody(path: Path, mode: int = 0o777) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    os.chown(path, NOBODY, NOBODY)
    path.chmod(mode)
    return path


@pytest.fixture
def shared_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A directory like /tmp (root's, sticky, writable by all) as the temporary directory, where another
    user made the fixed name KGWE used for kept logs before root did."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    tmp.chmod(0o1777)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    monkeypatch.delenv("KGWE_LOG_DIR", raising=False)
    _owned_by_nobody(tmp / "kgwe-control-plane-logs")
    return tmp


def _failing_control_plane(tmp_path: Path) -> ControlPlane:
    """A control plane whose etcd exits at once, writing a log line: start() fails and keeps the logs."""
    bins = tmp_path / "bins"
    bins.mkdir()
    etcd = bins / "etcd"
    etcd.write_text("#!/bin/sh\necho 'etcd: secret-bearing log line' >&2\nexit 1\n")
    etcd.chmod(0o755)
    return ControlPlane(Binaries(bins, "v0.0.0", {}), start_scheduler=False, start_controller_manager=False)


def _private_all_the_way(path: Path) -> None:
    """`path` and every directory above it: root's, no link, not writable by others unless sticky."""
    here = Path("/")
    for part in path.parts[1:]:
        here = here / part
        st = os.lstat(here)
        assert not stat.S_ISLNK(st.st_mode) and st.st_uid == 0, here
        writable = st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
        assert not writable or (st.st_mode & stat.S_ISVTX and here != path), here
    assert stat.S_IMODE(os.lstat(path).st_mode) == 0o700


def test_kept_logs_go_to_a_private_directory_never_a_name_another_user_made_first(shared_tmp, tmp_path):
    cp = _failing_control_plane(tmp_path)
    with pytest.raises(ControlPlaneError) as failed:
        cp.start(attempts=1)
    kept = Path(str(failed.value).rsplit("full component logs kept in ", 1)[1].rstrip(")"))
    assert list((shared_tmp / "kgwe-control-plane-logs").iterdir()) == []  # nothing in the planted one
    _private_all_the_way(kept)
    log = kept / "etcd.log"
    assert "secret-bearing" in log.read_text() and stat.S_IMODE(log.stat().st_mode) == 0o600


@pytest.mark.parametrize("planted", ["owned by another user", "a link to another user's directory"])
def test_a_log_directory_another_user_controls_is_refused(tmp_path, monkeypatch, planted):
    theirs = _owned_by_nobody(tmp_path / "theirs", 0o755)
    if planted == "owned by another user":
        monkeypatch.setenv("KGWE_LOG_DIR", str(theirs))
    else:
        (tmp_path / "logs").symlink_to(theirs)
        monkeypatch.setenv("KGWE_LOG_DIR", str(tmp_path / "logs"))
    cp = _failing_control_plane(tmp_path)
    with pytest.raises(ControlPlaneError, match=r"component logs not kept: .*(owned by uid 65534|link)"):
        cp.start(attempts=1)
    assert list(theirs.iterdir()) == []


def test_keys_are_created_exclusively_never_through_a_planted_link(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("root's file\n")
    pki = tmp_path / "pki"
    pki.mkdir()
    for name in (*KEYS, "ca.crt"):
        (pki / name).symlink_to(victim)
    write_pki(pki)
    assert victim.read_text() == "root's file\n"
    for name in KEYS:
        st = os.lstat(pki / name)
        assert stat.S_ISREG(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o600, name
        assert b"PRIVATE KEY" in (pki / name).read_bytes()
    assert stat.S_ISREG(os.lstat(pki / "ca.crt").st_mode)


@pytest.mark.parametrize("where", ["owned by another user", "under a directory another user owns", "a link"])
def test_cluster_up_refuses_a_dir_root_does_not_own_alone(tmp_path, where, capsys):
    if where == "owned by another user":
        directory = _owned_by_nobody(tmp_path / "theirs", 0o700)
    elif where == "under a directory another user owns":
        directory = _owned_by_nobody(tmp_path / "theirs", 0o755) / "cluster"
    else:
        (tmp_path / "link").symlink_to(_owned_by_nobody(tmp_path / "theirs", 0o700))
        directory = tmp_path / "link"
    with pytest.raises(KgweError, match="only root can write"):
        cluster_cmd._prepare_directory(directory)
    assert not (directory / cluster_cmd.REQUEST_FILE).exists()
    # the command says so in one line before it touches anything (no lock taken, nothing built)
    assert main(["cluster", "up", "--dir", str(directory)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("kgwe cluster: error: --dir ") and "only root can write" in err, err
    assert not (directory / cluster_cmd.REQUEST_FILE).exists()


# ---- another node on the host ---------------------------------------------------------------------------


@pytest.fixture
def host_lock(host_free_of_real_node) -> Iterator[None]:
    """The host's real-node lock, held by this test: no real node starts (or sweeps) meanwhile."""
    from kgwe.localcluster.realnode import NodeLock
    from tests.harness.pytest_cluster import REAL_NODE_LOCK_WAIT_SECONDS

    lock = NodeLock()
    lock.acquire(REAL_NODE_LOCK_WAIT_SECONDS)
    yield
    lock.release()


@pytest.fixture
def another_kubelet(tmp_path, host_lock) -> Iterator[subprocess.Popen[bytes]]:
    """A process the host knows as `kubelet` (it is sleep), which is not the local cluster's."""
    program = tmp_path / "other-node" / "kubelet"
    program.parent.mkdir()
    shutil.copy("/bin/sleep", program)
    proc = subprocess.Popen([str(program), "600"])
    yield proc
    proc.kill()
    proc.wait()


@pytest.mark.realnode
def test_a_node_program_that_exited_and_awaits_its_reaper_is_no_other_node(tmp_path, another_kubelet):
    """A killed node's daemons are zombies until the host's init reaps them (some inits take seconds): they
    keep their name but hold nothing, so `cluster down` right after must not take them for another node."""
    from kgwe.localcluster.realnode import EXCLUSIVE_PROGRAMS, foreign_node_programs

    program = tmp_path / "exited" / "kubelet"
    program.parent.mkdir()
    shutil.copy("/bin/true", program)
    exited = subprocess.Popen([str(program)])
    state = Path(f"/proc/{exited.pid}/stat")
    wait_for("a zombie", lambda: state.read_text().rsplit(")", 1)[1].split()[0] == "Z")
    try:
        assert foreign_node_programs(None, EXCLUSIVE_PROGRAMS) == [f"kubelet (pid {another_kubelet.pid})"]
    finally:
        exited.wait()


@pytest.mark.realnode
def test_down_leaves_what_another_node_on_the_host_uses(tmp_path, another_kubelet):
    from kgwe.localcluster.realnode import (
        EXCLUSIVE_PROGRAMS,
        RECORD_FILE,
        NodeRecord,
        foreign_node_programs,
        sweep_recorded,
    )

    assert foreign_node_programs(None, EXCLUSIVE_PROGRAMS) == [f"kubelet (pid {another_kubelet.pid})"]
    snapshot = hoststate.take_snapshot()
    made = [p for p in (Path("/var/lib/kubelet"), Path("/var/log/pods")) if not p.exists()]
    # what a crashed `kgwe cluster up` left to sweep; then the other node's pod, which came after
    workdir = tmp_path / "node"
    workdir.mkdir()
    record = NodeRecord(
        pid=2**22 + 1, owner="kgwe cluster up", started="", workdir=str(workdir), snapshot=snapshot
    )
    RECORD_FILE.write_text(record.to_json())
    pod = "other-node-pod-0b9f"
    log = Path("/var/log/pods") / pod / "main" / "0.log"
    log.parent.mkdir(parents=True)
    log.write_text("the other node's pod log\n")
    volume = Path("/var/lib/kubelet/pods") / pod / "volumes" / "scratch"
    volume.mkdir(parents=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(volume)], check=True)
    try:
        problems = sweep_recorded()  # what `kgwe cluster down` runs, with the lock held
        assert problems and any(f"kubelet (pid {another_kubelet.pid})" in p for p in problems), problems
        assert log.read_text() == "the other node's pod log\n"
        assert volume in hoststate.mounts_under([volume])
        assert another_kubelet.poll() is None
        assert not workdir.exists() and not RECORD_FILE.exists()  # what was the local cluster's alone: gone
    finally:
        hoststate.unmount_under([volume])
        shutil.rmtree(Path("/var/log/pods") / pod, ignore_errors=True)
        shutil.rmtree(Path("/var/lib/kubelet/pods") / pod, ignore_errors=True)
        for path in made:
            shutil.rmtree(path, ignore_errors=True)
        RECORD_FILE.unlink(missing_ok=True)
