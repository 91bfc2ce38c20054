"""D1Store on the local D1: the BaseStore contract, one request per batch, literal namespaces,
filters and listings as InMemoryStore answers them, TTLs, and bad input refused unsent."""

from __future__ import annotations

import json
import logging
import threading
from typing import Any

import pytest
from langgraph.store.base import GetOp, ListNamespacesOp, MatchCondition, PutOp, SearchOp
from langgraph.store.memory import InMemoryStore

from d1saver import InvalidInputError, ValueTooLargeError
from d1saver.memory import namespaces as _ns
from tests.memory.conftest import Memory
from tests.memory.embeddings import TrigramEmbeddings
from tests.support import Before, body_has


def test_put_get_delete_round_trip(memory: Memory) -> None:
    store = memory.store()
    store.put(("users", "u1"), "prefs", {"theme": "dark", "n": [1, 2.5, None, True]})
    item = store.get(("users", "u1"), "prefs")
    assert item is not None
    assert item.value == {"theme": "dark", "n": [1, 2.5, None, True]}
    assert item.namespace == ("users", "u1") and item.key == "prefs"
    memory.clock.advance(0.25)
    store.put(("users", "u1"), "prefs", {"theme": "light"})
    again = store.get(("users", "u1"), "prefs")
    assert again is not None and again.value == {"theme": "light"}
    assert again.created_at == item.created_at  # kept, as SqliteStore and PostgresStore
    assert (again.updated_at - item.updated_at).total_seconds() == pytest.approx(0.25)
    store.delete(("users", "u1"), "prefs")
    assert store.get(("users", "u1"), "prefs") is None
    assert store.get(("users", "nobody"), "prefs") is None


def test_one_request_per_batch_whatever_it_holds(memory: Memory) -> None:
    store = memory.store()
    store.setup()
    puts = [PutOp(("docs", str(i % 7)), f"k{i}", {"i": i, "text": "x" * 50}) for i in range(400)]
    _, n = memory.requests(lambda: store.batch(puts))
    assert n == 1
    ops = [GetOp(("docs", "3"), "k3"), GetOp(("docs", "1"), "k1"), GetOp(("docs", "1"), "nope"),
           SearchOp(("docs",), {"i": {"$lt": 20}}, 5, 0),
           SearchOp(("docs", "2"), None, 3, 1),
           ListNamespacesOp((MatchCondition("prefix", ("docs",)),), None, 100, 0),
           PutOp(("docs", "9"), "new", {"i": -1}),
           PutOp(("docs", "1"), "k1", None)]
    results, n = memory.requests(lambda: store.batch(ops))
    assert n == 1
    assert results[0].value["i"] == 3 and results[1].value["i"] == 1 and results[2] is None
    assert len(results[3]) == 5 and all(r.value["i"] < 20 for r in results[3])
    assert len(results[4]) == 3
    assert results[5] == [("docs", str(i)) for i in range(7)]  # reads see the state before puts
    assert results[6] is None and results[7] is None
    assert store.get(("docs", "1"), "k1") is None and store.get(("docs", "9"), "new") is not None


def test_last_put_of_a_key_in_a_batch_wins(memory: Memory) -> None:
    store = memory.store()
    store.batch([PutOp(("a",), "k", {"v": 1}), PutOp(("a",), "k", None), PutOp(("a",), "k", {"v": 3})])
    assert store.get(("a",), "k").value == {"v": 3}  # type: ignore[union-attr]
    store.batch([PutOp(("a",), "k", {"v": 4}), PutOp(("a",), "k", None)])
    assert store.get(("a",), "k") is None


HOSTILE = ["%", "_", "*", "?", "[", "[a]", "+", "a\nb", ":", "a:b", "A", "a", "ab", "a%",
           "é", "😀", '"', "\\", "'", "a b", "langgraph_x"]


def test_labels_are_data_and_prefixes_match_whole_labels(memory: Memory) -> None:
    store = memory.store()
    reference = InMemoryStore()
    for label in HOSTILE:
        for s in (store, reference):
            s.put((label, "x"), "k", {"label": label})
            s.put(("root", label), "k", {"label": label})
    for label in HOSTILE:
        got = store.search((label,))
        assert [i.value["label"] for i in got] == [label], label
        got = store.search(("root", label))
        assert [i.value["label"] for i in got] == [label], label
        assert store.get((label, "x"), "k").value == {"label": label}  # type: ignore[union-attr]
        assert store.list_namespaces(prefix=(label,)) == reference.list_namespaces(prefix=(label,))
        assert (store.list_namespaces(suffix=(label,))
                == reference.list_namespaces(suffix=(label,)))
    assert store.list_namespaces(limit=1000) == reference.list_namespaces(limit=1000)
    assert len(store.search(("root",), limit=100)) == len(HOSTILE)


