"""D1's answers, read: the REST envelope into Results or the matching D1Error, and httpx's
failures into the error tree. The one boundary where foreign failures become ours. Pure:
the caller passes the wall-clock time where a header names a date.

Only /raw's row shape ({"columns", "rows"}) is accepted: /query's rows-as-objects collapse
duplicate column names, and positional reads of them would misalign silently.
"""

from __future__ import annotations

import email.utils
import json
from typing import Any

import httpx

from d1saver.core.errors import (
    AuthenticationError,
    ConfigError,
    ConnectionError,
    D1Error,
    QueryError,
    RateLimitError,
    ResponseError,
    ServerError,
    TimeoutError,
    TransientQueryError,
    TransportError,
)
from d1saver.core.protocol import Result

# D1 errors that Cloudflare documents as transient, to be retried ("Retry the operation"; for
# an overloaded database, after backing off), matched case-insensitively anywhere in the
# message. Source: the "List of D1_ERRORs" at
# https://developers.cloudflare.com/d1/observability/debug-d1/#error-list and
# https://developers.cloudflare.com/d1/best-practices/retry-queries/ (whose shouldRetry
# matches the first three). They arrive as 4xx with code 7500 like an SQL error, but no SQL
# error of SQLite contains these words. Not listed, so not retried: the errors that mean
# the query itself is too big ("exceeded timeout", "memory limit", "CPU time limit").
TRANSIENT_D1_ERRORS = (
    "network connection lost",
    "storage caused object to be reset",  # "Internal error while starting up D1 DB storage
    # caused object to be reset." and "Internal error in D1 DB storage caused object to be reset."
    "reset because its code was updated",
    "transient issue on remote node",
    "client disconnected",  # "Can't read from request stream because client disconnected."
    "d1 db is overloaded",
    "internal error",  # Cloudflare's own failures; SQLite never says it
)

# Tokens shorter than this are test values ("t"); replacing them would garble every message.
# Cloudflare's API tokens are 40 characters.
_REDACT_MIN = 8


def map_transport_error(exc: httpx.HTTPError, token: str = "") -> D1Error:
    """Translate an httpx failure; the message names the kind, never headers or the token."""
    if isinstance(exc, httpx.LocalProtocolError):
        # The request could not even be written (a bad header value): retrying cannot help,
        # and h11's message quotes the header, so it is not repeated.
        local = ConfigError(f"D1 request could not be built ({type(exc).__name__}): check "
                            "CLOUDFLARE_API_TOKEN and the ids for invalid characters")
        return local
    if isinstance(exc, httpx.TimeoutException):
        err: TransportError = TimeoutError(f"D1 request timed out ({type(exc).__name__})")
    elif isinstance(exc, httpx.TransportError):
        redact = len(token) >= _REDACT_MIN
        detail = str(exc).replace(token, "[redacted]") if redact else str(exc)
        err = ConnectionError(f"D1 request failed: {type(exc).__name__}: {detail}{_where(exc)}")
        if redact and token in str(exc):
            return err  # not chained: a printed traceback would show the original text
    else:
        err = ConnectionError(f"D1 request failed: {type(exc).__name__}")
    err.__cause__ = exc
    return err


def _where(exc: httpx.HTTPError) -> str:
    """Where the request went, and what to check: a connection failure names its server."""
    try:
        url = exc.request.url
    except RuntimeError:  # no request attached
        return ""
    return (f" (to {url.scheme}://{url.netloc.decode('ascii', 'replace')}: check D1_API_BASE_URL, "
            "and that the server is running, e.g. `d1saver serve` for a local D1)")


_NOT_FOUND_HINTS = {
    7003: "check that D1_API_BASE_URL ends in /client/v4 and that the account and database ids are right",
    7404: "no such database: check D1_DATABASE_ID (or the gateway's DATABASES map)",
}


