"""The LangGraph graphs behind the frozen 0.1.0 database (tests/data/v0_1_0.jsonl).

Shared by the generator (make_v0_1_0.py, run once with d1saver 0.1.0 on the path) and by the
tests that read, resume and compact that database with the current code. Self-contained on
purpose: it imports only LangGraph and LangChain, so refactors elsewhere in tests/ cannot change
what was frozen. Every node counts its runs in a Counter, and every message carries a fixed id,
so a resumed thread can be checked exactly (which nodes ran again, which messages it holds).

Editing a graph here changes what the stored rows mean: add new graphs instead.
"""

from __future__ import annotations

import operator
import random
import string
import threading
import time
from collections import Counter
from collections.abc import Sequence
from typing import Annotated, Any

from langchain_core.messages import AIMessage, AnyMessage, HumanMessage, ToolMessage
from langgraph.channels.delta import DeltaChannel
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.types import Command, Send, interrupt
from typing_extensions import TypedDict

# Thread ids of the frozen database, by scenario.
PLAIN = "v010-plain"
DELTA = "v010-delta"
INTERRUPTED = "v010-interrupted"
SUBGRAPH = "v010-subgraph"
FAILED_SIBLING = "v010-failed-sibling"
TAGGED = "v010-tagged"
BIG = "v010-big"
THREADS = (PLAIN, DELTA, INTERRUPTED, SUBGRAPH, FAILED_SIBLING, TAGGED, BIG)

TAG_NAME = "v010-turn-1"  # on TAGGED: the checkpoint that ended its first turn
RUN_METADATA = {"user": "alice", "app": "v010-fixture"}  # merged into every checkpoint's metadata
BIG_CHARS = 2_100_000  # over D1's 2 MB value limit once serialized: stored as "c:" chunks
TOOLS = ("search", "clock")


def config(thread_id: str, **configurable: Any) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread_id, **configurable}, "metadata": dict(RUN_METADATA)}


# --- a tool-calling chat agent: plain (operator.add) and DeltaChannel ------------------------


def human(turn: int) -> HumanMessage:
    return HumanMessage(content=f"question {turn}: what is new?", id=f"human-{turn}")


def append_batch(state: list, writes: Sequence[Any]) -> list:
    """A batching-invariant reducer for DeltaChannel: each write (a message or a list) is appended."""
    out = list(state)
    for w in writes:
        out.extend(w if isinstance(w, list) else [w])
    return out


class ChatState(TypedDict):
    messages: Annotated[list[AnyMessage], operator.add]


class DeltaChatState(TypedDict):
    messages: Annotated[list[AnyMessage], DeltaChannel(append_batch, snapshot_frequency=3)]


def _chat_graph(state_type: type, saver: BaseCheckpointSaver | None, runs: Counter
                ) -> CompiledStateGraph:
    """agent asks both tools in parallel (Send), then answers, naming how many messages it saw."""

    def agent(state: dict) -> dict:
        runs["agent"] += 1
        messages = state["messages"]
        n = len(messages)
        if isinstance(messages[-1], HumanMessage):
            calls = [{"name": t, "args": {"query": f"{t} #{n}"}, "id": f"call-{n}-{t}",
                      "type": "tool_call"} for t in TOOLS]
            return {"messages": [AIMessage(content="", tool_calls=calls, id=f"ai-{n}")]}
        return {"messages": [AIMessage(content=f"answer after {n} messages", id=f"ai-{n}")]}

    def route(state: dict) -> list[Send] | str:
        last = state["messages"][-1]
        if isinstance(last, AIMessage) and last.tool_calls:
            return [Send("tool", call) for call in last.tool_calls]
        return END

    def tool(call: dict) -> dict:
        runs[f"tool:{call['name']}"] += 1
        text = f"{call['name']} says: result for {call['args']['query']} " + "lorem ipsum " * 20
        return {"messages": [ToolMessage(content=text, tool_call_id=call["id"], name=call["name"],
                                         id=f"tool-{call['id']}")]}

    g = StateGraph(state_type)
    g.add_node("agent", agent)
    g.add_node("tool", tool)
    g.add_edge(START, "agent")
    g.add_conditional_edges("agent", route, ["tool", END])
    g.add_edge("tool", "agent")
    return g.compile(checkpointer=saver)


