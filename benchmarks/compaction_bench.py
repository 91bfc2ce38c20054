"""The compaction benchmark: 2,000 threads x 50 checkpoints on a local D1, compacted to keep 5.

Builds the threads fast (rows serialized by D1Saver exactly as `put`/`put_writes` would store them,
sent as bulk INSERT ... SELECT FROM json_each statements in-process), then runs `compact()` over
real HTTP against the same engine on loopback (with --latency-ms added per request) and reports
what it deleted, the requests and batches it took, the wall time and the local D1's counters.

    python -m benchmarks.compaction_bench [--threads 2000 --checkpoints 50 --keep 5 --latency-ms 0] [--json]
"""

from __future__ import annotations

import argparse
import json
import threading
import time
import uuid
import zlib
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from typing import Any

from langgraph.checkpoint.base import empty_checkpoint

from d1saver.compaction import compact
from d1saver import D1Saver, Statement, TraceEvent
# The rows `put` and `put_writes` store, built by the saver's own statement builders.
from d1saver.ops import statements
from d1saver.local import LocalD1, LocalD1Transport, make_server

TARGET_REQUESTS = 200
PARAM_BYTES = 1_500_000  # one bulk statement's JSON parameter; D1 caps a bound value at 2 MB

BULK_CHECKPOINTS = """
INSERT INTO checkpoints (thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id, type,
                         checkpoint, metadata, channels, run_id, ts)
SELECT json_extract(j.value, '$[0]'), json_extract(j.value, '$[1]'), json_extract(j.value, '$[2]'),
       json_extract(j.value, '$[3]'), json_extract(j.value, '$[4]'), json_extract(j.value, '$[5]'),
       json_extract(j.value, '$[6]'), json_extract(j.value, '$[7]'), json_extract(j.value, '$[8]'),
       json_extract(j.value, '$[9]')
FROM json_each(?1) AS j"""
BULK_WRITES = """
INSERT INTO writes (thread_id, checkpoint_ns, checkpoint_id, task_id, task_path, idx, channel,
                    type, value)
SELECT json_extract(j.value, '$[0]'), json_extract(j.value, '$[1]'), json_extract(j.value, '$[2]'),
       json_extract(j.value, '$[3]'), json_extract(j.value, '$[4]'), json_extract(j.value, '$[5]'),
       json_extract(j.value, '$[6]'), json_extract(j.value, '$[7]'), json_extract(j.value, '$[8]')
FROM json_each(?1) AS j"""

_TOPICS = ("an order that has not arrived", "a refund for a damaged item", "the delivery address",
           "an invoice with the wrong amount", "a subscription renewal", "a password reset")


# --- building the threads -------------------------------------------------------------------


def checkpoint_rows(saver: D1Saver, thread_id: str, n: int, started: datetime
                    ) -> Iterator[tuple[list[Any], list[list[Any]]]]:
    """One thread's n checkpoints, each with one pending write, as the rows `put` and
    `put_writes` store: a small conversation state that grows by one message a step."""
    parent: dict[str, Any] = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
    topic = _TOPICS[zlib.crc32(thread_id.encode()) % len(_TOPICS)]
    messages: list[dict[str, str]] = [{"role": "user", "content": f"Hello, I need help with {topic}."}]
    for step in range(n):
        cp = empty_checkpoint()
        cid = f"1f000000-0000-6000-8000-{step:012d}"
        version = f"{step + 1:032}.0000000000000000"
        cp.update(id=cid, ts=(started + timedelta(seconds=step)).isoformat(),
                  channel_values={"messages": messages[-4:], "turn": step},
                  channel_versions={"messages": version, "turn": version},
                  versions_seen={"agent": {"messages": version}})
        metadata = {"source": "loop", "step": step, "parents": {}, "run_id": f"run-{thread_id}"}
        values = saver.ops.values
        (stmt, *_), config, _ = statements.put_statements(
            values, statements.put_input(values, parent, cp, metadata), guard_head=False)
        reply = {"role": "assistant", "content": f"Step {step}: I looked into {topic} and found "
                                                 f"record {step * 7919 % 100_000}; next I will check it."}
        (write, *_), _ = statements.put_writes_statements(values, statements.writes_input(
            values, config, [("messages", reply)], f"task-{step}", ""))
        # The put views' parameters (d1saver/sql/catalogue.py PUT, PUT_WRITES): a NULL type is msgpack;
        # the row's columns are the first ten, the regular writes the seventh.
        row = list(stmt.params[:10])
        row[4] = row[4] or "msgpack"
        head = list(write.params[:5])
        yield row, [head + [idx, ch, ty or "msgpack", v]
                    for idx, ch, ty, v in json.loads(str(write.params[6]))]
        messages.append(reply)
        parent = config


