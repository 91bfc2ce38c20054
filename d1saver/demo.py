"""`d1saver demo`: a tool-calling agent on the embedded local D1 that crashes, resumes and pauses.

No account, no network, no LLM: the "model" is scripted so every run tells the same story.
1. The agent calls three tools in parallel; one of them crashes the process mid-step.
2. A new saver (as a restarted process would make) resumes the thread from its last
   checkpoint; the two tools that had finished are not run again (their writes were saved).
3. The agent asks a human to approve a booking with `interrupt()`; the run pauses.
4. `Command(resume=...)` approves; the agent finishes.
Then it prints the thread's history and what D1 holds, with the HTTP requests each step cost.
Then the same agent runs once more with `encryption_keys`: its rows are sealed ("e:"), read
back with the key, and refused without it.
Last, long-term memory and a node cache on the same database: a second conversation of the same
user recalls, by meaning, a fact the first stored in a D1Store (a small deterministic embedding,
no network), and a D1Cache hit skips a slow tool.
"""

from __future__ import annotations

import hashlib
import math
import operator
import re
import time
import uuid
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any, TypedDict

from langchain_core.runnables import RunnableConfig
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage, ToolMessage
from langgraph.config import get_store
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.store.base import BaseStore
from langgraph.types import CachePolicy, Command, Send, interrupt

from d1saver import D1Cache, D1Error, D1Saver, D1Store, TraceEvent, admin
from d1saver.cli.support import table_lines
from d1saver.storage.crypto import new_key
from d1saver.local import LocalD1, LocalD1Transport

ACCOUNT_ID = "local-account"
DATABASE_ID = "demo"
BASE_URL = "http://d1.local/client/v4"

TOOLS = {
    "weather": lambda city: f"{city}: 22°C and sunny all week, light wind from the Atlantic.",
    "flights": lambda city: f"Direct flights to {city}: TP1337 at 09:40, FR8842 at 17:05.",
    "hotels": lambda city: f"Hotels in {city}: Casa Alfama (4.7, 140 EUR), Baixa Loft (4.5, 110 EUR).",
}


APPROVED = "Human answered:"


class State(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]
    tool_runs: Annotated[list[str], operator.add]


CRASH_AFTER_SECONDS = 0.5


class CrashOnce:
    """Kills the 'process' the first time the named tool runs, as a pod eviction would."""

    def __init__(self, tool: str) -> None:
        self.tool = tool
        self.armed = True

    def __call__(self, name: str) -> None:
        if self.armed and name == self.tool:
            self.armed = False
            time.sleep(CRASH_AFTER_SECONDS)  # the other tools finish (and are saved) first
            raise RuntimeError(f"simulated crash while running tool {name!r}")


def build_graph(crash: CrashOnce, executions: Counter[str]) -> StateGraph:
    """agent -> 3 parallel tools -> agent -> approval (interrupt) -> agent -> END."""

    def agent(state: State) -> dict[str, Any]:
        executions["agent"] += 1
        last = state["messages"][-1]
        if isinstance(last, HumanMessage) and not str(last.content).startswith(APPROVED):
            calls = [{"name": t, "args": {"city": "Lisbon"}, "id": f"call_{t}"} for t in TOOLS]
            return {"messages": [AIMessage("Let me check weather, flights and hotels.",
                                           tool_calls=calls, id="ai-plan")]}
        if isinstance(last, ToolMessage):
            return {"messages": [AIMessage("Casa Alfama fits best. Shall I book it?", id="ai-ask")]}
        return {"messages": [AIMessage("Booked Casa Alfama, 3 nights. Enjoy Lisbon!", id="ai-done")]}

    def tool(call: dict[str, Any]) -> dict[str, Any]:
        executions[call["name"]] += 1
        crash(call["name"])
        result = TOOLS[call["name"]](**call["args"])
        return {"messages": [ToolMessage(result, tool_call_id=call["id"], id=f"tool-{call['name']}")],
                "tool_runs": [call["name"]]}

    def approval(state: State) -> dict[str, Any]:
        executions["approval"] += 1
        answer = interrupt({"question": "Book Casa Alfama for 3 nights at 140 EUR/night?"})
        return {"messages": [HumanMessage(f"{APPROVED} {answer}", id="human-approval")]}

    def route(state: State) -> Any:
        last = state["messages"][-1]
        if isinstance(last, AIMessage) and last.tool_calls:
            return [Send("tool", call) for call in last.tool_calls]
        if isinstance(last, AIMessage) and str(last.content).endswith("?"):
            return "approval"
        return END

    builder = StateGraph(State)
    builder.add_node("agent", agent)
    builder.add_node("tool", tool)  # type: ignore[arg-type]  # a Send target takes its payload
    builder.add_node("approval", approval)
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", route, ["tool", "approval", END])
    builder.add_edge("tool", "agent")
    builder.add_edge("approval", "agent")
    return builder


