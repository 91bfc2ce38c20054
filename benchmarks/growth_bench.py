"""The growth benchmark: what one conversation costs as it gets longer (issue 12's table).

The benchmark's agent (plain `operator.add` messages channel, fanout 3; and d1saver's DeltaChannel
variant) runs 10, 30, 100 and 300 turns against one local D1 served by a separate process, so
`time.process_time()` here measures the client alone (saver, serializer and LangGraph), not the
server. Counted at the server: bytes sent (request bodies), rows written (D1's `meta.rows_written`
summed) and requests. Bytes stored: the sum of `LENGTH(CAST(col AS BLOB))` over every column of
every row of every table (payload, indexes excluded), and the SQLite database size
(`page_count * page_size`, indexes and free space included). No latency is added.

    python -m benchmarks growth [--turns 10,30,100,300] [--json PATH] [--plot PATH]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import sqlite3
import tempfile
import threading
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from benchmarks.workload import build_graph, first_input

DEFAULT_TURNS = (10, 30, 100, 300)
FANOUT = 3
# (saver, variant) pairs: Cloudflare's saver cannot read a DeltaChannel graph back (ANCHORS.md).
RUNS = (("d1saver", "plain"), ("cloudflare", "plain"), ("d1saver", "delta"))
# Cloudflare's saver sends ~300 MB at 300 turns (base64 in JSON, one request per pending write);
# measured here it still finishes (47 s of wall time, 4 minutes for the whole table), so it runs at
# every size unless --peer-max-turns says otherwise.
PEER_MAX_TURNS = 300


# --- the local D1 in its own process ---------------------------------------------------------

def _serve(conn, data_dir: str) -> None:
    """Child process: serve a local D1 over HTTP and answer control messages on `conn`."""
    from d1saver.local import make_server

    server = make_server("127.0.0.1", 0, data_dir, latency_ms=0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    conn.send(server.server_address[1])
    stats = server.engine.stats
    while True:
        command = conn.recv()
        if command == "stats":
            conn.send(stats.snapshot())
        elif command == "reset":
            stats.reset()
            conn.send(None)
        else:  # "stop"
            server.shutdown()
            server.server_close()
            conn.send(None)
            return


class ServerProcess:
    """A local D1 HTTP server on 127.0.0.1 in a child process, with its counters over a pipe."""

    def __init__(self, data_dir: str) -> None:
        ctx = multiprocessing.get_context("spawn")
        self._conn, child = ctx.Pipe()
        self.process = ctx.Process(target=_serve, args=(child, data_dir), daemon=True)
        self.process.start()
        self.port: int = self._conn.recv()
        self.data_dir = Path(data_dir)

    def _ask(self, command: str) -> Any:
        self._conn.send(command)
        return self._conn.recv()

    def stats(self) -> dict[str, int]:
        return self._ask("stats")

    def reset(self) -> None:
        self._ask("reset")

    def close(self) -> None:
        self._ask("stop")
        self.process.join(10)


# --- stored bytes, read from the database file after the run ----------------------------------

def stored(path: Path) -> dict[str, int]:
    """Payload bytes (every column of every row), database bytes, and checkpoint rows in `path`."""
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        payload = 0
        tables = [t for (t,) in db.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite%'")]
        for table in tables:
            cols = [c[1] for c in db.execute(f'PRAGMA table_info("{table}")')]
            if cols:
                total = " + ".join(f'COALESCE(LENGTH(CAST("{c}" AS BLOB)), 0)' for c in cols)
                payload += db.execute(f'SELECT COALESCE(SUM({total}), 0) FROM "{table}"').fetchone()[0]
        pages = db.execute("PRAGMA page_count").fetchone()[0] * db.execute("PRAGMA page_size").fetchone()[0]
        checkpoints = db.execute("SELECT COUNT(*) FROM checkpoints").fetchone()[0]
        return {"payload": payload, "database": pages, "checkpoints": checkpoints}
    finally:
        db.close()


# --- one run ---------------------------------------------------------------------------------

@dataclass
class Row:
    """One saver x variant x turns run; None where the run did not happen."""

    saver: str
    variant: str
    turns: int
    checkpoints: int | None = None
    requests: int | None = None
    bytes_sent: int | None = None
    bytes_stored: int | None = None  # sum of LENGTH of every stored column
    database_bytes: int | None = None  # SQLite page_count * page_size
    rows_written: int | None = None
    cpu_s: float | None = None  # client process CPU (user + system) for the run
    wall_s: float | None = None
    state_bytes: int | None = None  # the final messages list, serialized by LangGraph's serde
    get_state_requests: int | None = None
    get_state_bytes: int | None = None  # response bytes of one get_state
    note: str = ""

    @property
    def sent_per_turn(self) -> float | None:
        return None if self.bytes_sent is None else self.bytes_sent / self.turns

    @property
    def per_checkpoint(self) -> float | None:
        return None if self.requests is None or not self.checkpoints else self.requests / self.checkpoints


def _make_saver(name: str, port: int, db: str):
    base = f"http://127.0.0.1:{port}/client/v4"
    if name == "d1saver":
        from d1saver import D1Saver

        saver = D1Saver(account_id="bench", database_id=db, api_token="local", api_base_url=base)
        saver.setup()
        return saver, saver.close
    from langgraph_checkpoint_cloudflare_d1 import CloudflareD1Saver

    saver = CloudflareD1Saver(account_id="bench", database_id=db, api_token="local")
    saver.base_url = f"{base}/accounts/bench/d1/database/{db}"  # the class hard-codes api.cloudflare.com
    saver.setup()
    return saver, lambda: None


def run_one(srv: ServerProcess, name: str, variant: str, turns: int, durability: str) -> Row:
    """Run one conversation; count what crossed the API, the client's CPU, and what is stored."""
    from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

    row = Row(name, variant, turns)
    db = f"{name}-{variant}-{turns}-{uuid.uuid4().hex[:8]}"
    saver, close = _make_saver(name, srv.port, db)
    graph = build_graph(saver, variant=variant, turns=turns, fanout=FANOUT)
    config = {"configurable": {"thread_id": f"growth-{uuid.uuid4().hex[:8]}"}}
    try:
        srv.reset()
        cpu0, t0 = time.process_time(), time.perf_counter()
        graph.invoke(first_input(), config, durability=durability)
        row.cpu_s, row.wall_s = time.process_time() - cpu0, time.perf_counter() - t0
        stats = srv.stats()
        row.requests, row.bytes_sent, row.rows_written = (
            stats["requests"], stats["bytes_received"], stats["rows_written"])
        srv.reset()
        state = graph.get_state(config)
        stats = srv.stats()
        row.get_state_requests, row.get_state_bytes = stats["requests"], stats["bytes_sent"]
        row.state_bytes = len(JsonPlusSerializer().dumps_typed(state.values["messages"])[1])
    finally:
        close()
    facts = stored(srv.data_dir / f"{db}.sqlite")
    row.bytes_stored, row.database_bytes, row.checkpoints = (
        facts["payload"], facts["database"], facts["checkpoints"])
    return row


