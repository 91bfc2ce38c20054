"""The driver layer: runs operations (generators of actions) to completion, sync or async.

It owns what spans operations: the once-only schema setup (`Once`) and group commit
(`Commit`); `Send` and `Sleep` it leaves to the client, which only moves bytes. The saver
builds one driver; compaction and the CLI use a plain client or the saver's public methods.
"""

from __future__ import annotations

import asyncio
import threading
import weakref
from typing import Any, TypeVar

from d1saver.http.client import D1Client
from d1saver.http.group_commit import DEFAULT_WINDOW, GroupCommit
from d1saver.core.protocol import Action, Commit, Once, Op

T = TypeVar("T")


class Driver:
    """Performs operations over one client, with group commit and once-only setup."""

    def __init__(self, client: D1Client, *, group_commit: bool = True,
                 group_commit_window: float | None = None) -> None:
        self.client = client
        window = DEFAULT_WINDOW if group_commit_window is None else group_commit_window
        self.group = (GroupCommit(client.execute, client.aexecute, window)
                      if group_commit else None)
        self._done: set[str] = set()
        self._once_lock = threading.Lock()
        # One asyncio.Lock per event loop, dropped with the loop (asyncio.run per request
        # must not accumulate them).
        self._aonce: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock] = (
            weakref.WeakKeyDictionary())

    def run(self, op: Op[T]) -> T:
        """Run an operation synchronously."""
        return self.client.run(op, self._perform)

    async def arun(self, op: Op[T]) -> T:
        """Run an operation asynchronously."""
        return await self.client.arun(op, self._aperform)

    def _perform(self, action: Action) -> Any:
        if isinstance(action, Commit):
            if self.group is None:
                return self.client.execute(action.statements)
            return self.group.submit(action.statements)
        if isinstance(action, Once):
            with self._once_lock:
                if action.key not in self._done:
                    self.run(action.op())
                    self._done.add(action.key)
            return None
        raise TypeError(f"the driver cannot perform {type(action).__name__}")

    async def _aperform(self, action: Action) -> Any:
        if isinstance(action, Commit):
            if self.group is None:
                return await self.client.aexecute(action.statements)
            return await self.group.asubmit(action.statements)
        if isinstance(action, Once):
            if action.key in self._done:
                return None  # no lock: a contended asyncio.Lock holds its loop for good
            # Keyed by the running loop, so no thread lock is needed (a sync setup holding
            # _once_lock over its round trip must not stall this loop).
            lock = self._aonce.setdefault(asyncio.get_running_loop(), asyncio.Lock())
            async with lock:
                if action.key not in self._done:
                    await self.arun(action.op())
                    self._done.add(action.key)
            return None
        raise TypeError(f"the driver cannot perform {type(action).__name__}")


__all__ = ["Driver"]
