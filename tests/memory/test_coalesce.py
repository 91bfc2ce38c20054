"""Concurrent async store and cache calls share requests: the calls of one event-loop tick
leave as one request per database, in call order, each with its own result or error
(d1saver/memory/coalesce.py). Counted in requests; compared with InMemoryStore, whose async
calls run one by one in call order, over seeded random concurrent mixes."""

from __future__ import annotations

import asyncio
import random
from typing import Any

import pytest
from langgraph.store.base import GetOp, PutOp, SearchOp
from langgraph.store.memory import InMemoryStore

from d1saver import D1Cache, D1Store, InvalidInputError
from d1saver.core.errors import FleetError, QueryError
from d1saver.core.protocol import Statement
from d1saver.http.group_commit import MAX_STATEMENTS
from d1saver.local import LocalD1, LocalD1Transport
from tests.conftest import LOCAL_BASE_URL
from tests.memory.conftest import Memory
from tests.reliability.harness import soak_budget


def _run(coro: Any) -> Any:
    return asyncio.run(coro)


async def _counted(memory: Memory, coro: Any) -> tuple[Any, int]:
    before = len(memory.events)
    out = await coro
    return out, len(memory.events) - before


# --- requests --------------------------------------------------------------------------------


def test_hundred_aputs_then_hundred_agets_one_request_each(memory: Memory) -> None:
    async def main() -> None:
        store = memory.store()
        await store.asetup()
        _, n = await _counted(memory, asyncio.gather(
            *(store.aput(("users", str(i % 7)), f"k{i}", {"i": i}) for i in range(100))))
        assert n == 1
        got, n = await _counted(memory, asyncio.gather(
            *(store.aget(("users", str(i % 7)), f"k{i}") for i in range(100))))
        assert n == 1
        assert [g.value["i"] for g in got] == list(range(100))
        found, n = await _counted(memory, asyncio.gather(
            *(store.asearch(("users", str(i)), limit=100) for i in range(7))))
        assert n == 1
        assert sum(len(f) for f in found) == 100
        assert store._tick.flushes == 3

    _run(main())


def test_puts_and_gets_of_one_tick_one_request(memory: Memory) -> None:
    async def main() -> None:
        store = memory.store()
        await store.asetup()
        calls = []
        for i in range(100):
            calls.append(store.aput(("a",), f"k{i % 10}", {"v": i}))
            calls.append(store.aget(("a",), f"k{i % 10}"))
        got, n = await _counted(memory, asyncio.gather(*calls))
        assert n == 1  # 200 alternating calls: every get after a put of its key, one request
        assert [g.value["v"] for g in got[1::2]] == list(range(100))

    _run(main())


def test_one_request_per_database_touched(memory: Memory) -> None:
    async def main() -> None:
        store = memory.store(memory.database_ids)
        await store.asetup()
        labels = [f"user-{i}" for i in range(40)]
        homes = {store.home((label,)) for label in labels}
        assert len(homes) > 1
        events = len(memory.events)
        await asyncio.gather(*(store.aput((label,), "k", {"l": label}) for label in labels))
        sent = memory.events[events:]
        assert len(sent) == len(homes)
        got = await asyncio.gather(*(store.aget((label,), "k") for label in labels))
        assert [g.value["l"] for g in got] == labels
        assert len(memory.events) - events == 2 * len(homes)

    _run(main())


def test_cache_hundred_asets_then_agets_one_request_each(memory: Memory) -> None:
    async def main() -> None:
        cache: D1Cache[Any] = memory.cache()
        await cache.asetup()
        _, n = await _counted(memory, asyncio.gather(
            *(cache.aset({(("n", str(i % 3)), f"k{i}"): (i, None)}) for i in range(100))))
        assert n == 1
        got, n = await _counted(memory, asyncio.gather(
            *(cache.aget([(("n", str(i % 3)), f"k{i}"), (("n",), "missing")])
              for i in range(100))))
        assert n == 1
        assert got == [{(("n", str(i % 3)), f"k{i}"): i} for i in range(100)]
        # in call order: a set, a get of it, a clear, a get after it, one request
        ks = [(("o",), "x")]
        out, n = await _counted(memory, asyncio.gather(
            cache.aset({ks[0]: (1, None)}), cache.aget(ks), cache.aclear([("o",)]),
            cache.aget(ks), cache.aset({ks[0]: (2, None)}), cache.aget(ks)))
        assert n == 1
        assert out == [None, {ks[0]: 1}, None, {}, None, {ks[0]: 2}]

    _run(main())


