"""KGWE — Kubernetes GPU Workload Enhancer: GitOps control plane for GPU policy."""

__version__ = "0.1.0"
API_GROUP = "kgwe.nvidia.io"
API_VERSION = f"{API_GROUP}/v1"
