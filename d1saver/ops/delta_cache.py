"""DeltaChannel histories prefetched with a page, until LangGraph asks for them (once, soon).

An entry is the history as the page's request read it. Every operation of this saver that
writes or deletes rows of a thread invalidates the thread's entries, and a page whose request
started before such an invalidation stores none for that thread: so the cache answers as the
database would now, as far as this saver's own writes go.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Iterable, Sequence

from langgraph.checkpoint.base import DeltaChannelHistory

Key = tuple[str, str, str]  # thread_id, checkpoint_ns, checkpoint_id


class DeltaCache:
    """Bounded in entries and age; an entry is removed when used or when its thread changes."""

    def __init__(self, max_entries: int = 512, ttl: float = 30.0,
                 max_changed: int = 4096) -> None:
        self._items: OrderedDict[Key, tuple[float, dict[str, DeltaChannelHistory]]] = (
            OrderedDict())
        self._lock = threading.Lock()
        self.max_entries, self.ttl, self.max_changed = max_entries, ttl, max_changed
        self.hits = 0
        # A logical clock of invalidations: the tick of each thread's last change (the oldest
        # forgotten beyond max_changed, folded into _all_changed, which only errs safe).
        self._clock = 0
        self._changed: OrderedDict[str, int] = OrderedDict()
        self._all_changed = 0

    def mark(self) -> int:
        """The current tick: take it before reading, and pass it to `put` with what was read."""
        with self._lock:
            return self._clock

    def put(self, key: Key, histories: dict[str, DeltaChannelHistory], since: int) -> None:
        """Store what a read begun at tick `since` found, unless the thread changed since."""
        with self._lock:
            if max(self._all_changed, self._changed.get(key[0], 0)) > since:
                return
            self._items[key] = (time.monotonic(), histories)
            self._items.move_to_end(key)
            while len(self._items) > self.max_entries:
                self._items.popitem(last=False)

    def take(self, key: Key, channels: Sequence[str]) -> dict[str, DeltaChannelHistory] | None:
        with self._lock:
            item = self._items.pop(key, None)
        if item is None or time.monotonic() - item[0] > self.ttl:
            return None
        stored, histories = item
        if not all(ch in histories for ch in channels):
            return None
        self.hits += 1
        return {ch: histories[ch] for ch in channels}

    def invalidate(self, thread_ids: Iterable[str]) -> None:
        """Forget the threads' entries, and refuse those of reads begun before now."""
        threads = set(thread_ids)
        with self._lock:
            self._clock += 1
            for thread_id in threads:
                self._changed[thread_id] = self._clock
                self._changed.move_to_end(thread_id)
            for key in [k for k in self._items if k[0] in threads]:
                del self._items[key]
            while len(self._changed) > self.max_changed:
                _, tick = self._changed.popitem(last=False)
                self._all_changed = max(self._all_changed, tick)

    def invalidate_all(self) -> None:
        """Forget every entry (after an operation that may change any thread)."""
        with self._lock:
            self._clock += 1
            self._all_changed = self._clock
            self._changed.clear()
            self._items.clear()


__all__ = ["DeltaCache"]