def test_gathered_batch_past_the_statements_bound_is_split(memory: Memory) -> None:
    async def main() -> None:
        store = memory.store()
        await store.asetup()
        # each get after a put of its key starts a group: 2 statements per group, 600 groups
        calls = []
        for i in range(600):
            calls.append(store.aput(("a",), "same", {"v": i}))
            calls.append(store.aget(("a",), "same"))
        before = len(memory.events)
        got = await asyncio.gather(*calls)
        sent = memory.events[before:]
        assert 5 <= len(sent) <= 6  # 3 statements per group: 1,800 in requests of at most 400
        assert all(len(e.statements) <= MAX_STATEMENTS for e in sent)
        assert [g.value["v"] for g in got[1::2]] == list(range(600))

    _run(main())


def test_a_gathered_batch_cut_into_parts_plans_each_call_at_most_twice(memory: Memory) -> None:
    """A batch past the bound is planned once whole, then in parts of the size the cut gives;
    it planned the whole tail again after each part, so its time and memory grew with the
    square of the calls (LangGraph's test_large_batches_async: 70,000 calls did not end)."""
    async def main() -> None:
        store, cache = memory.store(), memory.cache()
        await store.asetup()
        await cache.asetup()
        for target, put, get in (
                (store, lambda i: store.aput(("a",), "same", {"v": i}),
                 lambda i: store.aget(("a",), "same")),
                (cache, lambda i: cache.aset({(("a",), "same"): (i, None)}),
                 lambda i: cache.aget([(("a",), "same")]))):
            planned: list[int] = []
            send = target._asend_chunk

            async def counted(chunk: Any, send: Any = send, planned: list[int] = planned) -> None:
                planned.append(len(chunk))
                await send(chunk)

            target._asend_chunk = counted
            calls = [f(i) for i in range(1500) for f in (put, get)]
            before = len(memory.events)
            got = await asyncio.gather(*calls)
            sent = memory.events[before:]
            assert all(len(e.statements) <= MAX_STATEMENTS for e in sent)
            assert planned[0] == 3000 and sum(planned) <= 2 * 3000 + len(sent)
            answers = got[1::2]
            assert [g.value["v"] if target is store else g[(("a",), "same")]
                    for g in answers] == list(range(1500))

    _run(main())


# --- each call its own outcome ------------------------------------------------------------------


def test_bad_input_fails_its_call_alone_before_anything_is_sent(memory: Memory) -> None:
    async def main() -> None:
        store = memory.store()
        await store.asetup()
        out, n = await _counted(memory, asyncio.gather(
            store.aput(("a",), "k1", {"v": 1}),
            store.aput(("a",), "bad", {"v": 2}, ttl=-5),  # a negative TTL
            store.aget(("a",), "k1"),
            store.asearch(("a",), limit=-1),             # a negative limit
            return_exceptions=True))
        assert n == 1
        assert out[0] is None and out[2].value == {"v": 1}
        assert isinstance(out[1], InvalidInputError) and isinstance(out[3], InvalidInputError)

    _run(main())


