"""What a cluster write carries to say what caused it: the policy commit (Flux-style `<ref>@sha1:<commit>`)
and that commit's author, as annotations on the written object and on the Event that tells of the write.

The author is what the committer typed (git takes any name and e-mail from anyone who may push): it is only
ever shown, never matched or trusted, and it is bounded and cleaned first, so that it cannot forge a second
line, hide text (bidirectional overrides, zero-width characters) or grow without bound where it is shown.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass

from kgwe.vocab import REVISION_ANNOTATION, REVISION_AUTHOR_ANNOTATION

MAX_NAME_CHARS = 64  # of an author's name as shown
MAX_EMAIL_CHARS = 64  # of an author's e-mail as shown
MAX_REF_CHARS = 255  # a branch or tag name (the PolicyRepository model's bound)
UNKNOWN_AUTHOR = "unknown"

_REVISION = re.compile(rf"^(?:([^\s@]{{1,{MAX_REF_CHARS}}})@)?sha1:[0-9a-f]{{40}}$")


def display_text(text: str, limit: int) -> str:
    """`text` fit to be shown on one line: NFC, every whitespace or separator run as one space, no control,
    format (bidirectional overrides, zero-width), private-use or unassigned characters, at most `limit`
    characters (a cut text ends in "…")."""
    kept = []
    for ch in unicodedata.normalize("NFC", text[: limit * 4]):  # the work is bounded before it starts
        if ch.isspace() or unicodedata.category(ch)[0] == "Z":
            kept.append(" ")
        elif unicodedata.category(ch)[0] != "C":
            kept.append(ch)
    cleaned = " ".join("".join(kept).split())
    return cleaned if len(cleaned) <= limit else cleaned[: limit - 1].rstrip() + "…"


def author_of(name: str, email: str) -> str:
    """`Name <e-mail>` as shown: each part cleaned and bounded, without the angle brackets that delimit the
    e-mail; UNKNOWN_AUTHOR when both are empty."""
    shown_name = display_text(name.replace("<", " ").replace(">", " "), MAX_NAME_CHARS)
    shown_email = display_text(email, MAX_EMAIL_CHARS * 2)
    shown_email = "".join(c for c in shown_email if c not in "<> ")[:MAX_EMAIL_CHARS]
    if shown_name and shown_email:
        return f"{shown_name} <{shown_email}>"
    if shown_email:
        return f"<{shown_email}>"
    return shown_name or UNKNOWN_AUTHOR


def is_revision(text: str) -> bool:
    """Whether `text` is a revision as KGWE writes it: `<ref>@sha1:<40 hex>` or `sha1:<40 hex>`."""
    return bool(_REVISION.match(text))


@dataclass(frozen=True)
class Stamp:
    """The policy commit that caused a write, and its author (already cleaned: build it with `of`)."""

    revision: str
    author: str

    @classmethod
    def of(cls, ref_name: str, sha: str, name: str, email: str) -> Stamp:
        revision = f"{ref_name}@sha1:{sha}" if ref_name else f"sha1:{sha}"
        if not is_revision(revision):
            raise ValueError(f"not a revision: {revision[:80]!r}")
        return cls(revision, author_of(name, email))

    def annotations(self) -> dict[str, str]:
        return {REVISION_ANNOTATION: self.revision, REVISION_AUTHOR_ANNOTATION: self.author}

    @classmethod
    def from_annotations(cls, annotations: Mapping[str, str] | None) -> Stamp | None:
        """The stamp an object carries; None when it carries none, or one KGWE would not have written
        (anyone who may edit the object may have edited the annotations: the author is cleaned again)."""
        revision = (annotations or {}).get(REVISION_ANNOTATION)
        if not isinstance(revision, str) or not is_revision(revision):
            return None
        author = (annotations or {}).get(REVISION_AUTHOR_ANNOTATION)
        shown = display_text(author, MAX_NAME_CHARS + MAX_EMAIL_CHARS + 3) if isinstance(author, str) else ""
        return cls(revision, shown or UNKNOWN_AUTHOR)
