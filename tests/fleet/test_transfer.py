"""Moving a thread's rows between databases (d1saver/ops/transfer.py): bounded pages, bounded
atomic batches, staging for what needs several, and digests that tell rows apart."""

from __future__ import annotations

import os
from collections import Counter

import pytest

from d1saver import D1Saver, Statement, admin
from d1saver.fleet.routing import COPYING_PREFIX, LEAVING_PREFIX
from d1saver.sql.catalogue import (COLLECT_THREAD, DELETE_THREADS, RENAME_THREAD, STAGE,
                                   STAGING_HELD, TRANSFER_INSERT, TRANSFER_TABLES, UNSTAGE)
from d1saver.ops.transfer import (STAGE_SECONDS, ThreadRows, copy_batches,
                               delete_if_unchanged,
                               deleted, read_thread)
from tests.compaction import BIG, cfg, checkpoint_id
from tests.compaction.test_retention_twins import build_x, compact
from tests.conftest import Backend
from tests.fleet.test_saver import chain, view
from tests.saver import graphs


def read(saver: D1Saver, thread_id: str, **limits: int) -> tuple[ThreadRows, int]:
    before = saver.client.requests
    rows = saver.driver.run(read_thread(saver.ops.execute, thread_id, **limits))
    return rows, saver.client.requests - before


def test_pages_are_bounded_and_add_up_to_the_thread(backend: Backend) -> None:
    saver = backend.saver()
    t = f"tr-{os.urandom(5).hex()}"
    chain(saver, t, 7)
    chain(saver, t, 3, ns="child:1")
    saver.tag(cfg(t), "approval")
    whole, requests = read(saver, t)
    assert requests == 1
    assert whole.counts() == {"d1saver_chunks": 0, "checkpoints": 10, "writes": 10,
                              "chunks": 0, "tags": 1, "delta_unwritten": 0, "delta_frozen": 0}
    paged, requests = read(saver, t, page_rows=3)
    assert paged.tables == whole.tables and requests == 4  # 10 rows: 3+3+3+1 (short: done)
    by_bytes, requests = read(saver, t, page_bytes=1)  # one row per page: the first always fits
    assert by_bytes.tables == whole.tables and requests == 10
    assert paged.digest() == whole.digest() and whole.holds(paged) and paged.holds(whole)


def test_pages_of_frozen_records_add_up_to_the_thread(local: Backend) -> None:
    """A compacted DeltaChannel thread's frozen records (in two namespaces, two holders in
    one, over several kinds, depths, tasks and values of a task) read in pages of any size are the rows read
    at once, each once, in key order."""
    saver = local.saver()
    t = f"fr-{os.urandom(5).hex()}"
    build_x(saver, t)
    saver.tag(cfg(t, "", checkpoint_id(3)), "mid")  # a second holder in the root namespace
    saver.put_writes(cfg(t, "", checkpoint_id(4)), [("messages", ["i0"]), ("messages", ["i1"])],
                     task_id="task-two")  # two values of one task and channel
    compact(saver, [t], 1)
    whole, _ = read(saver, t)
    frozen = whole.tables["delta_frozen"]
    assert len(frozen) > 10 and len({r[0] for r in frozen}) == 2
    assert len({r[:2] for r in frozen}) == 3 and len({r[6] for r in frozen}) == 2
    assert frozen == sorted(frozen, key=lambda r: r[:7])
    for rows in (1, 2, 3, 5):
        paged, _ = read(saver, t, page_rows=rows)
        assert paged.tables == whole.tables, rows
    by_bytes, _ = read(saver, t, page_bytes=1)
    assert by_bytes.tables == whole.tables


def test_digests_and_holds_tell_rows_apart() -> None:
    a = ThreadRows("t")
    a.tables["checkpoints"] = [("", "1", None, "msgpack", "b:AA", "{}", "[]", None, None)]
    b = ThreadRows("t")
    b.tables["checkpoints"] = [("", "1", None, "msgpack", "b:AB", "{}", "[]", None, None)]
    assert a.digest() != b.digest() and not a.holds(b)
    more = ThreadRows("t")
    more.tables["checkpoints"] = [*a.tables["checkpoints"],
                                  ("", "2", "1", "msgpack", "b:", "{}", "[]", None, None)]
    assert more.holds(a) and not a.holds(more)