def test_a_failing_database_fails_only_the_calls_that_went_there() -> None:
    engine = LocalD1(create=False)
    engine.create_database("good")
    events: list[Any] = []
    store = D1Store(account_id="acc", api_token="t", api_base_url=LOCAL_BASE_URL,
                    database_ids=["good", "gone"], transport=LocalD1Transport(engine),
                    tracer=events.append, route=lambda label: label)

    async def main() -> None:
        out = await asyncio.gather(
            store.aput(("good",), "k", {"v": 1}), store.aput(("gone",), "k", {"v": 2}),
            store.aget(("good",), "k"), store.aget(("gone",), "k"),
            store.asearch(("good",)), store.asearch(()),  # the last spans both databases
            return_exceptions=True)
        assert out[0] is None and out[2].value == {"v": 1} and [i.key for i in out[4]] == ["k"]
        assert all(isinstance(out[i], FleetError) for i in (1, 3, 5))  # as Fleet.each says
        assert [list(out[i].errors) for i in (1, 3, 5)] == [["gone"]] * 3
        assert await store.aget(("good",), "k") is not None

    try:
        _run(main())
    finally:
        engine.close()


def test_an_sql_error_is_retried_alone_so_only_its_calls_fail(memory: Memory) -> None:
    async def main() -> None:
        store = memory.store()
        await store.asetup()
        await store.aput(("a",), "there", {"v": 0})
        db = store._database(("a",))
        await store._aexchange(db, [Statement("DROP TABLE store_vectors")])
        before = len(memory.events)
        out = await asyncio.gather(store.aput(("a",), "k", {"v": 1}), store.aget(("a",), "there"),
                                   store.asearch(("a",)), return_exceptions=True)
        # the shared request fails on the put's statements; each call is sent again alone
        assert isinstance(out[0], QueryError)
        assert out[1].value == {"v": 0} and [it.key for it in out[2]] == ["there"]
        sent = [([st.name for st in e.statements], e.error is None)
                for e in memory.events[before:]]
        shared = ["REFRESH_ITEMS", "GET_ITEMS", "DELETE_VECTORS", "PUT_ITEMS",  # one group,
                  "REFRESH_SEARCH", "SEARCH_ITEMS"]  # then the search, which sees the put
        # (each failed request is tried twice: the driver checks for a missing schema)
        assert sent == [(shared, False)] * 2 + [(["DELETE_VECTORS", "PUT_ITEMS"], False)] * 2 + [
            (["REFRESH_ITEMS", "GET_ITEMS"], True), (["REFRESH_SEARCH", "SEARCH_ITEMS"], True)]

    _run(main())


def test_a_cancelled_caller_breaks_no_other() -> None:
    engine = LocalD1()
    events: list[Any] = []
    store = D1Store(account_id="acc", api_token="t", api_base_url=LOCAL_BASE_URL,
                    database_id="db", transport=LocalD1Transport(engine, latency_ms=50),
                    tracer=events.append)

    async def main() -> None:
        await store.asetup()
        # cancelled before the tick's flush: left out, the others sent
        tasks = [asyncio.ensure_future(store.aput(("a",), f"k{i}", {"i": i})) for i in range(5)]
        tasks[0].cancel()
        out = await asyncio.gather(*tasks, return_exceptions=True)
        assert isinstance(out[0], asyncio.CancelledError) and out[1:] == [None] * 4
        assert await store.aget(("a",), "k0") is None
        # cancelled while its request is in flight: the others get their answers
        tasks = [asyncio.ensure_future(store.aput(("b",), f"k{i}", {"i": i})) for i in range(5)]
        await asyncio.sleep(0.02)
        tasks[2].cancel()
        out = await asyncio.gather(*tasks, return_exceptions=True)
        assert isinstance(out[2], asyncio.CancelledError)
        assert out[:2] == [None, None] and out[3:] == [None, None]
        assert [it.key for it in await store.asearch(("b",), limit=10)].count("k1") == 1
        # the store still serves the loop
        assert (await store.aget(("a",), "k1")).value == {"i": 1}  # type: ignore[union-attr]

    try:
        _run(main())
    finally:
        engine.close()


# --- the same answers as InMemoryStore, calls in call order ------------------------------------

NAMESPACES = [("a",), ("a", "b"), ("c",)]
KEYS = ["k0", "k1", "k2"]


