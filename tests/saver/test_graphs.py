"""Real LangGraph graphs on D1Saver, sync and async, compared with InMemorySaver on the same graph.

Each scenario is a function of a checkpointer that returns what a user can observe (values, next,
interrupts, history shape, node-run counts), with checkpoint ids replaced by positions, so the
D1Saver run and the InMemorySaver run can be compared whole.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.serde.types import _DeltaSnapshot
from langgraph.graph.state import CompiledStateGraph
from langgraph.types import Command, StateSnapshot

from benchmarks.workload import NodeRun, build_graph, first_input, message_count, node_runs
from tests.conftest import Backend
from tests.saver import graphs


def thread() -> dict[str, Any]:
    # Unique per call: the real-engine tests all share one database (tests/realengine.py).
    return {"configurable": {"thread_id": f"t-{uuid.uuid4().hex}"}}


def cid(config: dict | None) -> str | None:
    return None if config is None else config["configurable"]["checkpoint_id"]


def shape(history: list[StateSnapshot]) -> list[tuple]:
    """A history without ids: values, next, step, source, interrupts, and the parent's position."""
    pos = {cid(s.config): i for i, s in enumerate(history)}
    return [(s.values, s.next, s.metadata["step"], s.metadata["source"],
             [tuple(i.value for i in t.interrupts) for t in s.tasks],
             pos.get(cid(s.parent_config), "outside" if s.parent_config else None))
            for s in history]


async def alist_history(graph, config, **kw) -> list[StateSnapshot]:
    return [s async for s in graph.aget_state_history(config, **kw)]


# --- 1. interrupt() then Command(resume=...) ----------------------------------------------


def interrupt_values(result: dict) -> dict:
    """An invoke result with each Interrupt replaced by its value (ids differ between runs)."""
    return {k: [i.value for i in v] if k == "__interrupt__" else v for k, v in result.items()}


def run_interrupt(saver: BaseCheckpointSaver) -> dict:
    runs: Counter = Counter()
    graph, config = graphs.approval_graph(saver, runs), thread()
    first = interrupt_values(graph.invoke({"log": ["in"]}, config))
    paused = graph.get_state(config)
    final = graph.invoke(Command(resume="yes"), config)
    return {"first": first, "next": paused.next,
            "interrupts": [i.value for i in paused.tasks[0].interrupts],
            "paused_values": paused.values, "final": final,
            "head": graph.get_state(config).values, "next_after": graph.get_state(config).next,
            "runs": dict(runs), "history": shape(list(graph.get_state_history(config)))}


async def arun_interrupt(saver: BaseCheckpointSaver) -> dict:
    runs: Counter = Counter()
    graph, config = graphs.approval_graph(saver, runs), thread()
    first = interrupt_values(await graph.ainvoke({"log": ["in"]}, config))
    paused = await graph.aget_state(config)
    final = await graph.ainvoke(Command(resume="yes"), config)
    head = await graph.aget_state(config)
    return {"first": first, "next": paused.next,
            "interrupts": [i.value for i in paused.tasks[0].interrupts],
            "paused_values": paused.values, "final": final,
            "head": head.values, "next_after": head.next,
            "runs": dict(runs), "history": shape(await alist_history(graph, config))}


def check_interrupt(got: dict, want: dict) -> None:
    assert got["next"] == ("approve",)
    assert got["interrupts"] == ["approve?"]
    assert got["paused_values"] == {"log": ["in", "prepared"]}
    assert got["first"] == {"log": ["in", "prepared"], "__interrupt__": ["approve?"]}
    assert got["final"] == {"log": ["in", "prepared", "approved:yes", "finished"]}
    assert got["head"] == got["final"] and got["next_after"] == ()
    # prepare ran once: the resume started from the checkpoint, not from the top.
    assert got["runs"] == {"prepare": 1, "approve": 2, "finish": 1}
    assert got == want


def test_interrupt_resume(backend: Backend) -> None:
    """interrupt() pauses with its payload; Command(resume) finishes without re-running prepare."""
    check_interrupt(run_interrupt(backend.saver()), run_interrupt(InMemorySaver()))


@pytest.mark.anyio
async def test_interrupt_resume_async(backend: Backend) -> None:
    """Async: interrupt() pauses with its payload; Command(resume) finishes, prepare runs once."""
    check_interrupt(await arun_interrupt(backend.saver()), await arun_interrupt(InMemorySaver()))


