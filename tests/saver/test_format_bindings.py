"""Where the stored format and the operations meet (issue 20): a derived record bound to the
row it was derived from, content ids that never collide, a rekey that leaves a thread whole,
copies of packed writes equal to InMemorySaver's, and the freeze walk inventing nothing."""

from __future__ import annotations

import os
from collections import Counter
from typing import Any

from langgraph.checkpoint.memory import InMemorySaver

from compaction.rekey import rekey
from d1saver import D1Saver
from tests.compaction import new_thread
from tests.conftest import Backend
from tests.saver import graphs
from tests.saver.test_delta_channels import at, build, chain, history

K1, K2 = bytes([31]) * 32, bytes([32]) * 32


def received(backend: Backend, fn: Any) -> int:
    """Bytes of the responses to what fn sent."""
    before = len(backend.events)
    fn()
    return sum(e.bytes_received for e in backend.events[before:])


# --- defect 9: copy_thread(T, T) is a no-op ---------------------------------------------------


def test_copy_thread_onto_itself_changes_nothing(backend: Backend) -> None:
    """copy_thread(T, T) leaves T as it was: the same state, and get_tuple reads as little as
    before (re-inserting the checkpoints dropped their delta_unwritten rows, so the walk read
    the whole thread: 17 KB instead of 1.8 KB at 40 steps)."""
    saver, tid = backend.saver(), new_thread()
    graph = graphs.chat_graph(saver, Counter())
    config = {"configurable": {"thread_id": tid}}
    for turn in range(14):  # 42 checkpoints
        graph.invoke({"messages": [f"user{turn}"]}, config)
    state = graph.get_state(config).values
    fresh = backend.saver()  # no cache: every get_tuple reads
    before = received(backend, lambda: fresh.get_tuple(config))
    _, requests = backend.count(lambda: saver.copy_thread(tid, tid))
    after = received(backend, lambda: backend.saver().get_tuple(config))
    assert after <= before * 1.05, (before, after)
    assert requests == 0
    assert graph.get_state(config).values == state


# --- defect 8: the freeze walk starts only at a stored checkpoint -----------------------------


def test_prune_does_not_freeze_writes_of_a_parent_never_stored(backend: Backend) -> None:
    """A checkpoint whose parent id has writes but no checkpoint row: its history ends there
    (InMemorySaver's walk stops at a missing parent), before and after prune."""
    saver, memory, tid = backend.saver(), InMemorySaver(), new_thread()
    spec = [(0, None, "m0"), (1, 0, "m1"), (3, 2, "m3"), (4, 3, "m4")]
    for s in (saver, memory):
        build(s, tid, spec)
        s.put_writes(at(tid, 2), [("messages", "ghost")], task_id="task-2")
    assert history(saver, tid, 4) == history(memory, tid, 4)
    saver.prune([tid])
    assert history(saver, tid, 4) == history(memory, tid, 4)
    assert "ghost" not in repr(history(saver, tid, 4))


# --- defect 7: rekey of a write stored in pieces ----------------------------------------------


def test_rekey_of_a_write_stored_in_pieces(backend: Backend) -> None:
    """A 1.5 MB bytes write is sealed over several rows ("c:"); after a rotation, rekey
    re-seals it (its guard names the pieces' owner 'task/0', not 'task/0.0': D1 binds
    numbers as REAL), and the old key can then go."""
    tid, big = new_thread(), os.urandom(1_500_000)
    old = backend.saver(encryption_keys=[K1])
    build(old, tid, chain(2))
    old.put_writes(at(tid, 1), [("blob", big)], task_id="big-task")
    rotated = backend.saver(encryption_keys=[K2, K1])
    rotated.setup()
    if backend.name == "local":
        summary = rekey(rotated, batch_rows=10)
        assert summary.plaintext_left == 0
    else:  # the real engine's database is shared: rekey this thread's writes only
        rotated.rekey("writes", page_size=10)
    dropped = backend.saver(encryption_keys=[K2])
    writes = dropped.get_tuple(at(tid, 1)).pending_writes
    assert ("big-task", "blob", big) in writes
