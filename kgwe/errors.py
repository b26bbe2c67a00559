"""Errors a user may see. Anything raised as KgweError is printed as one clear message, never a traceback."""

from __future__ import annotations


class KgweError(Exception):
    """An error meant for the user; `exit_code` is what the CLI returns."""

    exit_code: int = 1

    def __init__(self, message: str, *, exit_code: int | None = None) -> None:
        super().__init__(message)
        if exit_code is not None:
            self.exit_code = exit_code