def test_namespace_text_ranges() -> None:
    exact, low, high = _ns.scope(("a",))
    assert (exact, low, high) == ('["a"]', '["a","', '["a",#')
    for ns, inside in [(("a",), True), (("a", "b"), True), (("ab",), False), (("a\"",), False),
                       (("a", "b", "c"), True), (("b",), False)]:
        text = _ns.encode(ns)
        assert (text == exact or low <= text < high) is inside, ns


ITEMS: list[tuple[tuple[str, ...], str, dict[str, Any]]] = [
    (("f", "a"), "1", {"n": 1, "s": "x", "b": True, "nested": {"k": 1, "deep": {"z": "q"}}}),
    (("f", "a"), "2", {"n": 2.5, "s": "y", "b": False, "nested": {"k": 2}, "tags": ["a", "b"]}),
    (("f", "b"), "3", {"n": "5", "s": "x", "nested": {"k": "1"}, "tags": ["a"]}),
    (("f", "b"), "4", {"n": None, "s": 1, "tags": ["a", "b"]}),
    (("f", "c"), "5", {"n": 10, "s": "1", "b": 1, "nested": {"k": 1.0}}),
    (("f", "c"), "6", {}),
]
FILTERS: list[dict[str, Any]] = [
    {"s": "x"}, {"s": 1}, {"s": "1"}, {"n": 1}, {"n": None}, {"b": True}, {"b": 1}, {"b": False},
    {"n": {"$gt": 1}}, {"n": {"$gte": 2.5}}, {"n": {"$lt": 5}}, {"n": {"$lte": 5}},
    {"n": {"$ne": 1}}, {"n": {"$eq": 2.5}}, {"n": {"$gt": 1, "$lt": 6}},
    {"nested": {"k": 1}}, {"nested": {"deep": {"z": "q"}}}, {"tags": ["a", "b"]},
    {"tags": ["a"]}, {"s": "x", "n": 1}, {"missing": None}, {"missing": {"$ne": 1}},
    {"s": {"$gt": "a"}}, {"b": 1.0}, {"n": True}, {"nested": {"k": "1"}}, {"s": {"$eq": "x"}},
    {"nested": {}}, {"nested": {"k": 1, "deep": {"z": "q"}}}, {"nested": {"k": None}},
    {"a.b": None}, {"s": "x", "tags": ["a"]},
]


@pytest.mark.parametrize("filter", FILTERS, ids=[json.dumps(f) for f in FILTERS])
def test_filters_answer_as_in_memory_store(memory: Memory, filter: dict[str, Any]) -> None:
    store, reference = memory.store(), InMemoryStore()
    for ns, key, value in ITEMS:
        store.put(ns, key, value)
        reference.put(ns, key, value)
    try:
        want = sorted(i.key for i in reference.search(("f",), filter=filter, limit=50))
    except (TypeError, ValueError):  # InMemoryStore raises comparing None with a number
        want = sorted(key for _, key, value in ITEMS if _reference_match(value, filter))
    got = sorted(i.key for i in store.search(("f",), filter=filter, limit=50))
    assert got == want


def _reference_match(value: dict[str, Any], filter: dict[str, Any]) -> bool:
    """InMemoryStore's own comparison, item by item; one it cannot make is no match (D1Store's
    rule, where InMemoryStore fails the whole search)."""
    from langgraph.store.memory import _compare_values
    try:
        return all(_compare_values(value.get(k), v) for k, v in filter.items())
    except (TypeError, ValueError):
        return False


def test_search_pages_newest_first(memory: Memory) -> None:
    store = memory.store()
    for i in range(10):
        store.put(("p",), f"k{i}", {"i": i})
        memory.clock.advance(0.001)
    assert [i.key for i in store.search(("p",), limit=3)] == ["k9", "k8", "k7"]
    assert [i.key for i in store.search(("p",), limit=3, offset=3)] == ["k6", "k5", "k4"]
    assert [i.key for i in store.search(("p",), filter={"i": {"$lt": 5}}, limit=2, offset=1)] \
        == ["k3", "k2"]
    assert store.search(("p",), offset=20) == []


