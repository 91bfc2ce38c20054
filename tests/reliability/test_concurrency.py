"""Concurrency: many LangGraph threads on one D1Saver at once, and two writers on one thread.

* 50 threads driven at once (`asyncio.gather` of 50 `ainvoke`, one saver, local D1 with 5 ms per
  request; 20 on the `backend` fixture, so also on the real engine) all end with their own,
  correct state: each is compared with the same graph run alone on InMemorySaver.
* Two writers resuming one thread at once: by default both succeed and the thread forks (two
  children of one parent; the head is the greatest checkpoint_id). With `guard_head=True` the
  put whose parent is no longer the head raises `CheckpointConflictError` and stores nothing.
  docs/RELIABILITY.md ("Two writers") describes both.
"""

from __future__ import annotations

import asyncio
import json
import operator
import time
import uuid
from typing import Annotated, Any

import pytest
from langgraph.checkpoint.base import BaseCheckpointSaver, Checkpoint, empty_checkpoint
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph
from typing_extensions import TypedDict

from d1saver import CheckpointConflictError, D1Error, D1Saver, Statement, upstream
from d1saver.local import LocalD1Transport
from tests.conftest import Backend
from tests.saver import graphs

THREADS_LOCAL = 50
THREADS_BACKEND = 20
LATENCY_MS = 5.0


# --- helpers ------------------------------------------------------------------------------


class State(TypedDict):
    log: Annotated[list[str], operator.add]
    total: Annotated[int, operator.add]


def fan_graph(saver: BaseCheckpointSaver) -> CompiledStateGraph:
    """a -> (b1 || b2) -> c: sequential and parallel steps, so puts and put_writes interleave."""

    def a(state: State) -> dict:
        time.sleep(0.001)
        return {"log": [f"{state['log'][0]}:a"], "total": 1}

    def b1(state: State) -> dict:
        time.sleep(0.001)
        return {"total": 10}

    def b2(state: State) -> dict:
        return {"total": 100}

    def c(state: State) -> dict:
        return {"log": [f"{state['log'][0]}:c:{state['total']}"]}

    g = StateGraph(State)
    for name, fn in (("a", a), ("b1", b1), ("b2", b2), ("c", c)):
        g.add_node(name, fn)
    g.add_edge(START, "a")
    g.add_edge("a", "b1")
    g.add_edge("a", "b2")
    g.add_edge(["b1", "b2"], "c")
    g.add_edge("c", END)
    return g.compile(checkpointer=saver)


def expected_state(i: int, runs: int) -> dict:
    """What thread i holds after `runs` invokes of fan_graph with input ({'log': [t{i}], 'total': i})."""
    log: list[str] = []
    total = 0
    for _ in range(runs):
        total += i + 111
        log += [f"t{i}", f"t{i}:a", f"t{i}:c:{total}"]
    return {"log": log, "total": total}


def saver_for(backend: Backend, cls: type[D1Saver] = D1Saver, **kwargs: Any) -> D1Saver:
    kwargs.setdefault("tracer", backend.events.append)
    return cls(account_id=backend.account_id, database_id=backend.database_id,
               api_token=backend.api_token, api_base_url=backend.base_url,
               transport=backend.transport, **kwargs)


def rows(saver: D1Saver, thread_id: str) -> dict[str, list[str]]:
    """Every stored row of one thread (checkpoints, writes, chunks), as sorted JSON lines."""
    out = {}
    for table in ("checkpoints", "writes", "chunks"):
        (res,) = saver.client.execute(
            [Statement(f"SELECT * FROM {table} WHERE thread_id = ?1", (thread_id,))])
        out[table] = sorted(json.dumps(r) for r in res.rows)
    return out


def cfg(thread_id: str, checkpoint_id: str | None = None, ns: str = "") -> dict:
    c: dict[str, Any] = {"thread_id": thread_id, "checkpoint_ns": ns}
    if checkpoint_id is not None:
        c["checkpoint_id"] = checkpoint_id
    return {"configurable": c}


