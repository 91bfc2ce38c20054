"""Memory exact at any size and input (issue 30's facts 1, 2, 4, 6, 8, 9): full filtered pages,
bad filters, TTLs and keys refused before anything is sent, large values and large key lists
split under D1's limits. Each runs on the local D1 (one database, with keys, a fleet of four)
and the ones marked `real` on the real engine too."""

from __future__ import annotations

import asyncio
import math
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from langgraph.store.base import GetOp, PutOp, SearchOp
from langgraph.store.memory import InMemoryStore

from d1saver import D1Error, InvalidInputError, ValueTooLargeError
from tests.memory.facade import Facade, drive
from tests.memory.subjects import D1Subject, make_subject, subject_params


@pytest.fixture(params=subject_params(real=True))
def d1(request: pytest.FixtureRequest) -> Iterator[D1Subject]:
    s = make_subject(request.param, request)
    yield s
    s.close()


def _page(store: Any, root: tuple[str, ...], filter: dict[str, Any], limit: int,
          offset: int = 0) -> list[str]:
    return [i.key for i in store.search(root + ("f",), filter=filter, limit=limit,
                                        offset=offset)]


# -- fact 1: a filtered page holds every match InMemoryStore's page holds -----------------------
# (older item first, then newer items SQL used to count toward the page and Python dropped)
SHORT_PAGES: list[tuple[str, dict[str, Any], list[dict[str, Any]], dict[str, Any]]] = [
    ("key absent", {"kind": "todo"}, [{"other": 1}] * 3, {"kind": "todo"}),
    ("$eq of an object is ==", {"a": {"b": 1}}, [{"a": {"b": 1, "c": 2}}] * 3,
     {"a": {"$eq": {"b": 1}}}),
    ("beyond 2^53", {"n": 10**20}, [{"n": 10**20 + 1}] * 3, {"n": 1e20}),
    ("beyond 2^53, integer operand", {"n": 2**53 + 1}, [{"n": 2**53}] * 3, {"n": 2**53 + 1}),
    ("null nested", {"u": {"t": None}}, [{"u": 1}] * 3, {"u": {"t": None}}),
    ("range", {"s": 5}, [{"s": 1}, {"s": "2"}, {"s": False}], {"s": {"$gte": 5}}),
]


@pytest.mark.parametrize("case", SHORT_PAGES, ids=[c[0] for c in SHORT_PAGES])
def test_a_filtered_page_is_never_short(d1: D1Subject, case: Any) -> None:
    _, first, newer, flt = case
    store, reference = d1.store(), InMemoryStore()
    for s, root in ((store, d1.root), (reference, ())):
        s.put(root + ("f",), "first", first)
        for n, value in enumerate(newer):
            d1.clock.advance(1)
            s.put(root + ("f",), f"newer{n}", value)
    want = [i.key for i in reference.search(("f",), filter=flt, limit=100)]
    assert want == ["first"]
    for limit in (1, 2, 3):
        assert _page(store, d1.root, flt, limit) == want, limit
    assert _page(store, d1.root, flt, 2, offset=1) == []


def test_pages_of_a_filter_cover_every_match_once(d1: D1Subject) -> None:
    """Matches interleaved with items SQL cannot decide (strings a range reads as numbers,
    compressed values) and items that do not match: every page is the reference's page."""
    store = d1.store()
    values: list[dict[str, Any]] = []
    for i in range(40):
        kind = i % 5
        values.append([{"n": i}, {"n": str(i)}, {"m": i}, {"n": float(i) + 0.5},
                       {"n": i, "pad": "x" * 3_000_000}][kind])
    store.batch([PutOp(d1.root + ("f",), f"k{i:02d}", v) for i, v in enumerate(values)])
    flt = {"n": {"$gte": 10}}

    def ok(v: dict[str, Any]) -> bool:
        try:
            return float(v.get("n")) >= 10  # type: ignore[arg-type]
        except (TypeError, ValueError):
            return False

    want = sorted((f"k{i:02d}" for i, v in enumerate(values) if ok(v)))  # one put: key order
    pages = [_page(store, d1.root, flt, 7, o) for o in range(0, 35, 7)]
    assert [k for p in pages for k in p] == want


