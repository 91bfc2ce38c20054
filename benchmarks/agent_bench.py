"""The agent benchmark: D1Saver vs Cloudflare's saver vs SqliteSaver on the scripted tool-calling graph.

Every D1 saver talks HTTP to one local D1 server on loopback (same engine, same added latency);
requests, bytes and rows are counted at the server. SqliteSaver (`:memory:`) is a no-network reference.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sqlite3
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from benchmarks.workload import VARIANTS, build_graph, first_input, message_count
from d1saver.local import make_server

SAVERS = ("d1saver", "d1saver-async", "d1saver+keys", "sqlite", "cloudflare", "cloudflare-async")
DEFAULT_SAVERS = SAVERS
ISSUE_CONFIGS = ((10, 3), (30, 3))  # the issue's two configurations (turns, fanout)


@dataclass
class Row:
    """One saver x variant run; request and byte counts are None when no HTTP is involved."""

    saver: str
    variant: str
    turns: int
    fanout: int
    checkpoints: int | None = None
    run_s: float | None = None
    requests: int | None = None
    bytes_sent: int | None = None  # by the client, i.e. received by the server
    bytes_received: int | None = None
    rows_written: int | None = None
    state_ok: bool | None = None  # get_state shows every message of the conversation
    get_state_s: float | None = None
    get_state_requests: int | None = None
    history_s: float | None = None
    history_requests: int | None = None
    history_len: int | None = None
    errors: dict[str, str] = field(default_factory=dict)

    @property
    def per_checkpoint(self) -> float | None:
        if self.requests is None or not self.checkpoints:
            return None
        return self.requests / self.checkpoints


class LocalServer:
    """A local D1 HTTP server on 127.0.0.1 (free port) in a daemon thread."""

    def __init__(self, latency_ms: float) -> None:
        self.server = make_server("127.0.0.1", 0, None, latency_ms=latency_ms)
        self.stats = self.server.engine.stats
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


# --- saver factories: (server) -> saver, already set up ------------------------------------------

# "d1saver+keys": every value sealed (AES-256-GCM) and bound to its row; a fixed key, so
# that runs compare (keys cost the same whatever their value).
BENCH_KEYS = [bytes(range(32))]


def _d1saver(srv: LocalServer, **kwargs: Any):
    from d1saver import D1Saver

    return D1Saver(account_id="bench", database_id=f"d1saver-{uuid.uuid4().hex[:12]}",
                   api_token="local", api_base_url=f"http://127.0.0.1:{srv.port}/client/v4",
                   **kwargs)


def _cloudflare_url(srv: LocalServer, db: str) -> str:
    return f"http://127.0.0.1:{srv.port}/client/v4/accounts/bench/d1/database/{db}"


def make_sync_saver(name: str, srv: LocalServer | None):
    """A set-up sync saver and its close function."""
    if name in ("d1saver", "d1saver+keys"):
        saver = _d1saver(srv, **({"encryption_keys": BENCH_KEYS} if name == "d1saver+keys"
                                 else {}))
        saver.setup()
        return saver, saver.close
    if name == "sqlite":
        from langgraph.checkpoint.sqlite import SqliteSaver

        conn = sqlite3.connect(":memory:", check_same_thread=False)
        saver = SqliteSaver(conn)
        saver.setup()
        return saver, conn.close
    if name == "cloudflare":
        from langgraph_checkpoint_cloudflare_d1 import CloudflareD1Saver

        db = f"cloudflare-{uuid.uuid4().hex[:12]}"
        saver = CloudflareD1Saver(account_id="bench", database_id=db, api_token="local")
        saver.base_url = _cloudflare_url(srv, db)  # the class hard-codes api.cloudflare.com
        saver.setup()
        return saver, lambda: None
    raise ValueError(name)


async def make_async_saver(name: str, srv: LocalServer):
    """A set-up async saver and its async close function."""
    if name == "d1saver-async":
        saver = _d1saver(srv)
        await saver.asetup()
        return saver, saver.aclose
    if name == "cloudflare-async":
        from langgraph_checkpoint_cloudflare_d1 import AsyncCloudflareD1Saver

        db = f"cloudflare-{uuid.uuid4().hex[:12]}"
        saver = AsyncCloudflareD1Saver(account_id="bench", database_id=db, api_token="local")
        saver.base_url = _cloudflare_url(srv, db)
        await saver.setup()
        return saver, saver.client.aclose
    raise ValueError(name)


# --- one run --------------------------------------------------------------------------------

def _err(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {str(exc).splitlines()[0][:160] if str(exc) else ''}"


class _Meter:
    """Times a phase and takes the server's counters for it (reset at the start)."""

    def __init__(self, srv: LocalServer | None) -> None:
        self.srv = srv

    def start(self) -> None:
        if self.srv:
            self.srv.stats.reset()
        self.t0 = time.perf_counter()

    def stop(self) -> tuple[float, dict[str, int] | None]:
        elapsed = time.perf_counter() - self.t0
        return elapsed, (self.srv.stats.snapshot() if self.srv else None)


