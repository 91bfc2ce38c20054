"""OpenTelemetry, when it is installed: a CLIENT span per D1 request, an INTERNAL span per
public call and per command, and the histogram db.client.operation.duration, all through the
global tracer and meter providers (docs/guide/observability.md).

Without `opentelemetry-api` (the `otel` extra) nothing here imports it and no method is
wrapped: a request checks `enabled` in the client, and a write two calls of group commit
that return at once (`caller`, `merged`). With the API but no provider set (no SDK), no
span is made: each call checks the global providers. OpenTelemetry is imported on the first
call, not with d1saver.

Attributes follow OpenTelemetry's stable database conventions, with db.system.name
"cloudflare-d1" and cloudflare.d1.response.* as Cloudflare's own D1 binding names them. They
are built from statement names, database ids, the API's host, status codes, error class names
and the numbers in D1's meta: never a parameter (a value, a thread id, a store key), the SQL
text, an error's message, an encryption key or the token.
"""

from __future__ import annotations

import contextvars
import functools
import importlib
import inspect
import logging
import re
import threading
import time
from collections.abc import AsyncGenerator, Callable, Generator, Iterable, Sequence
from functools import lru_cache
from importlib.util import find_spec
from typing import TYPE_CHECKING, Any, Protocol, TypeGuard
from urllib.parse import urlsplit

from d1saver.core.errors import D1Error

if TYPE_CHECKING:
    from d1saver.core.protocol import Result, Statement

    # The client's exchange, given the request's span (None if it could not be made).
    Attempts = Callable[[Sequence[Statement], "Request | None"],
                        Generator[Any, Any, list[Result]]]

# Telemetry never fails a call: what goes wrong here is logged (DEBUG, on d1saver's logger)
# and the call goes on without its span.
_log = logging.getLogger("d1saver")


def _lost(what: str) -> None:
    _log.debug("OpenTelemetry: %s failed; going on without it", what, exc_info=True)


def _installed() -> bool:
    try:
        return find_spec("opentelemetry.trace") is not None
    except (ImportError, ValueError):  # blocked in sys.modules, or a broken install
        return False


# Whether opentelemetry-api is importable: decided once, when d1saver is imported.
enabled: bool = _installed()

SYSTEM = "cloudflare-d1"  # db.system.name, as Cloudflare's D1 binding says it
SCOPE = "d1saver"  # the instrumentation scope of the tracer and the meter
# Advised by the conventions for db.client.operation.duration (seconds).
DURATION_BUCKETS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0)
SUMMARY_MAX = 255  # the conventions cut db.query.summary at 255 characters
# The attributes of a request span that the duration metric carries too.
METRIC_ATTRIBUTES = ("db.system.name", "db.namespace", "db.operation.name", "db.query.summary",
                     "server.address", "server.port", "db.response.status_code", "error.type")
# D1's meta, statement by statement, summed (or taken) over a batch: cloudflare.d1.response.*.
_SUMMED = ("rows_read", "rows_written", "changes")
_FIRST_WORD = re.compile(r"\s*([A-Za-z]{1,16})\b")


