"""Data where only one clause of a statement tells rows apart, read back exactly.

Reads: a namespace holding the root's checkpoints again under the same ids, beside the root's
DeltaChannel histories frozen by a prune (records that end a history, and 'c' records that go
on at a kept ancestor), compared with InMemorySaver through DELTA_HISTORY and every page
variant's prefetch (get_tuple, and pages that end inside a walk). Maintenance: rekey and
seal-plaintext in pages of 3 rows, keyed copies in pages of 2, and a thread read out in
keyset pages of rows and bytes, over threads and namespaces sharing ids, frozen rows and
pieces; the key census beside staged rows; threads in a range and leftovers at the range's
bounds, per table; pages of threads. `./dev mutate` checks that dropping or changing a clause of these
statements fails here (tests/mutation/equivalent.py names the changes nothing can tell apart).
"""

from __future__ import annotations

import base64
import copy
import random
from functools import cache
from collections.abc import Generator, Sequence
from typing import Any

import pytest
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.memory import InMemorySaver

from d1saver import D1Saver, Result, Statement, admin, inspection
from d1saver.compaction import lease
from d1saver.compaction.rekey import rekey
from d1saver.ops import transfer
from d1saver.sql import catalogue as _sql
from d1saver.storage.crypto import key_id
from tests.conftest import Backend
from tests.saver import mirror
from tests.saver.mirror import Recording

THREAD = "g"
TWIN = "zz"  # a namespace of THREAD holding the root's checkpoints again, under their ids


@cache
def recorded() -> tuple[Recording, int]:
    """THREAD's runs of the corpus graph (4 turns, the second interrupted and resumed), and
    how many of its calls the first 3 turns made."""
    memory = Recording()
    graph = mirror.corpus_graph(memory)
    first = 0
    for turn in range(4):
        if turn == 3:
            first = len(memory.calls)
        config: RunnableConfig = {"configurable": {"thread_id": THREAD},
                                  "metadata": {"user": "u0", "turn": turn}}
        graph.invoke({"messages": [f"says {turn}"], "turn": turn}, config, durability="sync")
        if turn == 1:
            graph.invoke(mirror.Command(resume="yes"), config, durability="sync")
    return memory, first


def twin_calls(memory: Recording, upto: int | None = None) -> list[tuple[str, tuple[Any, ...]]]:
    """The root namespace's calls again (the first `upto` calls' only, if given), in namespace
    TWIN."""
    out = []
    for method, args in memory.calls[:upto]:
        if not args[0]["configurable"].get("checkpoint_ns"):
            again = copy.deepcopy(args)
            again[0]["configurable"]["checkpoint_ns"] = TWIN
            out.append((method, again))
    return out


def tagged(memory: Recording, first: int) -> list[RunnableConfig]:
    """Root checkpoints of the third turn which a prune keeps (tagged): T1 (-4) and T2 (-6),
    two steps apart (T1's frozen history of `notes` continues at T2: a 'c' row), and T1's
    child (-3), whose walks go through T1's record on to T2."""
    roots = [args for method, args in memory.calls[:first]
             if method == "put" and not args[0]["configurable"].get("checkpoint_ns")]
    return [{"configurable": {"thread_id": THREAD, "checkpoint_ns": "",
                              "checkpoint_id": roots[n][1]["id"]}} for n in (-3, -4, -6)]


def pruned_beside_twin(backend: Backend) -> tuple[D1Saver, Recording]:
    """D1Saver: THREAD's first 3 turns, pruned (keep_latest: the kept checkpoint's histories
    frozen), then the root's checkpoints of all 4 turns put again in TWIN, whole (the 4th
    turn's walk through an id the root holds frozen). InMemorySaver: everything, unpruned."""
    memory, first = recorded()
    saver = backend.saver()
    for method, args in memory.calls[:first]:
        getattr(saver, method)(*copy.deepcopy(args))
    for n, config in enumerate(tagged(memory, first)):
        saver.tag(config, f"kept{n}")
    saver.prune([THREAD], strategy="keep_latest")
    (frozen,) = saver.client.execute([Statement(
        "SELECT kind, COUNT(*) FROM delta_frozen WHERE thread_id = ? AND checkpoint_ns = ''"
        " GROUP BY kind", [THREAD])])
    assert {kind for kind, _ in frozen.rows} >= {"c", "w"}, frozen.rows
    reference = Recording()
    for method, args in [*memory.calls, *twin_calls(memory)]:
        getattr(reference, method)(*copy.deepcopy(args))
    for method, args in twin_calls(memory):
        getattr(saver, method)(*copy.deepcopy(args))
    return saver, reference


