"""The benchmark's agent under injected faults (429, 5xx, dropped connections, lost responses,
transient D1 errors).

Each faulted run is compared with the same run without faults, on a fresh local D1: the same
final state, every checkpoint (count and metadata step/source, in order), and the same pending
writes per checkpoint, none stored twice. Faults are seeded (FaultPlan), so a failing seed can be
replayed; the client sleeps on a virtual clock (tests/reliability/test_rate_limit.py), since the
plan's Retry-After is whole seconds (at least 1, as Cloudflare sends it). A run may fail only if
one request met a fault on all its tries (seed 142 of the soak has 11 in a row); it must then
resume to the same end.

`SUMMARY` accumulates the faults injected (and survived) per kind across the runs of a session;
it is printed at the end of the module.
"""

from __future__ import annotations

import asyncio
import functools
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from langgraph.checkpoint.base import empty_checkpoint

from benchmarks.workload import build_graph, first_input
from d1saver import (
    D1ConnectionError,
    D1Error,
    D1Saver,
    RetryPolicy,
    ServerError,
    Statement,
    TraceEvent,
)
from d1saver.local import Fault, FaultPlan, LocalD1, LocalD1Transport, make_server
from d1saver.local.faults import InjectedFault
from tests.reliability.test_rate_limit import VirtualClock
from tests.servers import serving

BASE_URL = "http://d1.local/client/v4"
THREAD = "agent-1"
CONFIG = {"configurable": {"thread_id": THREAD}}
TURNS, FANOUT = 6, 3
RATES = dict(rate_429=0.08, rate_5xx=0.08, rate_drop=0.08, rate_lost_response=0.08,
             rate_transient=0.08, retry_after_s=0.001)
RETRY = RetryPolicy(max_attempts=10, backoff_initial=0.001, backoff_max=0.005)
CI_SEEDS = range(5)
SOAK_SEEDS = range(100, 200)


@dataclass
class Tally:
    """Faulted agent runs: faults injected per kind, and those the runs survived."""

    runs: int = 0
    exhausted: int = 0  # runs where one request met a fault on every try (then resumed)
    seeds: set[int] = field(default_factory=set)
    requests: int = 0
    injected: Counter = field(default_factory=Counter)
    survived: Counter = field(default_factory=Counter)

    def line(self) -> str:
        kinds = ", ".join(f"{k} {self.injected[k]}/{self.survived[k]}"
                          for k in (f.value for f in Fault))
        return (f"{self.runs} runs over {len(self.seeds)} seeds, {self.requests} HTTP attempts, "
                f"{self.exhausted} runs past the retry budget (resumed); faults injected/survived "
                f"in completed runs: {kinds}")


SUMMARY = {"in-process": Tally(), "http": Tally()}
"""This session's faulted runs, through LocalD1Transport and through the HTTP server."""


# --- running the agent ----------------------------------------------------------------------


@pytest.fixture(autouse=True)
def clock(monkeypatch: pytest.MonkeyPatch) -> VirtualClock:
    """Every test here: the client waits on virtual time (Retry-After is at least 1 s)."""
    return VirtualClock().install(monkeypatch)


@pytest.fixture(scope="module", autouse=True)
def print_summary(request: pytest.FixtureRequest) -> Iterator[None]:
    yield
    lines = [f"[reliability] faulted agent runs, {name}: {tally.line()}"
             for name, tally in SUMMARY.items() if tally.runs]
    capture = request.config.pluginmanager.get_plugin("capturemanager")
    if lines and capture is not None:
        with capture.global_and_fixture_disabled():  # shown with or without -s
            print("", *lines, sep="\n")


def make_saver(transport: Any = None, base_url: str = BASE_URL, *,
               retry: RetryPolicy = RETRY, events: list[TraceEvent] | None = None) -> D1Saver:
    return D1Saver(account_id="acc", database_id="db", api_token="tok", api_base_url=base_url,
                   transport=transport, retry=retry,
                   tracer=None if events is None else events.append)


