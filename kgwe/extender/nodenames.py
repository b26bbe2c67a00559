"""ExtenderArgs' NodeNames array read as bytes: checked without decoding it, searched by name.

With nodeCacheCapable, kube-scheduler sends every feasible node's name (1,000 names are ~27 KB), each cycle
in another order (its parallel filter), and a decided filter needs only one of them: the best node the index
ranks that the list holds. Decoding the list makes a Python string per name and resolving them a dictionary
lookup each, scattered through memory; checking the bytes is a few vector operations, and asking whether a
name is in the list is one substring search.

The check accepts exactly what Go's encoding/json writes for a []string of node names: `"NodeNames":[`,
quoted names separated by single commas, `]}` ending the object; printable ASCII only, no backslash (node
names are DNS subdomains, so kube-scheduler never escapes a character). With no escapes every quote
delimits a name, so `"name"` occurs in the bytes exactly when the list holds that name. Anything else
(whitespace, escapes, another key order) is left to the full JSON decoder.
"""

from __future__ import annotations

import numpy as np

KEY = b'"NodeNames":'
_OPEN = KEY + b"["
_CLOSE = b"]}"
_QUOTE, _COMMA = ord('"'), ord(",")


def compact_tail(body: bytes) -> bytes | None:
    """The bytes from the NodeNames key to the end of `body` when they are a compact array of plain names
    closing the object, else None."""
    cut = body.rfind(KEY)
    if cut <= 0:
        return None
    tail = body[cut:]
    if not (tail.startswith(_OPEN) and tail.endswith(_CLOSE)):
        return None
    inner = tail[len(_OPEN) : -len(_CLOSE)]
    if not inner:
        return tail
    if b"\\" in inner:
        return None
    a = np.frombuffer(inner, dtype=np.uint8)
    if a.min() < 0x20 or a.max() > 0x7E:
        return None
    quotes = np.flatnonzero(a == _QUOTE)
    if len(quotes) % 2 or quotes[0] != 0 or quotes[-1] != len(a) - 1:
        return None
    closing, opening = quotes[1:-1:2], quotes[2::2]
    if not ((opening - closing == 2).all() and (a[closing + 1] == _COMMA).all()):
        return None
    return tail


def holds(tail: bytes, name: str) -> bool:
    """Whether a `compact_tail` lists `name`."""
    return b'"' + name.encode() + b'"' in tail


def head(body: bytes, tail: bytes) -> bytes:
    """`body` with its NodeNames array replaced by null: the rest of ExtenderArgs, to decode on its own."""
    return body[: len(body) - len(tail)] + KEY + b"null}"
