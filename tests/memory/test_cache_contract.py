"""D1Cache against LangGraph's caches (InMemoryCache, SqliteCache), case by case.

The kinds of cases LangGraph's cache tests run (libs/checkpoint/tests/test_cache.py,
libs/checkpoint-sqlite/tests/test_sqlite_cache.py, test_redis_cache*.py): set and get, many keys
at once, TTL in seconds, clear by namespace or all, the `pairs` keyword, namespaces holding the
characters a joined key would confuse. Each case runs on the references and on D1Cache, sync and
async, on one database, with keys, over a fleet of four, and (`real=True`) on the real engine.
"""

from __future__ import annotations

import asyncio
import os
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import pytest
from langgraph.cache.memory import InMemoryCache
from langgraph.cache.sqlite import SqliteCache

from tests.memory.facade import drive as run
from tests.memory.facade import same
from tests.memory.subjects import (
    LOCAL_SUBJECTS,
    REAL_SUBJECTS,
    D1Subject,
    implementation,
    make_subject,
    subject_params,
)

FullKey = tuple[tuple[str, ...], str]


class Cache:
    """A cache through its sync or async API, under a namespace root (stripped from answers)."""

    def __init__(self, cache: Any, mode: str = "sync", root: tuple[str, ...] = (),
                 clock: Any = None) -> None:
        self.cache, self.mode, self.root, self.clock = cache, mode, tuple(root), clock

    def _in(self, key: FullKey) -> FullKey:
        return (self.root + tuple(key[0]), key[1])

    async def get(self, keys: list[FullKey]) -> dict[FullKey, Any]:
        keys = [self._in(k) for k in keys]
        got = self.cache.get(keys) if self.mode == "sync" else await self.cache.aget(keys)
        return {(tuple(ns[len(self.root):]), k): v for (ns, k), v in got.items()}

    async def set(self, pairs: dict[FullKey, tuple[Any, int | None]]) -> None:
        pairs = {self._in(k): v for k, v in pairs.items()}
        if self.mode == "sync":
            self.cache.set(pairs)
        else:
            await self.cache.aset(pairs)

    async def clear(self, namespaces: list[tuple[str, ...]] | None = None) -> None:
        if namespaces is not None:
            namespaces = [self.root + tuple(ns) for ns in namespaces]
        elif self.root:
            raise AssertionError("clear() of everything would touch other tests' entries")
        if self.mode == "sync":
            self.cache.clear(namespaces)
        else:
            await self.cache.aclear(namespaces)

    async def sleep(self, seconds: float) -> None:
        if self.clock is not None:
            self.clock.advance(seconds)
        elif self.mode == "sync":
            time.sleep(seconds)
        else:
            await asyncio.sleep(seconds)


@dataclass
class CacheCase:
    fn: Callable[[Cache], Any]
    refs: tuple[str, ...]
    real: bool


CASES: dict[str, CacheCase] = {}


def case(*, refs: tuple[str, ...] = ("memory", "sqlite"), real: bool = False) -> Any:
    def deco(fn: Any) -> Any:
        CASES[fn.__name__] = CacheCase(fn, refs, real)
        return fn
    return deco


def ordered(d: dict[FullKey, Any]) -> list[Any]:
    return sorted(d.items(), key=repr)


# ================================================================================================
@case(real=True)
async def set_and_get(c: Cache) -> list[Any]:
    a, b, m = (("ns",), "k1"), (("ns",), "k2"), (("ns",), "missing")
    out = [await c.get([a]), await c.get([])]
    await c.set({a: ({"data": 123}, 60), b: ({"data": 456}, None)})
    out += [await c.get([a]), ordered(await c.get([a, b, m])), await c.get([m])]
    assert out[2] == {a: {"data": 123}}
    await c.set({a: ({"data": "new"}, None)})
    out.append(ordered(await c.get([a, b])))
    return out


@case(real=True)
async def values_through_serde(c: Cache) -> list[Any]:
    values = {
        "dict": {"a": [1, 2.5, None, True], "b": {"c": "日本語"}},
        "list": [1, "two", [3]], "str": "x" * 10_000, "int": 2**63 - 1, "float": -0.0,
        "bytes": b"\x00\x01\xff", "set": {1, 2, 3}, "none": None,
        "datetime": datetime(2026, 11, 25, 12, 0, 1, 123456, tzinfo=timezone.utc),
        "empty": {},
    }
    await c.set({(("v",), k): (v, None) for k, v in values.items()})
    got = await c.get([(("v",), k) for k in values])
    assert {k[1]: v for k, v in got.items()} == values
    return ordered(got)


