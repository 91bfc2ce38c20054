"""Scaling over databases: many concurrent agent threads on 1, 2 and 4 D1 databases.

Each of THREADS conversations runs the benchmark's agent graph (benchmarks/workload.py) at once,
on one async D1Saver spread over K databases of the local D1. The local D1 holds a database for
`--service-ms` per statement, as D1 runs one query at a time per database, and adds
`--latency-ms` per request for the network; so a database saturates as D1's would, and the
machine's two cores are not what limits the result. Reported per fleet size: checkpoints per
second, and the p50/p99 latency of a request (queueing at its database included).

    python -m benchmarks scaling [--threads 200] [--turns 2] [--service-ms 10] [--latency-ms 20]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from dataclasses import asdict, dataclass
from typing import Any

import anyio.to_thread

from benchmarks.workload import VARIANTS, build_graph, first_input
from d1saver.compaction import compact
from d1saver import D1Saver, Statement, TraceEvent, admin
from d1saver.local import LocalD1, LocalD1Transport

FLEETS = (1, 2, 4)
COUNT = Statement("SELECT COUNT(*) AS n FROM checkpoints")


@dataclass
class Row:
    databases: int
    threads: int
    checkpoints: int
    seconds: float
    checkpoints_per_s: float
    requests: int
    requests_per_checkpoint: float
    p50_ms: float
    p99_ms: float
    busiest_share: float  # requests of the busiest database / all requests
    busiest_busy: float   # share of the run the busiest database spent serving statements


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else 0.0


async def run_fleet(k: int, threads: int, turns: int, fanout: int, service_ms: float,
                    latency_ms: float) -> Row:
    events: list[TraceEvent] = []
    engine = LocalD1(service_time_ms=service_ms)
    transport = LocalD1Transport(engine, latency_ms=latency_ms)
    ids = [f"scale-{k}-{i}" for i in range(k)]
    saver = D1Saver(account_id="bench", database_ids=ids, api_token="t",
                    api_base_url="http://d1.local/client/v4", transport=transport,
                    tracer=events.append)
    await saver.asetup()
    graph = build_graph(saver, turns=turns, fanout=fanout)
    events.clear()
    started = time.monotonic()
    await asyncio.gather(*(graph.ainvoke(first_input(), {"configurable": {
        "thread_id": f"agent-{i:04d}"}}) for i in range(threads)))
    seconds = time.monotonic() - started
    counted = saver.each_database(lambda db: db.execute([COUNT])[0].rows[0][0])
    checkpoints = sum(int(n) for n in counted.values())
    await saver.aclose()
    engine.close()
    latencies = [e.seconds * 1000 for e in events if e.error is None]
    per_db = [sum(1 for e in events if e.database_id == db) for db in ids]
    busy = [sum(len(e.statements) for e in events if e.database_id == db) * service_ms / 1000
            for db in ids]
    return Row(k, threads, checkpoints, round(seconds, 2), round(checkpoints / seconds, 1),
               len(events), round(len(events) / checkpoints, 2),
               round(statistics.median(latencies), 1), round(percentile(latencies, 0.99), 1),
               round(max(per_db) / max(1, len(events)), 2), round(max(busy) / seconds, 2))


def stored_bytes(saver: D1Saver) -> int:
    (result,) = saver.execute([admin.storage_summary()])
    return sum(int(r[2]) for r in result.rows)


def storage(turns: int, fanout: int, keep: int) -> list[dict[str, Any]]:
    """Stored bytes of one conversation of `turns` turns, per variant, before and after
    compaction to `keep` checkpoints: the figures docs/SCALING.md divides 10 GB by."""
    out = []
    for variant in VARIANTS:
        with D1Saver(account_id="bench", database_id=f"storage-{variant}", api_token="t",
                     api_base_url="http://d1.local/client/v4",
                     transport=LocalD1Transport(LocalD1())) as saver:
            graph = build_graph(saver, variant=variant, turns=turns, fanout=fanout)
            graph.invoke(first_input(), {"configurable": {"thread_id": "t"}})
            before = stored_bytes(saver)
            kept = compact(saver, keep=keep)
            out.append({"variant": variant, "turns": turns, "checkpoints":
                        kept.checkpoints_kept + kept.checkpoints_deleted, "bytes": before,
                        "keep": keep, "bytes_compacted": stored_bytes(saver)})
    return out


def storage_table(rows: list[dict[str, Any]]) -> str:
    lines = ["| variant | turns | checkpoints | stored KB | kept | stored KB after compaction |",
             "|---|---|---|---|---|---|"]
    lines += [f"| {r['variant']} | {r['turns']} | {r['checkpoints']} | {r['bytes'] / 1000:.1f} | "
              f"{r['keep']} | {r['bytes_compacted'] / 1000:.1f} |" for r in rows]
    return "\n".join(lines)


def table(rows: list[Row]) -> str:
    head = ("| databases | threads | checkpoints | run s | checkpoints/s | requests | req/ckpt "
            "| p50 ms | p99 ms | busiest db: requests | busiest db: busy |")
    lines = [head, "|" + "---|" * 11]
    for r in rows:
        lines.append(f"| {r.databases} | {r.threads} | {r.checkpoints} | {r.seconds:.2f} | "
                     f"{r.checkpoints_per_s:.0f} | {r.requests} | {r.requests_per_checkpoint:.2f} | "
                     f"{r.p50_ms:.0f} | {r.p99_ms:.0f} | {r.busiest_share:.2f} | "
                     f"{r.busiest_busy:.0%} |")
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks scaling",
                                description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, default=200, help="concurrent conversations")
    p.add_argument("--turns", type=int, default=2, help="agent turns per conversation")
    p.add_argument("--fanout", type=int, default=3, help="parallel tool calls per turn")
    p.add_argument("--service-ms", type=float, default=10.0,
                   help="time a database is held per statement")
    p.add_argument("--latency-ms", type=float, default=20.0, help="added per request")
    p.add_argument("--fleets", default=",".join(map(str, FLEETS)), help="database counts")
    p.add_argument("--storage-turns", type=int, default=30,
                   help="turns of the conversation whose stored bytes are measured (0: skip)")
    p.add_argument("--keep", type=int, default=5, help="checkpoints compaction keeps")
    p.add_argument("--json", metavar="PATH", help="also write the rows as JSON")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> list[Row]:
    args = parse_args(argv)
    rows = []
    for k in [int(x) for x in args.fleets.split(",")]:
        rows.append(asyncio.run(_with_threads(run_fleet(
            k, args.threads, args.turns, args.fanout, args.service_ms, args.latency_ms),
            args.threads * 2)))
        print(f"{k} databases: {rows[-1].checkpoints_per_s:.0f} checkpoints/s", flush=True)
    print(f"\n{args.threads} conversations x {args.turns} turns x {args.fanout} tools, "
          f"service {args.service_ms} ms per statement, latency {args.latency_ms} ms per request\n")
    print(table(rows))
    sizes = storage(args.storage_turns, args.fanout, args.keep) if args.storage_turns else []
    if sizes:
        print(f"\nStored bytes of one conversation, before and after `compact --keep {args.keep}`\n")
        print(storage_table(sizes))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"throughput": [asdict(r) for r in rows], "storage": sizes}, f, indent=2)
    return rows


async def _with_threads(coro: Any, tokens: int) -> Row:
    # Every request in flight waits in a worker thread of its own (the local D1 is
    # synchronous); anyio's default of 40 would queue requests to idle databases behind
    # requests waiting for a busy one.
    anyio.to_thread.current_default_thread_limiter().total_tokens = max(40, tokens)
    return await coro


if __name__ == "__main__":
    main()