# --- 2. a subgraph that interrupts, in its own checkpoint namespace -------------------------


def sub_view(state: StateSnapshot, sub_listing: list, root_listing: list) -> dict:
    task = state.tasks[0]
    sub = task.state
    assert isinstance(sub, StateSnapshot)
    ns = sub.config["configurable"]["checkpoint_ns"]
    return {"next": state.next, "task": task.name,
            "parent_interrupts": [i.value for i in task.interrupts],
            "sub_values": sub.values, "sub_next": sub.next,
            "sub_interrupts": [i.value for t in sub.tasks for i in t.interrupts],
            "ns_prefix": ns.split(":")[0],
            "sub_listing": [(t.config["configurable"]["checkpoint_ns"] == ns,
                             t.metadata["step"], t.metadata["source"]) for t in sub_listing],
            "root_listing_ns": {t.config["configurable"]["checkpoint_ns"] for t in root_listing}}


def run_subgraph(saver: BaseCheckpointSaver) -> dict:
    runs: Counter = Counter()
    graph, config = graphs.parent_with_subgraph(saver, runs), thread()
    graph.invoke({"log": []}, config)
    state = graph.get_state(config, subgraphs=True)
    ns = state.tasks[0].state.config["configurable"]["checkpoint_ns"]
    tid = config["configurable"]["thread_id"]
    sub_listing = list(saver.list({"configurable": {"thread_id": tid, "checkpoint_ns": ns}}))
    root_listing = list(saver.list({"configurable": {"thread_id": tid, "checkpoint_ns": ""}}))
    out = sub_view(state, sub_listing, root_listing)
    out["final"] = graph.invoke(Command(resume="ok"), config)
    out["after"] = graph.get_state(config, subgraphs=True).next
    out["runs"] = dict(runs)
    return out


async def arun_subgraph(saver: BaseCheckpointSaver) -> dict:
    runs: Counter = Counter()
    graph, config = graphs.parent_with_subgraph(saver, runs), thread()
    await graph.ainvoke({"log": []}, config)
    state = await graph.aget_state(config, subgraphs=True)
    ns = state.tasks[0].state.config["configurable"]["checkpoint_ns"]
    tid = config["configurable"]["thread_id"]
    sub_listing = [t async for t in saver.alist(
        {"configurable": {"thread_id": tid, "checkpoint_ns": ns}})]
    root_listing = [t async for t in saver.alist(
        {"configurable": {"thread_id": tid, "checkpoint_ns": ""}})]
    out = sub_view(state, sub_listing, root_listing)
    out["final"] = await graph.ainvoke(Command(resume="ok"), config)
    out["after"] = (await graph.aget_state(config, subgraphs=True)).next
    out["runs"] = dict(runs)
    return out


def check_subgraph(got: dict, want: dict) -> None:
    assert got["next"] == ("sub",) and got["task"] == "sub"
    assert got["parent_interrupts"] == ["review v1?"]
    assert got["sub_values"] == {"draft": "v1"}
    assert got["sub_next"] == ("review",)
    assert got["sub_interrupts"] == ["review v1?"]
    assert got["ns_prefix"] == "sub"
    assert got["sub_listing"] and all(same_ns for same_ns, *_ in got["sub_listing"])
    assert got["root_listing_ns"] == {""}
    assert got["final"] == {"log": ["before", "after:v1:ok"], "draft": "v1", "verdict": "ok"}
    assert got["after"] == ()
    assert got["runs"] == {"before": 1, "draft": 1, "review": 2, "after": 1}
    assert got == want


def test_subgraph_interrupt(backend: Backend) -> None:
    """An interrupting subgraph: get_state(subgraphs=True), list of its namespace, resume."""
    check_subgraph(run_subgraph(backend.saver()), run_subgraph(InMemorySaver()))


@pytest.mark.anyio
async def test_subgraph_interrupt_async(backend: Backend) -> None:
    """Async: an interrupting subgraph: aget_state(subgraphs=True), alist of its ns, resume."""
    check_subgraph(await arun_subgraph(backend.saver()), await arun_subgraph(InMemorySaver()))


# --- 3. history, time travel, fork -----------------------------------------------------------


def pick_past(history: list[StateSnapshot]) -> StateSnapshot:
    """The checkpoint just before the second invoke's node ran."""
    return [s for s in history if s.next == ("step",)][1]  # newest first: [3rd, 2nd, 1st]