def test_a_frozen_history_ends_only_its_own_namespace(local: Backend) -> None:
    """The root namespace's latest checkpoint has its histories frozen; TWIN holds the same
    checkpoint ids with their histories whole: every read of TWIN (DELTA_HISTORY, and the
    prefetch of each page variant) walks TWIN's ancestors, and the root's reads its record."""
    saver, memory = pruned_beside_twin(local)
    twin: RunnableConfig = {"configurable": {"thread_id": THREAD, "checkpoint_ns": TWIN}}
    listed = list(memory.list(twin))
    asked = 0
    fresh = local.saver()  # nothing cached: DELTA_HISTORY
    for t in listed:
        if channels := mirror.sought(t):
            asked += 1
            assert fresh.get_delta_channel_history(config=t.config, channels=channels) == (
                memory.get_delta_channel_history(config=t.config, channels=channels)), t.config
    assert asked > 3
    root = list(saver.list({"configurable": {"thread_id": THREAD, "checkpoint_ns": ""}}))
    assert len(root) >= 2
    for t in root:
        if channels := mirror.sought(t):
            assert fresh.get_delta_channel_history(config=t.config, channels=channels) == (
                memory.get_delta_channel_history(config=t.config, channels=channels))
    scopes: list[tuple[RunnableConfig | None, dict[str, Any] | None]] = [
        (twin, None), (twin, {"user": "u0"}),
        ({"configurable": {"thread_id": THREAD}}, None),
        ({"configurable": {"thread_id": THREAD}}, {"user": "u0"}),
        (None, None), (None, {"user": "u0"})]
    for scope, f in scopes:
        reader = local.saver()
        got = list(reader.list(scope, filter=f))
        mine = [t.config for t in got if t.config["configurable"]["checkpoint_ns"] == TWIN]
        assert mine == [t.config for t in mirror.in_order(list(memory.list(twin, filter=f)))]
        kept = [t.config for t in got if t.config["configurable"]["checkpoint_ns"] != TWIN]
        assert scope is not twin or not kept
        assert scope is twin or f is not None or len(kept) >= len(root), (scope, f)
        before = local.requests
        for t in got:
            want = memory.get_tuple(t.config)
            assert want is not None
            if (channels := mirror.sought(t)):
                assert reader.get_delta_channel_history(config=t.config, channels=channels) == (
                    memory.get_delta_channel_history(config=t.config, channels=channels)), (
                    scope, f, t.config)
        assert local.requests == before, (scope, f)
    for t in [*listed, *root]:  # get_tuple of each checkpoint, and its prefetch
        reader = local.saver()
        got_t = reader.get_tuple(t.config)
        assert got_t is not None
        served_alone(local, reader, memory, got_t)
    for t in root:  # pages of the checkpoint and its twin, in each scope: walks leave them
        conf = t.config["configurable"]
        wide: list[RunnableConfig | None] = [{"configurable": {"thread_id": THREAD}}, None]
        for scope in wide:
            for f in (None, {"user": "u0"}):
                reader = local.saver()
                two = list(reader.list(scope, filter=f, limit=2, before={
                    "configurable": {**conf, "checkpoint_id": next_id(conf["checkpoint_id"])}}))
                assert [x.config for x in two] == [
                    {"configurable": {**conf, "checkpoint_ns": TWIN}}, t.config], (scope, f)
                for x in two:
                    served_alone(local, reader, memory, x)
        for f in (None, {"user": "u0"}):  # one namespace: the page is the checkpoint alone
            reader = local.saver()
            (one,) = reader.list({"configurable": {"thread_id": THREAD, "checkpoint_ns": ""}},
                                 filter=f, limit=1, before={"configurable": {
                                     **conf, "checkpoint_id": next_id(conf["checkpoint_id"])}})
            assert one.config == t.config, f
            served_alone(local, reader, memory, one)


def next_id(checkpoint_id: str) -> str:
    """An id just above `checkpoint_id` (for `before`)."""
    return checkpoint_id + "0"


def served_alone(backend: Backend, reader: D1Saver, memory: Recording, t: Any) -> None:
    """The DeltaChannel histories of `t`, read by `reader` just after it, are InMemorySaver's
    and come from its prefetch (no request)."""
    if channels := mirror.sought(t):
        before = backend.requests
        assert reader.get_delta_channel_history(config=t.config, channels=channels) == (
            memory.get_delta_channel_history(config=t.config, channels=channels)), t.config
        assert backend.requests == before, t.config


# --- rekey and copies: raw pages in key order, across namespaces and threads ---------------

K1, K2 = bytes([31]) * 32, bytes([32]) * 32
TIE = "g-tie"
# Over D1's row limit even compressed: stored in pieces.
BIG = base64.b64encode(random.Random(26).randbytes(2_400_000)).decode()  # THREAD's first turns again, under the same checkpoint ids


def grid(saver: D1Saver) -> None:
    """THREAD as `pruned_beside_twin` leaves it (frozen rows, TWIN), TIE (THREAD's first
    turns, pruned alike: the same checkpoint ids), and in TIE a checkpoint whose metadata is
    stored in pieces, and its child likewise."""
    memory, first = recorded()
    for method, args in memory.calls[:first]:
        getattr(saver, method)(*copy.deepcopy(args))
        again = copy.deepcopy(args)
        again[0]["configurable"]["thread_id"] = TIE
        getattr(saver, method)(*again)
    for n, config in enumerate(tagged(memory, first)):
        saver.tag(config, f"kept{n}")
        saver.tag({"configurable": {**config["configurable"], "thread_id": TIE}}, f"kept{n}")
    saver.prune([THREAD, TIE], strategy="keep_latest")
    for method, args in twin_calls(memory):
        getattr(saver, method)(*copy.deepcopy(args))
    big = mirror.empty_checkpoint()
    big["id"] = mirror.BIG_ID
    metadata: Any = {"source": "update", "step": 0, "parents": {}, "big": BIG}
    config = saver.put({"configurable": {"thread_id": TIE, "checkpoint_ns": "big"}}, big,
                       metadata, {})
    big["id"] = mirror.BIG_ID[:-1] + "2"  # a second one, its child, in the same page
    saver.put(config, big, {**metadata, "step": 1, "big": BIG[::-1]}, {})


def everything(saver: D1Saver) -> list[tuple[Any, ...]]:
    """Every checkpoint listed, its values, metadata and writes, and its DeltaChannel
    histories."""
    out: list[tuple[Any, ...]] = []
    for t in saver.list(None):
        channels = mirror.sought(t)
        out.append((t.config, t.checkpoint["channel_values"], t.metadata, t.pending_writes,
                    channels and saver.get_delta_channel_history(config=t.config,
                                                                 channels=channels)))
    return out


def rows_per_table(saver: D1Saver) -> dict[str, int]:
    (c, w, f) = saver.client.execute([Statement(f"SELECT COUNT(*) FROM {t}") for t in (
        "checkpoints", "writes", "delta_frozen WHERE kind <> 'c' AND value IS NOT NULL")])
    return {"checkpoints": c.rows[0][0], "writes": w.rows[0][0], "delta_frozen": f.rows[0][0]}


