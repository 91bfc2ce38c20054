"""Search by meaning: InMemoryStore beside D1Store's exact scan (index exact=True) and its
prefilter (codes, then the candidates ranked exactly), at 1,000 and 10,000 items of 256 dims,
on clustered and on uniform random unit vectors.

D1 runs on the in-process local D1 (the same SQLite engine; no network): time is d1saver's own
work plus the engine's, per query, top 10; "at +N ms" adds N ms per request, as a D1 REST call
from outside Cloudflare costs. Bytes back are counted by the tracer. Recall@10 is against exact
cosine over the vectors as given (float64), the mean over the queries. Every item's value is
a small JSON object (about 150 bytes), as a memory's note. `--gateway` adds D1Store through
the gateway Worker under `wrangler dev` (workerd's D1 on this machine, over loopback HTTP).
"""

from __future__ import annotations

import argparse
import math
import random
import time
from typing import Any

from langgraph.store.base import PutOp
from langgraph.store.memory import InMemoryStore

from d1saver import D1Store, TraceEvent
from d1saver.local import LocalD1, LocalD1Transport

BASE_URL = "http://d1.local/client/v4"


def _unit(v: list[float]) -> list[float]:
    n = math.sqrt(sum(x * x for x in v)) or 1.0
    return [x / n for x in v]


def dataset(kind: str, n: int, queries: int, dims: int, seed: int = 1) -> dict[str, list[float]]:
    """Vectors "v<i>" and queries "q<j>": uniform random unit vectors, or clustered (64
    centres, each vector its centre plus gaussian noise of 0.05 a dimension)."""
    rng = random.Random(seed)
    out: dict[str, list[float]] = {}
    if kind == "uniform":
        for name, count in (("v", n), ("q", queries)):
            for i in range(count):
                out[f"{name}{i}"] = _unit([rng.gauss(0, 1) for _ in range(dims)])
        return out
    centres = [_unit([rng.gauss(0, 1) for _ in range(dims)]) for _ in range(64)]
    for name, count in (("v", n), ("q", queries)):
        for i in range(count):
            c = centres[rng.randrange(64)]
            out[f"{name}{i}"] = _unit([x + rng.gauss(0, 0.05) for x in c])
    return out


class Lookup:
    """Embeddings that look a text up (a text is a vector's name): no embedding time measured."""

    def __init__(self, vectors: dict[str, list[float]]) -> None:
        self.vectors = vectors

    def __call__(self, texts: list[str]) -> list[list[float]]:
        return [self.vectors[t] for t in texts]


def truth(vectors: dict[str, list[float]], n: int, query: str, k: int) -> list[str]:
    q = vectors[query]
    scores = [(sum(a * b for a, b in zip(q, vectors[f"v{i}"], strict=True)), i) for i in range(n)]
    scores.sort(key=lambda s: -s[0])
    return [f"k{i}" for _, i in scores[:k]]


class Meter:
    def __init__(self) -> None:
        self.events: list[TraceEvent] = []

    def __call__(self, event: TraceEvent) -> None:
        self.events.append(event)


def measure(store: Any, meter: Meter | None, queries: list[str], want: dict[str, list[str]],
            k: int) -> tuple[float, float | None, float | None, float]:
    """Seconds per query, requests and bytes back per query, mean recall@k."""
    before = len(meter.events) if meter else 0
    hits = 0
    t0 = time.perf_counter()
    pages = [store.search(("docs",), query=q, limit=k) for q in queries]
    seconds = (time.perf_counter() - t0) / len(queries)
    for q, page in zip(queries, pages, strict=True):
        hits += len({i.key for i in page} & set(want[q]))
    recall = hits / (k * len(queries))
    if meter is None:
        return seconds, None, None, recall
    new = meter.events[before:]
    return (seconds, len(new) / len(queries), sum(e.bytes_received for e in new) / len(queries),
            recall)


def run(sizes: list[int], kinds: list[str], dims: int, queries: int, k: int
        ) -> list[tuple[str, int, str, float, float | None, float | None, float]]:
    rows = []
    for n in sizes:
        for kind in kinds:
            vectors = dataset(kind, n, queries, dims)
            qs = [f"q{j}" for j in range(queries)]
            want = {q: truth(vectors, n, q, k) for q in qs}
            index = {"dims": dims, "embed": Lookup(vectors), "fields": ["text"]}
            ops = [PutOp(("docs",), f"k{i}", {"text": f"v{i}", "n": i,
                                              "note": f"memory {i} " + "x" * 120})
                   for i in range(n)]
            reference = InMemoryStore(index=index)  # type: ignore[arg-type]
            for start in range(0, n, 500):
                reference.batch(ops[start: start + 500])
            meter = Meter()
            transport = LocalD1Transport(LocalD1())
            common: dict[str, Any] = dict(account_id="bench", database_id="search-bench",
                                          api_token="local", api_base_url=BASE_URL,
                                          transport=transport, tracer=meter)
            fast = D1Store(**common, index=index)
            exact = D1Store(**common, index={**index, "exact": True})
            for start in range(0, n, 500):
                fast.batch(ops[start: start + 500])
            fast.search(("docs",), query=qs[0], limit=k)  # warm: schema read, caches
            exact.search(("docs",), query=qs[0], limit=k)
            for name, store, m in (("InMemoryStore", reference, None),
                                   ("D1Store exact", exact, meter),
                                   ("D1Store prefilter", fast, meter)):
                seconds, requests, received, recall = measure(store, m, qs, want, k)
                rows.append((name, n, kind, seconds, requests, received, recall))
    return rows


