"""The D1 REST client: statements in, Results out, one HTTP request per call, over any transport.

It builds the request, reads D1's envelope (d1saver/http/envelope.py), retries by the policy
(`exchange`, an operation yielding `Send` and `Sleep`), keeps the API's rate-limit state, and
offers the runner (d1saver/http/runner.py) the two I/O primitives those actions need: `send`
and `sleep`, each sync and async. It knows nothing of schema setup or group commit: those are
the driver's (d1saver/http/driver.py).
Transports are injected, so the same client talks to Cloudflare, to Wrangler's real engine,
or in-process to d1saver's local D1.
"""

from __future__ import annotations

import asyncio
import functools
import http.cookiejar
import logging
import ssl
import threading
import time
import weakref
from collections.abc import AsyncGenerator, Generator, Sequence
from typing import Any

import httpx

from d1saver.http.envelope import map_transport_error, parse_response, rate_limit_reset, retry_after
from d1saver.core.errors import ConfigError, D1Error, RateLimitError, SerializationError
from d1saver.core.protocol import (Action, Result, Send, Sleep, Statement, TraceEvent, Tracer,
                                   compact_json)
from d1saver.core.ids import check_api_base_url, validate_account_id, validate_database_id
from d1saver.http import telemetry
from d1saver.http.retry import RetryPolicy
from d1saver.http.runner import arun, run

# The library's logger: one DEBUG line per HTTP attempt (never the token, never values). No
# handler is added: the application (or the CLI's -v) decides where it goes.
log = logging.getLogger("d1saver")
DEFAULT_TIMEOUT = httpx.Timeout(30.0, connect=5.0)  # D1 cuts every request at 30 s anyway
Exchange = Generator[Action, Any, list[Result]]


@functools.cache
def _tls() -> ssl.SSLContext:
    """One TLS context for every client of the process, made on first use: httpx would load
    the CA bundle for each new client, about 20 ms of CPU that a new saver's first request
    spent (benchmarks/RESULTS.md, "Client CPU"). Contexts are safe to share between threads."""
    return httpx.create_ssl_context()


class _NoCookies(http.cookiejar.CookieJar):
    """The clients' cookie jar, which keeps none: requests are built here, never from the
    jar, and D1's API authenticates by token, so a Set-Cookie (Cloudflare's edge may send
    one) is not parsed on every response."""

    def extract_cookies(self, response: Any, request: Any) -> None:
        return None