def replay_chain(saver: BaseCheckpointSaver, head: StateSnapshot, past: StateSnapshot) -> list:
    """Sources from the replayed head back to `past`: the head, then the fork replay made of it."""
    parent = saver.get_tuple(head.parent_config)
    return [head.metadata["source"], parent.metadata["source"],
            cid(parent.parent_config) == cid(past.config)]


async def areplay_chain(saver: BaseCheckpointSaver, head: StateSnapshot,
                        past: StateSnapshot) -> list:
    parent = await saver.aget_tuple(head.parent_config)
    return [head.metadata["source"], parent.metadata["source"],
            cid(parent.parent_config) == cid(past.config)]


def run_time_travel(saver: BaseCheckpointSaver) -> dict:
    runs: Counter = Counter()
    graph, config = graphs.step_graph(saver, runs), thread()
    for i in (1, 2, 3):
        graph.invoke({"log": [f"in{i}"]}, config)
    history = list(graph.get_state_history(config))
    past = pick_past(history)
    replayed = graph.invoke(None, past.config)
    replay_head = graph.get_state(config)
    fork_config = graph.update_state(past.config, {"log": ["edited"]})
    fork = graph.get_state(fork_config)
    head = graph.get_state(config)
    continued = graph.invoke(None, config)
    return {"history": shape(history), "past": (past.values, past.next),
            "replayed": replayed,
            "replay_chain": replay_chain(saver, replay_head, past),
            "fork_parent_is_past": cid(fork.parent_config) == cid(past.config),
            "head_is_fork": cid(head.config) == cid(fork_config),
            "fork": (fork.values, fork.next, fork.metadata["source"]),
            "continued": continued, "runs": dict(runs),
            "final_history": shape(list(graph.get_state_history(config)))}


async def arun_time_travel(saver: BaseCheckpointSaver) -> dict:
    runs: Counter = Counter()
    graph, config = graphs.step_graph(saver, runs), thread()
    for i in (1, 2, 3):
        await graph.ainvoke({"log": [f"in{i}"]}, config)
    history = await alist_history(graph, config)
    past = pick_past(history)
    replayed = await graph.ainvoke(None, past.config)
    replay_head = await graph.aget_state(config)
    fork_config = await graph.aupdate_state(past.config, {"log": ["edited"]})
    fork = await graph.aget_state(fork_config)
    head = await graph.aget_state(config)
    continued = await graph.ainvoke(None, config)
    return {"history": shape(history), "past": (past.values, past.next),
            "replayed": replayed,
            "replay_chain": await areplay_chain(saver, replay_head, past),
            "fork_parent_is_past": cid(fork.parent_config) == cid(past.config),
            "head_is_fork": cid(head.config) == cid(fork_config),
            "fork": (fork.values, fork.next, fork.metadata["source"]),
            "continued": continued, "runs": dict(runs),
            "final_history": shape(await alist_history(graph, config))}


def check_time_travel(got: dict, want: dict) -> None:
    # 3 invokes x (input, start, step) checkpoints, newest first, each the parent of the one before.
    assert len(got["history"]) == 9
    assert [h[2] for h in got["history"]] == [7, 6, 5, 4, 3, 2, 1, 0, -1]
    assert [h[5] for h in got["history"]] == [1, 2, 3, 4, 5, 6, 7, 8, None]
    assert got["history"][0][0] == {"log": ["in1", "step1", "in2", "step2", "in3", "step3"]}
    assert got["past"] == ({"log": ["in1", "step1", "in2"]}, ("step",))
    assert got["replayed"] == {"log": ["in1", "step1", "in2", "step4"]}
    # Replaying checkpoints a "fork" copy of the past one, then runs on from it.
    assert got["replay_chain"] == ["loop", "fork", True]
    assert got["fork_parent_is_past"] and got["head_is_fork"]
    assert got["fork"] == ({"log": ["in1", "step1", "in2", "edited"]}, ("step",), "update")
    assert got["continued"] == {"log": ["in1", "step1", "in2", "edited", "step5"]}
    assert got["runs"] == {"step": 5}
    assert got == want


def test_history_time_travel_fork(backend: Backend) -> None:
    """History as on InMemorySaver; replay from a past checkpoint; update_state forks the head."""
    check_time_travel(run_time_travel(backend.saver()), run_time_travel(InMemorySaver()))


