"""Compaction among threads and namespaces that share keys: the same checkpoint ids in several
threads and in several namespaces of one thread, the same subgraph namespaces and task ids,
DeltaChannel histories frozen side by side. Each thread and namespace is compacted as it
would be alone: what is kept, what is frozen, and what the run reports it freed."""

from __future__ import annotations

import os
from typing import Any

from langgraph.checkpoint.base import empty_checkpoint

from d1saver import D1Saver, inspection
from d1saver.compaction import compact
from d1saver.sql.parts import TABLE_COLUMNS
from tests.compaction import BIG, cfg, checkpoint_id, put_chain, query
from tests.compaction.test_bounds import put_writes_chain
from tests.compaction.test_job import by_namespace
from tests.conftest import Backend

KEYS = [bytes([7]) * 32]  # values over D1's row limit are then stored as parts (chunks table)
TABLES = ("checkpoints", "writes", "chunks", "tags", "delta_frozen")


def stored_bytes(saver: D1Saver, thread_id: str) -> int:
    """What compaction counts of a thread: its checkpoint rows, write values and parts."""
    return int(query(saver, """
        SELECT (SELECT COALESCE(SUM(LENGTH(checkpoint) + LENGTH(metadata)), 0) FROM checkpoints
                WHERE thread_id = ?1)
             + (SELECT COALESCE(SUM(LENGTH(value)), 0) FROM writes WHERE thread_id = ?1)
             + (SELECT COALESCE(SUM(LENGTH(data)), 0) FROM chunks WHERE thread_id = ?1)""",
                     thread_id)[0][0])


def rows_of(saver: D1Saver, thread_id: str, ns: str | None = None) -> dict[str, list[list[Any]]]:
    """Every row of a thread (of one namespace), in key order, thread id (and when a tag was
    made) aside."""
    out = {}
    for table in TABLES:
        columns = [c for c in TABLE_COLUMNS[table] if c not in ("thread_id", "created_at")]
        where = "thread_id = ?1" + ("" if ns is None else " AND checkpoint_ns = ?2")
        out[table] = query(saver, f"SELECT {', '.join(columns)} FROM {table} WHERE {where}"
                                  f" ORDER BY {', '.join(columns)}",
                           *((thread_id,) if ns is None else (thread_id, ns)))
    return out


def test_bytes_freed_are_the_threads_own_and_of_stored_checkpoints_only(local: Backend) -> None:
    """The bytes a run reports freed are exactly what left the thread compacted: not the
    parts of another thread with the same checkpoint ids, nor those of a write in a namespace
    whose checkpoint is not stored yet (though other namespaces hold newer ids)."""
    saver = local.saver(encryption_keys=KEYS)
    put_chain(saver, "a", 6, writes=1)
    put_chain(saver, "a", 2, ns="side", writes=1)
    saver.put_writes(cfg("a", "side", checkpoint_id(4)), [("x", os.urandom(BIG))],
                     task_id="in-flight")  # checkpoint side/4 is not stored yet
    put_chain(saver, "b", 2, writes=0, value=lambda i: os.urandom(BIG))
    other = rows_of(saver, "b")
    assert other["chunks"] and query(saver, "SELECT COUNT(*) FROM chunks WHERE thread_id = 'a'"
                                            " AND checkpoint_ns = 'side'")[0][0] > 1
    before = stored_bytes(saver, "a")

    dry = compact(saver, keep=1, threads=["a"], dry_run=True)
    summary = compact(saver, keep=1, threads=["a"])

    assert (summary.checkpoints_deleted, summary.writes_deleted) == (5 + 1, 5 + 1)
    assert summary.bytes_freed == dry.bytes_freed == before - stored_bytes(saver, "a") > 0
    assert rows_of(saver, "b") == other
    pending = saver.get_tuple(cfg("a", "side", checkpoint_id(4)))
    assert pending is None  # still in flight: its write waits, whole
    assert query(saver, "SELECT task_id FROM writes WHERE thread_id = 'a'"
                        " AND checkpoint_ns = 'side' AND checkpoint_id = ?1",
                 checkpoint_id(4)) == [["in-flight"]]


def test_growth_counts_each_namespace_its_own_parts(local: Backend) -> None:
    """Two namespaces of one thread with the same checkpoint ids, one holding values over the
    row limit: only its rows count those parts."""
    saver = local.saver(encryption_keys=KEYS)
    put_chain(saver, "g", 2, writes=0, value=lambda i: os.urandom(BIG))
    put_chain(saver, "g", 2, ns="twin", writes=0)
    parts = {(r["checkpoint_ns"], r["checkpoint_id"]): r["parts_bytes"]
             for r in inspection.growth(saver, "g")}
    assert parts[("", checkpoint_id(0))] > BIG and parts[("", checkpoint_id(1))] > BIG
    assert parts[("twin", checkpoint_id(0))] == parts[("twin", checkpoint_id(1))] == 0


