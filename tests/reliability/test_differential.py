"""D1Saver against InMemorySaver on random graphs, under every durability, through both APIs
(issue 26).

Each seed makes a graph (tests/reliability/graphgen.py: fan-outs into joins, conditional
edges, Send map-reduce, subgraphs with their own joins, interrupts answered by
`Command(resume=...)`, parallel tool calls, DeltaChannels), run several times on one thread.
Then, on each saver: the whole history, `get_state` (with subgraphs) at every checkpoint, a
fork from every checkpoint that has tasks to run, `update_state` at the middle checkpoint and a
run from there, and the history again. Every answer is compared with InMemorySaver's, ids
aside (each id is named by where it first appears). D1Saver runs on the local D1 with latency
and group commit on, so under durability "async" LangGraph runs the next step while a put
waits: the setting langgraph#8748 needs.

SqliteSaver is a second reference under "sync" and "exit": it must agree with InMemorySaver
on every seed, or the harness is wrong. With the defence against langgraph#8748 switched off
(d1saver/upstream.py), the harness finds the defect under "async"
(`test_the_harness_finds_the_upstream_defect`).

CI: 30 graphs, 10 seeds per durability (half through invoke, half through ainvoke); `./dev soak` runs
many random seeds (D1SAVER_SOAK=N per durability) and prints its counts. A failure names its
seed; D1SAVER_DIFF_SEED=<seed> replays it under every durability and API (`test_replay`).
"""

from __future__ import annotations

import os
import random
import re
import sqlite3
import uuid
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import pytest
from langchain_core.messages import BaseMessage
from langgraph.checkpoint.base import BaseCheckpointSaver, CheckpointTuple
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
from langgraph.graph.state import CompiledStateGraph
from langgraph.types import Command, Interrupt, PregelTask, StateSnapshot

from d1saver import D1Saver, upstream
from d1saver.local import LocalD1, LocalD1Transport
from tests.conftest import LOCAL_BASE_URL, Backend
from tests.reliability import graphgen, harness

DURABILITIES = ("async", "sync", "exit")
APIS = ("invoke", "ainvoke")
CI_SEEDS = 10  # per durability
LATENCY_MS = 5.0
COUNTS: Counter[str] = Counter()


# --- driving one graph on one saver ---------------------------------------------------------


@dataclass(frozen=True)
class Case:
    seed: int
    durability: str
    api: str

    @property
    def replay(self) -> str:
        return (f"D1SAVER_DIFF_SEED={self.seed} .venv/bin/python -m pytest -q "
                "tests/reliability/test_differential.py::test_replay")

    def __str__(self) -> str:
        return f"seed {self.seed}, durability {self.durability!r}, {self.api}"


class Session:
    """One graph on one saver, called through one API; LangGraph's errors become answers."""

    def __init__(self, graph: CompiledStateGraph, case: Case) -> None:
        self.graph, self.case = graph, case
        self.sync = case.api == "invoke"

    async def invoke(self, value: Any, config: dict) -> Any:
        try:
            if self.sync:
                return self.graph.invoke(value, config, durability=self.case.durability)
            return await self.graph.ainvoke(value, config, durability=self.case.durability)
        except Exception as exc:  # compared like any answer: InMemorySaver's run raises too
            return {"error": type(exc).__name__, "message": str(exc)[:300]}

    async def history(self, config: dict) -> list[StateSnapshot]:
        if self.sync:
            return list(self.graph.get_state_history(config))
        return [s async for s in self.graph.aget_state_history(config)]

    async def state(self, config: dict) -> StateSnapshot:
        if self.sync:
            return self.graph.get_state(config, subgraphs=True)
        return await self.graph.aget_state(config, subgraphs=True)

    async def stored(self, saver: BaseCheckpointSaver, thread_id: str) -> list[Any]:
        """Every checkpoint the saver holds of the thread, subgraphs' namespaces too, as
        get_tuple returns them: namespaces in the order they were first written, each
        newest first."""
        config: dict = {"configurable": {"thread_id": thread_id}}
        if self.sync:
            tuples = list(saver.list(config))
        else:
            tuples = [t async for t in saver.alist(config)]
        by_ns: dict[str, list[CheckpointTuple]] = {}
        for t in tuples:
            by_ns.setdefault(t.config["configurable"]["checkpoint_ns"], []).append(t)
        groups = sorted(by_ns.values(),
                        key=lambda g: min(t.config["configurable"]["checkpoint_id"] for t in g))
        return [sorted(g, key=lambda t: t.config["configurable"]["checkpoint_id"], reverse=True)
                for g in groups]

    async def update(self, config: dict, values: dict, as_node: str) -> Any:
        try:
            if self.sync:
                return self.graph.update_state(config, values, as_node=as_node)
            return await self.graph.aupdate_state(config, values, as_node=as_node)
        except Exception as exc:
            return {"error": type(exc).__name__, "message": str(exc)[:300]}


