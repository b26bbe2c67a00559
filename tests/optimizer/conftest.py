"""Optimizer tests that keep records run them on the cost store, SQLite and a real PostgreSQL server (the
cost tests' `store` fixture)."""

from __future__ import annotations

from tests.cost.conftest import store as store  # the same databases as the cost store's own tests
