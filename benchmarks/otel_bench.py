"""What OpenTelemetry costs a put: CPU per `D1Saver.put` without OpenTelemetry importable, with
the API and no SDK (no-op spans), and with the SDK recording every span and the metric.

`--before DIR` adds d1saver as it was before (a checkout of an earlier commit, OpenTelemetry
not importable), to show what the hooks cost without OpenTelemetry. Each way runs in a fresh process (`sys.modules["opentelemetry"] = None` for the first), on two
transports: a canned answer (D1's success envelope, nothing executed: d1saver's own work
alone) and the in-process local D1 (SQLite included). CPU is the process's time
(time.process_time) over a run of puts; the ways take turns, round after round, and each is
shown by its fastest run and its median (on a shared machine, the fastest is the figure least
disturbed by others' load). A put here is one request: with OpenTelemetry, two spans, an
attempt event and one histogram measurement.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from typing import Any

WAYS = ("before", "without", "api-only", "sdk")
TRANSPORTS = ("canned", "local")


def _setup(way: str) -> None:
    if way in ("before", "without"):
        sys.modules["opentelemetry"] = None  # type: ignore[assignment]
        return
    if way == "sdk":
        from opentelemetry import metrics, trace
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import InMemoryMetricReader
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import (SimpleSpanProcessor, SpanExporter,
                                                    SpanExportResult)

        class Drop(SpanExporter):  # every span made and handed over; nothing kept
            def export(self, spans: Any) -> SpanExportResult:
                return SpanExportResult.SUCCESS

        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(Drop()))
        trace.set_tracer_provider(provider)
        metrics.set_meter_provider(MeterProvider(metric_readers=[InMemoryMetricReader()]))


def _canned() -> Any:
    import httpx

    def answer(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        n = len(body["batch"]) if "batch" in body else 1
        one = {"results": {"columns": [], "rows": []}, "success": True,
               "meta": {"changes": 1, "duration": 0.1, "rows_read": 1, "rows_written": 1,
                        "served_by_region": "WEUR", "served_by_primary": True}}
        return httpx.Response(200, json={"success": True, "errors": [], "messages": [],
                                         "result": [one] * n})

    return httpx.MockTransport(answer)


def child(way: str, transport: str, puts: int, runs: int) -> dict[str, Any]:
    """Run in the measuring process: µs of CPU per put, median of `runs` runs of `puts`."""
    _setup(way)
    from langgraph.checkpoint.base import empty_checkpoint

    from d1saver import D1Saver
    from d1saver.local import LocalD1, LocalD1Transport

    try:
        from d1saver.http.telemetry import enabled
    except ImportError:  # d1saver before OpenTelemetry
        enabled = False

    engine = LocalD1()
    saver = D1Saver(account_id="bench", database_id="otel", api_token="local",
                    api_base_url="http://d1.local/client/v4",
                    transport=_canned() if transport == "canned" else LocalD1Transport(engine),
                    auto_setup=transport != "canned")
    config: Any = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
    checkpoint = empty_checkpoint()
    checkpoint["channel_values"] = {"messages": [f"message {i} " * 8 for i in range(20)]}
    for _ in range(50):  # warm: schema, imports, caches
        saver.put(config, checkpoint, {"source": "loop", "step": 1}, {})
    per_put: list[float] = []
    for _ in range(runs):
        t0 = time.process_time()
        for _ in range(puts):
            saver.put(config, checkpoint, {"source": "loop", "step": 1}, {})
        per_put.append((time.process_time() - t0) / puts * 1e6)
    loaded = any(m.startswith("opentelemetry") and v is not None for m, v in sys.modules.items())
    engine.close()
    import d1saver

    return {"way": way, "transport": transport, "us_per_put": per_put,
            "source": os.path.dirname(os.path.dirname(d1saver.__file__)),
            "enabled": enabled, "opentelemetry_loaded": loaded}


def hooks(number: int = 100_000) -> dict[str, float]:
    """The hooks alone, in this process (the API installed, no provider set), µs per call,
    fastest of 5: a public call's wrapper, a request's, and group commit's two; then the
    client's check with `enabled` off, as without OpenTelemetry."""
    import timeit

    from d1saver import D1Client, Statement
    from d1saver.core.protocol import Result
    from d1saver.http import telemetry

    client = D1Client(account_id="a", database_id="d", api_token="t",
                      api_base_url="https://api.cloudflare.com/client/v4")
    statements = [Statement("x", name="PUT"), Statement("y", name="INSERT_CHUNKS")]
    results = [Result([], [], {})]

    def exchange(stmts: Any, span: Any = None) -> Any:
        return results
        yield  # a generator, as the client's is

    def drive(gen: Any) -> Any:
        try:
            next(gen)
        except StopIteration as stop:
            return stop.value

    def call() -> None:
        return None

    traced = telemetry.traced(call, "Bench.call")
    ticket = type("Ticket", (), {"caller": None})()
    client._exchange = exchange  # type: ignore[method-assign]

    def fastest(fn: Any) -> float:
        return min(timeit.repeat(fn, number=number, repeat=5)) / number * 1e6

    out = {
        "a call, bare": fastest(call),
        "a call, wrapped": fastest(traced),
        "an exchange, bare": fastest(lambda: drive(exchange(statements))),
        "an exchange, in its request span": fastest(
            lambda: drive(telemetry.request(client, statements, exchange))),
        "group commit's caller() and merged()": fastest(
            lambda: telemetry.merged([ticket]).__enter__() or telemetry.caller()),
    }
    telemetry.enabled = False
    out["client.exchange, enabled off"] = fastest(lambda: drive(client.exchange(statements)))
    out["group commit's hooks, enabled off"] = fastest(
        lambda: telemetry.merged([ticket]).__enter__() or telemetry.caller())
    return out


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    p = argparse.ArgumentParser(prog="python -m benchmarks otel",
                                description=__doc__.splitlines()[0])
    p.add_argument("--puts", type=int, default=2000, help="puts per run")
    p.add_argument("--runs", type=int, default=3, help="runs per way and round")
    p.add_argument("--rounds", type=int, default=3, help="rounds in which the ways take turns")
    p.add_argument("--transports", default=",".join(TRANSPORTS),
                   help="comma-separated: canned, local")
    p.add_argument("--before", metavar="DIR",
                   help="a d1saver source tree to measure as it was (e.g. a worktree of main)")
    p.add_argument("--child", nargs=2, metavar=("WAY", "TRANSPORT"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child == ["hooks", "-"]:
        print(json.dumps(hooks()))
        return []
    if args.child:
        print(json.dumps(child(*args.child, args.puts, args.runs)))
        return []
    ways = WAYS if args.before else WAYS[1:]
    transports = [t for t in TRANSPORTS if t in args.transports.split(",")]
    found: dict[tuple[str, str], dict[str, Any]] = {}
    for _ in range(args.rounds):
        for transport in transports:
            for way in ways:
                # "before" runs this file on the other tree's d1saver (PYTHONPATH first).
                env = dict(os.environ, PYTHONPATH=os.path.abspath(args.before)) if (
                    way == "before") else None
                done = subprocess.run(
                    [sys.executable, os.path.abspath(__file__), "--child", way, transport,
                     "--puts", str(args.puts), "--runs", str(args.runs)],
                    capture_output=True, text=True, check=True, env=env)
                row = json.loads(done.stdout.strip().splitlines()[-1])
                runs = found.setdefault((transport, way), row)["us_per_put"]
                if runs is not row["us_per_put"]:
                    runs += row["us_per_put"]
    rows = list(found.values())
    for r in rows:
        r["fastest"], r["median"] = min(r["us_per_put"]), statistics.median(r["us_per_put"])
    print(f"CPU per D1Saver.put, µs ({args.rounds} rounds x {args.runs} runs of {args.puts} "
          "puts per way)")
    print(f"{'transport':<10} {'way':<10} {'fastest':>8} {'vs without':>11} {'median':>8} "
          f"{'vs without':>11}  opentelemetry")
    for transport in transports:
        base = found[(transport, "without")]
        for r in (r for r in rows if r["transport"] == transport):
            print(f"{transport:<10} {r['way']:<10} {r['fastest']:>8.1f} "
                  f"{r['fastest'] - base['fastest']:>+11.1f} {r['median']:>8.1f} "
                  f"{r['median'] - base['median']:>+11.1f}  "
                  f"{'imported' if r['opentelemetry_loaded'] else 'not imported'}")
    done = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", "hooks", "-"],
                          capture_output=True, text=True, check=True)
    print("\nThe hooks alone, µs per call (the API installed, no provider set; fastest of 5)")
    for what, us in json.loads(done.stdout.strip().splitlines()[-1]).items():
        print(f"  {what:<40} {us:>6.2f}")
    return rows


if __name__ == "__main__":
    main()