def test_a_thread_keeps_only_the_subgraphs_its_own_checkpoints_reach(local: Backend) -> None:
    """Two threads with the same subgraph namespace (the same task id): the one whose kept
    checkpoint holds that task's write keeps the subgraph's newest checkpoint; the other,
    whose kept checkpoints do not reach it, loses it, compacted in the same batch."""
    saver = local.saver()
    put_writes_chain(saver, "a", 4, "")              # a's newest ('' 3) holds task-3's write
    put_writes_chain(saver, "a", 2, "child:task-3")
    put_writes_chain(saver, "b", 5, "")              # b's newest ('' 4) holds task-4's
    put_writes_chain(saver, "b", 2, "child:task-3")
    compact(saver, keep=1, threads=["a", "b"])
    assert by_namespace(saver, "a") == {"": [checkpoint_id(3)],
                                        "child:task-3": [checkpoint_id(1)]}
    assert by_namespace(saver, "b") == {"": [checkpoint_id(4)]}


def delta_chain(saver: D1Saver, thread_id: str, ns: str, n: int, seeds: tuple[int, ...],
                label: str | None = None) -> None:
    """n checkpoints checkpoint_id(0..n-1) in `ns`, each with a write of task 'task-<i>' to
    the DeltaChannel 'messages', which only `seeds` hold a value of; the same rows in any
    thread (a fixed ts), but for the messages' `label` (default: the namespace)."""
    parent = cfg(thread_id, ns)
    for i in range(n):
        cp = empty_checkpoint()
        cp.update(id=checkpoint_id(i), ts="2026-11-01T00:00:00+00:00",
                  channel_versions={"messages": f"{i + 1:010}.0"})
        metadata: dict[str, Any] = {"source": "loop", "step": i, "parents": {}}
        if i in seeds:
            cp["channel_values"] = {"messages": [f"seed{i}"]}
        else:
            metadata["counters_since_delta_snapshot"] = {"messages": [i, i]}
        parent = saver.put(parent, cp, metadata, {})
        saver.put_writes(parent, [("messages", f"m{ns if label is None else label}{i}")],
                         task_id=f"task-{i}")


def test_namespaces_with_the_same_ids_freeze_their_own_histories(local: Backend) -> None:
    """DeltaChannel histories in namespaces of one thread with the same checkpoint ids
    (different lengths, seeds and tags) are frozen as the same histories in separate threads
    are: each namespace's rows after compaction equal those of a thread holding it alone. A
    frozen copy is only ever of a checkpoint or write that went: a walk that meets a kept
    checkpoint (here a tagged seed) leaves a 'c' row, not a copy of it."""
    saver = local.saver()
    shapes: dict[str, dict[str, Any]] = {"": {"n": 8, "seeds": (0,), "tag": 3},
                                         "twin": {"n": 6, "seeds": (0, 3), "tag": 3},
                                         "third": {"n": 8, "seeds": (0, 5), "tag": None}}
    for ns, shape in shapes.items():
        for thread_id in ("shared", f"alone-{ns}"):
            delta_chain(saver, thread_id, ns, shape["n"], shape["seeds"])
            if shape["tag"] is not None:
                saver.tag(cfg(thread_id, ns, checkpoint_id(shape["tag"])), f"approval-{ns}")
    compact(saver, keep=1, threads=["shared", *(f"alone-{ns}" for ns in shapes)])
    for ns in shapes:
        got = rows_of(saver, "shared", ns)
        assert got == rows_of(saver, f"alone-{ns}", ns)
        kept = {row[1] for row in got["checkpoints"]}
        tag = shapes[ns]["tag"]
        assert kept == {checkpoint_id(shapes[ns]["n"] - 1),
                        *([] if tag is None else [checkpoint_id(tag)])}
        frozen = got["delta_frozen"]
        assert frozen
        # (checkpoint_ns, checkpoint_id, channel, kind, depth, task_id, idx, src_checkpoint_id, ...)
        assert not [f for f in frozen if f[3] != "c" and f[7] in kept]
    assert sorted(f[3] for f in rows_of(saver, "shared", "twin")["delta_frozen"]) == ["c", "w"]


def test_histories_served_after_a_filtered_list_are_the_threads_own(local: Backend) -> None:
    """Two threads with the same checkpoint ids and different messages, one compacted (its
    histories frozen at ids the other holds unfrozen): a filtered list of one namespace of
    either serves (prefetched, no request) the histories a fresh reader gets for that thread,
    never the other's."""
    saver = local.saver()
    for thread_id in ("p", "q"):
        delta_chain(saver, thread_id, "", 6, (0,), label=thread_id)
        delta_chain(saver, thread_id, "side", 3, (0,), label=thread_id)
    compact(saver, keep=2, threads=["q"])
    assert query(saver, "SELECT DISTINCT thread_id FROM delta_frozen") == [["q"]]
    fresh = local.saver()
    for thread_id in ("p", "q"):
        config: Any = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
        listed = list(saver.list(config, filter={"source": "loop"}))
        assert len(listed) == (6 if thread_id == "p" else 2)
        served = [saver.get_delta_channel_history(config=t.config, channels=["messages"])
                  for t in listed]
        assert served == [fresh.get_delta_channel_history(config=t.config, channels=["messages"])
                          for t in listed]
        other = "q" if thread_id == "p" else "p"
        assert f"m{thread_id}4" in str(served) and f"m{other}" not in str(served)
        (one,) = saver.list(config, filter={"step": 4})  # q's history ends there, frozen
        before = local.requests
        assert saver.get_delta_channel_history(config=one.config, channels=["messages"]) == (
            fresh.get_delta_channel_history(config=one.config, channels=["messages"]))
        assert local.requests == before + 1  # the fresh reader's; the list had prefetched it