def checkpoint(cid: str | None = None, **values: Any) -> Checkpoint:
    ck = empty_checkpoint()
    if cid is not None:
        ck["id"] = cid
    ck["channel_values"] = dict(values)
    return ck


async def drive_threads(saver: D1Saver, n: int, prefix: str, durability: str = "async") -> None:
    """n threads at once, twice (a fresh run, then a run that resumes each thread).

    Compared with the same graph on InMemorySaver: the final values, and each checkpoint's
    values, step, source and `next` (under every durability: see
    test_async_durability_history_matches_in_memory_saver).
    """
    graph = fan_graph(saver)
    oracle = fan_graph(InMemorySaver())
    ids = [f"{prefix}-{i}" for i in range(n)]
    for run in (1, 2):
        results = await asyncio.gather(*(
            graph.ainvoke({"log": [f"t{i}"], "total": i}, {"configurable": {"thread_id": tid}},
                          durability=durability)
            for i, tid in enumerate(ids)))
        for i, (tid, result) in enumerate(zip(ids, results)):
            assert result == expected_state(i, run), tid
    # Each thread's stored state and history: its own, and shaped as the oracle's.
    for i, tid in enumerate(ids):
        conf = {"configurable": {"thread_id": tid}}
        state = await graph.aget_state(conf)
        assert state.values == expected_state(i, 2)
        history = [s async for s in graph.aget_state_history(conf)]
        for _ in (1, 2):
            await oracle.ainvoke({"log": [f"t{i}"], "total": i}, conf, durability="sync")
        oracle_history = [s async for s in oracle.aget_state_history(conf)]

        def shape(h: list) -> list:
            return [(s.values, s.metadata["step"], s.metadata["source"], s.next) for s in h]

        assert shape(history) == shape(oracle_history), tid
        # Linear: each checkpoint's parent is the next older one, all in this thread.
        assert [h.parent_config["configurable"]["checkpoint_id"] for h in history[:-1]] == \
            [h.config["configurable"]["checkpoint_id"] for h in history[1:]]
        assert all(h.config["configurable"]["thread_id"] == tid for h in history)


# --- many threads at once -----------------------------------------------------------------


@pytest.mark.anyio
async def test_50_threads_at_once_on_local_with_latency(local: Backend) -> None:
    local.transport = LocalD1Transport(local.engine, latency_ms=LATENCY_MS)
    saver = local.saver()
    await drive_threads(saver, THREADS_LOCAL, f"c50-{uuid.uuid4().hex[:8]}")
    # Grouped commits really happened: fewer write requests than writes.
    assert saver.driver.group is not None and saver.driver.group.merged > 0
    await saver.aclose()


@pytest.mark.anyio
async def test_50_threads_at_once_durability_sync(local: Backend) -> None:
    local.transport = LocalD1Transport(local.engine, latency_ms=LATENCY_MS)
    saver = local.saver()
    await drive_threads(saver, THREADS_LOCAL, f"c50s-{uuid.uuid4().hex[:8]}", durability="sync")
    await saver.aclose()


@pytest.mark.anyio
async def test_50_threads_at_once_without_group_commit(local: Backend) -> None:
    local.transport = LocalD1Transport(local.engine, latency_ms=LATENCY_MS)
    saver = local.saver(group_commit=False)
    await drive_threads(saver, THREADS_LOCAL, f"c50n-{uuid.uuid4().hex[:8]}")
    await saver.aclose()


@pytest.mark.anyio
async def test_20_threads_at_once_on_backend(backend: Backend) -> None:
    saver = backend.saver()
    await drive_threads(saver, THREADS_BACKEND, f"c20-{uuid.uuid4().hex[:8]}")
    await saver.aclose()