async def answered(session: Session, result: Any, config: dict) -> list[Any]:
    """Resume with Command(resume=...) while the run stops at interrupts (each answered by
    its own id, so parallel interrupts too), the results in order."""
    out = []
    for _ in range(10):
        pending = result.get("__interrupt__") if isinstance(result, dict) else None
        if not pending:
            break
        result = await session.invoke(
            Command(resume={i.id: graphgen.answer_to(i.value) for i in pending}), config)
        out.append(result)
    return out


async def stored(s: Session, saver: BaseCheckpointSaver, thread_id: str,
                 when: str) -> list[tuple[str, Any]]:
    """What the saver holds of the thread, and each subgraph's history read through the graph
    (a subgraph's checkpoints are in a namespace of their own, out of the root's history)."""
    groups = await s.stored(saver, thread_id)
    out: list[tuple[str, Any]] = [(f"stored {when}", groups)]
    for i, group in enumerate(groups):
        ns = group[0].config["configurable"]["checkpoint_ns"]
        if ns:
            sub = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ns}}
            out.append((f"history of namespace {i} {when}", await s.history(sub)))
    return out


async def transcript(spec: graphgen.Spec, saver: BaseCheckpointSaver, case: Case,
                     thread_id: str, counts: Counter[str] | None = None
                     ) -> list[tuple[str, Any]]:
    """Everything a user of `saver` sees of the seed's graph, in order, as (what, answer);
    how many checkpoints and forks it compared added to `counts`."""
    graph, entries = graphgen.build(spec, saver)
    s = Session(graph, case)
    config: dict = {"configurable": {"thread_id": thread_id}}
    out: list[tuple[str, Any]] = []
    for run in range(spec.runs):
        result = await s.invoke(graphgen.run_input(spec, run), config)
        out.append((f"run {run}", result))
        out += [(f"run {run}, resume {i}", r) for i, r in enumerate(
            await answered(s, result, config))]
    out += await stored(s, saver, thread_id, "after the runs")
    history = await s.history(config)
    out.append(("history", history))
    for i, snap in enumerate(history):
        out.append((f"get_state of history[{i}]", await s.state(snap.config)))
    forks = 0
    for i, snap in enumerate(history):
        if snap.next:
            forks += 1
            out.append((f"fork from history[{i}]", await s.invoke(None, snap.config)))
    if history:
        middle = len(history) // 2
        new = await s.update(history[middle].config, {"log": ["update"]},
                             as_node=entries[spec.update_as])
        out.append((f"update_state at history[{middle}]", new))
        if isinstance(new, dict) and "configurable" in new:
            out.append(("run from the update", await s.invoke(None, new)))
            out.append(("get_state after it", await s.state(config)))
    out.append(("history at the end", await s.history(config)))
    out += await stored(s, saver, thread_id, "at the end")
    if counts is not None:
        counts["checkpoints"] += len(history)
        counts["forks"] += forks
    return out


# --- comparing, ids aside -------------------------------------------------------------------

