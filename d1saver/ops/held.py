"""Which content-addressed chunks each thread is known to hold, so a write sends only new ones;
which of its channels are DeltaChannels, whose writes are stored whole; and which writes may
wait for their step's put (`Holds`).

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
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from langgraph.checkpoint.base import WRITES_IDX_MAP

from d1saver.core.protocol import HELD, SOON

try:  # how LangGraph stores a DeltaChannel's snapshot in a checkpoint
    from langgraph.checkpoint.serde.types import _DeltaSnapshot as _Snapshot
except ImportError:  # a langgraph-checkpoint without DeltaChannels
    _Snapshot = ()  # type: ignore[assignment,misc]

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


class StoredRows:
    """Per thread, the rows this process knows are stored (it wrote them, or a read returned
    them), as hashes of their keys (a checkpoint, a task's regular writes, a task's special
    write of one index), each with whether its value may list chunks. A write to such a key
    may lose (a regular write is ignored, a special write or a checkpoint is replaced) and
    leave chunks that only the losing value listed: the saver then collects the thread's
    chunks (one request, only then; docs/STORAGE_DESIGN.md). A key another process stored
    after this one last read the thread is not known here: compaction collects what such a
    write leaves (d1saver_gc_pending, migration 14). Bounded as HeldChunks."""

    def __init__(self, max_threads: int = MAX_THREADS) -> None:
        self._rows: OrderedDict[str, dict[int, bool]] = OrderedDict()
        self._lock = threading.Lock()
        self._max = max_threads

    def add(self, thread_id: str, keys: Iterable[tuple[str, ...]], by_content: bool) -> bool:
        """Remember the keys of a write (`by_content`: its values list chunks); whether one of
        them was known, and either value may list chunks (a chunk may be left)."""
        with self._lock:
            known = self._rows.get(thread_id)
            if known is None:
                known = self._rows[thread_id] = {}
                while len(self._rows) > self._max:
                    self._rows.popitem(last=False)
            else:
                self._rows.move_to_end(thread_id)
            left = False
            for key in {hash(k) for k in keys}:  # a call's regular writes share one
                old = known.get(key)
                left = left or (old is not None and (old or by_content))
                known[key] = bool(old) or by_content
            return left

    def forget(self, thread_ids: Iterable[str] | None) -> None:
        """Forget the threads' rows (None: every thread's): rows of theirs were deleted."""
        with self._lock:
            if thread_ids is None:
                self._rows.clear()
                return
            for thread_id in thread_ids:
                self._rows.pop(str(thread_id), None)


def checkpoint_key(ns: str, cid: str) -> tuple[str, ...]:
    return ("c", ns, cid)


def write_key(ns: str, cid: str, task_id: str, channel: str) -> tuple[str, ...]:
    """A write's key as the put views store it: a task's regular writes share one (a pack,
    or rows that a later pack or row of the task may collide with), a special write's is
    its index's."""
    idx = WRITES_IDX_MAP.get(channel)
    return ("r", ns, cid, task_id) if idx is None else ("s", ns, cid, task_id, str(idx))


# Writes that end a run (an error, an interrupt) or that LangGraph waits on before an error
# handler runs: no put follows them soon, so none is held.
UNHELD_CHANNELS = frozenset({"__error__", "__interrupt__", "__error_source_node__"})
# LangGraph's run loop passes its durability in the config of each put_writes it submits; an
# update_state call (which waits on its put_writes before its put) passes none.
DURABILITY_KEY = "__pregel_durability"
# Durabilities under which a step's put follows its writes ("exit" writes after its one put).
STEPPED = frozenset({"sync", "async"})


class Holds:
    """Which writes may wait for their step's put (group commit's HELD, d1saver/http/group_commit.py).

    Under durability "sync" and "async", LangGraph's run submits a task's put_writes when the
    task ends and the step's put when the step does, and it waits on a put_writes before that
    put only for a DeltaChannel's write (the checkpoint must not be durable before the writes
    its channel replays); a run that ends in an error or an interrupt puts no checkpoint after
    its last writes. So a write waits for the put when it comes from such a run (its config
    names the durability), this process has seen a checkpoint of its (thread, namespace), put
    or read, and none of its channels is a DeltaChannel seen there, nor an error's or an
    interrupt's. Every DeltaChannel seen is remembered: a checkpoint's
    `counters_since_delta_snapshot` names those not snapshotted at it, and its channel values
    hold a snapshot of the others. Any other write leaves at once (the first input of a thread
    not seen, an update_state's): a guess costs a request, never a wait.
    """

    def __init__(self, max_keys: int = MAX_THREADS * 4) -> None:
        self._seen: OrderedDict[tuple[str, str], frozenset[str]] = OrderedDict()
        self._lock = threading.Lock()
        self._max = max_keys

    def saw(self, thread_id: str, ns: str, checkpoint: Mapping[str, Any] | None,
            metadata: object) -> None:
        """A checkpoint of (thread, namespace) put or read, with its DeltaChannels."""
        counters = metadata.get("counters_since_delta_snapshot") if isinstance(
            metadata, dict) else None
        deltas = set(map(str, counters)) if isinstance(counters, dict) else set()
        values = (checkpoint or {}).get("channel_values") or {}
        deltas.update(str(k) for k, v in values.items() if isinstance(v, _Snapshot))
        self.saw_deltas(thread_id, ns, deltas)

    def saw_deltas(self, thread_id: str, ns: str, channels: Iterable[str]) -> None:
        key = (str(thread_id), str(ns))
        with self._lock:
            self._seen[key] = self._seen.get(key, frozenset()) | frozenset(channels)
            self._seen.move_to_end(key)
            while len(self._seen) > self._max:
                self._seen.popitem(last=False)

    def timing(self, config: Mapping[str, Any], writes: Sequence[tuple[str, Any]]) -> str:
        """HELD if these writes (of the checkpoint `config` names) may wait for their step's
        put, else SOON."""
        conf = config.get("configurable") or {}
        if conf.get(DURABILITY_KEY) not in STEPPED:
            return SOON
        with self._lock:
            deltas = self._seen.get((str(conf.get("thread_id")), str(conf.get("checkpoint_ns", ""))))
        if deltas is None or any(c in deltas or c in UNHELD_CHANNELS for c, _ in writes):
            return SOON
        return HELD


__all__ = ["DURABILITY_KEY", "MAX_THREADS", "UNHELD_CHANNELS", "HeldChunks", "Holds", "StoredRows",
           "checkpoint_key", "write_key"]