class _API:
    """OpenTelemetry's modules and d1saver's tracer and histogram, made on first use. The
    tracer and meter are the global providers' proxies: a provider set later still gets
    every span and measurement."""

    def __init__(self) -> None:
        from importlib.metadata import PackageNotFoundError, version

        from opentelemetry import context, metrics, trace

        try:
            ours: str | None = version("d1saver")
        except PackageNotFoundError:  # pragma: no cover - a source tree never installed
            ours = None
        self.context = context
        self.trace = trace
        self.metrics = metrics
        self._meters: Any = importlib.import_module("opentelemetry.metrics._internal")
        self._set = False
        # A provider named by OTEL_PYTHON_TRACER_PROVIDER / _METER_PROVIDER is loaded here.
        trace.get_tracer_provider()
        metrics.get_meter_provider()
        self.CLIENT = trace.SpanKind.CLIENT
        self.INTERNAL = trace.SpanKind.INTERNAL
        self.tracer = trace.get_tracer(SCOPE, ours)
        self.duration = metrics.get_meter(SCOPE, ours or "").create_histogram(
            "db.client.operation.duration", unit="s",
            description="Duration of database client operations.",
            explicit_bucket_boundaries_advisory=DURATION_BUCKETS)

    def on(self) -> bool:
        """Whether the application has set a tracer or a meter provider: until it does,
        every span would be a no-op one, so none is made. Once set, a provider stays."""
        if not self._set:
            self._set = self._provider_set()
        return self._set

    def _provider_set(self) -> bool:
        # The API's own globals, read directly: its getters look the environment up on every
        # call (2 µs each, per call and request). An API without them: the public getters.
        try:
            return (self.trace._TRACER_PROVIDER is not None
                    or self._meters._METER_PROVIDER is not None)
        except AttributeError:  # pragma: no cover - another version of the API
            tracing = self.trace.get_tracer_provider()
            meters = self.metrics.get_meter_provider()
            return not (isinstance(tracing, (self.trace.ProxyTracerProvider,
                                             self.trace.NoOpTracerProvider))
                        and type(meters).__name__ in ("_ProxyMeterProvider", "NoOpMeterProvider"))

    def failed(self, span: Any, error_type: str) -> None:
        """Mark a span as failed: error.type and an ERROR status naming only the class."""
        if span.is_recording():
            span.set_attribute("error.type", error_type)
            span.set_status(self.trace.Status(self.trace.StatusCode.ERROR, error_type))


_api_lock = threading.Lock()
_the_api: _API | None = None


def _api() -> _API:
    global _the_api
    if _the_api is None:
        with _api_lock:
            if _the_api is None:
                _the_api = _API()
    return _the_api


def error_type(exc: BaseException) -> str:
    """error.type: the exception's class name (QueryError, RateLimitError, D1TimeoutError...),
    never its message."""
    return type(exc).__qualname__


# --- one D1 request: a CLIENT span ------------------------------------------------------------

class _Client(Protocol):
    @property
    def database_id(self) -> str: ...

    @property
    def url(self) -> str: ...


def statement_name(statement: Statement) -> str:
    """A statement's catalogue name (PUT, SELECT_PAGE_THREAD...), a list's without the index
    (SCHEMA for SCHEMA[3]); for one built by hand, the SQL's first keyword (SELECT,
    INSERT...), or SQL."""
    if statement.name:
        return statement.name.partition("[")[0]
    m = _FIRST_WORD.match(statement.sql)
    return m.group(1).upper() if m else "SQL"


def describe(statements: Sequence[Statement]) -> tuple[str, str]:
    """db.operation.name and db.query.summary of one request.

    One statement: its name. A batch: "BATCH <name>" when every statement has that name, else
    "BATCH" (the conventions' words). The summary, which also names the span, is the distinct
    names in order ("READ_SCHEMA SELECT_PAGE_THREAD DELTA_HISTORY"), cut at 255 characters
    between names: low cardinality, and a group-committed batch of three puts is summarised
    as one put is.
    """
    names = [statement_name(s) for s in statements]
    distinct = list(dict.fromkeys(names))
    if len(names) == 1:
        operation = names[0]
    elif len(distinct) == 1:
        operation = f"BATCH {names[0]}"
    else:
        operation = "BATCH"
    summary = ""
    for name in distinct:
        joined = f"{summary} {name}" if summary else name
        if len(joined) > SUMMARY_MAX:
            break
        summary = joined
    return operation, summary or operation


@lru_cache(maxsize=256)
def _server(url: str) -> tuple[str, int | None]:
    """server.address and, when not the scheme's default, server.port of the API's URL."""
    parts = urlsplit(url)
    default = {"https": 443, "http": 80}.get(parts.scheme)
    port = parts.port
    return parts.hostname or "", (None if port is None or port == default else port)


