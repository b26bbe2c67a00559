"""Policy as code: the KGWE kinds (pydantic v2), the repository loader and its cross-object checks.

Import the kinds from here (`from kgwe.policy import MIGStrategy, GPUInventory`) and load a repository with
`load_repository(path)`, which returns a `PolicySet` holding objects by kind plus every diagnostic with
file:line:column and a field path.
"""

from __future__ import annotations

from kgwe.policy.diagnostics import Diagnostic
from kgwe.policy.loader import LoadedObject, PolicySet, load_repository
from kgwe.policy.models import *  # noqa: F403
from kgwe.policy.models import __all__ as _model_names

__all__ = [*_model_names, "Diagnostic", "LoadedObject", "PolicySet", "load_repository"]
