"""Group commit: writes that arrive while one is in flight leave together, in one batch.

The first write is sent at once. A write arriving while another is in flight joins a queue;
the first to queue opens a short collection window (`window`, 10 ms by default), then
everything queued by then leaves as one D1 batch (one transaction), without waiting for the
in-flight request to return. So a burst (parallel tasks finishing together, a `put` arriving
with `put_writes`) costs two overlapping requests instead of one per write, and no write waits
a whole round trip for another: fewer requests than no grouping, in less time than one request
in flight at a time (figures in benchmarks/RESULTS.md, "Design figures").

Each caller returns once its own statements have committed, or with its own error:
- A merged batch that fails on its SQL (QueryError: D1 rolled all of it back because of one
  statement) is split: each write is sent again alone and gets its own outcome, so one
  caller's bad write never fails another's.
- Any other failure (429, 5xx, timeout, a transient D1 error, after the client's retries)
  would meet every write alike: each write of the batch gets that error, and nothing is
  re-sent, which would only multiply requests (into a rate-limit lockout, say).
- Whatever stops the committer (Ctrl-C in the window or during a send, any exception), every
  queued write gets an outcome and the queue is reset: no caller hangs, later writes flow.

Per-loop state is held weakly, so code that calls `asyncio.run` once per request keeps none
of the loops it has finished with.
"""

from __future__ import annotations

import asyncio
import threading
import time
import weakref
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from d1saver.core.protocol import Result, Statement
from d1saver.http import telemetry
from d1saver.core.errors import D1Error, QueryError, SerializationError, TransientQueryError

# Bounds on one merged batch, well inside D1's 30 s per request.
MAX_OPS = 64
MAX_STATEMENTS = 400
DEFAULT_WINDOW = 0.010


@dataclass(eq=False)
class _Ticket:
    statements: Sequence[Statement]
    results: list[Result] | None = None
    error: BaseException | None = None
    done: threading.Event = field(default_factory=threading.Event)
    future: asyncio.Future | None = None
    caller: Any = field(default_factory=telemetry.caller)  # its caller's span, to link to

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


def _statements(batch: list[_Ticket]) -> list[Statement]:
    return [s for t in batch for s in t.statements]


def _settle(batch: list[_Ticket], results: list[Result]) -> None:
    at = 0
    for t in batch:
        t.results = results[at: at + len(t.statements)]
        at += len(t.statements)


def _split(batch: list[_Ticket], error: Exception) -> bool:
    """Record a failed send; True when each write must be sent alone for its own outcome.

    Only an error that one write can cause for all is split: an SQL error (D1 rolled the
    batch back because of one statement) or a value the request could not carry (nothing
    was sent). Anything else gives every write of the batch that error.
    """
    if len(batch) > 1 and (isinstance(error, SerializationError) or (
            isinstance(error, QueryError) and not isinstance(error, TransientQueryError))):
        return True
    for t in batch:
        t.error = error
    return False


def _wake(tickets: list[_Ticket]) -> None:
    """Let each ticket's caller (a thread or a task) read its outcome."""
    for t in tickets:
        t.done.set()
        if t.future is not None and not t.future.done():
            t.future.set_result(None)


def _fail(tickets: list[_Ticket], error: BaseException) -> None:
    """Give every ticket still without an outcome this error, and wake its caller."""
    for t in tickets:
        if t.results is None and t.error is None:
            t.error = error
    _wake(tickets)


def _interrupted(exc: BaseException, *, sent: bool) -> D1Error:
    """The error of writes whose committer was stopped by another caller's interruption
    (KeyboardInterrupt, SystemExit, cancellation), which that caller alone re-raises."""
    fate = ("its batch was being sent: it may or may not have committed" if sent
            else "it was not sent")
    error = D1Error(f"group commit interrupted by {type(exc).__name__} in another caller; "
                    f"{fate}. Retry the write.")
    error.__cause__ = exc
    return error


@dataclass
class _LoopState:
    """The async committer's state for one event loop."""

    inflight: int = 0
    pending: list[_Ticket] = field(default_factory=list)
    collecting: bool = False
    tasks: set[asyncio.Task] = field(default_factory=set)


