"""Convert seed GPUWorkload manifests (GPU_Orchestrator gpu.warp.dev/v1alpha1, AgentaFlow agentaflow.io/v1)
into kgwe.nvidia.io/v1. Writes the manifest(s) to stdout (or --out) and, on stderr, each mapped field and
each field it could not map. The output passes `kgwe validate`.

  kgwe convert old/workload.yaml --out workload.yaml
  kgwe convert orchestrator.yaml --image nvcr.io/nvidia/pytorch:24.05-py3   # source has no pod template
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import yaml

from kgwe.errors import KgweError
from kgwe.policy.yaml_source import MAX_TEXT_BYTES, YamlSyntaxError, load_all
from kgwe.workloads.convert import convert

MAX_INPUT_BYTES = MAX_TEXT_BYTES


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("path", help="a YAML file with one or more seed GPUWorkload manifests ('-' = stdin)")
    parser.add_argument("--out", "-o", help="write the converted manifest(s) here instead of stdout")
    parser.add_argument("--image", help="container image when the source has no pod template")


def _read(path: str) -> bytes:
    """At most one byte more than the bound: the loader refuses what is over it without reading on."""
    if path == "-":
        return sys.stdin.buffer.read(MAX_INPUT_BYTES + 1)
    p = Path(path)
    if not p.is_file():
        raise KgweError(f"{path}: no such file")
    with p.open("rb") as fh:
        return fh.read(MAX_INPUT_BYTES + 1)


def run(args: argparse.Namespace) -> int:
    try:
        docs = [d for d in load_all(_read(args.path)) if d is not None]
    except YamlSyntaxError as exc:
        raise KgweError(f"{args.path}:{exc.line}:{exc.column}: not usable YAML: {exc}") from None
    if not docs:
        raise KgweError(f"{args.path}: no manifest")
    out_docs = []
    for i, doc in enumerate(docs):
        if not isinstance(doc, dict):
            raise KgweError(f"{args.path}: document {i + 1} is a {type(doc).__name__}, not a manifest")
        conv = convert(doc, image=args.image)
        name = conv.manifest.get("metadata", {}).get("name", f"document {i}")
        print(
            f"{args.path}: GPUWorkload {name} ({doc.get('apiVersion')} -> kgwe.nvidia.io/v1)", file=sys.stderr
        )
        for line in conv.report_lines():
            print(line, file=sys.stderr)
        out_docs.append(conv.manifest)
    text = yaml.safe_dump_all(out_docs, sort_keys=False, width=100)
    if args.out:
        Path(args.out).write_text(text, encoding="utf-8")
        print(f"wrote {len(out_docs)} manifest(s) to {args.out}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0
