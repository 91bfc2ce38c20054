"""Which content-addressed chunks each thread is known to hold, so a write sends only new ones;
and which of its channels are DeltaChannels, whose writes are stored whole.

Learned from the saver's own committed writes and from every read (a read returns the chunks
of the rows it returns, and a resume always reads first), never by asking: a thread this
process has not read or written sends every chunk of its next write, which costs bytes, not
correctness. A DeltaChannel's writes are its history: no checkpoint lists their values, so
storing them by content would cost an id and a chunk row each for nothing; the channels are
learned from the checkpoints' `counters_since_delta_snapshot`. A wrong guess the other way (a chunk deleted behind this process's back) fails the
write's batch with "chunk_missing"; the operation then forgets the thread and sends again
(d1saver/ops/operations.py). Bounded: the threads used last are kept.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterable

# Threads remembered; a set holds one 25-character id per chunk (about 2 per checkpoint in an
# agent conversation), so a 300-turn thread costs about 100 KB.
MAX_THREADS = 256


class HeldChunks:
    """Per thread, the ids of chunks known to be stored (an LRU over threads)."""

    def __init__(self, max_threads: int = MAX_THREADS) -> None:
        self._sets: OrderedDict[str, set[str]] = OrderedDict()
        self._deltas: OrderedDict[str, frozenset[str]] = OrderedDict()
        self._lock = threading.Lock()
        self._max = max_threads

    def delta_channels(self, thread_id: str) -> frozenset[str]:
        """The thread's DeltaChannels, as its newest checkpoint seen declared them."""
        with self._lock:
            return self._deltas.get(thread_id, frozenset())

    def saw_metadata(self, thread_id: str, metadata: object) -> None:
        """Learn the thread's DeltaChannels from a checkpoint's metadata."""
        counters = metadata.get("counters_since_delta_snapshot") if isinstance(
            metadata, dict) else None
        channels = frozenset(map(str, counters)) if isinstance(counters, dict) else frozenset()
        with self._lock:
            if channels or thread_id in self._deltas:
                self._deltas[thread_id] = channels
                self._deltas.move_to_end(thread_id)
                while len(self._deltas) > self._max:
                    self._deltas.popitem(last=False)

    def of(self, thread_id: str) -> set[str]:
        """The thread's known ids (live: only ever grows until forgotten)."""
        with self._lock:
            held = self._sets.get(thread_id)
            if held is None:
                held = self._sets[thread_id] = set()
                while len(self._sets) > self._max:
                    self._sets.popitem(last=False)
            else:
                self._sets.move_to_end(thread_id)
            return held

    def add(self, thread_id: str, ids: Iterable[str]) -> None:
        self.of(thread_id).update(ids)

    def forget(self, thread_ids: Iterable[str] | None) -> None:
        """Forget what some threads (None: every thread) hold: rows of theirs were deleted."""
        with self._lock:
            if thread_ids is None:
                self._sets.clear()
                return
            for thread_id in thread_ids:
                self._sets.pop(str(thread_id), None)


__all__ = ["MAX_THREADS", "HeldChunks"]