def test_a_range_filter_reads_only_its_page() -> None:
    """Frugal: a range on plain JSON values is decided in SQL and SQL takes the page."""
    from tests.memory.subjects import local_subject

    d1 = local_subject("local")
    try:
        store = d1.store()
        for start in range(0, 1000, 100):
            store.batch([PutOp(("r",), f"k{i}", {"score": i / 100, "pad": "x" * 200})
                         for i in range(start, start + 100)])
        for flt, n in (({"score": {"$gte": 9.9}}, 10), ({"score": {"$lt": 0.05}}, 5),
                       ({"score": {"$gt": 2, "$lte": 2.5}}, 10)):
            before = len(d1.events)
            found = store.search(("r",), filter=flt, limit=10)
            assert len(found) == n
            received = sum(e.bytes_received for e in d1.events[before:])
            assert received < 20_000, (flt, received)  # ten ~250-byte items, not a thousand
    finally:
        d1.close()


# -- fact 2: a bad filter is refused before the batch's puts are sent ---------------------------
@pytest.mark.parametrize("flt", [
    {"n": {"$gt": 0, "x": 1}}, {"n": {"x": 1, "$eq": 1}}, {"a": {"b": {"$lt": 1, "c": 2}}},
    {"n": [{"$gt": 1, "y": 2}]}, {"n": {"$in": [1]}}, {"n": {"$gt": 1, "$nope": 2}},
])
def test_a_bad_filter_sends_nothing(d1: D1Subject, flt: dict[str, Any]) -> None:
    store = d1.store()
    root = d1.root
    store.put(root + ("f",), "kept", {"n": 1})
    before = len(d1.events)
    with pytest.raises(InvalidInputError):
        store.batch([PutOp(root + ("f",), "new", {"n": 2}), SearchOp(root + ("f",), flt)])
    assert len(d1.events) == before
    assert store.get(root + ("f",), "new") is None


def test_operator_looking_keys_are_fields_where_inmemorystore_reads_fields(
        d1: D1Subject) -> None:
    """A top-level "$gt" is a field name, and an $eq operand is a literal value."""
    store, reference = d1.store(), InMemoryStore()
    for s, root in ((store, d1.root), (reference, ())):
        s.put(root + ("f",), "a", {"$gt": 0, "x": 1, "o": {"$nope": 1}})
        s.put(root + ("f",), "b", {"$gt": 1, "x": 1, "o": {"$nope": 2}})
    for flt in ({"$gt": 0, "x": 1}, {"o": {"$eq": {"$nope": 2}}}, {"o": {"$ne": {"$nope": 2}}}):
        want = [i.key for i in reference.search(("f",), filter=flt)]
        assert sorted(_page(store, d1.root, flt, 10)) == sorted(want), flt


# -- fact 4: a value's size is measured as sent ------------------------------------------------
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_values_escaped_twice_as_sent_are_stored(d1: D1Subject, mode: str) -> None:
    """About 1.7 MB of quotes, backslashes or control characters fits a row but not a JSON
    parameter once escaped again: stored (compressed), read back, filtered."""
    store = d1.store()
    st = Facade(store, mode, d1.root)
    values = {"quotes": {"t": '"' * 850_000, "n": 1}, "backslashes": {"t": "\\" * 850_000, "n": 1},
              "control": {"t": "\x01\x1f" * 140_000, "n": 1}}

    async def scenario(s: Facade) -> None:
        for key, value in values.items():
            await s.put(("big",), key, value)
        for key, value in values.items():
            got = await s.get(("big",), key)
            assert got is not None and got.value == value
        found = await s.search(("big",), filter={"n": 1})
        assert sorted(i.key for i in found) == sorted(values)

    drive(scenario, st)


def test_rows_too_large_as_sent_are_refused_unsent(d1: D1Subject) -> None:
    store, cache = d1.store(), d1.cache()
    root = d1.root
    store.put(root + ("ok",), "k", {"v": 1})
    before = len(d1.events)
    with pytest.raises(ValueTooLargeError):
        store.put(root + ("ok",), "k" * 1_960_000, {"v": 1})
    with pytest.raises(ValueTooLargeError):
        store.batch([PutOp(root + ("ok",), "small", {"v": 2}),
                     PutOp(root + ("ok",), '"' * 990_000, {"v": 3})])
    with pytest.raises(ValueTooLargeError):
        store.get(root + ("ok",), "\\" * 990_000)
    with pytest.raises(ValueTooLargeError):
        cache.set({(root + ("c",), '"' * 990_000): (1, None)})
    assert len(d1.events) == before
    assert store.get(root + ("ok",), "small") is None


