"""Small LangGraph graphs shared by the graph-level saver tests; each counts its node runs."""

from __future__ import annotations

import operator
import time
from collections import Counter
from collections.abc import Sequence
from typing import Annotated, Any

from langgraph.channels.delta import DeltaChannel
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.types import Send, interrupt
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

    return one_node_graph(saver, LogState, "step", step)


def one_node_graph(saver: BaseCheckpointSaver | None, state: type, name: str,
                   run: Any) -> CompiledStateGraph:
    """START -> name -> END."""
    g = StateGraph(state)
    g.add_node(name, run)
    g.add_edge(START, name)
    g.add_edge(name, END)
    return g.compile(checkpointer=saver)


# --- DeltaChannel -------------------------------------------------------------------------


def add_messages_batch(state: list, writes: Sequence[Any]) -> list:
    """A batching-invariant reducer: each write (a message or a list of them) is appended."""
    out = list(state)
    for w in writes:
        out.extend(w if isinstance(w, list) else [w])
    return out


class AgentState(TypedDict):
    messages: Annotated[list, DeltaChannel(add_messages_batch, snapshot_frequency=3)]
    turn: int


TOOLS = ("search", "math", "clock")


def agent_loop_graph(saver: BaseCheckpointSaver | None, runs: Counter,
                     turns: int = 4) -> CompiledStateGraph:
    """agent -> Send to 3 tools in parallel -> agent, for `turns` turns, then END."""

    def agent(state: AgentState) -> dict:
        runs["agent"] += 1
        turn = state.get("turn", 0) + 1
        seen = len(state["messages"])
        return {"messages": [f"ai{turn}(saw {seen})"], "turn": turn}

    def route(state: AgentState) -> list[Send] | str:
        if state["turn"] >= turns:
            return END
        return [Send("tool", {"name": name, "turn": state["turn"]}) for name in TOOLS]

    def tool(call: dict) -> dict:
        runs[f"tool:{call['name']}"] += 1
        return {"messages": [f"{call['name']}@{call['turn']}"]}

    g = StateGraph(AgentState)
    g.add_node("agent", agent)
    g.add_node("tool", tool)
    g.add_edge(START, "agent")
    g.add_conditional_edges("agent", route, ["tool", END])
    g.add_edge("tool", "agent")
    return g.compile(checkpointer=saver)


class NotesState(TypedDict, total=False):
    messages: Annotated[list, DeltaChannel(add_messages_batch, snapshot_frequency=3)]
    notes: Annotated[list, DeltaChannel(add_messages_batch, snapshot_frequency=3)]


def chat_graph(saver: BaseCheckpointSaver | None, runs: Counter) -> CompiledStateGraph:
    """One node answering each input message; `notes`, a second DeltaChannel, is declared but
    never written. Each invoke adds 3 checkpoints."""

    def reply(state: NotesState) -> dict:
        runs["reply"] += 1
        return {"messages": [f"ai{runs['reply']}(saw {len(state['messages'])})"]}

    return one_node_graph(saver, NotesState, "reply", reply)


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