# Checkpoint ids and task ids (UUIDs), interrupt ids and thread ids (32 hex digits, not all
# decimal: that is a channel version).
_ID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
                 r"|(?![0-9]{32})[0-9a-f]{32}")


class Plain:
    """A transcript as plain data: each id replaced by the order it first appears in, so two
    transcripts equal ids aside compare equal."""

    def __init__(self) -> None:
        self.ids: dict[str, str] = {}

    def text(self, s: str) -> str:
        return _ID.sub(lambda m: self.ids.setdefault(m.group(0), f"<id{len(self.ids)}>"), s)

    def config(self, config: Any) -> Any:
        if not config:
            return None
        conf = config.get("configurable", config)
        return [self.text(str(conf.get("checkpoint_ns", ""))),
                self.text(str(conf.get("checkpoint_id")))]

    def __call__(self, obj: Any) -> Any:
        if isinstance(obj, StateSnapshot):
            return {"values": self(obj.values), "next": list(obj.next),
                    "config": self.config(obj.config), "metadata": self(obj.metadata),
                    "parent": self.config(obj.parent_config),
                    "tasks": [self(t) for t in obj.tasks],
                    "interrupts": [self(i) for i in obj.interrupts]}
        if isinstance(obj, CheckpointTuple):
            cp = obj.checkpoint
            writes = sorted(repr(self([_ID.sub("<task>", str(task)), ch, v]))
                            for task, ch, v in obj.pending_writes or ())
            # Not channel_values: how a saver holds them differs (InMemorySaver keeps one blob
            # per channel version and hands back a DeltaChannel's older snapshot; a checkpoint
            # stored whole does not), and the states read through the graph compare them.
            return {"config": self.config(obj.config), "parent": self.config(obj.parent_config),
                    "metadata": self(obj.metadata), "versions": _versions(cp["channel_versions"]),
                    "seen": {node: _versions(v) for node, v in cp["versions_seen"].items()},
                    "updated": cp.get("updated_channels"), "pending_writes": writes}
        if isinstance(obj, PregelTask):
            state = obj.state
            return {"name": obj.name, "path": self(list(obj.path)),
                    "error": None if obj.error is None else repr(obj.error),
                    "interrupts": [self(i) for i in obj.interrupts],
                    "state": self(state) if isinstance(state, StateSnapshot)
                    else self.config(state), "result": self(obj.result)}
        if isinstance(obj, Interrupt):
            return {"interrupt": self(obj.value)}
        if isinstance(obj, BaseMessage):
            return self({"type": obj.type, "content": obj.content, "id": obj.id,
                         "tool_calls": getattr(obj, "tool_calls", None),
                         "tool_call_id": getattr(obj, "tool_call_id", None)})
        if isinstance(obj, dict):
            if "configurable" in obj:  # a config: update_state's answer
                return {"config": self.config(obj)}
            return {self.text(str(k)): self(v) for k, v in obj.items()}
        if isinstance(obj, (list, tuple)):
            return [self(x) for x in obj]
        if isinstance(obj, (set, frozenset)):
            return sorted(self(x) for x in obj)
        if isinstance(obj, str):
            return self.text(obj)
        return obj


def _versions(versions: dict[str, Any]) -> dict[str, int]:
    """Channel versions without the random part some savers add ("00..02.0.4127..." -> 2)."""
    return {ch: int(str(v).split(".")[0]) for ch, v in versions.items()}


def plain(entries: list[tuple[str, Any]]) -> list[tuple[str, Any]]:
    p = Plain()
    return [(what, p(answer)) for what, answer in entries]


