"""Cost tests run the store against SQLite and a real PostgreSQL server."""

from __future__ import annotations

import uuid

import pytest
from sqlalchemy import create_engine, text

from kgwe.cost.store import CostStore


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def store(request, tmp_path):
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'cost.db'}"
    else:
        base = request.getfixturevalue("postgres_url")
        name = "t_" + uuid.uuid4().hex[:12]
        admin = create_engine(base, isolation_level="AUTOCOMMIT")
        with admin.connect() as conn:
            conn.execute(text(f"CREATE DATABASE {name}"))
        admin.dispose()
        url = base.rsplit("/", 1)[0] + "/" + name
    s = CostStore(url)
    s.migrate()
    yield s
    s.close()
