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
from kgwe.workloads.convert import convert

MAX_INPUT_BYTES = 1 << 20


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("path", help="a YAML file with one or more seed GPUWorkload manifests ('-' = stdin)")
    parser.add_argument("--out", "-o", help="write the converted manifest(s) here instead of stdout")
    parser.add_argument("--image", help="container image when the source has no pod template")


def _read(path: str) -> str:
    if path == "-":
        text = sys.stdin.read(MAX_INPUT_BYTES + 1)
    else:
        p = Path(path)
        if not p.is_file():
            raise KgweError(f"{path}: no such file")
        if p.stat().st_size > MAX_INPUT_BYTES:
            raise KgweError(f"{path}: larger than {MAX_INPUT_BYTES} bytes")
        text = p.read_text(encoding="utf-8")
    if len(text) > MAX_INPUT_BYTES:
        raise KgweError(f"{path}: larger than {MAX_INPUT_BYTES} bytes")
    return text


def run(args: argparse.Namespace) -> int:
    try:
        docs = [d for d in yaml.safe_load_all(_read(args.path)) if d is not None]
    except yaml.YAMLError as exc:
        raise KgweError(f"{args.path}: not YAML: {exc}") from None
    if not docs:
        raise KgweError(f"{args.path}: no manifest")
    out_docs = []
    for i, doc in enumerate(docs):
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
