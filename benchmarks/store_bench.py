"""D1Store and D1Cache beside LangGraph's SqliteStore / SqliteCache on the same machine: puts, gets,
filtered search, search by meaning over 1,000 and 10,000 items, cache get/set.

D1 runs on the in-process local D1 (the same SQLite engine D1 runs; no network), so its time is
d1saver's own work plus the engine's; "at +N ms" adds N ms for each request, as a D1 REST call
from outside Cloudflare costs (the calls here are sequential). Requests and bytes over the wire
are counted by the tracer. SqliteStore / SqliteCache use a file on local disk and send nothing.
Search by meaning compares with InMemoryStore: SqliteStore needs the sqlite-vec extension,
which needs a Python whose sqlite3 can load extensions. The embedding is a deterministic
character embedding (tests/memory/char_embeddings.py's kind), computed once per text and
cached so that embedding time is not measured.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import math
import os
import random
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from langchain_core.embeddings import Embeddings
from langgraph.cache.sqlite import SqliteCache
from langgraph.store.base import GetOp, PutOp
from langgraph.store.memory import InMemoryStore
from langgraph.store.sqlite import SqliteStore

from d1saver import D1Cache, D1Store, TraceEvent
from d1saver.local import LocalD1, LocalD1Transport

BASE_URL = "http://d1.local/client/v4"
TOPICS = ["coffee", "travel", "music", "garden", "cooking", "football", "books", "weather",
          "cinema", "hiking", "cars", "painting"]


class CachedCharEmbeddings(Embeddings):
    """Character frequencies x a fixed projection, unit length; each distinct text once."""

    def __init__(self, dims: int) -> None:
        self.dims = dims
        self._proj: dict[str, list[float]] = {}
        self._memo: dict[str, list[float]] = {}

    def _one(self, text: str) -> list[float]:
        vec = self._memo.get(text)
        if vec is None:
            out = [0.0] * self.dims
            for ch in text:
                p = self._proj.get(ch)
                if p is None:
                    seed = int.from_bytes(hashlib.sha256(ch.encode()).digest()[:8], "big")
                    rng = random.Random(seed)
                    p = self._proj[ch] = [rng.gauss(0.0, 1.0) for _ in range(self.dims)]
                for i, x in enumerate(p):
                    out[i] += x
            norm = math.sqrt(sum(x * x for x in out)) or 1.0
            vec = self._memo[text] = [x / norm for x in out]
        return vec

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [self._one(t) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return self._one(text)


def item(i: int) -> dict[str, Any]:
    rng = random.Random(i)
    topic = TOPICS[i % len(TOPICS)]
    words = " ".join(rng.choice(TOPICS) for _ in range(6))
    return {"text": f"memory {i} about {topic}: {words}", "topic": topic, "n": i,
            "score": round(rng.random() * 5, 2), "user": {"id": f"u{i % 50}", "tier": i % 3}}


# What a figure's seconds are: wall time (the default), or this process's CPU time
# (--clock cpu: the local D1 runs in this process, so its engine's time is counted; steadier
# than wall time on a shared machine).
CLOCK: list[Callable[[], float]] = [time.perf_counter]


@dataclass
class Row:
    what: str
    store: str
    calls: int
    requests: int | None
    sent: int | None
    received: int | None
    seconds: float

    def at(self, latency_ms: float) -> float:
        return self.seconds + (self.requests or 0) * latency_ms / 1000

    def cells(self, latency_ms: float) -> list[str]:
        per = self.calls or 1
        req = "-" if self.requests is None else f"{self.requests:,}"
        kb = "-" if self.sent is None else f"{self.sent / 1024:,.1f} / {(self.received or 0) / 1024:,.1f}"
        return [self.what, self.store, f"{self.calls:,}", req, kb,
                f"{self.seconds * 1000 / per:,.2f}", f"{self.at(latency_ms) * 1000 / per:,.1f}",
                f"{self.at(latency_ms):,.2f}"]


class Meter:
    def __init__(self) -> None:
        self.events: list[TraceEvent] = []

    def __call__(self, event: TraceEvent) -> None:
        self.events.append(event)

    def measure(self, what: str, store: str, calls: int, fn: Callable[[], Any]) -> Row:
        before = len(self.events)
        t0 = CLOCK[0]()
        fn()
        seconds = CLOCK[0]() - t0
        new = self.events[before:]
        return Row(what, store, calls, len(new), sum(e.bytes_sent for e in new),
                   sum(e.bytes_received for e in new), seconds)


def local(what: str, store: str, calls: int, fn: Callable[[], Any]) -> Row:
    t0 = CLOCK[0]()
    fn()
    return Row(what, store, calls, None, None, None, CLOCK[0]() - t0)


def d1_objects(meter: Meter, **kwargs: Any) -> tuple[LocalD1, D1Store, D1Cache]:
    engine = LocalD1()
    transport = LocalD1Transport(engine)
    common = dict(account_id="bench", database_id="store-bench", api_token="local",
                  api_base_url=BASE_URL, transport=transport, tracer=meter)
    store = D1Store(**common, **kwargs)
    cache: D1Cache = D1Cache(**common)
    store.get(("warm",), "up")  # the tables, once
    cache.get([(("warm",), "up")])
    return engine, store, cache


def run(items: int, big: int, batch: int, dims: int, gets: int, searches: int,
        latency_ms: float) -> list[Row]:
    with tempfile.TemporaryDirectory(prefix="d1saver-store-bench-") as tmp:
        return _run(tmp, items, big, batch, dims, gets, searches, latency_ms)


def _run(tmp: str, items: int, big: int, batch: int, dims: int, gets: int, searches: int,
         latency_ms: float) -> list[Row]:
    rows: list[Row] = []
    ns = ("bench", "memories")
    puts = [PutOp(ns, f"k{i:05d}", item(i)) for i in range(items)]
    batches = [puts[i:i + batch] for i in range(0, len(puts), batch)]
    keys = [f"k{i:05d}" for i in random.Random(1).sample(range(items), min(gets, items))]
    filt = {"topic": "coffee", "score": {"$gte": 2.5}}

    # -- plain store: put, get, filtered search --------------------------------------------------
    meter = Meter()
    engine, store, cache = d1_objects(meter)
    with SqliteStore.from_conn_string(os.path.join(tmp, "store.db")) as sq:
        sq.setup()
        for name, s, measure in (("D1Store", store, meter.measure), ("SqliteStore", sq, local)):
            rows.append(measure(f"put {items:,} items, batches of {batch}", name, len(batches),
                                lambda s=s: [s.batch(b) for b in batches]))
            rows.append(measure(f"get, one key a call ({len(keys)} calls)", name, len(keys),
                                lambda s=s: [s.get(ns, k) for k in keys]))
            rows.append(measure(f"get {len(keys)} keys in one batch", name, 1,
                                lambda s=s: s.batch([GetOp(ns, k) for k in keys])))
            rows.append(measure(f"search, filter {filt} limit 10", name, searches,
                                lambda s=s: [s.search(ns, filter=filt, limit=10, offset=o)
                                             for o in range(searches)]))
        want = sorted(i.key for i in sq.search(ns, filter=filt, limit=1000))
        got = sorted(i.key for i in store.search(ns, filter=filt, limit=1000))
        assert got == want, "D1Store and SqliteStore disagree on the filtered search"

    # -- cache --------------------------------------------------------------------------------
    pairs = {(("bench", f"node{i % 4}"), f"input-{i}"): ({"result": item(i)}, 600)
             for i in range(gets)}
    sqc: SqliteCache[Any] = SqliteCache(path=os.path.join(tmp, "cache.db"))
    for name, c, measure in (("D1Cache", cache, meter.measure), ("SqliteCache", sqc, local)):
        rows.append(measure(f"cache set, {len(pairs)} entries in one call", name, 1,
                            lambda c=c: c.set(pairs)))
        rows.append(measure(f"cache get, {len(pairs)} keys in one call", name, 1,
                            lambda c=c: c.get(list(pairs))))
        one = list(pairs)[: min(20, len(pairs))]
        rows.append(measure(f"cache get, one key a call ({len(one)} calls)", name, len(one),
                            lambda c=c, one=one: [c.get([k]) for k in one]))
        rows.append(measure(f"cache set, one entry a call ({len(one)} calls)", name, len(one),
                            lambda c=c, one=one: [c.set({k: pairs[k]}) for k in one]))
    store.close()
    engine.close()

    # -- search by meaning ------------------------------------------------------------------
    queries = [f"what do I think about {t}" for t in TOPICS][:searches]
    for n in (items, big):
        embed = CachedCharEmbeddings(dims)
        index = {"dims": dims, "embed": embed, "fields": ["text"]}
        meter = Meter()
        engine, store, cache = d1_objects(meter, index=index)
        mem = InMemoryStore(index=index)  # type: ignore[arg-type]
        vput = [PutOp(ns, f"k{i:05d}", item(i)) for i in range(n)]
        vbatches = [vput[i:i + batch] for i in range(0, n, batch)]
        embed.embed_documents([op.value["text"] for op in vput] + queries)  # embedded once
        for name, s, measure in (("D1Store", store, meter.measure), ("InMemoryStore", mem, local)):
            rows.append(measure(f"put {n:,} items with {dims}-dim vectors, batches of {batch}",
                                name, len(vbatches),
                                lambda s=s, vb=vbatches: [s.batch(b) for b in vb]))
            rows.append(measure(f"search by meaning over {n:,} items, top 10", name,
                                len(queries),
                                lambda s=s: [s.search(ns, query=q, limit=10) for q in queries]))
            rows.append(measure(f"search by meaning + filter over {n:,}, top 10", name,
                                len(queries),
                                lambda s=s: [s.search(ns, query=q, filter={"user": {"tier": 1}},
                                                      limit=10) for q in queries]))
        for q in queries[:3]:
            a = [i.key for i in store.search(ns, query=q, limit=10)]
            b = [i.key for i in mem.search(ns, query=q, limit=10)]
            assert a == b, f"D1Store and InMemoryStore rank differently for {q!r}"
        store.close()
        engine.close()
    return rows


def main(argv: list[str] | None = None) -> list[Row]:
    p = argparse.ArgumentParser(prog="python -m benchmarks store", description=__doc__.splitlines()[0])
    p.add_argument("--items", type=int, default=1000)
    p.add_argument("--big", type=int, default=10_000, help="items for the larger search by meaning")
    p.add_argument("--batch", type=int, default=100, help="puts per batch call")
    p.add_argument("--dims", type=int, default=256)
    p.add_argument("--gets", type=int, default=100)
    p.add_argument("--searches", type=int, default=10)
    p.add_argument("--latency-ms", type=float, default=50.0, help="added per request in the last columns")
    p.add_argument("--quick", action="store_true", help="a tiny run (the smoke test)")
    p.add_argument("--repeat", type=int, default=1,
                   help="run the whole benchmark N times; each figure's median")
    p.add_argument("--clock", choices=["wall", "cpu"], default="wall",
                   help="wall time, or this process's CPU time (the local D1's included)")
    args = p.parse_args(argv)
    if args.quick:
        args.items, args.big, args.batch, args.dims, args.gets, args.searches = 40, 80, 20, 16, 10, 3
    CLOCK[0] = time.process_time if args.clock == "cpu" else time.perf_counter
    runs = [run(args.items, args.big, args.batch, args.dims, args.gets, args.searches,
                args.latency_ms) for _ in range(max(1, args.repeat))]
    rows = [dataclasses.replace(same[0], seconds=statistics.median(r.seconds for r in same))
            for same in zip(*runs, strict=True)]
    lat = f"{args.latency_ms:g}"
    print(f"\n## Store and cache benchmark: D1Store/D1Cache on the in-process local D1 beside "
          f"SqliteStore/SqliteCache (file) and InMemoryStore; +{lat} ms per request; "
          f"{args.clock} time, median of {max(1, args.repeat)}\n")
    head = ["operation", "store", "calls", "requests", "KB sent / recv",
            "ms per call, no latency", f"ms per call at +{lat} ms", f"s in all at +{lat} ms"]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for row in rows:
        print("| " + " | ".join(row.cells(args.latency_ms)) + " |")
    return rows
