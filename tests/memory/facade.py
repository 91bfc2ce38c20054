"""One scenario, many stores: a facade that calls a store's sync or async API (a scenario is an
async function; in "sync" mode it never really awaits, so it is driven with no event loop at all,
as a sync caller would run), puts a root label in front of every namespace and strips it from
every answer, and turns answers into plain data that compares across stores."""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any

from langgraph.store.base import (
    GetOp,
    Item,
    ListNamespacesOp,
    MatchCondition,
    PutOp,
    SearchItem,
    SearchOp,
)

Scenario = Callable[["Facade"], Awaitable[Any]]


class Facade:
    """A store seen through one API flavour ("sync" or "async") under a namespace root."""

    def __init__(self, store: Any, mode: str = "sync", root: tuple[str, ...] = (),
                 sweep: bool = False, clock: Any = None) -> None:
        assert mode in ("sync", "async")
        self.store = store
        self.mode = mode
        self.root = tuple(root)
        self.sweeps = sweep  # a reference whose reads show expired items until swept
        self.clock = clock  # a Clock the store reads: time passes without sleeping

    # -- namespaces in and out -------------------------------------------------------------
    def ns(self, namespace: tuple[str, ...]) -> tuple[str, ...]:
        return self.root + tuple(namespace)

    def strip(self, namespace: tuple[str, ...]) -> tuple[str, ...]:
        assert tuple(namespace[: len(self.root)]) == self.root, namespace
        return tuple(namespace[len(self.root):])

    def out(self, result: Any) -> Any:
        if isinstance(result, Item):
            cls = SearchItem if isinstance(result, SearchItem) else Item
            kwargs: dict[str, Any] = dict(namespace=self.strip(result.namespace), key=result.key,
                                          value=result.value, created_at=result.created_at,
                                          updated_at=result.updated_at)
            if cls is SearchItem:
                kwargs["score"] = result.score  # type: ignore[attr-defined]
            return cls(**kwargs)
        if isinstance(result, list):
            return [self.strip(r) if isinstance(r, tuple) else self.out(r) for r in result]
        return result

    def op(self, op: Any) -> Any:
        if isinstance(op, (GetOp, PutOp)):
            return op._replace(namespace=self.ns(op.namespace))
        if isinstance(op, SearchOp):
            return op._replace(namespace_prefix=self.ns(op.namespace_prefix))
        if isinstance(op, ListNamespacesOp):
            conds = list(op.match_conditions or ())
            if self.root:
                prefixes = [c for c in conds if c.match_type == "prefix"]
                conds = [c for c in conds if c.match_type != "prefix"]
                path = prefixes[0].path if prefixes else ()
                conds.insert(0, MatchCondition("prefix", self.root + tuple(path)))
            depth = None if op.max_depth is None else op.max_depth + len(self.root)
            return op._replace(match_conditions=tuple(conds) or None, max_depth=depth)
        return op

    # -- the API ------------------------------------------------------------------------------
    async def _call(self, name: str, *args: Any, **kwargs: Any) -> Any:
        if self.mode == "sync":
            return getattr(self.store, name)(*args, **kwargs)
        return await getattr(self.store, "a" + name)(*args, **kwargs)

    async def put(self, namespace: tuple[str, ...], key: str, value: Any, **kw: Any) -> None:
        await self._call("put", self.ns(namespace), key, value, **kw)

    async def get(self, namespace: tuple[str, ...], key: str, **kw: Any) -> Item | None:
        return self.out(await self._call("get", self.ns(namespace), key, **kw))

    async def delete(self, namespace: tuple[str, ...], key: str) -> None:
        await self._call("delete", self.ns(namespace), key)

    async def search(self, prefix: tuple[str, ...] = (), **kw: Any) -> list[SearchItem]:
        found = self.out(await self._call("search", self.ns(prefix), **kw))
        ranked = [i.score for i in found]
        scored = [x for x in ranked if x is not None]
        assert ranked[: len(scored)] == scored, "scored items come first"
        assert all(a >= b - 1e-6 for a, b in zip(scored, scored[1:], strict=False)), f"not by score: {scored}"
        return found

    async def list_namespaces(self, *, prefix: tuple[str, ...] | None = None,
                              suffix: tuple[str, ...] | None = None,
                              max_depth: int | None = None, limit: int = 100,
                              offset: int = 0) -> list[tuple[str, ...]]:
        if self.root:
            prefix = self.root + tuple(prefix or ())
            max_depth = None if max_depth is None else max_depth + len(self.root)
        return self.out(await self._call("list_namespaces", prefix=prefix, suffix=suffix,
                                         max_depth=max_depth, limit=limit, offset=offset))

    async def batch(self, ops: list[Any]) -> list[Any]:
        return [self.out(r) for r in await self._call("batch", [self.op(o) for o in ops])]

    async def sleep(self, seconds: float) -> None:
        if self.clock is not None:
            self.clock.advance(seconds)
            return
        if self.sweeps:
            seconds += 1.0  # SqliteStore compares to CURRENT_TIMESTAMP: whole seconds
        if self.mode == "sync":
            time.sleep(seconds)
        else:
            await asyncio.sleep(seconds)

    async def settle(self) -> None:
        """After a TTL ran out: a LangGraph store that shows expired rows until swept sweeps
        (SqliteStore 3.1 has no omit_expired); D1Store must hide them with no sweep at all."""
        if self.sweeps:
            self.store.sweep_ttl()

    async def everything(self) -> list[tuple[tuple[str, ...], str, Any]]:
        """Every item under the root, as sorted (namespace, key, value): a store's whole content."""
        items = await self.search((), limit=100_000)
        return sorted((i.namespace, i.key, i.value) for i in items)