def invoke(graph: Any, mode: str, payload: Any = None) -> dict:
    if mode == "sync":
        return graph.invoke(payload, CONFIG)
    return asyncio.run(graph.ainvoke(payload, CONFIG))


def observe(saver: D1Saver, graph: Any, result: dict,
            resumed_from: int | None = None) -> dict[str, Any]:
    """What a run left: final values, checkpoints (oldest first), writes per checkpoint."""
    history = list(graph.get_state_history(CONFIG))[::-1]
    position = {s.config["configurable"]["checkpoint_id"]: i for i, s in enumerate(history)}
    rows = saver.client.execute([Statement(
        "SELECT checkpoint_id, task_id, idx, channel, type, value FROM writes"
        " WHERE thread_id = ?1", (THREAD,))])[0].rows
    # Task ids derive from checkpoint ids, which differ between runs: a write is known by its
    # checkpoint's position, its channel, index and value. One task's writes stay together.
    # A write whose checkpoint is not in the history is an orphan (its checkpoint's put failed).
    tasks: dict[tuple, list] = {}
    for cid, task_id, idx, channel, type_, value in rows:
        key = (position.get(cid, "orphan"), task_id)
        tasks.setdefault(key, []).append((idx, channel, type_, value))
    writes = Counter((pos, tuple(sorted(ws))) for (pos, _), ws in tasks.items()
                     if pos != "orphan")
    counts = saver.client.execute([Statement(f"SELECT COUNT(*) FROM {t}")
                                   for t in ("checkpoints", "writes", "chunks")])
    return {
        "result": result,
        "values": graph.get_state(CONFIG).values,
        "steps": [(s.metadata["step"], s.metadata["source"]) for s in history],
        "writes": writes,
        "orphans": sum(len(ws) for (pos, _), ws in tasks.items() if pos == "orphan"),
        "rows": {t: r.rows[0][0] for t, r in zip(("checkpoints", "writes", "chunks"), counts)},
        "resumed_from": resumed_from,  # position of the checkpoint a failed run resumed from
    }


@functools.cache
def reference(variant: str, mode: str) -> dict[str, Any]:
    """The same run without faults."""
    engine = LocalD1()
    saver = make_saver(LocalD1Transport(engine))
    graph = build_graph(saver, variant=variant, turns=TURNS, fanout=FANOUT)
    return observe(saver, graph, invoke(graph, mode, first_input()))


def run_with_faults(saver: D1Saver, engine: LocalD1, plan: FaultPlan, variant: str, mode: str,
                    events: list[TraceEvent], tally: Tally) -> dict[str, Any]:
    """Run the agent under `plan`, then switch faults off and observe what was stored.

    No error may reach the graph unless one request met a fault on every one of its tries; then
    it must be a typed, retryable D1Error, and `invoke(None)` without faults ends the thread.
    """
    engine.faults = plan
    graph = build_graph(saver, variant=variant, turns=TURNS, fanout=FANOUT)
    try:
        result: dict | None = invoke(graph, mode, first_input())
    except D1Error as exc:
        budget = saver.client.retry.max_attempts
        assert any(e.error is not None and e.attempt == budget for e in events), (
            f"{exc!r} reached the graph though no request used up its {budget} attempts")
        assert RetryPolicy.retryable(exc)
        result = None
    engine.faults = None
    injected = plan.counts
    # (the first read of a fresh database also fails, with "no such table", before setup)
    failed_attempts = sum(e.error is not None and RetryPolicy.retryable(e.error) for e in events)
    assert failed_attempts == sum(injected.values())  # each fault was met once by the client
    tally.runs += 1
    tally.seeds.add(plan.seed)
    tally.requests += len(events)
    if result is not None:
        tally.injected.update(injected)
        tally.survived.update(injected)  # the run completed: every one was survived
        return observe(saver, graph, result)
    tally.exhausted += 1
    resumed_from = len(list(graph.get_state_history(CONFIG))) - 1
    return observe(saver, graph, invoke(graph, mode, None), resumed_from)