def first_difference(got: Any, want: Any, path: str = "") -> str | None:
    """Where two plain values first differ, and how, or None."""
    if isinstance(got, dict) and isinstance(want, dict) and got.keys() == want.keys():
        for k in got:
            found = first_difference(got[k], want[k], f"{path}.{k}")
            if found:
                return found
        return None
    if isinstance(got, list) and isinstance(want, list) and len(got) == len(want):
        for i, (a, b) in enumerate(zip(got, want)):
            found = first_difference(a, b, f"{path}[{i}]")
            if found:
                return found
        return None
    if got != want:
        return f"{path or 'the answer'}:\n      got  {got!r:.800}\n      want {want!r:.800}"
    return None


def compare(got: list[tuple[str, Any]], want: list[tuple[str, Any]]) -> str | None:
    a, b = plain(got), plain(want)
    for (what, x), (what_b, y) in zip(a, b):
        if what != what_b:
            return f"{what} where the reference has {what_b}"
        found = first_difference(x, y)
        if found:
            return f"{what}: {found}"
    if len(a) != len(b):
        return f"{len(a)} answers where the reference has {len(b)}"
    return None


# --- savers ---------------------------------------------------------------------------------


@asynccontextmanager
async def d1_saver(latency_ms: float = LATENCY_MS,
                   backend: Backend | None = None) -> AsyncIterator[D1Saver]:
    """D1Saver with group commit on, on a fresh local D1 with latency (or on `backend`)."""
    if backend is None:
        engine = LocalD1()
        saver = D1Saver(account_id="acc", database_id="db", api_token="test-token",
                        api_base_url=LOCAL_BASE_URL,
                        transport=LocalD1Transport(engine, latency_ms=latency_ms))
    else:
        engine, saver = None, backend.saver()
    try:
        yield saver
    finally:
        await saver.aclose()
        saver.close()
        if engine is not None:
            engine.close()


@asynccontextmanager
async def sqlite_saver(api: str) -> AsyncIterator[BaseCheckpointSaver]:
    if api == "ainvoke":
        async with AsyncSqliteSaver.from_conn_string(":memory:") as saver:
            yield saver
        return
    conn = sqlite3.connect(":memory:", check_same_thread=False)
    try:
        yield SqliteSaver(conn)
    finally:
        conn.close()


async def differences(case: Case, *, backend: Backend | None = None,
                      latency_ms: float = LATENCY_MS, defence: bool = True,
                      spec: graphgen.Spec | None = None) -> list[str]:
    """D1Saver's transcript of the case against InMemorySaver's (and SqliteSaver's against
    InMemorySaver's under "sync" and "exit"): what differs, each naming the case."""
    spec = spec or graphgen.spec_of(case.seed)
    thread = f"diff-{uuid.uuid4().hex}"
    want = await transcript(spec, InMemorySaver(), case, thread)
    found = []
    async with d1_saver(latency_ms, backend) as saver:
        if defence:
            got = await transcript(spec, saver, case, thread, COUNTS)
        else:
            with upstream.disabled():
                got = await transcript(spec, saver, case, thread, COUNTS)
        if backend is not None:  # the real engine's databases are shared: leave nothing
            saver.delete_thread(thread)
    if (why := compare(got, want)) is not None:
        found.append(f"D1Saver differs from InMemorySaver ({case}; {spec.describe()}): "
                     f"{why}\n    replay: {case.replay}")
    if case.durability != "async":
        async with sqlite_saver(case.api) as reference:
            other = await transcript(spec, reference, case, thread)
        if (why := compare(other, want)) is not None:
            found.append(f"HARNESS: SqliteSaver differs from InMemorySaver ({case}; "
                         f"{spec.describe()}): {why}\n    replay: {case.replay}")
    COUNTS["graphs"] += 1
    COUNTS[f"graphs {case.durability}"] += 1
    return found


def api_of(seed: int) -> str:
    return APIS[seed % 2]


# --- the tests ------------------------------------------------------------------------------


# 30 graphs in CI: seeds 0-9 under "async", 10-19 under "sync", 20-29 under "exit", even seeds
# through invoke, odd ones through ainvoke.
CI_CASES = [Case(seed, durability, api_of(seed)) for i, durability in enumerate(DURABILITIES)
            for seed in range(i * CI_SEEDS, (i + 1) * CI_SEEDS)]


