"""Concurrent async store and cache calls: 100 `aput` (then 100 `aget`, ...) started together
with asyncio.gather, on the local D1 with a real +N ms per request (the transport sleeps in
its worker thread, so concurrent requests overlap as network calls do).

Rows: D1Store and D1Cache as they gather the calls of one event-loop tick; the same calls one
request each, as 0.2.0 sent them (each call's batch sent alone, the calls still concurrent);
LangGraph's AsyncSqliteStore (which gathers calls the same way, on a local file: no request)
and InMemoryStore for reference. Requests are counted by the tracer.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
import time
from collections.abc import Awaitable, Callable
from typing import Any

from langgraph.store.base import GetOp, PutOp
from langgraph.store.memory import InMemoryStore

from d1saver import D1Cache, D1Store, TraceEvent
from d1saver.local import LocalD1, LocalD1Transport

BASE_URL = "http://d1.local/client/v4"


def _value(i: int) -> dict[str, Any]:
    return {"text": f"memory {i}", "n": i, "tags": ["a", "b"]}


async def _timed(events: list[TraceEvent] | None, fn: Callable[[], Awaitable[Any]]
                 ) -> tuple[int | None, float]:
    before = 0 if events is None else len(events)
    t0 = time.perf_counter()
    await fn()
    wall = time.perf_counter() - t0
    return (None if events is None else len(events) - before), wall


async def run(calls: int, latency_ms: float) -> list[tuple[str, str, int | None, float]]:
    rows: list[tuple[str, str, int | None, float]] = []
    ns = ("bench", "coalesce")
    keys = [f"k{i:04d}" for i in range(calls)]
    events: list[TraceEvent] = []
    engine = LocalD1()
    transport = LocalD1Transport(engine, latency_ms=latency_ms)
    common: dict[str, Any] = dict(account_id="bench", database_id="coalesce-bench",
                                  api_token="local", api_base_url=BASE_URL,
                                  transport=transport, tracer=events.append)
    store = D1Store(**common)
    cache: D1Cache[Any] = D1Cache(**common)
    await store.asetup()
    await cache.asetup()

    async def alone(op: Any) -> Any:  # one call's batch sent alone, as 0.2.0 sent it
        return await store._asend(store._prepare([op]))

    def add(what: str, who: str, got: tuple[int | None, float]) -> None:
        rows.append((what, who, got[0], got[1]))

    puts = f"{calls} concurrent aput"
    gets = f"{calls} concurrent aget"
    add(puts, "D1Store, one request a call (0.2.0)", await _timed(events, lambda: asyncio.gather(
        *(alone(PutOp(ns, k, _value(i))) for i, k in enumerate(keys)))))
    add(puts, "D1Store, gathered", await _timed(events, lambda: asyncio.gather(
        *(store.aput(ns, k, _value(i)) for i, k in enumerate(keys)))))
    add(gets, "D1Store, one request a call (0.2.0)", await _timed(events, lambda: asyncio.gather(
        *(alone(GetOp(ns, k)) for k in keys))))
    add(gets, "D1Store, gathered", await _timed(events, lambda: asyncio.gather(
        *(store.aget(ns, k) for k in keys))))
    mixed = f"{calls} aput + {calls} aget, interleaved"
    add(mixed, "D1Store, gathered", await _timed(events, lambda: asyncio.gather(
        *(c for i, k in enumerate(keys) for c in (store.aput(ns, k, _value(-i)),
                                                  store.aget(ns, k))))))
    entries = [(("bench", f"node{i % 4}"), f"input-{i}") for i in range(calls)]
    add(f"{calls} concurrent cache aset", "D1Cache, gathered", await _timed(
        events, lambda: asyncio.gather(*(cache.aset({e: (_value(i), 600)})
                                         for i, e in enumerate(entries)))))
    add(f"{calls} concurrent cache aget", "D1Cache, gathered", await _timed(
        events, lambda: asyncio.gather(*(cache.aget([e]) for e in entries))))
    await store.aclose()
    await cache.aclose()
    engine.close()

    try:
        from langgraph.store.sqlite.aio import AsyncSqliteStore
    except ImportError:  # langgraph-checkpoint-sqlite (and aiosqlite) not installed
        AsyncSqliteStore = None  # type: ignore[assignment, misc]
    if AsyncSqliteStore is not None:
        files = tempfile.TemporaryDirectory(prefix="d1saver-coalesce-bench-")
        path = os.path.join(files.name, "store.db")
        async with AsyncSqliteStore.from_conn_string(path) as sq:
            await sq.setup()
            add(puts, "AsyncSqliteStore (local file)", await _timed(None, lambda: asyncio.gather(
                *(sq.aput(ns, k, _value(i)) for i, k in enumerate(keys)))))
            add(gets, "AsyncSqliteStore (local file)", await _timed(None, lambda: asyncio.gather(
                *(sq.aget(ns, k) for k in keys))))
        files.cleanup()
    mem = InMemoryStore()
    add(puts, "InMemoryStore", await _timed(None, lambda: asyncio.gather(
        *(mem.aput(ns, k, _value(i)) for i, k in enumerate(keys)))))
    add(gets, "InMemoryStore", await _timed(None, lambda: asyncio.gather(
        *(mem.aget(ns, k) for k in keys))))
    return rows


def main(argv: list[str] | None = None) -> list[tuple[str, str, int | None, float]]:
    p = argparse.ArgumentParser(prog="python -m benchmarks coalesce",
                                description=__doc__.splitlines()[0])
    p.add_argument("--calls", type=int, default=100)
    p.add_argument("--latency-ms", type=float, default=20.0, help="slept per request")
    p.add_argument("--quick", action="store_true", help="a tiny run (the smoke test)")
    args = p.parse_args(argv)
    if args.quick:
        args.calls, args.latency_ms = 10, 0.0
    rows = asyncio.run(run(args.calls, args.latency_ms))
    print(f"\n## Concurrent async calls: D1Store/D1Cache on the local D1 at +{args.latency_ms:g} ms "
          f"per request, beside AsyncSqliteStore and InMemoryStore\n")
    print("| calls | store | requests | wall ms |")
    print("|---|---|---|---|")
    for what, who, requests, wall in rows:
        req = "-" if requests is None else f"{requests:,}"
        print(f"| {what} | {who} | {req} | {wall * 1000:,.1f} |")
    return rows


if __name__ == "__main__":
    main()
