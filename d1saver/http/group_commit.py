"""Group commit: writes that arrive together leave together, in one batch (one transaction).

Each commit says when it may leave (`Commit.timing`):
- NOW: at once, taking every write queued along (a put; a read of a thread, which then sees
  the writes before it). "The put leaves as soon as it arrives": it waits only for the held
  writes of its step announced on their way (`Expect`: their statements being built, as
  LangGraph's threads run a task's put_writes beside the step's put), at most EXPECT_MAX; and
  a put that arrives behind a batch in flight waits the window, as 0.2.0's did, so the
  DeltaChannel writes of the next step, which follow it by a moment, ride with it.
- SOON (the default): at once if nothing is in flight; else after a short collection window
  (`window`, 10 ms by default), with everything queued by then, without waiting for the
  in-flight request to return. While writes keep arriving (a burst), the window runs on from
  the newest, up to BURST_WINDOWS windows; and once MAX_INFLIGHT batches are in flight, a due
  write waits for one to land. So a burst (parallel tasks finishing together) costs two
  overlapping requests instead of one per write or per window, and no write waits a whole
  round trip for another but behind two (figures in benchmarks/RESULTS.md, "Design figures").
- HELD: with the database's next batch to leave, which in a LangGraph run is the step's put
  (LangGraph submits each task's put_writes and, once the step ends, its put; a write that
  comes after its step's put has left, as threads may run them out of order, is SOON); if none
  leaves,
  HOLD_WINDOWS windows (50 ms by default) after the last batch in flight has landed, and never
  more than MAX_HOLD. So a step's writes ride with its put: one request per step, LangGraph's
  floor. The operations hold only what a LangGraph run does not wait on before the step's
  put (d1saver/ops/held.py): a DeltaChannel's write, an error, an interrupt, a write of a
  thread this process has not seen, or one from outside a run (update_state) leaves SOON.

A commit is an operation like any other (`commit`), driven by the runner on its caller's
stack: it waits on `Wait` actions and sends its batch through the client's `exchange`, so no
second loop runs below the first. Each write waits for its own moment; the first whose moment
comes takes every write queued (in arrival order, within MAX_OPS and MAX_STATEMENTS) and sends
them; the others wait for that batch to land.

A batch sends each chunk row once (`_statements`): a write's statements are bound again
without the rows an earlier statement of the batch carries, or that its thread has come to hold
since they were built (`Commit.known`); a step's put, built before its held writes were
stored, lists the same new messages they carry.

Each caller returns once its own statements have committed, or with its own error: a held
write is acknowledged only by the batch that carries it.
- A merged batch that fails on its SQL (QueryError: D1 rolled all of it back because of one
  statement) is split: each write is sent again alone, as it was built (every chunk row it
  made), and gets its own outcome, so one caller's bad write never fails another's.
- Any other failure (429, 5xx, timeout, a transient D1 error, after the client's retries)
  would meet every write alike: each write of the batch gets that error, and nothing is
  re-sent, which would only multiply requests (into a rate-limit lockout, say).
- Whatever stops a caller (Ctrl-C, cancellation): a write it was still waiting to send leaves
  the queue unsent, and a batch it was sending gives every write in it an error saying so. No
  other caller depends on it to be sent: no caller hangs, later writes flow.

Sync callers (threads) share one queue; the tasks of each event loop share one of their own,
held weakly, so code that calls `asyncio.run` once per request keeps none of the loops it has
finished with.
"""

from __future__ import annotations

import asyncio
import threading
import time
import weakref
from collections import OrderedDict, deque
from collections.abc import Callable, Container, Generator, Sequence
from dataclasses import dataclass, field
from typing import Any

from d1saver.core.errors import D1Error, QueryError, SerializationError, TransientQueryError
from d1saver.core.protocol import HELD, NOW, SOON, Commit, Op, Param, Result, Statement
from d1saver.http import telemetry
from d1saver.http.runner import Signal, Thrown, Wait

