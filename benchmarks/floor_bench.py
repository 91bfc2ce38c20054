"""LangGraph's request floor (issue 31): the benchmark's agent through graph.invoke and
graph.ainvoke under durability "sync" and "async", beside InMemorySaver, with the goals judged.

LangGraph chains its puts (each waits for the previous one), so a run of P checkpoints needs
at least 1 get_tuple + P puts: the floor (22 requests for 10 turns x 3 tools). At +50 ms per
request a run cannot take less than floor x (one request's round trip) + what LangGraph takes
by itself (InMemorySaver's run). The goals: at most 25 requests, and a wall time of at most
1.10 x that bound. The round trip is measured here, on the same server (one statement, the
median of 20). Also the client's CPU per put: the agent's puts recorded on InMemorySaver and
replayed into D1Saver, the local D1 in a process of its own so that its CPU is not counted.

    python -m benchmarks floor [--turns 10] [--fanout 3] [--latency-ms 50] [--repeat 3]
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import json
import statistics
import tempfile
import time
import uuid
from dataclasses import asdict, dataclass
from typing import Any

from benchmarks.agent_bench import LocalServer, run_async, run_sync
from benchmarks.workload import build_graph, first_input

CASES = (("invoke", "sync"), ("invoke", "async"), ("ainvoke", "sync"), ("ainvoke", "async"))
MAX_REQUESTS = 25
MAX_RATIO = 1.10


@dataclass
class Case:
    """One API x durability: D1Saver's runs (requests and wall time of each) and InMemorySaver's."""

    api: str
    durability: str
    checkpoints: int
    requests: list[int]
    wall_s: list[float]
    memory_s: float
    round_trip_s: float

    @property
    def floor(self) -> int:
        return 1 + self.checkpoints

    @property
    def bound_s(self) -> float:
        return MAX_RATIO * (self.floor * self.round_trip_s + self.memory_s)


def round_trip(srv: LocalServer, n: int = 20) -> float:
    """The median time of one request of one statement, through D1Client, on this server."""
    from d1saver import Statement
    from d1saver.http.client import D1Client

    client = D1Client(account_id="bench", database_id=f"rtt-{uuid.uuid4().hex[:8]}",
                      api_token="local", api_base_url=f"http://127.0.0.1:{srv.port}/client/v4")
    client.execute([Statement("SELECT 1")])  # the connection opened
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        client.execute([Statement("SELECT 1")])
        times.append(time.perf_counter() - t0)
    client.close()
    return statistics.median(times)


def memory_run(api: str, durability: str, turns: int, fanout: int) -> float:
    """InMemorySaver's wall time for the same run: LangGraph's own time, no network."""
    from langgraph.checkpoint.memory import InMemorySaver

    graph = build_graph(InMemorySaver(), variant="plain", turns=turns, fanout=fanout)
    config = {"configurable": {"thread_id": "memory"}}
    t0 = time.perf_counter()
    if api == "invoke":
        graph.invoke(first_input(), config, durability=durability)
    else:
        asyncio.run(graph.ainvoke(first_input(), config, durability=durability))
    return time.perf_counter() - t0


def run_case(srv: LocalServer, api: str, durability: str, turns: int, fanout: int,
             repeat: int, rtt: float) -> Case:
    requests, walls, checkpoints = [], [], 0
    for _ in range(repeat):
        if api == "invoke":
            row = run_sync("d1saver", "plain", turns, fanout, durability, srv)
        else:
            row = run_async("d1saver-async", "plain", turns, fanout, durability, srv)
        if row.errors or row.requests is None or row.run_s is None:
            raise RuntimeError(f"{api} {durability}: {row.errors}")
        requests.append(row.requests)
        walls.append(row.run_s)
        checkpoints = row.checkpoints or 0
    memory = statistics.median(memory_run(api, durability, turns, fanout) for _ in range(repeat))
    return Case(api, durability, checkpoints, requests, walls, memory, rtt)


# --- the client's CPU per put --------------------------------------------------------------

def recorded_calls(turns: int, fanout: int) -> list[tuple[str, tuple[Any, ...]]]:
    """The agent's put and put_writes calls, in order, as InMemorySaver received them."""
    from langgraph.checkpoint.memory import InMemorySaver

    calls: list[tuple[str, tuple[Any, ...]]] = []

    class Recording(InMemorySaver):
        def put(self, config, checkpoint, metadata, new_versions):  # type: ignore[no-untyped-def]
            calls.append(("put", copy.deepcopy((config, checkpoint, metadata, new_versions))))
            return super().put(config, checkpoint, metadata, new_versions)

        def put_writes(self, config, writes, task_id, task_path=""):  # type: ignore[no-untyped-def]
            calls.append(("put_writes", copy.deepcopy((config, writes, task_id, task_path))))
            return super().put_writes(config, writes, task_id, task_path)

    graph = build_graph(Recording(), variant="plain", turns=turns, fanout=fanout)
    graph.invoke(first_input(), {"configurable": {"thread_id": "rec"}}, durability="sync")
    return calls