def _call(store: Any, rng: random.Random, namespaces: list[Any] = NAMESPACES) -> Any:
    """A random call: the same arguments for both stores (the rng drawn once)."""
    kind = rng.choice(["put", "put", "delete", "get", "get", "search", "list", "batch"])
    ns, key = rng.choice(namespaces), rng.choice(KEYS)
    if kind == "put":
        value = {"n": rng.randrange(3), "s": rng.choice("xyz")}
        return lambda s: s.aput(ns, key, value)
    if kind == "delete":
        return lambda s: s.adelete(ns, key)
    if kind == "get":
        return lambda s: s.aget(ns, key)
    if kind == "search":
        prefix = rng.choice([(), ("a",), ("a", "b"), ("c",), *(n[:1] for n in namespaces)])
        flt = rng.choice([None, {"n": 1}, {"s": "x"}])
        return lambda s: s.asearch(prefix, filter=flt, limit=100)
    if kind == "list":
        prefix = rng.choice([None, ("a",)])
        return lambda s: _listing(s, prefix)
    ops: list[Any] = []
    for _ in range(rng.randint(1, 4)):
        ns2, key2 = rng.choice(namespaces), rng.choice(KEYS)
        ops.append(rng.choice([PutOp(ns2, key2, {"n": rng.randrange(3)}), PutOp(ns2, key2, None),
                               GetOp(ns2, key2), SearchOp(ns2[:1], None, 100)]))
    return lambda s: s.abatch(ops)


async def _listing(store: Any, prefix: Any) -> Any:
    if isinstance(store, InMemoryStore):  # it lists namespaces a get looked into; ours are items'
        items = await store.asearch((), limit=1000)
        names = {tuple(it.namespace) for it in items}
        return sorted(n for n in names if prefix is None or n[: len(prefix)] == prefix)
    return await store.alist_namespaces(prefix=prefix)


def _plain(x: Any) -> Any:
    if isinstance(x, list):
        out = [_plain(v) for v in x]
        return sorted(out, key=repr) if out and isinstance(out[0], tuple) and len(out[0]) == 3 \
            else out
    if x is None or isinstance(x, tuple):
        return x
    if hasattr(x, "key"):
        return (tuple(x.namespace), x.key, x.value)
    return x


def test_concurrent_mixes_answer_as_in_memory_store_calls_in_order(
        memory: Memory, request: pytest.FixtureRequest) -> None:
    seeds = soak_budget(request, ci=6, soak=200)

    async def main() -> None:
        for seed in range(seeds):
            rng = random.Random(seed)
            ours = memory.store(memory.database_ids[: rng.choice([1, 3])])
            await ours.asetup()
            for db in ours._databases():
                await ours._aexchange(db, [Statement("DELETE FROM store_items")])
            ref = InMemoryStore()
            for step in range(6):
                calls = [_call(ref, rng) for _ in range(rng.randint(1, 25))]
                want = [await c(ref) for c in calls]  # one by one, in call order
                before = len(memory.events)
                got = await asyncio.gather(*(c(ours) for c in calls))
                assert len(memory.events) - before <= len(ours.database_ids)
                for n, (w, g) in enumerate(zip(want, got, strict=True)):
                    assert _plain(g) == _plain(w), f"seed {seed} step {step} call {n}"
                memory.clock.advance(1)

    _run(main())


def _cache_call(rng: random.Random, namespaces: list[Any] = NAMESPACES) -> Any:
    keys = [(ns, k) for ns in namespaces for k in KEYS]
    kind = rng.choice(["set", "set", "get", "get", "clear"])
    if kind == "set":
        pairs = {rng.choice(keys): (rng.randrange(5), None) for _ in range(rng.randint(1, 3))}
        return lambda c: c.aset(pairs)
    if kind == "get":
        asked = rng.sample(keys, rng.randint(1, 4))
        return lambda c: c.aget(asked)
    spaces = None if rng.random() < 0.3 else rng.sample(namespaces, rng.randint(1, 2))
    return lambda c: c.aclear(spaces)


