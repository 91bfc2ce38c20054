"""D1Cache on the local D1: BaseCache as SqliteCache behaves, one request per get or set call
whatever the number of keys, expired entries never returned, and swept."""

from __future__ import annotations

import pytest
from langchain_core.messages import AIMessage
from langgraph.cache.memory import InMemoryCache

from d1saver import InvalidInputError
from tests.memory.conftest import Memory

NS = ("node", "summarize")


def test_get_set_clear_as_in_memory_cache(memory: Memory) -> None:
    cache, reference = memory.cache(), InMemoryCache()
    pairs = {(NS, "k1"): ({"a": 1}, None), (NS, "k2"): ([1, "two", 3.0], 60),
             (("other",), "k1"): (AIMessage(content="hi"), None), ((), "empty-ns"): ("v", None),
             (("a/b", "%_*"), "x"): (b"bytes", None)}
    cache.set(pairs)
    reference.set(pairs)
    keys = [*pairs, (NS, "missing")]
    assert cache.get(keys) == reference.get(keys)
    cache.clear([NS])
    reference.clear([NS])
    assert cache.get(keys) == reference.get(keys)
    cache.clear()
    assert cache.get(keys) == {}


def test_one_request_per_call_whatever_the_keys(memory: Memory) -> None:
    cache = memory.cache()
    cache.setup()
    pairs = {(("n", str(i % 5)), f"k{i}"): ({"i": i}, 30) for i in range(500)}
    _, n = memory.requests(lambda: cache.set(pairs))
    assert n == 1
    found, n = memory.requests(lambda: cache.get(list(pairs)))
    assert n == 1 and len(found) == 500
    _, n = memory.requests(lambda: cache.get([]))
    assert n == 0


def test_expired_entries_are_never_returned_and_are_swept(memory: Memory) -> None:
    cache = memory.cache()
    cache.set({(NS, "short"): (1, 10), (NS, "long"): (2, 100), (NS, "forever"): (3, None)})
    memory.clock.advance(9.9)
    assert cache.get([(NS, "short")]) == {(NS, "short"): 1}
    memory.clock.advance(0.1)
    assert cache.get([(NS, "short"), (NS, "long"), (NS, "forever")]) == {
        (NS, "long"): 2, (NS, "forever"): 3}
    assert cache.sweep_ttl() == 1
    memory.clock.advance(100)
    assert cache.sweep_ttl() == 1
    assert cache.get([(NS, "forever")]) == {(NS, "forever"): 3}


def test_set_again_replaces_value_and_ttl(memory: Memory) -> None:
    cache = memory.cache()
    cache.set({(NS, "k"): ("old", 1)})
    cache.set({(NS, "k"): ("new", None)})
    memory.clock.advance(5)
    assert cache.get([(NS, "k")]) == {(NS, "k"): "new"}


def test_bad_keys_are_refused_unsent(memory: Memory) -> None:
    cache = memory.cache()
    cache.setup()
    for bad in [((1,), "k"), (NS, 3), ("not-a-tuple", "k")]:
        with pytest.raises(InvalidInputError):
            memory.requests(lambda bad=bad: cache.get([bad]))  # type: ignore[misc]
    with pytest.raises(InvalidInputError):
        cache.set({(NS, "k"): ("v", float("nan"))})
    assert cache.get([(NS, "k")]) == {}


@pytest.mark.anyio
async def test_async_twins(memory: Memory) -> None:
    cache = memory.cache()
    await cache.aset({(NS, "a"): ({"x": 1}, None), (NS, "b"): ("y", 1)})
    assert await cache.aget([(NS, "a"), (NS, "b")]) == {(NS, "a"): {"x": 1}, (NS, "b"): "y"}
    memory.clock.advance(2)
    assert await cache.aget([(NS, "a"), (NS, "b")]) == {(NS, "a"): {"x": 1}}
    await cache.aclear([NS])
    assert await cache.aget([(NS, "a")]) == {}
    await cache.aclose()
