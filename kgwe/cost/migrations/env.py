"""Alembic environment: the store passes its own connection in `config.attributes["connection"]`."""

from __future__ import annotations

from alembic import context
from sqlalchemy import create_engine
from sqlalchemy.engine import Connection
from sqlmodel import SQLModel

import kgwe.cost.tables  # noqa: F401  # the tables register with SQLModel.metadata

target_metadata = SQLModel.metadata
config = context.config


def run() -> None:
    connection = config.attributes.get("connection")
    if connection is None:
        engine = create_engine(str(config.get_main_option("sqlalchemy.url")))
        with engine.begin() as conn:
            _migrate(conn)
        return
    _migrate(connection)


def _migrate(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        render_as_batch=True,
        version_table="kgwe_cost_alembic_version",
    )
    with context.begin_transaction():
        context.run_migrations()


run()
