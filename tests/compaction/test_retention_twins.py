"""Retention over several threads at once is retention of each thread alone (issue 26).

Twin threads hold the same content under the same checkpoint ids, so their content-addressed
chunks share ids, as two threads storing one value do. One twin of each pair is compacted
alone, the other in one batch with the other pair's twin: every table must then hold the same
rows for both twins (thread ids aside), the batch's summary must count exactly what went (as
the rows before and after say), the kept DeltaChannel histories must read back as before, and
the chunk table must be exact. Subgraph namespaces reuse their parent's checkpoint ids, tasks
write several values, a checkpoint is tagged, a write waits for a checkpoint not stored yet,
and a second run compacts what the first one froze. On the local D1 only: a handful of
batches, well under a second.
"""

from __future__ import annotations

import json
import os
import uuid
from typing import Any

from langgraph.checkpoint.base import empty_checkpoint

from d1saver import D1Saver, admin
from d1saver.sql.parts import TABLE_COLUMNS
from tests.compaction import BIG, NOW, cfg, checkpoint_id, query
from tests.compaction.test_job import by_namespace
from tests.conftest import Backend

TABLES = ("checkpoints", "writes", "chunks", "tags", "delta_frozen", "delta_unwritten",
          "d1saver_chunks")
SUB = "child:task-S"  # the subgraph namespace a write of task 'task-S' reaches
GONE = "child:task-Z"  # a subgraph namespace whose task no kept checkpoint wrote
RUNNING = "child:task-R"  # a subgraph written after its parent's head (its task still runs)


def text(tag: object) -> str:
    """A value over STORED_MIN: stored as a content-addressed chunk of its thread."""
    return f"{tag}: " + "lorem ipsum dolor sit amet " * 12


def chain(saver: D1Saver, tid: str, ns: str, n: int, *, delta: bool = False,
          seeds: tuple[int, ...] = (0,), first: int = 0, extra: dict[int, str] | None = None
          ) -> None:
    """Checkpoints checkpoint_id(first..n-1) in `ns`, each the child of the one before; each
    with the writes of two tasks (task-b's two values packed in one row), and a write of task
    extra[i] at i. With `delta`, 'messages' is a DeltaChannel only `seeds` hold a value of."""
    for i in range(first, n):
        cp = empty_checkpoint()
        cp.update(id=checkpoint_id(i), ts=NOW, channel_versions={"messages": f"{i + 1:010}.0"})
        metadata: dict[str, Any] = {"source": "loop", "step": i, "parents": {}}
        if not delta or i in seeds:
            cp["channel_values"] = {"messages": [text(j) for j in range(i + 1)]}
        else:
            metadata["counters_since_delta_snapshot"] = {"messages": [i, i]}
        config = saver.put(cfg(tid, ns, checkpoint_id(i - 1) if i else None), cp, metadata, {})
        saver.put_writes(config, [("messages", [text(f"a{i}")])], task_id=f"task-a-{i}")
        saver.put_writes(config, [("messages", [text(f"b{i}")]), ("other", text(f"o{i}"))],
                         task_id=f"task-b-{i}")
        if extra and i in extra:
            saver.put_writes(config, [("messages", [text(extra[i])])], task_id=extra[i])


def build_x(saver: D1Saver, tid: str) -> None:
    """A DeltaChannel thread: root 0..5 seeded at 0 and 1, 1 tagged, the head's tasks calling
    the subgraph SUB (its own DeltaChannel, seeded at 0, under ids 0..2: its 1 is no seed
    where root's 1 is), GONE called by an old checkpoint only, and RUNNING (ids 6, 7)."""
    chain(saver, tid, "", 6, delta=True, seeds=(0, 1), extra={5: "task-S", 2: "task-Z"})
    chain(saver, tid, SUB, 3, delta=True, seeds=(0,))
    chain(saver, tid, GONE, 2)
    chain(saver, tid, RUNNING, 8, first=6)
    saver.tag(cfg(tid, "", checkpoint_id(1)), "kept")


def build_y(saver: D1Saver, tid: str) -> None:
    """A plain thread: root 0..3; SUB under ids 0..2, which no kept checkpoint of this thread
    reaches (the task that called it wrote nothing here), but a write of task 'task-S' in
    another thread does; and a write to checkpoint 3 of SUB, not stored yet (in flight)."""
    chain(saver, tid, "", 4)
    chain(saver, tid, SUB, 3)
    saver.put_writes(cfg(tid, SUB, checkpoint_id(3)), [("messages", [text("late")])],
                     task_id="task-late")