# --- output ----------------------------------------------------------------------------------

def _kb(n: int | None) -> str:
    return "-" if n is None else f"{n / 1024:,.1f}"


HEADER = ("saver", "variant", "turns", "ckpts", "KB sent", "KB sent/turn", "KB stored", "DB KB", "rows written",
          "req/ckpt", "client CPU s", "wall s", "state KB", "get_state req", "get_state KB recv")


def table(rows: list[Row]) -> str:
    lines = ["| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
    for r in rows:
        if r.note:
            lines.append(f"| {r.saver} | {r.variant} | {r.turns} | " + " | ".join(
                [f"not run: {r.note}"] + ["-"] * (len(HEADER) - 4)) + " |")
            continue
        cells = (r.saver, r.variant, str(r.turns), str(r.checkpoints), _kb(r.bytes_sent), _kb(r.sent_per_turn),
                 _kb(r.bytes_stored), _kb(r.database_bytes), str(r.rows_written), f"{r.per_checkpoint:.2f}", f"{r.cpu_s:.2f}",
                 f"{r.wall_s:.1f}", _kb(r.state_bytes), str(r.get_state_requests), _kb(r.get_state_bytes))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot(rows: list[Row], path: str) -> None:
    """Bytes sent per turn (the run's bytes over its turns) against turns, and the run's total.

    Per turn of one run is not drawn: with durability="async" writes trail the graph's steps, so
    bytes counted at the server cannot be split by turn exactly."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (per_turn, total) = plt.subplots(1, 2, figsize=(11, 4.2))
    for saver, variant in dict.fromkeys((r.saver, r.variant) for r in rows):
        runs = sorted((r for r in rows if (r.saver, r.variant) == (saver, variant) and r.bytes_sent),
                      key=lambda r: r.turns)
        turns = [r.turns for r in runs]
        per_turn.plot(turns, [r.bytes_sent / r.turns / 1024 for r in runs], marker="o", label=f"{saver} {variant}")
        total.plot(turns, [r.bytes_sent / 1024 for r in runs], marker="o", label=f"{saver} {variant}")
    per_turn.set(xlabel="turns in the conversation", ylabel="KB sent per turn",
                 title="Bytes sent per turn (run total / turns)")
    total.set(xlabel="turns in the conversation", ylabel="KB sent", title="Bytes sent for the run",
              xscale="log", yscale="log")
    for ax in (per_turn, total):
        ax.grid(True, alpha=0.3)
        ax.legend()
    fig.suptitle(f"Benchmark agent, fanout {FANOUT}, local D1 (bytes counted at the server)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks growth", description=__doc__.splitlines()[0])
    p.add_argument("--turns", default=",".join(map(str, DEFAULT_TURNS)), help="comma list of turn counts")
    p.add_argument("--peer-max-turns", type=int, default=PEER_MAX_TURNS,
                   help="run Cloudflare's saver up to this many turns (slow beyond: see the module)")
    p.add_argument("--runs", default=",".join(f"{s}:{v}" for s, v in RUNS), help="comma list of saver:variant")
    p.add_argument("--durability", default="async", choices=("async", "sync", "exit"))
    p.add_argument("--json", metavar="PATH", help="also write the rows as JSON")
    p.add_argument("--plot", metavar="PATH", help="draw bytes sent per turn against turns to a PNG (needs the bench extra's matplotlib)")
    args = p.parse_args(argv)
    args.turns = [int(t) for t in args.turns.split(",") if t.strip()]
    args.runs = [tuple(r.split(":", 1)) for r in args.runs.split(",") if r.strip()]
    if bad := [r for r in args.runs if r not in RUNS]:
        p.error(f"unknown runs {bad}: choose from {', '.join(f'{s}:{v}' for s, v in RUNS)}")
    return args


def main(argv: list[str] | None = None) -> list[Row]:
    args = parse_args(argv)
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="growth-") as data_dir:
        srv = ServerProcess(data_dir)
        try:
            for turns in args.turns:
                for saver, variant in args.runs:
                    if saver == "cloudflare" and turns > args.peer_max_turns:
                        rows.append(Row(saver, variant, turns, note=f"over --peer-max-turns {args.peer_max_turns}"))
                        continue
                    row = run_one(srv, saver, variant, turns, args.durability)
                    rows.append(row)
                    print(f"  {saver:10} {variant:5} {turns:4} turns: {_kb(row.bytes_sent)} KB sent, "
                          f"{row.cpu_s:.2f} s CPU, {row.wall_s:.1f} s", flush=True)
        finally:
            srv.close()
    print(f"\n## Growth (fanout {FANOUT}, durability={args.durability}, no latency; local D1 in its own "
          "process; bytes counted at the server)\n")
    print(table(rows))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"fanout": FANOUT, "durability": args.durability,
                       "rows": [asdict(r) | {"per_checkpoint": r.per_checkpoint, "sent_per_turn": r.sent_per_turn}
                                for r in rows]}, fh, indent=2)
    if args.plot:
        plot(rows, args.plot)
        print(f"\nplot: {args.plot}")
    return rows


if __name__ == "__main__":
    main()
