"""The chart's Helm hooks, also run by hand around `kubectl delete -k deploy/` (docs/install.md "Uninstall"):

  policy-repository  create or update the chart's PolicyRepository in place (post-install/post-upgrade)
  pre-delete         delete the namespace's PolicyRepositories and wait while the controller releases what
                     KGWE wrote, each as its spec.deletionPolicy says; exit 1 naming what is still held
                     (a GPU a pod holds keeps its node's labels until it is free) — KGWE keeps releasing
  post-delete        once KGWE's pods are gone: remove what the agent wrote on nodes and the GPUWorkload
                     controller's kgwe-workloads RoleBindings

examples:
  kgwe hook pre-delete -n kgwe-system --wait-seconds 600
  kubectl delete -k deploy/
  kgwe hook post-delete -n kgwe-system --agent-namespace gpu-operator
"""

from __future__ import annotations

import argparse
import json
import sys

from kgwe.errors import KgweError
from kgwe.fleet.cluster import add_cluster_arguments
from kgwe.vocab import GPU_OPERATOR_NAMESPACE


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="stage", required=True, metavar="STAGE")
    apply = sub.add_parser(
        "policy-repository", help="create or update a PolicyRepository (server-side apply)"
    )
    apply.add_argument("--manifest", required=True, help="the PolicyRepository as JSON")
    pre = sub.add_parser("pre-delete", help="release every PolicyRepository of the namespace, and wait")
    pre.add_argument("--wait-seconds", type=float, default=240.0, help="how long to wait (default: 240)")
    post = sub.add_parser("post-delete", help="remove the agent's node marks and KGWE's RoleBindings")
    post.add_argument(
        "--agent-namespace",
        default=GPU_OPERATOR_NAMESPACE,
        help="where the agent ran (default: gpu-operator)",
    )
    post.add_argument("--wait-seconds", type=float, default=120.0, help="how long KGWE's pods may take to go")
    for p in (apply, pre, post):
        add_cluster_arguments(p)


def run(args: argparse.Namespace) -> int:
    from kgwe.fleet import hooks
    from kgwe.fleet.cluster import Fleet

    fleet = Fleet(args)

    def say(text: str) -> None:
        print(f"kgwe hook {args.stage}: {text}", file=sys.stderr, flush=True)

    if args.stage == "policy-repository":
        try:
            manifest = json.loads(args.manifest)
        except ValueError as exc:
            raise KgweError(f"--manifest is not JSON: {exc}") from None
        if not isinstance(manifest, dict):
            raise KgweError("--manifest is not a JSON object")
        with fleet.reading("apply the PolicyRepository", crd="PolicyRepository"):
            say(hooks.policy_repository(fleet.api, manifest))
        return 0
    if args.stage == "pre-delete":
        with fleet.reading("release the PolicyRepositories"):
            held = hooks.release(fleet.api, fleet.namespace, args.wait_seconds, say)
        if held:
            say(
                f"not released within {args.wait_seconds:g} s: {'; '.join(held)}. KGWE keeps releasing; run "
                "the uninstall again once they are gone (kubectl get policyrepositories), or set "
                "spec.deletionPolicy: Retain on one to leave what it wrote in place"
            )
            return 1
        say("every PolicyRepository released")
        return 0
    with fleet.reading("remove KGWE's leftovers"):
        done = hooks.leftovers(fleet.api, (fleet.namespace, args.agent_namespace), args.wait_seconds, say)
    say(f"removed the agent's marks from {len(done.nodes)} node(s), {len(done.role_bindings)} RoleBinding(s)")
    return 0