def test_threads_at_once_from_os_threads(local: Backend) -> None:
    """The sync API from 16 OS threads on one saver (group commit's threaded path)."""
    from concurrent.futures import ThreadPoolExecutor

    local.transport = LocalD1Transport(local.engine, latency_ms=LATENCY_MS)
    saver = local.saver()
    graph = fan_graph(saver)
    prefix = f"os-{uuid.uuid4().hex[:8]}"

    def run(i: int) -> dict:
        conf = {"configurable": {"thread_id": f"{prefix}-{i}"}}
        graph.invoke({"log": [f"t{i}"], "total": i}, conf)
        return graph.invoke({"log": [f"t{i}"], "total": i}, conf)

    with ThreadPoolExecutor(16) as pool:
        results = list(pool.map(run, range(32)))
    for i, result in enumerate(results):
        assert result == expected_state(i, 2)
        assert graph.get_state({"configurable": {"thread_id": f"{prefix}-{i}"}}).values == \
            expected_state(i, 2)
    saver.close()


# --- two writers on one thread --------------------------------------------------------------


class RendezvousSaver(D1Saver):
    """A D1Saver whose first `waits` aget_tuple calls meet at a barrier: both writers load the
    same head before either writes."""

    barrier: asyncio.Barrier | None = None
    waits = 0

    async def aget_tuple(self, config):  # type: ignore[no-untyped-def]
        tup = await super().aget_tuple(config)
        if self.barrier is not None and self.waits > 0:
            self.waits -= 1
            await self.barrier.wait()
        return tup


def one_step_graph(saver: BaseCheckpointSaver) -> CompiledStateGraph:
    async def step(state: graphs.LogState) -> dict:
        return {"log": [f"{state['log'][-1]}:step"]}

    return graphs.sequence(graphs.LogState, step=step).compile(checkpointer=saver)


async def two_writers(backend: Backend, guard_head: bool, shared: bool) -> dict[str, Any]:
    """Writer 0 starts a thread; then writers A and B resume it at once from the same head."""
    thread_id = f"two-{uuid.uuid4().hex}"
    conf = {"configurable": {"thread_id": thread_id}}
    a = saver_for(backend, RendezvousSaver, guard_head=guard_head)
    b = a if shared else saver_for(backend, RendezvousSaver, guard_head=guard_head)
    await one_step_graph(a).ainvoke({"log": ["init"]}, conf)
    parent = (await a.aget_tuple(conf)).config["configurable"]["checkpoint_id"]
    barrier = asyncio.Barrier(2)
    a.barrier = b.barrier = barrier
    if shared:
        a.waits = 2
    else:
        a.waits = b.waits = 1
    before = len([t async for t in a.alist(conf)])
    outcomes = await asyncio.gather(
        one_step_graph(a).ainvoke({"log": ["A"]}, conf),
        one_step_graph(b).ainvoke({"log": ["B"]}, conf),
        return_exceptions=True)
    history = [t async for t in a.alist(conf)]
    head = await a.aget_tuple(conf)
    return {"thread_id": thread_id, "parent": parent, "outcomes": outcomes, "history": history,
            "head": head, "before": before, "saver": a}


def children(history: list, parent: str) -> list:
    return [t for t in history
            if t.parent_config and t.parent_config["configurable"]["checkpoint_id"] == parent]


@pytest.mark.anyio
@pytest.mark.parametrize("shared", [False, True], ids=["two-savers", "one-saver"])
async def test_two_writers_by_default_both_succeed_and_the_thread_forks(
        backend: Backend, shared: bool) -> None:
    out = await two_writers(backend, guard_head=False, shared=shared)
    result_a, result_b = out["outcomes"]
    assert result_a == {"log": ["init", "init:step", "A", "A:step"]}
    assert result_b == {"log": ["init", "init:step", "B", "B:step"]}
    # Two children of one parent: each writer's input checkpoint (step -1).
    forks = children(out["history"], out["parent"])
    assert len(forks) == 2
    assert {json.dumps(f.checkpoint["channel_values"].get("__start__")) for f in forks} == \
        {json.dumps({"log": ["A"]}), json.dumps({"log": ["B"]})}
    assert len(out["history"]) == out["before"] + 6  # 3 checkpoints per writer
    # The head is the greatest checkpoint_id: the last checkpoint of one chain. The other
    # writer's run stays in the history but is no longer on the head's line (a lost update).
    newest = max(out["history"], key=lambda t: t.config["configurable"]["checkpoint_id"])
    assert out["head"].config["configurable"]["checkpoint_id"] == \
        newest.config["configurable"]["checkpoint_id"]
    head_log = out["head"].checkpoint["channel_values"]["log"]
    assert head_log in (result_a["log"], result_b["log"])
    await out["saver"].aclose()