def _record_run(row: Row, elapsed: float, stats: dict[str, int] | None) -> None:
    row.run_s = elapsed
    if stats is not None:
        row.requests, row.rows_written = stats["requests"], stats["rows_written"]
        row.bytes_sent, row.bytes_received = stats["bytes_received"], stats["bytes_sent"]


def run_sync(name: str, variant: str, turns: int, fanout: int, durability: str,
             srv: LocalServer | None) -> Row:
    """Run the workload with `graph.invoke`, then time get_state and get_state_history."""
    row = Row(name, variant, turns, fanout)
    saver, close = make_sync_saver(name, srv)
    graph = build_graph(saver, variant=variant, turns=turns, fanout=fanout)
    config = {"configurable": {"thread_id": f"bench-{uuid.uuid4().hex[:8]}"}}
    meter = _Meter(srv)
    try:
        meter.start()
        graph.invoke(first_input(), config, durability=durability)
        _record_run(row, *meter.stop())
        _phases_sync(row, graph, config, meter)
        row.checkpoints = _count(lambda: sum(1 for _ in saver.list(config)), row)
    except Exception as exc:  # noqa: BLE001 - the benchmark reports failures
        row.errors["run"] = _err(exc)
    finally:
        close()
    return row


def _phases_sync(row: Row, graph, config, meter: _Meter) -> None:
    try:
        meter.start()
        state = graph.get_state(config)
        row.get_state_s, stats = meter.stop()
        row.get_state_requests = stats and stats["requests"]
        row.state_ok = len(state.values.get("messages", [])) == message_count(row.turns, row.fanout)
    except Exception as exc:  # noqa: BLE001 - reported in the row
        row.errors["get_state"] = _err(exc)
    try:
        meter.start()
        history = list(graph.get_state_history(config))
        row.history_s, stats = meter.stop()
        row.history_requests, row.history_len = stats and stats["requests"], len(history)
    except Exception as exc:  # noqa: BLE001 - reported in the row
        row.errors["get_state_history"] = _err(exc)


def _count(fn: Callable[[], int], row: Row) -> int | None:
    try:
        return fn()
    except Exception as exc:  # noqa: BLE001 - reported in the row
        row.errors["list"] = _err(exc)
        return None


def run_async(name: str, variant: str, turns: int, fanout: int, durability: str,
              srv: LocalServer) -> Row:
    """Run the workload with `graph.ainvoke`, then time aget_state and aget_state_history."""
    return asyncio.run(_run_async(name, variant, turns, fanout, durability, srv))


async def _run_async(name, variant, turns, fanout, durability, srv) -> Row:
    row = Row(name, variant, turns, fanout)
    saver, aclose = await make_async_saver(name, srv)
    graph = build_graph(saver, variant=variant, turns=turns, fanout=fanout)
    config = {"configurable": {"thread_id": f"bench-{uuid.uuid4().hex[:8]}"}}
    meter = _Meter(srv)
    try:
        meter.start()
        await graph.ainvoke(first_input(), config, durability=durability)
        _record_run(row, *meter.stop())
        try:
            meter.start()
            state = await graph.aget_state(config)
            row.get_state_s, stats = meter.stop()
            row.get_state_requests = stats["requests"]
            row.state_ok = len(state.values.get("messages", [])) == message_count(turns, fanout)
        except Exception as exc:  # noqa: BLE001 - reported in the row
            row.errors["get_state"] = _err(exc)
        try:
            meter.start()
            history = [s async for s in graph.aget_state_history(config)]
            row.history_s, stats = meter.stop()
            row.history_requests, row.history_len = stats["requests"], len(history)
        except Exception as exc:  # noqa: BLE001 - reported in the row
            row.errors["get_state_history"] = _err(exc)
        try:
            row.checkpoints = len([t async for t in saver.alist(config)])
        except Exception as exc:  # noqa: BLE001 - reported in the row
            row.errors["list"] = _err(exc)
    except Exception as exc:  # noqa: BLE001 - reported in the row
        row.errors["run"] = _err(exc)
    finally:
        await aclose()
    return row


