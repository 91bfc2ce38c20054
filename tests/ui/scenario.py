"""What the inspector's tests look at, written through the product's own APIs: a real
LangGraph agent's threads (tool calls, a subgraph, an interrupt waiting, a fork), plain
threads enough for several pages, memory items with and without a TTL, cache entries and a
compaction run's record. `populate` returns the ids the tests check."""

from __future__ import annotations

import operator
import uuid
from dataclasses import dataclass, field
from typing import Annotated, Any, TypedDict

from langchain_core.messages import AIMessage, AnyMessage, HumanMessage, ToolMessage
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.types import interrupt

from d1saver import D1Cache, D1Saver, D1Store, admin

LONG = "A long answer. " * 300  # 4,500 characters: past what a page shows before "show all"


class State(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]
    notes: Annotated[list[str], operator.add]


class Inner(TypedDict):
    notes: Annotated[list[str], operator.add]


def _graph(saver: D1Saver) -> Any:
    """human -> agent (a tool call) -> tool -> research (a subgraph) -> agent -> approval
    (interrupt) -> agent -> END."""
    def agent(state: State) -> dict[str, Any]:
        last = state["messages"][-1]
        if isinstance(last, HumanMessage) and not str(last.content).startswith("approved"):
            return {"messages": [AIMessage("Let me check the weather.", id=f"ai-{uuid.uuid4().hex[:6]}",
                                           tool_calls=[{"name": "weather", "args": {"city": "Lisbon"},
                                                        "id": "call_weather"}])]}
        if isinstance(last, ToolMessage):
            return {"messages": [AIMessage("Sunny. Shall I book Casa Alfama?", id="ai-ask")]}
        return {"messages": [AIMessage(LONG, id="ai-done")]}

    def tool(state: State) -> dict[str, Any]:
        return {"messages": [ToolMessage("Lisbon: 22°C and sunny", tool_call_id="call_weather",
                                         name="weather", id="tool-weather")]}

    def look(state: Inner) -> dict[str, Any]:
        return {"notes": ["looked it up"]}

    inner = StateGraph(Inner)
    inner.add_node("look", look)
    inner.add_edge(START, "look")
    inner.add_edge("look", END)

    def approval(state: State) -> dict[str, Any]:
        answer = interrupt({"question": "Book Casa Alfama for 3 nights?"})
        return {"messages": [HumanMessage(f"approved: {answer}", id="human-approved")]}

    def route(state: State) -> str:
        last = state["messages"][-1]
        if isinstance(last, AIMessage) and last.tool_calls:
            return "tool"
        if isinstance(last, AIMessage) and str(last.content).endswith("?"):
            return "approval"
        return END

    builder = StateGraph(State)
    builder.add_node("agent", agent)
    builder.add_node("tool", tool)
    builder.add_node("research", inner.compile())
    builder.add_node("approval", approval)
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", route, ["tool", "approval", END])
    builder.add_edge("tool", "research")
    builder.add_edge("research", "agent")
    builder.add_edge("approval", "agent")
    return builder.compile(checkpointer=saver)


@dataclass
class Scenario:
    waiting: str  # a thread waiting on an interrupt
    forked: str  # a thread with two branches from one checkpoint
    fork_point: str = ""  # the checkpoint both branches grow from
    branch_heads: list[str] = field(default_factory=list)  # the newest of each branch
    plain: list[str] = field(default_factory=list)  # threads of a few plain checkpoints
    namespace: tuple[str, ...] = ("users", "u1", "memories")
    slashed: tuple[str, ...] = ("docs", "a/b")  # a label holding '/'


def populate(saver: D1Saver, store: D1Store, cache: D1Cache, *, plain: int = 0,
             tag: str = "", runs: bool = True) -> Scenario:
    """Write the scenario; thread ids and the memory's first labels end with `tag` (unique per
    test on a shared database); `runs`: record a compaction run."""
    graph = _graph(saver)
    s = Scenario(waiting=f"trip-waiting{tag}", forked=f"trip-forked{tag}",
                 namespace=(f"users{tag}", "u1", "memories"), slashed=(f"docs{tag}", "a/b"))
    config: Any = {"configurable": {"thread_id": s.waiting}}
    graph.invoke({"messages": [HumanMessage("Plan a trip to Lisbon", id="human-1")]}, config)

    config = {"configurable": {"thread_id": s.forked}}
    graph.invoke({"messages": [HumanMessage("Plan a trip to Lisbon", id="human-1")]}, config)
    from langgraph.types import Command

    graph.invoke(Command(resume="yes"), config)
    history = list(graph.get_state_history(config))
    # Time travel: from the checkpoint where the agent first answered, ask something else.
    back = next(h for h in history if h.next == ("tool",))
    s.fork_point = back.config["configurable"]["checkpoint_id"]
    forked = graph.update_state(back.config, {"messages": [HumanMessage("Porto instead?", id="human-2")]},
                                as_node="agent")
    s.branch_heads = [history[0].config["configurable"]["checkpoint_id"],
                      forked["configurable"]["checkpoint_id"]]

    for i in range(plain):
        thread = f"plain-{i:03d}{tag}"
        put: Any = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
        for step in range(2):
            checkpoint = empty_checkpoint()
            checkpoint["channel_values"] = {"counter": [step] * (i + 1)}
            checkpoint["channel_versions"] = {"counter": f"{step + 1:010}"}
            put = saver.put(put, checkpoint, {"source": "loop", "step": step}, {})
        s.plain.append(thread)

    store.put(s.namespace, "m1", {"text": "likes tea", "long": LONG}, ttl=60)
    store.put(s.namespace, "m2", {"text": "lives in Lisbon"})
    store.put((f"users{tag}", "u2", "prefs"), "p1", {"theme": "dark"})
    store.put(s.slashed, "k", {"path": "a/b"})
    cache.set({((f"node{tag}", "weather"), "k1"): ({"answer": 22}, 60),
               ((f"node{tag}", "weather"), "k2"): ({"answer": 23}, None)})
    if not runs:
        return s
    run = f"run-{uuid.uuid4().hex[:8]}"
    database = str(saver.database_id)
    saver.execute([admin.run_begin(run, database, "cron", 5, None)])
    saver.execute([admin.run_end(run, database, "done", None, 3)])
    return s