def response_meta(results: Sequence[Result]) -> dict[str, Any]:
    """cloudflare.d1.response.* from D1's meta over the statements of a batch: rows read and
    written, changes and sql_duration_ms (D1's `duration`) summed; changed_db if any did;
    size_after as the last statement left the database; served_by_region, served_by_primary
    and total_attempts as D1 reported them. Only numbers, booleans and a region's name."""
    out: dict[str, Any] = {}
    for result in results:
        meta = result.meta
        for key in _SUMMED:
            value = meta.get(key)
            if _number(value):
                out[key] = out.get(key, 0) + int(value)
        duration = meta.get("duration")
        if _number(duration):
            out["sql_duration_ms"] = out.get("sql_duration_ms", 0.0) + float(duration)
        if isinstance(meta.get("changed_db"), bool):
            out["changed_db"] = out.get("changed_db", False) or meta["changed_db"]
        if _number(meta.get("size_after")):
            out["size_after"] = int(meta["size_after"])
        if _number(meta.get("total_attempts")):
            out["total_attempts"] = max(out.get("total_attempts", 0), int(meta["total_attempts"]))
        region = meta.get("served_by_region")
        if isinstance(region, str) and "served_by_region" not in out:
            out["served_by_region"] = region[:64]
        primary = meta.get("served_by_primary")
        if isinstance(primary, bool) and "served_by_primary" not in out:
            out["served_by_primary"] = primary
    return {f"cloudflare.d1.response.{k}": v for k, v in out.items()}


def _number(value: Any) -> TypeGuard[int | float]:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


class Request:
    """The CLIENT span of one D1 request, from its first attempt to its answer: each HTTP
    attempt an event ("d1saver.attempt"), the backoff between them inside the span."""

    __slots__ = ("span", "attributes", "status", "attempts", "sent", "received", "started")

    def __init__(self, span: Any, attributes: dict[str, Any]) -> None:
        self.span = span
        self.attributes = attributes
        self.status: int | None = None
        self.attempts = self.sent = self.received = 0
        self.started = time.perf_counter()

    def attempt(self, number: int, status: int | None, error: D1Error | None,
                seconds: float, sent: int, received: int) -> None:
        """One HTTP attempt ended (the client's _trace): its number, HTTP status, error, and
        the bytes of the request's body and of the answer's."""
        try:
            self._attempt(number, status, error, seconds, sent, received)
        except Exception:
            _lost("an attempt's event")

    def _attempt(self, number: int, status: int | None, error: D1Error | None,
                 seconds: float, sent: int, received: int) -> None:
        self.attempts, self.sent, self.received = number, sent, received
        if status is not None:
            self.status = status
        if self.span.is_recording():
            event: dict[str, Any] = {"d1saver.attempt": number,
                                     "d1saver.attempt.duration": seconds}
            if status is not None:
                event["db.response.status_code"] = str(status)
            if error is not None:
                event["error.type"] = error_type(error)
            self.span.add_event("d1saver.attempt", event)

    def finish(self, api: _API, results: Sequence[Result] | None, failure: str | None) -> None:
        try:
            self._finish(api, results, failure)
        except Exception:
            _lost("ending a request's span")

    def _finish(self, api: _API, results: Sequence[Result] | None, failure: str | None) -> None:
        ended: dict[str, Any] = {}
        if self.status is not None:
            ended["db.response.status_code"] = str(self.status)
        if failure is not None:
            ended["error.type"] = failure
        measured = {k: v for k, v in self.attributes.items() if k in METRIC_ATTRIBUTES}
        api.duration.record(time.perf_counter() - self.started, {**measured, **ended})
        span = self.span
        if span.is_recording():
            span.set_attributes(ended)
            span.set_attributes({"d1saver.attempts": self.attempts,
                                 "http.request.body.size": self.sent,
                                 "http.response.body.size": self.received})
            if results:
                span.set_attributes(response_meta(results))
            if failure is not None:
                api.failed(span, failure)
        span.end()


