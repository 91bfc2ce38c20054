"""Where the bytes of one conversation go: every request body of the benchmark's agent, by
statement and parameter (the breakdown behind docs/STORAGE_DESIGN.md's schema v8 table).

The agent (plain channel, fanout 3) runs TURNS turns against an embedded local D1; an
`httpx` transport that records each request body is handed to the saver (the same injection
point every deployment uses). Prints bytes per part of the bodies, largest first.

    python -m benchmarks bytes [--turns 30] [--variant plain|delta]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import threading
from collections import Counter
from typing import Any

import httpx

from benchmarks.workload import VARIANTS, build_graph, first_input

# The writes' statements, by the first words of their SQL: their parameters, in order.
PARAMETERS = {
    "INSERT INTO d1saver_put ": ("thread_id", "checkpoint_ns", "checkpoint_id", "parent", "type",
                                 "checkpoint", "metadata", "channels", "run_id", "ts", "chunks"),
    "INSERT INTO d1saver_put_writes ": ("thread_id", "checkpoint_ns", "checkpoint_id", "task_id",
                                        "task_path", "special", "regular", "chunks"),
}


class Recording(httpx.HTTPTransport):
    """An HTTP transport that keeps every request body it sends."""

    def __init__(self) -> None:
        super().__init__()
        self.bodies: list[bytes] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        self.bodies.append(request.read())
        return super().handle_request(request)


def _statement(sql: str) -> tuple[str, tuple[str, ...] | None]:
    for prefix, names in PARAMETERS.items():
        if sql.startswith(prefix):
            return prefix.split()[2], names
    return "read: " + " ".join(sql.split()[:3]), None


def breakdown(bodies: list[bytes]) -> Counter[str]:
    """Bytes of `bodies` by part: each statement's SQL text, each named parameter (as JSON),
    and the JSON framing around them."""
    parts: Counter[str] = Counter()
    for body in bodies:
        doc = json.loads(body)
        statements = doc.get("batch", [doc])
        inner = 0
        for st in statements:
            name, params = _statement(st["sql"])
            sql = len(json.dumps(st["sql"]))
            parts[f"{name}: SQL text"] += sql
            inner += sql
            for i, value in enumerate(st.get("params", [])):
                size = len(json.dumps(value, separators=(",", ":")))
                parts[f"{name}: {params[i] if params else 'parameters'}"] += size
                inner += size
        parts["JSON framing"] += len(body) - inner
    return parts


def run(turns: int, variant: str) -> tuple[int, Counter[str]]:
    from d1saver import D1Saver
    from d1saver.local import make_server

    data = tempfile.TemporaryDirectory(prefix="d1saver-bytes-")
    server = make_server("127.0.0.1", 0, data.name, latency_ms=0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    transport = Recording()
    try:
        with D1Saver(account_id="bench", database_id="bytes", api_token="local",
                     api_base_url=f"http://127.0.0.1:{server.server_address[1]}/client/v4",
                     transport=transport) as saver:
            saver.setup()
            transport.bodies.clear()
            graph: Any = build_graph(saver, variant=variant, turns=turns, fanout=3)
            graph.invoke(first_input(), {"configurable": {"thread_id": "bytes"}},
                         durability="async")
    finally:
        server.shutdown()
        server.server_close()
        data.cleanup()
    return len(transport.bodies), breakdown(transport.bodies)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m benchmarks bytes", description=__doc__.splitlines()[0])
    p.add_argument("--turns", type=int, default=30)
    p.add_argument("--variant", default="plain", choices=VARIANTS)
    args = p.parse_args(argv)
    requests, parts = run(args.turns, args.variant)
    total = sum(parts.values())
    print(f"{args.turns} turns, {args.variant}: {requests} requests, {total / 1024:,.1f} KB sent\n")
    print("| part | KB | share |\n|---|---|---|")
    for part, size in parts.most_common():
        print(f"| {part} | {size / 1024:,.1f} | {size / total:.1%} |")