@case(real=True)
async def many_keys_many_namespaces(c: Cache) -> list[Any]:
    pairs = {((f"node{i % 5}", f"sub{i % 3}"), f"key-{i}"): ({"i": i}, None) for i in range(60)}
    await c.set(pairs)
    got = await c.get(list(pairs) + [(("node0",), "key-0"), (("node9",), "key-1")])
    assert len(got) == 60
    return ordered(got)


@case(real=True)
async def ttl_seconds(c: Cache) -> list[Any]:
    short, long_, never = (("t",), "short"), (("t",), "long"), (("t",), "never")
    await c.set({short: ("s", 1), long_: ("l", 30), never: ("n", None)})
    out = [ordered(await c.get([short, long_, never]))]
    await c.sleep(1.3)
    out.append(ordered(await c.get([short, long_, never])))
    assert short not in await c.get([short])
    await c.set({short: ("again", 1)})  # an expired key can be set again
    out.append(await c.get([short]))
    return out


@case(real=True)
async def clear_namespaces(c: Cache) -> list[Any]:
    keys = [(("a",), "1"), (("a",), "2"), (("a", "b"), "1"), (("b",), "1"), (("b", "a"), "1"),
            (("c",), "1")]
    await c.set({k: (k[1], None) for k in keys})
    await c.clear([("a",)])
    out = [ordered(await c.get(keys))]
    await c.clear([("b",), ("c",), ("nothing",)])
    out.append(ordered(await c.get(keys)))
    await c.clear([])
    out.append(ordered(await c.get(keys)))
    return out


@case()
async def clear_everything(c: Cache) -> list[Any]:
    keys = [(("a",), "1"), (("b", "c"), "2")]
    await c.set({k: (1, None) for k in keys})
    await c.clear()
    out = [await c.get(keys)]
    await c.set({keys[0]: (2, None)})
    out.append(await c.get(keys))
    return out


@case(refs=("memory",), real=True)  # SqliteCache 3.1 joins labels with ",": ("a,b",) = ("a", "b")
async def namespaces_are_exact(c: Cache) -> list[Any]:
    spaces = [("__pregel_ns_writes", "node,with,commas"), ("__pregel_ns_writes", "node", "with"),
              ("a,b",), ("a", "b"), ("a.b",), ("a:b",), ("a%",), ("a_",), ("a*",), ("A",),
              ("a",), ("a\nb",), ("日本語",), ("__main__.node",), ("a", "b", "")]
    await c.set({(ns, "k"): (repr(ns), None) for ns in spaces})
    got = await c.get([(ns, "k") for ns in spaces])
    assert got == {(ns, "k"): repr(ns) for ns in spaces}
    await c.clear([("a,b",), ("a%",)])
    after = await c.get([(ns, "k") for ns in spaces])
    assert set(got) - set(after) == {(("a,b",), "k"), (("a%",), "k")}
    return [ordered(got), ordered(after)]


@case(real=True)
async def keys_are_exact(c: Cache) -> list[Any]:
    ks = ["k", "K", "k ", "k%", "k_", "k*", "", "x" * 300, "é", "k\n", "'; DROP TABLE cache; --"]
    await c.set({(("n",), k): (k, None) for k in ks})
    return [ordered(await c.get([(("n",), k) for k in ks + ["k%%", "missing"]]))]


# ================================================================================================
# The reference files live as long as the session (the references are computed once); the
# directory goes with the interpreter.
_FILES = tempfile.TemporaryDirectory(prefix="d1saver-cache-")


def reference_cache(kind: str) -> Any:
    if kind == "memory":
        return InMemoryCache()
    return SqliteCache(path=os.path.join(_FILES.name, f"{uuid.uuid4().hex}.db"))


_REFS: dict[tuple[str, str], Any] = {}


def reference(name: str, kind: str) -> Any:
    if (name, kind) not in _REFS:
        _REFS[(name, kind)] = run(CASES[name].fn, Cache(reference_cache(kind)))
    return _REFS[(name, kind)]


def params() -> Iterator[Any]:
    for name, c in CASES.items():
        for s in list(LOCAL_SUBJECTS) + (list(REAL_SUBJECTS) if c.real else []):
            for mode in ("sync", "async"):
                marks = [pytest.mark.realengine] if s.startswith("wrangler") else []
                yield pytest.param(name, s, mode, id=f"{name}-{s}-{mode}", marks=marks)