class Meter:
    """Counts the HTTP requests the savers make, per demo step."""

    def __init__(self) -> None:
        self.total = 0
        self.mark = 0

    def __call__(self, event: TraceEvent) -> None:
        self.total += 1

    def since_mark(self) -> int:
        n, self.mark = self.total - self.mark, self.total
        return n


def run(data_dir: Path | None = None, echo: Any = print) -> dict[str, Any]:
    """Run the demo story; returns figures for tests."""
    engine = LocalD1(data_dir)
    transport = LocalD1Transport(engine)
    meter = Meter()

    def new_saver() -> D1Saver:
        # group_commit off: each write is its own request, so the counts never vary (in
        # production, group commit merges the parallel tools' writes into fewer requests)
        return D1Saver(account_id=ACCOUNT_ID, database_id=DATABASE_ID, api_token="local",
                       api_base_url=BASE_URL, transport=transport, tracer=meter,
                       group_commit=False)

    crash, executions = CrashOnce("hotels"), Counter[str]()
    builder = build_graph(crash, executions)
    # A kept database (--data-dir) gets a new thread each run; in memory the ids never vary.
    suffix = "1" if data_dir is None else uuid.uuid4().hex[:8]
    config: RunnableConfig = {"configurable": {"thread_id": f"trip-{suffix}"}}
    echo(f"thread {config['configurable']['thread_id']} on the embedded local D1"
         f" ({'in memory' if data_dir is None else data_dir})\n")

    echo("1. The agent calls weather, flights and hotels in parallel; 'hotels' crashes.")
    first = new_saver()
    graph = builder.compile(checkpointer=first)
    try:
        graph.invoke({"messages": [HumanMessage("Plan a trip to Lisbon next week.", id="human-ask")]}, config)
    except RuntimeError as exc:
        echo(f"   crashed: {exc}")
    state = graph.get_state(config)
    saved = [w for t in state.tasks for w in ([t.name] if t.result else [])]
    md = state.metadata or {}
    echo(f"   last checkpoint: step {md.get('step')}, next {list(state.next)}; "
         f"finished tasks saved as pending writes: {len(saved)}")
    echo(f"   HTTP requests so far: {meter.since_mark()}\n")
    first.close()

    echo("2. A new process (a new D1Saver) resumes the same thread from its last checkpoint.")
    before = dict(executions)
    second = new_saver()
    graph = builder.compile(checkpointer=second)
    graph.invoke(None, config)
    reran = {k: executions[k] - before.get(k, 0) for k in TOOLS}
    echo(f"   tool runs on resume: {reran} (only the crashed one ran again)")
    state = graph.get_state(config)
    echo(f"   paused at {list(state.next)} with interrupt: "
         f"{state.tasks[0].interrupts[0].value['question']}")
    echo(f"   HTTP requests for this step: {meter.since_mark()}\n")

    echo("3. The human approves: Command(resume='yes').")
    graph.invoke(Command(resume="yes"), config)
    state = graph.get_state(config)
    echo(f"   final answer: {state.values['messages'][-1].content}")
    echo(f"   HTTP requests for this step: {meter.since_mark()}\n")

    echo("4. History (newest first), read with get_state_history:")
    history = list(graph.get_state_history(config))
    for line in table_lines(
            ["step", "source", "next", "messages", "checkpoint_id"],
            [[(snap.metadata or {}).get("step"), (snap.metadata or {}).get("source"),
              ", ".join(snap.next), len(snap.values.get("messages", [])),
              snap.config["configurable"]["checkpoint_id"]] for snap in history],
            right=["step", "messages"]):
        echo(f"   {line}")
    echo(f"   HTTP requests for the whole history: {meter.since_mark()}\n")

    echo("5. What D1 holds:")
    stored = storage_summary(second)
    # about: compressed sizes move by a few bytes with the time-based checkpoint ids
    for line in table_lines(["table", "rows", "bytes (about)"],
                            [[table, rows, round(size, -2)] for table, (rows, size) in stored.items()],
                            right=["rows", "bytes (about)"]):
        echo(f"   {line}")
    echo(f"\nHTTP requests in all: {meter.total}; node executions: {dict(executions)}")
    second.close()
    sealed = run_with_key(transport, echo)
    memory = run_with_memory(transport, echo)
    engine.close()
    return {"executions": dict(executions), "reran": reran, "history": len(history),
            "final": state.values["messages"][-1].content, "stored": stored,
            "requests": meter.total, "tool_runs": state.values["tool_runs"], "sealed": sealed,
            "memory": memory}


