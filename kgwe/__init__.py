"""KGWE — Kubernetes GPU Workload Enhancer: GitOps control plane for GPU policy."""

__version__ = "0.1.0"
