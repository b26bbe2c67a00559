"""The CRD installer under its older import path (it lives in kgwe.cluster.crds)."""

from kgwe.cluster.crds import install_crds, repo_crds

__all__ = ["install_crds", "repo_crds"]
