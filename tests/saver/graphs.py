"""Small LangGraph graphs shared by the graph-level saver tests; each counts its node runs.

The agent loop (parallel tool calls, DeltaChannel messages) is the benchmark's agent,
benchmarks/workload.py, not a copy here.
"""

from __future__ import annotations

import operator
import time
from collections import Counter
from typing import Annotated

from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.types import interrupt
from typing_extensions import TypedDict


class LogState(TypedDict):
    log: Annotated[list[str], operator.add]


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

    g = StateGraph(LogState)
    g.add_node("prepare", prepare)
    g.add_node("approve", approve)
    g.add_node("finish", finish)
    g.add_edge(START, "prepare")
    g.add_edge("prepare", "approve")
    g.add_edge("approve", "finish")
    g.add_edge("finish", END)
    return g.compile(checkpointer=saver)


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

    sub = StateGraph(ReviewState)
    sub.add_node("draft", draft)
    sub.add_node("review", review)
    sub.add_edge(START, "draft")
    sub.add_edge("draft", "review")
    sub.add_edge("review", END)

    def before(state: ParentState) -> dict:
        runs["before"] += 1
        return {"log": ["before"]}

    def after(state: ParentState) -> dict:
        runs["after"] += 1
        return {"log": [f"after:{state['draft']}:{state['verdict']}"]}

    g = StateGraph(ParentState)
    g.add_node("before", before)
    g.add_node("sub", sub.compile())
    g.add_node("after", after)
    g.add_edge(START, "before")
    g.add_edge("before", "sub")
    g.add_edge("sub", "after")
    g.add_edge("after", END)
    return g.compile(checkpointer=saver)


def step_graph(saver: BaseCheckpointSaver | None, runs: Counter) -> CompiledStateGraph:
    """One node that appends "step<n>" for each input it sees."""

    def step(state: LogState) -> dict:
        runs["step"] += 1
        return {"log": [f"step{runs['step']}"]}

    g = StateGraph(LogState)
    g.add_node("step", step)
    g.add_edge(START, "step")
    g.add_edge("step", END)
    return g.compile(checkpointer=saver)


# --- a crash in one of three parallel nodes -------------------------------------------------


class Crash(RuntimeError):
    pass


def fan_out_graph(saver: BaseCheckpointSaver | None, runs: Counter,
                  crash: dict[str, bool]) -> CompiledStateGraph:
    """start -> (a, b, c in parallel) -> join; c raises, once a and b ended, while crash["c"]."""

    def start(state: LogState) -> dict:
        runs["start"] += 1
        return {"log": ["start"]}

    def worker(name: str):
        def run(state: LogState) -> dict:
            runs[name] += 1
            return {"log": [name]}
        return run

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

    def join(state: LogState) -> dict:
        runs["join"] += 1
        return {"log": ["join"]}

    g = StateGraph(LogState)
    g.add_node("start", start)
    g.add_node("a", worker("a"))
    g.add_node("b", worker("b"))
    g.add_node("c", c)
    g.add_node("join", join)
    g.add_edge(START, "start")
    for n in ("a", "b", "c"):
        g.add_edge("start", n)
    g.add_edge(["a", "b", "c"], "join")
    g.add_edge("join", END)
    return g.compile(checkpointer=saver)