def bulk(sql: str, rows: list[list[Any]]) -> Iterator[Statement]:
    """Statements inserting rows through one JSON parameter each, kept under PARAM_BYTES."""
    chunk: list[str] = []
    size = 0
    for row in rows:
        text = json.dumps(row, ensure_ascii=False, separators=(",", ":"))
        if chunk and size + len(text) > PARAM_BYTES:
            yield Statement(sql, ("[" + ",".join(chunk) + "]",))
            chunk, size = [], 0
        chunk.append(text)
        size += len(text) + 1
    if chunk:
        yield Statement(sql, ("[" + ",".join(chunk) + "]",))


def build(saver: D1Saver, threads: int, checkpoints: int) -> int:
    """Insert the threads; returns the requests it took."""
    saver.setup()
    before = saver.client.requests
    started = datetime.now(timezone.utc) - timedelta(hours=1)
    group = max(1, 2000 // max(checkpoints, 1))  # threads serialized per round of requests
    for first in range(0, threads, group):
        cps: list[list[Any]] = []
        writes: list[list[Any]] = []
        for t in range(first, min(first + group, threads)):
            for cp, ws in checkpoint_rows(saver, f"thread-{t:06d}", checkpoints, started):
                cps.append(cp)
                writes += ws
        for stmt in [*bulk(BULK_CHECKPOINTS, cps), *bulk(BULK_WRITES, writes)]:
            saver.client.execute([stmt])
    return saver.client.requests - before


def counts(saver: D1Saver, keep: int) -> dict[str, int]:
    (res,) = saver.client.execute([Statement(
        "SELECT (SELECT COUNT(*) FROM checkpoints), (SELECT COUNT(*) FROM writes),"
        " (SELECT COUNT(*) FROM (SELECT thread_id FROM checkpoints GROUP BY thread_id"
        "  HAVING COUNT(*) <> ?1))", (keep,))])
    total, writes, off = res.rows[0]
    return {"checkpoints": int(total), "writes": int(writes), "threads_not_at_keep": int(off)}


# --- the run --------------------------------------------------------------------------------


def run(threads: int, checkpoints: int, keep: int, latency_ms: float, batch_checkpoints: int
        ) -> dict[str, Any]:
    engine = LocalD1()
    database = f"bench-{uuid.uuid4().hex[:8]}"
    common = {"account_id": "bench", "database_id": database, "api_token": "bench-token"}
    server = make_server("127.0.0.1", 0, engine=engine, latency_ms=latency_ms)
    serving = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                               daemon=True)
    serving.start()
    try:
        t0 = time.monotonic()
        with D1Saver(**common, api_base_url="http://d1.local/client/v4",
                     transport=LocalD1Transport(engine)) as builder:
            build_requests = build(builder, threads, checkpoints)
            before = counts(builder, keep)
        build_s = time.monotonic() - t0

        host, port = server.server_address[:2]
        events: list[TraceEvent] = []
        engine.stats.reset()
        with D1Saver(**common, api_base_url=f"http://{host}:{port}/client/v4",
                     tracer=events.append) as saver:
            summary = compact(saver, keep=keep, batch_checkpoints=batch_checkpoints)
            stats = engine.stats.snapshot()
            after = counts(saver, keep)
    finally:
        server.shutdown()
        server.server_close()
        engine.close()

    batch_events = [e for e in events if len(e.statements) > 4]
    expected = threads * max(checkpoints - keep, 0)  # 90,000 with the defaults
    return {
        "threads": threads, "checkpoints_per_thread": checkpoints, "keep": keep,
        "latency_ms": latency_ms, "batch_checkpoints": batch_checkpoints,
        "build_seconds": round(build_s, 2), "build_requests": build_requests,
        "checkpoints_before": before["checkpoints"], "checkpoints_after": after["checkpoints"],
        "writes_before": before["writes"], "writes_after": after["writes"],
        "checkpoints_deleted": summary.checkpoints_deleted, "writes_deleted": summary.writes_deleted,
        "bytes_freed": summary.bytes_freed, "threads_not_at_keep": after["threads_not_at_keep"],
        "requests": summary.requests, "batches": summary.batches,
        "compaction_seconds": summary.seconds,
        "slowest_batch_seconds": round(max((e.seconds for e in batch_events), default=0.0), 3),
        "largest_request_bytes": max((e.bytes_sent for e in events), default=0),
        "engine_stats": stats,
        "targets": {
            f"checkpoints deleted == {expected:,}": summary.checkpoints_deleted == expected,
            f"requests <= {TARGET_REQUESTS}": summary.requests <= TARGET_REQUESTS,
            "every thread keeps exactly N": after["threads_not_at_keep"] == 0,
        },
    }


