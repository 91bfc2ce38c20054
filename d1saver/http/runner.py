"""The runner: one sync loop and one async loop that run every operation.

An operation (an `Op` generator, d1saver/core/protocol.py) yields actions and is sent their
replies. The runner performs each action with the performer it runs the operation for (a
database's driver, d1saver/http/driver.py, or a bare client): `Send` and `Sleep` through its
two I/O primitives, `Commit` and `Once` through its `perform` (group commit, setup once),
`Wait` on a signal, `Run` and `Each` as operations of their own (the fleet's steps: an
operation at another database, or at several at once), and `Emit` by handing the items to its
caller (`iterate`, `aiterate`).

It is a trampoline, as h11 leaves the sockets to its caller: an operation that an action
starts (a commit's batch, a setup, a step's operation at a database) is pushed on the
runner's stack and driven by the same loop, never by a loop of its own further down. A put's
stack from `D1Saver.put` to the transport is the saver, the fleet, the loop and the send
(tests/saver/test_runner.py counts it). An exception travels down the stack as it would
through calls: thrown into the operation that yielded the action, then into the one below
whenever an operation lets it through, outside any handler (no implicit context: a transport
error's text never rides along).
"""

from __future__ import annotations

import asyncio
import contextvars
import threading
from collections.abc import (AsyncGenerator, AsyncIterator, Awaitable, Callable, Generator, Iterator, Mapping,
                             Sequence)
from concurrent.futures import ThreadPoolExecutor
from contextlib import aclosing
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from d1saver.core.errors import D1Error, FleetError
from d1saver.core.protocol import Emit, Op, Send, Sleep

if TYPE_CHECKING:  # types only
    import httpx

T = TypeVar("T")


class Performer(Protocol):
    """What the runner performs an operation's actions with: its two I/O primitives, and the
    actions of its own (`perform`/`aperform`: a reply, or `Push` to run an operation for it)."""

    def send(self, request: httpx.Request) -> httpx.Response | D1Error: ...

    async def asend(self, request: httpx.Request) -> httpx.Response | D1Error: ...

    def sleep(self, seconds: float) -> None: ...

    async def asleep(self, seconds: float) -> None: ...

    def perform(self, action: Any) -> Any: ...

    async def aperform(self, action: Any) -> Any: ...


@dataclass(frozen=True)
class Push:
    """A performer's reply to an action: run `op` for `performer` on this stack; the action's
    reply is what `op` returns."""

    op: Generator[Any, Any, Any]
    performer: Performer | None


@dataclass(frozen=True)
class Thrown:
    """What a pushed operation returns to fail the operation below it the way a transport's
    failure does: thrown in by the runner, outside any handler, so the error drags no
    exception of its caller's along as implicit context (group commit's outcomes)."""

    error: BaseException


@dataclass(frozen=True)
class Run:
    """A step: run an operation on a database's performer; the reply is its result."""

    performer: Performer
    op: Op[Any]


@dataclass(frozen=True)
class Each:
    """A step: run operations at several databases, concurrently (at most `limit` at once: a
    thread pool for sync callers, tasks for async ones); the reply is their results by key.
    With `spans` (a saver over several databases) failures raise FleetError with each failed
    database's error and the others' results; without, the first error is raised as it is."""

    operation: str
    runs: Mapping[str, Run]
    limit: int = 8
    spans: bool = True