def drive(scenario: Callable[[Any], Awaitable[Any]], facade: Any) -> Any:
    """Run a scenario on a facade (of a store or of a cache: anything with a `mode`): with no
    event loop in "sync" mode, under asyncio.run in "async" mode."""
    if facade.mode == "async":
        return asyncio.run(scenario(facade))
    coro = scenario(facade)
    try:
        coro.send(None)
    except StopIteration as stop:
        return stop.value
    coro.close()
    raise AssertionError("a sync-mode scenario awaited something that suspends")


# -- comparing answers ------------------------------------------------------------------------
def plain(x: Any) -> Any:
    """Answers as plain data: an item is (namespace, key, value) plus its score if it has one."""
    if isinstance(x, SearchItem):
        return ("item", x.namespace, x.key, x.value, x.score)
    if isinstance(x, Item):
        return ("item", x.namespace, x.key, x.value)
    if isinstance(x, datetime):
        return "<datetime>"
    if isinstance(x, list) and x and all(isinstance(v, SearchItem) for v in x):
        # A ranked answer: by score (checked in Facade.search); ties, and the scoreless
        # tail, in no defined order, so they compare by key.
        ranked = sorted(x, key=lambda i: (0, -round(i.score, 4), i.namespace, i.key)
                        if i.score is not None else (1, 0.0, i.namespace, i.key))
        return [plain(v) for v in ranked]
    if isinstance(x, list):
        return [plain(v) for v in x]
    if isinstance(x, tuple):
        return tuple(plain(v) for v in x)
    if isinstance(x, dict):
        return {k: plain(v) for k, v in x.items()}
    return x


def same(a: Any, b: Any, path: str = "$", tol: float = 1e-3) -> None:
    """Assert a and b are equal plain data; floats within tol (scores may be stored compactly)."""
    if isinstance(a, float) and isinstance(b, float):
        assert (math.isnan(a) and math.isnan(b)) or math.isclose(a, b, abs_tol=tol), \
            f"{path}: {a} != {b}"
        return
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        assert type(a) is type(b) and len(a) == len(b), f"{path}: {a!r}\n  != {b!r}"
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            same(x, y, f"{path}[{i}]", tol)
        return
    if isinstance(a, dict) and isinstance(b, dict):
        assert a.keys() == b.keys(), f"{path}: keys {sorted(a)} != {sorted(b)}"
        for k in a:
            same(a[k], b[k], f"{path}.{k}", tol)
        return
    assert a == b, f"{path}: {a!r}\n  != {b!r}"
