"""The in-process ref poll reads the smart-HTTP advertisement's pkt-lines exactly as git does: four hex
digits of length, no sign, space or underscore (which Python's int() takes), no length git would refuse,
no flush-pkt cut to its first bytes. Anything else is not an answer (None), so git itself is asked and
says what is wrong — the poll never sees refs git would not."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from kgwe.gitops.gitcmd import LOOPBACK_NETWORKS
from kgwe.gitops.refs import ADVERTISEMENT_TYPE, advertised_ref

SHA = "b" * 40
SERVICE = b"001e# service=git-upload-pack\n"
MAIN_LINE = SHA.encode() + b" refs/heads/main\0multi_ack\n"


def pkt(data: bytes, length: bytes | None = None) -> bytes:
    return (length if length is not None else b"%04x" % (len(data) + 4)) + data


def advertisement(main: bytes, end: bytes = b"0000") -> bytes:
    return SERVICE + b"0000" + main + end


@pytest.fixture(scope="module")
def serve() -> Iterator[tuple[str, dict[str, bytes]]]:
    answer: dict[str, bytes] = {}

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            return

        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", ADVERTISEMENT_TYPE)
            self.send_header("Content-Length", str(len(answer["body"])))
            self.end_headers()
            self.wfile.write(answer["body"])

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/policy.git", answer
    finally:
        httpd.shutdown()
        httpd.server_close()


def poll(serve: tuple[str, dict[str, bytes]], body: bytes) -> str | None:
    url, answer = serve
    answer["body"] = body
    return advertised_ref(
        url,
        "refs/heads/main",
        credentials=None,
        ca_file=None,
        allowed_networks=LOOPBACK_NETWORKS,
        timeout_seconds=10,
    )


def test_a_well_formed_advertisement_is_read(serve) -> None:
    assert poll(serve, advertisement(pkt(MAIN_LINE))) == SHA
    upper = b"%04X" % (len(MAIN_LINE) + 4)  # git reads hex digits of either case
    assert poll(serve, advertisement(pkt(MAIN_LINE, upper))) == SHA


def lengths_git_refuses() -> list[bytes]:
    size = b"%04x" % (len(MAIN_LINE) + 4)
    return [
        b"+" + size[1:],  # int("+04a", 16) == 74
        b" " + size[1:],  # int(" 04a", 16) == 74
        size[:2] + b"_" + size[3:],  # int("0_4a", 16)... underscores between digits
        b"0x" + size[2:],  # int("0x4a", 16) == 74
    ]


@pytest.mark.parametrize("length", lengths_git_refuses())
def test_a_length_git_would_refuse_is_no_answer(serve, length: bytes) -> None:
    assert poll(serve, advertisement(pkt(MAIN_LINE, length))) is None


def test_a_flush_cut_short_is_no_answer(serve) -> None:
    assert poll(serve, advertisement(pkt(MAIN_LINE), end=b"00")) is None  # int("00", 16) == 0: a "flush"


@pytest.mark.parametrize("length", [b"0001", b"0002", b"0003"])
def test_special_and_impossible_lengths_are_no_answer(serve, length: bytes) -> None:
    assert poll(serve, advertisement(length + pkt(MAIN_LINE))) is None


def test_a_line_longer_than_the_protocol_allows_is_no_answer(serve) -> None:
    """A pkt-line is at most 65520 bytes with its length (LARGE_PACKET_MAX)."""
    longest = SHA.encode() + b" refs/heads/main\0" + b"x" * (65520 - 4 - 57 - 1) + b"\n"
    assert len(pkt(longest)) == 65520
    assert poll(serve, advertisement(pkt(longest))) == SHA
    longer = longest[:-1] + b"x\n"
    assert poll(serve, advertisement(pkt(longer))) is None