# Bounds on one merged batch, well inside D1's 30 s per request.
MAX_OPS = 64
MAX_STATEMENTS = 400
DEFAULT_WINDOW = 0.010
# A held write waits this many windows for its step's put once nothing is in flight: the
# time LangGraph takes between a step's last write and its put, with room for a busy machine
# (measured: 2-30 ms on 2 loaded cores; the benchmark's agent at the floor).
HOLD_WINDOWS = 5
# Steps whose put has left, remembered per queue (the newest): enough for every run at once.
ENDED_KEPT = 4096
# How long a put waits for the writes of its step announced on their way (`Expect`): a write
# announced earlier than this is taken for lost (its caller failed before it committed).
EXPECT_MAX = 0.05
EXPECT_POLL = 0.001
# Batches in flight at once, as 0.2.0's (one sent at once, one collected): a SOON write due
# while as many are in flight waits until fewer are, taking along every write queued
# meanwhile, so a burst of writes costs two requests, not one per window; at most
# HOLD_WINDOWS windows (about a round trip), however many runs share the queue. Looking again
# LANDED_POLLS times a window.
MAX_INFLIGHT = 2
LANDED_POLLS = 5
# A collecting window runs on while writes keep arriving within it, at most this many windows
# from a write's arrival: ainvoke's burst of DeltaChannel writes (about 40 ms for the
# benchmark's agent) leaves in one batch, not in one per window.
BURST_WINDOWS = 5
# The longest a held write waits while batches are in flight. It leaves with the next batch to
# depart (every batch takes the writes queued), or a window after the last one lands: this
# bounds only a wait behind one request that does not end.
MAX_HOLD = 1.0


@dataclass(eq=False)
class _Ticket:
    statements: Sequence[Statement]
    signal: Signal  # set once the ticket has its outcome
    timing: str  # Commit.timing
    step: tuple[str, str, str] | None  # Commit.step
    known: Callable[[], Container[str]] | None  # Commit.known
    stored: Callable[[], None] | None  # Commit.stored
    arrived: float  # monotonic
    due: float  # when a NOW or SOON ticket leaves, with whatever is queued
    results: list[Result] | None = None
    error: BaseException | None = None
    taken: bool = False  # in a batch (sent, or being sent, by whoever took it)
    caller: Any = field(default_factory=telemetry.caller)  # its caller's span, to link to

    def outcome(self) -> list[Result] | Thrown:
        """Its results, or its error for the runner to throw into the caller's operation
        (raised here, it would take whatever its caller is handling as implicit context)."""
        if self.error is not None:
            return Thrown(self.error)
        assert self.results is not None
        return self.results


@dataclass(eq=False)
class Queue:
    """The writes of one client waiting to leave: its sync callers', or one loop's tasks'."""

    tasks: bool  # the tasks of an event loop (their signals are that loop's futures), or threads
    lock: threading.Lock = field(default_factory=threading.Lock)
    pending: list[_Ticket] = field(default_factory=list)
    inflight: int = 0  # batches being sent
    landed: float = 0.0  # monotonic time the last batch landed
    ended: OrderedDict[tuple[str, str, str], None] = field(default_factory=OrderedDict)
    # Held writes announced on their way, by step: when each was announced.
    expected: dict[tuple[str, str, str], deque[float]] = field(default_factory=dict)


def _take(pending: list[_Ticket], own: _Ticket) -> list[_Ticket]:
    """The next batch, `own` in it: queued writes in arrival order, within the bounds."""
    count, room = len(own.statements), MAX_OPS - 1
    chosen = {id(own)}
    for t in pending:
        if t is own or not room:
            continue
        if count + len(t.statements) > MAX_STATEMENTS:
            break
        chosen.add(id(t))
        count += len(t.statements)
        room -= 1
    batch = [t for t in pending if id(t) in chosen]
    pending[:] = [t for t in pending if id(t) not in chosen]
    for t in batch:
        t.taken = True
    return batch


def _ended(queue: Queue, batch: list[_Ticket]) -> None:
    """The puts leaving in `batch` end their steps: a write of those steps that comes later
    has no put to wait for."""
    for t in batch:
        if t.timing == NOW and t.step is not None:
            queue.ended[t.step] = None
            queue.ended.move_to_end(t.step)
    while len(queue.ended) > ENDED_KEPT:
        queue.ended.popitem(last=False)


def _statements(batch: list[_Ticket]) -> list[Statement]:
    """The batch's statements, each chunk row sent once: a row an earlier statement of the
    batch carries (one transaction, run in order: it is stored by then), or that its write's
    thread is known to hold by now (`Commit.known`), is left out. As many statements as the
    writes made, in their order."""
    carried: set[tuple[Param, str]] = set()
    out: list[Statement] = []
    for t in batch:
        known = t.known() if t.known is not None else ()
        for stmt in t.statements:
            if stmt.chunks:
                thread = stmt.named().get("thread_id")
                stmt = stmt.without_chunks(_Sent(thread, carried, known))
                carried.update((thread, row[0]) for row in stmt.chunks)
            out.append(stmt)
    return out