def test_list_namespaces_as_in_memory_store(memory: Memory) -> None:
    store, reference = memory.store(), InMemoryStore()
    names = [("a", "b", "c"), ("a", "b", "d"), ("a", "e"), ("x", "b", "c"), ("x",), ("y", "z", "c", "d")]
    for ns in names:
        store.put(ns, "k", {})
        reference.put(ns, "k", {})
    cases: list[dict[str, Any]] = [
        {}, {"prefix": ("a",)}, {"prefix": ("a", "*")}, {"prefix": ("*", "b")},
        {"suffix": ("c",)}, {"suffix": ("*", "c")}, {"prefix": ("a",), "suffix": ("d",)},
        {"max_depth": 1}, {"max_depth": 2}, {"prefix": ("a",), "max_depth": 2},
        {"limit": 2}, {"limit": 2, "offset": 2}, {"offset": 5}, {"prefix": ("nothing",)},
    ]
    for case in cases:
        assert store.list_namespaces(**case) == reference.list_namespaces(**case), case


def test_ttl_hides_expired_items_at_once_and_sweep_deletes_them(memory: Memory) -> None:
    store = memory.store()
    store.put(("t",), "short", {"v": 1}, ttl=1)
    store.put(("t",), "long", {"v": 2}, ttl=10)
    store.put(("t",), "forever", {"v": 3})
    memory.clock.advance(59)
    assert store.get(("t",), "short") is not None  # read at 59 s: refreshed to 59 + 60
    memory.clock.advance(59)
    assert store.get(("t",), "short", refresh_ttl=False) is not None  # 118 s < 119 s
    memory.clock.advance(1)
    assert store.get(("t",), "short") is None
    assert [i.key for i in store.search(("t",))] == ["forever", "long"]
    assert store.list_namespaces() == [("t",)]
    memory.clock.advance(600)
    assert [i.key for i in store.search(("t",))] == ["forever"]
    assert store.sweep_ttl() == 2
    assert store.sweep_ttl() == 0
    store.put(("gone",), "k", {}, ttl=0.5)
    memory.clock.advance(31)
    assert store.list_namespaces() == [("t",)]


