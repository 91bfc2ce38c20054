"""Compaction's plan (PLAN_PAGE, PLAN_THREADS: `d1saver compact` and the Worker's cron follow
it), checked against the policy written plainly in Python: which threads need work (idle past
the cutoff, over `keep` checkpoints, or marked for garbage collection; never staged ones),
and how they pack, in thread order, into batches of one kind, at most `batch_threads`
threads and about `batch_checkpoints` deletions. On the local D1: a few statements."""

from __future__ import annotations

from typing import Any

from d1saver import D1Saver, admin
from tests.compaction import LONG_AGO, NOW, put_chain, query
from tests.conftest import Backend

KEEP, CUTOFF, BATCH_CHECKPOINTS, BATCH_THREADS = 1, "2024-01-01", 5, 3
STAGED = "\x1fd1saver-staged"
# thread: (checkpoints, idle since long ago, marked for garbage collection)
THREADS = {"p-a": (4, False, False), "p-b": (4, False, False), "p-c": (2, False, False),
           "p-cc": (2, False, False), "p-d": (1, False, False), "p-e": (3, True, False), "p-f": (2, True, False),
           "p-g": (2, True, False), "p-h": (1, False, True), "p-i": (2, False, False),
           "p-j": (2, False, False), "p-k": (2, False, False), "p-l": (1, True, False)}


def policy(threads: list[str]) -> list[tuple[str, int, bool, bool, int | None]]:
    """(thread, checkpoints, staged, expired, batch) of each thread, as the policy says."""
    out: list[tuple[str, int, bool, bool, int | None]] = []
    cur, kind, load, size = -1, None, 0, 0
    for tid in threads:
        staged = tid == STAGED
        n, expired, marked = (5, False, False) if staged else THREADS[tid]
        work = not staged and (expired or n > KEEP or marked)
        batch = None
        if work:
            weight = max(n - (0 if expired else KEEP), 1)
            if cur < 0 or expired != kind or load + weight > BATCH_CHECKPOINTS \
                    or size >= BATCH_THREADS:
                cur, kind, load, size = cur + 1, expired, weight, 1
            else:
                load, size = load + weight, size + 1
            batch = cur
        out.append((tid, n, staged, expired, batch))
    return out


def seed(saver: D1Saver) -> None:
    for tid, (n, idle, marked) in THREADS.items():
        put_chain(saver, tid, n, ts=LONG_AGO if idle else NOW, writes=0)
        if marked:
            query(saver, "INSERT INTO d1saver_gc_pending (thread_id) VALUES (?1)", tid)
    put_chain(saver, "p-z", 5, writes=0)  # a staged copy's rows (a copy under way)
    query(saver, "UPDATE checkpoints SET thread_id = ?1 WHERE thread_id = 'p-z'", STAGED)


def planned(saver: D1Saver, statement: Any) -> list[tuple[str, int, bool, bool, int | None]]:
    (result,) = saver.execute([statement])
    return [(p.thread_id, p.checkpoints, p.staged, p.expired, p.batch)
            for p in admin.read_plan(result)]


def test_the_plan_packs_threads_as_the_policy_says(local: Backend) -> None:
    saver = local.saver()
    seed(saver)
    bounds = {"batch_checkpoints": BATCH_CHECKPOINTS, "batch_threads": BATCH_THREADS}
    every = sorted([*THREADS, STAGED])
    want = policy(every)
    assert [b for *_, b in want] == [None, 0, 1, 1, 1, None, 2, 2, 3, 4, 4, 4, 5, 6]
    assert planned(saver, admin.retention_plan("", 100, KEEP, CUTOFF, **bounds)) == want
    assert planned(saver, admin.retention_plan_threads(
        list(reversed(every)), KEEP, CUTOFF, **bounds)) == want
    # A page after a cursor, of a limited size, packs its own threads from batch 0.
    assert planned(saver, admin.retention_plan("p-cc", 4, KEEP, CUTOFF, **bounds)) == policy(
        ["p-d", "p-e", "p-f", "p-g"])
    assert planned(saver, admin.retention_plan_threads(
        ["p-g", "p-e", "nobody"], KEEP, CUTOFF, **bounds)) == policy(["p-e", "p-g"])
    # No cutoff: nothing is idle.
    (result,) = saver.execute([admin.retention_plan("", 100, KEEP, None, **bounds)])
    assert not any(p.expired for p in admin.read_plan(result))


def test_a_thread_last_updated_at_the_cutoff_is_not_idle(local: Backend) -> None:
    """Idle means last updated before the cutoff: a thread whose newest checkpoint is
    stamped the cutoff itself is not expired (both plans); a moment later it is."""
    saver = local.saver()
    put_chain(saver, "q-edge", 1, ts=CUTOFF, writes=0)
    bounds = {"batch_checkpoints": BATCH_CHECKPOINTS, "batch_threads": BATCH_THREADS}
    for cutoff, expired in ((CUTOFF, False), (CUTOFF + "T00:00:00.001Z", True)):
        for statement in (admin.retention_plan("q-", 10, KEEP, cutoff, **bounds),
                          admin.retention_plan_threads(["q-edge"], KEEP, cutoff, **bounds)):
            assert [p.expired for p in planned_all(saver, statement)] == [expired], cutoff


def planned_all(saver: D1Saver, statement: Any) -> list[Any]:
    (result,) = saver.execute([statement])
    return admin.read_plan(result)


def test_a_batch_closed_by_its_thread_count_leaves_no_load_behind(local: Backend) -> None:
    """A batch full by its thread count opens the next with the new thread's deletions only:
    four threads losing one checkpoint each, two threads and three deletions a batch, pack
    two and two (both plans), not a third batch for the carried-over load."""
    saver = local.saver()
    threads = [f"r-{n}" for n in range(4)]
    for tid in threads:
        put_chain(saver, tid, 2, ts=NOW, writes=0)
    bounds = {"batch_checkpoints": 3, "batch_threads": 2}
    for statement in (admin.retention_plan("r-", 10, 1, None, **bounds),
                      admin.retention_plan_threads(threads, 1, None, **bounds)):
        assert [p.batch for p in planned_all(saver, statement)] == [0, 0, 1, 1]
