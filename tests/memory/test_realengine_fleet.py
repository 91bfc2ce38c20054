"""Memory across keys and fleets on Cloudflare's real D1 engine (issue 30, facts 3, 5, 10): a
gateway of its own (fresh databases: a rebalance and a rekey span whole databases), a store
and a cache grown from one database to two while `rebalance` moves them, a delete beside
the move, then `rekey` of everything they hold and the old key dropped."""

from __future__ import annotations

import asyncio
import secrets
from typing import Any

import pytest
from langgraph.store.base import PutOp

from d1saver.compaction.rebalance import rebalance
from d1saver.compaction.rekey import rekey
from d1saver import D1Cache, D1Saver, D1Store
from tests.memory.embeddings import TrigramEmbeddings
from tests.realengine import gateway

pytestmark = pytest.mark.realengine

K1, K2 = bytes([31]) * 32, bytes([32]) * 32
NODE = ("__pregel_ns_writes", "__main__.double", "double")
USERS = [f"user-{i}" for i in range(10)]


def test_memory_over_a_growing_fleet_and_a_key_rotation_on_the_real_engine() -> None:
    token = secrets.token_hex(16)
    with gateway({"API_TOKEN": token}) as g:
        ids = list(g.databases.values())[:2]

        def kw(**more: Any) -> dict[str, Any]:
            return {"account_id": g.account_id, "api_token": token,
                    "api_base_url": g.base_url, **more}

        index = {"dims": 64, "embed": TrigramEmbeddings()}
        with D1Store(**kw(database_id=ids[0], encryption_keys=[K1]), index=index) as old, \
                D1Cache(**kw(database_id=ids[0], encryption_keys=[K1])) as old_cache:
            old.batch([PutOp((u, "m"), f"k{j}", {"text": f"{u} note {j}"})
                       for u in USERS for j in range(3)])
            old_cache.set({(NODE, f"input-{i}"): (i, None) for i in range(20)})
        moving = kw(database_ids=ids, previous_database_ids=ids[:1], encryption_keys=[K1])
        with D1Store(**moving, index=index) as store, D1Cache(**moving) as cache:
            for u in USERS:  # every item in view before the move
                assert len(store.search((u,))) == 3
            assert len(cache.get([(NODE, f"input-{i}") for i in range(20)])) == 20
            gone = next(u for u in USERS if store.home((u,)) == ids[1])
            store.delete((gone, "m"), "k0")  # a delete while migrating
            store.put((gone, "m"), "k1", {"text": "rewritten"})

            async def gathered() -> list[Any]:  # async calls of one tick while migrating
                got = await asyncio.gather(
                    store.aget((gone, "m"), "k1"),
                    store.aput((gone, "m"), "k1", {"text": "rewritten"}),
                    store.aget((gone, "m"), "k0"), store.asearch((gone,)),
                    cache.aget([(NODE, f"input-{i}") for i in range(20)]))
                await store.aclose()
                await cache.aclose()
                return got

            got = asyncio.run(gathered())
            assert got[0].value == {"text": "rewritten"} and got[1] is None and got[2] is None
            assert sorted(it.key for it in got[3]) == ["k1", "k2"] and len(got[4]) == 20
            summary = rebalance(D1Saver(**moving))
            assert summary.store_items_moved > 0 and summary.cache_entries_moved > 0
            assert summary.memory_changed == 0
        done = kw(database_ids=ids, encryption_keys=[K2, K1])
        with D1Store(**done, index=index) as store, D1Cache(**done) as cache:
            assert store.get((gone, "m"), "k0") is None
            assert store.get((gone, "m"), "k1").value == {"text": "rewritten"}  # type: ignore[union-attr]
            assert store.search((USERS[3],), query=f"{USERS[3]} note 2", limit=1)[0].key == "k2"
            assert len(cache.get([(NODE, f"input-{i}") for i in range(20)])) == 20
            per_db = [cache._exchange(n, [_count()])[0].rows[0][0] for n in cache._databases()]
            assert all(n > 0 for n in per_db), per_db  # the node cache spreads
        keyed = D1Saver(**done)
        before = keyed.key_census()
        assert set(before["store_items"]) == set(before["cache_entries"]) == {K1_ID}
        summary = rekey(keyed)
        assert summary.after is not None
        assert set(summary.after["store_items"]) == set(summary.after["cache_entries"]) == {K2_ID}
        newest = kw(database_ids=ids, encryption_keys=[K2])
        with D1Store(**newest, index=index) as store, D1Cache(**newest) as cache:
            assert len(store.search((), limit=100)) == 3 * len(USERS) - 1
            assert len(cache.get([(NODE, f"input-{i}") for i in range(20)])) == 20


def _count() -> Any:
    from d1saver import Statement
    return Statement("SELECT COUNT(*) FROM cache_entries")


def _kid(key: bytes) -> str:
    from d1saver.storage.crypto import key_id
    return key_id(key).hex()


K1_ID, K2_ID = _kid(K1), _kid(K2)
