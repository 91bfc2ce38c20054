"""Memory when the database list changes (issue 30, facts 5 and 10): a fleet that grows or
shrinks (`previous_database_ids`) keeps every store item and cache entry in view while
`d1saver rebalance` moves them, writes and deletes never leave a second copy nor bring an old
value back, and LangGraph's node cache spreads over the fleet."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from langgraph.store.base import GetOp, PutOp, SearchOp

from d1saver import D1Saver, Statement
from d1saver.fleet.routing import rendezvous
from tests.memory.conftest import Memory
from tests.memory.embeddings import TrigramEmbeddings
from tests.support import Before, body_has

USERS = [f"user-{i}" for i in range(16)]


def rows(memory: Memory, table: str) -> dict[str, list[tuple[str, str]]]:
    """(ns, key) of every row of `table`, per database of the engine (all of memory's)."""
    out = {}
    for db in [*memory.database_ids, "db-new"]:
        one = memory.store([db])
        (res,) = one._exchange(one._databases()[0], [Statement(
            f"SELECT ns, key FROM {table} ORDER BY ns, key")])
        out[db] = [(ns, key) for ns, key in res.rows]
    return out


def copies(memory: Memory, table: str) -> Counter[tuple[str, str]]:
    return Counter(k for found in rows(memory, table).values() for k in found)


def grown(memory: Memory, **kwargs: Any) -> Any:
    """A store over the first two databases while it moves from the first alone."""
    return memory.store(memory.database_ids[:2], previous_database_ids=memory.database_ids[:1],
                        **kwargs)


def _fill_ops() -> list[PutOp]:
    return [PutOp((u, "memories"), f"m{j}", {"text": f"{u} fact {j}", "j": j})
            for u in USERS for j in range(2)]


def _fill(store: Any) -> None:
    store.batch(_fill_ops())


def moved(memory: Memory) -> list[str]:
    """The users whose home changes when the fleet grows from one database to two."""
    return [u for u in USERS if rendezvous(u, memory.database_ids[:2]) != memory.database_ids[0]]


# --- fact 5: a fleet that grows strands nothing ------------------------------------------------


def test_growing_a_fleet_keeps_every_item_in_view(memory: Memory) -> None:
    old = memory.store(memory.database_ids[:1], index={"dims": 64, "embed": TrigramEmbeddings()})
    _fill(old)
    store = grown(memory, index={"dims": 64, "embed": TrigramEmbeddings()})
    movers = moved(memory)
    assert movers  # some users now live in the new database, their items still in the old
    for u in USERS:
        assert store.get((u, "memories"), "m1").value["j"] == 1  # type: ignore[union-attr]
        assert sorted(i.key for i in store.search((u,))) == ["m0", "m1"]
        assert store.search((u,), query=f"{u} fact 0", limit=1)[0].key == "m0"
        assert store.search((u,), filter={"j": 1})[0].key == "m1"
        assert store.list_namespaces(prefix=(u,)) == [(u, "memories")]
    assert len(store.search((), limit=100)) == 2 * len(USERS)
    assert len(store.list_namespaces(limit=100)) == len(USERS)


def test_a_put_or_a_delete_while_migrating_leaves_no_second_copy(memory: Memory) -> None:
    _fill(memory.store(memory.database_ids[:1]))
    store = grown(memory)
    u = moved(memory)[0]
    store.put((u, "memories"), "m0", {"text": "new"})
    assert store.get((u, "memories"), "m0").value == {"text": "new"}  # type: ignore[union-attr]
    key = (f'["{u}","memories"]', "m0")
    assert copies(memory, "store_items")[key] == 1  # the old copy went
    store.delete((u, "memories"), "m1")
    assert store.get((u, "memories"), "m1") is None  # no old value comes back
    assert copies(memory, "store_items")[(key[0], "m1")] == 0
    # Deleting a namespace deletes it wherever it still is.
    assert store.delete_namespace((moved(memory)[1],)) == 2
    assert store.search((moved(memory)[1],)) == []
    assert max(copies(memory, "store_items").values()) == 1


def test_reads_while_migrating_ask_the_previous_home_first_then_the_home(
        memory: Memory) -> None:
    """One request more, only for what moved: the previous home, then the home."""
    _fill(memory.store(memory.database_ids[:1]))
    store = grown(memory)
    store.setup()
    stayed = next(u for u in USERS if u not in moved(memory))
    u = moved(memory)[0]
    _, n = memory.requests(lambda: store.get((stayed, "memories"), "m0"))
    assert n == 1
    _, sent = memory.sent(lambda: store.get((u, "memories"), "m0"))
    assert [e.database_id for e in sent] == memory.database_ids[:2]
    _, sent = memory.sent(lambda: store.batch([GetOp((u, "memories"), "m0"),
                                               SearchOp((u,), None, 10, 0)]))
    assert [e.database_id for e in sent] == memory.database_ids[:2]


# --- fact 10: the node cache spreads over the fleet ----------------------------------------------


NODE = ("__pregel_ns_writes", "__main__.double", "double")


def test_the_node_cache_spreads_over_the_fleet(memory: Memory) -> None:
    cache = memory.cache(memory.database_ids)
    cache.set({(NODE, f"input-{i}"): (i, None) for i in range(200)})
    per_db = {db: len(found) for db, found in rows(memory, "cache_entries").items()}
    assert all(per_db[db] > 20 for db in memory.database_ids), per_db
    assert cache.get([(NODE, f"input-{i}") for i in range(200)]) == {
        (NODE, f"input-{i}"): i for i in range(200)}
    _, sent = memory.sent(lambda: cache.get([(NODE, f"input-{i}") for i in range(200)]))
    assert len(sent) == 4  # one request per database, whatever the number of keys
    cache.clear([NODE])
    assert cache.get([(NODE, f"input-{i}") for i in range(200)]) == {}


def test_cache_entries_stored_by_0_2_0s_route_are_found_while_migrating(
        memory: Memory) -> None:
    """0.2.0 put a fleet's entry in its first label's database: with previous_database_ids
    (the same list, while `d1saver rebalance` moves them) every one is found."""
    ids = memory.database_ids
    legacy = memory.cache([rendezvous(NODE[0], ids)])  # where 0.2.0 put them
    legacy.set({(NODE, f"input-{i}"): (i, None) for i in range(40)})
    cache = memory.cache(ids, previous_database_ids=ids)
    assert cache.get([(NODE, f"input-{i}") for i in range(40)]) == {
        (NODE, f"input-{i}"): i for i in range(40)}
    cache.set({(NODE, "input-0"): ("new", None)})  # the old copy goes
    assert cache.get([(NODE, "input-0")]) == {(NODE, "input-0"): "new"}
    assert copies(memory, "cache_entries")[('["__pregel_ns_writes","__main__.double","double"]',
                                            "input-0")] == 1
    # `d1saver rebalance` moves them to their homes: found without previous_database_ids.
    from d1saver.compaction.rebalance import rebalance
    summary = rebalance(_saver(memory, ids))
    assert summary.cache_entries_moved > 20
    assert memory.cache(ids).get([(NODE, f"input-{i}") for i in range(40)]) == {
        (NODE, "input-0"): "new", **{(NODE, f"input-{i}"): i for i in range(1, 40)}}
    per_db = {db: len(found) for db, found in rows(memory, "cache_entries").items()}
    assert all(per_db[db] > 0 for db in ids), per_db


def test_a_route_keeps_cache_entries_by_their_first_label(memory: Memory) -> None:
    ids = memory.database_ids
    cache = memory.cache(ids, route=lambda label: ids[2])
    cache.set({(NODE, f"k{i}"): (i, None) for i in range(20)})
    assert {db: len(found) for db, found in rows(memory, "cache_entries").items()
            if found} == {ids[2]: 20}


def test_a_saver_and_its_rebalance_do_not_need_memory(memory: Memory) -> None:
    """A database list that changed leaves a fleet without memory as it was."""
    saver = D1Saver(account_id=memory.account_id, database_ids=memory.database_ids[:2],
                    previous_database_ids=memory.database_ids[:1], api_token=memory.api_token,
                    api_base_url=memory.base_url, transport=memory.transport)
    saver.setup()
    assert saver.previous_database_ids == tuple(memory.database_ids[:1])


@pytest.mark.anyio
async def test_async_while_migrating(memory: Memory) -> None:
    # From the event loop's thread, the async API only (a sync call there is refused).
    await memory.store(memory.database_ids[:1]).abatch(_fill_ops())
    store = grown(memory)
    u = moved(memory)[0]
    assert (await store.aget((u, "memories"), "m0")).value["j"] == 0  # type: ignore[union-attr]
    await store.aput((u, "memories"), "m0", {"text": "new"})
    assert copies(memory, "store_items")[(f'["{u}","memories"]', "m0")] == 1
    await store.adelete((u, "memories"), "m1")
    assert await store.aget((u, "memories"), "m1") is None
    cache = memory.cache(memory.database_ids[:2], previous_database_ids=memory.database_ids[:1])
    old = memory.cache(memory.database_ids[:1])
    await old.aset({(NODE, f"k{i}"): (i, None) for i in range(10)})
    assert len(await cache.aget([(NODE, f"k{i}") for i in range(10)])) == 10


# --- rebalance moves memory -----------------------------------------------------------------------


def _saver(memory: Memory, ids: list[str], previous: list[str] | None = None,
           transport: Any = None) -> D1Saver:
    where: dict[str, Any] = {"database_ids": ids}
    if previous is not None:
        where["previous_database_ids"] = previous
    return D1Saver(account_id=memory.account_id, api_token=memory.api_token,
                   api_base_url=memory.base_url, transport=transport or memory.transport,
                   **where)


def test_rebalance_moves_items_and_entries_to_their_homes(memory: Memory) -> None:
    from d1saver.compaction.rebalance import rebalance
    index = {"dims": 64, "embed": TrigramEmbeddings()}
    _fill(memory.store(memory.database_ids[:1], index=index))
    old_cache = memory.cache(memory.database_ids[:1])
    old_cache.set({(NODE, f"input-{i}"): (i, None) for i in range(30)})
    ids, previous = memory.database_ids[:2], memory.database_ids[:1]
    dry = rebalance(_saver(memory, ids, previous), dry_run=True)
    items_moving = 2 * len(moved(memory))
    assert dry.memory_misplaced > items_moving and dry.store_items_moved == 0
    summary = rebalance(_saver(memory, ids, previous))
    assert summary.store_items_moved == items_moving
    assert summary.store_items_moved + summary.cache_entries_moved == dry.memory_misplaced
    assert summary.memory_changed == 0
    # Every row at its home, once; readers without previous_database_ids find everything.
    store = memory.store(ids, index=index)
    cache = memory.cache(ids)
    for table in ("store_items", "cache_entries"):
        assert max(copies(memory, table).values()) == 1
    placed = rows(memory, "store_items")
    assert all(store.home((ns[2:].split('"')[0],)) == db for db, found in placed.items()
               for ns, _ in found)
    for u in USERS:
        assert sorted(i.key for i in store.search((u,))) == ["m0", "m1"]
        assert store.search((u,), query=f"{u} fact 1", limit=1)[0].key == "m1"  # vectors moved
    assert len(cache.get([(NODE, f"input-{i}") for i in range(30)])) == 30
    again = rebalance(_saver(memory, ids, previous))
    assert again.memory_misplaced == 0


def test_a_shrinking_fleet_moves_memory_home(memory: Memory) -> None:
    from d1saver.compaction.rebalance import rebalance
    ids = memory.database_ids[:3]
    _fill(memory.store(ids))
    cache = memory.cache(ids)
    cache.set({(NODE, f"input-{i}"): (i, None) for i in range(30)})
    shrunk = memory.store(ids[:2], previous_database_ids=ids)
    assert len(shrunk.search((), limit=100)) == 2 * len(USERS)  # in view before the move
    summary = rebalance(_saver(memory, ids[:2], ids))
    assert summary.memory_misplaced > 0
    assert rows(memory, "store_items")[ids[2]] == rows(memory, "cache_entries")[ids[2]] == []
    assert len(memory.store(ids[:2]).search((), limit=100)) == 2 * len(USERS)
    assert len(memory.cache(ids[:2]).get([(NODE, f"input-{i}") for i in range(30)])) == 30


# --- what runs beside a move (delete wins, a put is kept, a read misses nothing) ----------------


MOVE_IN = b"DO NOTHING"          # the move's write at the target
MOVE_OUT = b"DELETE FROM store_items WHERE(ns,key)IN"  # its delete at the source


@pytest.mark.parametrize("when", [MOVE_IN, MOVE_OUT], ids=["before the copy lands",
                                                           "before the source goes"])
def test_a_delete_beside_a_move_is_not_undone(memory: Memory, when: bytes) -> None:
    from d1saver.compaction.rebalance import rebalance
    _fill(memory.store(memory.database_ids[:1]))
    ids, previous = memory.database_ids[:2], memory.database_ids[:1]
    store = grown(memory)
    u = moved(memory)[0]
    beside = Before(memory.transport, body_has(when), lambda: store.delete((u, "memories"), "m0"))
    saver = _saver(memory, ids, previous, transport=beside)
    rebalance(saver)
    assert beside.fired
    assert store.get((u, "memories"), "m0") is None
    assert memory.store(ids).get((u, "memories"), "m0") is None
    assert copies(memory, "store_items")[(f'["{u}","memories"]', "m0")] == 0


@pytest.mark.parametrize("when", [MOVE_IN, MOVE_OUT], ids=["before the copy lands",
                                                           "before the source goes"])
def test_a_put_beside_a_move_is_kept(memory: Memory, when: bytes) -> None:
    from d1saver.compaction.rebalance import rebalance
    _fill(memory.store(memory.database_ids[:1]))
    ids, previous = memory.database_ids[:2], memory.database_ids[:1]
    store = grown(memory)
    u = moved(memory)[0]
    beside = Before(memory.transport, body_has(when),
                    lambda: store.put((u, "memories"), "m0", {"text": "new"}))
    rebalance(_saver(memory, ids, previous, transport=beside))
    assert beside.fired
    assert memory.store(ids).get((u, "memories"), "m0").value == {"text": "new"}  # type: ignore[union-attr]
    assert copies(memory, "store_items")[(f'["{u}","memories"]', "m0")] == 1


def test_a_cache_entry_set_on_the_old_layout_beside_a_move_stays_at_the_source(
        memory: Memory) -> None:
    """A cache on the old database list that sets entries just before the move deletes them at
    the source keeps them: the source deletes only rows that still hold what the move read, so
    the old layout still reads its own writes, and the rows are counted as changed, not moved."""
    from d1saver.compaction.rebalance import rebalance
    ids, previous = memory.database_ids[:2], memory.database_ids[:1]
    old = memory.cache(previous)
    keys = [(NODE, f"input-{i}") for i in range(30)]
    old.set({k: (i, None) for i, k in enumerate(keys)})
    beside = Before(memory.transport, body_has(b"DELETE FROM cache_entries WHERE"),
                    lambda: old.set({k: (-1 - i, None) for i, k in enumerate(keys)}))
    summary = rebalance(D1Saver(account_id=memory.account_id, api_token=memory.api_token,
                                api_base_url=memory.base_url, transport=beside,
                                database_ids=ids, previous_database_ids=previous))
    assert beside.fired
    assert summary.cache_entries_moved == 0
    assert summary.memory_changed == summary.memory_misplaced > 0
    assert old.get(keys) == {k: -1 - i for i, k in enumerate(keys)}


def test_a_put_beside_a_move_keeps_its_own_vectors(memory: Memory) -> None:
    """An item put at its new home just before the move's copy lands keeps the vectors of its
    new value: the copy's older vectors of that item do not land over them, so a search by
    meaning scores the item by what it holds now."""
    from d1saver.compaction.rebalance import rebalance
    index = {"dims": 64, "embed": TrigramEmbeddings(), "fields": ["text"]}
    _fill(memory.store(memory.database_ids[:1], index=index))
    ids, previous = memory.database_ids[:2], memory.database_ids[:1]
    store = grown(memory, index=index)
    u = moved(memory)[0]
    beside = Before(memory.transport, body_has(MOVE_IN),
                    lambda: store.put((u, "memories"), "m0", {"text": "a brand new text"}))
    rebalance(_saver(memory, ids, previous, transport=beside))
    assert beside.fired
    hits = memory.store(ids, index=index).search((u, "memories"), query="a brand new text")
    assert [h.key for h in hits][0] == "m0"
    assert hits[0].score == pytest.approx(1.0, abs=1e-6)  # the new text's own vector


def test_a_put_on_the_old_layout_beside_a_move_moves_on_the_next_rebalance(memory: Memory
                                                                           ) -> None:
    """A writer still on the old database list changes an item at its source after the move's
    copy landed, before its delete there: the item stays at the source, and the next rebalance
    moves the newer value (a later updated_at) over that earlier copy, with its vectors, where
    it would have kept the copy and deleted the newer value."""
    from d1saver.compaction.rebalance import rebalance
    index = {"dims": 64, "embed": TrigramEmbeddings(), "fields": ["text"]}
    _fill(memory.store(memory.database_ids[:1], index=index))
    ids, previous = memory.database_ids[:2], memory.database_ids[:1]
    old = memory.store(previous, index=index)  # a process not yet given the new list
    u = moved(memory)[0]

    def put_on_the_old_layout() -> None:
        memory.clock.advance(1)
        old.put((u, "memories"), "m0", {"text": "a brand new text"})

    beside = Before(memory.transport, body_has(MOVE_OUT), put_on_the_old_layout)
    rebalance(_saver(memory, ids, previous, transport=beside))
    assert beside.fired and copies(memory, "store_items")[(f'["{u}","memories"]', "m0")] == 2
    rebalance(_saver(memory, ids, previous))
    assert copies(memory, "store_items")[(f'["{u}","memories"]', "m0")] == 1
    after = memory.store(ids, index=index)
    assert after.get((u, "memories"), "m0").value == {"text": "a brand new text"}  # type: ignore[union-attr]
    hits = after.search((u, "memories"), query="a brand new text")
    assert [h.key for h in hits][0] == "m0"
    assert hits[0].score == pytest.approx(1.0, abs=1e-6)  # the newer value's own vector


def test_a_namespace_met_at_its_new_home_still_gets_its_moved_vectors(memory: Memory) -> None:
    """An item put at its new home while migrating stops only its own key's copy: the other
    items of its namespace (and those of a key the new home holds in another namespace) that
    rebalance moves there land with their vectors (each item's held-or-not is by its full key
    (ns, key)), so a search by meaning scores every one."""
    from d1saver.compaction.rebalance import rebalance
    index = {"dims": 64, "embed": TrigramEmbeddings()}
    _fill(memory.store(memory.database_ids[:1], index=index))
    ids, previous = memory.database_ids[:2], memory.database_ids[:1]
    u = moved(memory)[0]
    # At the new home: an item of the namespace, and one of the same key in another one.
    grown(memory, index=index).batch([
        PutOp((u, "memories"), "new", {"text": f"{u} fact new"}),
        PutOp((u, "elsewhere"), "m0", {"text": "elsewhere"})])
    rebalance(_saver(memory, ids, previous))
    vectors = rows(memory, "store_vectors")
    home = memory.store(ids).home((u,))
    assert sorted(k for ns, k in vectors[home] if ns == f'["{u}","memories"]') == [
        "m0", "m1", "new"]
    hits = memory.store(ids, index=index).search((u, "memories"), query=f"{u} fact 1")
    assert {h.key: h.score is not None for h in hits} == {"m0": True, "m1": True, "new": True}


def test_memory_keys_come_in_pages_each_once_with_the_bytes_a_move_carries(memory: Memory
                                                                          ) -> None:
    """The scan rebalance plans with (admin.memory_keys_page, page after page) lists every item
    and cache entry of a database once, in key order, however the pages cut them; each with
    the bytes its move carries (the value, and an item's own vectors only)."""
    from d1saver import admin
    index = {"dims": 64, "embed": TrigramEmbeddings()}
    store = memory.store(memory.database_ids[:1], index=index)
    store.batch([PutOp((u, sub), f"m{j}", {"text": f"{u} fact {j}" * (j + 1)})
                 for u in USERS[:3] for sub in ("a", "b") for j in range(3)])
    store.put((USERS[0], "a"), "plain", {"text": "no vector"}, index=False)
    memory.cache(memory.database_ids[:1]).set(
        {(node, f"input-{i}"): ("x" * i, None)
         for node in (NODE, ("__pregel_ns_writes", "other")) for i in range(4)})
    view = _saver(memory, memory.database_ids[:1])
    (items, vectors, entries) = view.execute([
        Statement("SELECT ns, key, length(value) FROM store_items"),
        Statement("SELECT ns, key, length(vector) FROM store_vectors"),
        Statement("SELECT ns, key, length(value) FROM cache_entries")])
    want = {"store_items": {(ns, k): n for ns, k, n in items.rows},
            "cache_entries": {(ns, k): n for ns, k, n in entries.rows}}
    for ns, k, n in vectors.rows:
        want["store_items"][(ns, k)] += n
    assert len(want["store_items"]) == 19 and len(vectors.rows) == 18
    for table, size in [("store_items", 4), ("store_items", 19), ("cache_entries", 3)]:
        found: list[Any] = []
        after = None
        for _ in range(10):  # (the most a page of 3 needs is 3: a scan that loops fails)
            (res,) = view.execute([admin.memory_keys_page(table, after, size)])
            keys = admin.read_memory_keys(table, res)
            assert len(keys) <= size
            found += keys
            if len(keys) < size:
                break
            after = keys[-1]
        assert [(k.ns, k.key) for k in found] == sorted(want[table]), (table, size)
        assert {(k.ns, k.key): k.bytes for k in found} == want[table], (table, size)