@pytest.mark.anyio
@pytest.mark.parametrize("shared", [False, True], ids=["two-savers", "one-saver"])
async def test_two_writers_with_guard_head_one_is_refused_and_stores_nothing(
        backend: Backend, shared: bool) -> None:
    out = await two_writers(backend, guard_head=True, shared=shared)
    failures = [o for o in out["outcomes"] if isinstance(o, BaseException)]
    wins = [o for o in out["outcomes"] if not isinstance(o, BaseException)]
    assert len(failures) == 1 and len(wins) == 1, out["outcomes"]
    assert isinstance(failures[0], CheckpointConflictError)
    assert isinstance(failures[0], D1Error)
    assert "moved on" in str(failures[0])
    winner = wins[0]["log"][2]  # "A" or "B"
    loser = "B" if winner == "A" else "A"
    # One line: a single child of the parent, the winner's three checkpoints, nothing of the loser.
    assert len(children(out["history"], out["parent"])) == 1
    assert len(out["history"]) == out["before"] + 3
    assert out["head"].checkpoint["channel_values"]["log"] == wins[0]["log"]
    for t in out["history"]:
        blob = json.dumps(t.checkpoint["channel_values"], default=str) + \
            json.dumps([w[2] for w in t.pending_writes], default=str)
        assert f'"{loser}"' not in blob and f"{loser}:step" not in blob
    await out["saver"].aclose()


@pytest.mark.anyio
@pytest.mark.parametrize("guard_head", [False, True], ids=["default", "guard"])
async def test_two_writers_resuming_one_interrupt(local: Backend, guard_head: bool) -> None:
    """Both answer the same interrupt with Command(resume=...). Default: both runs finish, the
    head is one of them. Guard: one run raises CheckpointConflictError. Writes are not guarded:
    both resume values were written to the shared parent before either put, so the parent's
    pending writes may hold the loser's (docs/RELIABILITY.md)."""
    from collections import Counter

    from langgraph.types import Command

    local.transport = LocalD1Transport(local.engine, latency_ms=LATENCY_MS)
    a = saver_for(local, RendezvousSaver, guard_head=guard_head)
    b = saver_for(local, RendezvousSaver, guard_head=guard_head)
    conf = {"configurable": {"thread_id": f"resume-{uuid.uuid4().hex}"}}
    first = await graphs.approval_graph(a, Counter()).ainvoke({"log": ["in"]}, conf)
    assert "__interrupt__" in first
    parent = await a.aget_tuple(conf)
    a.barrier = b.barrier = asyncio.Barrier(2)
    a.waits = b.waits = 1
    outcomes = await asyncio.gather(
        graphs.approval_graph(a, Counter()).ainvoke(Command(resume="A"), conf),
        graphs.approval_graph(b, Counter()).ainvoke(Command(resume="B"), conf),
        return_exceptions=True)
    wins = [o for o in outcomes if not isinstance(o, BaseException)]
    if guard_head:
        assert len(wins) == 1
        assert sum(isinstance(o, CheckpointConflictError) for o in outcomes) == 1
    else:
        assert len(wins) == 2
    head = await a.aget_tuple(conf)
    assert head.checkpoint["channel_values"]["log"] in [w["log"] for w in wins]
    assert len(children([t async for t in a.alist(conf)],
                        parent.config["configurable"]["checkpoint_id"])) == (1 if guard_head else 2)
    resumes = {str(w[2]) for w in (await a.aget_tuple(parent.config)).pending_writes
               if w[1] == "__resume__"}
    assert resumes & {"A", "['A']", "B", "['B']"}


