"""Moves and copies between databases among threads that share keys: the same checkpoint ids,
namespaces, task ids and chunk owners in several threads (as copies of one thread have). A
thread's move or copy reads, compares and replaces its own rows, never another's."""

from __future__ import annotations

import os
from typing import Any

from langgraph.checkpoint.base import CheckpointTuple

from d1saver import D1Saver, Statement, admin
from d1saver.fleet.routing import COPYING_PREFIX, LEAVING_PREFIX
from d1saver.sql.catalogue import TRANSFER_INSERT
from d1saver.ops.transfer import copy_batches, deleted, delete_if_unchanged, read_thread
from tests.compaction import cfg, checkpoint_id, query
from tests.compaction.test_job import delta_graph
from tests.conftest import Backend
from tests.fleet.conftest import FleetBackend
from tests.fleet.test_saver import chain, spread, view
from tests.fleet.test_transfer import read, synthetic_rows


def test_a_thread_leaves_beside_threads_with_the_same_keys(local: Backend) -> None:
    """A moved thread's old copy goes though other threads hold rows of the same keys in every
    table (and one more each): the comparison is of the thread with its scratch copy only. The
    scratch rows, over several requests, are registered while they wait (a cleanup leaves
    them), and go with the thread; the other thread is left as it was."""
    saver = local.saver()
    synthetic_rows(saver, "t", 3)
    synthetic_rows(saver, "u", 4)
    rows, _ = read(saver, "t")
    other, _ = read(saver, "u")
    batches = delete_if_unchanged(rows, staging_prefix=LEAVING_PREFIX, max_bytes=1_000)
    assert len(batches) > 1
    for b in batches[:-1]:
        saver.execute(b)
    (found,) = saver.execute([admin.leftovers()])
    assert admin.read_leftovers(found) == [
        admin.Leftover(LEAVING_PREFIX + "t", "t", "t", expired=False)]
    assert deleted(saver.execute(batches[-1]))
    assert read(saver, "t")[0].total == 0
    assert read(saver, "u")[0].tables == other.tables
    assert saver.execute([admin.leftovers()])[0].rows == []


def pending(saver: D1Saver, thread_id: str) -> list[tuple]:
    return [view(t) for t in saver.list(cfg(thread_id))]


def big_write(saver: D1Saver, thread_id: str, i: int, value: bytes) -> CheckpointTuple | None:
    saver.put_writes(cfg(thread_id, checkpoint_id=checkpoint_id(i)), [("y", value)],
                     task_id="task-big")
    return saver.get_tuple(cfg(thread_id, checkpoint_id=checkpoint_id(i)))


def legacy_write_in_pieces(saver: D1Saver, thread_id: str, i: int) -> None:
    """A write stored over a row of the chunks table, as releases before content addressing
    (and sealed values) store one, in namespace "old"; the piece's text is never read here, only
    carried."""
    at = {"thread_id": thread_id, "checkpoint_ns": "old", "checkpoint_id": checkpoint_id(i)}
    saver.execute([
        Statement.bind(TRANSFER_INSERT["writes"], {
            **at, "task_id": "task-old", "idx": 0, "task_path": "", "channel": "z",
            "type": "msgpack", "value": "c:1"}),
        Statement.bind(TRANSFER_INSERT["chunks"], {
            **at, "owner": "task-old/0", "seq": 0, "data": "legacy piece"})])


