"""Run the KGWE kube-scheduler extender (filter / prioritize over HTTP)."""

from __future__ import annotations

import argparse

from kgwe.errors import KgweError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--inventory", help="static GPUInventory YAML (no cluster)")
    parser.add_argument("--listen", default="127.0.0.1:8888", help="HOST:PORT (default 127.0.0.1:8888)")
    parser.add_argument("--kubeconfig", help="cluster mode: kubeconfig of the cluster to watch")


def run(args: argparse.Namespace) -> int:
    raise KgweError("extender: not built yet")