def report(r: dict[str, Any]) -> str:
    s = r["engine_stats"]
    lines = [
        f"## Compaction benchmark: {r['threads']:,} threads x {r['checkpoints_per_thread']} checkpoints,"
        f" keep {r['keep']} (local D1 over HTTP, {r['latency_ms']:g} ms/request)",
        "",
        f"built in        {r['build_seconds']:.1f} s ({r['build_requests']} bulk requests)",
        f"checkpoints     {r['checkpoints_before']:,} -> {r['checkpoints_after']:,}"
        f"   (deleted {r['checkpoints_deleted']:,})",
        f"writes          {r['writes_before']:,} -> {r['writes_after']:,}"
        f"   (deleted {r['writes_deleted']:,})",
        f"bytes freed     {r['bytes_freed']:,}",
        f"HTTP requests   {r['requests']} (batches {r['batches']}, up to {r['batch_checkpoints']}"
        " deletions each)",
        f"wall time       {r['compaction_seconds']:.2f} s (slowest batch {r['slowest_batch_seconds']:.3f} s,"
        f" largest request {r['largest_request_bytes']:,} bytes)",
        f"local D1        {s['requests']} requests, {s['statements']:,} statements,"
        f" {s['rows_written']:,} rows written, {s['bytes_received']:,} bytes in,"
        f" {s['bytes_sent']:,} bytes out",
        "",
        "targets:",
    ]
    lines += [f"  {'met   ' if ok else 'MISSED'} {name}" for name, ok in r["targets"].items()]
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks.compaction_bench",
                                description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, default=2000)
    p.add_argument("--checkpoints", type=int, default=50, help="per thread")
    p.add_argument("--keep", type=int, default=5)
    p.add_argument("--latency-ms", type=float, default=0.0, help="added by the local D1 per request")
    p.add_argument("--batch-checkpoints", type=int, default=2000,
                   help="compaction's deletion budget per request")
    p.add_argument("--json", action="store_true", help="print the figures as JSON")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    result = run(args.threads, args.checkpoints, args.keep, args.latency_ms, args.batch_checkpoints)
    print(json.dumps(result, indent=2) if args.json else report(result))
    return result


if __name__ == "__main__":
    main()