class GroupCommit:
    """Merges concurrent write requests of one client; sync (threads) and async (per loop)."""

    def __init__(self, send: Callable[[list[Statement]], list[Result]],
                 asend: Callable[[list[Statement]], Awaitable[list[Result]]],
                 window: float = DEFAULT_WINDOW) -> None:
        self._send = send
        self._asend = asend
        self.window = window
        self._lock = threading.Lock()
        self._inflight = 0
        self._pending: list[_Ticket] = []
        self._collecting = False
        # Weak: a finished loop (asyncio.run per request) takes its idle state with it.
        self._loops: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _LoopState] = (
            weakref.WeakKeyDictionary())
        self.batches = 0  # requests sent for writes (for tests and benchmarks)
        self.merged = 0  # writes that rode along in another's batch

    # --- sync ---------------------------------------------------------------------------

    def submit(self, statements: Sequence[Statement]) -> list[Result]:
        ticket = _Ticket(statements)
        with self._lock:
            if self._inflight == 0 and not self._collecting:
                self._inflight += 1
                role = "alone"
            else:
                self._pending.append(ticket)
                role = "waiter" if self._collecting else "collector"
                self._collecting = True
        if role == "alone":
            try:
                self._run([ticket])
            finally:
                with self._lock:
                    self._inflight -= 1
        elif role == "collector":
            self._collect()
        else:
            ticket.done.wait()
        return ticket.outcome()

    def _collect(self) -> None:
        """After the window, send everything queued, batch by batch. The queue is this
        thread's while `_collecting` is set; if anything stops the thread first (Ctrl-C in
        the window or in a send), the writes it still owns get an error, never a hang."""
        owner = True
        batch: list[_Ticket] = []
        try:
            time.sleep(self.window)
            while owner:
                with self._lock:
                    batch = _take(self._pending)
                    owner = self._collecting = bool(self._pending)  # more: another batch follows
                    self._inflight += 1
                try:
                    self._run(batch)
                finally:
                    with self._lock:
                        self._inflight -= 1
                    _wake(batch)
        except BaseException as exc:
            stranded: list[_Ticket] = []
            if owner:
                with self._lock:
                    stranded, self._pending = self._pending, []
                    self._collecting = False
            _fail(batch + stranded, _interrupted(exc, sent=False))
            raise

    def _run(self, batch: list[_Ticket]) -> None:
        """Send one batch; record each ticket's outcome. Only an interruption (a
        BaseException that is not an Exception) propagates, after failing the batch."""
        self.batches += 1
        self.merged += len(batch) - 1
        try:
            try:
                with telemetry.merged(batch):
                    _settle(batch, self._send(_statements(batch)))
            except Exception as exc:
                if _split(batch, exc):
                    for t in batch:
                        try:
                            with telemetry.merged([t]):
                                t.results = self._send(list(t.statements))
                        except Exception as one:
                            t.error = one
        except BaseException as exc:
            _fail(batch, _interrupted(exc, sent=True))
            raise

    # --- async --------------------------------------------------------------------------

    async def asubmit(self, statements: Sequence[Statement]) -> list[Result]:
        loop = asyncio.get_running_loop()
        with self._lock:  # loops on other threads share the mapping
            state = self._loops.get(loop)
            if state is None:
                state = self._loops[loop] = _LoopState()
        future = loop.create_future()
        ticket = _Ticket(statements, future=future)
        if state.inflight == 0 and not state.collecting:
            state.inflight += 1
            try:
                await self._arun([ticket])
            finally:
                state.inflight -= 1
            return ticket.outcome()
        state.pending.append(ticket)
        if not state.collecting:
            # The collector is a task of its own, so a cancelled caller strands no one.
            state.collecting = True
            task = loop.create_task(self._acollect(state))
            state.tasks.add(task)
            task.add_done_callback(state.tasks.discard)
        await future
        return ticket.outcome()

    async def _acollect(self, state: _LoopState) -> None:
        try:
            await asyncio.sleep(self.window)
        finally:
            # Even when the window is cancelled (the loop shutting down), what is queued is
            # sent; if a send is interrupted, whatever is still queued gets an error.
            try:
                while state.pending:
                    batch = _take(state.pending)
                    state.inflight += 1
                    try:
                        await self._arun(batch)
                    finally:
                        state.inflight -= 1
            except BaseException as exc:
                stranded, state.pending = state.pending, []
                _fail(stranded, _interrupted(exc, sent=False))
                raise
            finally:
                state.collecting = False

    async def _arun(self, batch: list[_Ticket]) -> None:
        """`_run`, asynchronously; also resolves each ticket's future."""
        self.batches += 1
        self.merged += len(batch) - 1
        try:
            try:
                with telemetry.merged(batch):
                    _settle(batch, await self._asend(_statements(batch)))
            except Exception as exc:
                if _split(batch, exc):
                    for t in batch:
                        try:
                            with telemetry.merged([t]):
                                t.results = await self._asend(list(t.statements))
                        except Exception as one:
                            t.error = one
        except BaseException as exc:
            _fail(batch, _interrupted(exc, sent=True))
            raise
        finally:
            _wake(batch)


__all__ = ["DEFAULT_WINDOW", "GroupCommit", "MAX_OPS", "MAX_STATEMENTS"]