def assert_resumed_thread(got: dict[str, Any], want: dict[str, Any]) -> None:
    """A thread that failed part way, then resumed, ends as the fault-free one.

    Same final state and checkpoints; no write stored twice or invented. A task's writes may be
    missing on a checkpoint older than the one resumed from (LangGraph's default "async"
    durability commits the next checkpoint though a put_writes failed), and writes of a checkpoint
    whose put failed stay behind as orphans; from the resumed checkpoint on, all are there.
    """
    assert (got["result"], got["values"], got["steps"]) == (
        want["result"], want["values"], want["steps"])
    assert got["rows"]["checkpoints"] == want["rows"]["checkpoints"]
    assert not got["writes"] - want["writes"]

    def since_resume(writes: Counter) -> Counter:
        return Counter({k: n for k, n in writes.items() if k[0] >= got["resumed_from"]})

    assert since_resume(got["writes"]) == since_resume(want["writes"])


def check_faulted_run(seed: int, variant: str, mode: str) -> None:
    engine, events = LocalD1(), []
    saver = make_saver(LocalD1Transport(engine), events=events)
    got = run_with_faults(saver, engine, FaultPlan(seed=seed, **RATES), variant, mode, events,
                          SUMMARY["in-process"])
    want = reference(variant, mode)
    if got["resumed_from"] is None:
        assert got == want  # so also no orphan write, and no row stored twice
    else:
        assert_resumed_thread(got, want)
    engine.close()


# --- the agent under faults ---------------------------------------------------------------


@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize("variant", ["plain", "delta"])
@pytest.mark.parametrize("seed", CI_SEEDS)
def test_agent_survives_faults(seed: int, variant: str, mode: str) -> None:
    """Under 40% faulty requests the agent ends as without faults: state, checkpoints, writes."""
    check_faulted_run(seed, variant, mode)


def test_every_fault_kind_was_injected_and_survived() -> None:
    """Across the CI seeds each kind of fault occurred, and every one was survived."""
    tally = SUMMARY["in-process"]
    if not tally.seeds >= set(CI_SEEDS):
        pytest.skip("counts the CI seeds' runs: run the whole module")
    assert tally.exhausted == 0
    assert all(tally.injected[f.value] > 0 for f in Fault)
    assert tally.survived == tally.injected


@pytest.mark.soak
@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize("variant", ["plain", "delta"])
@pytest.mark.parametrize("seed", SOAK_SEEDS)
def test_agent_survives_faults_soak(seed: int, variant: str, mode: str) -> None:
    """The same, over 100 more seeds (--soak)."""
    check_faulted_run(seed, variant, mode)


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_agent_survives_faults_over_real_http(mode: str) -> None:
    """Through the HTTP server on a real socket: drops and lost responses close connections."""
    server = make_server("127.0.0.1", 0, faults=FaultPlan(seed=7, **RATES))
    with serving(server) as url:
        events: list[TraceEvent] = []
        saver = make_saver(base_url=url, events=events)
        plan = server.engine.faults
        assert plan is not None
        got = run_with_faults(saver, server.engine, plan, "plain", mode, events, SUMMARY["http"])
        assert plan.counts[Fault.DROP.value] + plan.counts[Fault.LOST_RESPONSE.value] > 0
        assert got == reference("plain", mode)
        saver.close()


# --- faults that outlast the retry budget ---------------------------------------------------


class SwitchOn:
    """A tracer that installs a fault plan on the engine once `after` requests have been made."""

    def __init__(self, engine: LocalD1, plan: FaultPlan, after: int) -> None:
        self.engine, self.plan, self.after, self.seen = engine, plan, after, 0

    def __call__(self, event: TraceEvent) -> None:
        self.seen += 1
        if self.seen == self.after:
            self.engine.faults = self.plan