# --- the guard, put by put --------------------------------------------------------------------


def test_guard_refuses_a_second_child_of_the_same_parent(backend: Backend) -> None:
    saver = backend.saver(guard_head=True)
    tid = f"g-{uuid.uuid4().hex}"
    p = saver.put(cfg(tid), checkpoint(v="P"), {"step": 0}, {})
    a = saver.put(p, checkpoint(v="A"), {"step": 1}, {})
    before = rows(saver, tid)
    with pytest.raises(CheckpointConflictError) as info:
        saver.put(p, checkpoint(v="B"), {"step": 1}, {})
    assert isinstance(info.value, D1Error)
    assert repr(tid) in str(info.value)
    assert rows(saver, tid) == before  # nothing of the refused batch
    assert saver.get_tuple(cfg(tid)).config["configurable"]["checkpoint_id"] == \
        a["configurable"]["checkpoint_id"]
    # A retry of the put that won (same id, same parent: a lost response) is not a conflict.
    again = saver.put(p, checkpoint(a["configurable"]["checkpoint_id"], v="A"), {"step": 1}, {})
    assert again == a
    # Building on the head is fine.
    saver.put(a, checkpoint(v="C"), {"step": 2}, {})
    saver.close()


@pytest.mark.anyio
async def test_guard_async_refuses_and_stores_nothing_even_a_chunked_value(local: Backend) -> None:
    saver = local.saver(guard_head=True)
    tid = f"g-{uuid.uuid4().hex}"
    p = await saver.aput(cfg(tid), checkpoint(v="P"), {"step": 0}, {})
    await saver.aput(p, checkpoint(v="A"), {"step": 1}, {})
    before = rows(saver, tid)
    big = "x" * 4_500_000  # over 2 MB: the refused batch also carries chunk rows
    with pytest.raises(CheckpointConflictError):
        await saver.aput(p, checkpoint(v=big), {"step": 1}, {})
    assert rows(saver, tid) == before
    assert before["chunks"] == []
    await saver.aclose()


def test_guard_refuses_a_parentless_put_on_a_thread_that_has_checkpoints(local: Backend) -> None:
    saver = local.saver(guard_head=True)
    tid = f"g-{uuid.uuid4().hex}"
    saver.put(cfg(tid), checkpoint(v="P"), {}, {})
    with pytest.raises(CheckpointConflictError):
        saver.put(cfg(tid), checkpoint(v="Q"), {}, {})
    # Namespaces have their own heads: a subgraph's first checkpoint is not a conflict.
    saver.put(cfg(tid, ns="sub:1"), checkpoint(v="S"), {}, {})
    assert len(list(saver.list(cfg(tid)))) == 1


def test_guard_compares_with_the_greatest_id_not_the_last_put(local: Backend) -> None:
    """The head is the greatest checkpoint_id. A child with a smaller id than its sibling is
    still refused (the head is the sibling), and without the guard it does not become head."""
    plain, guarded = local.saver(), local.saver(guard_head=True)
    tid = f"g-{uuid.uuid4().hex}"
    p = plain.put(cfg(tid), checkpoint("1f000000-0000-6000-8000-000000000001"), {}, {})
    plain.put(p, checkpoint("1f000000-0000-6000-8000-000000000009"), {}, {})
    with pytest.raises(CheckpointConflictError):
        guarded.put(p, checkpoint("1f000000-0000-6000-8000-000000000005"), {}, {})
    plain.put(p, checkpoint("1f000000-0000-6000-8000-000000000005"), {}, {})
    assert plain.get_tuple(cfg(tid)).config["configurable"]["checkpoint_id"].endswith("9")
    assert len(children(list(plain.list(cfg(tid))), p["configurable"]["checkpoint_id"])) == 2