# A group commit batch being sent: the context of the caller its request is the child of, the
# links to the other callers whose writes it carries, and how many writes it carries.
_MERGED: contextvars.ContextVar[tuple[Any, tuple[Any, ...], int] | None] = contextvars.ContextVar(
    "d1saver_merged", default=None)


def request(client: _Client, statements: Sequence[Statement], attempts: Attempts
            ) -> Generator[Any, Any, list[Result]]:
    """`attempts(statements, request)` (the client's exchange) inside one CLIENT span, named
    by the summary: a child of the current span (the public call); for a group commit batch,
    of the call whose write leads it, linked to the other calls whose writes it carries. A
    request abandoned mid-flight (a cancelled task, Ctrl-C) ends with error.type
    "cancelled"."""
    try:
        api = _api()
        state = _start(api, client, statements) if api.on() else None
    except Exception:
        _lost("starting a request's span")
        state = None
    if state is None:
        return (yield from attempts(statements, None))
    try:
        results = yield from attempts(statements, state)
    except GeneratorExit:
        state.finish(api, None, "cancelled")
        raise
    except BaseException as exc:
        state.finish(api, None, error_type(exc))
        raise
    state.finish(api, results, None)
    return results


def _start(api: _API, client: _Client, statements: Sequence[Statement]) -> Request:
    operation, summary = describe(statements)
    host, port = _server(client.url)
    attributes: dict[str, Any] = {
        "db.system.name": SYSTEM, "db.namespace": client.database_id,
        "db.operation.name": operation, "db.query.summary": summary, "server.address": host}
    if port is not None:
        attributes["server.port"] = port
    if len(statements) > 1:
        attributes["db.operation.batch.size"] = len(statements)
    merged = _MERGED.get()
    parent, links = None, ()
    if merged is not None:
        parent, links, writes = merged
        if writes > 1:
            attributes["d1saver.group_commit.writes"] = writes
    span = api.tracer.start_span(summary, parent, kind=api.CLIENT, attributes=attributes,
                                 links=links)
    return Request(span, attributes)


# --- group commit: which callers' writes a merged batch carries --------------------------------

def caller() -> Any:
    """The current span's context, for a merged batch to link to (None without OpenTelemetry
    or outside any span). Taken when a write joins group commit, in its caller's context."""
    if not enabled:
        return None
    try:
        api = _api()
        if not api.on():
            return None
        context = api.trace.get_current_span().get_span_context()
    except Exception:
        _lost("reading the current span")
        return None
    return context if context.is_valid else None


class _Nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


_NOTHING = _Nothing()


class _Merged:
    __slots__ = ("value", "token")

    def __init__(self, value: tuple[Any, tuple[Any, ...], int]) -> None:
        self.value = value

    def __enter__(self) -> None:
        self.token = _MERGED.set(self.value)

    def __exit__(self, *exc: object) -> None:
        _MERGED.reset(self.token)


class _Write(Protocol):
    @property
    def caller(self) -> Any: ...


def merged(writes: Sequence[_Write]) -> _Nothing | _Merged:
    """Around the send of a group commit batch (each write with its `caller()`, in the order
    they joined): the request is a child of the first write's caller and links to the other
    callers. The batch may be sent by another caller's thread or task (the one collecting),
    so the current span is not taken as the parent; a caller's own lone write is left as it
    is."""
    if not enabled:
        return _NOTHING
    try:
        found = {(c.trace_id, c.span_id): c for w in writes if (c := w.caller) is not None}
        callers = list(found.values())
        if not callers or (len(writes) == 1 and callers[0] == caller()):
            return _NOTHING
        api = _api()
        parent = api.trace.set_span_in_context(api.trace.NonRecordingSpan(callers[0]))
        return _Merged((parent, tuple(api.trace.Link(c) for c in callers[1:]), len(writes)))
    except Exception:
        _lost("linking a group commit batch")
        return _NOTHING


# --- public calls: an INTERNAL span each ------------------------------------------------------

# Set while a public call's span is open: a public call made inside another (D1Store.put's
# batch, a fan-out's workers) opens none of its own.
_CALL: contextvars.ContextVar[bool] = contextvars.ContextVar("d1saver_call", default=False)


