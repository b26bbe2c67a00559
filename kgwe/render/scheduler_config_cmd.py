"""Write the configuration the KGWE scheduler starts with (the init container of each kgwe-scheduler pod):

    kgwe scheduler-config --policy-config /etc/kgwe/policy/scheduler-config.yaml \
        --out /etc/kubernetes/kgwe-scheduler/scheduler-config.yaml

The configuration the controller rendered from policy (the ConfigMap kgwe-scheduler-config, mounted as an
optional volume at --policy-config) when it exists and passes the controller's own check; otherwise the one
KGWE renders for its default ScoringProfile, with the same options the controller renders with (so before
any PolicyRepository has synced the scheduler runs, and a policy's configuration reaches it through the
config-hash annotation the controller stamps on the Deployment, as ever). When the configuration calls the
extender with a client certificate, it waits until those files exist: kube-scheduler reads them at start.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from kgwe.errors import KgweError
from kgwe.vocab import KGWE_NAMESPACE, SCHEDULER_CONFIG_KEY, SCHEDULER_CONFIGMAP

WAIT_LOG_SECONDS = 30.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from kgwe.render.render import DEFAULT_EXTENDER_URL

    parser.add_argument("--out", type=Path, required=True, help="where kube-scheduler's --config reads it")
    parser.add_argument(
        "--policy-config",
        type=Path,
        help=f"the policy's configuration ({SCHEDULER_CONFIGMAP}'s key {SCHEDULER_CONFIG_KEY}), if present",
    )
    parser.add_argument(
        "--namespace",
        default=os.environ.get("POD_NAMESPACE", KGWE_NAMESPACE),
        help="KGWE's namespace (the scheduler's leader-election Lease)",
    )
    parser.add_argument("--extender-url", default=DEFAULT_EXTENDER_URL, help="urlPrefix of the KGWE extender")
    parser.add_argument(
        "--extender-client-cert-dir",
        metavar="DIR",
        help="kube-scheduler's client certificate for an https:// extender (DIR/tls.crt, tls.key, ca.crt)",
    )
    parser.add_argument(
        "--wait-seconds",
        type=float,
        default=0,
        help="how long to wait for the client certificate files (0: as long as it takes)",
    )


def default_config_text(namespace: str, extender_url: str, client_cert_dir: str | None) -> str:
    """The KubeSchedulerConfiguration KGWE renders for its default ScoringProfile."""
    from kgwe.policy.loader import PolicySet
    from kgwe.render.render import RenderOptions, extender_client_cert_dir, render, scheduler_config_text

    options = RenderOptions(
        namespace=namespace,
        extender_url=extender_url,
        extender_client_cert_dir=extender_client_cert_dir(extender_url, client_cert_dir),
    )
    return scheduler_config_text(render(PolicySet(root=Path(".")), options=options).objects)


def chosen_config(policy_path: Path | None, default: str) -> tuple[str, str]:
    """(text, where it came from): the policy's configuration if it is fit to run, else the default."""
    from kgwe.render.scheduler_config import config_hash, config_problem

    if policy_path is None or not policy_path.is_file():
        return default, f"no {SCHEDULER_CONFIGMAP} yet: KGWE's default configuration ({config_hash(default)})"
    try:
        text = policy_path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        return default, f"{policy_path} unreadable ({exc}): KGWE's default configuration instead"
    problem = config_problem(text)
    if problem is not None:
        return default, f"{SCHEDULER_CONFIGMAP} {problem}: KGWE's default configuration instead"
    return text, f"the policy's configuration from {SCHEDULER_CONFIGMAP} ({config_hash(text)})"


def client_files(text: str) -> list[Path]:
    """The certificate files the configuration makes kube-scheduler read at start."""
    import yaml

    config = yaml.safe_load(text) or {}
    files = []
    for ext in config.get("extenders") or []:
        tls = (ext or {}).get("tlsConfig") or {}
        files += [Path(tls[k]) for k in ("certFile", "keyFile", "caFile") if tls.get(k)]
    return files


def wait_for(files: list[Path], wait_seconds: float) -> None:
    deadline = time.monotonic() + wait_seconds if wait_seconds > 0 else float("inf")
    said = float("-inf")
    while missing := [str(f) for f in files if not f.is_file()]:
        if time.monotonic() >= deadline:
            raise KgweError(f"the extender client certificate is still missing: {', '.join(missing)}")
        if time.monotonic() - said >= WAIT_LOG_SECONDS:
            said = time.monotonic()
            print(
                f"kgwe scheduler-config: waiting for {', '.join(missing)} (the Secret mounted there is "
                "written by the KGWE controller or cert-manager)",
                file=sys.stderr,
                flush=True,
            )
        time.sleep(1.0)


def run(args: argparse.Namespace) -> int:
    default = default_config_text(args.namespace, args.extender_url, args.extender_client_cert_dir)
    text, source = chosen_config(args.policy_config, default)
    print(f"kgwe scheduler-config: {source}", file=sys.stderr, flush=True)
    wait_for(client_files(text), args.wait_seconds)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.out.with_name(args.out.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, args.out)
    print(f"kgwe scheduler-config: wrote {args.out}", file=sys.stderr, flush=True)
    return 0
