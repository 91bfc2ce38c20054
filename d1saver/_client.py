"""The D1 REST client: one request per call, sync and async, over any httpx transport.

The protocol (building the request, reading D1's envelope, mapping failures to the error tree,
deciding retries) is written once, as a generator that yields `Send` and `Sleep` actions; the
sync and async shells only perform them. Transports are injected, so the same client talks
to Cloudflare, to Wrangler's real local engine, or in-process to d1saver's local D1.
"""

from __future__ import annotations

import asyncio
import email.utils
import functools
import json
import re
import threading
import time
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass, field
from typing import Any, Union

import httpx

from d1saver._errors import (
    AuthenticationError,
    ConfigError,
    ConnectionError,
    D1APIError,
    D1Error,
    QueryError,
    RateLimitError,
    ResponseError,
    SerializationError,
    ServerError,
    TimeoutError,
    TransportError,
)
from d1saver._retry import RetryPolicy
from d1saver._settings import check_api_base_url

Param = Union[str, int, float, None]

DEFAULT_TIMEOUT = httpx.Timeout(30.0, connect=5.0)  # D1 cuts every request at 30 s anyway


@dataclass(frozen=True)
class Statement:
    """One SQL statement and its positional parameters."""

    sql: str
    params: Sequence[Param] = ()


@dataclass
class Result:
    """The rows and meta of one statement, as D1's /raw endpoint returns them."""

    columns: list[str]
    rows: list[list[Any]]
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def changes(self) -> int:
        return int(self.meta.get("changes") or 0)

    def dicts(self) -> list[dict[str, Any]]:
        return [dict(zip(self.columns, row)) for row in self.rows]


@dataclass(frozen=True)
class TraceEvent:
    """One HTTP attempt, for tracers: what was sent and what came of it. Never the token."""

    statements: tuple[Statement, ...]
    attempt: int
    status: int | None
    error: D1Error | None
    seconds: float
    bytes_sent: int
    bytes_received: int


Tracer = Callable[[TraceEvent], None]


@dataclass(frozen=True)
class Send:
    request: httpx.Request


@dataclass(frozen=True)
class Sleep:
    seconds: float


@dataclass(frozen=True)
class Once:
    """Run a protocol generator at most once per client (schema setup), however many ask."""

    key: str
    op: Callable[[], Generator[Any, Any, Any]]


@dataclass(frozen=True)
class Commit:
    """Write statements that may share a batch with other callers' (group commit)."""

    statements: Sequence[Statement]


Exchange = Generator[Union[Send, Sleep, Commit], Any, list[Result]]


