"""TLS for one server connection over memory BIOs: bytes from the socket go in, plaintext and bytes for the
socket come out. The server decrypts whatever arrives at once, so nothing but one partial record waits
here; the plaintext is counted in the server's byte budget like any request data."""

from __future__ import annotations

import contextlib
import ssl

READ_BYTES = 16 * 1024  # one TLS record's worth of plaintext per read call


class TlsSession:
    def __init__(self, context: ssl.SSLContext) -> None:
        self.incoming = ssl.MemoryBIO()
        self.outgoing = ssl.MemoryBIO()
        self.obj = context.wrap_bio(self.incoming, self.outgoing, server_side=True)
        self.established = False
        self.closed_by_peer = False  # close_notify received

    def feed(self, data: bytes | memoryview) -> tuple[bytes, bytes]:
        """(plaintext received, bytes to send) after `data` from the socket. ssl.SSLError: the peer failed
        the handshake (no or a wrong client certificate, not TLS at all); `pending()` then still holds the
        alert to send."""
        self.incoming.write(data)
        if not self.established:
            try:
                self.obj.do_handshake()
            except ssl.SSLWantReadError:
                return b"", self.outgoing.read()
            self.established = True
        chunks = []
        while True:
            try:
                chunk = self.obj.read(READ_BYTES)
            except ssl.SSLWantReadError:
                break
            except ssl.SSLZeroReturnError:
                self.closed_by_peer = True
                break
            if not chunk:
                break
            chunks.append(chunk)
        return b"".join(chunks), self.outgoing.read()

    def wrap(self, plaintext: bytes) -> bytes:
        """The bytes to send for `plaintext` (after the handshake)."""
        self.obj.write(plaintext)
        return self.outgoing.read()

    def close_notify(self) -> bytes:
        """The bytes that tell the peer nothing more comes (then the socket may be half-closed)."""
        with contextlib.suppress(ssl.SSLError):  # SSLWantReadError: the peer's close_notify is not awaited
            self.obj.unwrap()
        return self.outgoing.read()

    def pending(self) -> bytes:
        return self.outgoing.read()
