"""Text others wrote, made safe where KGWE shows it: a terminal (kubectl's CVE-2021-25743 class), a CSV cell
a spreadsheet opens, a Markdown table row. Pure.

Names, teams, messages and annotations come from tenants, committers and nodes. A control character in
them is never passed on: ESC/CSI sequences rewrite a terminal, BEL rings it, a lone CR overwrites the line
shown (and ends a Markdown row), and bidirectional overrides show text in another order than it is. Each is
written as a visible escape instead (`\\x1b`, `\\r`, `\\u202e`), so what was there stays readable and
nothing is lost silently. A CSV cell that a spreadsheet would read as a formula (leading `=`, `+`, `-`,
`@`) is written as text, with a leading apostrophe, unless it is a plain number.
"""

from __future__ import annotations

import io
import re
from typing import TextIO

# Unicode format characters that reorder what follows (bidirectional embeddings, overrides, isolates, marks)
# and the two line separators some renderers break on; C0, DEL and C1 are found by their code points.
_BIDI_AND_SEPARATORS = "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u2028\u2029"
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f" + _BIDI_AND_SEPARATORS + "]")
FORMULA_LEADS = ("=", "+", "-", "@", "\uff1d", "\uff0b", "\uff0d", "\uff20")  # and their full-width forms
_NUMBER = re.compile(r"^[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+)?%?$")  # ASCII digits only


def _visible(match: re.Match[str]) -> str:
    ch = match.group(0)
    named = _NAMED.get(ch)
    if named is not None:
        return named
    return f"\\x{ord(ch):02x}" if ord(ch) < 0x100 else f"\\u{ord(ch):04x}"


def escape(text: str, keep: str = "") -> str:
    """`text` with every control, bidirectional-format and line-separator character written as a visible
    escape, except those in `keep` (e.g. "\\n\\t" for text of several lines)."""
    if not keep:
        return _UNSAFE.sub(_visible, text)
    return _UNSAFE.sub(lambda m: m.group(0) if m.group(0) in keep else _visible(m), text)


def terminal_cell(value: object) -> str:
    """One cell of a table shown in a terminal: one line, nothing the terminal acts on."""
    return escape(str(value))


def terminal_text(text: str) -> str:
    """Free text shown in a terminal: its lines and tabs kept, every other control escaped."""
    return escape(text, keep="\n\t")


def csv_cell(value: object) -> str:
    """One CSV cell: controls escaped; a text a spreadsheet would evaluate (=HYPERLINK(...), +cmd, @SUM)
    prefixed with an apostrophe, the spreadsheet convention for "text, not a formula". Numbers, negative
    ones included, stay numbers."""
    text = escape("" if value is None else str(value))
    if text.startswith(FORMULA_LEADS) and not _NUMBER.match(text):
        return "'" + text
    return text


def markdown_cell(value: object) -> str:
    """One cell of a Markdown table row: controls escaped (a CR or LF would end the row), pipes escaped."""
    return escape(str(value)).replace("|", "\\|")


def markdown_text(text: str) -> str:
    """A Markdown line (a list item, a quoted note): controls escaped, so it cannot end early or start a
    block of its own."""
    return escape(text)


def code_fence(text: str) -> str:
    """A backtick fence longer than any run of backticks in `text`, so the block cannot be closed from
    inside (CommonMark: a fence closes only with at least as many backticks)."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    return "`" * max(3, longest + 1)


class EscapingStream(io.TextIOBase):
    """A text stream (the CLI's stdout and stderr) that writes every control character but line breaks and
    tabs as a visible escape: whatever a command prints — a table, a message quoting a name, an error from
    the API server — reaches the terminal as text. `write_control` is the one way to send a control
    sequence on purpose (`kgwe watch` clearing the screen)."""

    def __init__(self, stream: TextIO) -> None:
        super().__init__()
        self.stream = stream

    def write(self, text: str) -> int:
        self.stream.write(terminal_text(text))
        return len(text)

    def write_control(self, sequence: str) -> None:
        self.stream.write(sequence)

    def flush(self) -> None:
        self.stream.flush()

    def isatty(self) -> bool:
        return self.stream.isatty()

    def fileno(self) -> int:
        return self.stream.fileno()

    def writable(self) -> bool:
        return True


def write_control(stream: TextIO, sequence: str) -> None:
    """Send a terminal control sequence on purpose, through an EscapingStream or to a plain stream."""
    if isinstance(stream, EscapingStream):
        stream.write_control(sequence)
    else:
        stream.write(sequence)