class D1Client:
    """Sends statements to one D1 database; a list of several goes as one atomic batch."""

    def __init__(
        self,
        *,
        account_id: str,
        database_id: str,
        api_token: str,
        api_base_url: str,
        timeout: httpx.Timeout | float = DEFAULT_TIMEOUT,
        retry: RetryPolicy | None = None,
        transport: httpx.BaseTransport | httpx.AsyncBaseTransport | None = None,
        async_transport: httpx.AsyncBaseTransport | None = None,
        tracer: Tracer | None = None,
        group_commit: bool = True,
        group_commit_window: float | None = None,
    ) -> None:
        from d1saver._group_commit import DEFAULT_WINDOW, GroupCommit

        window = DEFAULT_WINDOW if group_commit_window is None else group_commit_window
        self.group = GroupCommit(self.execute, self.aexecute, window) if group_commit else None
        api_token = api_token.strip()  # a token read from a file often ends in a newline
        if not api_token or any(ord(c) < 0x20 or ord(c) > 0x7E for c in api_token):
            raise ConfigError("the API token is empty or holds characters that cannot go in an "
                              "HTTP header: check CLOUDFLARE_API_TOKEN")
        self._token = api_token
        self._done: set[str] = set()
        self._once_lock = threading.Lock()
        self._aonce: dict[asyncio.AbstractEventLoop, asyncio.Lock] = {}
        check_api_base_url(api_base_url)
        self.url = (
            f"{api_base_url.rstrip('/')}/accounts/{account_id}/d1/database/{database_id}/raw"
        )
        try:
            httpx.URL(self.url)
        except (httpx.InvalidURL, TypeError, ValueError):
            raise ConfigError(f"invalid D1 API URL {self.url!r}: check D1_API_BASE_URL and the "
                              "account and database ids") from None
        self._headers = {
            "Authorization": f"Bearer {api_token}",
            "Content-Type": "application/json",
            "User-Agent": "d1saver",
        }
        self.timeout = timeout if isinstance(timeout, httpx.Timeout) else httpx.Timeout(timeout)
        self.retry = retry or RetryPolicy()
        self.tracer = tracer
        self.requests = 0  # HTTP attempts made, retries included
        self._sync_transport = transport if isinstance(transport, httpx.BaseTransport) else None
        if async_transport is None and isinstance(transport, httpx.AsyncBaseTransport):
            async_transport = transport
        self._async_transport = async_transport
        self._sync: httpx.Client | None = None
        self._async: dict[asyncio.AbstractEventLoop, httpx.AsyncClient] = {}
        self._lock = threading.Lock()
        self._blocked_until = 0.0  # monotonic time until which the API budget is spent

    def __repr__(self) -> str:
        return f"D1Client(url={self.url!r})"

    # --- the protocol, once ---------------------------------------------------------------

    def build_request(self, statements: Sequence[Statement]) -> httpx.Request:
        """One statement as {"sql", "params"}; several as {"batch": [...]}, run atomically."""
        if not statements:
            raise ValueError("no statements to send")
        items = [{"sql": compact_sql(s.sql), "params": list(s.params)} for s in statements]
        body = items[0] if len(items) == 1 else {"batch": items}
        try:
            content = json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
        except UnicodeEncodeError as exc:
            raise SerializationError(
                f"a value is not valid Unicode ({exc.reason}, e.g. a lone surrogate from a bad "
                "decode): nothing was sent") from None
        return httpx.Request("POST", self.url, headers=self._headers, content=content)

    def exchange(self, statements: Sequence[Statement]) -> Exchange:
        """Send with retries; yields Send/Sleep, receives responses, returns the results."""
        request = self.build_request(statements)
        started = time.monotonic()
        attempt = 0
        while True:
            attempt += 1
            pause = self._rate_limit_pause()
            if pause > 0:
                yield Sleep(pause)
            t0 = time.monotonic()
            status: int | None = None
            received = 0
            try:
                response: httpx.Response = yield Send(request)
                status, received = response.status_code, len(response.content)
                self._note_rate_limit(response)
                results = parse_response(response, len(statements), self._token)
                self._trace(statements, attempt, status, None, t0, request, received)
                return results
            except D1Error as exc:
                self._trace(statements, attempt, status, exc, t0, request, received)
                wait = self.retry.delay(exc, attempt, time.monotonic() - started)
                if wait is None:
                    raise
                yield Sleep(wait)

    # Cloudflare allows 1200 requests per 5 minutes per user; past that, every call gets 429
    # for 5 minutes. When the API says the budget is spent (429 with Retry-After, or
    # X-RateLimit-Remaining: 0 with X-RateLimit-Reset), every request of this client, however
    # concurrent, waits until then rather than prolonging the lockout: up to the retry
    # policy's max_retry_after; a longer wait raises RateLimitError at once.

    def _note_rate_limit(self, response: httpx.Response) -> None:
        wait = None
        if response.status_code == 429:
            wait = retry_after(response)
        remaining = response.headers.get("X-RateLimit-Remaining")
        if wait is None and remaining is not None and remaining.strip() == "0":
            wait = rate_limit_reset(response)
        if wait:
            with self._lock:
                self._blocked_until = max(self._blocked_until, time.monotonic() + wait)

    def _rate_limit_pause(self) -> float:
        with self._lock:
            pause = self._blocked_until - time.monotonic()
        if pause <= 0:
            return 0.0
        if pause > self.retry.max_retry_after:
            raise RateLimitError(
                f"Cloudflare's API budget is spent for another {pause:.0f} s (over "
                f"max_retry_after={self.retry.max_retry_after:.0f} s): not sending",
                status=None, retry_after=pause)
        return pause

    def _trace(self, statements, attempt, status, error, t0, request, received) -> None:
        self.requests += 1
        if self.tracer is not None:
            self.tracer(TraceEvent(tuple(statements), attempt, status, error,
                                   time.monotonic() - t0, len(request.content), received))

    # --- sync shell -------------------------------------------------------------------------

    def execute(self, statements: Sequence[Statement]) -> list[Result]:
        """Run statements in one HTTP request (a batch if several) and return their results."""
        return self.drive(self.exchange(statements))

    def drive(self, gen: Generator[Any, Any, Any]) -> Any:
        """Perform a protocol generator's Send/Sleep actions synchronously."""
        client = self._sync_client()
        reply: Any = None
        failure: D1Error | None = None
        while True:
            try:
                action = gen.throw(failure) if failure is not None else gen.send(reply)
            except StopIteration as stop:
                return stop.value
            reply, failure = None, None
            if isinstance(action, Sleep):
                time.sleep(action.seconds)
            elif isinstance(action, Once):
                try:
                    with self._once_lock:
                        if action.key not in self._done:
                            self.drive(action.op())
                            self._done.add(action.key)
                except D1Error as exc:
                    failure = exc
            elif isinstance(action, Commit):
                try:
                    reply = (self.group.submit(action.statements) if self.group
                             else self.execute(action.statements))
                except D1Error as exc:
                    failure = exc
            else:
                try:
                    reply = client.send(action.request)
                except httpx.HTTPError as exc:
                    failure = map_transport_error(exc, self._token)

    def _sync_client(self) -> httpx.Client:
        with self._lock:
            if self._sync is None:
                self._sync = httpx.Client(transport=self._sync_transport, timeout=self.timeout)
            return self._sync

    # --- async shell ------------------------------------------------------------------------

    async def aexecute(self, statements: Sequence[Statement]) -> list[Result]:
        return await self.adrive(self.exchange(statements))

    async def adrive(self, gen: Generator[Any, Any, Any]) -> Any:
        """Perform a protocol generator's Send/Sleep actions asynchronously."""
        client = self._async_client()
        reply: Any = None
        failure: D1Error | None = None
        while True:
            try:
                action = gen.throw(failure) if failure is not None else gen.send(reply)
            except StopIteration as stop:
                return stop.value
            reply, failure = None, None
            if isinstance(action, Sleep):
                await asyncio.sleep(action.seconds)
            elif isinstance(action, Once):
                try:
                    async with self._aonce.setdefault(asyncio.get_running_loop(), asyncio.Lock()):
                        if action.key not in self._done:
                            await self.adrive(action.op())
                            self._done.add(action.key)
                except D1Error as exc:
                    failure = exc
            elif isinstance(action, Commit):
                try:
                    reply = await (self.group.asubmit(action.statements) if self.group
                                   else self.aexecute(action.statements))
                except D1Error as exc:
                    failure = exc
            else:
                try:
                    reply = await client.send(action.request)
                except httpx.HTTPError as exc:
                    failure = map_transport_error(exc, self._token)

    def _async_client(self) -> httpx.AsyncClient:
        # An AsyncClient's connections belong to one event loop; keep one client per loop.
        loop = asyncio.get_running_loop()
        with self._lock:
            for old in [lp for lp in self._async if lp.is_closed()]:
                del self._async[old]
            client = self._async.get(loop)
            if client is None:
                client = httpx.AsyncClient(transport=self._async_transport, timeout=self.timeout)
                self._async[loop] = client
            return client

    # --- lifecycle --------------------------------------------------------------------------

    def close(self) -> None:
        with self._lock:
            if self._sync is not None:
                self._sync.close()
                self._sync = None

    async def aclose(self) -> None:
        self.close()
        loop = asyncio.get_running_loop()
        with self._lock:
            client = self._async.pop(loop, None)
        if client is not None:
            await client.aclose()


