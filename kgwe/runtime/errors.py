"""The API's refusals as both clusters raise them (kubernetes' ApiException with the HTTP status and a
Status body), and the few tests of them a controller makes: absent, in conflict, forbidden, refused as
invalid, too many requests. One place for the status codes instead of `exc.status == 404` at every call."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

import orjson
from kubernetes.client.exceptions import ApiException

from kgwe.errors import KgweError

T = TypeVar("T")

FORBIDDEN = 403
NOT_FOUND = 404
CONFLICT = 409
GONE = 410
INVALID = 422
TOO_MANY_REQUESTS = 429
BAD_REQUEST = 400


class NotServed(KgweError):
    """The cluster does not serve this kind (its CRD is not installed, or its API version is off)."""


def status_of(exc: BaseException) -> int | None:
    """The HTTP status of an API refusal (None for anything else)."""
    return exc.status if isinstance(exc, ApiException) else None


def is_not_found(exc: BaseException) -> bool:
    return status_of(exc) == NOT_FOUND


def is_conflict(exc: BaseException) -> bool:
    """A write refused because the object changed since it was read (or already exists)."""
    return status_of(exc) == CONFLICT


def is_forbidden(exc: BaseException) -> bool:
    return status_of(exc) == FORBIDDEN


def is_invalid(exc: BaseException) -> bool:
    """The API server refused the object itself (400 Bad Request, 422 Invalid)."""
    return status_of(exc) in (BAD_REQUEST, INVALID)


@contextmanager
def absent_is_done() -> Iterator[None]:
    """For a delete or an update of something that may be gone already: its absence is not an error."""
    try:
        yield
    except ApiException as exc:
        if not is_not_found(exc):
            raise


def or_none(read: Callable[[], T]) -> T | None:
    """`read()`, or None when what it reads is absent."""
    try:
        return read()
    except ApiException as exc:
        if is_not_found(exc):
            return None
        raise


def api_error(status: int, reason: str, message: str) -> ApiException:
    """An ApiException as the API server sends it: status, reason and a Status body with the message."""
    exc = ApiException(status=status, reason=reason)
    body = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": message, "reason": reason}
    exc.body = orjson.dumps({**body, "code": status}).decode()
    return exc


def message_of(exc: ApiException) -> str:
    """The API server's own message from a Status body, else the HTTP reason."""
    try:
        body = orjson.loads(exc.body or b"{}")
    except (orjson.JSONDecodeError, TypeError):
        body = {}
    return str(body.get("message") or exc.reason or exc.status) if isinstance(body, dict) else str(exc.reason)