# -- fact 6: keys with NUL are refused, not cut -------------------------------------------------
def test_keys_with_nul_are_refused_unsent(d1: D1Subject) -> None:
    store, cache = d1.store(), d1.cache()
    root = d1.root
    store.put(root + ("n",), "a", {"v": 0})
    before = len(d1.events)
    for call in (lambda: store.put(root + ("n",), "a\x00b", {"v": 1}),
                 lambda: store.batch([PutOp(root + ("n",), "a\x00c", {"v": 2})]),
                 lambda: store.get(root + ("n",), "a\x00b"),
                 lambda: store.delete(root + ("n",), "a\x00"),
                 lambda: cache.set({(root + ("c",), "k\x00"): (1, None)}),
                 lambda: cache.get([(root + ("c",), "k\x00")])):
        with pytest.raises(InvalidInputError):
            call()
    assert len(d1.events) == before
    assert [(i.key, i.value) for i in store.search(root + ("n",))] == [("a", {"v": 0})]


# -- fact 8: many large keys are split under D1's parameter limit, one request -----------------
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_gets_of_many_large_keys_are_split_in_one_request(d1: D1Subject, mode: str) -> None:
    store, cache = d1.store(), d1.cache()
    root = d1.root
    keys = [f"{n:02d}" + "k" * 70_000 for n in range(30)]
    store.batch([PutOp(root + ("g",), k, {"n": n}) for n, k in enumerate(keys)])
    cache.set({(root + ("c",), k): (n, None) for n, k in enumerate(keys)})
    ops = [GetOp(root + ("g",), k) for k in keys]
    before = len(d1.events)
    if mode == "sync":
        got = store.batch(ops)
        middle = len(d1.events)
        entries = cache.get([(root + ("c",), k) for k in keys])
    else:
        got = asyncio.run(store.abatch(ops))
        middle = len(d1.events)
        entries = asyncio.run(cache.aget([(root + ("c",), k) for k in keys]))
    assert [g.value["n"] for g in got] == list(range(30))
    assert sorted(entries.values()) == list(range(30))
    # One request per database asked: the store's namespace lives in one database; the cache's
    # entries are spread over the fleet by namespace and key, each database asked once.
    store_asked = Counter(e.database_id for e in d1.events[before:middle])
    cache_asked = Counter(e.database_id for e in d1.events[middle:])
    assert len(store_asked) == 1 and set(store_asked.values()) == {1}, store_asked
    assert set(cache_asked.values()) == {1}, cache_asked


# -- fact 9: TTLs that are not finite positive numbers are refused unsent ----------------------
BAD_STORE_TTLS = [math.inf, -math.inf, math.nan, 1e307, True, False, -1, 0, 0.0, "5", 10**400]
BAD_CACHE_TTLS = [math.inf, math.nan, 1e309, True, -1, 0, -0.5, "5"]


def test_bad_ttls_are_refused_unsent(d1: D1Subject) -> None:
    from d1saver import ConfigError

    store, cache = d1.store(), d1.cache()
    root = d1.root
    store.put(root + ("t",), "k", {"v": 0})
    before = len(d1.events)
    for ttl in BAD_STORE_TTLS:
        with pytest.raises(InvalidInputError):
            store.put(root + ("t",), "k", {"v": 1}, ttl=ttl)
        with pytest.raises(InvalidInputError):
            store.batch([PutOp(root + ("t",), "other", {"v": 1}),
                         PutOp(root + ("t",), "k", {"v": 2}, ttl=ttl)])
    for ttl in BAD_CACHE_TTLS:
        with pytest.raises(InvalidInputError):
            cache.set({(root + ("c",), "k"): (1, ttl)})
    for ttl in (-1, math.inf, True):
        with pytest.raises(ConfigError):
            d1.store(ttl={"default_ttl": ttl})
    assert len(d1.events) == before
    assert store.get(root + ("t",), "k").value == {"v": 0}  # type: ignore[union-attr]
    assert store.get(root + ("t",), "other") is None
    store.put(root + ("t",), "huge", {"v": 3}, ttl=1e300)  # finite: stored
    assert store.get(root + ("t",), "huge") is not None


def test_errors_are_langgraphs_and_d1savers() -> None:
    assert issubclass(InvalidInputError, ValueError) and issubclass(InvalidInputError, D1Error)
