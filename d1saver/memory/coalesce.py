"""Concurrent async calls share requests: the calls a store or cache receives in one
event-loop tick leave together, as LangGraph's AsyncBatchedBaseStore gathers them.

A call is checked and encoded in its own task (a bad input raises there, before anything is
sent, and fails no one else), then queued with a future. The first call of a tick starts a
flush task; a task's first step runs after every task already scheduled, so the calls of the
same tick (an `asyncio.gather` of many) are all queued by then. The flush sends them in call
order, as one request per database (several when a gathered batch passes D1's bounds), and
gives each call its own result or its own error. A call cancelled before the flush takes it
is left out; one cancelled after is sent, as a request in flight is (its caller alone sees
the cancellation).

A call that takes more than one round of requests (while memory moves, what moved is read
and deleted at its previous home in a round before or after its home's) is not gathered: it
is queued `alone`, and the flush sends the gathered calls queued before it, then its rounds,
then goes on, so the tick's calls still take effect in call order.
"""

from __future__ import annotations

import asyncio
import threading
import weakref
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from d1saver.core.errors import D1Error, FleetError
from d1saver.core.protocol import Result, Statement
from d1saver.fleet.databases import Database
from d1saver.fleet.fleet import Fleet
from d1saver.http.group_commit import MAX_STATEMENTS, caused_by_one

W = TypeVar("W")
C = TypeVar("C", bound="Call[Any]")

# A gathered request carries at most this many bytes of stored text: past it, the calls
# after go in the next request (a call alone may carry more, as it always could).
REQUEST_BYTES = 4_000_000


@dataclass(eq=False)
class Call(Generic[W]):
    """One caller's work, checked and encoded, and the future its caller awaits."""

    work: W
    future: asyncio.Future[Any]
    size: int = 0  # bytes of stored text it sends (for the request bound)
    databases: set[str] = field(default_factory=set)
    alone: bool = False  # sent by itself, in its own rounds, in its place in call order

    def settle(self, result: Any) -> None:
        if not self.future.done():
            self.future.set_result(result)

    def fail(self, error: BaseException) -> None:
        if not self.future.done():
            self.future.set_exception(error)


class Tick(Generic[W]):
    """Gathers the calls of one event-loop tick and hands them to `flush` together."""

    def __init__(self, flush: Callable[[list[Call[W]]], Awaitable[None]]) -> None:
        self._flush = flush
        self._lock = threading.Lock()  # loops on other threads share the mapping
        self._queues: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, list[Call[W]]] = (
            weakref.WeakKeyDictionary())
        self._tasks: set[asyncio.Task[None]] = set()
        self.flushes = 0  # gathered batches flushed (for tests and benchmarks)

    async def submit(self, work: W, *, size: int = 0, databases: Iterable[str] = (),
                     alone: bool = False) -> Any:
        loop = asyncio.get_running_loop()
        call: Call[W] = Call(work, loop.create_future(), size, set(databases), alone)
        with self._lock:
            queue = self._queues.get(loop)
            start = queue is None
            if queue is None:
                queue = self._queues[loop] = []
            queue.append(call)
        if start:
            # A task of its own, so a cancelled caller strands no one.
            task = loop.create_task(self._run(loop))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        return await call.future

    async def _run(self, loop: asyncio.AbstractEventLoop) -> None:
        with self._lock:
            queue = self._queues.pop(loop, [])
        calls = [c for c in queue if not c.future.done()]  # cancelled before: not sent
        if not calls:
            return
        self.flushes += 1
        try:
            await self._flush(calls)
        except BaseException as exc:
            error = D1Error(f"a gathered store batch was interrupted by {type(exc).__name__}; "
                            f"it may or may not have committed. Retry the call.")
            error.__cause__ = exc
            for c in calls:
                c.fail(error)
            if not isinstance(exc, Exception):
                raise
        finally:
            for c in calls:  # a flush that forgot a call must not leave it waiting forever
                c.fail(D1Error("a gathered store batch ended without an outcome for this call"))


def runs(calls: Sequence[Call[W]]) -> list[list[Call[W]]]:
    """The calls in order, cut into runs sent one after the other: each call `alone` a run
    of its own, and the gathered calls between them together."""
    out: list[list[Call[W]]] = []
    for c in calls:
        if c.alone or not out or out[-1][0].alone:
            out.append([])
        out[-1].append(c)
    return out


def chunks(calls: Sequence[Call[W]], limit: int = REQUEST_BYTES) -> list[list[Call[W]]]:
    """Consecutive calls grouped so each group's stored text stays within `limit` bytes."""
    out: list[list[Call[W]]] = []
    size = 0
    for c in calls:
        if not out or (out[-1] and size + c.size > limit):
            out.append([])
            size = 0
        out[-1].append(c)
        size += c.size
    return out


def cut(calls: list[C], statements: Mapping[str, Sequence[Statement]]) -> list[list[C]]:
    """The calls in parts, each to be planned and sent once more, when some database's part
    of their gathered batch passes the statements bound (in proportion, so the parts fit as
    they would spread evenly; a part still past it is cut again), or none: all of them fit."""
    most = max((len(s) for s in statements.values()), default=0)
    if len(calls) < 2 or most <= MAX_STATEMENTS:
        return []
    first = max(1, min(len(calls) - 1, len(calls) * MAX_STATEMENTS // most))
    return [calls[at: at + first] for at in range(0, len(calls), first)]


async def send_each(fleet: Fleet, statements: Mapping[str, Sequence[Statement]],
                    exchange: Callable[[Database, Sequence[Statement]], Awaitable[list[Result]]]
                    ) -> dict[str, list[Result] | Exception]:
    """Each database's statements as one request (`exchange`, the store's or cache's own),
    concurrently (at most the fleet's limit at once); each database's results or its error."""
    gate = asyncio.Semaphore(fleet.limit)

    async def one(db: str) -> list[Result]:
        async with gate:
            return await exchange(fleet.databases[db], list(statements[db]))

    dbs = list(statements)
    found = await asyncio.gather(*(one(db) for db in dbs), return_exceptions=True)
    out: dict[str, list[Result] | Exception] = {}
    for db, got in zip(dbs, found, strict=True):
        if isinstance(got, BaseException) and not isinstance(got, Exception):
            raise got
        out[db] = got
    return out


def failures(fleet: Fleet, operation: str, calls: Sequence[Call[W]],
             outcomes: Mapping[str, list[Result] | Exception]) -> list[Call[W]]:
    """Fail the calls whose ops went to a database whose request failed, and return, in call
    order, those to send again alone instead: the calls that shared a request D1 rolled back
    on its SQL (one call's statement can have failed them all). Any other failure (429, 5xx,
    a timeout) would meet each call alike: each gets it, as `Fleet.each` reports it."""
    failed = {db: got for db, got in outcomes.items() if isinstance(got, Exception)}
    alone: list[Call[W]] = []
    for db, error in failed.items():
        touched = [c for c in calls if db in c.databases]
        if len(touched) > 1 and caused_by_one(error):
            alone.extend(c for c in touched if c not in alone)
    for c in calls:
        mine = {db: e for db, e in failed.items() if db in c.databases}
        if not mine or c in alone:
            continue
        d1 = {db: e for db, e in mine.items() if isinstance(e, D1Error)}
        if not fleet.spans or len(d1) < len(mine):
            c.fail(next(e for e in mine.values() if not fleet.spans or e not in d1.values()))
        else:
            c.fail(FleetError(operation, d1, {}))
    return sorted(alone, key=list(calls).index)


__all__ = ["Call", "REQUEST_BYTES", "Tick", "chunks", "cut", "failures", "runs", "send_each"]
