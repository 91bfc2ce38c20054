"""DeltaChannel histories prefetched with a page, until LangGraph asks for them (once, soon)."""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Sequence

from langgraph.checkpoint.base import DeltaChannelHistory

Key = tuple[str, str, str]  # thread_id, checkpoint_ns, checkpoint_id


class DeltaCache:
    """Bounded in entries and age; an entry is removed when used."""

    def __init__(self, max_entries: int = 512, ttl: float = 30.0) -> None:
        self._items: OrderedDict[Key, tuple[float, dict[str, DeltaChannelHistory]]] = (
            OrderedDict())
        self._lock = threading.Lock()
        self.max_entries, self.ttl = max_entries, ttl
        self.hits = 0

    def put(self, key: Key, histories: dict[str, DeltaChannelHistory]) -> None:
        with self._lock:
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


__all__ = ["DeltaCache"]