def instrument(cls: type, methods: Iterable[str]) -> None:
    """Wrap each named method of `cls` (its own or inherited) in an INTERNAL span
    "<Class>.<method>", sync, async, generator or async generator alike; nothing without
    OpenTelemetry."""
    if not enabled:
        return
    for method in methods:
        setattr(cls, method, traced(getattr(cls, method), f"{cls.__name__}.{method}"))


def traced(fn: Callable[..., Any], name: str) -> Callable[..., Any]:
    """`fn` inside an INTERNAL span called `name`, current while `fn` runs (so the requests it
    makes are its children). An exception marks the span failed with its class name; a
    generator closed early by its consumer is not a failure."""
    if inspect.isasyncgenfunction(fn):
        return _traced_agen(fn, name)
    if inspect.isgeneratorfunction(fn):
        return _traced_gen(fn, name)
    if inspect.iscoroutinefunction(fn):
        return _traced_coro(fn, name)
    return _traced_call(fn, name)


class _Open:
    """A public call's span, current while the call runs (and, for a generator, while it
    works between the items it hands out). Made by `_open`, which gives None if OpenTelemetry
    fails: the call then runs without a span."""

    __slots__ = ("api", "span", "ctx", "tokens")

    def __init__(self, name: str) -> None:
        self.api = _api()
        self.span = self.api.tracer.start_span(name, kind=self.api.INTERNAL)
        self.ctx = self.api.trace.set_span_in_context(self.span)
        self.tokens: tuple[Any, contextvars.Token[bool]] | None = None

    def enter(self) -> None:
        try:
            self.tokens = (self.api.context.attach(self.ctx), _CALL.set(True))
        except Exception:
            _lost("making a call's span current")

    def leave(self) -> None:
        if self.tokens is not None:
            token, call = self.tokens
            self.tokens = None
            _CALL.reset(call)
            self.api.context.detach(token)

    def end(self, error: BaseException | None = None) -> None:
        try:
            if error is not None:
                self.api.failed(self.span, error_type(error))
            self.span.end()
        except Exception:
            _lost("ending a call's span")


def _open(name: str) -> _Open | None:
    """A public call's span, unless one is open already (a call inside a call) or
    OpenTelemetry fails."""
    if _CALL.get():
        return None
    try:
        return _Open(name) if _api().on() else None
    except Exception:
        _lost("starting a call's span")
        return None


def _traced_call(fn: Callable[..., Any], name: str) -> Callable[..., Any]:
    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        opened = _open(name)
        if opened is None:
            return fn(*args, **kwargs)
        opened.enter()
        try:
            result = fn(*args, **kwargs)
        except BaseException as exc:
            opened.leave()
            opened.end(exc)
            raise
        opened.leave()
        opened.end()
        return result

    return call


def _traced_coro(fn: Callable[..., Any], name: str) -> Callable[..., Any]:
    @functools.wraps(fn)
    async def call(*args: Any, **kwargs: Any) -> Any:
        opened = _open(name)
        if opened is None:
            return await fn(*args, **kwargs)
        opened.enter()
        try:
            result = await fn(*args, **kwargs)
        except BaseException as exc:
            opened.leave()
            opened.end(exc)
            raise
        opened.leave()
        opened.end()
        return result

    return call


def _traced_gen(fn: Callable[..., Generator[Any, Any, Any]], name: str
                ) -> Callable[..., Generator[Any, Any, Any]]:
    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Generator[Any, Any, Any]:
        opened = _open(name)
        if opened is None:
            return (yield from fn(*args, **kwargs))
        inner = fn(*args, **kwargs)
        error: BaseException | None = None
        try:
            while True:
                opened.enter()
                try:
                    item = next(inner)
                except StopIteration as stop:
                    return stop.value
                finally:
                    opened.leave()
                yield item
        except GeneratorExit:  # the consumer stopped early: not a failure
            raise
        except BaseException as exc:
            error = exc
            raise
        finally:
            inner.close()
            opened.end(error)

    return call