@dataclass(frozen=True)
class _Sent:
    """The chunk ids of `thread` stored before a statement of a batch runs: carried by an
    earlier one, or known."""

    thread: Param
    carried: set[tuple[Param, str]]
    known: Container[str]

    def __contains__(self, chunk_id: object) -> bool:
        return chunk_id in self.known or (self.thread, chunk_id) in self.carried


def _settle(batch: list[_Ticket], results: list[Result]) -> None:
    at = 0
    for t in batch:
        t.results = results[at: at + len(t.statements)]
        at += len(t.statements)


def caused_by_one(error: Exception) -> bool:
    """Whether one write of a merged batch can have failed it all: an SQL error (D1 rolled
    the batch back because of one statement) or a value the request could not carry."""
    return isinstance(error, SerializationError) or (
        isinstance(error, QueryError) and not isinstance(error, TransientQueryError))


def _split(batch: list[_Ticket], error: Exception) -> bool:
    """Record a failed send; True when each write must be sent alone for its own outcome.

    Only an error that one write can cause for all is split: an SQL error (D1 rolled the
    batch back because of one statement) or a value the request could not carry (nothing
    was sent). Anything else gives every write of the batch that error.
    """
    if len(batch) > 1 and caused_by_one(error):
        return True
    for t in batch:
        t.error = error
    return False


def _wake(tickets: list[_Ticket]) -> None:
    """Let each ticket's caller (a thread or a task) read its outcome."""
    for t in tickets:
        t.signal.set()


def _fail(tickets: list[_Ticket], error: BaseException) -> None:
    """Give every ticket still without an outcome this error, and wake its caller."""
    for t in tickets:
        if t.results is None and t.error is None:
            t.error = error
    _wake(tickets)


def _interrupted(exc: BaseException) -> D1Error:
    """The error of writes whose batch was being sent when another caller was interrupted
    (KeyboardInterrupt, SystemExit, cancellation), which that caller alone re-raises."""
    error = D1Error(f"group commit interrupted by {type(exc).__name__} in another caller; "
                    "its batch was being sent: it may or may not have committed. Retry the "
                    "write.")
    error.__cause__ = exc
    return error