def test_concurrent_cache_mixes_answer_as_in_memory_cache_calls_in_order(
        memory: Memory, request: pytest.FixtureRequest) -> None:
    from langgraph.cache.memory import InMemoryCache

    seeds = soak_budget(request, ci=6, soak=200)

    async def main() -> None:
        for seed in range(seeds):
            rng = random.Random(seed)
            ours: D1Cache[Any] = memory.cache(memory.database_ids[: rng.choice([1, 3])])
            await ours.asetup()
            await ours.aclear()
            ref: InMemoryCache[Any] = InMemoryCache()
            for step in range(6):
                calls = [_cache_call(rng) for _ in range(rng.randint(1, 25))]
                want = [await c(ref) for c in calls]  # one by one, in call order
                before = len(memory.events)
                got = await asyncio.gather(*(c(ours) for c in calls))
                assert len(memory.events) - before <= len(ours.database_ids)
                assert got == want, f"seed {seed} step {step}"

    _run(main())


# --- while migrating: what moved takes its rounds, in its place in call order -------------------

# First labels enough for some to move when the fleet grows from two databases to three.
MOVING = [("a",), ("a", "b"), ("c",), ("u1",), ("u2", "x"), ("u3",), ("u4",)]


def test_concurrent_mixes_while_migrating_answer_as_in_memory_store_calls_in_order(
        memory: Memory, request: pytest.FixtureRequest) -> None:
    """A store with previous_database_ids, its items written where the previous layout put
    them: gathered calls of one tick (those of what moved sent alone, in their rounds, between
    the gathered ones) answer as InMemoryStore's calls one by one, in call order."""
    seeds = soak_budget(request, ci=6, soak=200)
    ids, previous = memory.database_ids[:3], memory.database_ids[:2]

    async def main() -> None:
        for seed in range(seeds):
            rng = random.Random(seed)
            old = memory.store(previous)
            await old.asetup()
            for db in memory.store(ids)._databases():
                await old._aexchange(db, [Statement("DELETE FROM store_items")])
            ours = memory.store(ids, previous_database_ids=previous)
            # The databases' ids are new each run, so which namespaces move is drawn too (none
            # of MOVING in about 1 run of 11): then one that does is added.
            moving = list(MOVING)
            if not any(ours.layout.item_previous(ns) for ns in moving):
                moving.append(next(ns for ns in ((f"m{i}",) for i in range(1000))
                                   if ours.layout.item_previous(ns)))
            ref = InMemoryStore()
            seeded = [PutOp(ns, key, {"n": rng.randrange(3), "s": rng.choice("xyz")})
                      for ns in moving for key in KEYS if rng.random() < 0.5]
            await old.abatch(seeded)  # where the previous layout put them
            await ref.abatch(seeded)
            flags = _spy(ours)
            for step in range(6):
                calls = [_call(ref, rng, moving) for _ in range(rng.randint(1, 25))]
                want = [await c(ref) for c in calls]  # one by one, in call order
                flushes = ours._tick.flushes
                got = await asyncio.gather(*(c(ours) for c in calls))
                assert ours._tick.flushes - flushes == 1  # one tick, one flush
                for n, (w, g) in enumerate(zip(want, got, strict=True)):
                    assert _plain(g) == _plain(w), f"seed {seed} step {step} call {n}"
                memory.clock.advance(1)
            assert True in flags and False in flags  # sent alone and gathered, both

    _run(main())


def _spy(memory: Any) -> list[bool]:
    """Record whether each call submitted to `memory`'s tick is sent alone."""
    flags: list[bool] = []
    submit = memory._tick.submit

    async def spy(work: Any, **kwargs: Any) -> Any:
        flags.append(bool(kwargs.get("alone")))
        return await submit(work, **kwargs)

    memory._tick.submit = spy
    return flags