def test_a_copy_onto_a_thread_keeps_its_other_writes_whole(local: Backend) -> None:
    """A staged copy renamed onto a thread with the same checkpoint ids and task ids replaces
    the writes of the tasks it has, per (task, idx), and nothing else: the target's writes of
    other checkpoints, and of other tasks of a shared checkpoint (with their pieces), stay.
    The result is what copy_thread gives within one database."""
    saver = local.saver()
    value = os.urandom(50_000)  # stored by content, over several rows
    for thread_id in ("src", "dst", "dst-ref"):
        chain(saver, thread_id, 1, ns="old", value=lambda i: f"v{i}")
    chain(saver, "src", 1, value=lambda i: f"v{i}")
    for target in ("dst", "dst-ref"):
        chain(saver, target, 2, value=lambda i: f"v{i}")
        big_write(saver, target, 0, value)
        saver.put_writes(cfg(target, checkpoint_id=checkpoint_id(1)), [("x", "a"), ("y", "b")],
                         task_id="task-pair")  # one row: a pack
        legacy_write_in_pieces(saver, target, 0)
    pieces = query(saver, "SELECT COUNT(*) FROM chunks WHERE thread_id = 'dst'")[0][0]
    stored = query(saver, "SELECT COUNT(*) FROM d1saver_chunks WHERE thread_id = 'dst'")[0][0]
    assert pieces + stored > 0  # the big write is stored over several rows

    rows = saver.driver.run(read_thread(saver.ops.execute, "src"))
    for batch in copy_batches(rows, "dst", staging_prefix=COPYING_PREFIX, max_bytes=1):
        saver.execute(batch)
    saver.copy_thread("src", "dst-ref")

    got = pending(saver, "dst")
    assert got == pending(saver, "dst-ref")
    assert read(saver, "dst")[0].tables == read(saver, "dst-ref")[0].tables
    assert [t[1] for t in got] == [checkpoint_id(1), checkpoint_id(0)]
    head = saver.get_tuple(cfg("dst", checkpoint_id=checkpoint_id(0)))
    assert head is not None
    assert sorted((w[0], w[1]) for w in head.pending_writes or []) == [
        ("task-0", "x"), ("task-big", "y")]
    assert query(saver, "SELECT seq, data FROM chunks WHERE thread_id = 'dst'"
                        " AND checkpoint_ns = 'old' AND owner = 'task-old/0'"
                 ) == [[0, "legacy piece"]]
    assert [w[2] for w in head.pending_writes or [] if w[0] == "task-big"] == [value]
    one = saver.get_tuple(cfg("dst", checkpoint_id=checkpoint_id(1)))
    assert one is not None and sorted((w[0], w[1], w[2]) for w in one.pending_writes or []) == [
        ("task-1", "x", "w1"), ("task-pair", "x", "a"), ("task-pair", "y", "b")]


def frozen_rows(fleet: FleetBackend, thread_id: str) -> list[tuple[Any, ...]]:
    """(checkpoint_id, channel, kind, depth) of every frozen row of the thread, anywhere."""
    out: list[tuple[Any, ...]] = []
    for db in fleet.holding(thread_id):
        with fleet.single(db) as s:
            (res,) = s.execute([Statement(
                "SELECT checkpoint_id, channel, kind, depth FROM delta_frozen"
                " WHERE thread_id = ?1 ORDER BY 1, 2, 3, 4", (thread_id,))])
            out += map(tuple, res.rows)
    return out


def test_a_sealed_copy_pages_through_frozen_rows_of_several_channels(local4: FleetBackend
                                                                    ) -> None:
    """A pruned thread whose head holds frozen histories of two DeltaChannels, copied to
    another database under keys one small page at a time (pages split the head's rows
    between channels): every frozen row arrives, and the copy reads the same."""
    with local4.saver(local4.database_ids[:2], page_size=2,
                      encryption_keys=[os.urandom(32)]) as saver:
        source = spread(saver, "notes", 1)[0]
        target = next(t for i in range(100) if saver.home(t := f"{source}-to-{i}")
                      != saver.home(source))
        graph = delta_graph(saver, steps=9, note_at=2)
        config: Any = {"configurable": {"thread_id": source}}
        graph.invoke({"messages": ["hi"], "n": 0}, config)
        saver.prune([source])
        frozen = frozen_rows(local4, source)
        assert {row[1] for row in frozen} == {"messages", "notes"} and len(frozen) >= 4
        saver.copy_thread(source, target)
        assert frozen_rows(local4, target) == frozen
        copied: Any = {"configurable": {"thread_id": target}}
        assert graph.get_state(copied).values == graph.get_state(config).values