@functools.lru_cache(maxsize=512)
def compact_sql(sql: str) -> str:
    """The statement with runs of white space outside string literals folded to one space.

    SQL text travels with every statement; the named statements are laid out for reading, and
    folding them cut the bytes a 30-turn agent sends by about a sixth (README, Figures).
    """
    parts = sql.split("'")
    for i in range(0, len(parts), 2):  # even parts lie outside '...' literals
        parts[i] = re.sub(r"\s+", " ", parts[i])
    return "'".join(parts).strip()


# Tokens shorter than this are test values ("t"); replacing them would garble every message.
# Cloudflare's API tokens are 40 characters.
_REDACT_MIN = 8


# --- the one boundary where foreign failures become ours ----------------------------------


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
        err = ConnectionError(f"D1 request failed: {type(exc).__name__}: {detail}")
        if redact and token in str(exc):
            return err  # not chained: a printed traceback would show the original text
    else:
        err = ConnectionError(f"D1 request failed: {type(exc).__name__}")
    err.__cause__ = exc
    return err


def parse_response(response: httpx.Response, expected: int, token: str = "") -> list[Result]:
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
                                 retry_after=retry_after(response))
        if status >= 500:
            raise ServerError(f"D1 answered HTTP {status} without D1's JSON envelope",
                              status=status)
        raise ResponseError(f"D1 answered HTTP {status} with a body that is not D1's JSON "
                            f"envelope ({_sniff(response)})", status=status)
    errors = envelope.get("errors") or []
    first = errors[0] if errors and isinstance(errors[0], dict) else {}
    code = first.get("code") if isinstance(first.get("code"), int) else None
    message = str(first.get("message") or f"D1 request failed with HTTP {status}")
    if len(token) >= _REDACT_MIN:
        message = message.replace(token, "[redacted]")
    if status == 429:
        raise RateLimitError(message, status=status, code=code, retry_after=retry_after(response))
    if status in (401, 403) or code == 10000:
        raise AuthenticationError(
            f"{message}: check CLOUDFLARE_API_TOKEN (a token with D1 edit permission)",
            status=status, code=code)
    if status >= 500:
        raise ServerError(message, status=status, code=code)
    if status >= 400:
        raise QueryError(message, status=status, code=code)
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
        raise QueryError(str(item.get("error") or "statement failed"), status=status)
    body = item.get("results")
    meta = item.get("meta") if isinstance(item.get("meta"), dict) else {}
    if isinstance(body, dict):  # /raw
        return Result(list(body.get("columns") or []), list(body.get("rows") or []), meta)
    if isinstance(body, list):  # /query, rows as objects
        columns = list(body[0].keys()) if body else []
        return Result(columns, [list(r.values()) for r in body], meta)
    if body is None:
        return Result([], [], meta)
    raise ResponseError("D1 result rows are neither /raw nor /query shaped", status=status)


def retry_after(response: httpx.Response) -> float | None:
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
    return max(0.0, when.timestamp() - time.time())


def rate_limit_reset(response: httpx.Response) -> float | None:
    """X-RateLimit-Reset in seconds from now: given as seconds, or as a Unix time."""
    value = response.headers.get("X-RateLimit-Reset")
    try:
        reset = float(value) if value is not None else None
    except ValueError:
        return None
    if reset is None:
        return None
    if reset > 1_000_000_000:  # a Unix timestamp
        reset -= time.time()
    return max(0.0, reset)


def _sniff(response: httpx.Response) -> str:
    kind = response.headers.get("content-type", "unknown content type")
    return f"{kind}, {len(response.content)} bytes"


__all__ = ["D1Client", "Param", "Result", "Statement", "TraceEvent", "Tracer", "D1APIError"]