def run_gateway(sizes: list[int], kinds: list[str], dims: int, queries: int, k: int
                ) -> list[tuple[str, int, str, float, float | None, float | None, float]]:
    """D1Store through the gateway Worker under `wrangler dev` (the real D1 engine, no
    network): ranked in the Worker, beside the exact scan through the same gateway."""
    import secrets
    import uuid

    from tests.realengine import gateway

    rows = []
    token = secrets.token_urlsafe(24)
    with gateway({"API_TOKEN": token}) as real:
        for n in sizes:
            for kind in kinds:
                vectors = dataset(kind, n, queries, dims)
                qs = [f"q{j}" for j in range(queries)]
                want = {q: truth(vectors, n, q, k) for q in qs}
                index = {"dims": dims, "embed": Lookup(vectors), "fields": ["text"]}
                tag = f"bench-{uuid.uuid4().hex[:8]}"
                ops = [PutOp((tag,), f"k{i}", {"text": f"v{i}", "n": i,
                                               "note": f"memory {i} " + "x" * 120})
                       for i in range(n)]
                meter = Meter()
                common: dict[str, Any] = dict(account_id=real.account_id,
                                              database_id=real.databases["DB_A"],
                                              api_token=token, api_base_url=real.base_url,
                                              tracer=meter, timeout=120)
                ranked = D1Store(**common, index=index)
                exact = D1Store(**common, index={**index, "exact": True})
                for start in range(0, n, 500):
                    ranked.batch(ops[start: start + 500])

                class Scoped:
                    def __init__(self, store: D1Store, tag: str) -> None:
                        self.store, self.tag = store, tag

                    def search(self, _: Any, **kwargs: Any) -> Any:
                        return self.store.search((self.tag,), **kwargs)

                for name, store in (("D1Store exact, gateway", exact),
                                    ("D1Store ranked in the gateway", ranked)):
                    Scoped(store, tag).search(None, query=qs[0], limit=k)  # warm
                    seconds, requests, received, recall = measure(Scoped(store, tag), meter, qs,
                                                                  want, k)
                    rows.append((name, n, kind, seconds, requests, received, recall))
    return rows


def main(argv: list[str] | None = None) -> list[tuple[Any, ...]]:
    p = argparse.ArgumentParser(prog="python -m benchmarks search",
                                description=(__doc__ or "").splitlines()[0])
    p.add_argument("--sizes", default="1000,10000")
    p.add_argument("--kinds", default="clustered,uniform")
    p.add_argument("--dims", type=int, default=256)
    p.add_argument("--queries", type=int, default=20)
    p.add_argument("--k", type=int, default=10)
    p.add_argument("--latency-ms", type=float, default=50.0)
    p.add_argument("--quick", action="store_true", help="a tiny run (the smoke test)")
    p.add_argument("--gateway", action="store_true",
                   help="also through the gateway Worker under `wrangler dev` (needs Node)")
    args = p.parse_args(argv)
    if args.quick:
        args.sizes, args.dims, args.queries = "60,1100", 16, 3
    sizes = [int(s) for s in args.sizes.split(",")]
    rows = run(sizes, args.kinds.split(","), args.dims, args.queries, args.k)
    if args.gateway:
        rows += run_gateway(sizes, args.kinds.split(","), args.dims, args.queries, args.k)
    lat = args.latency_ms
    print(f"\n## Search by meaning, {args.dims} dims, top {args.k}, {args.queries} queries each: "
          f"local D1 in process; +{lat:g} ms per request in the last column\n")
    head = ["store", "items", "vectors", "s per query", "requests per query",
            "KB back per query", f"recall@{args.k}", f"s per query at +{lat:g} ms"]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for name, n, kind, seconds, requests, received, recall in rows:
        print(f"| {name} | {n:,} | {kind} | {seconds:.4f} | "
              f"{'-' if requests is None else f'{requests:g}'} | "
              f"{'-' if received is None else f'{received / 1024:,.1f}'} | {recall:.3f} | "
              f"{seconds + (requests or 0) * lat / 1000:.3f} |")
    return rows


if __name__ == "__main__":
    main()
