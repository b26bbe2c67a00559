"""pytest plugin: session fixture `postgres_url`, a real PostgreSQL server started once per session."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.harness.postgres import PostgresServer


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    server = PostgresServer().start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def postgres_url(postgres_server: PostgresServer) -> str:
    return postgres_server.url
