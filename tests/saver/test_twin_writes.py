"""put_writes into threads that share checkpoint ids and task ids (as twin threads, or a copy,
do): each thread's writes are its own, and each put_writes call of several writes is one
packed row per task, whatever other tasks wrote at that checkpoint before."""

from __future__ import annotations

from d1saver import D1Saver
from tests.compaction import cfg, checkpoint_id, put_checkpoint, query
from tests.conftest import Backend


def stored(saver: D1Saver, tid: str) -> list[tuple[str, int, str]]:
    return [(t, i, v[:2]) for t, i, v in query(
        saver, "SELECT task_id, idx, value FROM writes WHERE thread_id = ?1 ORDER BY 1, 2", tid)]


def test_writes_of_twin_threads_stay_apart_and_pack_per_call(local: Backend) -> None:
    saver = local.saver()
    first, second = "w-first", "w-second"
    for tid in (first, second):
        put_checkpoint(saver, cfg(tid), 0)
    at = {t: cfg(t, "", checkpoint_id(0)) for t in (first, second)}
    saver.put_writes(at[first], [("x", "a0"), ("x", "a1")], task_id="task-a")
    saver.put_writes(at[first], [("x", "b0"), ("x", "b1")], task_id="task-b")
    # The second thread: the same task writes one value (not packed) at the same checkpoint.
    saver.put_writes(at[second], [("x", "only")], task_id="task-a")

    assert stored(saver, first) == [("task-a", 0, "p:"), ("task-b", 0, "p:")]
    assert stored(saver, second) == [("task-a", 0, "b:")]
    got = saver.get_tuple(at[second])
    assert got is not None and got.pending_writes == [("task-a", "x", "only")]
    got = saver.get_tuple(at[first])
    assert got is not None and got.pending_writes == [
        ("task-a", "x", "a0"), ("task-a", "x", "a1"), ("task-b", "x", "b0"), ("task-b", "x", "b1")]