def _verify(transport: object) -> ssl.SSLContext | bool:
    """What a new httpx client verifies with: the shared context when httpx makes its own
    transport; an injected transport does its own TLS, if any."""
    return _tls() if transport is None else True


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
    ) -> None:
        api_token = api_token.strip()  # a token read from a file often ends in a newline
        if not api_token or any(ord(c) < 0x20 or ord(c) > 0x7E for c in api_token):
            raise ConfigError("the API token is empty or holds characters that cannot go in an "
                              "HTTP header: check CLOUDFLARE_API_TOKEN")
        self._token = api_token
        # The ids go into the URL path, where '/' or '..' would reach another database.
        self.database_id = validate_database_id(database_id)
        validate_account_id(account_id)
        check_api_base_url(api_base_url)
        self.url = (
            f"{api_base_url.rstrip('/')}/accounts/{account_id}/d1/database/{database_id}/raw"
        )
        try:
            self._url = httpx.URL(self.url)  # parsed once: every request reuses it
        except (httpx.InvalidURL, TypeError, ValueError):
            raise ConfigError(f"invalid D1 API URL {self.url!r}: check D1_API_BASE_URL and the "
                              "account and database ids") from None
        self._headers = httpx.Headers({  # built once (httpx copies them per request)
            "Authorization": f"Bearer {api_token}",
            "Content-Type": "application/json",
            "User-Agent": "d1saver",
        })
        self.timeout = timeout if isinstance(timeout, httpx.Timeout) else httpx.Timeout(timeout)
        self.retry = retry or RetryPolicy()
        self.tracer = tracer
        self.requests = 0  # HTTP attempts made, retries included
        self._sync_transport = transport if isinstance(transport, httpx.BaseTransport) else None
        if async_transport is None and isinstance(transport, httpx.AsyncBaseTransport):
            async_transport = transport
        self._async_transport = async_transport
        self._sync: httpx.Client | None = None
        self._sync_finalizer: weakref.finalize[..., Any] | None = None
        # One AsyncClient per event loop, weakly keyed and pruned of closed loops, so that
        # asyncio.run per request keeps at most the last loop's client.
        self._async: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, httpx.AsyncClient] = (
            weakref.WeakKeyDictionary())
        self._closers: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, AsyncGenerator[None, None]] = (
            weakref.WeakKeyDictionary())
        self._lock = threading.Lock()
        self._blocked_until = 0.0  # monotonic time until which the API budget is spent
        # What the server does beyond D1's API, as its last answer said (d1saver's gateway
        # Worker names them in a `d1saver-gateway` header, e.g. "rank": worker/rank.js).
        self.features: frozenset[str] = frozenset()

    def __repr__(self) -> str:
        return f"D1Client(url={self.url!r})"

    # --- the protocol, once ---------------------------------------------------------------

    def build_request(self, statements: Sequence[Statement]) -> httpx.Request:
        """One statement as {"sql", "params"}; several as {"batch": [...]}, run atomically.
        The SQL goes as given: the catalogue's statements are made ready to send when loaded
        (d1saver/sql/query.py)."""
        if not statements:
            raise ValueError("no statements to send")
        items = [{"sql": s.sql, "params": list(s.params)} for s in statements]
        body = items[0] if len(items) == 1 else {"batch": items}
        try:
            content = compact_json(body).encode("utf-8")
        except UnicodeEncodeError as exc:
            raise SerializationError(
                f"a value is not valid Unicode ({exc.reason}, e.g. a lone surrogate from a bad "
                "decode): nothing was sent") from None
        return httpx.Request("POST", self._url, headers=self._headers, content=content)

    def exchange(self, statements: Sequence[Statement]) -> Exchange:
        """Send with retries; yields Send/Sleep, receives responses, returns the results."""
        if telemetry.enabled:  # a CLIENT span around the attempts (d1saver/http/telemetry.py)
            return telemetry.request(self, statements, self._exchange)
        return self._exchange(statements)

    def _exchange(self, statements: Sequence[Statement],
                  span: telemetry.Request | None = None) -> Exchange:
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
                results = parse_response(response, len(statements), self._token, time.time())
                self.features = frozenset(
                    f.strip() for f in response.headers.get("d1saver-gateway", "").split(",")
                    if f.strip())
                self._trace(statements, attempt, status, None, t0, request, received, span)
                return results
            except D1Error as exc:
                self._trace(statements, attempt, status, exc, t0, request, received, span)
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
            wait = retry_after(response, time.time())
        remaining = response.headers.get("X-RateLimit-Remaining")
        if wait is None and remaining is not None and remaining.strip() == "0":
            wait = rate_limit_reset(response, time.time())
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

    def _trace(self, statements: Sequence[Statement], attempt: int, status: int | None,
               error: D1Error | None, t0: float, request: httpx.Request, received: int,
               span: telemetry.Request | None = None) -> None:
        self.requests += 1
        seconds = time.monotonic() - t0
        if span is not None:
            span.attempt(attempt, status, error, seconds, len(request.content), received)
        if log.isEnabledFor(logging.DEBUG):
            log.debug("D1 request database=%s statements=%d sent=%dB received=%dB status=%s "
                      "%.1fms attempt=%d%s", self.database_id, len(statements), len(request.content),
                      received, status if status is not None else "-", seconds * 1000, attempt,
                      f" error={type(error).__name__}" if error is not None else "")
        if self.tracer is not None:
            self.tracer(TraceEvent(tuple(statements), attempt, status, error,
                                   seconds, len(request.content), received, self.database_id))

    # --- the two primitives the runner performs an exchange with (d1saver/http/runner.py) ------

    def send(self, request: httpx.Request) -> httpx.Response | D1Error:
        """`Send`: the response, or the mapped failure, returned and not raised, so that the
        runner throws it into the operation outside any handler (no implicit context quoting
        the token)."""
        try:
            return self._sync_client().send(request)
        except httpx.HTTPError as exc:
            return map_transport_error(exc, self._token)

    async def asend(self, request: httpx.Request) -> httpx.Response | D1Error:
        try:
            return await (await self._async_client()).send(request)
        except httpx.HTTPError as exc:
            return map_transport_error(exc, self._token)

    def sleep(self, seconds: float) -> None:
        """`Sleep`: a retry's backoff, or a wait for the API's rate-limit budget."""
        time.sleep(seconds)

    async def asleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)

    def perform(self, action: Action) -> Any:
        raise TypeError(f"a client performs Send and Sleep only, not {type(action).__name__}: "
                        "run the operation on a database's driver")

    async def aperform(self, action: Action) -> Any:
        self.perform(action)

    def execute(self, statements: Sequence[Statement]) -> list[Result]:
        """Run statements in one HTTP request (a batch if several) and return their results."""
        return run(self.exchange(statements), self)

    async def aexecute(self, statements: Sequence[Statement]) -> list[Result]:
        return await arun(self.exchange(statements), self)

    # --- sync and async clients -------------------------------------------------------------

    def _sync_client(self) -> httpx.Client:
        with self._lock:
            if self._sync is None:
                self._sync = httpx.Client(transport=self._sync_transport, timeout=self.timeout,
                                          verify=_verify(self._sync_transport),
                                          cookies=_NoCookies())
                # A script that never closes its saver still closes its sockets at exit.
                self._sync_finalizer = weakref.finalize(self, self._sync.close)
            return self._sync

    async def _async_client(self) -> httpx.AsyncClient:
        # An AsyncClient's connections belong to one event loop; keep one client per live loop.
        loop = asyncio.get_running_loop()
        with self._lock:
            for old in [lp for lp in self._async if lp.is_closed()]:
                del self._async[old]
                self._closers.pop(old, None)
            client = self._async.get(loop)
            if client is not None:
                return client
            client = httpx.AsyncClient(transport=self._async_transport, timeout=self.timeout,
                                       verify=_verify(self._async_transport),
                                       cookies=_NoCookies())
            self._async[loop] = client
        # Closed with its loop: asyncio.run() closes the async generators a loop started before
        # it closes, so a script that never calls aclose() leaves no socket open.
        closer = _close_with_loop(client)
        await closer.__anext__()
        with self._lock:
            self._closers[loop] = closer
        return client

    # --- lifecycle --------------------------------------------------------------------------

    def close(self) -> None:
        with self._lock:
            if self._sync is not None:
                if self._sync_finalizer is not None:
                    self._sync_finalizer()
                self._sync = None

    async def aclose(self) -> None:
        self.close()
        loop = asyncio.get_running_loop()
        with self._lock:
            client = self._async.pop(loop, None)
            self._closers.pop(loop, None)
        if client is not None:
            await client.aclose()


async def _close_with_loop(client: httpx.AsyncClient) -> AsyncGenerator[None, None]:
    """Parked at its yield until the loop shuts its async generators down, then closes `client`."""
    try:
        yield
    finally:
        await client.aclose()


__all__ = ["D1Client", "DEFAULT_TIMEOUT"]