def test_concurrent_cache_mixes_while_migrating_answer_as_in_memory_cache_calls_in_order(
        memory: Memory, request: pytest.FixtureRequest) -> None:
    """A cache with previous_database_ids, entries set where the previous layout put them:
    gathered calls (gets and sets of what may still be at a previous home, and clears, sent
    alone in their rounds) answer as InMemoryCache's calls one by one, in call order."""
    from langgraph.cache.memory import InMemoryCache

    seeds = soak_budget(request, ci=6, soak=200)
    ids, previous = memory.database_ids[:3], memory.database_ids[:2]

    async def main() -> None:
        for seed in range(seeds):
            rng = random.Random(seed)
            old: D1Cache[Any] = memory.cache(previous)
            await old.asetup()
            await memory.cache(ids).aclear()
            ours: D1Cache[Any] = memory.cache(ids, previous_database_ids=previous)
            ref: InMemoryCache[Any] = InMemoryCache()
            flags = _spy(ours)
            seeded = {(ns, key): (rng.randrange(5), None) for ns in MOVING for key in KEYS
                      if rng.random() < 0.5}
            await old.aset(seeded)
            await ref.aset(seeded)
            for step in range(6):
                calls = [_cache_call(rng, MOVING) for _ in range(rng.randint(1, 25))]
                want = [await c(ref) for c in calls]  # one by one, in call order
                got = await asyncio.gather(*(c(ours) for c in calls))
                assert got == want, f"seed {seed} step {step}"
            assert True in flags and False in flags  # sent alone and gathered, both

    _run(main())


def test_asyncio_run_per_call_keeps_no_loop(memory: Memory) -> None:
    """50 x asyncio.run(aput): each call its own loop, and the store keeps none of them."""
    import gc

    store = memory.store()
    store.setup()
    for i in range(50):
        asyncio.run(store.aput(("a",), f"k{i}", {"i": i}))
    gc.collect()
    assert len(store._tick._queues) == 0 and not store._tick._tasks
    assert store.get(("a",), "k49").value == {"i": 49}  # type: ignore[union-attr]


def test_gathered_search_by_meaning_answers_as_in_memory_store(memory: Memory) -> None:
    """With an index: the texts of a tick's puts embedded in one call, and ranked searches
    that see the puts before them, as InMemoryStore's calls one by one."""
    from tests.memory.embeddings import TrigramEmbeddings

    words = ["coffee beans", "green tea", "black coffee", "football match", "tea party"]

    def ranked(found: list[Any]) -> list[tuple[Any, ...]]:
        return sorted((tuple(it.namespace), it.key, round(it.score, 6)) for it in found)

    async def main() -> None:
        for seed in range(3):
            rng = random.Random(seed)
            embed = TrigramEmbeddings(32)
            index: Any = {"dims": 32, "embed": embed, "fields": ["text"]}
            ours = memory.store(memory.database_ids[: rng.choice([1, 3])], index=index)
            await ours.asetup()
            for db in ours._databases():
                await ours._aexchange(db, [Statement("DELETE FROM store_items"),
                                             Statement("DELETE FROM store_vectors")])
            ref = InMemoryStore(index=index)
            for step in range(4):
                calls: list[Any] = []
                asked: set[str] = set()
                for _ in range(rng.randint(2, 12)):
                    ns, key = rng.choice(NAMESPACES), rng.choice(KEYS)
                    text = " and ".join(rng.sample(words, 2))
                    query = rng.choice(words)
                    kind = rng.choice(["put", "search", "delete"])
                    if kind == "put":
                        calls.append(lambda s, ns=ns, key=key, text=text:
                                     s.aput(ns, key, {"text": text}))
                    elif kind == "search":
                        asked.add(query)
                        calls.append(lambda s, ns=ns, query=query:
                                     s.asearch(ns[:1], query=query, limit=100))
                    else:
                        calls.append(lambda s, ns=ns, key=key: s.adelete(ns, key))
                want = [await c(ref) for c in calls]
                embedded = embed.calls
                got = await asyncio.gather(*(c(ours) for c in calls))
                # every put's texts in one call, each query of the tick once
                assert embed.calls - embedded <= 1 + len(asked)
                for n, (w, g) in enumerate(zip(want, got, strict=True)):
                    if isinstance(w, list):
                        assert ranked(g) == ranked(w), f"seed {seed} step {step} call {n}"
                    else:
                        assert g == w

    _run(main())