def run_one(name: str, variant: str, turns: int, fanout: int, durability: str,
            srv: LocalServer) -> Row:
    if name.endswith("-async"):
        return run_async(name, variant, turns, fanout, durability, srv)
    return run_sync(name, variant, turns, fanout, durability, None if name == "sqlite" else srv)


# --- targets (issue 5) ------------------------------------------------------------------------

def _find(rows: list[Row], saver: str, variant: str, turns: int) -> Row | None:
    return next((r for r in rows if (r.saver, r.variant, r.turns) == (saver, variant, turns)), None)


def _ok(row: Row | None) -> bool:
    return row is not None and "run" not in row.errors and row.requests is not None


def _mark(passed: bool | None) -> str:
    return "n/a" if passed is None else ("PASS" if passed else "FAIL")


def targets(rows: list[Row], small: int, large: int) -> list[dict[str, Any]]:
    """Issue 5's targets, evaluated on the rows that ran (sync pairs, and async pairs if present)."""
    out: list[dict[str, Any]] = []

    def add(name: str, figure: str, passed: bool | None) -> None:
        out.append({"target": name, "figure": figure, "result": _mark(passed)})

    for mine, theirs in (("d1saver", "cloudflare"), ("d1saver-async", "cloudflare-async")):
        d, c = _find(rows, mine, "plain", small), _find(rows, theirs, "plain", small)
        if _ok(d):
            add(f"(a) {mine} {small}x plain: requests/checkpoint <= 2.5",
                f"{d.per_checkpoint:.2f}", d.per_checkpoint <= 2.5)
        if _ok(d) and _ok(c):
            figure = f"{d.run_s:.2f} s vs {c.run_s:.2f} s (1/{c.run_s / d.run_s:.1f})"
            if theirs == "cloudflare":
                add(f"(a) {mine} {small}x plain: run time <= 1/4 of {theirs}", figure,
                    d.run_s * 4 <= c.run_s)
            else:
                # Not an issue target: the issue's reference is Cloudflare's saver as ANCHORS
                # measures it (sync, a lock serialising every call). Its async saver sends its
                # requests concurrently; both runs sit at LangGraph's floor (each put waits for
                # the previous one), so only the request counts differ. Shown, not judged.
                out.append({"target": f"(info) {mine} {small}x plain: run time vs {theirs}",
                            "figure": figure + f"; requests {d.requests} vs {c.requests}",
                            "result": "info"})
        d, c = _find(rows, mine, "plain", large), _find(rows, theirs, "plain", large)
        if _ok(d) and _ok(c):
            add(f"(b) {mine} {large}x plain: bytes sent <= 1/3 of {theirs} plain",
                f"{_kb(d.bytes_sent)} vs {_kb(c.bytes_sent)} KB (1/{c.bytes_sent / d.bytes_sent:.1f})",
                d.bytes_sent * 3 <= c.bytes_sent)
        d, cd = _find(rows, mine, "delta", large), _find(rows, theirs, "delta", large)
        usable = _ok(cd) and not cd.errors  # its delta graph writes, but may fail to read back
        if _ok(d) and (usable or _ok(c)):
            ref, note = (cd, "delta") if usable else (c, "plain (its delta graph fails to read back)")
            figure = f"{_kb(d.bytes_sent)} vs {_kb(ref.bytes_sent)} KB (1/{ref.bytes_sent / d.bytes_sent:.1f})"
            if not usable and _ok(cd):
                figure += f"; vs its delta writes {_kb(cd.bytes_sent)} KB (1/{cd.bytes_sent / d.bytes_sent:.1f})"
            add(f"(b) {mine} {large}x delta: bytes sent <= 1/20 of {theirs} {note}", figure,
                d.bytes_sent * 20 <= ref.bytes_sent)
        for r in rows:
            if r.saver == mine and _ok(r):
                add(f"(c) {mine} {r.turns}x {r.variant}: get_state 1 request",
                    str(r.get_state_requests), r.get_state_requests == 1 if r.get_state_requests is not None else None)
                add(f"(c) {mine} {r.turns}x {r.variant}: history of {r.history_len} checkpoints 1 request",
                    str(r.history_requests), r.history_requests == 1 if r.history_requests is not None else None)
    return out


# --- output ---------------------------------------------------------------------------------

def _kb(n: int | None) -> str:
    return "-" if n is None else f"{n / 1024:.1f}"


