"""Convert seed GPUWorkload manifests (GPU_Orchestrator gpu.warp.dev/v1alpha1, AgentaFlow agentaflow.io/v1)
into kgwe.nvidia.io/v1. Writes the manifest(s) to stdout (or --out) and, on stderr, each mapped field, each
field it could not map, and what the converted workload still needs before the controller admits it (a
ScoringProfile with its strategy, a PriorityClass, a WorkloadRuntime), checked against the policy
repository given with --policy. --suggest DIR writes a ScoringProfile and PriorityClass for what is missing.

  kgwe convert old/workload.yaml --out workload.yaml
  kgwe convert orchestrator.yaml --image nvcr.io/nvidia/pytorch:25.12-py3   # source has no pod template
  kgwe convert orchestrator.yaml --runtime torch-distributed --policy ~/gpu-policy --suggest suggested/
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from kgwe.errors import KgweError
from kgwe.policy.yaml_source import MAX_TEXT_BYTES, YamlSyntaxError, load_all
from kgwe.workloads.convert import convert

if TYPE_CHECKING:  # the policy models load only when a conversion is checked against a policy
    from kgwe.policy.admission import Finding, PolicyView

MAX_INPUT_BYTES = MAX_TEXT_BYTES


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("path", help="a YAML file with one or more seed GPUWorkload manifests ('-' = stdin)")
    parser.add_argument("--out", "-o", help="write the converted manifest(s) here instead of stdout")
    parser.add_argument("--image", help="container image when the source has no pod template")
    parser.add_argument("--runtime", help="or: the WorkloadRuntime whose template such a workload's pods get")
    parser.add_argument(
        "--policy", metavar="DIR", help="the policy repository the result must fit (profiles, runtimes)"
    )
    parser.add_argument(
        "--suggest",
        metavar="DIR",
        help="write a ScoringProfile (for the policy repository) and a PriorityClass (for the cluster) for "
        "what the converted workloads still need",
    )


def _read(path: str) -> bytes:
    """At most one byte more than the bound: the loader refuses what is over it without reading on."""
    if path == "-":
        return sys.stdin.buffer.read(MAX_INPUT_BYTES + 1)
    p = Path(path)
    if not p.is_file():
        raise KgweError(f"{path}: no such file")
    with p.open("rb") as fh:
        return fh.read(MAX_INPUT_BYTES + 1)


def _needs(manifest: dict[str, Any], policy: PolicyView | None) -> list[Finding]:
    """What would still keep the converted workload from being admitted (kgwe.policy.admission)."""
    from kgwe.policy.admission import ClusterView, PolicyView, findings
    from kgwe.policy.gpu_workload import GPUWorkload

    wl = GPUWorkload.model_validate(manifest)
    namespace = wl.metadata.namespace if wl.metadata else None
    return findings(wl, namespace, policy or PolicyView(), ClusterView())


def _write_suggestions(
    directory: Path, manifests: list[dict[str, Any]], policy: PolicyView | None
) -> list[Path]:
    from kgwe.policy.admission import profiles_of
    from kgwe.workloads.convert import suggested_priority_class, suggested_scoring_profile

    directory.mkdir(parents=True, exist_ok=True)
    have = (
        set(profiles_of(policy.profiles).values())
        if policy is not None and policy.profiles is not None
        else set()
    )
    written: list[Path] = []
    for manifest in manifests:
        spec = manifest["spec"]
        strategy = spec.get("schedulingStrategy")
        if strategy and strategy not in have:
            doc = suggested_scoring_profile(strategy)
            path = directory / f"scoringprofile-{doc['metadata']['name']}.yaml"
            header = (
                f"# A ScoringProfile serving strategy {strategy}, for the policy repository (scoring/).\n"
                "# With several profiles one must be `default: true` (docs/spec/scoringprofile.md).\n"
            )
            path.write_text(header + yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
            written.append(path)
            have.add(strategy)
        priority = spec.get("priority")
        if isinstance(priority, str):
            doc = suggested_priority_class(priority)
            path = directory / f"priorityclass-{priority}.yaml"
            header = (
                "# A PriorityClass for the cluster (kubectl apply -f), not for the policy repository.\n"
                "# The value is a starting point: higher preempts lower; fit it to the classes you have.\n"
            )
            path.write_text(header + yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
            written.append(path)
    return written


def run(args: argparse.Namespace) -> int:
    try:
        docs: list[Any] = [d for d in load_all(_read(args.path)) if d is not None]
    except YamlSyntaxError as exc:
        raise KgweError(f"{args.path}:{exc.line}:{exc.column}: not YAML: {exc}") from None
    if not docs:
        raise KgweError(f"{args.path}: no manifest")
    policy = None
    if args.policy:
        from kgwe.policy.checks import workload_policy_view
        from kgwe.policy.loader import load_repository

        repo = load_repository(args.policy)
        if not repo.ok:
            for d in repo.errors:
                print(d, file=sys.stderr)
            raise KgweError(f"{args.policy}: the policy repository has errors")
        policy = workload_policy_view(repo)
    out_docs = []
    for i, doc in enumerate(docs):
        if not isinstance(doc, dict):
            raise KgweError(f"{args.path}: document {i + 1} is a {type(doc).__name__}, not a manifest")
        conv = convert(doc, image=args.image, runtime=args.runtime)
        name = conv.manifest.get("metadata", {}).get("name", f"document {i}")
        print(
            f"{args.path}: GPUWorkload {name} ({doc.get('apiVersion')} -> kgwe.nvidia.io/v1)", file=sys.stderr
        )
        for line in conv.report_lines():
            print(line, file=sys.stderr)
        for need in _needs(conv.manifest, policy):
            kind = "STILL NEEDS" if need.severity == "error" else "may need"
            print(f"  {kind}: {need.message}", file=sys.stderr)
        out_docs.append(conv.manifest)
    text = yaml.safe_dump_all(out_docs, sort_keys=False, width=100)
    if args.out:
        Path(args.out).write_text(text, encoding="utf-8")
        print(f"wrote {len(out_docs)} manifest(s) to {args.out}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    if args.suggest:
        for path in _write_suggestions(Path(args.suggest), out_docs, policy):
            print(f"suggested {path}", file=sys.stderr)
    return 0