def run_with_key(transport: LocalD1Transport, echo: Any) -> dict[str, Any]:
    """6. The same agent with encryption_keys: sealed rows, read back only with the key."""
    key = new_key()  # in production: D1SAVER_ENCRYPTION_KEYS, newest first

    def saver(**kwargs: Any) -> D1Saver:
        return D1Saver(account_id=ACCOUNT_ID, database_id=DATABASE_ID, api_token="local",
                       api_base_url=BASE_URL, transport=transport, **kwargs)

    keyed = saver(encryption_keys=[key])
    thread_id = f"sealed-{uuid.uuid4().hex[:8]}" if transport.engine.data_dir else "sealed-1"
    config: RunnableConfig = {"configurable": {"thread_id": thread_id}}
    echo(f"6. With encryption_keys (key id {keyed.key_ids[0]}), thread {thread_id}:")
    graph = build_graph(CrashOnce("none"), Counter[str]()).compile(checkpointer=keyed)
    graph.invoke({"messages": [HumanMessage("Plan a trip to Lisbon next week.")]}, config)
    graph.invoke(Command(resume="yes"), config)
    (row,) = keyed.execute([admin.stored_sample(thread_id)])[0].dicts()
    echo(f"   stored checkpoint: {row['head']}...  (about {round(row['bytes'], -2)} bytes, sealed)")
    echo(f"   stored metadata:   {row['metadata'][:72]}...")
    answer = graph.get_state(config).values["messages"][-1].content
    echo(f"   read back with the key: {answer}")
    refusals = {}
    for label, other in (("without a key", saver()), ("with another key",
                                                      saver(encryption_keys=[new_key()]))):
        try:
            other.get_tuple(config)
        except D1Error as exc:
            refusals[label] = type(exc).__name__
            why = str(exc).split(" (encryption_keys")[0].split("; nothing")[0]
            echo(f"   {label}: {type(exc).__name__}: ...{why[-70:]}")
    keyed.close()
    return {"head": row["head"], "metadata": row["metadata"], "answer": answer,
            "refusals": refusals}


# --- 7. long-term memory and a node cache ------------------------------------------------------
EMBED_DIMS = 64
SLOW_TOOL_SECONDS = 0.3


def embed(texts: Sequence[str]) -> list[list[float]]:
    """A small deterministic embedding, no network: each word (crudely stemmed) hashed to a
    signed unit in 64 dimensions, normalised. Texts sharing words score close."""
    out = []
    for text in texts:
        vec = [0.0] * EMBED_DIMS
        for word in re.findall(r"[a-z]+", text.lower()):
            word = word[:5]  # "seats" and "seat", "flights" and "flight"
            h = int.from_bytes(hashlib.blake2b(word.encode(), digest_size=4).digest(), "big")
            vec[h % EMBED_DIMS] += 1.0 if h & 1 << 31 else -1.0
        norm = math.sqrt(sum(x * x for x in vec)) or 1.0
        out.append([x / norm for x in vec])
    return out


class MemoryState(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]
    user: str
    city: str
    recalled: list[str]
    forecast: str


