"""Rekeying among rows that share keys: the same task ids and write indexes at several
checkpoints of a thread, the same checkpoint ids in several threads. Each row is re-sealed
in place, read back as it was, and no other row is touched."""

from __future__ import annotations

import base64
import os

from langgraph.checkpoint.base import empty_checkpoint

from d1saver import Statement
from d1saver.compaction import compact
from d1saver.compaction.rekey import rekey
from tests.compaction import cfg, checkpoint_id, put_chain, query
from tests.compaction.test_shared_keys import delta_chain
from tests.compaction.test_rekey import K1, K2, NEW, OLD, census, snapshot
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


def test_plaintext_metadata_over_the_row_limit_is_sealed_whole(local: Backend) -> None:
    """A plaintext checkpoint whose metadata was moved to pieces (over D1's row limit) is
    sealed by --seal-plaintext like any other (its pieces checked unchanged first, then
    replaced), beside another such thread with the same checkpoint id, and reads back whole."""
    notes = {t: base64.b64encode(os.urandom(1_600_000)).decode() for t in ("m", "n")}
    plain = local.saver()
    for thread_id, note in notes.items():
        cp = empty_checkpoint()
        cp.update(id=checkpoint_id(0), channel_values={"x": thread_id})
        plain.put(cfg(thread_id), cp, {"step": 0, "note": note}, {})
        assert query(plain, "SELECT COUNT(*) FROM chunks WHERE thread_id = ?1"
                            " AND owner = ':metadata'", thread_id)[0][0] >= 1
    keyed = local.saver(encryption_keys=[K1])
    summary = rekey(keyed, seal_plaintext=True)
    assert summary.rewritten == 2 and summary.plaintext_left == 0
    assert census(keyed)["checkpoints"] == {OLD: 2}
    for thread_id, note in notes.items():
        tup = keyed.get_tuple(cfg(thread_id))
        assert tup is not None and tup.checkpoint["channel_values"] == {"x": thread_id}
        assert tup.metadata["note"] == note


def test_frozen_values_in_pieces_of_threads_with_the_same_ids_are_resealed(local: Backend
                                                                           ) -> None:
    """Two compacted threads with the same checkpoint ids, each with a DeltaChannel write
    over the row limit frozen (in pieces, held by the same holder id): a rotation and a rekey
    re-seal both (each guarded by its own pieces), and the old key can go."""
    old = local.saver(encryption_keys=[K1])
    big = {t: os.urandom(1_500_000) for t in ("a", "b")}
    for thread_id in ("a", "b"):
        delta_chain(old, thread_id, "", 4, (0,), label=thread_id)
        old.put_writes(cfg(thread_id, checkpoint_id=checkpoint_id(1)),
                       [("messages", big[thread_id])], task_id="task-big")
    compact(old, keep=1, threads=["a", "b"])
    assert query(old, "SELECT COUNT(DISTINCT thread_id) FROM chunks"
                      " WHERE substr(owner, 1, 2) = 'f/'")[0][0] == 2
    rotated = local.saver(encryption_keys=[K2, K1])
    histories = {t: rotated.get_delta_channel_history(config=cfg(t), channels=["messages"])
                 for t in big}
    rekey(rotated)
    assert set(census(rotated)["delta_frozen"]) == {NEW}
    dropped = local.saver(encryption_keys=[K2])
    for thread_id, value in big.items():  # the rows the writes went with are gone
        history = dropped.get_delta_channel_history(config=cfg(thread_id), channels=["messages"])
        assert history == histories[thread_id]
        assert ("task-big", "messages", value) in history["messages"]["writes"]