def _as_thread(args: tuple[Any, ...], thread_id: str) -> tuple[Any, ...]:
    """The call's arguments for `thread_id`, without LangGraph's durability tag. The replay
    makes every call from one thread, one after the other, which LangGraph never does: tagged,
    each put_writes would wait out its hold alone (no put can come while it waits; 50 ms, 118
    of them a replay), and the put after that idle then measured 0.6-0.8 ms more CPU from a
    cold processor, not from its own work. Untagged, writes leave at once, as 0.2.0's did: the
    same calls in the same order for both."""
    config = copy.deepcopy(args[0])
    config["configurable"]["thread_id"] = thread_id
    config["configurable"].pop("__pregel_durability", None)  # LangGraph's key (0.2.0 runs it too)
    return (config, *args[1:])


def put_cpu_ms(turns: int, fanout: int, repeat: int) -> float:
    """The client's CPU per put (ms, the median of `repeat` replays of the agent's calls)."""
    from benchmarks.growth_bench import ServerProcess
    from d1saver import D1Saver

    calls = recorded_calls(turns, fanout)
    with tempfile.TemporaryDirectory() as data:
        srv = ServerProcess(data)
        try:
            saver = D1Saver(account_id="bench", database_id="cpu", api_token="local",
                            api_base_url=f"http://127.0.0.1:{srv.port}/client/v4")
            saver.setup()
            per_put = []
            for _ in range(repeat):
                thread = f"cpu-{uuid.uuid4().hex[:8]}"
                cpu, puts = 0.0, 0
                for name, args in calls:
                    args = _as_thread(args, thread)
                    if name == "put":
                        t0 = time.process_time()
                        saver.put(*args)
                        cpu += time.process_time() - t0
                        puts += 1
                    else:
                        saver.put_writes(*args)
                per_put.append(cpu / puts * 1000)
            saver.close()
        finally:
            srv.close()
    return statistics.median(per_put)


# --- output --------------------------------------------------------------------------------

def _range(values: list[Any], fmt: str = "{}") -> str:
    lo, hi = min(values), max(values)
    return fmt.format(lo) if lo == hi else f"{fmt.format(lo)}-{fmt.format(hi)}"


def table(cases: list[Case]) -> str:
    lines = ["| API, durability | requests | floor | wall s (median) | InMemorySaver s | "
             "bound s | requests <= 25 | wall <= bound |", "|" + "---|" * 8]
    for c in cases:
        wall = statistics.median(c.wall_s)
        lines.append(
            f"| graph.{c.api}, \"{c.durability}\" | {_range(c.requests)} | {c.floor} | "
            f"{wall:.2f} ({_range(c.wall_s, '{:.2f}')}) | {c.memory_s:.2f} | {c.bound_s:.2f} | "
            f"{'PASS' if max(c.requests) <= MAX_REQUESTS else 'FAIL'} | "
            f"{'PASS' if wall <= c.bound_s else 'FAIL'} |")
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks floor", description=__doc__.splitlines()[0])
    p.add_argument("--turns", type=int, default=10)
    p.add_argument("--fanout", type=int, default=3)
    p.add_argument("--latency-ms", type=float, default=50.0, help="added by the local D1 per request")
    p.add_argument("--repeat", type=int, default=3, help="runs of each case")
    p.add_argument("--cpu-turns", type=int, default=30, help="the agent whose puts are replayed (0: skip)")
    p.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> list[Case]:
    args = parse_args(argv)
    srv = LocalServer(args.latency_ms)
    try:
        rtt = round_trip(srv)
        cases = []
        for api, durability in CASES:
            case = run_case(srv, api, durability, args.turns, args.fanout, args.repeat, rtt)
            cases.append(case)
            print(f"  {api:7} {durability:5}: requests {case.requests}, wall "
                  f"{[round(w, 2) for w in case.wall_s]} s", flush=True)
    finally:
        srv.close()
    cpu = put_cpu_ms(args.cpu_turns, args.fanout, args.repeat) if args.cpu_turns else None
    print(f"\n## LangGraph's floor ({args.turns} turns x {args.fanout} tools, plain, latency "
          f"{args.latency_ms:g} ms/request; one request's round trip {rtt * 1000:.1f} ms; bound = "
          f"{MAX_RATIO} x (floor x round trip + InMemorySaver's run))\n")
    print(table(cases))
    if cpu is not None:
        print(f"\nClient CPU per put ({args.cpu_turns} turns x {args.fanout} tools replayed, "
              f"local D1 in its own process): {cpu:.2f} ms")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"latency_ms": args.latency_ms, "round_trip_s": rtt, "put_cpu_ms": cpu,
                       "cases": [asdict(c) | {"floor": c.floor, "bound_s": c.bound_s}
                                 for c in cases]}, fh, indent=2)
    return cases


if __name__ == "__main__":
    main()
