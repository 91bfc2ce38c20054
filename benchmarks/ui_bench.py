"""`python -m benchmarks ui`: the first page of the thread list (what `d1saver ui` shows at `/`
and `d1saver threads --limit 50` prints) over many threads, sorted in SQL and cut to a page
(d1saver.inspection.threads), beside 0.2.0's way (every thread read in keyset pages of 1,000,
then sorted in Python). Requests, bytes received and seconds, on the local D1 in-process with
`--latency-ms` added per request (D1's REST API costs 50-300 ms a request from outside)."""

from __future__ import annotations

import argparse
import time
from typing import Any

from d1saver.compaction import job
from d1saver import D1Saver, inspection
from d1saver.core.protocol import Statement, TraceEvent
from d1saver.local import LocalD1, LocalD1Transport
from d1saver.sql.query import q

# Threads of `checkpoints` rows each, values of 200 to 1,200 characters, written in one statement.
SEED = q("""INSERT INTO checkpoints (thread_id, checkpoint_ns, checkpoint_id, checkpoint, metadata, ts)
WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < :rows - 1)
SELECT printf('t-%06d', i / :per), '', printf('c-%08d', i), printf('%.*c', 200 + i % 997, 'x'),
       '{}', printf('2026-01-01T00:%08d', i) FROM n""", name="SEED")


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    parser = argparse.ArgumentParser(prog="python -m benchmarks ui", description=__doc__)
    parser.add_argument("--threads", type=int, default=10_000)
    parser.add_argument("--checkpoints", type=int, default=10, help="per thread")
    parser.add_argument("--page", type=int, default=50)
    parser.add_argument("--latency-ms", type=float, default=100.0)
    args = parser.parse_args(argv)
    engine = LocalD1()
    events: list[TraceEvent] = []
    where: dict[str, Any] = dict(account_id="bench", database_id="ui", api_token="t",
                                 api_base_url="http://d1.local/client/v4")
    with D1Saver(**where, transport=LocalD1Transport(engine)) as saver:
        saver.setup()
        saver.client.execute([Statement.bind(SEED, {"rows": args.threads * args.checkpoints,
                                                    "per": args.checkpoints})])
    rows: list[dict[str, Any]] = []
    transport = LocalD1Transport(engine, latency_ms=args.latency_ms)
    with D1Saver(**where, transport=transport, auto_setup=False, tracer=events.append) as reader:
        for sort in ("updated", "bytes"):
            def paged(sort: str = sort) -> list[Any]:
                return inspection.threads(reader, sort=sort, limit=args.page).threads

            def everything(sort: str = sort) -> list[Any]:
                key = (lambda t: t.bytes) if sort == "bytes" else (lambda t: t.updated or "")
                return sorted(job.list_threads(reader), key=key, reverse=True)[:args.page]

            ways = {"page in SQL (0.3.0)": paged, "all, sorted in Python (0.2.0)": everything}
            for way, run in ways.items():
                events.clear()
                started = time.perf_counter()
                page = run()
                rows.append({"sort": sort, "way": way, "rows": len(page), "requests": len(events),
                             "bytes_received": sum(e.bytes_received for e in events),
                             "seconds": round(time.perf_counter() - started, 3)})
    print(f"{args.threads:,} threads x {args.checkpoints} checkpoints; a page of {args.page}; "
          f"{args.latency_ms:g} ms added per request")
    print(f"{'sort':<8} {'way':<32} {'requests':>8} {'bytes received':>15} {'seconds':>8}")
    for r in rows:
        print(f"{r['sort']:<8} {r['way']:<32} {r['requests']:>8} {r['bytes_received']:>15,} "
              f"{r['seconds']:>8.3f}")
    engine.close()
    return rows
