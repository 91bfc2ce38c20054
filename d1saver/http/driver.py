"""A database's driver: what the runner performs that database's actions with.

`Send` and `Sleep` go to its client, which only moves bytes; `Commit` to its group commit
(d1saver/http/group_commit.py) and `Once` to its setup-once bookkeeping, each an operation
of its own that the runner pushes on the caller's stack (d1saver/http/runner.py). The saver
builds one driver per database; compaction and the CLI use the saver's public methods.
"""

from __future__ import annotations

import asyncio
import threading
import weakref
from collections.abc import Generator, Sequence
from typing import Any, TypeVar

from d1saver.core.protocol import Action, Commit, Expect, Once, Op, Result, Statement
from d1saver.http.client import D1Client
from d1saver.http.group_commit import DEFAULT_WINDOW, GroupCommit
from d1saver.http.runner import Push, Signal, Wait, arun, run

T = TypeVar("T")


class Driver:
    """Performs one database's actions: its client's, group commit, once-only setup."""

    def __init__(self, client: D1Client, *, group_commit: bool = True,
                 group_commit_window: float | None = None) -> None:
        self.client = client
        # The runner's primitives are the client's own (bound here: no frame of the driver's
        # between the runner and the transport).
        self.send, self.asend = client.send, client.asend
        self.sleep, self.asleep = client.sleep, client.asleep
        window = DEFAULT_WINDOW if group_commit_window is None else group_commit_window
        self.group = GroupCommit(client.exchange, window) if group_commit else None
        self._done: set[str] = set()
        self._lock = threading.Lock()
        # Setups running now, by key: one for sync callers, one per event loop (held weakly,
        # so that asyncio.run per request keeps none of the loops it has finished with).
        self._running: dict[str, Signal] = {}
        self._arunning: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, Signal]] = (
            weakref.WeakKeyDictionary())

    def run(self, op: Op[T]) -> T:
        """Run an operation synchronously (the runner's sync loop)."""
        return run(op, self)

    async def arun(self, op: Op[T]) -> T:
        """Run an operation asynchronously (the runner's async loop)."""
        return await arun(op, self)

    def execute(self, statements: Sequence[Statement]) -> list[Result]:
        """Statements in one request, as they are (no setup, no group commit)."""
        return self.run(self.client.exchange(statements))

    # --- the driver's own actions ---------------------------------------------------------

    def perform(self, action: Action) -> Any:
        if isinstance(action, Commit):
            if self.group is None:
                return Push(self.client.exchange(action.statements), self)
            return Push(self.group.commit(self.group.queue(None), action), self)
        if isinstance(action, Once):
            return Push(self._once(action, self._running, None), self)
        if isinstance(action, Expect):
            if self.group is not None:
                self.group.expect(self.group.queue(None), action.step)
            return None
        raise TypeError(f"the driver cannot perform {type(action).__name__}")

    async def aperform(self, action: Action) -> Any:
        if isinstance(action, Commit):
            if self.group is None:
                return Push(self.client.exchange(action.statements), self)
            # A task of its own, so that a cancelled caller neither loses a write it queued
            # nor cuts short a batch that carries other callers' writes.
            loop = asyncio.get_running_loop()
            task = loop.create_task(arun(self.group.commit(self.group.queue(loop), action), self))
            task.add_done_callback(_observed)
            return await asyncio.shield(task)
        if isinstance(action, Once):
            loop = asyncio.get_running_loop()
            with self._lock:
                running = self._arunning.setdefault(loop, {})
            return Push(self._once(action, running, loop), self)
        if isinstance(action, Expect):
            if self.group is not None:
                self.group.expect(self.group.queue(asyncio.get_running_loop()), action.step)
            return None
        raise TypeError(f"the driver cannot perform {type(action).__name__}")

    def _once(self, action: Once, running: dict[str, Signal],
              loop: asyncio.AbstractEventLoop | None) -> Generator[Any, Any, None]:
        """Run `action.op` unless it has run; a caller that finds it running waits for it,
        then looks again (it failed: this caller tries)."""
        while True:
            with self._lock:
                if action.key in self._done:
                    return
                other = running.get(action.key)
                if other is None:
                    mine = running[action.key] = Signal(loop)
                    break
            yield Wait(other, None)
        try:
            yield from action.op()
            with self._lock:
                self._done.add(action.key)
        finally:
            with self._lock:
                running.pop(action.key, None)
            mine.set()


def _observed(task: asyncio.Task[Any]) -> None:
    """A commit whose caller was cancelled: its outcome is nobody's (no warning about it)."""
    if not task.cancelled():
        task.exception()


__all__ = ["Driver"]
