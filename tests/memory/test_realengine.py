"""Every statement of D1Store and D1Cache on Cloudflare's real D1 engine (workerd, through the
gateway Worker that Wrangler runs locally): put, get, search (filter, meaning), list_namespaces,
TTL and its sweep, the cache, sync and async, and a fleet of the gateway's four databases.
The engine's databases are shared with other tests: every namespace here is unique."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from langgraph.store.base import GetOp, PutOp, SearchOp

from d1saver import Statement
from tests.memory.conftest import Memory
from tests.memory.embeddings import TrigramEmbeddings
from tests.realengine import RealD1

pytestmark = pytest.mark.realengine


@pytest.fixture
def real(wrangler_d1: RealD1) -> Iterator[Memory]:
    yield Memory(wrangler_d1.base_url, wrangler_d1.api_token, wrangler_d1.account_id,
                 list(wrangler_d1.databases.values()))


@pytest.fixture
def tag() -> str:
    return f"re-{uuid.uuid4().hex[:8]}"


HOSTILE = ["%", "_", "*", "?", "[x]", "+", "a\nb", ":", "é"]


def test_store_on_the_real_engine(real: Memory, tag: str) -> None:
    store = real.store(index={"dims": 64, "embed": TrigramEmbeddings()})
    store.setup()
    ops = [PutOp((tag, label), "k", {"label": label, "n": i, "text": f"note {label} coffee"})
           for i, label in enumerate(HOSTILE)]
    ops.append(PutOp((tag, "big"), "k", {"text": "memory " * 400_000}, index=False))
    _, n = real.requests(lambda: store.batch(ops))
    assert n == 1
    for i, label in enumerate(HOSTILE):
        assert [it.value["n"] for it in store.search((tag, label))] == [i]
    assert store.get((tag, "big"), "k").value["text"].startswith("memory ")  # type: ignore[union-attr]
    assert len(store.list_namespaces(prefix=(tag,))) == len(HOSTILE) + 1
    assert store.list_namespaces(prefix=(tag,), max_depth=1) == [(tag,)]
    found, n = real.requests(lambda: store.batch([
        GetOp((tag, "%"), "k"), SearchOp((tag,), {"n": {"$gte": 7}}, 10, 0),
        SearchOp((tag,), None, 3, 0, "note ? coffee"), SearchOp((tag,), None, 2, 1),
        SearchOp((tag,), {"label": "%", "n": 0}, 10, 0),
        SearchOp((tag,), {"n": 3.0}, 10, 0, "coffee"), SearchOp((tag,), {"label": None}, 10, 0)]))
    assert n == 1
    assert [it.value["label"] for it in found[4]] == ["%"]
    assert [it.value["n"] for it in found[5]] == [3]
    assert [it.key for it in found[6]] == ["k"]  # the big item has no label
    assert found[0].value["label"] == "%"
    assert sorted(it.value["n"] for it in found[1]) == [7, 8]
    assert found[2][0].value["label"] == "?" and found[2][0].score is not None
    assert len(found[3]) == 2
    store.delete((tag, "%"), "k")
    assert store.get((tag, "%"), "k") is None


def test_ttl_and_sweep_on_the_real_engine(real: Memory, tag: str) -> None:
    store = real.store()
    store.put((tag,), "short", {"v": 1}, ttl=1)
    store.put((tag,), "long", {"v": 2}, ttl=10)
    real.clock.advance(30)
    assert store.get((tag,), "short") is not None  # refreshed: now expires at 90 s
    real.clock.advance(80)  # 110 s: short expired at 90 s, long lives until 600 s
    assert [i.key for i in store.search((tag,), refresh_ttl=False)] == ["long"]
    real.clock.advance(600)
    assert store.search((tag,)) == [] and store.list_namespaces(prefix=(tag,)) == []
    assert store.sweep_ttl() >= 2
    db = store._databases()[0]
    (rows,) = store._exchange(db, [Statement(
        "SELECT COUNT(*) FROM store_items WHERE ns = ?1", (f'["{tag}"]',))])
    assert rows.rows == [[0]]


@pytest.mark.anyio
async def test_async_store_and_cache_on_the_real_engine(real: Memory, tag: str) -> None:
    store, cache = real.store(), real.cache()
    await store.aput((tag, "a"), "k", {"v": 1})
    assert (await store.aget((tag, "a"), "k")).value == {"v": 1}  # type: ignore[union-attr]
    assert await store.alist_namespaces(prefix=(tag,)) == [(tag, "a")]
    pairs = {((tag, "n"), f"k{i}"): ({"i": i}, 10 if i % 2 else None) for i in range(50)}
    before = len(real.events)
    await cache.aset(pairs)
    found = await cache.aget(list(pairs))
    assert len(real.events) - before == 2 and len(found) == 50
    real.clock.advance(11)
    assert len(await cache.aget(list(pairs))) == 25
    assert cache.sweep_ttl() >= 25
    await cache.aclear([(tag, "n")])
    assert await cache.aget(list(pairs)) == {}
    await store.aclose()
    await cache.aclose()


def test_fleet_on_the_real_engine(real: Memory, tag: str) -> None:
    store = real.store(real.database_ids)
    users = [f"{tag}-u{i}" for i in range(8)]
    store.batch([PutOp((u, "m"), "k", {"u": u}) for u in users])
    assert len({store.home((u,)) for u in users}) > 1
    for u in users:
        assert store.get((u, "m"), "k").value == {"u": u}  # type: ignore[union-attr]
    listed = [ns for ns in store.list_namespaces(limit=10_000) if ns[0].startswith(tag)]
    assert listed == sorted((u, "m") for u in users)
    for u in users:
        store.delete_namespace((u,))


@pytest.mark.anyio
async def test_gathered_calls_on_the_real_engine(real: Memory, tag: str) -> None:
    """Concurrent calls as one request: groups in call order in one D1 batch (a get after a put
    of its key, a search after the puts of its namespace), the cache's gets, sets and clear."""
    import asyncio

    store, cache = real.store(), real.cache()
    await store.asetup()
    before = len(real.events)
    calls = []
    for i in range(20):
        calls += [store.aput((tag, "g"), f"k{i % 5}", {"i": i}), store.aget((tag, "g"), f"k{i % 5}")]
    calls.append(store.asearch((tag, "g"), filter={"i": {"$gte": 15}}, limit=10))
    got = await asyncio.gather(*calls)
    assert len(real.events) - before == 1
    assert [g.value["i"] for g in got[1:40:2]] == list(range(20))
    assert sorted(it.value["i"] for it in got[-1]) == [15, 16, 17, 18, 19]
    key = ((tag, "c"), "x")
    before = len(real.events)
    out = await asyncio.gather(cache.aset({key: (1, None)}), cache.aget([key]),
                               cache.aclear([(tag, "c")]), cache.aget([key]),
                               cache.aset({key: (2, 60)}), cache.aget([key]))
    assert len(real.events) - before == 1
    assert out == [None, {key: 1}, None, {}, None, {key: 2}]
    await store.aclose()
    await cache.aclose()