@pytest.mark.parametrize("name", list(CASES))
def test_references_agree(name: str) -> None:
    refs = {kind: reference(name, kind) for kind in CASES[name].refs}
    if len(refs) == 2:
        same(refs["memory"], refs["sqlite"])


def uses_clock(cache: Any, subject: D1Subject) -> Any:
    return subject.clock if getattr(cache, "clock", None) is subject.clock else None


@pytest.mark.parametrize("name,subject_name,mode", list(params()))
def test_case(name: str, subject_name: str, mode: str, request: pytest.FixtureRequest) -> None:
    c = CASES[name]
    refs = {kind: reference(name, kind) for kind in c.refs}
    subject = make_subject(subject_name, request, needs="D1Cache")
    request.addfinalizer(subject.close)
    cache = subject.cache()
    got = run(c.fn, Cache(cache, mode, subject.root, uses_clock(cache, subject)))
    for want in refs.values():
        same(got, want)


# ================================================================================================
# D1Cache only
# ================================================================================================
@pytest.fixture(params=subject_params(real=True))
def d1(request: pytest.FixtureRequest) -> Iterator[D1Subject]:
    s = make_subject(request.param, request, needs="D1Cache")
    yield s
    s.close()


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_one_request_per_get_or_set(d1: D1Subject, mode: str) -> None:
    cache = d1.cache()
    c = Cache(cache, mode, d1.root)
    pairs = {((f"n{i % 4}",), f"k{i}"): ({"i": i, "pad": "p" * 200}, 60) for i in range(100)}
    run(lambda c: c.set(pairs), c)  # the first call to a database also creates its tables
    every = len(d1.database_ids)

    def n(scenario: Callable[[Cache], Any]) -> int:
        before = len(d1.events)
        run(scenario, c)
        return len(d1.events) - before

    async def set_many(c: Cache) -> None:
        await c.set(pairs)

    async def get_many(c: Cache) -> None:
        assert len(await c.get(list(pairs))) == 100

    async def get_one(c: Cache) -> None:
        assert await c.get([(("n1",), "k1")]) == {(("n1",), "k1"): {"i": 1, "pad": "p" * 200}}

    async def set_one(c: Cache) -> None:
        await c.set({(("n1",), "k1"): ("x", None)})

    async def clear_one(c: Cache) -> None:
        await c.clear([("n2",)])

    assert n(set_many) <= every and n(get_many) <= every
    assert n(get_one) == 1 and n(set_one) == 1
    assert n(clear_one) <= every
    if every == 1:
        assert n(set_many) == 1 and n(get_many) == 1
    assert n(lambda c: c.get([])) == 0


def test_cache_with_keys_is_unreadable_without_them() -> None:
    """Sealed entries: read back with the keys; without them, a typed error or a miss."""
    from d1saver import D1Error
    from tests.memory.subjects import local_subject

    implementation("D1Cache")
    d1 = local_subject("local-keys")
    try:
        secret = f"secret-{uuid.uuid4().hex}"
        d1.cache().set({(("n",), "k"): ({"token": secret}, None)})
        assert d1.cache().get([(("n",), "k")]) == {(("n",), "k"): {"token": secret}}
        for keys in (None, [bytes([99]) * 32]):
            plain = d1.cache(encryption_keys=keys) if keys else _keyless(d1)
            try:
                assert plain.get([(("n",), "k")]) == {}
            except D1Error:
                pass
    finally:
        d1.close()


def _keyless(d1: D1Subject) -> Any:
    cls = implementation("D1Cache")
    return cls(account_id=d1.account_id, api_token=d1.api_token, api_base_url=d1.base_url,
               database_id=d1.database_ids[0], transport=d1.transport)


def test_expired_entries_are_never_returned(d1: D1Subject) -> None:
    cache = d1.cache()
    c = Cache(cache, "sync", d1.root, uses_clock(cache, d1))
    if c.clock is None:
        pytest.skip("D1Cache takes no clock")

    async def scenario(c: Cache) -> None:
        await c.set({(("e",), str(i)): (i, i + 1) for i in range(10)})
        for t in range(11):
            got = await c.get([(("e",), str(i)) for i in range(10)])
            assert sorted(k[1] for k in got) == [str(i) for i in range(10) if i + 1 > t], t
            await c.sleep(1.0)

    run(scenario, c)
