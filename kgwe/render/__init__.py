"""Rendering: validated policy + a GPU inventory -> the Kubernetes objects KGWE applies (via templates/)."""

from kgwe.render.output import write_files
from kgwe.render.render import Rendered, RenderOptions, render, render_repository

__all__ = ["RenderOptions", "Rendered", "render", "render_repository", "write_files"]
