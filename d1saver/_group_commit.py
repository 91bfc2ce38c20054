"""Group commit: writes queued while one request is in flight leave together, in one batch.

The first write is sent at once. Writes that arrive while it is in flight wait; when it
returns, the first of them sends all of them as one D1 batch (one transaction), and so on.
Each caller returns once its own statements have committed. If a merged batch fails, D1 has
rolled all of it back, so each write is sent again alone and gets its own outcome: one
caller's bad write never fails another's. Parallel tasks finishing together, and a `put`
arriving while `put_writes` is in flight, so cost one request instead of several.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field


from d1saver._client import Result, Statement
from d1saver._errors import D1Error

# Bounds on one merged batch, well inside D1's 30 s per request.
MAX_OPS = 64
MAX_STATEMENTS = 400


@dataclass(eq=False)
class _Ticket:
    statements: Sequence[Statement]
    results: list[Result] | None = None
    error: BaseException | None = None
    lead: list[_Ticket] | None = None
    done: threading.Event = field(default_factory=threading.Event)
    future: asyncio.Future | None = None

    def outcome(self) -> list[Result]:
        if self.error is not None:
            raise self.error
        assert self.results is not None
        return self.results


def _take(pending: list[_Ticket]) -> list[_Ticket]:
    """The next batch from the queue, in arrival order, within the bounds."""
    batch: list[_Ticket] = []
    count = 0
    while pending and len(batch) < MAX_OPS:
        n = len(pending[0].statements)
        if batch and count + n > MAX_STATEMENTS:
            break
        batch.append(pending.pop(0))
        count += n
    return batch


def _settle(batch: list[_Ticket], results: list[Result]) -> None:
    at = 0
    for t in batch:
        t.results = results[at: at + len(t.statements)]
        at += len(t.statements)


class GroupCommit:
    """Merges concurrent write requests of one client; sync (threads) and async (one loop)."""

    def __init__(self, send: Callable[[list[Statement]], list[Result]],
                 asend: Callable[[list[Statement]], Awaitable[list[Result]]]) -> None:
        self._send = send
        self._asend = asend
        self._lock = threading.Lock()
        self._pending: list[_Ticket] = []
        self._busy = False
        self._apending: dict[asyncio.AbstractEventLoop, list[_Ticket]] = {}
        self._abusy: set[asyncio.AbstractEventLoop] = set()
        self._tasks: set[asyncio.Task] = set()
        self.batches = 0  # requests sent for merged writes (for tests and benchmarks)
        self.merged = 0  # writes that rode along in another's batch

    # --- sync ---------------------------------------------------------------------------

    def submit(self, statements: Sequence[Statement]) -> list[Result]:
        ticket = _Ticket(statements)
        with self._lock:
            if self._busy:
                self._pending.append(ticket)
            else:
                self._busy = True
                ticket.lead = [ticket]
        if ticket.lead is None:
            ticket.done.wait()
            if ticket.lead is None:  # another caller committed it
                return ticket.outcome()
        try:
            self._run(ticket.lead, ticket)
        finally:
            with self._lock:
                nxt = _take(self._pending)
                if nxt:
                    nxt[0].lead = nxt
                    nxt[0].done.set()  # hand the lead over: it sends the queued batch
                else:
                    self._busy = False
        return ticket.outcome()

    def _run(self, batch: list[_Ticket], me: _Ticket) -> None:
        self.batches += 1
        self.merged += len(batch) - 1
        try:
            _settle(batch, self._send([s for t in batch for s in t.statements]))
        except D1Error as exc:
            if len(batch) == 1:
                me.error = exc
            else:
                for t in batch:
                    try:
                        t.results = self._send(list(t.statements))
                    except D1Error as one:
                        t.error = one
        except BaseException as exc:
            for t in batch:
                t.error = exc
        for t in batch:
            if t is not me:
                t.lead = None
                t.done.set()

    # --- async --------------------------------------------------------------------------

    async def asubmit(self, statements: Sequence[Statement]) -> list[Result]:
        loop = asyncio.get_running_loop()
        ticket = _Ticket(statements, future=loop.create_future())
        if loop in self._abusy:
            self._apending.setdefault(loop, []).append(ticket)
            # Settled by whoever sends the batch this ticket rides in. If this caller is
            # cancelled meanwhile, the write is still sent; only the wait is abandoned.
            await ticket.future
            return ticket.outcome()
        self._abusy.add(loop)
        try:
            await self._arun([ticket])
        finally:
            self._ahandover(loop)
        return ticket.outcome()

    def _ahandover(self, loop: asyncio.AbstractEventLoop) -> None:
        """Send what queued meanwhile from a task of its own, so no caller's fate blocks it."""
        batch = _take(self._apending.get(loop, []))
        if not batch:
            self._abusy.discard(loop)
            return
        try:
            task = loop.create_task(self._alead(batch, loop))
        except RuntimeError:  # the loop is closing: nobody is left to wait for these
            self._abusy.discard(loop)
            return
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _alead(self, batch: list[_Ticket], loop: asyncio.AbstractEventLoop) -> None:
        try:
            await self._arun(batch)
        finally:
            self._ahandover(loop)

    async def _arun(self, batch: list[_Ticket]) -> None:
        self.batches += 1
        self.merged += len(batch) - 1
        try:
            _settle(batch, await self._asend([s for t in batch for s in t.statements]))
        except D1Error as exc:
            if len(batch) == 1:
                batch[0].error = exc
            else:
                for t in batch:
                    try:
                        t.results = await self._asend(list(t.statements))
                    except D1Error as one:
                        t.error = one
        except BaseException as exc:
            for t in batch:
                t.error = exc
            raise
        finally:
            for t in batch:
                if t.future is not None and not t.future.done():
                    t.future.set_result(None)


__all__ = ["GroupCommit", "MAX_OPS", "MAX_STATEMENTS"]

