"""A scripted tool-calling agent graph (no LLM), deterministic, in a plain and a DeltaChannel variant.

One `invoke` runs the whole conversation: one HumanMessage, then the agent calls FANOUT tools in
parallel (via `Send`) TURNS-1 times and answers on its TURNS-th turn. That is TURNS agent steps and
TURNS-1 tool steps, so 2*TURNS+1 checkpoints with the input and start checkpoints (10 turns -> 21).

This is the one definition of the agent: the benchmark runs it as is; the graph tests
(tests/saver/test_graphs.py), the fault tests and the crash child (tests/reliability/) run it with
their own turns, snapshot frequency and a `hook` around each node run (to count runs, or to log
and slow them). It lives here, not under tests/, so that the benchmark needs nothing from tests.
"""

from __future__ import annotations

import operator
import random
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Annotated, Any

from langchain_core.messages import AIMessage, AnyMessage, HumanMessage, ToolMessage
from langchain_core.runnables import RunnableConfig
from langgraph.channels.delta import DeltaChannel
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.types import Send
from typing_extensions import TypedDict

VARIANTS = ("plain", "delta")
TOOLS = ("search_docs", "query_orders", "fetch_weather", "lookup_customer", "run_sql")

_WORDS = """
account address after agent again against airport allow already amount analysis answer april
archive around arrival article average balance because before below billing branch budget
building business calendar capacity carrier category change charge checked city claim client
closed column company compared contract copy correct cost country coverage credit current customer
daily data date deadline delay delivery department deposit detail device discount distance district
document during early east effective email employee entry error estimate evening event exactly
expected export facility factor failed field file final first flight following forecast freight
further general given group heavy history hotel hourly included increase index initial inventory
invoice issue item january large last later level limit line local location logged manager march
market maximum measured meeting method minimum missing monthly morning network north notice number
office order original outstanding overnight package partial payment pending percent period
placed policy portal pressure previous price priority product profile quarter queue rain range
rate record refund region regular related remaining report request required result return review
route sales schedule season second section service session shipment short signed south standard
station status stock storage summary supplier support system table temperature terminal total
track transfer updated usage valid value vendor version warehouse weekly west window within yearly
""".split()


def prose(seed: str, low: int = 300, high: int = 600) -> str:
    """Deterministic English-like prose of `low`..`high` characters (seeded; varied vocabulary)."""
    rng = random.Random(seed)
    target = rng.randint(low, high)
    sentences: list[str] = []
    size = 0
    while size < target:
        words = rng.choices(_WORDS, k=rng.randint(6, 16))
        if rng.random() < 0.4:
            words.insert(rng.randint(1, len(words) - 1), str(rng.randint(2, 98_000)))
        text = " ".join(words)
        sentence = text[0].upper() + text[1:] + rng.choice(".....;!?")
        sentences.append(sentence)
        size += len(sentence) + 1
    return " ".join(sentences)[:high].rstrip()


def append_batches(state: list, writes: Sequence[Any]) -> list:
    """DeltaChannel reducer: each write is a message or a list of them, appended in order."""
    out = list(state)
    for w in writes:
        out.extend(w if isinstance(w, list) else [w])
    return out


class PlainState(TypedDict):
    messages: Annotated[list[AnyMessage], operator.add]


class DeltaState(TypedDict):
    messages: Annotated[list[AnyMessage], DeltaChannel(append_batches)]


def delta_state(snapshot_frequency: int) -> type:
    """DeltaState with its messages channel storing a full snapshot every `snapshot_frequency` updates."""
    channel = DeltaChannel(append_batches, snapshot_frequency=snapshot_frequency)
    return TypedDict("DeltaState", {"messages": Annotated[list[AnyMessage], channel]})


@dataclass(frozen=True)
class NodeRun:
    """One node run, as a hook sees it."""

    node: str  # "agent" or "tool"
    logical: str  # the work, the same when it runs again: agent-<turn>, tool-call-<turn>-<i>
    input: dict[str, Any]  # the agent's state, or the tool's Send payload {"call": ...}
    config: RunnableConfig  # LangGraph's config for the run (task id and namespace)


Hook = Callable[[NodeRun], AbstractContextManager[object]]
"""Wraps each node run: entered before the node's work, exited once its output is built."""


def no_hook(run: NodeRun) -> AbstractContextManager[object]:
    return nullcontext()


def build_graph(saver: BaseCheckpointSaver | None, *, variant: str = "plain", turns: int = 10,
                fanout: int = 3, snapshot_frequency: int | None = None,
                hook: Hook = no_hook) -> CompiledStateGraph:
    """agent -> FANOUT tools in parallel -> agent ..., answering on the agent's TURNS-th turn.

    `snapshot_frequency` (delta only) overrides DeltaChannel's default of 100; `hook` wraps every
    node run (see `Hook`); neither changes what the graph writes.
    """
    if variant not in VARIANTS:
        raise ValueError(f"variant must be one of {VARIANTS}, not {variant!r}")
    if variant == "plain":
        state_type: type = PlainState
    elif snapshot_frequency is None:
        state_type = DeltaState
    else:
        state_type = delta_state(snapshot_frequency)

    def agent(state: dict, config: RunnableConfig) -> dict:
        turn = 1 + sum(isinstance(m, AIMessage) for m in state["messages"])
        with hook(NodeRun("agent", f"agent-{turn}", state, config)):
            if turn >= turns:
                return {"messages": [AIMessage(content=prose(f"answer-{turn}", 200, 400),
                                               id=f"ai-{turn}")]}
            calls = [{"name": TOOLS[(turn + i) % len(TOOLS)], "id": f"call-{turn}-{i}",
                      "args": {"query": prose(f"q-{turn}-{i}", 20, 60)}} for i in range(fanout)]
            return {"messages": [AIMessage(content=f"Turn {turn}: calling {fanout} tools.",
                                           tool_calls=calls, id=f"ai-{turn}")]}

    def route(state: dict) -> list[Send] | str:
        last = state["messages"][-1]
        if not getattr(last, "tool_calls", None):
            return END
        return [Send("tool", {"call": call}) for call in last.tool_calls]

    def tool(payload: dict, config: RunnableConfig) -> dict:
        call = payload["call"]
        with hook(NodeRun("tool", f"tool-{call['id']}", payload, config)):
            text = prose(f"tool-{call['id']}")
            return {"messages": [ToolMessage(content=text, tool_call_id=call["id"],
                                             name=call["name"], id=f"tool-{call['id']}")]}

    g = StateGraph(state_type)
    g.add_node("agent", agent)
    g.add_node("tool", tool)
    g.add_edge(START, "agent")
    g.add_conditional_edges("agent", route, ["tool", END])
    g.add_edge("tool", "agent")
    return g.compile(checkpointer=saver)


def message_count(turns: int, fanout: int) -> int:
    """Messages in the finished conversation: the user's, one per agent turn, one per tool call."""
    return 1 + turns + (turns - 1) * fanout


def node_runs(turns: int, fanout: int) -> list[str]:
    """The logical ids of a finished run's node runs, in the order they run (see `NodeRun`)."""
    out: list[str] = []
    for turn in range(1, turns + 1):
        out.append(f"agent-{turn}")
        if turn < turns:
            out += [f"tool-call-{turn}-{i}" for i in range(fanout)]
    return out


def first_input() -> dict:
    """The conversation's only user message."""
    return {"messages": [HumanMessage(content="Reconcile last quarter's orders against invoices "
                                              "and tell me what is outstanding.", id="human-1")]}
