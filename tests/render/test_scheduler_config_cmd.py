"""`kgwe scheduler-config`, the kgwe-scheduler pods' init container: the policy's configuration when it is
fit to run, else the one KGWE renders for its default ScoringProfile — which the real kube-scheduler runs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from kgwe.cli import main
from kgwe.policy import load_repository
from kgwe.policy.loader import PolicySet
from kgwe.render.render import RenderOptions, render, scheduler_config_text, standalone_extender_url
from kgwe.render.scheduler_config import config_problem
from kgwe.resources import sample_repo_dir
from kgwe.vocab import DEFAULT_PERCENTAGE_OF_NODES_TO_SCORE
from tests.harness.kgwe_scheduler import LocalScheduler, local_config

ROOT = Path(__file__).resolve().parents[2]


def run(*args: str) -> subprocess.CompletedProcess[str]:
    """The init container's own process (the first test); the others call the same command in-process."""
    return subprocess.run(
        [sys.executable, "-m", "kgwe.cli", "scheduler-config", *args],
        capture_output=True, text=True, cwd=ROOT, timeout=60,
    )  # fmt: skip


def run_here(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    """`kgwe scheduler-config ARGS` in this process: its exit code and what it wrote to stderr."""
    code = main(["scheduler-config", *args])
    return code, capsys.readouterr().err


def test_without_a_policy_it_writes_what_kgwe_renders_for_the_default_scoring_profile(tmp_path):
    out = tmp_path / "run" / "scheduler-config.yaml"
    proc = run("--out", str(out), "--policy-config", str(tmp_path / "absent.yaml"), "--namespace", "kgwe-ns")
    assert proc.returncode == 0, proc.stderr
    assert "no kgwe-scheduler-config yet: KGWE's default configuration" in proc.stderr
    text = out.read_text()
    expected = scheduler_config_text(
        render(PolicySet(root=Path(".")), options=RenderOptions(namespace="kgwe-ns")).objects
    )
    assert text == expected and config_problem(text) is None
    config = yaml.safe_load(text)
    assert config["percentageOfNodesToScore"] == DEFAULT_PERCENTAGE_OF_NODES_TO_SCORE
    assert config["leaderElection"]["resourceNamespace"] == "kgwe-ns"
    assert config["extenders"][0]["urlPrefix"] == "http://127.0.0.1:8888"


def test_the_policy_configuration_is_used_as_is_and_a_broken_one_is_not(tmp_path, capsys):
    policy = tmp_path / "policy.yaml"
    rendered = render(load_repository(sample_repo_dir()), options=RenderOptions(namespace="kgwe-ns"))
    policy.write_text(scheduler_config_text(rendered.objects))
    out = tmp_path / "config.yaml"
    code, err = run_here(capsys, "--out", str(out), "--policy-config", str(policy))
    assert code == 0 and "the policy's configuration from kgwe-scheduler-config" in err
    assert out.read_bytes() == policy.read_bytes()
    policy.write_text("apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n")
    code, err = run_here(capsys, "--out", str(out), "--policy-config", str(policy), "--namespace", "kgwe-ns")
    assert code == 0
    assert "has no profile with schedulerName 'kgwe-scheduler'" in err and "default" in err
    assert config_problem(out.read_text()) is None


def test_with_the_standalone_extender_it_waits_for_the_client_certificate(tmp_path, capsys):
    client = tmp_path / "client"
    args = (
        "--out", str(tmp_path / "c.yaml"), "--extender-url", standalone_extender_url("ns"),
        "--extender-client-cert-dir", str(client), "--wait-seconds", "0.5",
    )  # fmt: skip
    code, err = run_here(capsys, *args)
    assert code == 1 and "Traceback" not in err
    assert "waiting for" in err and "still missing" in err
    assert not (tmp_path / "c.yaml").exists()
    client.mkdir()
    for name in ("tls.crt", "tls.key", "ca.crt"):
        (client / name).write_text("x")
    code, err = run_here(capsys, *args)
    assert code == 0, err
    tls = yaml.safe_load((tmp_path / "c.yaml").read_text())["extenders"][0]["tlsConfig"]
    assert tls["certFile"] == f"{client}/tls.crt"


def test_the_real_kube_scheduler_starts_with_the_default_configuration(control_plane, tmp_path):
    out = tmp_path / "config.yaml"
    assert run("--out", str(out), "--namespace", "kube-system").returncode == 0
    config = local_config(out.read_text(), kubeconfig=control_plane.kubeconfig_path, leader_elect=False)
    scheduler = LocalScheduler(control_plane.binaries, tmp_path, config, name="kgwe-scheduler-default")
    scheduler.start()  # raises with the scheduler's log when it refuses the configuration
    scheduler.stop()
