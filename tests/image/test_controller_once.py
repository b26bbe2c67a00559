"""`kgwe controller --once` (what the image test runs) on the host: it never acts beside a running leader,
and it fails when there is nothing to reconcile or a reconcile did not apply."""

from __future__ import annotations

import argparse
from datetime import UTC, datetime

import pytest
from kubernetes import client

from kgwe.errors import KgweError
from kgwe.reconcile import controller_cmd
from kgwe.reconcile.status import Outcome
from tests.harness.crds import install_crds

pytestmark = pytest.mark.cluster


def once_args(control_plane, namespace: str, tmp_path) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    controller_cmd.add_arguments(parser)
    return parser.parse_args(
        [
            "--once",
            "--kubeconfig",
            str(control_plane.kubeconfig_path),
            "--namespace",
            namespace,
            "--cache-dir",
            str(tmp_path / "cache"),
            "--lease-duration",
            "3",
            "--renew-deadline",
            "2",
            "--retry-period",
            "0.5",
        ]
    )


def test_once_waits_for_the_lease_and_never_acts_beside_a_leader(control_plane, k8s_api, namespace, tmp_path):
    install_crds(k8s_api)
    args = once_args(control_plane, namespace, tmp_path)
    assert controller_cmd.run(args) == 1  # nothing to reconcile is a failure, not a silent success

    leases = client.CoordinationV1Api(k8s_api)
    lease = leases.read_namespaced_lease("kgwe-controller", namespace)
    assert not lease.spec.holder_identity  # given back after the run

    lease.spec.holder_identity = "the-running-leader"
    lease.spec.lease_duration_seconds = 3600
    lease.spec.renew_time = datetime.now(UTC)
    leases.replace_namespaced_lease("kgwe-controller", namespace, lease)
    with pytest.raises(KgweError, match="another controller holds it"):
        controller_cmd.run(args)
    assert (
        leases.read_namespaced_lease("kgwe-controller", namespace).spec.holder_identity
        == "the-running-leader"
    )


def test_once_exit_code_says_whether_every_repository_applied(capsys):
    applied = {"a": Outcome("ready", "applied revision x"), "b": Outcome("progressing", "MIG rollout")}
    assert controller_cmd._report_once(applied) == 0
    assert controller_cmd._report_once({**applied, "c": Outcome("invalid", "scoring.yaml:3: bad")}) == 1
    assert controller_cmd._report_once({"d": None}) == 0  # suspended: nothing asked of it
    assert "c: invalid: scoring.yaml:3: bad" in capsys.readouterr().out
