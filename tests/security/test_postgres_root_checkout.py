"""`make test` as root from a checkout under a root-only folder (such as /root, mode 0700): the test
PostgreSQL server, which runs as an unprivileged user, must still reach its binaries there."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import psycopg
import pytest

from tests.harness.postgres import PostgresServer, _bin_dir

pytestmark = pytest.mark.postgres


def test_server_starts_from_binaries_under_a_root_only_folder() -> None:
    # Not under pytest's base temporary folder: each xdist worker starting resets that to 0700 itself.
    home = Path(tempfile.mkdtemp(prefix="kgwe-root-home-"))
    os.chmod(home, 0o700)  # like /root: only its owner may enter
    checkout_bins = home / "checkout" / "pginstall"
    checkout_bins.parent.mkdir()
    checkout_bins.symlink_to(_bin_dir().parent, target_is_directory=True)
    server = PostgresServer(bin_dir=checkout_bins / "bin")
    try:
        server.start()
        with psycopg.connect(server.url.replace("+psycopg", "")) as conn:
            assert conn.execute("select 1").fetchone() == (1,)
    finally:
        server.stop()
        shutil.rmtree(home, ignore_errors=True)