def test_the_census_reads_values_in_pieces_from_their_own_thread_and_namespace(
        local: Backend) -> None:
    """Two namespaces of a thread, and another thread, with the same checkpoint ids, each
    with DeltaChannel writes over the row limit (in pieces, under the same owners): one
    frozen by compaction, one pending at the kept head; and a checkpoint over the row limit.
    One namespace was written under the old key, the other and the other thread after a
    rotation: the census counts each value under the key of its own pieces, as rekey's
    figures need."""
    keyed, rotated = local.saver(encryption_keys=[K1]), local.saver(encryption_keys=[K2, K1])
    places = ((keyed, "t", ""), (rotated, "t", "sub"), (rotated, "u", ""))
    for saver, tid, ns in places:
        delta_chain(saver, tid, ns, 4, (0,))
        for i in (1, 3):
            saver.put_writes(cfg(tid, ns, checkpoint_id(i)), [("messages", os.urandom(1_500_000))],
                             task_id="task-big")
    compact(keyed, keep=1, threads=["t", "u"])
    for saver, tid, ns in places:  # a checkpoint in pieces too
        cp = empty_checkpoint()
        cp.update(id=checkpoint_id(9), channel_values={"x": os.urandom(1_500_000)})
        saver.put(cfg(tid, ns), cp, {"step": 9}, {})
    pieces = query(keyed, "SELECT thread_id, checkpoint_ns, owner = '', substr(owner, 1, 2) = 'f/',"
                          " COUNT(DISTINCT owner) FROM chunks GROUP BY 1, 2, 3, 4")
    assert sorted(map(tuple, pieces)) == [(tid, ns, *kind, 1) for _, tid, ns in sorted(
        places, key=lambda p: p[1:]) for kind in ((0, 0), (0, 1), (1, 0))]

    def rows(table: str, tid: str, ns: str) -> int:
        value = "checkpoint" if table == "checkpoints" else "value"
        return int(query(keyed, f"SELECT COUNT(*) FROM {table} WHERE thread_id = ?1"
                                f" AND checkpoint_ns = ?2 AND {value} IS NOT NULL", tid, ns)[0][0])

    got = census(keyed)
    for table in ("checkpoints", "writes", "delta_frozen"):
        assert got[table] == {OLD: rows(table, "t", ""),
                              NEW: rows(table, "t", "sub") + rows(table, "u", "")}, table


def test_frozen_values_in_pieces_are_judged_by_their_own_threads_pieces(local: Backend
                                                                        ) -> None:
    """Two compacted threads with the same checkpoint ids, each with a DeltaChannel write over
    the row limit frozen in pieces under the same holder id, one written before a rotation
    and one after: rekey re-seals exactly the old one's frozen rows (each row judged by its
    own thread's pieces), and the old key can go."""
    old, rotated = local.saver(encryption_keys=[K1]), local.saver(encryption_keys=[K2, K1])
    big = {t: os.urandom(1_500_000) for t in ("a", "b")}
    for saver, thread_id in ((rotated, "a"), (old, "b")):
        delta_chain(saver, thread_id, "", 4, (0,), label=thread_id)
        saver.put_writes(cfg(thread_id, checkpoint_id=checkpoint_id(1)),
                         [("messages", big[thread_id])], task_id="task-big")
        compact(saver, keep=1, threads=[thread_id])
    assert census(rotated)["delta_frozen"] == {OLD: 5, NEW: 5}
    histories = {t: rotated.get_delta_channel_history(config=cfg(t), channels=["messages"])
                 for t in big}
    summary = rekey(rotated)
    assert summary.tables["delta_frozen"]["rewritten"] == 5  # thread b's alone
    assert census(rotated)["delta_frozen"] == {NEW: 10}
    dropped = local.saver(encryption_keys=[K2])
    for thread_id, value in big.items():
        history = dropped.get_delta_channel_history(config=cfg(thread_id), channels=["messages"])
        assert history == histories[thread_id]
        assert ("task-big", "messages", value) in history["messages"]["writes"]


def test_a_frozen_write_row_holding_no_value_is_left_as_it_is(local: Backend) -> None:
    """A frozen write row whose value is NULL (nothing d1saver writes: planted, or damaged)
    has nothing to seal: --seal-plaintext leaves it out of its pages and counts, and seals
    every other frozen row."""
    plain = local.saver()
    delta_chain(plain, "t", "", 4, (0,))
    compact(plain, keep=1, threads=["t"])
    assert query(plain, "SELECT kind, COUNT(*) FROM delta_frozen GROUP BY 1") == [
        ["s", 1], ["w", 3]]
    plain.execute([Statement(
        "UPDATE delta_frozen SET value = NULL WHERE rowid = (SELECT MIN(rowid) FROM"
        " delta_frozen WHERE kind = 'w')", ())])
    keyed = local.saver(encryption_keys=[K1])
    sealed = rekey(keyed, seal_plaintext=True)
    assert sealed.tables["delta_frozen"] == {"rewritten": 3, "plaintext_left": 0, "pages": 1}
    assert sealed.plaintext_left == 0 and sealed.skipped == 0
    assert census(keyed)["delta_frozen"] == {OLD: 3}  # the NULL row holds no value to count