class Signal:
    """Set once, by whatever finishes what others wait for; waited on by threads (made without
    a loop) or by the tasks of the one event loop it was made for."""

    __slots__ = ("_event", "_future")

    def __init__(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        self._event = threading.Event() if loop is None else None
        self._future = None if loop is None else loop.create_future()

    def set(self) -> None:
        if self._event is not None:
            self._event.set()
        elif self._future is not None and not self._future.done():
            self._future.set_result(None)

    def is_set(self) -> bool:
        return self._event.is_set() if self._event is not None else bool(
            self._future is not None and self._future.done())

    def wait(self, timeout: float | None) -> None:
        if self._event is None:
            raise RuntimeError("a signal of an event loop waited on by a thread")
        self._event.wait(timeout)

    async def await_(self, timeout: float | None) -> None:
        if self._future is None:
            raise RuntimeError("a thread's signal awaited in an event loop")
        await asyncio.wait([self._future], timeout=timeout)


@dataclass(frozen=True)
class Wait:
    """Wait until `signal` is set, or `timeout` seconds have passed (None: no limit)."""

    signal: Signal
    timeout: float | None


@dataclass(frozen=True)
class _Returned:
    """The async loop's last item: what the operation returned."""

    value: Any


Frame = tuple[Generator[Any, Any, Any], "Performer | None"]


# --- the sync loop --------------------------------------------------------------------------


def run(op: Generator[Any, Any, T], performer: Performer | None = None) -> T:
    """Run an operation to its answer, synchronously."""
    steps = drive(op, performer)
    try:
        next(steps)
    except StopIteration as stop:
        return stop.value
    steps.close()
    raise TypeError("an operation run as a call emitted items: iterate it")


def iterate(op: Generator[Any, Any, Any], performer: Performer | None = None) -> Iterator[Any]:
    """The items an operation emits, one by one, each read when the caller asks for it."""
    yield from drive(op, performer)


def drive(op: Generator[Any, Any, T], performer: Performer | None) -> Generator[Any, None, T]:
    """The sync loop: performs the actions of `op` and of the operations they push, yields
    what they emit, returns what `op` returns."""
    stack: list[Frame] = [(op, performer)]
    reply: Any = None
    error: BaseException | None = None
    try:
        while True:
            gen, doer = stack[-1]
            try:
                action = gen.send(reply) if error is None else gen.throw(error)
            except StopIteration as stop:
                stack.pop()
                if not stack:
                    return stop.value
                reply, error = stop.value, None
                if type(reply) is Thrown:
                    reply, error = None, reply.error
                continue
            except BaseException as exc:
                stack.pop()
                if not stack:
                    raise
                reply, error = None, exc
                continue
            reply = error = None
            kind = type(action)
            if kind is Emit:
                yield from action.items
                continue
            try:
                if kind is Send:
                    reply = _performer(doer).send(action.request)
                    if isinstance(reply, D1Error):
                        reply, error = None, reply
                elif kind is Sleep:
                    _performer(doer).sleep(action.seconds)
                elif kind is Wait:
                    action.signal.wait(action.timeout)
                elif kind is Run:
                    stack.append((action.op, action.performer))
                elif kind is Each:
                    if action.spans and len(action.runs) > 1:
                        reply = _each(action)
                    else:
                        stack.append((_in_turn(action), doer))
                else:
                    reply = _performer(doer).perform(action)
                    if type(reply) is Push:
                        stack.append((reply.op, reply.performer))
                        reply = None
                    elif type(reply) is Thrown:
                        reply, error = None, reply.error
            except BaseException as exc:
                error = exc
    finally:
        for gen, _ in reversed(stack):
            gen.close()


def _each(each: Each) -> dict[str, Any]:
    calls = {key: (lambda step=step: run(step.op, step.performer))
             for key, step in each.runs.items()}
    return fan_out(calls, each.operation, each.limit, spans=True)


# --- the async loop -------------------------------------------------------------------------


async def arun(op: Generator[Any, Any, T], performer: Performer | None = None) -> T:
    """Run an operation to its answer, asynchronously."""
    async with aclosing(adrive(op, performer)) as steps:
        async for item in steps:
            if type(item) is _Returned:
                return item.value
            break
    raise TypeError("an operation run as a call emitted items: iterate it")


async def aiterate(op: Generator[Any, Any, Any], performer: Performer | None = None
                   ) -> AsyncIterator[Any]:
    """`iterate`, asynchronously."""
    async with aclosing(adrive(op, performer)) as steps:
        async for item in steps:
            if type(item) is _Returned:
                return
            yield item


async def adrive(op: Generator[Any, Any, Any], performer: Performer | None
                 ) -> AsyncGenerator[Any, None]:
    """The async loop: `drive`, awaiting the actions; its last item is `_Returned(answer)`."""
    stack: list[Frame] = [(op, performer)]
    reply: Any = None
    error: BaseException | None = None
    try:
        while True:
            gen, doer = stack[-1]
            try:
                action = gen.send(reply) if error is None else gen.throw(error)
            except StopIteration as stop:
                stack.pop()
                if not stack:
                    yield _Returned(stop.value)
                    return
                reply, error = stop.value, None
                if type(reply) is Thrown:
                    reply, error = None, reply.error
                continue
            except BaseException as exc:
                stack.pop()
                if not stack:
                    raise
                reply, error = None, exc
                continue
            reply = error = None
            kind = type(action)
            if kind is Emit:
                for item in action.items:
                    yield item
                continue
            try:
                if kind is Send:
                    reply = await _performer(doer).asend(action.request)
                    if isinstance(reply, D1Error):
                        reply, error = None, reply
                elif kind is Sleep:
                    await _performer(doer).asleep(action.seconds)
                elif kind is Wait:
                    await action.signal.await_(action.timeout)
                elif kind is Run:
                    stack.append((action.op, action.performer))
                elif kind is Each:
                    if action.spans and len(action.runs) > 1:
                        reply = await _aeach(action)
                    else:
                        stack.append((_in_turn(action), doer))
                else:
                    reply = await _performer(doer).aperform(action)
                    if type(reply) is Push:
                        stack.append((reply.op, reply.performer))
                        reply = None
                    elif type(reply) is Thrown:
                        reply, error = None, reply.error
            except BaseException as exc:
                error = exc
    finally:
        for gen, _ in reversed(stack):
            gen.close()


async def _aeach(each: Each) -> dict[str, Any]:
    calls = {key: (lambda step=step: arun(step.op, step.performer))
             for key, step in each.runs.items()}
    return await afan_out(calls, each.operation, each.limit, spans=True)


# --- shared by both loops -------------------------------------------------------------------


def _performer(doer: Performer | None) -> Performer:
    if doer is None:
        raise TypeError("these steps run at databases (Run, Each): they cannot send themselves")
    return doer


def _in_turn(each: Each) -> Generator[Run, Any, dict[str, Any]]:
    """Each's operations one after the other on this stack (one database, or a saver over one
    database): the same outcomes as `fan_out`."""
    keys, outcomes = list(each.runs), []
    for key in keys:
        if not each.spans:
            outcomes.append((yield each.runs[key]))
            continue
        try:
            outcomes.append((yield each.runs[key]))
        except D1Error as exc:
            outcomes.append(exc)
    return collect(each.operation, keys, outcomes) if each.spans else dict(zip(keys, outcomes))


def fan_out(calls: Mapping[str, Callable[[], T]], operation: str, limit: int, *,
            spans: bool) -> dict[str, T]:
    """Each call, concurrently on a thread pool (at most `limit` at once); see `Each`."""
    keys = list(calls)
    if not spans or not keys:
        return {key: calls[key]() for key in keys}
    if len(keys) == 1:
        return collect(operation, keys, [_outcome(calls[keys[0]])])
    caller = contextvars.copy_context()  # each worker runs in the caller's (its span)
    with ThreadPoolExecutor(max_workers=min(max(1, limit), len(keys)),
                            thread_name_prefix="d1saver-fleet") as pool:
        outcomes = list(pool.map(lambda key: caller.copy().run(_outcome, calls[key]), keys))
    return collect(operation, keys, outcomes)


async def afan_out(calls: Mapping[str, Callable[[], Awaitable[T]]], operation: str, limit: int,
                   *, spans: bool) -> dict[str, T]:
    """`fan_out`, asynchronously: tasks, at most `limit` at once."""
    keys = list(calls)
    if not spans:
        return {key: await calls[key]() for key in keys}
    gate = asyncio.Semaphore(max(1, limit))

    async def one(key: str) -> T:
        async with gate:
            return await calls[key]()

    outcomes = await asyncio.gather(*(one(key) for key in keys), return_exceptions=True)
    return collect(operation, keys, list(outcomes))


def _outcome(call: Callable[[], T]) -> T | D1Error:
    try:
        return call()
    except D1Error as exc:
        return exc


def collect(operation: str, keys: Sequence[str], outcomes: Sequence[Any]) -> dict[str, Any]:
    """Results by key; FleetError if some failed with a D1Error; other exceptions (bugs,
    cancellation) propagate as they are."""
    errors: dict[str, D1Error] = {}
    results: dict[str, Any] = {}
    for key, outcome in zip(keys, outcomes):
        if isinstance(outcome, D1Error):
            errors[key] = outcome
        elif isinstance(outcome, BaseException):
            raise outcome
        else:
            results[key] = outcome
    if errors:
        raise FleetError(operation, errors, results)
    return results


__all__ = ["Each", "Performer", "Push", "Run", "Signal", "Thrown", "Wait", "afan_out", "aiterate", "arun",
           "collect", "drive", "fan_out", "iterate", "run"]
