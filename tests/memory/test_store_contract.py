"""D1Store against LangGraph's own stores, case by case.

The cases are the kinds LangGraph's store test suites run (libs/checkpoint/tests/test_store.py,
libs/checkpoint-sqlite/tests/test_store.py, test_async_store.py, test_ttl.py), written again
here: puts, gets, deletes, batch order, filters, namespaces, literal labels, TTL, search by
meaning with a deterministic character embedding. Each case is an async function over a Facade
(tests/memory/facade.py); it runs on the reference stores (InMemoryStore, SqliteStore: the
case's own assertions hold there too, so a case cannot be wrong about LangGraph) and on D1Store,
sync and async, on one database, with keys, over a fleet of four, and (the `real=True` cases)
on the real engine; what each returns must be the same on every store.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import pytest
from langchain_core.embeddings import Embeddings
from langgraph.store.base import (
    GetOp,
    InvalidNamespaceError,
    ListNamespacesOp,
    MatchCondition,
    PutOp,
    SearchOp,
)
from langgraph.store.memory import InMemoryStore
from langgraph.store.sqlite import SqliteStore

from tests.memory.subjects import (
    LOCAL_SUBJECTS,
    REAL_SUBJECTS,
    D1Subject,
    make_subject,
    subject_params,
)
from tests.memory.char_embeddings import CharEmbeddings, cosine
from tests.memory.facade import Facade, drive, plain, same

DIMS = 256


# -- the registry of cases ----------------------------------------------------------------------
@dataclass
class Case:
    fn: Callable[[Facade], Any]
    refs: tuple[str, ...]
    real: bool
    index: dict[str, Any] | None
    embed: Callable[[], Embeddings] | None
    ttl: dict[str, Any] | None
    modes: tuple[str, ...]
    subjects: tuple[str, ...] | None
    xfail: str | None = None  # a known difference of D1Store's, reported, kept visible


CASES: dict[str, Case] = {}


def case(*, refs: tuple[str, ...] = ("memory", "sqlite"), real: bool = False,
         index: dict[str, Any] | None = None, embed: Callable[[], Embeddings] | None = None,
         ttl: dict[str, Any] | None = None, modes: tuple[str, ...] = ("sync", "async"),
         subjects: tuple[str, ...] | None = None, xfail: str | None = None,
         ) -> Callable[[Any], Any]:
    """Register a case; refs are the LangGraph stores whose answers D1Store must give."""

    if index is not None:
        refs = tuple(r for r in refs if r != "sqlite")  # SqliteStore needs sqlite-vec loadable

    def deco(fn: Any) -> Any:
        CASES[fn.__name__] = Case(fn, refs, real, index, embed, ttl, modes, subjects, xfail)
        return fn

    return deco


def index_config(c: Case) -> dict[str, Any] | None:
    if c.index is None:
        return None
    embed = c.embed() if c.embed else CharEmbeddings(DIMS)
    return {"dims": embed.dims, "embed": embed, **c.index}  # type: ignore[attr-defined]


def reference_store(kind: str, c: Case, stack: ExitStack) -> Any:
    idx = index_config(c)
    if kind == "memory":
        return InMemoryStore(index=idx)  # type: ignore[arg-type]
    if idx is not None and "fields" in idx:
        idx["text_fields"] = idx["fields"]
    store = stack.enter_context(SqliteStore.from_conn_string(
        ":memory:", index=idx, ttl=c.ttl))  # type: ignore[arg-type]
    store.setup()
    return store


_REF_CACHE: dict[tuple[str, str], Any] = {}


def reference(name: str, kind: str) -> Any:
    """What a LangGraph store answers for a case (its own assertions hold); cached per run."""
    c = CASES[name]
    if (name, kind) not in _REF_CACHE or c.ttl is not None:
        with ExitStack() as stack:
            facade = Facade(reference_store(kind, c, stack), sweep=c.ttl is not None)
            _REF_CACHE[(name, kind)] = plain(drive(c.fn, facade))
    return _REF_CACHE[(name, kind)]


def params() -> Iterator[Any]:
    for name, c in CASES.items():
        subjects = list(LOCAL_SUBJECTS) + (list(REAL_SUBJECTS) if c.real else [])
        if c.subjects is not None:
            subjects = [s for s in subjects if s in c.subjects]
        for s in subjects:
            for mode in c.modes:
                marks = [pytest.mark.realengine] if s.startswith("wrangler") else []
                if c.xfail:
                    marks.append(pytest.mark.xfail(reason=c.xfail, strict=True))
                yield pytest.param(name, s, mode, id=f"{name}-{s}-{mode}", marks=marks)


# -- helpers for the cases ----------------------------------------------------------------------
def keys(items: list[Any]) -> list[str]:
    return [i.key for i in items]


def srt(items: list[Any]) -> list[Any]:
    """A search answer without a query has no defined order: compare it sorted."""
    return sorted(plain(items), key=repr)


def scores(items: list[Any]) -> list[tuple[str, float | None]]:
    return [(i.key, i.score) for i in items]


# ================================================================================================
# Puts, gets, deletes, batches
# ================================================================================================
@case(real=True)
async def basic_ops(st: Facade) -> list[Any]:
    ns, obs = ("test", "documents"), []
    assert await st.get(ns, "doc1") is None
    await st.put(ns, "doc1", {"title": "Test Document", "content": "Hello, World!"})
    item = await st.get(ns, "doc1")
    assert item is not None and item.namespace == ns and item.key == "doc1"
    obs.append(item)
    await st.put(ns, "doc1", {"title": "Updated", "content": "Hello, Updated!"})
    updated = await st.get(ns, "doc1")
    assert updated is not None and updated.updated_at >= item.updated_at
    obs.append(updated)
    obs.append(await st.get(("test", "other_documents"), "doc1"))
    obs.append(await st.get(("test",), "doc1"))  # a prefix of the namespace is another one
    await st.delete(ns, "doc1")
    obs.append(await st.get(ns, "doc1"))
    await st.delete(ns, "never-there")  # deleting nothing is fine
    await st.put(ns, "doc2", {"n": 2})
    obs.append(await st.everything())
    return obs


@case()
async def keys_are_exact(st: Facade) -> list[Any]:
    ns = ("k",)
    for k in ("a", "A", "a ", " a", "a%", "a_", "a*", "é", "e\u0301", "a\nb", "a:b", "a.b", "",
              "'; DROP TABLE store; --", "x" * 500):
        await st.put(ns, k, {"k": k})
    return [await st.get(ns, k) for k in ("a", "A", "a%", "a_", "a*", "é", "e\u0301", "a\nb",
                                          "a.b", "", "a%%", "b", "x" * 500)] + \
        [await st.everything()]


@case(real=True)
async def values_round_trip(st: Facade) -> list[Any]:
    value = {
        "str": "héllo 日本語 \U0001f600 'quotes' \"double\" \\ back",
        "empty": "", "none": None, "t": True, "f": False,
        "int": 42, "neg": -7, "big": 2**53 + 1, "i64": 2**63 - 1, "zero": 0,
        "float": 0.1, "tiny": 5e-324, "huge": 1.7976931348623157e308, "negzero": -0.0,
        "list": [1, "two", None, [3, {"four": 4}]], "nested": {"a": {"b": {"c": [1, 2, 3]}}},
        "emptylist": [], "emptydict": {},
        "1numeric-key": "k", "dotted.key": "d", "$dollar": "$",
    }
    await st.put(("v",), "all", value)
    item = await st.get(("v",), "all")
    assert item is not None and item.value == value
    assert type(item.value["int"]) is int and type(item.value["float"]) is float
    assert type(item.value["big"]) is int
    return [item, await st.search(("v",))]


@case(real=True)
async def batch_order(st: Facade) -> list[Any]:
    await st.put(("test", "foo"), "key1", {"data": "value1"})
    await st.put(("test", "bar"), "key2", {"data": "value2"})
    r = await st.batch([
        GetOp(("test", "foo"), "key1"),
        PutOp(("test", "bar"), "key2", {"data": "value2"}),
        SearchOp(("test",), filter={"data": "value1"}, limit=10, offset=0),
        ListNamespacesOp(match_conditions=None, max_depth=None, limit=10, offset=0),
        GetOp(("test",), "key3"),
    ])
    assert len(r) == 5 and r[0].value == {"data": "value1"} and r[1] is None
    assert keys(r[2]) == ["key1"] and r[4] is None
    assert ("test", "foo") in r[3] and ("test", "bar") in r[3]
    obs = [r[0], r[1], srt(r[2]), sorted(r[3]), r[4]]
    r = await st.batch([
        SearchOp(("test",), filter=None, limit=5, offset=0),
        GetOp(("test", "bar"), "key2"),
        ListNamespacesOp(match_conditions=None, max_depth=None, limit=5, offset=0),
        PutOp(("test",), "key3", {"data": "value3"}),
        GetOp(("test", "foo"), "key1"),
    ])
    assert len(r[0]) >= 2 and r[1].key == "key2" and r[3] is None and r[4].key == "key1"
    # (not r[2] itself: InMemoryStore lists ("test",) once a get has looked there, empty or not)
    assert {("test", "foo"), ("test", "bar")} <= set(r[2])
    obs += [srt(r[0]), r[1], r[3], r[4], await st.get(("test",), "key3")]
    return obs


@case(real=True)
async def batch_reads_see_the_store_before_its_puts(st: Facade) -> list[Any]:
    """In one batch, reads answer from the store as it was; two puts of a key: the last wins."""
    await st.put(("a",), "k", {"v": 1})
    r = await st.batch([
        PutOp(("a",), "k", {"v": 2}),
        GetOp(("a",), "k"),
        SearchOp(("a",), filter={"v": 1}),
        PutOp(("a",), "k", {"v": 3}),
        PutOp(("a",), "new", {"v": 9}),
        GetOp(("a",), "new"),
    ])
    return [r, await st.get(("a",), "k"), await st.get(("a",), "new")]


@case()
async def empty_batch(st: Facade) -> list[Any]:
    """Nothing to do is no error, on one database or many."""
    return [await st.batch([]), await st.search(()), await st.list_namespaces()]


@case()
async def batch_put_then_delete_same_key(st: Facade) -> list[Any]:
    await st.batch([PutOp(("a",), "k", {"v": 1}), PutOp(("a",), "k", None),
                    PutOp(("a",), "j", None), PutOp(("a",), "j", {"v": 2})])
    return [await st.everything()]


@case()
async def batch_get_ops(st: Facade) -> list[Any]:
    await st.put(("test",), "key1", {"data": "value1"})
    await st.put(("test",), "key2", {"data": "value2"})
    r = await st.batch([GetOp(("test",), "key1"), GetOp(("test",), "key2"),
                        GetOp(("test",), "key3"), GetOp(("test",), "key1")])
    assert r[2] is None and keys(r[:2]) == ["key1", "key2"] and r[3].key == "key1"
    return r


@case()
async def batch_put_ops(st: Facade) -> list[Any]:
    r = await st.batch([PutOp(("test",), "key1", {"data": "value1"}),
                        PutOp(("test",), "key2", {"data": "value2"}),
                        PutOp(("test",), "key3", None)])
    assert r == [None, None, None]
    return [await st.get(("test",), k) for k in ("key1", "key2", "key3")]


@case()
async def batch_search_ops(st: Facade) -> list[Any]:
    for ns, k, v in [(("test", "foo"), "key1", {"data": "value1", "tag": "a"}),
                     (("test", "bar"), "key2", {"data": "value2", "tag": "a"}),
                     (("test", "baz"), "key3", {"data": "value3", "tag": "b"})]:
        await st.put(ns, k, v)
    r = await st.batch([SearchOp(("test",), filter={"tag": "a"}, limit=10, offset=0),
                        SearchOp(("test",), filter=None, limit=2, offset=0),
                        SearchOp(("test", "foo"), filter=None, limit=10, offset=0)])
    assert len(r[0]) == 2 and len(r[1]) == 2 and keys(r[2]) == ["key1"]
    return [srt(r[0]), len(r[1]), srt(r[2])]


@case()
async def batch_list_namespaces_ops(st: Facade) -> list[Any]:
    for ns in [("test", "documents", "public"), ("test", "documents", "private"),
               ("test", "images", "public"), ("prod", "documents", "public")]:
        await st.put(ns, "doc", {"content": "x"})
    r = await st.batch([
        ListNamespacesOp(match_conditions=None, max_depth=None, limit=10, offset=0),
        ListNamespacesOp(match_conditions=None, max_depth=2, limit=10, offset=0),
        ListNamespacesOp(match_conditions=(MatchCondition("suffix", ("public",)),),
                         max_depth=None, limit=10, offset=0),
    ])
    return [sorted(x) for x in r]


@case(refs=("memory",), real=True)
async def timestamps(st: Facade) -> list[Any]:
    """Aware datetimes; updated_at moves on every put, even within one second."""
    await st.put(("t",), "a", {"v": 0})
    first = await st.get(("t",), "a")
    assert first is not None
    assert isinstance(first.created_at, datetime) and isinstance(first.updated_at, datetime)
    assert first.created_at.utcoffset() is not None and first.created_at.utcoffset().total_seconds() == 0
    assert abs((datetime.now(timezone.utc) - first.updated_at).total_seconds()) < 120
    seen = [first.updated_at]
    for n in range(1, 4):
        await st.sleep(0.02)
        await st.put(("t",), "a", {"v": n})
        item = await st.get(("t",), "a")
        assert item is not None
        seen.append(item.updated_at)
    assert seen == sorted(seen) and len(set(seen)) == len(seen), seen
    return []


# ================================================================================================
# Search without a query: namespaces, filters, pages
# ================================================================================================
SEARCH_DATA = [
    (("test", "docs"), "doc1", {"title": "First Doc", "author": "Alice", "tags": ["important"]}),
    (("test", "docs"), "doc2", {"title": "Second Doc", "author": "Bob", "tags": ["draft"]}),
    (("test", "images"), "img1", {"title": "Image 1", "author": "Alice", "tags": ["final"]}),
]


@case(real=True)
async def search_basic(st: Facade) -> list[Any]:
    for ns, k, v in SEARCH_DATA:
        await st.put(ns, k, v)
    everything = await st.search(("test",))
    docs = await st.search(("test", "docs"))
    alice = await st.search(("test",), filter={"author": "Alice"})
    page1 = await st.search(("test",), limit=2)
    page2 = await st.search(("test",), offset=2)
    assert len(everything) == 3 and len(docs) == 2 and len(alice) == 2
    assert len(page1) == 2 and len(page2) == 1
    assert {i.key for i in page1} | {i.key for i in page2} == {"doc1", "doc2", "img1"}
    assert all(i.score is None for i in everything)
    return [srt(everything), srt(docs), srt(alice), await st.search(("nope",)),
            await st.search(("test", "docs", "deeper"))]


@case()
async def search_items(st: Facade) -> list[Any]:
    base = "search_items"
    spaces = [(base, "documents", "user1"), (base, "documents", "user2"),
              (base, "reports", "department1"), (base, "reports", "department2")]
    values = [{"title": "Doc 1", "author": "John Doe", "tags": ["important"]},
              {"title": "Doc 2", "author": "Jane Smith", "tags": ["draft"]},
              {"title": "Report A", "author": "John Doe", "tags": ["final"]},
              {"title": "Report B", "author": "Alice Johnson", "tags": ["draft"]}]
    for ns, v in zip(spaces, values, strict=True):
        await st.put(ns, f"item_{ns[-1]}", v)
    first = await st.search((base,), limit=2, offset=0)
    second = await st.search((base,), limit=2, offset=2)
    assert {i.key for i in first}.isdisjoint({i.key for i in second})
    assert len(first) == len(second) == 2
    return [srt(await st.search((base, "documents"))), srt(await st.search((base, "reports"))),
            srt(await st.search((base,))),
            srt(await st.search((base,), filter={"author": "John Doe"})),
            srt(await st.search((base,), filter={"tags": ["draft"]})),
            srt(await st.search((base,), filter={"tags": ["draft", "x"]})),
            srt(await st.search((base,), filter={"tags": "draft"}))]


@case()
async def search_pages_cover_everything_once(st: Facade) -> list[Any]:
    for i in range(23):
        await st.put(("p", f"n{i % 3}"), f"k{i:02d}", {"i": i, "even": i % 2 == 0})
    pages = [await st.search(("p",), limit=5, offset=o) for o in range(0, 30, 5)]
    assert [len(p) for p in pages] == [5, 5, 5, 5, 3, 0]
    seen = [(i.namespace, i.key) for p in pages for i in p]
    assert len(seen) == len(set(seen)) == 23
    evens = [await st.search(("p",), filter={"even": True}, limit=4, offset=o)
             for o in range(0, 16, 4)]
    assert [len(p) for p in evens] == [4, 4, 4, 0]
    assert len({i.key for p in evens for i in p}) == 12
    return [sorted(seen), len(await st.search(("p",), limit=1000))]


FILTER_DATA = [
    ("a", {"n": 1, "f": 1.5, "s": "apple", "b": True, "tag": "x",
           "user": {"name": "ann", "age": 30, "prefs": {"theme": "dark"}}, "arr": [1, 2]}),
    ("b", {"n": 2, "f": 2.5, "s": "banana", "b": False, "tag": "y",
           "user": {"name": "bob", "age": 25, "prefs": {"theme": "light"}}, "arr": [2, 1]}),
    ("c", {"n": 3, "f": -0.5, "s": "cherry", "b": True, "tag": "x",
           "user": {"name": "cid", "age": 35, "prefs": {"theme": "dark"}}, "arr": [1, 2, 3]}),
    ("d", {"n": 10, "f": 10.0, "s": "10", "b": False, "tag": None,
           "user": {"name": "dee", "age": 30, "prefs": {}}, "arr": []}),
    ("e", {"n": 2.0, "f": 2, "s": "2", "b": 1, "tag": "1",
           "user": {"name": "eve", "age": 30.0, "prefs": {"theme": None}}, "arr": ["1"]}),
]

FILTERS: list[dict[str, Any]] = [
    {}, {"n": 1}, {"n": 2}, {"n": 2.0}, {"f": 2}, {"s": "2"}, {"s": 2}, {"n": "2"},
    {"b": True}, {"b": False}, {"b": 1}, {"tag": "x"}, {"tag": None}, {"tag": "1"}, {"tag": 1},
    {"n": {"$eq": 3}}, {"n": {"$ne": 3}}, {"tag": {"$eq": None}},
    {"n": {"$gt": 2}}, {"n": {"$gte": 2}}, {"n": {"$lt": 2}}, {"n": {"$lte": 2}},
    {"f": {"$gt": 1.5}}, {"f": {"$gte": 1.5}}, {"f": {"$lt": 0}}, {"f": {"$lte": -0.5}},
    {"n": {"$gt": 1, "$lt": 10}}, {"n": {"$gte": 1, "$lte": 3}}, {"n": {"$gt": 2.5}},
    {"n": {"$gt": 1}, "tag": "x"}, {"n": {"$gt": 1}, "b": True},
    {"arr": [1, 2]}, {"arr": [2, 1]}, {"arr": []}, {"arr": ["1"]}, {"arr": [1]},
    {"missing": None}, {"missing": {"$eq": None}}, {"s": {"$eq": "apple"}, "n": {"$ne": 1}},
    {"f": {"$gt": float("-inf")}}, {"f": {"$lt": float("inf")}}, {"n": {"$lt": 10**100}},
    {"n": {"$gt": -(10**30)}}, {"f": {"$gt": 1e-300}}, {"n": {"$eq": float("nan")}},
]


@case(real=True)
async def filters(st: Facade) -> list[Any]:
    """Every operator, JSON equality (1 == 1.0, "1" != 1, true != 1 in JSON...), nested objects."""
    for k, v in FILTER_DATA:
        await st.put(("f",), k, v)
    return [(repr(flt), sorted(keys(await st.search(("f",), filter=flt)))) for flt in FILTERS]


NESTED_FILTERS: list[dict[str, Any]] = [
    {"user": {"name": "ann"}}, {"user": {"age": 30}}, {"user": {"prefs": {"theme": "dark"}}},
    {"user": {"age": {"$gt": 28}}}, {"user": {"age": {"$lte": 30}, "name": "dee"}},
    {"user": {"name": "ann", "age": 31}}, {"user": {"prefs": {}}}, {"user": {"prefs": {"theme": None}}},
    {"user": {"age": {"$ne": 30}}, "b": True}, {"user": "ann"},
]


@case(refs=("memory",), real=True)  # SqliteStore 3.1 has no nested-object filters
async def filters_nested(st: Facade) -> list[Any]:
    for k, v in FILTER_DATA:
        await st.put(("f",), k, v)
    return [(repr(flt), sorted(keys(await st.search(("f",), filter=flt)))) for flt in NESTED_FILTERS]


@case(refs=("memory",))
async def filter_ne_matches_items_without_the_key(st: Facade) -> list[Any]:
    """InMemoryStore: a missing key is None, and None != 1 (SqliteStore leaves them out)."""
    await st.put(("f",), "has", {"v": 1})
    await st.put(("f",), "other", {"v": 2})
    await st.put(("f",), "without", {"w": 1})
    await st.put(("f",), "null", {"v": None})
    return [sorted(keys(await st.search(("f",), filter={"v": {"$ne": 1}}))),
            sorted(keys(await st.search(("f",), filter={"v": None}))),
            sorted(keys(await st.search(("f",), filter={"w": {"$ne": 2}})))]


@case(refs=("memory",), real=True)
async def filter_dotted_keys(st: Facade) -> list[Any]:
    """A dotted filter key is one literal key, as InMemoryStore and PostgresStore read it
    (SqliteStore follows the dots into nested objects: a divergence docs/STORE.md states);
    hyphens and leading digits are plain characters of a key."""
    await st.put(("docs",), "hyphen", {"access-level": "public", "user": {"access-level": "nested"}})
    await st.put(("docs",), "digit", {"123abc": "ok", "user": {"123abc": "ok2", "n": 5}})
    await st.put(("docs",), "dotted", {"user.access-level": "literal", "user.n": 7})
    out = []
    for flt in [{"access-level": "public"}, {"user.access-level": "nested"},
                {"user.access-level": "literal"}, {"123abc": "ok"}, {"user.123abc": "ok2"},
                {"user.n": 7}, {"user.n": 5}, {"user.nope": "x"},
                {"user": {"access-level": "nested"}}, {"user": {"123abc": "ok2"}}]:
        out.append(sorted(keys(await st.search(("docs",), filter=flt))))
    assert out[0] == ["hyphen"] and out[1] == [] and out[2] == ["dotted"]
    assert out[3] == ["digit"] and out[5] == ["dotted"] and out[8] == ["hyphen"]
    return out


@case(real=True)
async def filter_values_are_data(st: Facade) -> list[Any]:
    """Filter values that look like SQL are matched as data."""
    await st.put(("docs",), "doc1", {"access": "public", "title": "Public Document"})
    await st.put(("docs",), "doc2", {"access": "private", "title": "Private Document"})
    await st.put(("docs",), "doc4", {"title": "O'Brien's Document", "access": "public"})
    out = []
    for v in ["public' OR '1'='1", "public'; --", "public' UNION SELECT * FROM store --",
              "public\x00' OR '1'='1", "''''", "public' OR 'א'='א", "%", "_ublic", "publi*"]:
        out.append(keys(await st.search(("docs",), filter={"access": v})))
    assert all(o == [] for o in out)
    out.append(keys(await st.search(("docs",), filter={"title": "O'Brien's Document"})))
    assert out[-1] == ["doc4"]
    return out


@case(refs=("memory",), real=True)
async def filter_key_injection(st: Facade) -> list[Any]:
    """A filter key is a field name bound as data (as InMemoryStore and PostgresStore read it),
    never SQL: one that carries SQL matches no item. (SqliteStore formats keys into its SQL, so
    it refuses them with ValueError: a divergence docs/STORE.md states.)"""
    await st.put(("docs",), "public", {"access": "public"})
    await st.put(("docs",), "private", {"access": "private", "password": "123"})
    await st.put(("docs",), "odd", {"a\" OR 1=1 --": "public", "]": "public"})
    out = []
    for bad in ["access') = 'public' OR '1'='1' OR json_extract(value, '$.",
                "a\" OR 1=1 --", "$[0]", "access'", "]", "a..b", "$", "password"]:
        out.append((bad, keys(await st.search(("docs",), filter={bad: "public"}))))
    assert all("private" not in found for _, found in out)
    assert dict(out)["]"] == ["odd"] and dict(out)["a\" OR 1=1 --"] == ["odd"]
    return out


# ================================================================================================
# Namespaces: listing, prefixes, suffixes, wildcards, literal labels
# ================================================================================================
@case(real=True)
async def list_namespaces_basic(st: Facade) -> list[Any]:
    for i, ns in enumerate([("a", "b", "c"), ("a", "b", "d", "e"), ("a", "b", "d", "i"),
                            ("a", "b", "f"), ("a", "c", "f"), ("b", "a", "f"), ("users", "123"),
                            ("users", "456", "settings"), ("admin", "users", "789")]):
        await st.put(ns, f"id_{i}", {"data": f"value_{i:02d}"})
    ln = st.list_namespaces
    out = [
        sorted(await ln(prefix=("a", "b"))),
        sorted(await ln(suffix=("f",))),
        sorted(await ln(prefix=("a",), suffix=("f",))),
        sorted(await ln(prefix=("a", "b"), max_depth=3)),
        await ln(prefix=("a", "b"), limit=2),
        await ln(prefix=("a", "b"), offset=2),
        sorted(await ln(prefix=("a", "*", "f"))),
        sorted(await ln(suffix=("*", "f"))),
        await ln(prefix=("nonexistent",)),
        await ln(prefix=("users", "123")),
        sorted(await ln()),
    ]
    assert out[0] == [("a", "b", "c"), ("a", "b", "d", "e"), ("a", "b", "d", "i"), ("a", "b", "f")]
    assert out[3] == [("a", "b", "c"), ("a", "b", "d"), ("a", "b", "f")]
    assert out[4] == [("a", "b", "c"), ("a", "b", "d", "e")]
    assert out[5] == [("a", "b", "d", "i"), ("a", "b", "f")]
    assert out[8] == [] and out[9] == [("users", "123")]
    return out


@case()
async def list_namespaces_wildcards(st: Facade) -> list[Any]:
    for i, ns in enumerate([("users", "123"), ("users", "456"), ("users", "789", "settings"),
                            ("admin", "users", "789"), ("guests", "123"),
                            ("guests", "456", "preferences")]):
        await st.put(ns, f"id_{i}", {"data": i})
    ln = st.list_namespaces
    out = [sorted(await ln(prefix=("users", "*"))), await ln(suffix=("*", "preferences")),
           await ln(prefix=("*", "users"), suffix=("*", "settings")),
           sorted(await ln(prefix=("*", "123"))), sorted(await ln(prefix=("*",))),
           sorted(await ln(suffix=("*",))), sorted(await ln(prefix=("*", "*", "*")))]
    await st.put(("admin", "users", "settings", "789"), "foo", {"data": "x"})
    out.append(sorted(await ln(prefix=("*", "users"), suffix=("*", "789"))))
    assert out[1] == [("guests", "456", "preferences")] and out[2] == []
    return out


@case()
async def list_namespaces_pagination(st: Facade) -> list[Any]:
    for i in range(20):
        await st.put(("namespace", f"sub_{i:02d}"), f"id_{i:02d}", {"data": i})
    ln = st.list_namespaces
    out = [await ln(prefix=("namespace",), limit=5, offset=o) for o in (0, 5, 15, 18, 20, 25)]
    assert out[0] == [("namespace", f"sub_{i:02d}") for i in range(5)]
    assert out[2] == [("namespace", f"sub_{i:02d}") for i in range(15, 20)]
    return out


@case()
async def list_namespaces_max_depth(st: Facade) -> list[Any]:
    for i, ns in enumerate([("a", "b", "c", "d"), ("a", "b", "c", "e"), ("a", "b", "f"),
                            ("a", "g"), ("h", "i", "j", "k")]):
        await st.put(ns, f"id_{i}", {"data": i})
    ln = st.list_namespaces
    out = [sorted(await ln(max_depth=d)) for d in (1, 2, 3, 4, 10)]
    out.append(sorted(await ln(prefix=("a",), max_depth=2)))
    out.append(await ln(max_depth=2, limit=2))
    out.append(await ln(max_depth=2, offset=1))
    assert out[1] == [("a", "b"), ("a", "g"), ("h", "i")]
    return out


@case(refs=("sqlite",))  # InMemoryStore keeps listing a namespace whose items are all deleted
async def list_namespaces_empty_and_deleted(st: Facade) -> list[Any]:
    out = [await st.list_namespaces()]
    for ns in [("a", "b"), ("c", "d"), ("e", "f", "g")]:
        await st.put(ns, "k", {"v": 1})
    out.append(sorted(await st.list_namespaces()))
    await st.delete(("c", "d"), "k")
    out.append(sorted(await st.list_namespaces()))
    return out


@case(real=True)
async def list_namespaces_operations(st: Facade) -> list[Any]:
    p = "9f1c6a3e-2b7d-4f0a-9c55-1d2e3f4a5b6c"
    spaces = [(p, "test", "documents", "public", p), (p, "test", "documents", "private", p),
              (p, "test", "images", "public", p), (p, "test", "images", "private", p),
              (p, "prod", "documents", "public", p),
              (p, "prod", "documents", "some", "nesting", "public", p),
              (p, "prod", "documents", "private", p)]
    for ns in spaces:
        await st.put(ns, "dummy", {"content": "dummy"})
    ln = st.list_namespaces
    out = [sorted(await ln(prefix=(p, "test"))), sorted(await ln(prefix=(p, "test", "documents"))),
           sorted(await ln(suffix=("public", p))),
           sorted(await ln(prefix=(p, "test"), suffix=("public", p))),
           sorted(await ln(prefix=(p, "*", "documents"))),
           sorted(await ln(suffix=("*", "public", p))),
           await ln(suffix=("some", "*", "public", p)),
           sorted(await ln(max_depth=3)), sorted(await ln(max_depth=4, prefix=(p, "*", "documents"))),
           len(await ln(prefix=(p,), limit=3)), len(await ln(prefix=(p,), offset=3)),
           sorted(await ln(prefix=(p,)))]
    assert len(out[0]) == 4 and len(out[4]) == 5 and len(out[5]) == 4
    assert out[6] == [(p, "prod", "documents", "some", "nesting", "public", p)]
    assert set(out[-1]) == set(spaces)
    return out


@case(real=True)
async def labels_are_literal(st: Facade) -> list[Any]:
    """LIKE and GLOB characters, regex characters, ':' and newlines in labels are data."""
    pairs = [("star*", "starX"), ("q?m", "qXm"), ("br[ack]et", "brXacXket"), ("br[ack]et", "bra"),
             ("user_1", "userX1"), ("a%b", "axxb"), ("a%b", "a%bb"), ("plus+", "plusX"),
             ("plus+", "pluss"), ("col:on", "col"), ("nl\n", "nl"), ("back\\slash", "back"),
             ("^caret$", "caret"), ("(paren)", "paren"), ("pipe|x", "pipe"), ("dol$", "dol"),
             ("quote'", "quote"), ('dq"', "dq"), ("sp ace", "sp"), ("{brace}", "brace")]
    for label, decoy in pairs:
        await st.put((label,), "k", {"v": 1})
        await st.put((decoy,), "k", {"v": 1})
        await st.put((label, "child"), "k", {"v": 1})
        await st.put(("p", label, "s"), "k", {"v": 1})
    out = []
    for label, _decoy in pairs:
        found = sorted(await st.list_namespaces(prefix=(label,), limit=100))
        assert found == [(label,), (label, "child")], (label, found)
        assert sorted(await st.list_namespaces(prefix=(label, "child"))) == [(label, "child")]
        by_search = sorted({i.namespace for i in await st.search((label,), limit=100)})
        assert by_search == [(label,), (label, "child")], (label, by_search)
        mid = await st.list_namespaces(prefix=("p", label), limit=100)
        assert mid == [("p", label, "s")], (label, mid)
        wild = await st.list_namespaces(prefix=("p", "*", "s"), suffix=(label, "s"), limit=100)
        assert wild == [("p", label, "s")], (label, wild)
        suffix = sorted(await st.list_namespaces(suffix=(label,), limit=100))
        assert suffix == [(label,)], (label, suffix)
        out.append((label, found, by_search, suffix))
    return out


@case(real=True)
async def prefixes_are_whole_labels(st: Facade) -> list[Any]:
    for ns in [("foo",), ("foo", "child"), ("foo", "child", "deep"), ("foobar",),
               ("foobar", "baz"), ("foo2",), ("fo",), ("uid", "users", "alice"),
               ("uid", "users", "malice"), ("uid", "a", "b", "alice")]:
        await st.put(ns, "k", {"v": 1})

    async def spaces(prefix: tuple[str, ...]) -> list[tuple[str, ...]]:
        return sorted({i.namespace for i in await st.search(prefix, limit=100)})

    out = [await spaces(("foo",)), await spaces(("foobar",)), await spaces(("foo2",)),
           await spaces(("fo",)), await spaces(("f",)), await spaces(("foo", "chi")),
           sorted(await st.list_namespaces(prefix=("foo",))),
           sorted(await st.list_namespaces(suffix=("alice",))),
           sorted(await st.list_namespaces(prefix=("uid", "*", "alice"))),
           sorted(await st.list_namespaces(prefix=("uid",))),
           sorted(await st.list_namespaces(suffix=("lice",)))]
    assert out[0] == [("foo",), ("foo", "child"), ("foo", "child", "deep")]
    assert out[3] == [("fo",)] and out[4] == [] and out[5] == [] and out[-1] == []
    return out


@case(real=True)
async def labels_are_case_sensitive(st: Facade) -> list[Any]:
    await st.put(("Foo",), "k", {"v": "upper"})
    await st.put(("foo",), "k", {"v": "lower"})
    await st.put(("FOO", "x"), "k", {"v": "caps"})
    await st.put(("straße",), "k", {"v": "eszett"})
    await st.put(("STRASSE",), "k", {"v": "caps"})
    out = [srt(await st.search(("foo",))), srt(await st.search(("Foo",))),
           sorted(await st.list_namespaces(prefix=("foo",))),
           sorted(await st.list_namespaces(suffix=("FOO", "x"))),
           sorted(await st.list_namespaces(suffix=("x",))),
           srt(await st.search(("straße",))), await st.get(("FOO", "x"), "k"),
           await st.get(("fOO", "x"), "k")]
    assert [i[1] for i in out[0]] == [("foo",)] and [i[1] for i in out[1]] == [("Foo",)]
    return out


@case()
async def newline_labels(st: Facade) -> list[Any]:
    await st.put(("users", "alice"), "k", {"v": 1})
    await st.put(("users", "alice\n"), "k", {"v": 2})
    await st.put(("users", "\nalice"), "k", {"v": 3})
    out = [sorted(await st.list_namespaces(suffix=("alice",))),
           sorted(await st.list_namespaces(prefix=("users", "alice"))),
           sorted(await st.list_namespaces(prefix=("users", "alice\n"))),
           srt(await st.search(("users", "alice"))), srt(await st.search(("users", "alice\n")))]
    assert out[0] == [("users", "alice")] and out[1] == [("users", "alice")]
    return out


@case(real=True)
async def empty_prefix_is_everything(st: Facade) -> list[Any]:
    for ns in [("a",), ("b", "c"), ("d", "e", "f")]:
        await st.put(ns, "k", {"v": 1})
    found = sorted({i.namespace for i in await st.search((), limit=100)})
    assert found == [("a",), ("b", "c"), ("d", "e", "f")]
    return [found]


@case()
async def langgraph_label_rules(st: Facade) -> list[Any]:
    """"langgraph" is refused as the first label of a put, allowed deeper and through batch."""
    doc = {"foo": "bar"}
    await st.put(("foo", "langgraph", "foo"), "bar", doc)
    out = [await st.get(("foo", "langgraph", "foo"), "bar"),
           srt(await st.search(("foo", "langgraph", "foo")))]
    await st.delete(("foo", "langgraph", "foo"), "bar")
    out.append(await st.get(("foo", "langgraph", "foo"), "bar"))
    await st.batch([PutOp(("langgraph", "foo"), "bar", doc)])
    out += [await st.get(("langgraph", "foo"), "bar"), srt(await st.search(("langgraph", "foo")))]
    await st.delete(("langgraph", "foo"), "bar")
    out.append(await st.get(("langgraph", "foo"), "bar"))
    return out


# ================================================================================================
# Search by meaning
# ================================================================================================
VECTOR = {"fields": ["$"]}


@case(index=VECTOR, real=True)
async def vector_insert_with_auto_embedding(st: Facade) -> list[Any]:
    docs = [("doc1", {"text": "short text"}), ("doc2", {"text": "longer text document"}),
            ("doc3", {"text": "longest text document here"}),
            ("doc4", {"description": "text in description field"}),
            ("doc5", {"content": "text in content field"}), ("doc6", {"body": "text in body field"})]
    for k, v in docs:
        await st.put(("test",), k, v)
    results = await st.search(("test",), query="long text")
    assert "doc2" in keys(results) and "doc3" in keys(results)
    assert all(r.score is not None for r in results)
    assert [r.score for r in results] == sorted((r.score for r in results), reverse=True)
    return [results, await st.search(("test",), query="long text", limit=3)]


@case(index={"fields": ["text"]}, real=True)
async def vector_update_with_embedding(st: Facade) -> list[Any]:
    await st.put(("test",), "doc1", {"text": "zany zebra Xerxes"})
    await st.put(("test",), "doc2", {"text": "something about dogs"})
    await st.put(("test",), "doc3", {"text": "text about birds"})
    initial = await st.search(("test",), query="Zany Xerxes")
    assert initial[0].key == "doc1"
    await st.put(("test",), "doc1", {"text": "new text about dogs"})
    after = await st.search(("test",), query="Zany Xerxes")
    after_score = next(r.score for r in after if r.key == "doc1")
    assert after_score < initial[0].score
    new = await st.search(("test",), query="new text about dogs")
    assert new[0].key == "doc1" and new[0].score > 0.99
    await st.put(("test",), "doc4", {"text": "new text about dogs"}, index=False)
    top3 = await st.search(("test",), query="new text about dogs", limit=3)
    assert "doc4" not in keys(top3)
    return [initial, after, new, top3]


@case(index={"fields": ["text"]})
async def unindexed_items_fill_the_page_without_score(st: Facade) -> list[Any]:
    await st.put(("test",), "indexed", {"text": "hello"})
    await st.put(("test",), "plain", {"text": "hello"}, index=False)
    await st.put(("test",), "nofield", {"other": "hello"})
    found = await st.search(("test",), query="hello", limit=10)
    assert found[0].key == "indexed" and found[0].score is not None
    assert all(r.score is None for r in found[1:])  # scoreless ones, in no defined order
    return [len(found), srt(await st.search(("test",)))]


@case(index={"fields": ["text"]}, real=True)
async def vector_search_with_filters(st: Facade) -> list[Any]:
    for k, v in [("doc1", {"text": "red apple", "color": "red", "score": 4.5}),
                 ("doc2", {"text": "red car", "color": "red", "score": 3.0}),
                 ("doc3", {"text": "green apple", "color": "green", "score": 4.0}),
                 ("doc4", {"text": "blue car", "color": "blue", "score": 3.5})]:
        await st.put(("test",), k, v)
    out = [await st.search(("test",), query="apple", filter={"color": "red"}),
           await st.search(("test",), query="car", filter={"color": "red"}),
           await st.search(("test",), query="bbbbluuu", filter={"score": {"$gt": 3.2}}),
           await st.search(("test",), query="apple", filter={"score": {"$gte": 4.0}, "color": "green"}),
           await st.search(("test",), query="apple", filter={"color": "purple"})]
    assert keys(out[0])[0] == "doc1" and len(out[0]) == 2
    assert keys(out[1])[0] == "doc2" and len(out[1]) == 2
    assert keys(out[2])[0] == "doc4" and len(out[2]) == 3
    assert keys(out[3]) == ["doc3"] and out[4] == []
    return out


@case(index={"fields": ["text"]})
async def vector_search_pagination(st: Facade) -> list[Any]:
    for i in range(5):
        await st.put(("test",), f"doc{i}", {"text": f"test document number {i}"})
    p1 = await st.search(("test",), query="test", limit=2)
    p2 = await st.search(("test",), query="test", limit=2, offset=2)
    p3 = await st.search(("test",), query="test", limit=2, offset=4)
    everything = await st.search(("test",), query="test", limit=10)
    assert len(p1) == len(p2) == 2 and len(p3) == 1 and len(everything) == 5
    assert keys(p1 + p2 + p3) == keys(everything)
    return [everything, p1, p2, p3]


@case(index={"fields": ["text"]})
async def vector_search_edge_cases(st: Facade) -> list[Any]:
    await st.put(("test",), "doc1", {"text": "test document"})
    out = []
    for q in ["", None, "test " * 100, "test!@#$%^&*()", "日本語", "'; DROP TABLE x; --"]:
        found = await st.search(("test",), query=q)
        assert len(found) == 1
        out.append(keys(found))
    return out


@case(index={"fields": ["key0", "key1", "key3"]})
async def embed_with_path(st: Facade) -> list[Any]:
    await st.put(("test",), "doc1", {"key1": "xxx", "key2": "yyy", "key3": "zzz"})
    await st.put(("test",), "doc2", {"key0": "uuu", "key1": "vvv", "key2": "www", "key3": "xxx"})
    out = [await st.search(("test",), query=q) for q in ("xxx", "uuu", "zzz", "www")]
    assert all(len(r) == 2 for r in out)
    assert out[0][0].score > 0.9 and out[0][1].score > 0.9
    assert keys(out[1])[0] == "doc2" and keys(out[2])[0] == "doc1"
    assert all(r.score < 0.9 for r in out[3])
    return out


@case(index={"fields": ["key17"]})
async def embed_with_path_per_put(st: Facade) -> list[Any]:
    await st.put(("test",), "doc3", {"key0": "aaa", "key1": "bbb", "key2": "ccc", "key3": "ddd"},
                 index=["key0", "key1"])
    await st.put(("test",), "doc4", {"key0": "eee", "key1": "bbb", "key2": "fff", "key3": "ggg"},
                 index=["key1", "key3"])
    out = [await st.search(("test",), query=q) for q in ("aaa", "ggg", "bbb", "ccc")]
    assert keys(out[0])[0] == "doc3" and keys(out[1])[0] == "doc4"
    assert abs(out[2][0].score - out[2][1].score) < 0.1
    assert all(r.score < 0.9 for r in out[3])
    await st.put(("test",), "doc5", {"key0": "hhh", "key1": "iii"}, index=False)
    out.append(srt(await st.search(("test",))))
    assert len(out[-1]) == 3
    return out


@case(index={"fields": ["items[*].text", "title", "tags"]})
async def embed_lists_and_nested_fields(st: Facade) -> list[Any]:
    await st.put(("n",), "a", {"title": "alpha", "items": [{"text": "qqq"}, {"text": "zzz"}],
                              "tags": ["red", "green"]})
    await st.put(("n",), "b", {"title": "beta", "items": [{"text": "mmm"}], "tags": ["blue"]})
    return [await st.search(("n",), query=q) for q in ("qqq", "zzz", "mmm", "beta", "blue", "green")]


@case(index={"fields": ["key0"]}, real=True)
async def scores_are_cosine(st: Facade) -> list[Any]:
    embed = CharEmbeddings(DIMS)
    await st.put(("test",), "doc", {"key0": "aaa"}, index=["key0", "key1"])
    out = []
    for q in ("aaa", "bbb", "ccc", "abcd", "poisson"):
        found = await st.search((), query=q)
        assert len(found) == 1
        expected = cosine(embed.embed_query(q), embed.embed_query("aaa"))
        assert found[0].score == pytest.approx(expected, abs=1e-3)
        out.append(found)
    return out


class FixedVectors(Embeddings):
    """Known texts to hand-picked vectors (values arrive as JSON text with the "$" field)."""

    dims = 3
    vectors = {"a": [1.0, 0.0, 0.0], "b": [2.0, 0.1, 0.0], "c": [0.0, 0.0, 1.0],
               "d": [-1.0, 0.0, 0.0], "z": [0.0, 0.0, 0.0]}

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [list(self.vectors[t]) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return list(self.vectors[text])


@case(index={"fields": ["text"]}, embed=FixedVectors)
async def ranks_closest_first(st: Facade) -> list[Any]:
    for k in ("a", "b", "c", "d"):
        await st.put(("docs",), k, {"text": k})
    found = await st.search(("docs",), query="a")
    assert keys(found) == ["a", "b", "c", "d"]
    assert [r.score for r in found] == pytest.approx([1.0, 2 / math.sqrt(4.01), 0.0, -1.0], abs=1e-5)
    return [found, await st.search(("docs",), query="c", limit=1)]


@case(index={"fields": ["text"]}, real=True)
async def non_ascii(st: Facade) -> list[Any]:
    texts = ["这是中文", "これは日本語です", "이건 한국어야", "Это русский", "यह रूसी है"]
    for i, t in enumerate(texts, 1):
        await st.put(("user_123", "memories"), str(i), {"text": t})
    out = []
    for i, t in enumerate(texts, 1):
        found = await st.search(("user_123", "memories"), query=t)
        assert found[0].key == str(i)
        out.append(found)
    return out


@case(index={"fields": ["text"]}, real=True)
async def vector_search_across_namespaces(st: Facade) -> list[Any]:
    for ns in [("u1", "mem"), ("u1", "notes"), ("u2", "mem"), ("u10", "mem")]:
        for k, t in (("a", "I like green tea"), ("b", "my dog is called Rex"),
                     ("c", f"lives in {ns[0]}")):
            await st.put(ns, k, {"text": t, "owner": ns[0]})
    # (u1, mem) and (u1, notes) hold the same texts: pages cut between ties, never through them
    return [await st.search(("u1",), query="what pet do I have", limit=4),
            await st.search(("u1", "mem"), query="drinks", limit=2),
            await st.search((), query="tea", filter={"owner": "u2"}, limit=5),
            await st.search(("u1",), query="dog", limit=2, offset=2)]


@case(refs=("memory",), real=True)
async def list_namespaces_match_path_as_str(st: Facade) -> list[Any]:
    """A MatchCondition path given as a str is read as InMemoryStore and PostgresStore read it,
    the sequence of its characters (LangGraph's Postgres suite passes "public"): no error."""
    for ns in [("test", "documents", "public"), ("test", "images", "public"),
               ("p", "u", "b", "l", "i", "c"), ("x", "p", "u", "b", "l", "i", "c")]:
        await st.put(ns, "doc", {"content": "x"})
    r = await st.batch([
        ListNamespacesOp(match_conditions=(MatchCondition("suffix", "public"),),  # type: ignore[arg-type]
                         max_depth=None, limit=10, offset=0),
        ListNamespacesOp(match_conditions=(MatchCondition("prefix", "pub"),),  # type: ignore[arg-type]
                         max_depth=None, limit=10, offset=0),
    ])
    assert all(ns[-1] == "c" for ns in r[0])
    return [sorted(x) for x in r]


# ================================================================================================
# TTL (SqliteStore is the reference: InMemoryStore has none). Expired = invisible at once.
# ================================================================================================
SECOND = 1 / 60  # TTLs are minutes


@case(refs=("sqlite",), ttl={"omit_expired": True, "refresh_on_read": False}, real=True)
async def ttl_per_put(st: Facade) -> list[Any]:
    await st.put(("ttl", "gone"), "e", {"v": "gone"}, ttl=SECOND)
    await st.put(("ttl", "kept"), "k", {"v": "keep"}, ttl=None)
    await st.put(("ttl", "kept"), "long", {"v": "long"}, ttl=10.0)
    before = [await st.get(("ttl", "gone"), "e"), srt(await st.search(("ttl",)))]
    await st.sleep(1.6)
    await st.settle()
    after = [await st.get(("ttl", "gone"), "e"), srt(await st.search(("ttl",))),
             srt(await st.search(("ttl", "gone"))),
             sorted(await st.list_namespaces(prefix=("ttl",)))]
    assert after[0] is None and after[2] == [] and after[3] == [("ttl", "kept")]
    return before + after


@case(refs=("sqlite",), ttl={"omit_expired": True, "default_ttl": SECOND,
                             "refresh_on_read": False})
async def ttl_default(st: Facade) -> list[Any]:
    await st.put(("d",), "default", {"v": 1})
    await st.put(("d",), "forever", {"v": 2}, ttl=None)
    await st.put(("d",), "longer", {"v": 3}, ttl=5.0)
    await st.batch([PutOp(("d",), "batched", {"v": 4})])  # a PutOp's ttl is its own (None)
    await st.sleep(1.6)
    await st.settle()
    return [srt(await st.search(("d",))), await st.get(("d",), "default")]


# No reference: SqliteStore 3.1 refreshes to whole seconds (an item read at 1.9 s may get
# only 1.1 s more); the case's own assertions are LangGraph's TTL rules.
@case(refs=(), ttl={"omit_expired": True, "default_ttl": 2 * SECOND, "refresh_on_read": True},
      real=True)
async def ttl_refresh_on_read(st: Facade) -> list[Any]:
    await st.put(("r",), "read", {"v": 1})
    await st.put(("r",), "searched", {"v": 2})
    await st.put(("r",), "ignored", {"v": 3})
    await st.put(("r",), "peeked", {"v": 4})
    await st.sleep(1.3)
    assert await st.get(("r",), "read") is not None  # refreshes (the config's default)
    assert keys(await st.search(("r",), filter={"v": 2})) == ["searched"]  # refreshes
    assert await st.get(("r",), "peeked", refresh_ttl=False) is not None  # does not
    await st.sleep(1.3)
    await st.settle()
    out = [srt(await st.search(("r",), refresh_ttl=False))]
    await st.sleep(1.6)
    await st.settle()
    out.append(srt(await st.search(("r",), refresh_ttl=False)))
    assert out[0] and [i[2] for i in out[0]] == ["read", "searched"]
    assert out[1] == []
    return out


@case(refs=("sqlite",), ttl={"default_ttl": 3 * SECOND, "refresh_on_read": False})
async def ttl_override_default(st: Facade) -> list[Any]:
    """A put's own TTL overrides the config's default; ttl=None is forever (LangGraph's
    test_ttl_override_default, with refresh_on_read said: SqliteStore never refreshes when
    the config does not say, where BaseStore and PostgresStore refresh, docs/STORE.md)."""
    await st.put(("test",), "item1", {"value": "override"}, ttl=SECOND)
    await st.put(("test",), "item2", {"value": "default"})
    await st.put(("test",), "item3", {"value": "permanent"}, ttl=None)
    await st.sleep(1.6)
    await st.settle()
    first = [await st.get(("test",), k) for k in ("item1", "item2", "item3")]
    await st.sleep(2)
    await st.settle()
    second = [await st.get(("test",), k) for k in ("item2", "item3")]
    assert first[0] is None and first[1] is not None and first[2] is not None
    assert second[0] is None and second[1] is not None
    return first + second


@case(refs=(), ttl={"default_ttl": 5 * SECOND}, real=True)
async def ttl_refresh_on_read_unset_refreshes(st: Facade) -> list[Any]:
    """refresh_on_read unset is True, as TTLConfig documents it and BaseStore passes it:
    a get at 2 s restarts the 5 s TTL (SqliteStore does not refresh here; PostgresStore does)."""
    await st.put(("test",), "item2", {"value": "default"})
    await st.sleep(2)
    assert await st.get(("test",), "item2") is not None
    await st.sleep(4)
    assert await st.get(("test",), "item2", refresh_ttl=False) is not None  # 6 s < 2 + 5
    await st.sleep(1.5)
    assert await st.get(("test",), "item2") is None
    return []


@case(refs=(), ttl={"default_ttl": 2 * SECOND, "omit_expired": False}, real=True)
async def ttl_omit_expired_false_keeps_expired_rows_until_swept(st: Facade) -> list[Any]:
    """TTLConfig omit_expired False, as PostgresStore reads it: an expired item stays visible
    to get, search and list_namespaces until a sweep deletes it, and a read that refreshes
    starts its TTL again."""
    await st.put(("keep",), "k", {"data": "still-here"})
    await st.put(("keep",), "r", {"data": "refreshed"})
    await st.put(("keep", "gone"), "g", {"data": "swept"})
    await st.sleep(3)
    assert (await st.get(("keep",), "k", refresh_ttl=False)) is not None
    assert sorted(keys(await st.search(("keep",), refresh_ttl=False))) == ["g", "k", "r"]
    assert ("keep", "gone") in await st.list_namespaces(prefix=("keep",))
    assert (await st.get(("keep",), "r")) is not None  # refreshed: alive for 2 s more
    await st.sweep()  # type: ignore[attr-defined]
    assert await st.get(("keep",), "k", refresh_ttl=False) is None
    assert keys(await st.search(("keep",), refresh_ttl=False)) == ["r"]
    assert await st.list_namespaces(prefix=("keep",)) == [("keep",)]
    return []


@case(refs=(), ttl={"default_ttl": 2 * SECOND, "omit_expired": True}, real=True)
async def ttl_omit_expired_true_hides_and_never_refreshes_expired_rows(st: Facade) -> list[Any]:
    """omit_expired True (and unset): expired items are invisible at once, a refreshing read
    does not bring one back, and a page is full of live items (PostgresStore's cases)."""
    for k in ("a", "b", "c"):
        await st.put(("page",), k, {"k": k}, ttl=10.0)
        await st.sleep(0.01)
    await st.put(("page",), "expired", {"k": "x"})  # newest: the first row of every page
    await st.sleep(3)
    assert await st.get(("page",), "expired") is None
    assert "expired" not in keys(await st.search(("page",)))
    assert await st.get(("page",), "expired", refresh_ttl=False) is None
    page1 = keys(await st.search(("page",), limit=2, offset=0))
    page2 = keys(await st.search(("page",), limit=2, offset=2))
    filtered = keys(await st.search(("page",), filter={"k": {"$ne": "zzz"}}, limit=2))
    assert page1 == ["c", "b"] and page2 == ["a"] and filtered == ["c", "b"]
    return []


# ================================================================================================
# Bad input: a typed error, and nothing changes
# ================================================================================================
BAD_NAMESPACES: list[Any] = [(), ("foo.bar",), ("foo", ""), ("a", 123), ("langgraph", "x"),
                             ("nul\x00",)]


@case(refs=("memory", "sqlite"))
async def invalid_namespaces(st: Facade) -> list[Any]:
    """Checked before anything is sent (the root is bypassed: these are the caller's own)."""
    await st.put(("ok",), "k", {"v": 1})
    before = await st.everything()
    raw = Facade(st.store, st.mode)
    out = []
    for ns in BAD_NAMESPACES:
        calls = [("put", raw.put(ns, "k", {"v": 2}))]
        if ns and ns[0] != "langgraph":  # get((), k) and reads under "langgraph" are allowed
            calls += [("get", raw.get(ns, "k")), ("delete", raw.delete(ns, "k")),
                      ("search", raw.search(ns)), ("prefix", raw.list_namespaces(prefix=ns)),
                      ("suffix", raw.list_namespaces(suffix=ns))]
        for what, call in calls:
            with pytest.raises(InvalidNamespaceError):
                await call
            out.append((repr(ns), what))
    assert await st.everything() == before
    return out


@case(refs=("sqlite",))  # InMemoryStore.batch does not check labels; SqliteStore's does
async def invalid_namespace_in_a_batch_changes_nothing(st: Facade) -> list[Any]:
    await st.put(("ok",), "k", {"v": 1})
    before = await st.everything()
    for bad in [PutOp(("foo.bar",), "k", {"v": 2}), GetOp(("a", ""), "k"), SearchOp(("x.y",)),
                ListNamespacesOp(match_conditions=(MatchCondition("suffix", ("a.b",)),))]:
        with pytest.raises(InvalidNamespaceError):
            await st.store_batch_raw([PutOp(("ok",), "k", {"v": 99}), bad])  # type: ignore[attr-defined]
    assert await st.everything() == before
    return [before]


@case(refs=("memory",))
async def unknown_filter_operator(st: Facade) -> list[Any]:
    await st.put(("f",), "a", {"v": 1})
    before = await st.everything()
    for flt in [{"v": {"$in": [1]}}, {"v": {"$regex": ".*"}}, {"v": {"$gt": 0, "$bogus": 1}},
                {"v": {"$": 1}}]:
        with pytest.raises(ValueError):
            await st.search(("f",), filter=flt)
        with pytest.raises(ValueError):
            await st.batch([PutOp(("f",), "b", {"v": 2}), SearchOp(("f",), filter=flt)])
    assert await st.everything() == before
    return [before]


# The D1-only error cases need the implementation's error types: see test_bad_input_* below.


# ================================================================================================
# The runner
# ================================================================================================
async def _raw_batch(self: Facade, ops: list[Any]) -> Any:
    """batch() with the ops exactly as given (namespaces under the root, labels unchecked)."""
    rooted = [o if not self.root else self.op(o) for o in ops]
    return await self._call("batch", rooted)

async def _sweep(self: Facade) -> int:
    """The store's TTL sweep through the facade's API flavour."""
    if self.mode == "sync":
        return int(self.store.sweep_ttl())
    return int(await self.store.asweep_ttl())


Facade.store_batch_raw = _raw_batch  # type: ignore[attr-defined]
Facade.sweep = _sweep  # type: ignore[attr-defined]


def d1_store(subject: D1Subject, c: Case) -> Any:
    kwargs: dict[str, Any] = {}
    idx = index_config(c)
    if idx is not None:
        kwargs["index"] = idx
    if c.ttl is not None:
        kwargs["ttl"] = c.ttl
    store = subject.store(**kwargs)
    setup = getattr(store, "setup", None)
    if setup is not None:
        setup()
    return store


@pytest.mark.parametrize("name", list(CASES))
def test_references_agree(name: str) -> None:
    """Each case holds on LangGraph's stores, and they agree where the case names both."""
    refs = {kind: reference(name, kind) for kind in CASES[name].refs}
    if len(refs) == 2:
        same(refs["memory"], refs["sqlite"])


@pytest.mark.parametrize("name,subject_name,mode", list(params()))
def test_case(name: str, subject_name: str, mode: str, request: pytest.FixtureRequest) -> None:
    c = CASES[name]
    refs = {kind: reference(name, kind) for kind in c.refs}
    if len(refs) == 2:
        same(refs["memory"], refs["sqlite"])  # the references agree, or the case says which
    subject = make_subject(subject_name, request)
    request.addfinalizer(subject.close)
    store = d1_store(subject, c)
    clock = subject.clock if getattr(store, "clock", None) is subject.clock else None
    got = plain(drive(c.fn, Facade(store, mode, subject.root, clock=clock)))
    for want in refs.values():
        same(got, want)


def test_reference_cases_are_registered() -> None:
    assert len(CASES) >= 40
    assert all(c.refs or name in ("ttl_refresh_on_read", "ttl_refresh_on_read_unset_refreshes",
                                  "ttl_omit_expired_false_keeps_expired_rows_until_swept",
                                  "ttl_omit_expired_true_hides_and_never_refreshes_expired_rows")
               for name, c in CASES.items())


# ================================================================================================
# D1Store only: requests, bad input, large values, the sweep
# ================================================================================================
def errors() -> Any:
    import d1saver
    from tests.memory.subjects import implementation

    implementation("D1Store")
    return d1saver.InvalidInputError, d1saver.ValueTooLargeError


def warm(store: Any) -> None:
    """The first call also creates the tables (once per database): count from the second."""
    store.get(("warm",), "up")
    store.search(("warm",))


@pytest.fixture(params=subject_params(real=True))
def d1(request: pytest.FixtureRequest) -> Iterator[D1Subject]:
    s = make_subject(request.param, request)
    yield s
    s.close()


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_one_request_per_call(d1: D1Subject, mode: str) -> None:
    store = d1_store(d1, Case(basic_ops, (), False, {"fields": ["text"]}, None, None, (), None))
    warm(store)
    st = Facade(store, mode, d1.root)
    single = len(d1.database_ids) == 1
    ops = [PutOp(("u", f"n{i % 7}"), f"k{i}", {"text": f"memory number {i}", "i": i})
           for i in range(120)]

    def n(scenario: Any) -> int:
        before = len(d1.events)
        drive(scenario, st)
        return len(d1.events) - before

    async def batch_puts(s: Facade) -> None:
        await s.batch(ops)

    async def mixed(s: Facade) -> None:
        r = await s.batch([GetOp(("u", "n1"), "k1"), SearchOp(("u",), filter={"i": {"$gt": 100}}, limit=100),
                           SearchOp(("u",), query="number 7", limit=3),
                           ListNamespacesOp(match_conditions=None, limit=100),
                           PutOp(("u", "n1"), "k1", {"text": "changed", "i": -1}),
                           PutOp(("u", "n2"), "k2", None)])
        assert r[0].value["i"] == 1 and len(r[1]) == 19 and len(r[2]) == 3 and len(r[3]) == 7

    async def each(s: Facade) -> None:
        await s.put(("u", "n3"), "k3", {"text": "x"})

    async def get(s: Facade) -> None:
        assert (await s.get(("u", "n3"), "k3")).value == {"text": "x"}

    async def search(s: Facade) -> None:
        assert len(await s.search(("u",), query="memory", filter={"i": {"$lte": 50}})) == 10

    async def listing(s: Facade) -> None:
        assert len(await s.list_namespaces(prefix=("u",))) == 7

    async def delete(s: Facade) -> None:
        await s.delete(("u", "n3"), "k3")

    databases = 1 if single else len(d1.database_ids)
    assert n(batch_puts) <= databases
    assert n(mixed) <= databases
    for scenario in (each, get, delete):
        assert n(scenario) == 1, scenario.__name__  # one namespace: one database
    for scenario in (search, listing):  # a namespace's first label picks its database
        assert n(scenario) == 1, scenario.__name__
    if single:
        assert n(batch_puts) == 1 and n(mixed) == 1


def test_fleet_keeps_a_first_label_in_one_database(subject_name: str = "local-fleet4-keys",
                                                   ) -> None:
    from tests.memory.subjects import local_subject

    errors()
    d1 = local_subject(subject_name)
    try:
        store = d1.store()
        for user in range(12):
            store.batch([PutOp((f"user-{user}", "facts", str(j)), "k", {"j": j}) for j in range(5)])
        used = set()
        for user in range(12):
            before = len(d1.events)
            found = store.search((f"user-{user}",))
            assert len(found) == 5
            (event,) = d1.events[before:]
            used.add(event.database_id)
        assert len(used) > 1  # twelve users spread over the fleet
        everything = Facade(store).store.search((), limit=1000)
        assert len(everything) == 60
    finally:
        d1.close()


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_bad_input_changes_nothing(d1: D1Subject, mode: str) -> None:
    invalid, too_large = errors()

    class Broken(CharEmbeddings):
        def embed_one(self, text: str) -> list[float]:
            if "nan" in text:
                return [float("nan")] * self.dims
            if "inf" in text:
                return [float("inf")] + [0.0] * (self.dims - 1)
            if "short" in text:
                return [1.0] * (self.dims - 1)
            return super().embed_one(text)

    store = d1.store(index={"dims": DIMS, "embed": Broken(DIMS), "fields": ["text"]})
    st = Facade(store, mode, d1.root)

    async def setup(s: Facade) -> Any:
        await s.put(("ok",), "k", {"text": "kept", "v": 1})
        return await s.everything()

    async def bad_calls(s: Facade) -> None:
        bad: list[tuple[type[Exception], Any]] = [
            (invalid, s.search(("ok",), filter={"v": {"$in": [1]}})),
            (invalid, s.search(("ok",), filter={"v": {"$gt": 0, "$regex": "x"}})),
            (invalid, s.batch([PutOp(("ok",), "k", {"text": "changed"}),
                               SearchOp(("ok",), filter={"v": {"$nope": 1}})])),
            (invalid, s.put(("ok",), "k", {"text": "nan here"})),
            (invalid, s.put(("ok",), "k", {"text": "inf here"})),
            (invalid, s.put(("ok",), "k", {"text": "short vector"})),
            (invalid, s.batch([PutOp(("ok",), "other", {"text": "fine"}),
                               PutOp(("ok",), "k", {"text": "nan again"})])),
            (invalid, s.search(("ok",), query="nan query")),
            (invalid, s.search(("ok",), query="short query")),
            (InvalidNamespaceError, s.batch([PutOp(("ok",), "k", {"v": 2}),
                                             PutOp(("a.b",), "k", {"v": 2})])),
            (too_large, s.put(("ok",), "k", {"text": "big", "blob": _incompressible(2_600_000)})),
            (too_large, s.batch([PutOp(("ok",), "other", {"v": 3}),
                                 PutOp(("ok",), "k", {"blob": _incompressible(3_000_000)})])),
        ]
        for i, (kind, call) in enumerate(bad):
            with pytest.raises(kind) as info:
                await call
            assert isinstance(info.value, ValueError), (i, info.value)
            if kind is not InvalidNamespaceError:
                assert isinstance(info.value, invalid), (i, info.value)

    async def after(s: Facade) -> Any:
        return await s.everything()

    before = drive(setup, st)
    sent = len(d1.events)
    drive(bad_calls, st)
    assert len(d1.events) == sent  # refused before anything was sent
    assert drive(after, st) == before


def _incompressible(n: int) -> str:
    import base64
    import random

    rng = random.Random(n)
    return base64.b64encode(rng.randbytes(n * 3 // 4)).decode()[:n]


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_large_values_round_trip(d1: D1Subject, mode: str) -> None:
    errors()
    store = d1.store()
    st = Facade(store, mode, d1.root)
    big = {"notes": _incompressible(1_200_000), "n": 1}
    repetitive = {"log": "the same line again\n" * 250_000}  # 5 MB that compresses well

    async def scenario(s: Facade) -> None:
        await s.put(("big",), "a", big)
        await s.put(("big",), "b", repetitive)
        assert (await s.get(("big",), "a")).value == big
        assert (await s.get(("big",), "b")).value == repetitive
        found = await s.search(("big",), filter={"n": 1})
        assert [i.key for i in found] == ["a"] and found[0].value == big

    drive(scenario, st)


def test_sweep_removes_expired_rows(d1: D1Subject) -> None:
    errors()
    store = d1.store(ttl={"default_ttl": 1.0, "refresh_on_read": False})
    st = Facade(store, "sync", d1.root)
    for i in range(5):
        store.put(st.ns(("s",)), f"short{i}", {"i": i})
    store.put(st.ns(("s",)), "forever", {"i": -1}, ttl=None)
    d1.clock.advance(30)
    swept = store.sweep_ttl()
    assert swept == 0 or d1.real  # the real engine's databases hold other tests' rows too
    assert len(store.search(st.ns(("s",)))) == 6
    d1.clock.advance(31)
    assert len(store.search(st.ns(("s",)))) == 1  # invisible before any sweep
    assert store.sweep_ttl() >= 5
    assert store.sweep_ttl() == 0 or d1.real
    assert [i.key for i in store.search(st.ns(("s",)))] == ["forever"]


def test_async_concurrent_calls() -> None:
    """Many aput/adelete/asearch at once (LangGraph's concurrent vector-search case)."""
    from tests.memory.subjects import local_subject

    errors()
    d1 = local_subject("local-fleet4-keys")
    embed = CharEmbeddings(DIMS)
    store = d1.store(index={"dims": DIMS, "embed": embed, "fields": ["text"]})
    colors, things = ["red", "blue", "green", "yellow", "purple"], ["apple", "car", "house", "book"]
    docs = [(f"doc{i}", {"text": f"{colors[i % 5]} {things[i % 4]}", "color": colors[i % 5],
                         "score": 3.0 + (i % 5) / 2, "index": i}) for i in range(50)]
    queries: list[tuple[str, dict[str, Any]]] = [
        ("apple", {"color": "red"}), ("car", {"color": "blue"}), ("house", {"index": {"$gt": 25}}),
        ("book", {"score": {"$lte": 3.5}}), ("apple", {"score": {"$gte": 3.0}, "color": "red"})]

    async def run() -> list[Any]:
        await asyncio.gather(*[store.aput(("test",), k, v) for k, v in docs])
        await asyncio.gather(*[store.adelete(("test",), k) for k, _ in docs[::2]])
        await asyncio.gather(*[store.aput(("test",), k, v) for k, v in docs[::2]])
        return await asyncio.gather(*[store.asearch(("test",), query=q, filter=f, limit=20)
                                      for q, f in queries])

    try:
        results = asyncio.run(run())
        ref = InMemoryStore(index={"dims": DIMS, "embed": CharEmbeddings(DIMS), "fields": ["text"]})
        for k, v in docs:
            ref.put(("test",), k, v)
        for found, (q, f) in zip(results, queries, strict=True):
            want = ref.search(("test",), query=q, filter=f, limit=20)
            same(plain(found), plain(want))
        assert len(store.search(("test",), limit=100)) == 50
    finally:
        d1.close()


def test_sync_calls_from_the_event_loop_are_refused() -> None:
    """LangGraph's test_no_running_loop: a sync call from the running loop's thread would
    block the loop for a whole request; it raises asyncio.InvalidStateError, sending nothing,
    and works from another thread."""
    from concurrent.futures import ThreadPoolExecutor

    from tests.memory.subjects import local_subject

    errors()
    d1 = local_subject("local")
    store = d1.store()

    async def scenario() -> None:
        before = len(d1.events)
        for call in (lambda: store.put(("foo", "bar"), "baz", {"val": "baz"}),
                     lambda: store.get(("foo", "bar"), "baz"),
                     lambda: store.delete(("foo", "bar"), "baz"),
                     lambda: store.search(("foo", "bar")),
                     lambda: store.list_namespaces(prefix=("foo",)),
                     lambda: store.batch([PutOp(("foo", "bar"), "baz", {"val": "baz"})])):
            with pytest.raises(asyncio.InvalidStateError):
                call()
        assert len(d1.events) == before
        with ThreadPoolExecutor(max_workers=1) as executor:
            await asyncio.wrap_future(executor.submit(store.put, ("foo", "bar"), "baz",
                                                      {"val": "baz"}))
            got = await asyncio.wrap_future(executor.submit(store.get, ("foo", "bar"), "baz"))
            assert got is not None and got.value == {"val": "baz"}
        assert (await store.aget(("foo", "bar"), "baz")) is not None

    try:
        asyncio.run(scenario())
    finally:
        d1.close()