def test_a_failing_ttl_sweep_is_logged_and_the_sweeper_goes_on(
        memory: Memory, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    """The first sweep fails: it is logged at WARNING with its exception (never the token), the
    next sweep runs, nothing reaches the thread's excepthook, and close stops the thread."""
    store = memory.store()
    real, calls, swept = store.sweep_ttl, [], threading.Event()

    def flaky() -> int:
        calls.append(len(calls))
        if len(calls) == 1:
            raise RuntimeError("the sweep failed")
        swept.set()
        return real()

    monkeypatch.setattr(store, "sweep_ttl", flaky)
    escaped: list[Any] = []
    monkeypatch.setattr(threading, "excepthook", escaped.append)
    with caplog.at_level(logging.WARNING, logger="d1saver"):
        thread = store.start_ttl_sweeper(sweep_interval_minutes=0.0005)  # 30 ms
        assert swept.wait(10)
        store.close()
    thread.join(10)  # close waits 1 s: a sweep under way on a loaded machine may take longer
    assert not thread.is_alive()
    assert escaped == []
    failed = [r for r in caplog.records if "TTL sweep failed" in r.getMessage()]
    assert len(failed) == 1 and failed[0].levelno == logging.WARNING
    assert failed[0].exc_info is not None and "RuntimeError: the sweep failed" in failed[0].getMessage()
    assert memory.api_token not in caplog.text


def test_close_stops_an_idle_ttl_sweeper(memory: Memory) -> None:
    store = memory.store()
    thread = store.start_ttl_sweeper(sweep_interval_minutes=60)
    assert thread.is_alive()
    store.close()
    assert not thread.is_alive()


def test_ttl_config_default_and_refresh_on_read(memory: Memory) -> None:
    store = memory.store(ttl={"default_ttl": 2, "refresh_on_read": False})
    store.put(("c",), "k", {"v": 1})
    store.put(("c",), "none", {"v": 2}, ttl=None)
    memory.clock.advance(100)
    assert store.get(("c",), "k") is not None  # not refreshed: expires at 120 s
    memory.clock.advance(30)
    assert store.get(("c",), "k") is None
    assert store.get(("c",), "none") is not None


def test_search_refreshes_the_page_it_returns(memory: Memory) -> None:
    store = memory.store()
    for key in "abc":
        store.put(("r",), key, {"key": key}, ttl=1)
        memory.clock.advance(0.001)
    memory.clock.advance(50)
    assert [i.key for i in store.search(("r",), limit=2)] == ["c", "b"]
    assert [i.key for i in store.search(("r",), filter={"key": "a"})] == ["a"]
    memory.clock.advance(50)  # c, b and a were read 50 s ago: all alive
    assert sorted(i.key for i in store.search(("r",), refresh_ttl=False)) == ["a", "b", "c"]


def test_put_over_an_expired_item_is_a_new_item(memory: Memory) -> None:
    store = memory.store()
    store.put(("e",), "k", {"v": 1}, ttl=1)
    first = store.get(("e",), "k")
    memory.clock.advance(120)
    store.put(("e",), "k", {"v": 2})
    again = store.get(("e",), "k")
    assert first is not None and again is not None
    assert again.created_at > first.created_at



@pytest.mark.parametrize("read", ["get", "search", "ranked"])
def test_a_read_refreshes_before_the_put_of_its_batch(memory: Memory, read: str) -> None:
    """Reads come before writes in a batch: an expired item still shown (omit_expired False)
    that a read refreshes is not expired when the batch's put of it follows, so it keeps its
    created_at, whether SQL refreshed it or a second request did (a ranked page)."""
    store = memory.store(ttl={"omit_expired": False, "refresh_on_read": True},
                         index={"dims": 16, "embed": TrigramEmbeddings(16)})
    store.put(("e",), "k", {"text": "lisbon is sunny"}, ttl=1)
    store.put(("e",), "other", {"text": "lisbon"}, ttl=1)
    first = store.get(("e",), "k", refresh_ttl=False)
    memory.clock.advance(120)
    op: Any = {"get": GetOp(("e",), "k"), "search": SearchOp(("e",), limit=10),
               "ranked": SearchOp(("e",), limit=10, query="lisbon")}[read]
    got, requests = memory.requests(lambda: store.batch([op, PutOp(("e",), "k", {"v": 2})]))
    assert got[0] and requests == (2 if read == "ranked" else 1)
    again = store.get(("e",), "k", refresh_ttl=False)
    assert first is not None and again is not None and again.value == {"v": 2}
    assert again.created_at == first.created_at
    assert again.updated_at > first.updated_at
    memory.clock.advance(3600)  # the put's TTL (none) stands; "other" was refreshed an hour ago
    assert store.sweep_ttl() == 1 and store.get(("e",), "k") is not None

def test_a_put_beside_the_restore_of_created_at_keeps_the_first_created_at(memory: Memory
                                                                          ) -> None:
    """A ranked page refreshes its expired item in a second request; the batch's put of it,
    which met it expired, has its created_at restored there. Another writer's put landing
    between the two requests, as if it came after the whole batch (refresh, put, put), leaves
    the item's first created_at, and its own value."""
    index = {"dims": 16, "embed": TrigramEmbeddings(16)}
    ttl = {"omit_expired": False, "refresh_on_read": True}
    other = memory.store(ttl=ttl, index=index)
    def put_beside() -> None:
        memory.clock.advance(5)  # a moment after the batch
        other.put(("e",), "k", {"text": "other"})

    beside = Before(memory.transport, body_has(b"SET created_at"), put_beside)
    store = memory.store(ttl=ttl, index=index, transport=beside)
    store.put(("e",), "k", {"text": "lisbon is sunny"}, ttl=1)
    first = store.get(("e",), "k", refresh_ttl=False)
    memory.clock.advance(120)
    store.batch([SearchOp(("e",), limit=10, query="lisbon"), PutOp(("e",), "k", {"v": 2})])
    assert beside.fired
    again = store.get(("e",), "k", refresh_ttl=False)
    assert first is not None and again is not None and again.value == {"text": "other"}
    assert again.created_at == first.created_at


BAD: list[Any] = [
    [PutOp(("",), "k", {})], [PutOp(("a.b",), "k", {})], [PutOp((), "k", {})],
    [PutOp(("a", 1), "k", {})],  # type: ignore[arg-type]
    [PutOp(("a\x00",), "k", {})], [GetOp(("a.b",), "k")],
    [SearchOp(("a",), {"n": {"$regex": "x"}})], [SearchOp(("a",), {"n": {"$in": [1]}})],
    [PutOp(("a",), "k", {"v": float("nan")})], [PutOp(("a",), "k", {"v": object()})],
    [PutOp(("a",), "k", ["not", "a", "dict"])],  # type: ignore[arg-type]
    [PutOp(("a",), "k", {}, ttl=float("nan"))],
    [PutOp(("ok",), "k", {"v": 1}), SearchOp(("a",), {"n": {"$bad": 1}})],
]


def test_a_langgraph_root_label_is_refused_by_put_only(memory: Memory) -> None:
    """As LangGraph's stores: put() refuses it (BaseStore validates), batch() stores it."""
    from langgraph.store.base import InvalidNamespaceError

    store = memory.store()
    with pytest.raises(InvalidNamespaceError):
        store.put(("langgraph",), "k", {"v": 1})
    store.batch([PutOp(("langgraph",), "k", {"v": 1})])
    item = store.get(("langgraph",), "k")
    assert item is not None and item.value == {"v": 1}


@pytest.mark.parametrize("ops", BAD)
def test_bad_input_is_a_typed_error_and_sends_nothing(memory: Memory, ops: list[Any]) -> None:
    store = memory.store()
    store.setup()
    with pytest.raises((InvalidInputError, TypeError)) as info:
        memory.requests(lambda: store.batch(ops))
    assert isinstance(info.value, InvalidInputError) or "SerializationError" in type(info.value).__name__
    before = len(memory.events)
    assert len(memory.events) == before
    assert store.get(("ok",), "k") is None


def test_invalid_namespace_is_also_langgraphs_error(memory: Memory) -> None:
    from langgraph.store.base import InvalidNamespaceError
    store = memory.store()
    with pytest.raises(InvalidNamespaceError):
        store.batch([PutOp(("a.b",), "k", {})])


def test_large_values_are_compressed_and_oversize_ones_refused(memory: Memory) -> None:
    store = memory.store()
    big = {"text": "memory " * 400_000}  # 2.8 MB of JSON, compresses well
    store.put(("big",), "k", big)
    assert store.get(("big",), "k").value == big  # type: ignore[union-attr]
    assert store.search(("big",), filter={"text": big["text"]})[0].key == "k"
    import os
    noise = {"text": os.urandom(1_500_000).hex()}  # 3 MB that does not compress
    store.setup()
    with pytest.raises(ValueTooLargeError):
        memory.requests(lambda: store.put(("big",), "noise", noise))
    assert store.get(("big",), "noise") is None


@pytest.mark.anyio
async def test_async_twins(memory: Memory) -> None:
    store = memory.store()
    await store.aput(("as", "1"), "k", {"v": 1}, ttl=5)
    await store.aput(("as", "2"), "k", {"v": 2})
    assert (await store.aget(("as", "1"), "k")).value == {"v": 1}  # type: ignore[union-attr]
    assert len(await store.asearch(("as",))) == 2
    assert await store.alist_namespaces(prefix=("as",)) == [("as", "1"), ("as", "2")]
    await store.adelete(("as", "1"), "k")
    assert await store.aget(("as", "1"), "k") is None
    memory.clock.advance(3600)
    assert await store.asweep_ttl() == 0
    await store.aclose()


def test_equality_filters_run_in_sql_and_read_only_what_matches(memory: Memory) -> None:
    store = memory.store()
    store.batch([PutOp(("docs",), f"k{i}", {"kind": "fact" if i % 50 == 0 else "note",
                                              "text": "x" * 200}) for i in range(400)])
    big = {"kind": "fact", "text": "memory " * 400_000}  # compressed: SQL cannot read it
    store.put(("docs",), "big", big)
    found, events = memory.sent(lambda: store.search(("docs",), filter={"kind": "fact"}, limit=3))
    assert len(events) == 1 and events[0].bytes_received < 10_000  # 400 rows: ~100 KB
    assert [i.key for i in found] == ["big", "k0", "k100"]
    assert len(store.search(("docs",), filter={"kind": "fact"}, limit=100)) == 9
    _, events = memory.sent(lambda: store.search(("docs",), filter={"kind": "note"}, limit=2,
                                                 offset=10))
    assert events[0].bytes_received < 12_000  # 12 rows and the opaque one


def test_a_get_reads_only_the_items_and_entries_it_names(memory: Memory) -> None:
    """Frugal: a get of one key of a namespace of many (an item, a cache entry) reads that
    row alone, by its full key (namespace and key), not the namespace's other rows nor the
    same key's row in another namespace."""
    import random
    text = {i: random.Random(i).randbytes(600).hex() for i in range(80)}  # ~1 KB stored each
    large = random.Random(-1).randbytes(20_000).hex()
    store = memory.store()
    store.batch([PutOp(("docs",), f"k{i}", {"text": text[i]}, ttl=60) for i in range(80)]
                + [PutOp(("more",), "k7", {"text": large})])
    found, events = memory.sent(lambda: store.get(("docs",), "k7"))
    assert found is not None and found.value == {"text": text[7]}
    assert len(events) == 1 and events[0].bytes_received < 6_000  # 80 rows: ~80 KB
    node = ("__pregel_ns_writes", "node")
    cache = memory.cache()
    cache.set({(node, f"k{i}"): (text[i], None) for i in range(80)})
    cache.set({(("__pregel_ns_writes", "other"), "k7"): (large, None)})
    got, events = memory.sent(lambda: cache.get([(node, "k7")]))
    assert got == {(node, "k7"): text[7]}
    assert len(events) == 1 and events[0].bytes_received < 6_000


def test_compile_filter_says_what_sql_decides() -> None:
    """Each part of a filter becomes a condition SQL decides, or one it leaves to Python."""
    import json as _json

    from d1saver.memory.filters import compile_filter

    def kinds(flt: dict[str, Any]) -> list[str]:
        return [c["k"] for c in _json.loads(compile_filter(flt) or "[]")]

    assert compile_filter({}) is None and compile_filter(None) is None
    assert kinds({"kind": "fact", "n": 2, "b": True, "x": None}) == ["text", "num", "num", "none"]
    assert _json.loads(compile_filter({"n": 2}) or "")[0]["a"] == "|2|2.0|"
    assert _json.loads(compile_filter({"b": True}) or "")[0]["a"] == "|true|1|1.0|"
    assert kinds({"n": {"$gt": 1, "$lte": 2.5}}) == ["cmp", "cmp"]
    assert kinds({"n": {"$gt": float("inf")}, "m": {"$lt": "x"}}) == ["numtype", "false"]
    assert kinds({"a": {"b": "c"}}) == ["object", "text"]
    assert kinds({"a": {"$eq": {"b": 1}}}) == ["keys", "num"]
    assert kinds({"a": {"$ne": {"b": 1}}, "l": [1, "x"]}) == ["notcontainer", "array", "num",
                                                                "text"]
    assert kinds({"odd\"key": "v", "nul": "a\x00b", "t": {"$eq": (1,)}}) == ["unknown", "text?",
                                                                            "false"]
    assert kinds({"a.b": 1})[0] == "num"  # one literal key, as InMemoryStore reads it
    assert _json.loads(compile_filter({"a.b": 1}) or "")[0]["p"] == '$."a.b"'


def test_from_env_as_the_saver(memory: Memory, monkeypatch: pytest.MonkeyPatch) -> None:
    from d1saver import D1Cache, D1Store
    monkeypatch.setenv("CLOUDFLARE_ACCOUNT_ID", memory.account_id)
    monkeypatch.setenv("CLOUDFLARE_API_TOKEN", memory.api_token)
    monkeypatch.setenv("D1_DATABASE_ID", ",".join(memory.database_ids[:2]))
    monkeypatch.setenv("D1_API_BASE_URL", memory.base_url)
    monkeypatch.delenv("D1SAVER_ENCRYPTION_KEYS", raising=False)
    with D1Store.from_env(transport=memory.transport) as store:
        assert store.database_ids == tuple(memory.database_ids[:2])
        store.put(("u",), "k", {"v": 1})
        assert store.get(("u",), "k").value == {"v": 1}  # type: ignore[union-attr]
        assert "test-token" not in repr(store)
    with D1Cache.from_env(transport=memory.transport, database_id=memory.database_ids[0]) as cache:
        assert cache.database_ids == (memory.database_ids[0],)


def test_route_places_a_namespace_by_its_first_label(memory: Memory) -> None:
    ids = memory.database_ids
    store = memory.store(ids, route=lambda label: ids[3] if label == "vip" else ids[0])
    store.put(("vip", "x"), "k", {"v": 1})
    store.put(("other",), "k", {"v": 2})
    assert store.home(("vip",)) == ids[3]
    only = memory.store([ids[3]])
    assert [i.key for i in only.search(())] == ["k"] and only.get(("vip", "x"), "k") is not None