def chat_graph(saver: BaseCheckpointSaver | None, runs: Counter) -> CompiledStateGraph:
    return _chat_graph(ChatState, saver, runs)


def delta_chat_graph(saver: BaseCheckpointSaver | None, runs: Counter) -> CompiledStateGraph:
    return _chat_graph(DeltaChatState, saver, runs)


PLAIN_TURNS = 3
DELTA_TURNS = 4

# --- interrupt() in the root graph ----------------------------------------------------------


class LogState(TypedDict):
    log: Annotated[list[str], operator.add]


def approval_graph(saver: BaseCheckpointSaver | None, runs: Counter) -> CompiledStateGraph:
    """prepare -> approve (interrupt "approve?") -> finish."""

    def prepare(state: LogState) -> dict:
        runs["prepare"] += 1
        return {"log": ["prepared"]}

    def approve(state: LogState) -> dict:
        runs["approve"] += 1
        answer = interrupt({"question": "approve?", "log": list(state["log"])})
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


# --- a compiled subgraph as a node (checkpoint_ns != '') --------------------------------------


class ReviewState(TypedDict, total=False):
    draft: str
    verdict: str


class ParentState(LogState, ReviewState):
    pass


def parent_graph(saver: BaseCheckpointSaver | None, runs: Counter) -> CompiledStateGraph:
    """before -> sub[draft -> review (interrupt)] -> after; the subgraph checkpoints in its own ns."""

    def draft(state: ReviewState) -> dict:
        runs["draft"] += 1
        return {"draft": f"draft v{runs['draft']}"}

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


# --- parallel tasks, one of which fails ------------------------------------------------------


class Flaky(RuntimeError):
    pass


def fan_out_graph(saver: BaseCheckpointSaver | None, runs: Counter,
                  fail: dict[str, bool] | None = None) -> CompiledStateGraph:
    """start -> (ok, flaky in parallel) -> join. While fail["flaky"], flaky raises once ok ended.

    It waits for ok to return and then a little more, so that ok's write is stored before the
    step fails (the generator checks that it was); then it clears the flag, so the next run of
    the thread succeeds.
    """
    fail = {} if fail is None else fail
    ok_done = threading.Event()

    def start(state: LogState) -> dict:
        runs["start"] += 1
        return {"log": ["start"]}

    def ok(state: LogState) -> dict:
        runs["ok"] += 1
        ok_done.set()
        return {"log": ["ok"]}

    def flaky(state: LogState) -> dict:
        runs["flaky"] += 1
        if fail.get("flaky"):
            ok_done.wait(10)
            time.sleep(0.5)  # let the runner store ok's write first
            fail["flaky"] = False
            raise Flaky("flaky failed")
        return {"log": ["flaky"]}

    def join(state: LogState) -> dict:
        runs["join"] += 1
        return {"log": ["join"]}

    g = StateGraph(LogState)
    g.add_node("start", start)
    g.add_node("ok", ok)
    g.add_node("flaky", flaky)
    g.add_node("join", join)
    g.add_edge(START, "start")
    g.add_edge("start", "ok")
    g.add_edge("start", "flaky")
    g.add_edge(["ok", "flaky"], "join")
    g.add_edge("join", END)
    return g.compile(checkpointer=saver)


# --- values over D1's 2 MB limit ---------------------------------------------------------------


def big_text(seed: int) -> str:
    """BIG_CHARS characters that zlib cannot shrink below 2 MB once encoded (fixed by seed)."""
    rng = random.Random(seed)
    alphabet = string.ascii_letters + string.digits + string.punctuation
    return "".join(rng.choices(alphabet, k=BIG_CHARS))


class BigState(TypedDict, total=False):
    big: str
    note: str


def big_graph(saver: BaseCheckpointSaver | None, runs: Counter) -> CompiledStateGraph:
    """START -> (make_big, ask in parallel): make_big's 2.1 MB write is pending while ask waits
    at interrupt(); after the resume, the checkpoint holds the 2.1 MB value in its state."""

    def make_big(state: BigState) -> dict:
        runs["make_big"] += 1
        return {"big": big_text(1)}

    def ask(state: BigState) -> dict:
        runs["ask"] += 1
        return {"note": interrupt("keep the big value?")}

    g = StateGraph(BigState)
    g.add_node("make_big", make_big)
    g.add_node("ask", ask)
    g.add_edge(START, "make_big")
    g.add_edge(START, "ask")
    g.add_edge("make_big", END)
    g.add_edge("ask", END)
    return g.compile(checkpointer=saver)


