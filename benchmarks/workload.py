"""A scripted tool-calling agent graph (no LLM), deterministic, in a plain and a DeltaChannel variant.

One `invoke` runs the whole conversation: one HumanMessage, then the agent calls FANOUT tools in
parallel (via `Send`) TURNS-1 times and answers on its TURNS-th turn. That is TURNS agent steps and
TURNS-1 tool steps, so 2*TURNS+1 checkpoints with the input and start checkpoints (10 turns -> 21).
"""

from __future__ import annotations

import operator
import random
from collections.abc import Sequence
from typing import Annotated, Any

from langchain_core.messages import AIMessage, AnyMessage, HumanMessage, ToolMessage
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


def build_graph(saver: BaseCheckpointSaver | None, *, variant: str = "plain", turns: int = 10,
                fanout: int = 3) -> CompiledStateGraph:
    """agent -> FANOUT tools in parallel -> agent ..., answering on the agent's TURNS-th turn."""
    state_type = {"plain": PlainState, "delta": DeltaState}[variant]

    def agent(state: dict) -> dict:
        turn = 1 + sum(isinstance(m, AIMessage) for m in state["messages"])
        if turn >= turns:
            return {"messages": [AIMessage(content=prose(f"answer-{turn}", 200, 400), id=f"ai-{turn}")]}
        calls = [{"name": TOOLS[(turn + i) % len(TOOLS)], "id": f"call-{turn}-{i}",
                  "args": {"query": prose(f"q-{turn}-{i}", 20, 60)}} for i in range(fanout)]
        return {"messages": [AIMessage(content=f"Turn {turn}: calling {fanout} tools.",
                                       tool_calls=calls, id=f"ai-{turn}")]}

    def route(state: dict) -> list[Send] | str:
        last = state["messages"][-1]
        if not getattr(last, "tool_calls", None):
            return END
        return [Send("tool", {"call": call}) for call in last.tool_calls]

    def tool(payload: dict) -> dict:
        call = payload["call"]
        text = prose(f"tool-{call['id']}")
        return {"messages": [ToolMessage(content=text, tool_call_id=call["id"], name=call["name"],
                                         id=f"tool-{call['id']}")]}

    g = StateGraph(state_type)
    g.add_node("agent", agent)
    g.add_node("tool", tool)
    g.add_edge(START, "agent")
    g.add_conditional_edges("agent", route, ["tool", END])
    g.add_edge("tool", "agent")
    return g.compile(checkpointer=saver)


def first_input() -> dict:
    """The conversation's only user message."""
    return {"messages": [HumanMessage(content="Reconcile last quarter's orders against invoices "
                                              "and tell me what is outstanding.", id="human-1")]}
