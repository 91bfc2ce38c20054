"""Small LangGraph graphs shared by the graph-level saver tests; each counts its node runs.

The agent loop (parallel tool calls, DeltaChannel messages) is the benchmark's agent,
benchmarks/workload.py, not a copy here.
"""

from __future__ import annotations

import operator
import time
from collections import Counter
from collections.abc import Callable
from typing import Annotated, Any

from langgraph.channels.delta import DeltaChannel
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.types import interrupt
from typing_extensions import TypedDict

from benchmarks.workload import append_batches


class LogState(TypedDict):
    log: Annotated[list[str], operator.add]


def log_node(name: str, runs: Counter | None = None) -> Callable[[LogState], dict]:
    """A node that appends its name to `log` (and counts its runs in `runs`)."""

    def run(state: LogState) -> dict:
        if runs is not None:
            runs[name] += 1
        return {"log": [name]}

    return run


def sequence(state: type, **nodes: Any) -> StateGraph:
    """A graph (not compiled) running `nodes` in order: START -> each in turn -> END."""
    names = list(nodes)
    g = StateGraph(state).add_sequence(list(nodes.items()))
    g.add_edge(START, names[0])
    g.add_edge(names[-1], END)
    return g


def approval_graph(saver: BaseCheckpointSaver | None, runs: Counter) -> CompiledStateGraph:
    """prepare -> approve (interrupts "approve?") -> finish."""

    def prepare(state: LogState) -> dict:
        runs["prepare"] += 1
        return {"log": ["prepared"]}

    def approve(state: LogState) -> dict:
        runs["approve"] += 1
        answer = interrupt("approve?")
        return {"log": [f"approved:{answer}"]}

    def finish(state: LogState) -> dict:
        runs["finish"] += 1
        return {"log": ["finished"]}

    return sequence(LogState, prepare=prepare, approve=approve, finish=finish).compile(
        checkpointer=saver)


class ReviewState(TypedDict, total=False):
    draft: str
    verdict: str


class ParentState(LogState, ReviewState):
    pass


def parent_with_subgraph(saver: BaseCheckpointSaver | None, runs: Counter) -> CompiledStateGraph:
    """before -> sub[draft -> review (interrupts)] -> after; sub checkpoints in its own ns."""

    def draft(state: ReviewState) -> dict:
        runs["draft"] += 1
        return {"draft": "v1"}

    def review(state: ReviewState) -> dict:
        runs["review"] += 1
        return {"verdict": interrupt(f"review {state['draft']}?")}

    def after(state: ParentState) -> dict:
        runs["after"] += 1
        return {"log": [f"after:{state['draft']}:{state['verdict']}"]}

    sub = sequence(ReviewState, draft=draft, review=review)
    return sequence(ParentState, before=log_node("before", runs), sub=sub.compile(),
                    after=after).compile(checkpointer=saver)


def step_graph(saver: BaseCheckpointSaver | None, runs: Counter) -> CompiledStateGraph:
    """One node that appends "step<n>" for each input it sees."""

    def step(state: LogState) -> dict:
        runs["step"] += 1
        return {"log": [f"step{runs['step']}"]}

    return sequence(LogState, step=step).compile(checkpointer=saver)


class NotesState(TypedDict, total=False):
    messages: Annotated[list, DeltaChannel(append_batches, snapshot_frequency=3)]
    notes: Annotated[list, DeltaChannel(append_batches, snapshot_frequency=3)]


def chat_graph(saver: BaseCheckpointSaver | None, runs: Counter) -> CompiledStateGraph:
    """One node answering each input message; `notes`, a second DeltaChannel, is declared but
    never written. Each invoke adds 3 checkpoints."""

    def reply(state: NotesState) -> dict:
        runs["reply"] += 1
        return {"messages": [f"ai{runs['reply']}(saw {len(state['messages'])})"]}

    return sequence(NotesState, reply=reply).compile(checkpointer=saver)


# --- a crash in one of three parallel nodes -------------------------------------------------


class Crash(RuntimeError):
    pass


def fan_out_graph(saver: BaseCheckpointSaver | None, runs: Counter,
                  crash: dict[str, bool]) -> CompiledStateGraph:
    """start -> (a, b, c in parallel) -> join; c raises, once a and b ended, while crash["c"]."""

    def c(state: LogState) -> dict:
        runs["c"] += 1
        if crash.get("c"):
            deadline = time.monotonic() + 5
            while (runs["a"] < 1 or runs["b"] < 1) and time.monotonic() < deadline:
                time.sleep(0.01)
            time.sleep(0.2)  # let the runner record a's and b's writes first
            crash["c"] = False
            raise Crash("c failed")
        return {"log": ["c"]}

    g = StateGraph(LogState)
    for name in ("start", "a", "b"):
        g.add_node(name, log_node(name, runs))
    g.add_node("c", c)
    g.add_node("join", log_node("join", runs))
    g.add_edge(START, "start")
    for n in ("a", "b", "c"):
        g.add_edge("start", n)
    g.add_edge(["a", "b", "c"], "join")
    g.add_edge("join", END)
    return g.compile(checkpointer=saver)
