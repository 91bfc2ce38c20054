"""Issue 20's listed defects as the harnesses found them: each case here failed on the code
before its fix (it was a strict xfail until the fix landed); the random runs cover them again
and step around none of them."""

from __future__ import annotations

import pytest

from d1saver.compaction.rebalance import rebalance
from tests import interleave
from tests.reliability import harness
from tests.reliability import test_interleavings as races
from tests.reliability import test_kill_points as kill_points
from tests.reliability.harness import DATABASES, K1, K2, KillAt, Killed, World


@pytest.mark.parametrize("deleter", ["delete_thread", "prune"])
def test_delete_racing_a_rebalance_is_not_undone(deleter: str) -> None:
    """delete_thread (or prune) on the new layout while rebalance moves the thread: the first
    seeded schedule has rebalance read the thread, the delete run at both homes, then the
    copy land at the new home: the deleted checkpoints read again."""
    (run,) = list(interleave.sample(races._maker((deleter, "rebalance")), 1, seed=0))
    assert run.errors == [None, None]


def _killed_rebalance_with_staged_rows(world: World) -> None:
    """Set up a thread too long for one batch, and kill rebalance at the first request after
    which it has left staged rows."""
    kill_points._threads(world, DATABASES[:1], keys=[K1], big=2)
    for at in range(60):
        try:
            rebalance(world.saver(DATABASES[:2], previous=DATABASES[:1], keys=[K1],
                                  transport=KillAt(world.transport, at, after=True)),
                      break_lease=True, concurrency=1)
        except Killed:
            if world.staged():
                return
            continue
        raise AssertionError("rebalance finished without staging anything")


def test_list_over_databases_while_rows_are_staged() -> None:
    """With keys, list(None) over the databases after a rebalance killed with staged rows."""
    world = World()
    try:
        _killed_rebalance_with_staged_rows(world)
        reader = world.saver(DATABASES[:2], previous=DATABASES[:1], keys=[K1])
        threads = {t.config["configurable"]["thread_id"] for t in reader.list(None)}
        assert not any(t.startswith(harness.STAGING) for t in threads)
    finally:
        world.close()


def test_rekey_after_a_killed_rebalance() -> None:
    from d1saver.compaction.rekey import rekey
    world = World()
    try:
        _killed_rebalance_with_staged_rows(world)
        rekey(world.saver(DATABASES[:2], previous=DATABASES[:1], keys=[K2, K1]),
              break_lease=True)
    finally:
        world.close()


def test_prune_of_no_threads_over_several_databases() -> None:
    world = World()
    try:
        world.saver(DATABASES[:2]).prune([])
    finally:
        world.close()


def test_a_killed_copy_between_databases_leaves_nothing_behind() -> None:
    """copy_thread between two databases, killed once it has staged rows at the target: the
    thread's deletes (source and target) leave no staged row."""
    world = World()
    try:
        kill_points._copy_setup(world)
        for at in range(20):
            try:
                kill_points._copy_run(world, KillAt(world.transport, at, after=True))
            except Killed:
                if world.staged():
                    break
                continue
            raise AssertionError("the copy finished without staging anything")
        saver = world.saver(DATABASES[:2])
        target = next(f"copy-{i}" for i in range(100)
                      if saver.home(f"copy-{i}") != saver.home(kill_points.A))
        saver.delete_thread(kill_points.A)
        saver.delete_thread(target)
        assert world.staged() == []
    finally:
        world.close()