def _f(x: Any, fmt: str = "{}") -> str:
    return "-" if x is None else fmt.format(x)


HEADER = ("saver", "variant", "turns x fanout", "ckpts", "run s", "requests", "req/ckpt", "KB sent",
          "KB recv", "rows written", "state ok", "get_state s", "get_state req", "history s",
          "history req", "history len")


def table(rows: list[Row]) -> str:
    """A markdown table, one row per saver x variant x size; errors as footnotes."""
    lines = ["| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
    notes: list[str] = []
    for r in rows:
        name = r.saver
        if r.errors:
            notes.append(f"[{len(notes) + 1}] {r.saver} {r.variant} {r.turns}x{r.fanout}: "
                         + "; ".join(f"{phase}: {msg}" for phase, msg in r.errors.items()))
            name += f" [{len(notes)}]"
        cells = (name, r.variant, f"{r.turns}x{r.fanout}", _f(r.checkpoints), _f(r.run_s, "{:.2f}"),
                 _f(r.requests), _f(r.per_checkpoint, "{:.2f}"), _kb(r.bytes_sent), _kb(r.bytes_received),
                 _f(r.rows_written), {True: "yes", False: "NO", None: "-"}[r.state_ok],
                 _f(r.get_state_s, "{:.3f}"), _f(r.get_state_requests), _f(r.history_s, "{:.3f}"),
                 _f(r.history_requests), _f(r.history_len))
        lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    return "\n".join(lines + ([""] + notes if notes else []))


def targets_table(results: list[dict[str, Any]]) -> str:
    lines = ["| target | figure | result |", "|---|---|---|"]
    lines += [f"| {t['target']} | {t['figure']} | {t['result']} |" for t in results]
    return "\n".join(lines)


# --- command line ---------------------------------------------------------------------------

def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__.splitlines()[0])
    p.add_argument("--turns", type=int, help="agent turns (default: the issue's 10 and 30)")
    p.add_argument("--fanout", type=int, default=3, help="parallel tool calls per turn")
    p.add_argument("--latency-ms", type=float, default=50.0, help="added by the local D1 per request")
    p.add_argument("--durability", default="async", choices=("async", "sync", "exit"))
    p.add_argument("--savers", default=",".join(DEFAULT_SAVERS), help=f"comma list of {', '.join(SAVERS)}")
    p.add_argument("--variants", default=",".join(VARIANTS), help="plain,delta")
    p.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    p.add_argument("--quick", action="store_true", help="2 turns only (smoke test)")
    args = p.parse_args(argv)
    for opt, allowed in (("savers", SAVERS), ("variants", VARIANTS)):
        values = [v.strip() for v in getattr(args, opt).split(",") if v.strip()]
        if bad := [v for v in values if v not in allowed]:
            p.error(f"unknown {opt}: {', '.join(bad)} (choose from {', '.join(allowed)})")
        setattr(args, opt, values)
    return args


def main(argv: list[str] | None = None) -> list[Row]:
    """Run every saver x variant for each configuration, print the tables, optionally write JSON."""
    args = parse_args(argv)
    if args.quick:
        sizes = [2]
    elif args.turns:
        sizes = [args.turns]
    else:
        sizes = [t for t, _ in ISSUE_CONFIGS]
    srv = LocalServer(args.latency_ms)
    rows: list[Row] = []
    try:
        for turns in sizes:
            for variant in args.variants:
                for name in args.savers:
                    row = run_one(name, variant, turns, args.fanout, args.durability, srv)
                    rows.append(row)
                    print(f"  {name:16} {variant:5} {turns}x{args.fanout}: "
                          f"{_f(row.run_s, '{:.2f}')} s, {_f(row.requests)} requests"
                          + (f"  ({'; '.join(row.errors.values())})" if row.errors else ""), flush=True)
    finally:
        srv.close()
    results = targets(rows, min(sizes), max(sizes))
    print(f"\n## Agent benchmark (latency {args.latency_ms:g} ms/request, durability={args.durability}, "
          f"fanout {args.fanout}; D1 savers over HTTP to one local D1; sqlite = :memory:, no network)\n")
    print(table(rows))
    print("\n## Targets (issue 5)\n")
    print(targets_table(results))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"latency_ms": args.latency_ms, "durability": args.durability, "fanout": args.fanout,
                       "rows": [asdict(r) | {"per_checkpoint": r.per_checkpoint} for r in rows],
                       "targets": results}, fh, indent=2)
    return rows