def rows(saver: D1Saver, tid: str) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of the thread, table by table, its thread id written 'T'."""
    return {t: sorted(tuple("T" if v == tid else v for v in r)[:4 if t == "tags" else None]
                      for r in query(saver, f"SELECT * FROM {t} WHERE thread_id = ?1", tid))
            for t in TABLES}  # a tag's time of creation aside


def writes_held(value: str) -> int:
    """The writes a row holds (a "p:" row packs one put_writes call's)."""
    return len(json.loads(value[2:])) if value.startswith("p:") else 1


def expected_summary(before: dict[str, list[tuple[Any, ...]]],
                     after: dict[str, list[tuple[Any, ...]]]) -> tuple[int, int, int, int]:
    """(checkpoints before, checkpoints gone, writes gone, bytes freed) as the rows say."""
    def keyed(rows_: list[tuple[Any, ...]], n: int) -> dict[tuple[Any, ...], Any]:
        return {r[:n]: r for r in rows_}  # by the table's key (its first n columns)

    gone: dict[str, list[tuple[Any, ...]]] = {}
    for table, n in (("checkpoints", 3), ("writes", 6), ("chunks", 5)):
        now = keyed(after[table], n)
        gone[table] = [r for k, r in keyed(before[table], n).items() if k not in now]
    cols = {"checkpoints": ("checkpoint", "metadata"), "writes": ("value",), "chunks": ("data",)}
    freed = 0
    for table, lost in gone.items():
        names = TABLE_COLUMNS[table]
        freed += sum(len(r[names.index(c)]) for r in lost for c in cols[table])
    value = TABLE_COLUMNS["writes"].index("value")
    return (len(before["checkpoints"]), len(gone["checkpoints"]),
            sum(writes_held(r[value]) for r in gone["writes"]), freed)


def compact(saver: D1Saver, threads: list[str], keep: int) -> dict[str, tuple[Any, ...]]:
    """A dry run's summary, then the batch's recorded one (they must agree); by thread."""
    dry = saver.execute(stmts := admin.retention(threads, keep, summarize=True, delete=False))
    planned = {r[0]: tuple(r[1:]) for r in admin.retention_summary(stmts, dry).rows}
    done = saver.execute(stmts := admin.retention(threads, keep, summarize=True,
                                                  op_id=uuid.uuid4().hex))
    recorded = {r[0]: tuple(r[1:]) for r in admin.retention_summary(stmts, done).rows}
    assert recorded == planned
    return recorded


def histories(saver: D1Saver, tid: str) -> dict[tuple[str, str], Any]:
    """The 'messages' history of every checkpoint of the thread, as readers see it."""
    out = {}
    for ns, ids in by_namespace(saver, tid).items():
        for cid in ids:
            got = saver.get_delta_channel_history(config=cfg(tid, ns, cid),
                                                  channels=["messages"])
            out[(ns, cid)] = got
    return out


def inexact(saver: D1Saver) -> list[tuple[str, int, int]]:
    (result,) = saver.execute([admin.chunk_check()])
    return [(t.thread_id, t.missing, t.unreferenced) for t in admin.inexact_threads(result)]


def test_threads_compacted_together_end_as_each_compacted_alone(local: Backend) -> None:
    saver = local.saver()
    x1, x2, y1, y2 = (f"{k}-{uuid.uuid4().hex[:8]}" for k in ("x1", "x2", "y1", "y2"))
    for tid in (x1, x2):
        build_x(saver, tid)
    for tid in (y1, y2):
        build_y(saver, tid)
    before = {t: rows(saver, t) for t in (x1, x2, y1, y2)}
    assert before[x1] == before[x2] and before[y1] == before[y2]
    assert before[x1]["d1saver_chunks"]  # the twins' chunks share ids
    # The kept checkpoints that replay 'messages' (the tagged 1 holds its value).
    replaying = {("", checkpoint_id(5)), (SUB, checkpoint_id(2))}
    read_before = {k: v for k, v in histories(saver, x1).items() if k in replaying}

    summaries = {**compact(saver, [x1], 1), **compact(saver, [y1], 1),
                 **compact(saver, [x2, y2], 1)}

    after = {t: rows(saver, t) for t in (x1, x2, y1, y2)}
    assert after[x1] == after[x2]
    assert after[y1] == after[y2]
    for tid in (x1, x2):
        assert by_namespace(saver, tid) == {"": [checkpoint_id(1), checkpoint_id(5)],
                                            SUB: [checkpoint_id(2)],
                                            RUNNING: [checkpoint_id(7)]}
        assert {k: v for k, v in histories(saver, tid).items() if k in replaying} == read_before
    for tid in (y1, y2):
        assert by_namespace(saver, tid) == {"": [checkpoint_id(3)]}
        # the write to SUB's checkpoint 3, not stored yet, stays (its put may be in flight)
        assert query(saver, "SELECT checkpoint_ns, checkpoint_id, task_id FROM writes WHERE "
                     "thread_id = ?1 AND checkpoint_ns = ?2", tid, SUB) == [
            [SUB, checkpoint_id(3), "task-late"]]
    for tid in (x1, x2, y1, y2):
        assert summaries[tid] == expected_summary(before[tid], after[tid]), tid
    # What froze: root's head walked 4, 3, 2 (the writes of its 'messages', three at 2) to
    # the tagged 1 (kept: a 'c' row); SUB's head 2 walked 1 to its seed 0 (the seed's row and
    # its writes); the tagged 1 is a seed itself.
    frozen = query(saver, "SELECT checkpoint_ns, checkpoint_id, kind, depth, src_checkpoint_id "
                   "FROM delta_frozen WHERE thread_id = ?1 AND channel = 'messages' "
                   "ORDER BY 1, 2, 3, 4, 5", x1)
    assert [tuple(r) for r in frozen] == [
        ("", checkpoint_id(5), "c", 4, checkpoint_id(1)),
        ("", checkpoint_id(5), "w", 1, checkpoint_id(4)),
        ("", checkpoint_id(5), "w", 1, checkpoint_id(4)),
        ("", checkpoint_id(5), "w", 2, checkpoint_id(3)),
        ("", checkpoint_id(5), "w", 2, checkpoint_id(3)),
        ("", checkpoint_id(5), "w", 3, checkpoint_id(2)),
        ("", checkpoint_id(5), "w", 3, checkpoint_id(2)),
        ("", checkpoint_id(5), "w", 3, checkpoint_id(2)),
        (SUB, checkpoint_id(2), "s", 2, checkpoint_id(0)),
        (SUB, checkpoint_id(2), "w", 1, checkpoint_id(1)),
        (SUB, checkpoint_id(2), "w", 1, checkpoint_id(1)),
        (SUB, checkpoint_id(2), "w", 2, checkpoint_id(0)),
        (SUB, checkpoint_id(2), "w", 2, checkpoint_id(0)),
    ]
    assert inexact(saver) == []


def test_a_plan_counts_the_parts_of_its_own_threads_that_go(local: Backend) -> None:
    """With keys, values over D1's row limit live in parts (the chunks table). A plan's bytes
    count the parts of what goes in its own threads only (another thread's parts beside them
    are not counted), and not the parts of a write whose checkpoint is not stored yet in its
    namespace, though a newer checkpoint of another namespace of the thread is (or of the
    same namespace in another thread)."""
    saver = local.saver(encryption_keys=[bytes([5]) * 32])
    tid, other = (f"{k}-{uuid.uuid4().hex[:8]}" for k in ("k", "o"))
    for t in (tid, other):
        chain(saver, t, "", 3, extra={2: "task-S"})
        chain(saver, t, SUB, 3 if t == other else 2)  # the other's SUB reaches id 2
    saver.put_writes(cfg(tid, SUB, checkpoint_id(2)), [("x", os.urandom(BIG))], task_id="late")
    saver.put_writes(cfg(other, "", checkpoint_id(0)), [("x", os.urandom(BIG))], task_id="old")
    assert query(saver, "SELECT thread_id, checkpoint_ns, checkpoint_id, COUNT(*) > 1 FROM chunks "
                 "WHERE thread_id IN (?1, ?2) GROUP BY 1, 2, 3 ORDER BY thread_id = ?2",
                 tid, other) == [[tid, SUB, checkpoint_id(2), 1], [other, "", checkpoint_id(0), 1]]
    before = {t: rows(saver, t) for t in (tid, other)}

    summary = compact(saver, [tid], 1)

    after = rows(saver, tid)
    assert summary == {tid: expected_summary(before[tid], after)}
    assert by_namespace(saver, tid) == {"": [checkpoint_id(2)], SUB: [checkpoint_id(1)]}
    assert after["chunks"] == before[tid]["chunks"]  # the parts of the write in flight stay
    assert rows(saver, other) == before[other]


def one_checkpoint(saver: D1Saver, tid: str, *, writes: bool = True) -> None:
    """A checkpoint whose value is a list of 40 chunks under a tree of nodes (levels 1, 2)."""
    cp = empty_checkpoint()
    cp.update(id=checkpoint_id(0), ts=NOW, channel_values={"messages": [text(j) for j in range(40)]},
              channel_versions={"messages": "1"})
    config = saver.put(cfg(tid), cp, {"source": "loop", "step": 0, "parents": {}}, {})
    if writes:
        saver.put_writes(config, [("messages", [text("w")])], task_id="task-w")


def check(saver: D1Saver, tid: str | None = None) -> list[tuple[str, int, int]]:
    (result,) = saver.execute([admin.chunk_check(tid)])
    return [(t.thread_id, t.missing, t.unreferenced) for t in admin.inexact_threads(result)]


def test_the_chunk_check_counts_each_thread_by_its_own_chunks(local: Backend) -> None:
    """Threads holding the same value hold chunks of the same ids. One loses a tree node its
    twin still has: the node is missing and the chunks only it listed are unreferenced (the
    twin's copy lists them for the twin only). Another loses a leaf while its other chunks
    stay: one missing. A third holds a chunk nothing reaches. Threads of checkpoints without
    writes, of writes without checkpoints (their put in flight), and of frozen histories
    without writes are exact, checked alone or with all. Compaction then collects what each
    thread in its scope no longer reaches, and nothing of the threads outside it."""
    saver = local.saver()
    node_lost, orphan, leaf_lost, no_writes, exact = "a-node", "b-orphan", "c-leaf", "d-none", "e-ok"
    writes_only, frozen_only, stray = "f-writes", "g-frozen", "h-stray"
    for tid in (node_lost, orphan, leaf_lost, exact):
        one_checkpoint(saver, tid)
    one_checkpoint(saver, no_writes, writes=False)
    saver.put_writes(cfg(writes_only, "", checkpoint_id(0)), [("messages", [text("one")])],
                     task_id="task-1")
    saver.put_writes(cfg(writes_only, "", checkpoint_id(0)),
                     [("messages", [text("p1")]), ("other", text("p2"))], task_id="task-2")
    chain(saver, frozen_only, "", 3, delta=True)
    query(saver, "DELETE FROM writes WHERE thread_id = ?1 AND checkpoint_id = ?2", frozen_only,
          checkpoint_id(2))
    compact(saver, [frozen_only], 1)  # its head keeps a frozen history, and no write
    assert query(saver, "SELECT COUNT(*) FROM writes WHERE thread_id = ?1", frozen_only) == [[0]]
    assert query(saver, "SELECT COUNT(*) > 4 FROM delta_frozen WHERE thread_id = ?1",
                 frozen_only) == [[1]]
    assert check(saver) == []
    node, data = query(saver, "SELECT id, data FROM d1saver_chunks WHERE thread_id = ?1 AND "
                       "level = 1 AND instr(data, '^') = 0 ORDER BY LENGTH(data) DESC, id LIMIT 1",
                       node_lost)[0]
    children = sum(":" not in entry for entry in data.split(","))  # leaves ('b:..' is inline)
    assert children > 1
    leaf = query(saver, "SELECT MIN(id) FROM d1saver_chunks WHERE thread_id = ?1 AND level = 0",
                 leaf_lost)[0][0]
    query(saver, "DELETE FROM d1saver_chunks WHERE thread_id = ?1 AND id = ?2", node_lost, node)
    query(saver, "DELETE FROM d1saver_chunks WHERE thread_id = ?1 AND id = ?2", leaf_lost, leaf)
    for tid in (orphan, stray):  # stray: a thread of nothing else (a copy killed midway)
        query(saver, "INSERT INTO d1saver_chunks (thread_id, id, level, data) VALUES "
                     "(?1, 'zzzzzzzzzzzzzzzzzzzzzzzzz', 0, 'b:orphan')", tid)

    want = [(node_lost, 1, children), (orphan, 0, 1), (leaf_lost, 1, 0), (stray, 0, 1)]
    assert check(saver) == want
    for tid in (node_lost, orphan, leaf_lost, no_writes, exact, writes_only, frozen_only, stray):
        assert check(saver, tid) == [w for w in want if w[0] == tid]
    # `d1saver growth` counts the chunks the thread's own rows reach: not those only its
    # lost node listed (the twin's copy of the node lists them for the twin only).
    from d1saver.inspection import growth

    def stored(tid: str, ids: list[str] | None = None) -> int:
        return int(query(saver, "SELECT COALESCE(SUM(LENGTH(data)), 0) FROM d1saver_chunks"
                                " WHERE thread_id = ?1 AND (?2 IS NULL OR id IN (SELECT value"
                                " FROM json_each(?2)))", tid,
                         None if ids is None else json.dumps(ids))[0][0])

    under = [entry for entry in data.split(",") if ":" not in entry]
    assert sum(r["chunk_bytes"] for r in growth(saver, node_lost)) == (
        stored(node_lost) - stored(node_lost, under)) and stored(node_lost, under) > 0

    compact(saver, [node_lost, orphan], 1)  # one checkpoint each: only chunks go
    assert check(saver) == [(node_lost, 1, 0), (leaf_lost, 1, 0), (stray, 0, 1)]


def test_growth_counts_each_checkpoint_of_its_own_thread_and_namespace(local: Backend) -> None:
    """`d1saver growth`: twin threads, namespaces under the same checkpoint ids, and parts
    (a write over D1's row limit, with keys) in one namespace only: each row counts its own
    row, writes and parts, and the chunks the thread stores are counted once in all."""
    from d1saver.inspection import growth

    saver = local.saver()
    twin, other = "g-twin", "g-other"
    for tid in (twin, other):
        chain(saver, tid, "", 3)
        chain(saver, tid, SUB, 2)
    keyed = local.saver(encryption_keys=[bytes([5]) * 32])
    keyed.put_writes(cfg(twin, SUB, checkpoint_id(1)), [("x", os.urandom(BIG))], task_id="big")

    got = growth(saver, twin)

    def total(sql: str, ns: str, cid: str) -> int:
        return int(query(saver, sql, twin, ns, cid)[0][0])

    where = "WHERE thread_id = ?1 AND checkpoint_ns = ?2 AND checkpoint_id = ?3"
    want = [(ns, cid,
             total(f"SELECT LENGTH(checkpoint) + LENGTH(metadata) FROM checkpoints {where}", ns, cid),
             total(f"SELECT COALESCE(SUM(LENGTH(value)), 0) FROM writes {where}", ns, cid),
             total(f"SELECT COALESCE(SUM(LENGTH(data)), 0) FROM chunks {where}", ns, cid))
            for cid in map(checkpoint_id, range(3)) for ns in ("", SUB)
            if (ns, cid) != (SUB, checkpoint_id(2))]
    assert [(r["checkpoint_ns"], r["checkpoint_id"], r["checkpoint_bytes"], r["writes_bytes"],
             r["parts_bytes"]) for r in got] == want
    assert sum(r["parts_bytes"] > 0 for r in got) == 1
    stored = query(saver, "SELECT SUM(LENGTH(data)) FROM d1saver_chunks WHERE thread_id = ?1",
                   twin)[0][0]
    assert sum(r["chunk_bytes"] for r in got) == stored > 0
    theirs = growth(saver, other)  # the same chunks; no parts (those are the twin's)
    assert [r["chunk_bytes"] for r in theirs] == [r["chunk_bytes"] for r in got]
    assert [r["parts_bytes"] for r in theirs] == [0] * len(got)


def test_growth_counts_the_frozen_histories_of_its_own_thread_and_namespace(
        local: Backend) -> None:
    """`d1saver growth` after compaction: two namespaces hold frozen DeltaChannel histories
    at the same checkpoint id, beside a kept checkpoint that holds none; a twin thread froze
    the same rows under the same ids, and another thread the same messages under an earlier
    id. Each row counts its own frozen rows (values
    and metadata), and the chunks only frozen rows reach now count once in all, where this
    thread first reached them."""
    from d1saver.inspection import growth

    saver = local.saver()
    chain(saver, "f-late", "", 5, delta=True, extra={4: "task-S"})  # the head calls SUB
    chain(saver, "f-late", SUB, 5, delta=True)
    chain(saver, "f-twin", "", 5, delta=True)  # frozen at the same ids
    chain(saver, "f-early", "", 3, delta=True)
    compact(saver, ["f-late", "f-twin", "f-early"], 2)
    got = growth(saver, "f-late")

    def frozen(ns: str, cid: str) -> int:
        return int(query(saver, "SELECT COALESCE(SUM(LENGTH(value) + COALESCE(LENGTH(metadata),"
                                " 0)), 0) FROM delta_frozen WHERE thread_id = ?1"
                                " AND checkpoint_ns = ?2 AND checkpoint_id = ?3",
                         "f-late", ns, cid)[0][0])

    want = [(ns, checkpoint_id(i), frozen(ns, checkpoint_id(i))) for i in (3, 4)
            for ns in ("", SUB)]
    assert [(r["checkpoint_ns"], r["checkpoint_id"], r["frozen_bytes"]) for r in got] == want
    assert [w[2] > 0 for w in want] == [True, True, False, False]
    assert query(saver, "SELECT COUNT(*) FROM delta_frozen WHERE thread_id = ?1"
                        " AND metadata IS NOT NULL", "f-late")[0][0] > 0
    stored = query(saver, "SELECT SUM(LENGTH(data)) FROM d1saver_chunks WHERE thread_id = ?1",
                   "f-late")[0][0]
    assert sum(r["chunk_bytes"] for r in got) == stored > 0


def test_growth_counts_a_chunk_where_its_own_thread_first_reached_it(local: Backend) -> None:
    """`d1saver growth`: two namespaces share a checkpoint id, each reaching content of its
    own; another thread reached both contents at an earlier id. Each namespace's row counts
    the chunks it reached (no other thread's checkpoint takes them), all of the thread's
    chunks are counted once, and `limit` keeps the oldest rows."""
    from d1saver.inspection import growth

    saver = local.saver()
    p, q = (os.urandom(30_000).hex() for _ in range(2))
    puts = [("g-late", "", checkpoint_id(5), [p]), ("g-late", SUB, checkpoint_id(5), [q]),
            ("g-late", "", checkpoint_id(6), [p, "more"]),
            ("g-early", "", checkpoint_id(1), [p, q])]
    for tid, ns, cid, messages in puts:
        cp = empty_checkpoint()
        cp.update(id=cid, ts=NOW, channel_values={"messages": messages},
                  channel_versions={"messages": "1.0"})
        saver.put(cfg(tid, ns), cp, {"source": "loop", "step": 0, "parents": {}},
                  {"messages": "1.0"})
    got = growth(saver, "g-late")
    assert [(r["checkpoint_ns"], r["checkpoint_id"]) for r in got] == [
        ("", checkpoint_id(5)), (SUB, checkpoint_id(5)), ("", checkpoint_id(6))]
    first = [r["chunk_bytes"] for r in got]
    assert first[0] > 10_000 and first[1] > 10_000, first
    stored = query(saver, "SELECT SUM(LENGTH(data)) FROM d1saver_chunks WHERE thread_id = ?1",
                   "g-late")[0][0]
    assert sum(first) == stored
    assert growth(saver, "g-late", limit=2) == got[:2]


def test_growth_counts_a_chunk_its_writes_reach_where_its_own_thread_first_reached_it(
        local: Backend) -> None:
    """`d1saver growth`: a thread's writes reach content, one write of a task in its own row
    and two of another task packed in one; another thread's writes, the same way, reached
    both contents at an earlier checkpoint id. Each chunk counts at the checkpoint of this
    thread whose writes first reached it (no other thread's checkpoint takes it), and the
    rows add up to every chunk the thread stores."""
    from d1saver.inspection import growth

    saver = local.saver()
    r, s = (os.urandom(30_000).hex() for _ in range(2))
    many = [os.urandom(300).hex() for _ in range(40)]  # enough pieces to be folded into nodes
    writes = [("w-late", 5, "one", [("messages", [r])]),
              ("w-late", 6, "packed", [("messages", [s]), ("other", [r])]),
              ("w-late", 7, "one", [("messages", many)]),
              ("w-early", 1, "one", [("messages", [r])]),
              ("w-early", 1, "packed", [("messages", [s]), ("other", [r])])]
    for tid, i, task, values in writes:
        cp = empty_checkpoint()
        cp.update(id=checkpoint_id(i), ts=NOW)
        config = saver.put(cfg(tid), cp, {"source": "loop", "step": i, "parents": {}}, {})
        saver.put_writes(config, values, task_id=task)
    packed = query(saver, "SELECT COUNT(*) FROM writes WHERE substr(value, 1, 2) = 'p:'")
    assert packed == [[2]]  # the two-write tasks: one packed row each
    assert query(saver, "SELECT COUNT(*) > 0 FROM d1saver_chunks WHERE thread_id = ?1"
                        " AND level > 0", "w-late") == [[1]]
    got = growth(saver, "w-late")
    assert [r["checkpoint_id"] for r in got] == [checkpoint_id(i) for i in (5, 6, 7)]
    stored = query(saver, "SELECT SUM(LENGTH(data)) FROM d1saver_chunks WHERE thread_id = ?1",
                   "w-late")[0][0]
    chunks = [r["chunk_bytes"] for r in got]
    assert chunks[0] > 20_000 and chunks[1] > 20_000, chunks
    assert chunks[2] > 10_000, chunks
    assert sum(chunks) == stored

def test_a_subgraph_is_reached_through_its_own_threads_parent(local: Backend) -> None:
    """A subgraph namespace is judged running by its own thread's parent namespace: another
    thread in the batch whose root head has the id of one of this thread's kept checkpoints
    keeps nothing here. keep=2: the twin compacted alone and the one beside it end alike."""
    saver = local.saver()
    alone, beside, short = "s-alone", "s-beside", "s-short"
    for tid in (alone, beside):
        chain(saver, tid, "", 4)
        chain(saver, tid, "child:task-Q", 4)  # newest 3: not newer than the root's head 3
    chain(saver, short, "", 3)  # its head has the id of the twins' kept 2
    compact(saver, [alone], 2)
    compact(saver, [beside, short], 2)
    for tid in (alone, beside):
        assert by_namespace(saver, tid) == {"": [checkpoint_id(2), checkpoint_id(3)]}
    assert rows(saver, alone) == rows(saver, beside)


def test_a_history_served_by_a_listing_is_the_one_read_alone(local: Backend) -> None:
    """A kept checkpoint whose frozen record ends at its seed (4: it walked 3 to the seed 2)
    and whose parent is now the tagged 0, a seed too: the history of the head 5 stops at 4's
    record, read alone or served from a listing's prefetch, as before compaction."""
    saver = local.saver()
    tid = "h-tagged"
    chain(saver, tid, "", 6, delta=True, seeds=(0, 2))
    saver.tag(cfg(tid, "", checkpoint_id(0)), "old")
    head = cfg(tid, "", checkpoint_id(5))
    before = saver.get_delta_channel_history(config=head, channels=["messages"])
    compact(saver, [tid], 2)
    assert by_namespace(saver, tid) == {"": [checkpoint_id(i) for i in (0, 4, 5)]}
    alone = local.saver().get_delta_channel_history(config=head, channels=["messages"])
    listing = local.saver()
    assert len(list(listing.list(cfg(tid)))) == 3
    served = listing.get_delta_channel_history(config=head, channels=["messages"])
    assert alone == served == before


def test_a_second_run_freezes_on_from_the_first_runs_records(local: Backend) -> None:
    """Twin DeltaChannel threads, one compacted twice, one never: the histories of what the
    twice-compacted one keeps read as its twin's. The first run leaves records that continue
    at a tagged ancestor ('c' rows, at different depths) and records that end at a seed
    whose holder keeps a parent; the second, after two more checkpoints and tags removed,
    walks on through them (from each record's own depth), starts no walk from a holder
    whose record ends, and stops at a former holder whose record ends."""
    saver = local.saver()
    cases = {  # name: (seeds, tags, tags removed before the second run, keep of the second)
        "p": ((0,), (2, 6, 8), (2, 6, 8), 1),
        "q": ((0, 4), (2, 6), (2,), 2),
        "r": ((0, 4), (2, 6), (2, 6), 2),
    }
    for name, (seeds, tags, _, _) in cases.items():
        for tid in (f"{name}-twice", f"{name}-never"):
            chain(saver, tid, "", 10, delta=True, seeds=seeds)
        for i in tags:
            saver.tag(cfg(f"{name}-twice", "", checkpoint_id(i)), f"t{i}")
    for name in cases:
        compact(saver, [f"{name}-twice"], 2)
    for name, (seeds, _, untag, _) in cases.items():
        for tid in (f"{name}-twice", f"{name}-never"):
            chain(saver, tid, "", 12, delta=True, seeds=seeds, first=10)
        for i in untag:
            assert saver.untag(cfg(f"{name}-twice", "", checkpoint_id(i)), f"t{i}")
    for name, (_, _, _, keep) in cases.items():
        compact(saver, [f"{name}-twice"], keep)
    kept = {name: by_namespace(saver, f"{name}-twice")[""] for name in cases}
    assert kept == {"p": [checkpoint_id(11)],
                    "q": [checkpoint_id(i) for i in (6, 10, 11)],
                    "r": [checkpoint_id(10), checkpoint_id(11)]}
    for name, ids in kept.items():
        for cid in ids:
            got, want = (saver.get_delta_channel_history(
                config=cfg(f"{name}-{k}", "", cid), channels=["messages"])
                for k in ("twice", "never"))
            assert got == want, (name, cid)
    assert inexact(saver) == []


def test_compacting_in_several_runs_ends_as_compacting_once(local: Backend) -> None:
    """Compaction is path-independent: a DeltaChannel thread compacted twice (the first run
    keeping tagged ancestors, its records continuing at them or ending at a seed; the second,
    after two more checkpoints and the tags removed, walking on through those records) holds
    the same rows, table by table and frozen depths included, as its twin compacted once at
    the end. The second run also compacts a third twin that still keeps, by its tags, the
    very ids of the first twin's former holders: another thread's kept checkpoints change
    nothing here."""
    saver = local.saver()
    cases = {  # name: (seeds, tags, tags removed before the second run, keep of each run)
        "p": ((0,), (2, 6, 8), (2, 6, 8), (2, 1)),
        "q": ((0, 4), (2, 6), (2,), (2, 2)),
        "r": ((0, 4), (2, 6), (2, 6), (2, 2)),
        "s": ((0, 3), (5,), (), (3, 1)),
        "t": ((0, 6), (2, 6, 8), (6,), (1, 1)),  # 8 walks on from 6, a seed, and stops there
    }
    for name, (seeds, tags, untag, (first, second)) in cases.items():
        twice, once, beside = (f"{name}-{k}-{uuid.uuid4().hex[:6]}"
                               for k in ("twice", "once", "beside"))
        for tid in (twice, once, beside):
            chain(saver, tid, "", 10, delta=True, seeds=seeds)
        for i in tags:
            for tid in (twice, beside):
                saver.tag(cfg(tid, "", checkpoint_id(i)), f"t{i}")
            if i not in untag:
                saver.tag(cfg(once, "", checkpoint_id(i)), f"t{i}")
        compact(saver, [twice], first)
        for tid in (twice, once):
            chain(saver, tid, "", 12, delta=True, seeds=seeds, first=10)
        for i in untag:
            assert saver.untag(cfg(twice, "", checkpoint_id(i)), f"t{i}")
        want = histories(saver, once)
        compact(saver, [twice, beside], second)
        compact(saver, [once], second)
        assert rows(saver, twice) == rows(saver, once), name
        assert histories(saver, twice) == {k: v for k, v in want.items()
                                           if k in histories(saver, once)}, name
    assert inexact(saver) == []


def test_a_run_deleted_takes_the_tags_of_its_checkpoints_only(local: Backend) -> None:
    """delete_for_runs deletes a tagged checkpoint of the run: its tag goes with it, though
    checkpoints of other runs stay in its namespace (their tags stay), in a subgraph's
    namespace under the same id, and in a twin thread, in the same batch, that keeps the
    same ids."""
    saver = local.saver()
    tid, twin = (f"{k}-{uuid.uuid4().hex[:8]}" for k in ("runs", "twin"))
    for t in (tid, twin):
        runs = ("keep", "gone", "keep", "gone") if t == tid else ("keep", "keep", "keep", "gone")
        for i, run in enumerate(runs):
            cp = empty_checkpoint()
            cp.update(id=checkpoint_id(i), ts=NOW)
            saver.put(cfg(t, "", checkpoint_id(i - 1) if i else None), cp,
                      {"source": "loop", "step": i, "parents": {},
                       "run_id": run}, {})
        sub = empty_checkpoint()  # a subgraph's checkpoint under the same id, of another run
        sub.update(id=checkpoint_id(1), ts=NOW)
        saver.put(cfg(t, SUB), sub, {"source": "loop", "step": 1, "parents": {},
                                     "run_id": "keep"}, {})
        saver.tag(cfg(t, "", checkpoint_id(0)), "first")
        saver.tag(cfg(t, "", checkpoint_id(1)), "second")
    saver.delete_for_runs(["gone"])
    assert by_namespace(saver, tid) == {"": [checkpoint_id(0), checkpoint_id(2)],
                                        SUB: [checkpoint_id(1)]}
    assert saver.tags(cfg(tid)) == {"first": checkpoint_id(0)}
    assert saver.tags(cfg(twin)) == {"first": checkpoint_id(0), "second": checkpoint_id(1)}


def test_writes_under_a_parent_never_stored_are_no_history(local: Backend) -> None:
    """A kept checkpoint's parent id was never stored in its thread, though writes were
    stored under it (a subgraph of the thread and a twin thread store a checkpoint of that
    id): its DeltaChannel history stops there, before compaction and after, as LangGraph's
    walk does."""
    saver = local.saver()
    tid, twin = (f"{k}-{uuid.uuid4().hex[:8]}" for k in ("gap", "twin"))
    chain(saver, twin, "", 4, delta=True)
    chain(saver, tid, "", 2, delta=True)
    chain(saver, tid, SUB, 3)
    saver.put_writes(cfg(tid, "", checkpoint_id(2)), [("messages", [text("lost")])],
                     task_id="task-lost")
    chain(saver, tid, "", 4, delta=True, first=3)  # 3, child of 2, which is not stored
    head = cfg(tid, "", checkpoint_id(3))
    before = saver.get_delta_channel_history(config=head, channels=["messages"])
    compact(saver, [tid], 1)
    assert by_namespace(saver, tid) == {"": [checkpoint_id(3)]}
    assert local.saver().get_delta_channel_history(config=head, channels=["messages"]) == before


def test_a_record_holds_the_parts_of_its_own_values_only(local: Backend) -> None:
    """With keys, values over D1's row limit live in parts. A frozen history holds the parts
    of the values it copied (a write of its channel, the seed's), and no part of a value it
    did not copy (another channel's write, a task's, at the same checkpoints): those go with
    their rows. Every part left belongs to a row or a record of its thread."""
    saver = local.saver(encryption_keys=[bytes([5]) * 32])
    tid = f"parts-{uuid.uuid4().hex[:8]}"
    chain(saver, tid, "", 4, delta=True)
    at = cfg(tid, "", checkpoint_id(1))
    saver.put_writes(at, [("messages", [os.urandom(BIG)])], task_id="task-big")
    saver.put_writes(at, [("other", os.urandom(BIG))], task_id="task-other")
    head = cfg(tid, "", checkpoint_id(3))
    before = saver.get_delta_channel_history(config=head, channels=["messages"])
    compact(saver, [tid], 1)
    assert saver.get_delta_channel_history(config=head, channels=["messages"]) == before
    parts = {tuple(r) for r in query(saver, "SELECT DISTINCT checkpoint_ns, checkpoint_id, owner "
                                     "FROM chunks WHERE thread_id = ?1", tid)}
    owners: set[tuple[Any, ...]] = set()
    for ns, cid, kind, src, task, idx in query(
            saver, "SELECT checkpoint_ns, checkpoint_id, kind, src_checkpoint_id, task_id, idx "
            "FROM delta_frozen WHERE thread_id = ?1", tid):
        names = [f"{task}/{idx}"] if kind == "w" else ["", ":metadata"] if kind == "s" else []
        owners |= {(ns, cid, f"f/{src}/{name}") for name in names}
    for ns, cid, task, idx in query(saver, "SELECT checkpoint_ns, checkpoint_id, task_id, idx "
                                    "FROM writes WHERE thread_id = ?1", tid):
        owners.add((ns, cid, f"{task}/{idx}"))
    for ns, cid in query(saver, "SELECT checkpoint_ns, checkpoint_id FROM checkpoints "
                         "WHERE thread_id = ?1", tid):
        owners |= {(ns, cid, ""), (ns, cid, ":metadata")}
    frozen_parts = {p for p in parts if p[2].startswith("f/")}
    assert frozen_parts == {("", checkpoint_id(3), f"f/{checkpoint_id(1)}/task-big/0")}
    assert parts <= owners
