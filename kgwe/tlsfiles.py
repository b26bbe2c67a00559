"""Serving TLS from files that change under a running server: a mounted Secret the kubelet refreshes when the
controller renews a certificate (or cert-manager does), and that may not exist yet when the pod starts.

`ServingTLS.current` is what a server takes per connection (kgwe.httpd.serve(tls=...)): the newest context
built from the files, which are checked at most every `check_seconds` (a Secret volume changes by an atomic
symlink swap, so a changed inode, size or mtime means new content). A pair that does not load (a half
renewed Secret, a key of another certificate) is logged and the previous context stays in use. A client CA
is part of the reloaded context: a CA dropped from the bundle stops being trusted without a restart.

`wait()` blocks until the files exist and load, saying every 30 s what it waits for, so a pod whose
certificate is not issued yet waits (not Ready: its probe port says why) instead of crash-looping.
"""

from __future__ import annotations

import logging
import os
import ssl
import threading
import time
from pathlib import Path

log = logging.getLogger("kgwe.tls")

CHECK_SECONDS = 10.0
WAIT_LOG_SECONDS = 30.0


def _stamp(path: Path) -> tuple[int, int, int]:
    st = os.stat(path)
    return (st.st_ino, st.st_size, st.st_mtime_ns)


class ServingTLS:
    def __init__(
        self,
        cert_file: str | Path,
        key_file: str | Path,
        client_ca_file: str | Path | None = None,
        *,
        check_seconds: float = CHECK_SECONDS,
    ) -> None:
        self.cert_file, self.key_file = Path(cert_file), Path(key_file)
        self.client_ca_file = Path(client_ca_file) if client_ca_file else None
        self.check_seconds = check_seconds
        self.context: ssl.SSLContext | None = None  # the newest loaded
        self.reloads = 0
        self.last_error: str | None = None
        self._stamps: tuple[tuple[int, int, int], ...] | None = None
        self._checked = float("-inf")
        self._mu = threading.Lock()

    @property
    def files(self) -> list[Path]:
        return [p for p in (self.cert_file, self.key_file, self.client_ca_file) if p is not None]

    def missing(self) -> list[Path]:
        return [p for p in self.files if not p.exists()]

    def _build(self) -> ssl.SSLContext:
        from kgwe.httpd.exposure import server_tls_context

        ca = str(self.client_ca_file) if self.client_ca_file is not None else None
        return server_tls_context(str(self.cert_file), str(self.key_file), ca)

    def reload(self, force: bool = False) -> bool:
        """Load the files when they changed (at most every `check_seconds` unless forced); True when a new
        context is in use. Never raises: a failure keeps the previous context and sets `last_error`."""
        now = time.monotonic()
        with self._mu:
            if not force and now - self._checked < self.check_seconds:
                return False
            self._checked = now
            try:
                stamps = tuple(_stamp(p) for p in self.files)
            except OSError as exc:
                self.last_error = f"{exc.filename}: {exc.strerror}"
                return False
            if stamps == self._stamps:
                return False
            try:
                ctx = self._build()
            except (OSError, ssl.SSLError) as exc:
                self.last_error = f"cannot load {self.cert_file} / {self.key_file}: {exc}"
                log.warning("TLS files not (re)loaded, serving the previous certificate: %s", self.last_error)
                return False
            first = self.context is None
            self.context, self._stamps, self.last_error = ctx, stamps, None
            self.reloads += 0 if first else 1
        log.info("TLS certificate %s from %s", "loaded" if first else "reloaded", self.cert_file)
        return True

    @property
    def loaded(self) -> bool:
        return self.context is not None

    def current(self) -> ssl.SSLContext:
        """The context for a new connection, after a (rate-limited) look at the files."""
        self.reload()
        if self.context is None:
            raise ssl.SSLError("TLS files not loaded yet")
        return self.context

    def wait(self, stop: threading.Event | None = None, poll_seconds: float = 1.0, what: str = "") -> bool:
        """Block until the files load (True) or `stop` is set (False), logging what is missing."""
        stop = stop or threading.Event()
        said = float("-inf")
        while not stop.is_set():
            if self.reload(force=True):
                return True
            if time.monotonic() - said >= WAIT_LOG_SECONDS:
                said = time.monotonic()
                missing = self.missing()
                why = (
                    f"missing {', '.join(str(p) for p in missing)}"
                    if missing
                    else (self.last_error or "not loadable yet")
                )
                log.warning("waiting for the TLS certificate%s: %s", f" ({what})" if what else "", why)
            stop.wait(poll_seconds)
        return False