def _traced_agen(fn: Callable[..., AsyncGenerator[Any, Any]], name: str
                 ) -> Callable[..., AsyncGenerator[Any, Any]]:
    @functools.wraps(fn)
    async def call(*args: Any, **kwargs: Any) -> AsyncGenerator[Any, Any]:
        opened = _open(name)
        if opened is None:
            async for item in fn(*args, **kwargs):
                yield item
            return
        inner = fn(*args, **kwargs)
        error: BaseException | None = None
        try:
            while True:
                opened.enter()
                try:
                    item = await inner.__anext__()
                except StopAsyncIteration:
                    return
                finally:
                    opened.leave()
                yield item
        except GeneratorExit:
            raise
        except BaseException as exc:
            error = exc
            raise
        finally:
            await inner.aclose()
            opened.end(error)

    return call


# --- commands: an INTERNAL span each ----------------------------------------------------------

# Commands that serve until stopped: no span of their own (it would hold hours of unrelated
# calls); the calls they make are traces of their own.
SERVING_COMMANDS = frozenset({"serve", "ui"})


class _Command:
    """The span of one `d1saver` command ("d1saver compact", "d1saver store put"), around its
    group's invoke. A nested group names the span it runs in instead of opening another."""

    _active: contextvars.ContextVar[_Command | None] = contextvars.ContextVar(
        "d1saver_command", default=None)

    def __init__(self, ctx: Any) -> None:
        self.ctx = ctx
        self.named = False
        self.opened: _Open | None = None
        self.outer: _Command | None = None

    def __enter__(self) -> None:
        self.outer = self._active.get()
        if self.outer is not None:
            return
        try:
            # The command's name as given, which click has parsed out but not yet resolved.
            given = getattr(self.ctx, "_protected_args", None) or []
            if not _api().on() or (given and given[0] in SERVING_COMMANDS):
                return
            self.opened = _Open("d1saver")
            self.tokens = (self.opened.api.context.attach(self.opened.ctx),
                           self._active.set(self))
        except Exception:
            _lost("starting a command's span")
            self.opened = None

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None,
                 tb: object) -> None:
        top = self if self.outer is None else self.outer
        if top.opened is None:
            return
        try:
            if not top.named:
                top.opened.span.update_name(self._name())
                top.named = True
            if self.outer is None:
                self._end(top.opened, ev)
        except Exception:
            _lost("ending a command's span")

    def _name(self) -> str:
        """d1saver and the command's path, from the click contexts: names of commands only."""
        names = []
        ctx = self.ctx
        while ctx is not None and ctx.parent is not None:  # the root's name is the program's
            names.append(str(ctx.info_name))
            ctx = ctx.parent
        names.reverse()
        sub = getattr(self.ctx, "invoked_subcommand", None)
        if sub and sub != "*":
            names.append(str(sub))
        return " ".join(["d1saver", *names])

    def _end(self, opened: _Open, ev: BaseException | None) -> None:
        token, active = self.tokens
        self._active.reset(active)
        opened.api.context.detach(token)
        span = opened.span
        # click's Exit (typer.Exit) carries exit_code; SystemExit its code.
        code = ev.code if isinstance(ev, SystemExit) else getattr(ev, "exit_code", None)
        if isinstance(code, int) and span.is_recording():
            span.set_attribute("process.exit.code", code)
        if ev is None or code == 0:
            span.end()
        elif isinstance(code, int):
            opened.api.failed(span, str(code))
            span.end()
        else:
            opened.end(ev)


def command(ctx: Any) -> _Nothing | _Command:
    """Around a command group's invoke (`ctx`: its click context): the command's span."""
    return _Command(ctx) if enabled else _NOTHING


__all__ = ["DURATION_BUCKETS", "Request", "SYSTEM", "caller", "command", "describe", "enabled",
           "error_type", "instrument", "merged", "request", "response_meta", "statement_name",
           "traced"]