def test_one_batch_when_it_fits_else_staged_then_renamed(local: Backend) -> None:
    saver = local.saver()
    t = "big-source"
    chain(saver, t, 3, value=lambda _: os.urandom(BIG))  # three values over 2 MB, each in chunks
    rows, _ = read(saver, t)
    assert copy_batches(ThreadRows("x"), "y", staging_prefix=COPYING_PREFIX) == []
    small, _ = read(saver, t, page_rows=1)
    batches = copy_batches(rows, "target", staging_prefix=COPYING_PREFIX)
    assert len(batches) >= 3
    staging = COPYING_PREFIX + "target"
    n = len(DELETE_THREADS)
    assert [s.name for s in batches[0][:n]] == [q.name for q in DELETE_THREADS]  # rerun: clean
    # registered (target, source, expiry), renewed by each staging batch; the last renames
    # (unless a cleanup removed the staged rows), drops the registration, and unreached
    # chunks go
    assert batches[0][n].name == STAGE.name
    assert batches[0][n].named() == {"staging_id": staging, "thread_id": "target",
                                     "source_id": t, "seconds": STAGE_SECONDS}
    assert all([s.name for s in b[:2]] == [STAGING_HELD.name, STAGE.name]
               for b in batches[1:-1])
    assert ([s.name for s in batches[-1]]
            == [q.name for q in [STAGING_HELD, *RENAME_THREAD, UNSTAGE, *COLLECT_THREAD]])
    assert all(s.params[0] == staging for b in batches[:-1] for s in b[n if b is batches[0] else 0:])
    for b in batches:
        assert sum(len(str(p)) for s in b for p in s.params) < 4_500_000
        assert all(len(s.params) <= 100 for s in b)
    for b in batches[:-1]:
        saver.execute(b)
    assert saver.get_tuple(cfg("target")) is None  # staged: invisible to the thread's readers
    saver.execute(batches[-1])
    assert [view(x) for x in saver.list(cfg("target"))] == [view(x) for x in saver.list(cfg(t))]
    assert saver.execute([admin.staged_threads(COPYING_PREFIX)])[0].rows == []
    assert small.tables == rows.tables


@pytest.mark.parametrize("prefix", [COPYING_PREFIX, admin.MOVING_PREFIX, LEAVING_PREFIX])
def test_staging_ids_are_never_application_threads(prefix: str) -> None:
    assert admin.is_staging(prefix + "t") and not admin.is_staging("t")