@pytest.mark.anyio
async def test_history_time_travel_fork_async(backend: Backend) -> None:
    """Async: history as on InMemorySaver; replay from a past checkpoint; aupdate_state forks."""
    check_time_travel(await arun_time_travel(backend.saver()),
                      await arun_time_travel(InMemorySaver()))


# --- 4. a DeltaChannel messages channel with parallel writes ---------------------------------

TURNS, FANOUT = 4, 3
EDITED = HumanMessage(content="edited", id="edited")  # a fork adds it as a tool's result


def agent_graph(saver: BaseCheckpointSaver | None, runs: Counter) -> CompiledStateGraph:
    """The benchmark's agent, DeltaChannel messages with a snapshot every 3 updates (so some
    checkpoints hold one and some do not); `runs` counts each node run, an agent's with the
    number of messages it saw."""

    @contextmanager
    def count(run: NodeRun) -> Iterator[None]:
        saw = f" saw {len(run.input['messages'])}" if run.node == "agent" else ""
        runs[run.logical + saw] += 1
        yield

    return build_graph(saver, variant="delta", turns=TURNS, fanout=FANOUT, snapshot_frequency=3,
                       hook=count)


def expected_runs() -> dict[str, int]:
    """Each node run once; the agent of turn t saw the user's message and every earlier one."""
    out, seen = {}, 1
    for logical in node_runs(TURNS, FANOUT):
        out[f"{logical} saw {seen}" if logical.startswith("agent-") else logical] = 1
        seen += 1  # every node run adds one message
    return out


def expected_ids() -> list[str]:
    """Message ids of the finished conversation: the user's, then each node run's, in order
    (a tool run's logical id is its message's id)."""
    return ["human-1"] + [f"ai-{r.removeprefix('agent-')}" if r.startswith("agent-") else r
                          for r in node_runs(TURNS, FANOUT)]


def check_final(values: dict) -> None:
    assert list(values) == ["messages"]
    assert [m.id for m in values["messages"]] == expected_ids()
    assert len(values["messages"]) == message_count(TURNS, FANOUT)


def check_delta(got: dict, want: dict) -> None:
    check_final(got["final"])
    assert got["head"] == got["final"]
    assert got["runs"] == expected_runs()
    assert got["mid"] == got["mid_in_history"]
    # Checkpoints both with and without a stored snapshot were reconstructed.
    assert True in got["snapshots"] and False in got["snapshots"]
    # A fork of that middle checkpoint starts from its rebuilt value, and the run continues from it.
    assert got["fork"][0]["messages"] == got["mid"]["messages"] + [EDITED]
    assert got["fork"][1] == ("agent",)
    forked, continued = got["fork"][0]["messages"], got["continued"]["messages"]
    assert continued[:len(forked)] == forked
    assert len(continued) > len(forked) and continued[-1].id == f"ai-{TURNS}"  # ran to the end
    assert got == want