@pytest.mark.anyio
@pytest.mark.parametrize("case", CI_CASES,
                         ids=lambda c: f"{c.durability}-seed{c.seed}-{c.api}")
async def test_graph(case: Case) -> None:
    found = await differences(case)
    assert not found, "\n".join(found)


@pytest.mark.anyio
@pytest.mark.soak
async def test_soak(request: pytest.FixtureRequest) -> None:
    """Random seeds, every durability, both APIs: D1SAVER_SOAK=N graphs per durability."""
    per_durability = harness.soak_budget(request, ci=0, soak=100)
    draw = random.SystemRandom()
    before = dict(COUNTS)
    found: list[str] = []
    for durability in DURABILITIES:
        for _ in range(per_durability):
            seed = draw.randrange(10**9)
            found += await differences(Case(seed, durability, api_of(seed)))
    print(f"\ndifferential: {COUNTS['graphs'] - before.get('graphs', 0)} graphs "
          f"({per_durability} per durability, half through ainvoke), "
          f"{COUNTS['checkpoints'] - before.get('checkpoints', 0)} checkpoints of root histories "
          f"compared, {COUNTS['forks'] - before.get('forks', 0)} forks; "
          f"{len(found)} differences")
    assert not found, "\n".join(found)


@pytest.mark.anyio
@pytest.mark.skipif(not os.environ.get("D1SAVER_DIFF_SEED"), reason="set D1SAVER_DIFF_SEED")
async def test_replay() -> None:
    """One seed under every durability, through both APIs."""
    seed = int(os.environ["D1SAVER_DIFF_SEED"])
    print(f"\n{graphgen.spec_of(seed).describe()}")
    found = [d for durability in DURABILITIES for api in APIS
             for d in await differences(Case(seed, durability, api))]
    assert not found, "\n".join(found)


# A join, and a subgraph's own join, each the only block: the smallest graphs the defect needs.
JOINS = (graphgen.Spec(-1, (graphgen.Block("fan", 3),), delta=False, snapshot_frequency=2,
                       runs=2, update_as=0),
         graphgen.Spec(-2, (graphgen.Block("sub", 2, long=True),), delta=False,
                       snapshot_frequency=2, runs=2, update_as=0))


@pytest.mark.anyio
@pytest.mark.parametrize("api", APIS)
@pytest.mark.parametrize("spec", JOINS, ids=["join", "subgraph-join"])
async def test_the_harness_finds_the_upstream_defect(spec: graphgen.Spec, api: str) -> None:
    """With the defence switched off, under durability "async", D1Saver's history differs
    from InMemorySaver's: the harness can fail, and fails where langgraph#8748 says. (15 ms
    per request: LangGraph's next step then surely runs while a put waits.)"""
    found = await differences(Case(spec.seed, "async", api), spec=spec, latency_ms=15,
                              defence=False)
    assert found and all(f.startswith("D1Saver differs") for f in found)
    with_defence = await differences(Case(spec.seed, "async", api), spec=spec, latency_ms=15)
    assert not with_defence, "\n".join(with_defence)


# On the real engine (Wrangler's D1): a seed per durability, with fans, a subgraph's join,
# interrupts, Send and DeltaChannels among them.
REAL_ENGINE_CASES = (Case(0, "async", "ainvoke"), Case(2, "sync", "invoke"),
                     Case(6, "exit", "ainvoke"), Case(9, "async", "invoke"))


@pytest.mark.anyio
@pytest.mark.realengine
@pytest.mark.parametrize("case", REAL_ENGINE_CASES, ids=str)
async def test_graph_on_the_real_engine(case: Case, wrangler_d1: Any) -> None:
    backend = Backend("wrangler", wrangler_d1.base_url, wrangler_d1.api_token,
                      wrangler_d1.account_id, wrangler_d1.database_id)
    found = await differences(case, backend=backend)
    assert not found, "\n".join(found)
