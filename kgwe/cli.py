"""The one `kgwe` command. Each subcommand lives beside the code it drives and is imported only when it runs:
`kgwe --help` lists the table below without importing any of them, so `kgwe validate` stays light."""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import signal
import sys
import traceback
from typing import NamedTuple

from kgwe import __version__
from kgwe.errors import KgweError
from kgwe.safetext import EscapingStream


class Command(NamedTuple):
    """Where a subcommand lives: `module` defines `add_arguments(parser)` and `run(args) -> int`."""

    module: str
    help: str


COMMANDS: dict[str, Command] = {
    "validate": Command(
        "kgwe.fleet.validate_cmd", "check a policy repository or manifest (exit 1 on errors)"
    ),
    "schema": Command("kgwe.policy.schema_cmd", "write the JSON Schemas of the KGWE kinds (and the CRDs)"),
    "render": Command("kgwe.render.render_cmd", "render the Kubernetes objects a policy repository asks for"),
    "scheduler-config": Command(
        "kgwe.render.scheduler_config_cmd",
        "write the KGWE scheduler's starting configuration (policy or default)",
    ),
    "extender": Command(
        "kgwe.extender.extender_cmd", "kube-scheduler extender: GPU-aware filter and prioritize"
    ),
    "simulate": Command(
        "kgwe.sim.simulate_cmd", "replay the openb GPU trace through the scoring core (FGD method)"
    ),
    "agent": Command(
        "kgwe.agent.agent_cmd", "node agent: NVML GPU topology discovery -> Node annotation and labels"
    ),
    "plan-mig": Command(
        "kgwe.planner.plan_mig_cmd", "plan MIG layouts per pool: target vs achieved shares, changes"
    ),
    "plan": Command("kgwe.reconcile.plan_cmd", "what a pull request would change (Markdown; exit 0/2/1)"),
    "controller": Command(
        "kgwe.reconcile.controller_cmd", "GitOps controller: Git -> policy -> safe rollout"
    ),
    "cluster": Command(
        "kgwe.localcluster.cluster_cmd", "a local cluster to install KGWE into (root): up, status, down"
    ),
    "demo": Command("kgwe.reconcile.demo_cmd", "local control plane + simulated GPU nodes + the controller"),
    "report": Command(
        "kgwe.optimizer.report_cmd", "cost reports: chargeback, budgets, forecast, rightsizing, predictions"
    ),
    "optimize": Command(
        "kgwe.optimizer.optimize_cmd", "the workload optimizer: each model's held-out scores (report)"
    ),
    "convert": Command("kgwe.workloads.convert_cmd", "seed GPUWorkload manifests -> kgwe.nvidia.io/v1"),
    "webhook": Command(
        "kgwe.admission.webhook_cmd", "admission webhook: route GPU pods to the KGWE scheduler"
    ),
    "status": Command("kgwe.fleet.status_cmd", "the fleet: policy repositories, components, GPUs, budgets"),
    "nodes": Command("kgwe.fleet.nodes_cmd", "GPU nodes: MIG layout, allocated vs free, topology, health"),
    "workloads": Command("kgwe.fleet.workloads_cmd", "GPUWorkloads: phase, GPUs, nodes, age, cost so far"),
    "submit": Command("kgwe.fleet.submit_cmd", "validate a GPUWorkload file, then create or update it"),
    "template": Command("kgwe.fleet.template_cmd", "write a commented GPUWorkload of a workload type"),
    "watch": Command("kgwe.fleet.watch_cmd", "live view of GPU nodes and GPUWorkloads (from watches)"),
    "health": Command("kgwe.fleet.health_cmd", "per-GPU health with the reason and since when"),
    "strategy": Command("kgwe.fleet.strategy_cmd", "set the scoring strategy in a policy checkout (a diff)"),
    "hook": Command("kgwe.fleet.hook_cmd", "the chart's hooks: apply its PolicyRepository, offboard KGWE"),
}


def _chosen(argv: list[str]) -> str | None:
    """The subcommand named on the command line: the top level takes no option with a value, so it is the
    first argument that is not an option."""
    for arg in argv:
        if arg == "--":
            return None
        if not arg.startswith("-"):
            return arg if arg in COMMANDS else None
    return None


def build_parser(load: str | None = None, prog: str = "kgwe") -> argparse.ArgumentParser:
    """The parser; only the subcommand `load` (if any) has its module imported and its arguments added."""
    parser = argparse.ArgumentParser(prog=prog, description="Kubernetes GPU Workload Enhancer")
    parser.add_argument("--version", action="version", version=f"kgwe {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, command in COMMANDS.items():
        if name != load:
            sub.add_parser(name, help=command.help, add_help=False)
            continue
        module = importlib.import_module(command.module)
        p = sub.add_parser(
            name,
            help=command.help,
            description=(module.__doc__ or command.help).strip(),
            formatter_class=argparse.RawDescriptionHelpFormatter,  # keep the examples' line breaks
        )
        module.add_arguments(p)
        p.set_defaults(_run=module.run)
    return parser


def main(argv: list[str] | None = None, prog: str = "kgwe") -> int:
    """`prog` is the name help and usage show (`kubectl kgwe` when run as the kubectl plugin)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(load=_chosen(argv), prog=prog)
    args = parser.parse_args(argv)
    if not getattr(args, "_run", None):
        parser.print_help()
        return 2
    streams = sys.stdout, sys.stderr
    # What a command prints quotes names, messages and annotations others wrote: none of it may drive the
    # terminal (kgwe.safetext)
    sys.stdout, sys.stderr = EscapingStream(sys.stdout), EscapingStream(sys.stderr)
    try:
        return _run(args)
    finally:
        sys.stdout, sys.stderr = streams


def _run(args: argparse.Namespace) -> int:
    try:
        code = int(args._run(args) or 0)
        sys.stdout.flush()  # a closed pipe shows up here, not in the interpreter's exit flush
        return code
    except KgweError as exc:
        print(f"kgwe {args.command}: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print(f"kgwe {args.command}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return _stdout_closed()
    except Exception as exc:  # a user never sees a traceback unless they ask for it
        if os.environ.get("KGWE_DEBUG"):
            traceback.print_exc()
        print(
            f"kgwe {args.command}: internal error: {type(exc).__name__}: {exc}"
            " (set KGWE_DEBUG=1 for details)",
            file=sys.stderr,
        )
        return 1


def _stdout_closed() -> int:
    """The reader went away (`kgwe validate . | head -1`): stop quietly, as Unix tools do on SIGPIPE.

    Python flushes stdout again at exit; pointing it at /dev/null keeps that flush from failing too."""
    with contextlib.suppress(OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    return 128 + signal.SIGPIPE


if __name__ == "__main__":
    sys.exit(main())
