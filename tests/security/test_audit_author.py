"""A committer is hostile: the author name and e-mail they type end up in annotations, Event text and the
audit log (docs/audit.md). Shown only, never trusted, and bounded and cleaned first: no second line, no
hidden text, no unbounded growth, and cleaned again when read back from an object anyone may edit."""

from __future__ import annotations

import pytest

from kgwe.audit.stamp import MAX_EMAIL_CHARS, MAX_NAME_CHARS, UNKNOWN_AUTHOR, Stamp, author_of, display_text
from kgwe.vocab import REVISION_ANNOTATION, REVISION_AUTHOR_ANNOTATION

SHA = "0123456789abcdef0123456789abcdef01234567"


@pytest.mark.parametrize(
    ("name", "email", "shown"),
    [
        ("Eve\nkgwe.nvidia.io/revision: forged", "e@x", "Eve kgwe.nvidia.io/revision: forged <e@x>"),
        ("Mallory\u202etxt.exe", "m@x", "Mallorytxt.exe <m@x>"),  # a bidirectional override is dropped
        ("Zero\u200bWidth\u2066", "z@x", "ZeroWidth <z@x>"),
        ("Tab\tand\r\nreturns", "t@x", "Tab and returns <t@x>"),
        ("<admin@corp> Real", "x@y>", "admin@corp Real <x@y>"),  # no angle brackets of their own
        ("", "only@mail", "<only@mail>"),
        ("Name only", "", "Name only"),
        ("\u0000\u0007", "\u202e", UNKNOWN_AUTHOR),
    ],
)
def test_an_author_is_one_clean_line_whatever_the_committer_typed(name, email, shown):
    assert author_of(name, email) == shown


def test_a_huge_author_is_cut_and_the_work_is_bounded():
    author = author_of("N" * 10_000_000, "e" * 10_000_000 + "@x")
    name, _, email = author.partition(" <")
    assert len(name) == MAX_NAME_CHARS and name.endswith("…")
    assert len(email.rstrip(">")) == MAX_EMAIL_CHARS
    assert display_text("a" * 100, 10) == "a" * 9 + "…"


def test_a_stamp_read_back_from_an_object_is_cleaned_again():
    edited = {REVISION_ANNOTATION: f"main@sha1:{SHA}", REVISION_AUTHOR_ANNOTATION: "x\u202e\n" + "y" * 500}
    back = Stamp.from_annotations(edited)
    assert back is not None and "\n" not in back.author and "\u202e" not in back.author
    assert len(back.author) <= MAX_NAME_CHARS + MAX_EMAIL_CHARS + 3
    assert Stamp.from_annotations({REVISION_ANNOTATION: "main@sha1:nothex"}) is None
    assert Stamp.from_annotations(None) is None