# --- how each thread was written, and the step that continues it -----------------------------


def turn(n: int) -> dict[str, Any]:
    return {"messages": [human(n)]}


# A step is ("invoke", input) or ("resume", value); ("tag", name) tags the thread's head.
Step = tuple[str, Any]
SCRIPTS: dict[str, list[Step]] = {
    PLAIN: [("invoke", turn(n)) for n in range(1, PLAIN_TURNS + 1)],
    DELTA: [("invoke", turn(n)) for n in range(1, DELTA_TURNS + 1)],
    INTERRUPTED: [("invoke", {"log": ["in"]})],
    # Turn 1 completes through the subgraph's interrupt; turn 2 stays paused inside the subgraph.
    SUBGRAPH: [("invoke", {"log": ["in"]}), ("resume", "yes"), ("invoke", {"log": ["again"]})],
    FAILED_SIBLING: [("invoke", {"log": ["in"]})],  # flaky fails: the step stays unfinished
    TAGGED: [("invoke", turn(1)), ("tag", TAG_NAME), ("invoke", turn(2)), ("invoke", turn(3))],
    BIG: [("invoke", {"note": "start"}), ("resume", "keep")],
}

# What a later version does with each thread, and the nodes that step must run (no others).
CONTINUATIONS: dict[str, tuple[Step, dict[str, int]]] = {
    PLAIN: (("invoke", turn(PLAIN_TURNS + 1)), {"agent": 2, "tool:search": 1, "tool:clock": 1}),
    DELTA: (("invoke", turn(DELTA_TURNS + 1)), {"agent": 2, "tool:search": 1, "tool:clock": 1}),
    INTERRUPTED: (("resume", "yes"), {"approve": 1, "finish": 1}),
    SUBGRAPH: (("resume", "ok"), {"review": 1, "after": 1}),
    FAILED_SIBLING: (("invoke", None), {"flaky": 1, "join": 1}),  # ok's stored write is reused
    TAGGED: (("invoke", turn(4)), {"agent": 2, "tool:search": 1, "tool:clock": 1}),
    BIG: (("invoke", {"note": "again"}), {"make_big": 1, "ask": 1}),
}


def run_step(graph: CompiledStateGraph, cfg: dict[str, Any], step: Step,
             saver: Any = None) -> Any:
    """Run one script step; returns what invoke returned (None for a tag)."""
    kind, arg = step
    if kind == "invoke":
        return graph.invoke(arg, cfg)
    if kind == "resume":
        return graph.invoke(Command(resume=arg), cfg)
    if kind == "tag":  # d1saver's tags; a reference run on InMemorySaver has none
        if hasattr(saver, "tag"):
            saver.tag(graph.get_state(cfg).config, arg)
        return None
    raise ValueError(f"unknown step {kind!r}")


GRAPHS = {
    PLAIN: chat_graph,
    DELTA: delta_chat_graph,
    INTERRUPTED: approval_graph,
    SUBGRAPH: parent_graph,
    FAILED_SIBLING: fan_out_graph,
    TAGGED: chat_graph,
    BIG: big_graph,
}


def graph_for(thread_id: str, saver: BaseCheckpointSaver | None,
              runs: Counter | None = None, *, fail: dict[str, bool] | None = None
              ) -> CompiledStateGraph:
    """The graph that wrote `thread_id` (a name of THREADS), compiled on `saver`."""
    runs = Counter() if runs is None else runs
    if thread_id == FAILED_SIBLING:
        return fan_out_graph(saver, runs, fail)
    return GRAPHS[thread_id](saver, runs)


def play(thread_id: str, saver: BaseCheckpointSaver, cfg: dict[str, Any],
         runs: Counter | None = None) -> CompiledStateGraph:
    """Write a thread as the generator did: its script, flaky failing once. Returns the graph."""
    graph = graph_for(thread_id, saver, runs, fail={"flaky": True})
    for step in SCRIPTS[thread_id]:
        try:
            run_step(graph, cfg, step, saver)
        except Flaky:
            if thread_id != FAILED_SIBLING:
                raise
    return graph
