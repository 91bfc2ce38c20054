"""Rekeying among rows that share keys: the same task ids and write indexes at several
checkpoints of a thread, the same checkpoint ids in several threads. Each row is re-sealed
in place, read back as it was, and no other row is touched."""

from __future__ import annotations

from d1saver.compaction.rekey import rekey
from tests.compaction import cfg, checkpoint_id, put_chain
from tests.compaction.test_rekey import K1, K2, NEW, census, snapshot
from tests.conftest import Backend


def test_writes_of_one_task_id_at_several_checkpoints_are_each_resealed_in_place(
        local: Backend) -> None:
    """A task id reused at every checkpoint of two threads with the same checkpoint ids (each
    write different): after a rotation and a rekey, every write reads back as it was, under
    the new key only, so the old key can go."""
    old = local.saver(encryption_keys=[K1])
    for thread_id in ("a", "b"):
        for config in put_chain(old, thread_id, 3, writes=0):
            i = int(config["configurable"]["checkpoint_id"][-2:])
            old.put_writes(config, [("x", f"{thread_id}{i}-first"), ("y", f"{thread_id}{i}-2nd")],
                           task_id="same-task")
    rotated = local.saver(encryption_keys=[K2, K1])
    before = snapshot(rotated)
    summary = rekey(rotated, batch_rows=2)
    assert summary.rewritten == 6 + 12
    after = census(rotated)
    assert (after["checkpoints"], after["writes"]) == ({NEW: 6}, {NEW: 12})
    dropped = local.saver(encryption_keys=[K2])
    assert snapshot(dropped) == before
    head = dropped.get_tuple(cfg("b", checkpoint_id=checkpoint_id(1)))
    assert head is not None and sorted(w[2] for w in head.pending_writes or []) == [
        "b1-2nd", "b1-first"]
