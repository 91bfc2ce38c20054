"""What the test folders share: databases of one engine with every HTTP attempt they make
recorded, fresh local ones, the two engines a test runs on, a clock the test moves, rows
loaded in batches, and a transport that runs another operation just before a chosen request."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, TypeVar

import httpx
import pytest

from d1saver import D1Saver, Statement, TraceEvent
from d1saver.local import LocalD1, LocalD1Transport

LOCAL_BASE_URL = "http://d1.local/client/v4"

# A fixture's params for "each test on the local D1, and on Wrangler's real D1 engine".
ENGINES = ["local", pytest.param("wrangler", marks=pytest.mark.realengine)]


def fresh_ids(n: int, prefix: str = "db") -> list[str]:
    """n database ids no other test uses."""
    return [f"{prefix}-{uuid.uuid4().hex[:8]}" for _ in range(n)]


def local_engine(**engine_kwargs: Any) -> dict[str, Any]:
    """A fresh in-memory local D1 and its in-process transport, as keyword arguments of a
    Recorded subclass."""
    engine = LocalD1(**engine_kwargs)
    return {"engine": engine, "transport": LocalD1Transport(engine)}


@dataclass
class Recorded:
    """The part every test subject shares: how its clients reach the engine (`transport`: None
    over HTTP), the local engine if it is one (closed by `close`), and every HTTP attempt its
    clients make (`events`). The fields are keyword-only, so a subclass's own come first."""

    transport: Any = field(default=None, kw_only=True)
    engine: LocalD1 | None = field(default=None, kw_only=True)
    events: list[TraceEvent] = field(default_factory=list, kw_only=True)

    def wired(self, kwargs: dict[str, Any]) -> dict[str, Any]:
        """A client's keyword arguments, defaulted to this transport and this record."""
        kwargs.setdefault("tracer", self.events.append)
        kwargs.setdefault("transport", self.transport)
        return kwargs

    def attempts(self, fn: Callable[[], Any]) -> tuple[Any, list[TraceEvent]]:
        """Run fn; return its result and the HTTP attempts it made."""
        before = len(self.events)
        out = fn()
        return out, self.events[before:]

    def close_engine(self) -> None:
        if self.engine is not None:
            self.engine.close()


S = TypeVar("S", bound=Recorded)


def closing(subject: S) -> Iterator[S]:
    """A fixture's body for a subject on a fresh local engine: the engine closed after the test."""
    yield subject
    subject.close_engine()


def on_engine(request: pytest.FixtureRequest, local: Callable[[], S], real: Callable[[Any], S],
              real_fixture: str = "wrangler_d1") -> Iterator[S]:
    """A fixture's body with params=ENGINES: the subject made fresh on the local D1, or made
    over the real engine's session fixture (`real_fixture`)."""
    if request.param == "local":
        yield from closing(local())
    else:
        yield real(request.getfixturevalue(real_fixture))


@dataclass
class Clock:
    """Unix seconds that move only when told: TTLs run out at once, with no sleeping."""

    now: float = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def execute_in_batches(saver: D1Saver, statements: Iterable[Statement], *, max_statements: int,
                       max_bytes: int) -> None:
    """Send the statements in order, in requests of at most max_statements statements and
    max_bytes of text parameters (a lone statement over max_bytes goes alone)."""
    batch: list[Statement] = []
    size = 0
    for stmt in statements:
        weight = sum(len(v) for v in stmt.params if isinstance(v, str))
        if batch and (len(batch) >= max_statements or size + weight > max_bytes):
            saver.execute(batch)
            batch, size = [], 0
        batch.append(stmt)
        size += weight
    if batch:
        saver.execute(batch)


class Before(httpx.BaseTransport):
    """Runs `action` once, just before the `nth` request (0 first) that `picks(path, body)`:
    one operation's requests stepped against another's at a chosen point, no timing."""

    def __init__(self, inner: Any, picks: Callable[[str, bytes], bool],
                 action: Callable[[], Any], nth: int = 0) -> None:
        self.inner, self.picks, self.action, self.nth = inner, picks, action, nth
        self.seen = 0
        self.fired = False

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        body = request.read()
        if not self.fired and self.picks(request.url.path, body):
            if self.seen == self.nth:
                self.fired = True
                self.action()
            self.seen += 1
        return self.inner.handle_request(request)


def body_has(marker: bytes) -> Callable[[str, bytes], bool]:
    """Picks the requests whose body holds `marker` (for `Before`)."""
    return lambda path, body: marker in body
