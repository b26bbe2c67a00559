"""Request-line and header fields read exactly as HTTP defines them (RFC 9110), never as Python's str
methods would: `str.isdigit` and `str.isalpha` also take other scripts' digits and letters (`²`, `١٢`,
`É`), which `int()` then refuses or reads as a number, and `int()` itself refuses more than 4,300 digits.
Every KGWE port that parses HTTP by hand uses these, so a header value can only ever be answered with a
4xx."""

from __future__ import annotations

import string

# More significant digits than this are larger than any body KGWE accepts: read as TOO_LARGE, no int().
MAX_LENGTH_DIGITS = 18
TOO_LARGE = 10**MAX_LENGTH_DIGITS
_DIGITS = frozenset(string.digits)
_TOKEN = frozenset(string.ascii_letters + string.digits + "!#$%&'*+-.^_`|~")


def content_length(value: str) -> int | None:
    """The byte count a Content-Length value says, or None when it is not one number of ASCII digits
    (leading zeros allowed; a count past TOO_LARGE reads as TOO_LARGE, over every body bound)."""
    if not value or not _DIGITS.issuperset(value):
        return None
    significant = value.lstrip("0")
    return int(significant or "0") if len(significant) <= MAX_LENGTH_DIGITS else TOO_LARGE


def is_token(text: str) -> bool:
    """Whether `text` is an HTTP token (a method or a header name): ASCII letters, digits and
    !#$%&'*+-.^_`|~, at least one."""
    return bool(text) and _TOKEN.issuperset(text)
