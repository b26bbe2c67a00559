"""KGWE installed as a person installs it on the local cluster's GPU node (`kgwe cluster up --gpu-profile`):
the seed `helm install`, a policy repository served over https from the host (its private CA given to the
controller by `helm upgrade`), a PolicyRepository syncing it. For the end-to-end tests and
bench/nvidia_stack.py.

    with KgweOnGpuNode(kubeconfig, tmp_path) as kgwe:
        kgwe.commit({"sharing/ts.yaml": TEXT}, "share")
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from kgwe.localcluster.controlplane import host_ip
from kgwe.localcluster.gitserver import GitHttpsServer
from kgwe.vocab import (
    API_GROUP,
    CRD_VERSION,
    KGWE_NAMESPACE,
    POLICY_REPOSITORY_PLURAL,
    SCHEDULING_ENABLED,
    SCHEDULING_NAMESPACE_LABEL,
    WORKLOADS_ENABLED,
    WORKLOADS_NAMESPACE_LABEL,
)
from tests.harness.chart import CHART_DIR, helm
from tests.harness.gitcli import git
from tests.harness.waiting import wait_for

REPOSITORY = "gpu-policy"
H100_PRICE = "4.10"
POLICY = {
    "scoring/default.yaml": (
        "apiVersion: kgwe.nvidia.io/v1\nkind: ScoringProfile\nmetadata:\n  name: default\nspec:\n"
        "  default: true\n  strategy: BestFit\n"
    ),
    "pricing/catalog.yaml": (
        "apiVersion: kgwe.nvidia.io/v1\nkind: PricingCatalog\nmetadata:\n  name: default\nspec:\n"
        "  currency: USD\n  gpus:\n"
        f'    - {{product: NVIDIA-H100-80GB-HBM3, onDemandPerHour: "{H100_PRICE}"}}\n'
    ),
}


def sharing_strategy(name: str, replicas: int, node: str) -> str:
    """A GPUSharingStrategy time-slicing the named node's GPUs `replicas` ways (switch when idle)."""
    return (
        f"apiVersion: kgwe.nvidia.io/v1\nkind: GPUSharingStrategy\nmetadata:\n  name: {name}\nspec:\n"
        f"  nodeSelector: {{kubernetes.io/hostname: {node}}}\n  mode: TimeSlicing\n  replicas: {replicas}\n"
        "  rollout: {maxUnavailable: 1, drain: false, pendingTimeout: 10m}\n"
    )


class KgweOnGpuNode:
    def __init__(self, kubeconfig: Path, workdir: Path, helm_sets: tuple[str, ...] = ()) -> None:
        self.kubeconfig = kubeconfig
        self.workdir = workdir
        self.api = config.new_client_from_config(config_file=str(kubeconfig))
        self.env = {
            "KUBECONFIG": str(kubeconfig),
            **{f"HELM_{k}_HOME": str(workdir / f"helm-{k.lower()}") for k in ("CACHE", "CONFIG", "DATA")},
        }
        self.helm_sets = helm_sets
        self.server: GitHttpsServer | None = None
        self.install_seconds = 0.0

    # ---- install -------------------------------------------------------------------------------------
    def __enter__(self) -> KgweOnGpuNode:
        try:
            self._install()
        except BaseException:
            self.__exit__()
            raise
        return self

    def _install(self) -> None:
        import time

        seed = ("install", "kgwe", str(CHART_DIR), "--namespace", KGWE_NAMESPACE, "--create-namespace",
                "--set", "scheduler.enabled=true", "--set", "migController.enabled=true")  # fmt: skip
        sets = [x for s in self.helm_sets for x in ("--set", s)]
        started = time.monotonic()
        out = helm(*seed, *sets, "--wait", "--timeout", "10m", env=self.env, check=False)
        self.install_seconds = time.monotonic() - started
        if out.returncode != 0:
            raise RuntimeError(f"helm install failed: {out.stderr}")
        bare, self.checkout = self.workdir / "policy.git", self.workdir / "policy"
        git(self.workdir, "init", "-q", "--bare", "-b", "main", str(bare))
        git(self.workdir, "clone", "-q", str(bare), str(self.checkout))
        self.commit(POLICY, "policy")
        self.server = GitHttpsServer(self.workdir, host=host_ip()).start()
        core = client.CoreV1Api(self.api)
        core.create_namespaced_secret(
            KGWE_NAMESPACE,
            {
                "metadata": {"name": "host-git-ca"},
                "stringData": {"ca.crt": Path(self.server.ca_file).read_text()},
            },
        )
        upgrade = helm(
            "upgrade", "kgwe", str(CHART_DIR), "--namespace", KGWE_NAMESPACE, "--reuse-values",
            "--set", "migController.gitCASecretName=host-git-ca", "--wait", "--timeout", "5m",
            env=self.env, check=False,
        )  # fmt: skip
        if upgrade.returncode != 0:
            raise RuntimeError(f"helm upgrade failed: {upgrade.stderr}")
        spec = {
            "url": self.server.url("policy.git"),
            "ref": {"branch": "main"},
            "interval": "5s",
            "timeout": "20s",
        }
        client.CustomObjectsApi(self.api).create_namespaced_custom_object(
            API_GROUP, CRD_VERSION, KGWE_NAMESPACE, POLICY_REPOSITORY_PLURAL,
            {"apiVersion": f"{API_GROUP}/{CRD_VERSION}", "kind": "PolicyRepository",
             "metadata": {"name": REPOSITORY}, "spec": spec},
        )  # fmt: skip
        wait_for("the PolicyRepository Ready", lambda: self.condition("Ready").get("status") == "True", 300,
                 describe=lambda: str(self.repository().get("status")))  # fmt: skip

    def __exit__(self, *exc: object) -> None:
        helm(
            "uninstall",
            "kgwe",
            "--namespace",
            KGWE_NAMESPACE,
            "--wait",
            "--timeout",
            "5m",
            env=self.env,
            check=False,
        )
        with contextlib.suppress(ApiException):
            client.CoreV1Api(self.api).delete_namespace(KGWE_NAMESPACE)
        if self.server is not None:
            self.server.stop()

    # ---- the policy repository ---------------------------------------------------------------------
    def commit(self, files: dict[str, str | None], message: str) -> str:
        """Write (or, None, remove) files in the policy repository and push; returns the commit."""
        for name, text in files.items():
            path = self.checkout / name
            if text is None:
                path.unlink(missing_ok=True)
            else:
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(text)
        git(self.checkout, "add", "-A")
        git(self.checkout, "commit", "-qm", message)
        git(self.checkout, "push", "-q", "origin", "HEAD:main")
        return git(self.checkout, "rev-parse", "HEAD")

    def repository(self) -> dict[str, Any]:
        obj: dict[str, Any] = client.CustomObjectsApi(self.api).get_namespaced_custom_object(
            API_GROUP, CRD_VERSION, KGWE_NAMESPACE, POLICY_REPOSITORY_PLURAL, REPOSITORY
        )
        return obj

    def condition(self, kind: str) -> dict[str, Any]:
        conditions = (self.repository().get("status") or {}).get("conditions") or []
        return next((c for c in conditions if c["type"] == kind), {})

    def opted_in_namespace(self, name: str) -> str:
        """A namespace whose GPU pods KGWE's scheduler places and whose GPUWorkloads its controller runs."""
        labels = {
            SCHEDULING_NAMESPACE_LABEL: SCHEDULING_ENABLED,
            WORKLOADS_NAMESPACE_LABEL: WORKLOADS_ENABLED,
        }
        client.CoreV1Api(self.api).create_namespace({"metadata": {"name": name, "labels": labels}})
        return name