def test_guard_compares_with_the_head_of_its_own_thread(local: Backend) -> None:
    """Another thread's newer checkpoint (same namespace, a greater id) is not this thread's
    head: building on this thread's head is no conflict."""
    saver = local.saver(guard_head=True)
    mine, other = (f"g-{uuid.uuid4().hex}" for _ in range(2))
    p = saver.put(cfg(mine), checkpoint("1f000000-0000-6000-8000-000000000001"), {}, {})
    saver.put(cfg(other), checkpoint("1f000000-0000-6000-8000-000000000009"), {}, {})
    child = saver.put(p, checkpoint("1f000000-0000-6000-8000-000000000002"), {}, {})
    assert saver.get_tuple(cfg(mine)).config == child


def test_without_guard_two_children_of_one_parent_are_both_stored(backend: Backend) -> None:
    saver = backend.saver()
    tid = f"g-{uuid.uuid4().hex}"
    p = saver.put(cfg(tid), checkpoint(v="P"), {}, {})
    a = saver.put(p, checkpoint(v="A"), {}, {})
    b = saver.put(p, checkpoint(v="B"), {}, {})
    history = list(saver.list(cfg(tid)))
    assert len(children(history, p["configurable"]["checkpoint_id"])) == 2
    head = saver.get_tuple(cfg(tid)).config["configurable"]["checkpoint_id"]
    assert head == max(a["configurable"]["checkpoint_id"], b["configurable"]["checkpoint_id"])
    saver.close()


# --- LangGraph's default durability ("async") and barrier channels ---------------------------


async def history_and_fork(saver: BaseCheckpointSaver, durability: str) -> tuple[list, dict]:
    """Two runs of fan_graph, the history's (step, next), and a fork from the second run's
    checkpoint taken after node `a` (step 6): what a resume from that checkpoint computes."""
    graph = fan_graph(saver)
    conf = {"configurable": {"thread_id": f"dur-{uuid.uuid4().hex}"}}
    for _ in (1, 2):
        await graph.ainvoke({"log": ["t0"], "total": 0}, conf, durability=durability)
    history = [s async for s in graph.aget_state_history(conf)]
    after_a = next(s for s in history if s.metadata["step"] == 6)
    fork = await graph.ainvoke(None, after_a.config, durability=durability)
    return [(s.metadata["step"], s.next) for s in history], fork


@pytest.mark.anyio
async def test_sync_durability_history_and_resume_match_in_memory_saver(local: Backend) -> None:
    local.transport = LocalD1Transport(local.engine, latency_ms=LATENCY_MS)
    got = await history_and_fork(local.saver(), "sync")
    assert got == await history_and_fork(InMemorySaver(), "sync")
    assert got[1] == expected_state(0, 2)


@pytest.mark.anyio
async def test_async_durability_history_matches_in_memory_saver(local: Backend) -> None:
    """LangGraph's default durability: the barrier of the join is stored as it was when the
    checkpoint was made (langgraph#8748, defended in d1saver/upstream.py)."""
    local.transport = LocalD1Transport(local.engine, latency_ms=LATENCY_MS)
    got = await history_and_fork(local.saver(), "async")
    assert got == await history_and_fork(InMemorySaver(), "async")
    assert got[1] == expected_state(0, 2)


@pytest.mark.anyio
async def test_async_durability_without_the_defence_loses_the_join(local: Backend) -> None:
    """The defect the defence covers, seen with it switched off: the checkpoint after `a`
    shows the join as due, and a fork from it never runs the join. (15 ms per request: the
    next step then surely runs while a put waits, even on a loaded machine.)"""
    local.transport = LocalD1Transport(local.engine, latency_ms=15)
    with upstream.disabled():
        history, fork = await history_and_fork(local.saver(), "async")
    assert (6, ("b1", "b2", "c")) in history
    assert fork != expected_state(0, 2)