def test_rekey_in_small_pages_reseals_every_row(local: Backend) -> None:
    """rekey in pages of 3 rows (RAW_*_ALL with :heads): every value of every table, in
    every thread and namespace, under the new key; everything reads back the same."""
    grid(local.saver(encryption_keys=[K1]))
    rotated = local.saver(encryption_keys=[K2, K1])
    before = everything(rotated)
    rows = rows_per_table(rotated)
    assert rotated.key_census() == {t: {key_id(K1).hex(): n} for t, n in rows.items()}

    class Stop(Exception):
        pass

    def stop_in_frozen(table: str, counts: Any) -> None:
        if table == "delta_frozen" and counts.pages == 1:
            raise Stop

    with pytest.raises(Stop):  # stopped after one page of frozen rows: both keys in the census
        rekey(rotated, batch_rows=3, progress=stop_in_frozen)
    old, new = key_id(K1).hex(), key_id(K2).hex()
    assert rotated.key_census() == {"checkpoints": {new: rows["checkpoints"]},
                                    "writes": {new: rows["writes"]},
                                    "delta_frozen": {new: 3, old: rows["delta_frozen"] - 3}}
    lease.break_lease(rotated)  # the stopped run could not release it
    summary = rekey(rotated, batch_rows=3)
    assert rotated.key_census() == {t: {new: n} for t, n in rows.items()}
    left = rows["delta_frozen"] - 3
    assert summary.rewritten == left
    assert summary.tables == {"checkpoints": {"rewritten": 0, "plaintext_left": 0, "pages": 1},
                              "writes": {"rewritten": 0, "plaintext_left": 0, "pages": 1},
                              "delta_frozen": {"rewritten": left, "plaintext_left": 0,
                                               "pages": left // 3 + 1}}
    assert everything(local.saver(encryption_keys=[K2])) == before


def test_seal_plaintext_in_small_pages_seals_content_whole(local: Backend) -> None:
    """rekey --seal-plaintext in pages of 3 rows (RAW_*_ALL with :content: the chunks of
    values stored by content come with their rows): every value sealed; everything reads
    back the same under the key alone."""
    plain = local.saver()
    grid(plain)
    before = everything(plain)
    rows = rows_per_table(plain)
    keyed = local.saver(encryption_keys=[K2])
    assert keyed.key_census() == {t: {"plaintext": n} for t, n in rows.items()}
    summary = rekey(keyed, batch_rows=3, seal_plaintext=True)
    after = rows_per_table(keyed)  # a plaintext pack is sealed as one row per write
    assert after == {**rows, "writes": after["writes"]} and after["writes"] > rows["writes"]
    assert summary.rewritten == sum(after.values()) and summary.plaintext_left == 0
    assert keyed.key_census() == {t: {key_id(K2).hex(): n} for t, n in after.items()}
    assert everything(keyed) == before


def thread_view(saver: D1Saver, thread_id: str) -> list[tuple[Any, ...]]:
    """Everything `everything` reads of one thread, with the thread's id left out."""
    def bare(config: RunnableConfig | None) -> Any:
        return config and {k: v for k, v in config["configurable"].items() if k != "thread_id"}

    out = []
    for t in saver.list({"configurable": {"thread_id": thread_id}}):
        channels = mirror.sought(t)
        out.append((bare(t.config), bare(t.parent_config), t.checkpoint["channel_values"],
                    t.metadata, t.pending_writes,
                    channels and saver.get_delta_channel_history(config=t.config,
                                                                 channels=channels)))
    return out


def test_a_keyed_copy_in_pages_of_two_rows_is_the_thread_again(local: Backend) -> None:
    """copy_thread with keys, in pages of 2 rows (RAW_*_THREAD, each row re-sealed for the
    target): every checkpoint, write (several per task), frozen row and piece of THREAD and
    TIE comes over, and each copy reads as its source."""
    saver = local.saver(encryption_keys=[K1], page_size=2)
    grid(saver)
    for source in (THREAD, TIE):
        saver.copy_thread(source, f"{source}-copy")
        assert thread_view(saver, f"{source}-copy") == thread_view(saver, source)
    (counts,) = saver.client.execute([Statement(
        "SELECT (SELECT COUNT(*) FROM checkpoints WHERE thread_id = ?1),"
        " (SELECT COUNT(*) FROM checkpoints WHERE thread_id = ?2),"
        " (SELECT COUNT(*) FROM delta_frozen WHERE thread_id = ?3),"
        " (SELECT COUNT(*) FROM delta_frozen WHERE thread_id = ?4),"
        " (SELECT COUNT(*) FROM chunks WHERE thread_id = ?3),"
        " (SELECT COUNT(*) FROM chunks WHERE thread_id = ?4)",
        [THREAD, f"{THREAD}-copy", TIE, f"{TIE}-copy"])])
    c1, c2, f1, f2, k1, k2 = counts.rows[0]
    assert (c1, f1, k1) == (c2, f2, k2) and f1 > 3 and k1 > 1


def test_rekey_of_one_id_in_pieces_in_two_namespaces(local: Backend) -> None:
    """One checkpoint id in two namespaces of a thread, and another id beside it in the
    first, each checkpoint's metadata in pieces (its own text), in one rekey page
    (RAW_CHECKPOINTS_ALL), and a write in pieces under one task id at both ids of the first
    (RAW_WRITES_ALL): each row is re-sealed from its own pieces, and all read back under the
    new key alone."""
    saver = local.saver(encryption_keys=[K1])
    stored = []
    bigs = (BIG, BIG[::-1], BIG[1:])
    for ns, cid, big in zip("aba", (mirror.BIG_ID, mirror.BIG_ID, mirror.BIG_ID[:-1] + "2"),
                            bigs):
        checkpoint = mirror.empty_checkpoint()
        checkpoint["id"] = cid
        metadata: Any = {"source": "update", "step": 0, "parents": {}, "big": big}
        stored.append(saver.put({"configurable": {"thread_id": TIE, "checkpoint_ns": ns}},
                                checkpoint, metadata, {}))
    for config, big in zip(stored[::2], bigs[::2]):  # one task id at both ids of "a"
        saver.put_writes(config, [("big", big[::-1])], "task")
    (pieces,) = saver.client.execute([Statement(
        "SELECT checkpoint_ns, COUNT(*) FROM chunks WHERE thread_id = ? GROUP BY checkpoint_ns",
        [TIE])])
    assert [ns for ns, n in pieces.rows if n > 1] == ["a", "b"]
    rekey(local.saver(encryption_keys=[K2, K1]), batch_rows=3)
    fresh = local.saver(encryption_keys=[K2])
    for n, (config, big) in enumerate(zip(stored, bigs)):
        got = fresh.get_tuple(config)
        assert got is not None and got.metadata["big"] == big  # type: ignore[typeddict-item]
        assert got.pending_writes == ([("task", "big", big[::-1])] if n != 1 else [])


def frozen_per_namespace(saver: D1Saver, thread_id: str) -> list[list[Any]]:
    (rows,) = saver.client.execute([Statement(
        "SELECT checkpoint_ns, kind, COUNT(*) FROM delta_frozen WHERE thread_id = ?"
        " GROUP BY checkpoint_ns, kind ORDER BY checkpoint_ns, kind", [thread_id])])
    return rows.rows


def test_frozen_histories_of_two_namespaces_copy_and_rekey_in_small_pages(local: Backend
                                                                          ) -> None:
    """THREAD's first turns in the root namespace and again in TWIN, both tagged and pruned:
    each namespace holds frozen histories. A keyed copy in pages of 2 rows (RAW_FROZEN_THREAD)
    brings every frozen row of both namespaces, and the copy reads as its source; a rekey in
    pages of 3 (RAW_FROZEN_ALL) re-seals every one of them."""
    memory, first = recorded()
    saver = local.saver(encryption_keys=[K1], page_size=2)
    for method, args in [*memory.calls[:first], *twin_calls(memory, first)]:
        getattr(saver, method)(*copy.deepcopy(args))
    for n, config in enumerate(tagged(memory, first)):
        saver.tag(config, f"kept{n}")
        saver.tag({"configurable": {**config["configurable"], "checkpoint_ns": TWIN}},
                  f"twin{n}")
    saver.prune([THREAD], strategy="keep_latest")
    frozen = frozen_per_namespace(saver, THREAD)
    assert {ns for ns, _, _ in frozen} == {"", TWIN}
    assert sum(n for _, kind, n in frozen if kind != "c") > 6
    saver.copy_thread(THREAD, f"{THREAD}-copy")
    assert frozen_per_namespace(saver, f"{THREAD}-copy") == frozen
    assert thread_view(saver, f"{THREAD}-copy") == thread_view(saver, THREAD)
    before = everything(saver)
    rotated = local.saver(encryption_keys=[K2, K1])
    rekey(rotated, batch_rows=3)
    rows = rows_per_table(rotated)
    assert rotated.key_census() == {t: {key_id(K2).hex(): n} for t, n in rows.items()}
    assert everything(local.saver(encryption_keys=[K2])) == before


# --- threads in a range, leftovers, pages of threads ----------------------------------------

ROWS = {  # a row of each table, for a thread id put first
    "checkpoints": "INSERT INTO checkpoints (thread_id, checkpoint_ns, checkpoint_id, "
                   "checkpoint, metadata) VALUES (?1, '', 'c1', 'x', '{}')",
    "writes": "INSERT INTO writes (thread_id, checkpoint_ns, checkpoint_id, task_id, idx, "
              "channel, value) VALUES (?1, '', 'c1', 't', 0, 'ch', 'x')",
    "chunks": "INSERT INTO chunks (thread_id, checkpoint_ns, checkpoint_id, owner, seq, data) "
              "VALUES (?1, '', 'c1', '', 0, 'x')",
    "tags": "INSERT INTO tags (thread_id, checkpoint_ns, checkpoint_id, name, created_at) "
            "VALUES (?1, '', 'c1', 'n', 'now')",
    "d1saver_chunks": "INSERT INTO d1saver_chunks (thread_id, id, level, data) "
                      "VALUES (?1, 'id', 0, 'x')",
    "delta_unwritten": "INSERT INTO delta_unwritten (thread_id, checkpoint_ns, checkpoint_id, "
                       "channels) VALUES (?1, '', 'c1', '[]')",
    "delta_frozen": "INSERT INTO delta_frozen (thread_id, checkpoint_ns, checkpoint_id, "
                    "channel, kind, depth, task_id, idx, src_checkpoint_id) "
                    "VALUES (?1, '', 'c1', 'ch', 'w', 1, 't', 0, 'c0')",
}


def test_threads_in_a_range_are_those_of_every_table_and_no_other(local: Backend) -> None:
    """THREADS_IN_RANGE and LEFTOVERS over [prefix, prefix's successor): per table (a prefix
    of its own, so no other table answers for it) the id equal to the prefix and one above
    it count; the one just below and the successor itself do not. LEFTOVERS gives each with
    its registration (expired unless registered for later)."""
    saver = local.saver()
    saver.setup()
    stmts = []
    for n, insert in enumerate(ROWS.values()):
        for thread_id in (f"p{n}-", f"p{n}-x", f"p{n},", f"p{n}."):
            stmts.append(Statement(insert, [thread_id]))
    stmts.append(Statement(
        "INSERT INTO d1saver_staged (staging_id, thread_id, source_id, created_at, expires_at)"
        " VALUES ('p0-x', 'target', 'source', 0, 4102444800)"))
    saver.client.execute(stmts)
    for n, table in enumerate(ROWS):
        (inside, left) = saver.client.execute([transfer.staged_threads(f"p{n}-"),
                                               transfer.leftovers(f"p{n}-")])
        assert inside.rows == [[f"p{n}-"], [f"p{n}-x"]], table
        assert left.rows == [[f"p{n}-", None, None, 1], [
            f"p{n}-x", *(["target", "source", 0] if n == 0 else [None, None, 1])]], table
    # a thread with rows in every table, two in each, is one thread
    saver.client.execute([Statement(insert.replace("'c1'", "?2").replace("'n'", "?2").replace(
        "'id'", "?2"), ["q-", cid]) for insert in ROWS.values() for cid in ("c1", "c2")])
    (inside, left) = saver.client.execute([transfer.staged_threads("q-"),
                                           transfer.leftovers("q-")])
    assert inside.rows == [["q-"]]
    assert left.rows == [["q-", None, None, 1]]


def test_a_run_removes_the_leftovers_its_dry_run_counts(local: Backend) -> None:
    """A whole-database run's end (admin.finish) removes staged rows killed copies and moves
    left, in whichever table they are, and its dry run (admin.finish_counts) counts the same:
    a copy's once unregistered or expired, a move's and a comparison's always, the id equal
    to the staging prefix too, a copy's rows in every table as one; a copy still registered,
    and the ids just below and at the end of the staging range (no staged rows), stay. A run
    that no longer holds its lease removes nothing."""
    saver = local.saver()
    saver.setup()
    low = admin.STAGING_PREFIX
    high, below = low[:-1] + chr(ord(low[-1]) + 1), low[:-1] + chr(ord(low[-1]) - 1)
    copying, moving, leaving = admin.COPYING_PREFIX, admin.MOVING_PREFIX, admin.LEAVING_PREFIX
    register = ("INSERT INTO d1saver_staged (staging_id, thread_id, source_id, created_at, "
                "expires_at) VALUES (?1, 'target', 'source', 0, ?2)")
    saver.client.execute([Statement(register, [staging_id, expires]) for staging_id, expires in (
        (copying + "live", 4102444800), (copying + "expired", 0), (moving + "live", 4102444800),
        (leaving + "live", 4102444800))])
    saver.client.execute([admin.acquire_lease("run", "me", 600)])
    for n, (table, insert) in enumerate(ROWS.items()):
        removable = [low, copying + f"gone{n}"]
        if n == 0:
            removable += [copying + "expired", moving + "live", leaving + "live"]
        ids = [*removable, high, below, *([copying + "live"] if n == 0 else [])]
        saver.client.execute([Statement(insert, [thread_id]) for thread_id in ids])
        dry = admin.finish_counts(sweep=False)
        assert admin.finished(dry, saver.client.execute(dry)).staged_removed == len(
            removable), table
        run = admin.finish("run", "me", sweep=False)[:-1]  # the lease kept for the next
        assert admin.finished(run, saver.client.execute(run)).staged_removed == len(
            removable), table
        (left,) = saver.client.execute([transfer.staged_threads(low)])
        assert left.rows == [[copying + "live"]], table
        (kept,) = saver.client.execute([Statement(
            f"SELECT COUNT(DISTINCT thread_id) FROM {table} WHERE thread_id IN (?1, ?2)",
            [high, below])])
        assert kept.rows == [[2]], table
    # A copy's rows in every table are one leftover; a run whose lease is gone, or another's,
    # removes nothing.
    everywhere = copying + "everywhere"
    saver.client.execute([Statement(insert, [everywhere]) for insert in ROWS.values()])
    for name, holder in (("run", "another"), ("another", "me")):
        run = admin.finish(name, holder, sweep=False)[:-1]
        assert admin.finished(run, saver.client.execute(run)).staged_removed == 0
    dry = admin.finish_counts(sweep=False)
    assert admin.finished(dry, saver.client.execute(dry)).staged_removed == 1
    run = admin.finish("run", "me", sweep=False)
    assert admin.finished(run, saver.client.execute(run)).staged_removed == 1
    (left,) = saver.client.execute([transfer.staged_threads(low)])
    assert left.rows == [[copying + "live"]]


def test_a_copy_expiring_this_very_second_is_not_yet_a_leftover(local: Backend) -> None:
    """A copy's registration lasts up to and including its expiry second: while the
    database's clock reads that second, LEFTOVERS shows it live, a dry run's count
    (admin.finish_counts) leaves it out and a run's end (admin.finish) keeps its rows. One
    request registers, counts, removes and reads the clock before and after; it is retried
    until the clock stayed on one second throughout."""
    saver = local.saver()
    saver.setup()
    low, live = admin.STAGING_PREFIX, admin.COPYING_PREFIX + "expiring"
    clock = Statement("SELECT CAST(strftime('%s', 'now') AS INTEGER)")
    saver.client.execute([Statement(ROWS["checkpoints"], [live]),
                          admin.acquire_lease("run", "me", 600)])
    for _ in range(20):
        dry = admin.finish_counts(sweep=False)
        run = admin.finish("run", "me", sweep=False)[:-1]  # the lease kept for a retry
        batch = [clock, Statement(
            "INSERT OR REPLACE INTO d1saver_staged (staging_id, thread_id, source_id, "
            "created_at, expires_at) VALUES (?1, 'target', 'source', 0, "
            "CAST(strftime('%s', 'now') AS INTEGER))", [live]),
            transfer.leftovers(low), *dry, *run, transfer.staged_threads(low), clock]
        results = saver.client.execute(batch)
        if results[0].rows != results[-1].rows:
            continue  # the second changed within the request: the expiry may be past
        assert results[2].rows == [[live, "target", "source", 0]]
        assert admin.finished(dry, results[3:3 + len(dry)]).staged_removed == 0
        assert admin.finished(run, results[3 + len(dry):-2]).staged_removed == 0
        assert results[-2].rows == [[live]]
        return
    pytest.fail("the clock never stayed on one second for a request")


def test_a_page_of_threads_holds_its_size(local: Backend) -> None:
    """THREADS_PAGE: keyset pages of `size` threads in order, after the cursor."""
    saver = local.saver()
    saver.setup()
    saver.client.execute([Statement(ROWS["checkpoints"], [t]) for t in "edcba"])
    pages, after = [], ""
    while True:
        (page,) = saver.client.execute([admin.threads_page(after, 2)])
        if not page.rows:
            break
        pages.append([row[0] for row in page.rows])
        after = pages[-1][-1]
    assert pages == [["a", "b"], ["c", "d"], ["e"]]


def test_the_figures_of_a_thread_count_its_namespaces_and_every_stored_byte(local: Backend
                                                                          ) -> None:
    """THREADS_PAGE, THREADS_INFO and THREADS_LIST (`d1saver threads`): per thread its
    checkpoints, its namespaces (each once, however many checkpoints it holds), its newest ts,
    and the length of every value it stores: checkpoints and their metadata, writes, pieces,
    content-addressed chunks, frozen histories and their metadata. Threads and namespaces
    share checkpoint ids; an id that does not exist gives no row."""
    saver = local.saver()
    grid(saver)
    figures: dict[str, list[Any]] = {}
    (rows,) = saver.client.execute([Statement(
        "SELECT thread_id, checkpoint_ns, ts, checkpoint, metadata FROM checkpoints")])
    for thread_id, ns, ts, value, metadata in rows.rows:
        f = figures.setdefault(thread_id, [0, set(), "", 0])
        f[0] += 1
        f[1].add(ns)
        f[2] = max(f[2], ts or "")
        f[3] += len(value) + len(metadata)
    tables = [("writes", "value", None), ("chunks", "data", None),
              ("d1saver_chunks", "data", None), ("delta_frozen", "value", "metadata")]
    with_metadata = 0
    for table, column, extra in tables:
        (stored,) = saver.client.execute([Statement(
            f"SELECT thread_id, {column}, {extra or 'NULL'} FROM {table}")])
        for thread_id, value, more in stored.rows:
            if value is not None and thread_id in figures:
                figures[thread_id][3] += len(value) + len(more or "")
                with_metadata += bool(more)
    assert with_metadata > 0 and all(len(f[1]) > 1 < f[0] for f in figures.values())
    want = [[t, n, len(nss), ts, size] for t, (n, nss, ts, size) in sorted(figures.items())]
    (page, infos) = saver.client.execute([admin.threads_page("", 100), admin.thread_infos(
        [TIE, "absent", THREAD])])
    assert page.rows == want
    assert infos.rows == want
    for sort in ("bytes", "checkpoints", "id"):  # `d1saver threads` (THREADS_LIST)
        listed = inspection.threads(saver, sort=sort, limit=100).threads
        assert sorted([r["thread_id"], r["checkpoints"], r["namespaces"], r["updated"],
                       r["bytes"]] for r in listed) == want, sort
    totals = {t: [0, 0] for t in ("checkpoints", "writes", "chunks", "tags", "delta_frozen",
                                  "d1saver_chunks")}
    for table, column, extra in [("checkpoints", "checkpoint", "metadata"), *tables,
                                 ("tags", "NULL", None)]:
        (stored,) = saver.client.execute([Statement(
            f"SELECT {column}, {extra or 'NULL'} FROM {table}")])
        totals[table][0] = len(stored.rows)
        totals[table][1] = sum(len(v) + len(m or "") for v, m in stored.rows if v is not None)
    (summary,) = saver.client.execute([admin.storage_summary()])
    assert {t: [n, size] for t, n, size in summary.rows} == totals


def test_the_history_of_a_thread_is_each_checkpoint_with_its_writes_and_tags(local: Backend
                                                                            ) -> None:
    """HISTORY (`d1saver history`): a thread's checkpoints of every namespace, newest first
    (namespaces sharing an id in name order), each with its parent, step, source, ts, stored
    bytes, how many writes it holds (packed or not) and its tags; no other thread's, though
    TIE holds the same ids, tags and writes."""
    saver = local.saver()
    grid(saver)
    memory, first = recorded()
    tags = {c["configurable"]["checkpoint_id"]: f"kept{n}"
            for n, c in enumerate(tagged(memory, first))}
    (rows,) = saver.client.execute([Statement(
        "SELECT checkpoint_ns, checkpoint_id, LENGTH(checkpoint) + LENGTH(metadata)"
        " FROM checkpoints WHERE thread_id = ?1", [THREAD])])
    size = {(ns, cid): n for ns, cid, n in rows.rows}
    want = []
    for t in saver.list({"configurable": {"thread_id": THREAD}}):
        conf = t.config["configurable"]
        ns, cid = conf["checkpoint_ns"], conf["checkpoint_id"]
        want.append({
            "checkpoint_ns": ns, "checkpoint_id": cid,
            "parent_checkpoint_id": t.parent_config and t.parent_config["configurable"][
                "checkpoint_id"],
            "step": t.metadata["step"], "source": t.metadata["source"],
            "ts": t.checkpoint["ts"], "bytes": size[ns, cid], "writes": len(t.pending_writes),
            "tags": tags.get(cid) if ns == "" else None})
    want.sort(key=lambda r: r["checkpoint_ns"])
    want.sort(key=lambda r: r["checkpoint_id"], reverse=True)
    assert sum(r["writes"] for r in want) > len(want) and sum(bool(r["tags"]) for r in want) == 3
    assert admin.thread_history(saver, THREAD, 1000) == want
    assert admin.thread_history(saver, THREAD, 5) == want[:5]

def test_a_checkpoint_id_prefix_names_ids_of_one_namespace_of_one_thread(local: Backend
                                                                        ) -> None:
    """CHECKPOINT_IDS (a shortened id given to the CLI): the ids of the thread's namespace
    that start with the prefix, in id order (the prefix itself first), `limit` of them; the
    same ids in another namespace or thread, and ids just outside the prefix, are not."""
    saver = local.saver()
    saver.setup()
    insert = ("INSERT INTO checkpoints (thread_id, checkpoint_ns, checkpoint_id, checkpoint,"
              " metadata) VALUES (?1, ?2, ?3, 'x', '{}')")
    mine = ["ab", "ab0", "abz", "ab\U0010ffff"]
    rows = [("p", "", cid) for cid in [*mine, "aa\U0010ffff", "ac", "a"]]
    rows += [(t, ns, cid) for t, ns in (("p", "x"), ("q", "")) for cid in ("ab1", "ab2")]
    saver.client.execute([Statement(insert, list(r)) for r in rows])
    assert inspection.checkpoint_ids(saver, "p", "ab") == sorted(mine)
    assert inspection.checkpoint_ids(saver, "p", "ab", limit=2) == sorted(mine)[:2]
    assert inspection.checkpoint_ids(saver, "p", "ab", "x") == ["ab1", "ab2"]
    assert inspection.checkpoint_ids(saver, "q", "ab") == ["ab1", "ab2"]
    assert inspection.checkpoint_ids(saver, "q", "ab", "x") == []


def test_the_stored_sample_of_a_thread_is_its_own_newest_row(local: Backend) -> None:
    """STORED_SAMPLE (the demo's "what is stored"): the newest checkpoint row of the thread
    named, as stored (its value's head and length, its metadata column), not the newer one
    of another thread."""
    saver = local.saver()
    saver.setup()
    insert = ("INSERT INTO checkpoints (thread_id, checkpoint_ns, checkpoint_id, checkpoint,"
              " metadata) VALUES (?1, '', ?2, ?3, ?4)")
    saver.client.execute([Statement(insert, list(r)) for r in (
        ("p", "c1", "b:old value", '{"n":1}'), ("p", "c2", "b:newest of p", '{"n":2}'),
        ("q", "c3", "b:newest of q", '{"n":3}'))])
    for thread_id, row in (("p", ["c2", "b:newest", 13, '{"n":2}']),
                           ("q", ["c3", "b:newest", 13, '{"n":3}'])):
        (sample,) = saver.client.execute([admin.stored_sample(thread_id, chars=8)])
        assert sample.rows == [row], thread_id

def test_the_census_skips_staged_rows_and_only_those(local: Backend) -> None:
    """KEY_CENSUS and STAGED_VALUES: rows staged under a hidden id (a copy of TIE) are counted
    as skipped, every value once; threads whose ids lie just outside the staging range, at
    its upper bound or just below its lower one (users' ids like any other), are counted with
    the rest."""
    saver = local.saver(encryption_keys=[K1])
    grid(saver)
    staged, beyond, below = "\x1fd1saver-copying\x1fx", "\x1fd1saver.", "\x1fd1saver,"
    saver.client.execute([*Statement.bind_each(_sql.COPY_THREAD, {"source": TIE,
                                                                  "target": staged}),
                          *(s for other in (beyond, below) for s in Statement.bind_each(
                              _sql.COPY_THREAD, {"source": THREAD, "target": other}))])
    # A staged write and frozen record without a value (cleared rows) are no values to skip.
    saver.client.execute([Statement(
        f"UPDATE {t} SET value = NULL WHERE rowid = (SELECT MIN(rowid) FROM {t}"
        f" WHERE thread_id = ?1{extra})", [staged])
        for t, extra in (("writes", ""), ("delta_frozen", " AND kind <> 'c'"))])
    (counted,) = saver.client.execute([Statement(
        "SELECT (SELECT COUNT(*) FROM checkpoints WHERE thread_id = ?1)"
        " + (SELECT COUNT(*) FROM writes WHERE thread_id = ?1 AND value IS NOT NULL)"
        " + (SELECT COUNT(*) FROM delta_frozen WHERE thread_id = ?1 AND kind <> 'c'"
        " AND value IS NOT NULL)", [TIE])])
    skipped = counted.rows[0][0] - 2  # TIE's values, less the two cleared staged rows
    rows = rows_per_table(saver)  # every thread's, the staged copy's too
    census = saver.key_census()
    assert census["staged"] == {"skipped": skipped} and skipped > 20
    assert sum(n for t, per in census.items() if t != "staged" for n in per.values()) == (
        sum(rows.values()) - skipped - 1)  # every row but the staged ones (the cleared write)


# --- a thread's rows read out in keyset pages (moves and copies between databases) ----------


def test_a_thread_read_in_small_pages_is_every_row_once_each_page_full(local: Backend) -> None:
    """read_thread (TRANSFER_PAGE_*) in pages of 3 rows and about 1,000 to 4,000 bytes: every
    row of every table once, in key order; each page holds its rows up to the byte budget (the
    rows before its last start under it) and stops short of the row limit only where the next
    row would start over it."""
    saver = local.saver(encryption_keys=[K1])  # one write per row: several idx per task
    grid(saver)
    limit = 3
    pages: dict[str, list[list[tuple[Any, ...]]]] = {t: [] for t in transfer.TABLES}

    def exchange(stmts: Sequence[Statement]) -> Generator[Any, Any, list[Result]]:
        results = saver.client.execute(stmts)
        for stmt, result in zip(stmts, results):
            table = next(t for t, q in _sql.TRANSFER_PAGE.items() if q.name == stmt.name)
            pages[table].append([tuple(r[:-1]) for r in result.rows])
        yield from ()
        return results

    for thread_id, budget in [(THREAD, 2_000), (TIE, 2_000), *(
            (THREAD, b) for b in range(1_000, 4_000, 173))]:
        for table in pages:
            pages[table].clear()
        read = transfer.read_thread(exchange, thread_id, page_rows=limit, page_bytes=budget)
        try:
            next(read)
        except StopIteration as done:
            got = done.value
        for table, (keys, rest) in _sql.TRANSFER_TABLES.items():
            (want,) = saver.client.execute([Statement(
                f"SELECT {', '.join(keys + rest)} FROM {table} WHERE thread_id = ?1 "
                f"ORDER BY {', '.join(keys)}", [thread_id])])
            assert got.tables[table] == [tuple(r) for r in want.rows], (thread_id, table)
            sizes = [sum(len(str(v)) for v in row[len(keys):] if v is not None)
                     for row in got.tables[table]]
            at = 0
            for page in pages[table]:
                n = len(page)
                assert sum(sizes[at:at + n - 1]) < budget, (thread_id, table)
                if 0 < n < limit and at + n < len(sizes):
                    assert sum(sizes[at:at + n]) >= budget, (thread_id, table)
                at += n
        assert sum(len(rows) for rows in got.tables.values()) > 30


def test_a_first_page_ends_at_the_byte_budget_to_the_byte_or_at_the_row_limit(local: Backend) -> None:
    """TRANSFER_PAGE_*'s byte budget counts each row's non-key columns exactly: for every
    row of every table, a first page whose budget is the bytes of the rows before it ends
    just before it, and one byte more takes it in (with a run id, every column holds bytes
    in some row); under a large budget a first page is the first rows up to the row limit,
    in key order."""
    saver = local.saver(encryption_keys=[K1])
    grid(saver)
    run = mirror.empty_checkpoint()
    run["id"] = mirror.BIG_ID[:-1] + "9"
    saver.put({"configurable": {"thread_id": TIE, "checkpoint_ns": "run"}}, run,
              {"source": "loop", "step": 0, "parents": {}, "run_id": "run-1"}, {})
    stored = mirror.empty_checkpoint()  # without keys, messages are stored by content
    stored["id"] = mirror.BIG_ID
    stored["channel_values"] = {"messages": [f"{n}: " + "lorem ipsum " * 40 for n in range(9)]}
    local.saver().put({"configurable": {"thread_id": "g-plain", "checkpoint_ns": ""}}, stored,
                      {"source": "loop", "step": 0, "parents": {}}, {})
    for thread_id in (THREAD, TIE, "g-plain"):
        stmts, want = [], []
        for table, (keys, rest) in _sql.TRANSFER_TABLES.items():
            (got,) = saver.client.execute([Statement(
                f"SELECT {', '.join(keys + rest)} FROM {table} WHERE thread_id = ?1 "
                f"ORDER BY {', '.join(keys)}", [thread_id])])
            ids = [tuple(row[:len(keys)]) for row in got.rows]
            sizes = [sum(len(str(v)) for v in row[len(keys):] if v is not None)
                     for row in got.rows]
            before = [sum(sizes[:j]) for j in range(len(sizes))]
            pages = [(len(ids), budget) for budget in sorted(
                {b for j in before[1:] for b in (j, j + 1)})]
            pages += [(limit, 10**9) for limit in range(1, len(ids))]  # the row limit alone
            for limit, budget in pages:
                stmts.append(Statement.bind(_sql.TRANSFER_PAGE[table], {
                    "thread_id": thread_id, **dict.fromkeys((f"after_{k}" for k in keys)),
                    "limit": limit, "budget": budget}))
                n = min(limit, sum(b < budget for b in before))
                want.append((table, limit, budget, ids[:n]))
        assert {t for t, *_ in want} >= ({"d1saver_chunks"} if thread_id == "g-plain" else
                                         {"checkpoints", "writes", "chunks", "tags",
                                          "delta_frozen"} - ({"chunks"} if thread_id == THREAD
                                                             else set()))
        keyed = [[tuple(row[:len(_sql.TRANSFER_TABLES[w[0]][0])]) for row in r.rows]
                 for w, r in zip(want, [r for at in range(0, len(stmts), 40)
                                        for r in saver.client.execute(stmts[at:at + 40])])]
        assert [(t, lim, b, k) for (t, lim, b, _), k in zip(want, keyed)] == want, thread_id


def test_a_history_through_a_value_stored_in_pieces(local: Backend) -> None:
    """DELTA_HISTORY, and the prefetch of each page variant, from a checkpoint whose walk
    passes two ancestors, the farther a seed whose value is stored in pieces: each piece comes
    once, with its own checkpoint."""
    memory, saver = InMemorySaver(), local.saver(encryption_keys=[K1])
    for target in (memory, saver):
        parent: RunnableConfig = {"configurable": {"thread_id": "h", "checkpoint_ns": ""}}
        for i in range(4):
            cp = mirror.empty_checkpoint()
            cp.update(id=f"1f0aaaaa-0000-6000-8000-{i:012d}", ts="2026-11-27T00:00:00+00:00",
                      channel_versions={"messages": f"{i + 1:032}.0"})
            metadata: Any = {"source": "loop", "step": i, "parents": {}}
            if i < 2:  # over a row's limit: the checkpoint row holds a marker, its pieces
                metadata["big"] = BIG
            if i == 0:
                cp["channel_values"] = {"messages": [BIG]}
            else:
                metadata["counters_since_delta_snapshot"] = {"messages": [i, i]}
            parent = target.put(parent, cp, metadata, {"messages": f"{i + 1:032}.0"})
            target.put_writes(parent, [("messages", f"m{i}")], task_id=f"task-{i}")
    (pieces,) = saver.client.execute([Statement(
        "SELECT COUNT(*) FROM chunks WHERE thread_id = 'h'")])
    assert pieces.rows[0][0] > 1
    fresh = local.saver(encryption_keys=[K1])
    for i in range(1, 4):
        config: RunnableConfig = {"configurable": {
            "thread_id": "h", "checkpoint_ns": "", "checkpoint_id": f"1f0aaaaa-0000-6000-8000-{i:012d}"}}
        want = memory.get_delta_channel_history(config=config, channels=["messages"])
        assert fresh.get_delta_channel_history(config=config, channels=["messages"]) == (
            want), i
        # and prefetched by each page variant: the seed's pieces come with the walk
        for reader, t, read in mirror.every_read(lambda: local.saver(encryption_keys=[K1]),
                                                 config, {"step": i}):
            before = local.requests
            assert reader.get_delta_channel_history(config=t.config, channels=["messages"]) == (
                want), (i, read)
            assert local.requests == before, (i, read)


def test_tagging_the_newest_names_the_newest_of_its_own_namespace(local: Backend) -> None:
    """TAG without a checkpoint id tags the newest checkpoint of the config's namespace,
    though a subgraph's namespace of the thread holds a newer one (a greater id)."""
    saver = local.saver()
    ids = [f"1f000000-0000-6000-8000-00000000000{n}" for n in (1, 2, 3)]
    for ns, cid in (("", ids[0]), ("", ids[1]), ("sub:1", ids[2])):
        saver.put({"configurable": {"thread_id": "tagged", "checkpoint_ns": ns}},
                  {**empty_checkpoint(), "id": cid}, {}, {})
    root: RunnableConfig = {"configurable": {"thread_id": "tagged", "checkpoint_ns": ""}}
    saver.tag(root, "newest")
    assert saver.tags(root) == {"newest": ids[1]}