def test_staged_copies_carry_every_table_and_replace_as_inserts_do(local: Backend) -> None:
    """Rows staged one statement per batch, then renamed: the copy holds the source's rows,
    delta_unwritten included; renamed onto a thread that had the same checkpoints with more
    pieces, no stale piece or delta_unwritten row is left (as the insert triggers ensure)."""
    saver = local.saver()
    graph = graphs.chat_graph(saver, Counter())
    for turn in range(3):
        graph.invoke({"messages": [f"user{turn}"]}, {"configurable": {"thread_id": "chat"}})
    rows, _ = read(saver, "chat")
    assert rows.counts()["delta_unwritten"] > 0
    for batch in copy_batches(rows, "copy", staging_prefix=COPYING_PREFIX, max_bytes=1):
        saver.execute(batch)
    assert read(saver, "copy")[0].tables == rows.tables

    chain(saver, "big", 1, value=os.urandom(BIG))          # checkpoint 0 in 2 pieces
    chain(saver, "small", 1, value=os.urandom(BIG // 2))   # checkpoint 0 in 1 piece
    small, _ = read(saver, "small")
    for batch in copy_batches(small, "big", staging_prefix=COPYING_PREFIX, max_bytes=1):
        saver.execute(batch)
    assert read(saver, "big")[0].tables == small.tables
    assert [view(x) for x in saver.list(cfg("big"))] == [view(x) for x in saver.list(cfg("small"))]


def test_copies_staged_at_once_land_apart(local: Backend) -> None:
    """Two copies staged in one database at the same time, their batches interleaved: the
    one that publishes first drops its own registration and staged rows only; the other's
    staged rows stay registered and land whole when it publishes."""
    saver = local.saver()
    for t in ("src-a", "src-b"):
        chain(saver, t, 3)
    (a, b) = (copy_batches(read(saver, t)[0], f"dst-{t[-1]}", staging_prefix=COPYING_PREFIX,
                           max_bytes=1) for t in ("src-a", "src-b"))
    assert len(a) > 2 and len(b) > 2
    for batch in [*a[:-1], *b[:-1], a[-1]]:
        saver.execute(batch)
    staged = saver.execute([admin.staged_threads(COPYING_PREFIX)])[0].rows
    assert [r[0] for r in staged] == [COPYING_PREFIX + "dst-b"]
    saver.execute(b[-1])
    for t in ("a", "b"):
        assert ([view(x) for x in saver.list(cfg(f"dst-{t}"))]
                == [view(x) for x in saver.list(cfg(f"src-{t}"))])
    assert saver.execute([admin.staged_threads(COPYING_PREFIX)])[0].rows == []


def synthetic_rows(saver: D1Saver, thread_id: str, n: int) -> None:
    """n rows in every transfer table, every column a text of digits and letters (integer
    columns take the digits), keys distinct: any table listed in TRANSFER_TABLES is covered."""
    for table, (keys, rest) in TRANSFER_TABLES.items():
        # Content chunks at level 0 (a node's children must be stored: migration 7).
        saver.execute([Statement.bind(TRANSFER_INSERT[table], {
            "thread_id": thread_id, **{k: "0" if k == "level" else str(i) for k in keys},
            **{c: f"{table}-{c}-{i}-" + "v" * 40 for c in rest}})
            for i in range(n)])


@pytest.mark.parametrize("table", list(TRANSFER_TABLES))
def test_a_thread_leaves_only_if_every_row_and_column_is_unchanged(backend: Backend,
                                                                    table: str) -> None:
    """Compared over several requests (values sent back, staged under a scratch id, compared in
    the last, atomic one): one value of one row changed in the meantime, its length and every
    row count kept, and the thread stays, whole and changed; unchanged, it goes. Either way no
    scratch row is left."""
    saver = backend.saver()
    t = f"leave-{os.urandom(5).hex()}"
    synthetic_rows(saver, t, 3)
    rows, _ = read(saver, t)
    assert rows.counts() == {name: 3 for name in TRANSFER_TABLES}
    batches = delete_if_unchanged(rows, staging_prefix=LEAVING_PREFIX, max_bytes=1_000)
    assert len(batches) >= 4
    for b in batches:
        assert all(len(s.params) <= 100 and len(s.sql) < 100_000 for s in b)
    for b in batches[:-1]:
        saver.execute(b)
    column = TRANSFER_TABLES[table][1][-1]
    saver.execute([Statement(  # a same-key rewrite: same counts, same lengths
        f"UPDATE {table} SET {column} = substr({column}, 1, length({column}) - 1) || 'w' "
        f"WHERE thread_id = ?1 AND {TRANSFER_TABLES[table][0][-1]} = '1'", (t,))])
    changed, _ = read(saver, t)
    assert changed.counts() == rows.counts() and changed.bytes == rows.bytes
    assert changed.digest() != rows.digest()
    assert not deleted(saver.execute(batches[-1]))
    assert read(saver, t)[0].tables == changed.tables
    assert saver.execute([admin.staged_threads(LEAVING_PREFIX)])[0].rows == []

    for b in delete_if_unchanged(changed, staging_prefix=LEAVING_PREFIX, max_bytes=1_000):
        results = saver.execute(b)
    assert deleted(results)
    assert read(saver, t)[0].total == 0
    assert saver.execute([admin.staged_threads(LEAVING_PREFIX)])[0].rows == []


@pytest.mark.parametrize("max_statements", [40, 60])
def test_copy_batches_hold_at_most_max_statements(max_statements: int) -> None:
    """Each write request of a copy is at most `max_statements` statements (D1 bounds a
    batch), staging included, and every row is written once."""
    rows = ThreadRows("src")
    rows.tables["checkpoints"] = [("", f"{i:04}", None, "msgpack", "b:AA", "{}", "[]", None, None)
                                  for i in range(60)]
    batches = copy_batches(rows, "dst", staging_prefix=COPYING_PREFIX,
                           max_statements=max_statements)
    assert len(batches) > 2 and max(len(b) for b in batches) <= max_statements
    inserted = [s for b in batches for s in b if s.name == TRANSFER_INSERT["checkpoints"].name]
    assert len(inserted) == 60


def test_pages_of_unwritten_records_add_up_to_the_thread(local: Backend) -> None:
    """A thread's unwritten DeltaChannel records (several checkpoints in two namespaces, the
    same ids in both) read in pages of any size are the rows read at once, each once, in key
    order."""
    saver = local.saver()
    saver.setup()
    t = f"du-{os.urandom(5).hex()}"
    keys = [(ns, f"c{n}") for ns in ("", "child:1") for n in range(3)]
    saver.client.execute([Statement(
        "INSERT INTO delta_unwritten (thread_id, checkpoint_ns, checkpoint_id, channels)"
        " VALUES (?1, ?2, ?3, ?4)", [t, ns, cid, f'["{ns}{cid}"]']) for ns, cid in keys])
    whole, _ = read(saver, t)
    assert [r[:2] for r in whole.tables["delta_unwritten"]] == keys
    for rows in (1, 2, 4):
        paged, requests = read(saver, t, page_rows=rows)
        assert paged.tables == whole.tables, rows
        assert requests == len(keys) // rows + 1, rows  # the last page short: done