def delta_view(tuples: list) -> tuple[int, int, list[bool]]:
    """Which checkpoints stored a messages snapshot; the middle one without, and one with."""
    snaps = [isinstance(t.checkpoint["channel_values"].get("messages"), _DeltaSnapshot)
             for t in tuples]
    replayed = [i for i, t in enumerate(tuples)
                if "messages" in t.checkpoint["channel_versions"] and not snaps[i]]
    return replayed[len(replayed) // 2], snaps.index(True), snaps


def no_count(fn):
    return fn(), 0


def run_delta(saver: BaseCheckpointSaver, count=no_count) -> dict:
    runs: Counter = Counter()
    graph, config = agent_graph(saver, runs), thread()
    final = graph.invoke(first_input(), config)
    ran = dict(runs)
    history, history_requests = count(lambda: list(graph.get_state_history(config)))
    mid_i, snap_i, snaps = delta_view(list(saver.list(config)))
    head, head_requests = count(lambda: graph.get_state(config))
    mid, mid_requests = count(lambda: graph.get_state(history[mid_i].config))
    _, snap_requests = count(lambda: graph.get_state(history[snap_i].config))
    fork = graph.get_state(graph.update_state(history[mid_i].config, {"messages": [EDITED]},
                                              as_node="tool"))
    continued = graph.invoke(None, config)
    return {"final": final, "head": head.values, "runs": ran, "history": shape(history),
            "mid": mid.values, "mid_in_history": history[mid_i].values, "snapshots": snaps,
            "fork": (fork.values, fork.next), "continued": continued,
            "requests": (head_requests, mid_requests, snap_requests, history_requests)}


async def arun_delta(saver: BaseCheckpointSaver, backend: Backend | None = None) -> dict:
    async def count(coro):
        before = backend.requests if backend else 0
        out = await coro
        return out, (backend.requests - before) if backend else 0

    runs: Counter = Counter()
    graph, config = agent_graph(saver, runs), thread()
    final = await graph.ainvoke(first_input(), config)
    ran = dict(runs)
    history, history_requests = await count(alist_history(graph, config))
    mid_i, snap_i, snaps = delta_view([t async for t in saver.alist(config)])
    head, head_requests = await count(graph.aget_state(config))
    mid, mid_requests = await count(graph.aget_state(history[mid_i].config))
    _, snap_requests = await count(graph.aget_state(history[snap_i].config))
    fork = await graph.aget_state(
        await graph.aupdate_state(history[mid_i].config, {"messages": [EDITED]}, as_node="tool"))
    continued = await graph.ainvoke(None, config)
    return {"final": final, "head": head.values, "runs": ran, "history": shape(history),
            "mid": mid.values, "mid_in_history": history[mid_i].values, "snapshots": snaps,
            "fork": (fork.values, fork.next), "continued": continued,
            "requests": (head_requests, mid_requests, snap_requests, history_requests)}


def check_delta_requests(got: dict) -> None:
    # get_state of the head, of a middle checkpoint (neither holding a snapshot) and of one
    # holding a snapshot: one request each, the delta history riding with get_tuple; and the
    # whole history in one request (one page: every checkpoint's delta history rides with it).
    assert got.pop("requests") == (1, 1, 1, 1)


def test_delta_channel_agent_loop(backend: Backend) -> None:
    """DeltaChannel messages with 3 parallel tool writes per step rebuild as on InMemorySaver."""
    got = run_delta(backend.saver(), backend.count)
    want = run_delta(InMemorySaver())
    check_delta_requests(got)
    want.pop("requests")
    check_delta(got, want)


@pytest.mark.anyio
async def test_delta_channel_agent_loop_async(backend: Backend) -> None:
    """Async: DeltaChannel messages with parallel tool writes rebuild as on InMemorySaver."""
    got = await arun_delta(backend.saver(), backend)
    want = await arun_delta(InMemorySaver())
    check_delta_requests(got)
    want.pop("requests")
    check_delta(got, want)


# --- 5. a crash mid-super-step, resumed by a new saver and a new graph -----------------------


def saved_writes(tup) -> list:
    """The crashed checkpoint's pending writes to `log`, and the error write, as stored."""
    return sorted((ch, v)
                  for _, ch, v in tup.pending_writes if ch in ("log", "__error__"))


def run_crash(make_saver) -> dict:
    runs: Counter = Counter()
    crash = {"c": True}
    config = thread()
    graph = graphs.fan_out_graph(make_saver(), runs, crash)
    with pytest.raises(graphs.Crash):
        graph.invoke({"log": []}, config)
    crashed = graph.get_state(config)
    pending = saved_writes(graph.checkpointer.get_tuple(config))
    # A new process, in effect: a new saver on the same database and a freshly compiled graph.
    graph = graphs.fan_out_graph(make_saver(), runs, crash)
    final = graph.invoke(None, config)
    return {"crashed_next": crashed.next, "crashed_values": crashed.values,
            "crashed_errors": sorted(t.name for t in crashed.tasks if t.error),
            "pending": pending, "final": final, "runs": dict(runs)}


async def arun_crash(make_saver) -> dict:
    runs: Counter = Counter()
    crash = {"c": True}
    config = thread()
    graph = graphs.fan_out_graph(make_saver(), runs, crash)
    with pytest.raises(graphs.Crash):
        await graph.ainvoke({"log": []}, config)
    crashed = await graph.aget_state(config)
    pending = saved_writes(await graph.checkpointer.aget_tuple(config))
    graph = graphs.fan_out_graph(make_saver(), runs, crash)
    final = await graph.ainvoke(None, config)
    return {"crashed_next": crashed.next, "crashed_values": crashed.values,
            "crashed_errors": sorted(t.name for t in crashed.tasks if t.error),
            "pending": pending, "final": final, "runs": dict(runs)}


def check_crash(got: dict, want: dict) -> None:
    # get_state applies the saved pending writes of a and b: only c is left to run.
    assert got["crashed_next"] == ("c",)
    assert got["crashed_values"] == {"log": ["start", "a", "b"]}
    assert got["crashed_errors"] == ["c"]
    assert got["pending"] == [("__error__", "Crash('c failed')"), ("log", ["a"]), ("log", ["b"])]
    assert got["final"] == {"log": ["start", "a", "b", "c", "join"]}
    # a and b ran once: their writes were kept as pending writes; only c ran again.
    assert got["runs"] == {"start": 1, "a": 1, "b": 1, "c": 2, "join": 1}
    assert got == want


def test_crash_then_resume_with_new_saver(backend: Backend) -> None:
    """A node crashes after its siblings succeeded; a new saver and graph re-run only it."""
    memory = InMemorySaver()
    check_crash(run_crash(backend.saver), run_crash(lambda: memory))


@pytest.mark.anyio
async def test_crash_then_resume_with_new_saver_async(backend: Backend) -> None:
    """Async: a node crashes after its siblings succeeded; a new saver and graph re-run only it."""
    memory = InMemorySaver()
    check_crash(await arun_crash(backend.saver), await arun_crash(lambda: memory))


# --- 6. durability modes ---------------------------------------------------------------------

DURABILITIES = ("sync", "async", "exit")


def run_durability(make_saver) -> dict:
    out = {}
    for durability in DURABILITIES:
        runs: Counter = Counter()
        config = thread()
        graphs.fan_out_graph(make_saver(), runs, {}).invoke(
            {"log": ["in"]}, config, durability=durability)
        graph = graphs.fan_out_graph(make_saver(), Counter(), {})  # read back with a new saver
        state = graph.get_state(config)
        out[durability] = {"values": state.values, "next": state.next,
                           "history": shape(list(graph.get_state_history(config)))}
        config = thread()  # the same with a DeltaChannel, whose writes "exit" saves at the end
        agent_graph(make_saver(), Counter()).invoke(first_input(), config, durability=durability)
        graph = agent_graph(make_saver(), Counter())
        out[durability]["delta"] = (graph.get_state(config).values,
                                    shape(list(graph.get_state_history(config))))
    return out


async def arun_durability(make_saver) -> dict:
    out = {}
    for durability in DURABILITIES:
        runs: Counter = Counter()
        config = thread()
        await graphs.fan_out_graph(make_saver(), runs, {}).ainvoke(
            {"log": ["in"]}, config, durability=durability)
        graph = graphs.fan_out_graph(make_saver(), Counter(), {})
        state = await graph.aget_state(config)
        out[durability] = {"values": state.values, "next": state.next,
                           "history": shape(await alist_history(graph, config))}
        config = thread()
        await agent_graph(make_saver(), Counter()).ainvoke(first_input(), config,
                                                           durability=durability)
        graph = agent_graph(make_saver(), Counter())
        out[durability]["delta"] = ((await graph.aget_state(config)).values,
                                    shape(await alist_history(graph, config)))
    return out


def check_durability(got: dict, want: dict) -> None:
    final = {"log": ["in", "start", "a", "b", "c", "join"]}
    for durability in DURABILITIES:
        assert got[durability]["values"] == final, durability
        assert got[durability]["next"] == (), durability
        assert got[durability]["history"][0][0] == final, durability
        check_final(got[durability]["delta"][0])
    assert len(got["exit"]["history"]) < len(got["sync"]["history"])
    assert got["sync"]["history"] == got["async"]["history"]
    assert len(got["exit"]["delta"][1]) < len(got["sync"]["delta"][1])
    assert got == want


def test_durability_modes(backend: Backend) -> None:
    """durability sync/async/exit persist one final state (DeltaChannel too), as InMemorySaver."""
    memory = InMemorySaver()
    check_durability(run_durability(backend.saver), run_durability(lambda: memory))


@pytest.mark.anyio
async def test_durability_modes_async(backend: Backend) -> None:
    """Async: durability sync/async/exit persist one final state (DeltaChannel too)."""
    memory = InMemorySaver()
    check_durability(await arun_durability(backend.saver), await arun_durability(lambda: memory))