def build_memory_graph(tool_runs: Counter) -> StateGraph:
    """recall (get_store: search by meaning) -> forecast (slow, cached) -> agent (store argument)."""

    def recall(state: MemoryState) -> dict[str, Any]:
        found = get_store().search(("users", state["user"], "memories"),
                                   query=str(state["messages"][-1].content), limit=1)
        return {"recalled": [f"{i.value['text']} (score {i.score:.2f})" for i in found
                             if i.score is not None and i.score > 0.3]}

    def forecast(state: MemoryState) -> dict[str, Any]:
        tool_runs["forecast"] += 1
        time.sleep(SLOW_TOOL_SECONDS)  # a slow weather API
        return {"forecast": f"{state['city']}: 22°C and sunny"}

    def agent(state: MemoryState, *, store: BaseStore) -> dict[str, Any]:
        said = str(state["messages"][-1].content)
        if said.startswith("Remember:"):
            fact = said.removeprefix("Remember:").strip()
            store.put(("users", state["user"], "memories"), f"fact-{uuid.uuid4().hex[:6]}",
                      {"text": fact})
            return {"messages": [AIMessage(f"Noted. ({state['forecast']})")]}
        seat = "a window seat" if any("window" in r for r in state["recalled"]) else "any seat"
        return {"messages": [AIMessage(f"Booked {seat} to {state['city']}. "
                                       f"({state['forecast']})")]}

    builder = StateGraph(MemoryState)
    builder.add_node("recall", recall)
    builder.add_node("forecast", forecast,
                     cache_policy=CachePolicy(key_func=lambda s: s["city"], ttl=3600))
    builder.add_node("agent", agent)
    builder.add_edge(START, "recall")
    builder.add_edge("recall", "forecast")
    builder.add_edge("forecast", "agent")
    builder.add_edge("agent", END)
    return builder


def run_with_memory(transport: LocalD1Transport, echo: Any) -> dict[str, Any]:
    """7. Two conversations of one user: the second recalls what the first stored; the slow
    forecast tool runs once, the second call is a cache hit."""
    meter = Meter()
    common: dict[str, Any] = dict(account_id=ACCOUNT_ID, database_id=DATABASE_ID,
                                  api_token="local", api_base_url=BASE_URL,
                                  transport=transport, tracer=meter)
    user = f"ana-{uuid.uuid4().hex[:8]}" if transport.engine.data_dir else "ana"
    tool_runs: Counter = Counter()
    echo(f"\n7. Long-term memory (D1Store) and a node cache (D1Cache), user {user}:")
    answers = []
    for n, said in ((1, "Remember: I always want a window seat on flights."),
                    (2, "Book me a flight to Lisbon, please. Which seat do I like?")):
        # Each conversation as a new process would run it: new saver, store and cache objects.
        # (group_commit off: each write its own request, so the counts below never vary)
        graph = build_memory_graph(tool_runs).compile(
            checkpointer=D1Saver(**common, group_commit=False),
            store=D1Store(**common, index={"dims": EMBED_DIMS, "embed": embed,
                                           "fields": ["text"]}),
            cache=D1Cache(**common))
        config: RunnableConfig = {"configurable": {"thread_id": f"{user}-conversation-{n}"}}
        before = tool_runs["forecast"]
        out = graph.invoke({"messages": [HumanMessage(said)], "user": user, "city": "Lisbon",
                            "recalled": []}, config, durability="sync")
        ran = tool_runs["forecast"] - before
        answers.append(out["messages"][-1].content)
        echo(f"   conversation {n} (thread ...-conversation-{n}): \"{said}\"")
        if out["recalled"]:
            echo(f"      recalled by meaning from conversation 1: {out['recalled'][0]}")
        echo(f"      slow forecast tool: {'ran' if ran else 'cache hit, skipped'}")
        echo(f"      answer: {out['messages'][-1].content}")
        echo(f"      HTTP requests: {meter.since_mark()}")
    return {"user": user, "answers": answers, "forecast_runs": tool_runs["forecast"],
            "requests": meter.total}


def storage_summary(saver: D1Saver) -> dict[str, tuple[int, int]]:
    """Rows and stored bytes per table, read through the saver's own client."""

    (result,) = saver.execute([admin.storage_summary()])
    return {r["tbl"]: (int(r["row_count"]), int(r["bytes"])) for r in result.dicts()}
