"""D1Store and D1Cache over four databases: a namespace lives in the database of its first
label; what a prefix pins goes to one database in one request; the rest asks every database
and merges, with the same answers as one database gives."""

from __future__ import annotations

from collections import Counter

from langgraph.store.base import GetOp, PutOp, SearchOp

from d1saver import Statement
from tests.memory.conftest import Memory
from tests.memory.embeddings import TrigramEmbeddings

USERS = [f"user-{i}" for i in range(12)]


def _per_db(memory: Memory, fn: object) -> tuple[object, Counter[str]]:
    before = len(memory.events)
    out = fn()  # type: ignore[operator]
    return out, Counter(str(e.database_id) for e in memory.events[before:])


def _fill(store: object) -> None:
    store.batch([PutOp((u, "memories"), f"m{j}", {"text": f"{u} fact {j}", "j": j})  # type: ignore[attr-defined]
                 for u in USERS for j in range(3)])


def test_items_live_in_the_database_of_their_first_label(memory: Memory) -> None:
    store = memory.store(memory.database_ids)
    store.setup()
    _fill(store)
    homes = {u: store.home((u,)) for u in USERS}
    assert len(set(homes.values())) > 1
    for db in memory.database_ids:
        one = memory.store([db])
        (result,) = one._exchange(one._databases()[0], [Statement("SELECT DISTINCT ns FROM store_items")])
        users = {ns[2:-2].split('","')[0] for (ns,) in result.rows}
        assert users == {u for u, h in homes.items() if h == db}


def test_requests_go_where_the_namespace_lives(memory: Memory) -> None:
    store = memory.store(memory.database_ids)
    store.setup()
    _, per_db = _per_db(memory, lambda: _fill(store))
    assert sum(per_db.values()) == len(set(store.home((u,)) for u in USERS))
    assert max(per_db.values()) == 1  # one request per database touched
    u = USERS[0]
    found, per_db = _per_db(memory, lambda: store.search((u,)))
    assert per_db == Counter({store.home((u,)): 1}) and len(found) == 3  # type: ignore[arg-type]
    found, per_db = _per_db(memory, lambda: store.batch([GetOp((u, "memories"), "m1"),
                                                        SearchOp((u, "memories"), None, 2, 0)]))
    assert per_db == Counter({store.home((u,)): 1})
    _, per_db = _per_db(memory, lambda: store.list_namespaces(prefix=(u,)))
    assert sum(per_db.values()) == 1
    _, per_db = _per_db(memory, lambda: store.list_namespaces())
    assert per_db == Counter({db: 1 for db in memory.database_ids})


def test_the_fleet_answers_as_one_database(memory: Memory) -> None:
    fleet = memory.store(memory.database_ids, index={"dims": 64, "embed": TrigramEmbeddings()})
    # One database of its own (one of the fleet's would hold both stores' copies of an item:
    # the fleet reads an item from its home).
    one = memory.store([f"{memory.database_ids[0]}-one"],
                       index={"dims": 64, "embed": TrigramEmbeddings()})
    for s in (fleet, one):
        _fill(s)
        memory.clock.advance(0.01)
        s.put(("user-3", "memories"), "newest", {"text": "latest", "j": 9})
    for kwargs in [{}, {"limit": 5}, {"limit": 4, "offset": 6}, {"filter": {"j": 1}},
                   {"filter": {"j": {"$gte": 1}}, "limit": 7, "offset": 3},
                   {"query": "user-7 fact 2", "limit": 3}, {"query": "fact", "limit": 4, "offset": 2}]:
        got = [(i.namespace, i.key) for i in fleet.search((), **kwargs)]  # type: ignore[arg-type]
        want = [(i.namespace, i.key) for i in one.search((), **kwargs)]  # type: ignore[arg-type]
        assert got == want, kwargs
    for kwargs in [{}, {"max_depth": 1}, {"suffix": ("memories",)}, {"limit": 3, "offset": 2},
                   {"prefix": ("*", "memories")}]:
        assert fleet.list_namespaces(**kwargs) == one.list_namespaces(**kwargs), kwargs


def test_ttl_sweep_and_delete_namespace_over_the_fleet(memory: Memory) -> None:
    store = memory.store(memory.database_ids)
    store.batch([PutOp((u, "tmp"), "k", {"v": 1}, ttl=1) for u in USERS])
    _fill(store)
    memory.clock.advance(61)
    assert store.search((), limit=100, filter={"v": 1}) == []
    assert store.sweep_ttl() == len(USERS)
    assert store.delete_namespace(("user-1",)) == 3
    assert store.delete_namespace(()) == 3 * (len(USERS) - 1)


def test_cache_over_the_fleet_is_one_request_per_database(memory: Memory) -> None:
    cache = memory.cache(memory.database_ids)
    cache.setup()
    pairs = {((u,), "k"): (u, None) for u in USERS}
    _, per_db = _per_db(memory, lambda: cache.set(pairs))
    assert max(per_db.values()) == 1
    found, per_db = _per_db(memory, lambda: cache.get(list(pairs)))
    assert found == {k: v for k, (v, _) in pairs.items()} and max(per_db.values()) == 1
    cache.clear()
    assert cache.get(list(pairs)) == {}