class GroupCommit:
    """Merges concurrent writes of one client; sync callers (threads) and async ones (per loop)."""

    def __init__(self, exchange: Callable[[Sequence[Statement]], Op[list[Result]]],
                 window: float = DEFAULT_WINDOW) -> None:
        self._exchange = exchange
        self.window = window
        self._sync = Queue(tasks=False)
        self._lock = threading.Lock()
        # Weak: a finished loop (asyncio.run per request) takes its idle queue with it.
        self._loops: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Queue] = (
            weakref.WeakKeyDictionary())
        self.batches = 0  # requests sent for writes (for tests and benchmarks)
        self.merged = 0  # writes that rode along in another's batch

    def queue(self, loop: asyncio.AbstractEventLoop | None) -> Queue:
        """The queue of sync callers (no loop), or of the tasks of `loop`."""
        if loop is None:
            return self._sync
        with self._lock:  # loops on other threads share the mapping
            queue = self._loops.get(loop)
            if queue is None:
                queue = self._loops[loop] = Queue(tasks=True)
            return queue

    def commit(self, queue: Queue, action: Commit) -> Generator[Any, Any, list[Result] | Thrown]:
        """The operation of one write: queued, sent in a batch (by this caller or another),
        its own results returned or its own error raised."""
        now = time.monotonic()
        with queue.lock:
            timing = action.timing
            if timing == HELD and action.step is not None:
                announced = queue.expected.get(action.step)
                if announced:  # it has arrived
                    announced.popleft()
                    if not announced:
                        del queue.expected[action.step]
                if action.step in queue.ended:
                    timing = SOON  # its put has left already: nothing to wait for
            due = now
            if timing == SOON and (queue.inflight or any(t.timing == SOON for t in queue.pending)):
                due = now + self.window  # behind a batch in flight, or with writes collecting
            elif timing == NOW and action.step is not None and queue.inflight:
                due = now + self.window  # a put behind a batch in flight: collects the writes
            signal = Signal(asyncio.get_running_loop() if queue.tasks else None)
            ticket = _Ticket(action.statements, signal, timing, action.step, action.known,
                             action.stored, now, due)
            queue.pending.append(ticket)
        batch: list[_Ticket] = []
        try:
            while True:
                with queue.lock:
                    if ticket.taken:
                        break
                    wait = self._wait(queue, ticket, time.monotonic())
                    if wait <= 0:
                        batch = _take(queue.pending, ticket)
                        queue.inflight += 1
                        _ended(queue, batch)
                        break
                yield Wait(ticket.signal, wait)
        except BaseException:
            with queue.lock:  # stopped before it left: unsent, and nobody waits for it
                if not ticket.taken:
                    queue.pending.remove(ticket)
            raise
        if not batch:
            while not ticket.signal.is_set():
                yield Wait(ticket.signal, None)
            return ticket.outcome()
        try:
            yield from self._send(batch)
        finally:
            with queue.lock:
                queue.inflight -= 1
                queue.landed = time.monotonic()
        return ticket.outcome()

    def expect(self, queue: Queue, step: tuple[str, str, str]) -> None:
        """A held write of `step` is on its way: its put waits a moment for it (`Expect`)."""
        with queue.lock:
            queue.expected.setdefault(step, deque()).append(time.monotonic())

    def _wait(self, queue: Queue, ticket: _Ticket, now: float) -> float:
        """Seconds until `ticket` leaves (<= 0: now). A put waits for the writes of its step
        announced on their way (looking again each EXPECT_POLL), at most EXPECT_MAX. A held
        write waits while a batch is in flight (looking again each window), then HOLD_WINDOWS
        windows after the last landed."""
        if ticket.timing == NOW:
            if ticket.due > now:  # behind a batch in flight: its window first
                return ticket.due - now
            if ticket.step is None or now - ticket.arrived >= EXPECT_MAX:
                return 0.0
            announced = queue.expected.get(ticket.step)
            while announced and announced[0] < now - EXPECT_MAX:
                announced.popleft()  # its caller failed before its commit
            if not announced:
                queue.expected.pop(ticket.step, None)
                return 0.0
            return EXPECT_POLL
        if ticket.timing != HELD:
            if ticket.due > now:
                return ticket.due - now
            ready = ticket.due
            if ticket.timing == SOON and ticket.due > ticket.arrived:  # collecting: while
                newest = max(t.arrived for t in queue.pending if t.timing == SOON)  # a burst
                ready = max(ready, min(newest + self.window,  # goes on, up to BURST_WINDOWS
                                       ticket.arrived + BURST_WINDOWS * self.window))
                if ready > now:
                    return ready - now
            if (ticket.timing == SOON and queue.inflight >= MAX_INFLIGHT
                    and now - ready < HOLD_WINDOWS * self.window):  # until one lands
                return self.window / LANDED_POLLS
            return 0.0
        held = now - ticket.arrived
        if held >= MAX_HOLD:
            return 0.0
        if queue.inflight:
            return min(self.window, MAX_HOLD - held)
        return max(ticket.arrived, queue.landed) + HOLD_WINDOWS * self.window - now

    def _send(self, batch: list[_Ticket]) -> Generator[Any, Any, None]:
        """Send one batch; record each ticket's outcome and wake its caller. Only an
        interruption (a BaseException that is not an Exception) propagates, after failing
        the batch."""
        self.batches += 1
        self.merged += len(batch) - 1
        try:
            try:
                with telemetry.merged(batch):
                    _settle(batch, (yield from self._exchange(_statements(batch))))
            except Exception as exc:  # noqa: BLE001 - mapped: each write of the batch gets it
                if _split(batch, exc):
                    for t in batch:
                        try:
                            with telemetry.merged([t]):
                                t.results = yield from self._exchange(list(t.statements))
                        except Exception as one:  # noqa: BLE001 - mapped: the write's own outcome
                            t.error = one
            for t in batch:  # before any caller wakes: the next batch made knows them held
                if t.results is not None and t.stored is not None:
                    t.stored()
        except BaseException as exc:
            _fail(batch, _interrupted(exc))
            raise
        finally:
            _wake(batch)


__all__ = ["BURST_WINDOWS", "DEFAULT_WINDOW", "ENDED_KEPT", "EXPECT_MAX", "GroupCommit", "HOLD_WINDOWS",
           "MAX_HOLD", "MAX_INFLIGHT", "MAX_OPS", "MAX_STATEMENTS", "Queue", "caused_by_one"]