def parse_response(response: httpx.Response, expected: int, token: str,
                   now: float) -> list[Result]:
    """Read D1's envelope into one Result per statement, or raise the matching D1Error.

    A message that echoes the token (a proxy repeating the Authorization header) is redacted.
    """
    status = response.status_code
    try:
        envelope = response.json()
    except (json.JSONDecodeError, UnicodeDecodeError):
        envelope = None
    if not isinstance(envelope, dict):
        if status == 429:
            raise RateLimitError("rate limited by Cloudflare's API", status=status,
                                 retry_after=retry_after(response, now))
        if status >= 500:
            raise ServerError(f"D1 answered HTTP {status} without D1's JSON envelope",
                              status=status)
        hint = (f": is {response.request.url.copy_with(query=None)} a D1 REST API address? "
                "D1_API_BASE_URL must end in /client/v4") if status == 404 else ""
        raise ResponseError(f"D1 answered HTTP {status} with a body that is not D1's JSON "
                            f"envelope ({_sniff(response)}){hint}", status=status)
    errors = envelope.get("errors") or []
    first = errors[0] if errors and isinstance(errors[0], dict) else {}
    code = first.get("code") if isinstance(first.get("code"), int) else None
    message = str(first.get("message") or f"D1 request failed with HTTP {status}")
    if len(token) >= _REDACT_MIN:
        message = message.replace(token, "[redacted]")
    if status == 429:
        raise RateLimitError(message, status=status, code=code, retry_after=retry_after(response, now))
    if status in (401, 403) or code == 10000:
        # A gateway without its secret says how to set it (HTTP 500): our token is not the cause.
        hint = "" if status >= 500 else ": check CLOUDFLARE_API_TOKEN (a token with D1 edit permission)"
        raise AuthenticationError(f"{message}{hint}", status=status, code=code)
    if status >= 500:
        raise ServerError(message, status=status, code=code)
    if status >= 400:
        if status == 404 and code in _NOT_FOUND_HINTS:
            message = f"{message}: {_NOT_FOUND_HINTS[code]}"
        raise query_error(message, status=status, code=code)
    if envelope.get("success") is not True:
        raise ResponseError(f"D1 answered HTTP {status} but success is not true: {message}",
                            status=status, code=code)
    raw = envelope.get("result")
    if not isinstance(raw, list) or len(raw) != expected:
        raise ResponseError(
            f"D1 returned {len(raw) if isinstance(raw, list) else 'no'} results for "
            f"{expected} statements", status=status)
    return [_result(item, status) for item in raw]


def _result(item: Any, status: int) -> Result:
    if not isinstance(item, dict):
        raise ResponseError("D1 result entry is not an object", status=status)
    if item.get("success") is False:
        raise query_error(str(item.get("error") or "statement failed"), status=status)
    body = item.get("results")
    meta = item.get("meta") if isinstance(item.get("meta"), dict) else {}
    if isinstance(body, dict):  # /raw: the only shape d1saver asks for
        columns, rows = body.get("columns") or [], body.get("rows") or []
        if not isinstance(columns, list) or not isinstance(rows, list):
            raise ResponseError("D1 result columns or rows are not lists", status=status)
        return Result(list(columns), list(rows), meta)
    if body is None:
        return Result([], [], meta)
    raise ResponseError("D1 result is not /raw shaped ({columns, rows})", status=status)


def query_error(message: str, *, status: int | None, code: int | None = None) -> QueryError:
    """A QueryError, or a TransientQueryError when D1's message is one it documents as transient."""
    lowered = message.lower()
    kind = (TransientQueryError if any(m in lowered for m in TRANSIENT_D1_ERRORS)
            else QueryError)
    return kind(message, status=status, code=code)


def retry_after(response: httpx.Response, now: float) -> float | None:
    """Retry-After in seconds (delta-seconds or an HTTP date), or None when absent or bad."""
    value = response.headers.get("Retry-After")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - now)


def rate_limit_reset(response: httpx.Response, now: float) -> float | None:
    """X-RateLimit-Reset in seconds from `now` (Unix time): given as seconds, or as a Unix time."""
    value = response.headers.get("X-RateLimit-Reset")
    try:
        reset = float(value) if value is not None else None
    except ValueError:
        return None
    if reset is None:
        return None
    if reset > 1_000_000_000:  # a Unix timestamp
        reset -= now
    return max(0.0, reset)


def _sniff(response: httpx.Response) -> str:
    kind = response.headers.get("content-type", "unknown content type")
    return f"{kind}, {len(response.content)} bytes"


__all__ = ["TRANSIENT_D1_ERRORS", "map_transport_error", "parse_response", "query_error",
           "rate_limit_reset", "retry_after"]