@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize("variant", ["plain", "delta"])
@pytest.mark.parametrize("after", [6, 10, 14])
def test_outage_past_the_retry_budget_raises_then_resumes(variant: str, mode: str,
                                                          after: int) -> None:
    """5xx on every request: ServerError reaches invoke; once healed, invoke(None) completes."""
    engine = LocalD1()
    saver = make_saver(LocalD1Transport(engine), retry=RetryPolicy(
        max_attempts=3, backoff_initial=0.001, backoff_max=0.005))
    saver.client.tracer = SwitchOn(engine, FaultPlan(rate_5xx=1.0), after)
    graph = build_graph(saver, variant=variant, turns=TURNS, fanout=FANOUT)
    with pytest.raises(ServerError):
        invoke(graph, mode, first_input())
    engine.faults = None
    want = reference(variant, mode)
    stored = len(list(graph.get_state_history(CONFIG)))
    assert 0 < stored < len(want["steps"])  # it stopped part way
    result = invoke(graph, mode, None)  # resumes from the last committed checkpoint
    assert_resumed_thread(observe(saver, graph, result, stored - 1), want)
    assert graph.get_state(CONFIG).next == ()


# --- lost responses: retried, stored once ---------------------------------------------------


class LoseNextResponse:
    """A fault plan that lets the next request commit, then drops its response; then none."""

    def __init__(self) -> None:
        self.used = False

    def decide(self) -> InjectedFault | None:
        if self.used:
            return None
        self.used = True
        return InjectedFault(Fault.LOST_RESPONSE)


def count(saver: D1Saver, table: str) -> int:
    """Rows of `table`; of writes, the writes (a "p:" row packs a put_writes call's)."""
    what = ("COALESCE(SUM(CASE WHEN substr(value, 1, 2) = 'p:' THEN "
            "json_array_length(substr(value, 3)) ELSE 1 END), 0)" if table == "writes"
            else "COUNT(*)")
    return saver.client.execute([Statement(f"SELECT {what} FROM {table}")])[0].rows[0][0]


def run(mode: str, sync_call: Any, async_call: Any) -> Any:
    return sync_call() if mode == "sync" else asyncio.run(async_call())


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_lost_put_response_is_retried_and_stored_once(mode: str) -> None:
    """A put whose response is lost is sent again and leaves exactly one checkpoint row."""
    engine, events = LocalD1(), []
    saver = make_saver(LocalD1Transport(engine), events=events)
    saver.setup()
    engine.faults, before = LoseNextResponse(), engine.stats.snapshot()
    args = ({"configurable": {"thread_id": THREAD, "checkpoint_ns": ""}}, empty_checkpoint(),
            {"source": "input", "step": -1}, {})
    run(mode, lambda: saver.put(*args), lambda: saver.aput(*args))
    after = engine.stats.snapshot()
    assert after["requests"] - before["requests"] == 2
    assert after["rows_written"] - before["rows_written"] == 2  # the lost attempt committed
    assert [type(e.error) for e in events[-2:]] == [D1ConnectionError, type(None)]
    assert count(saver, "checkpoints") == 1


@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize("writes", [
    [("messages", "hello"), ("notes", {"n": 1}), ("messages", "bye")],  # INSERT OR IGNORE
    [("__interrupt__", "why"), ("__resume__", "yes")],                  # INSERT OR REPLACE
], ids=["channels", "special"])
def test_lost_put_writes_response_is_retried_and_stored_once(mode: str, writes: list) -> None:
    """put_writes whose response is lost is sent again and stores each write exactly once."""
    engine, events = LocalD1(), []
    saver = make_saver(LocalD1Transport(engine), events=events)
    config = saver.put({"configurable": {"thread_id": THREAD, "checkpoint_ns": ""}},
                       empty_checkpoint(), {"source": "input", "step": -1}, {})
    engine.faults, before = LoseNextResponse(), engine.stats.snapshot()
    run(mode, lambda: saver.put_writes(config, writes, task_id="task-1"),
        lambda: saver.aput_writes(config, writes, task_id="task-1"))
    assert engine.stats.snapshot()["requests"] - before["requests"] == 2
    assert [type(e.error) for e in events[-2:]] == [D1ConnectionError, type(None)]
    assert count(saver, "writes") == len(writes)
    assert len(saver.get_tuple(config).pending_writes) == len(writes)
