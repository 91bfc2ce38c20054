"""`graph.compile(checkpointer=D1Saver(...), store=D1Store(...), cache=D1Cache(...))`: a graph that
reads memory through `get_store()`, writes it through the `store` node argument, and skips a
slow node on a cache hit; the same graph on LangGraph's in-memory trio gives the same answers.
On the local D1 (one database; a fleet of four with keys) and on the real engine, sync and async.
"""

from __future__ import annotations

import asyncio
import operator
import uuid
from collections import Counter
from typing import Annotated, Any

import pytest
from langgraph.cache.memory import InMemoryCache
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.config import get_store
from langgraph.graph import END, START, StateGraph
from langgraph.store.base import BaseStore
from langgraph.store.memory import InMemoryStore
from langgraph.types import CachePolicy
from typing_extensions import TypedDict

from d1saver import D1Saver
from tests.memory.embeddings import TrigramEmbeddings
from tests.memory.subjects import D1Subject, make_subject, subject_params

DIMS = 64


class State(TypedDict):
    user: str
    said: str
    city: str
    recalled: Annotated[list[str], operator.add]
    forecast: str


def build(runs: Counter[str]) -> StateGraph:
    """recall (get_store, search by meaning) -> remember (store argument) -> forecast (cached)."""

    def recall(state: State) -> dict[str, Any]:
        runs["recall"] += 1
        store = get_store()
        found = store.search(("users", state["user"], "facts"), query=state["said"], limit=1)
        return {"recalled": [i.value["text"] for i in found]}

    def remember(state: State, *, store: BaseStore) -> dict[str, Any]:
        runs["remember"] += 1
        if state["said"].endswith("?"):
            return {}
        ns = ("users", state["user"], "facts")
        store.put(ns, f"fact-{len(store.search(ns, limit=100))}", {"text": state["said"]})
        return {}

    def forecast(state: State) -> dict[str, Any]:
        runs["forecast"] += 1  # the slow tool: a cache hit must skip it
        return {"forecast": f"{state['city']}: sunny, 22°C"}

    builder = StateGraph(State)
    builder.add_node("recall", recall)
    builder.add_node("remember", remember)
    builder.add_node("forecast", forecast,
                     cache_policy=CachePolicy(key_func=lambda s: f"{s['user']}|{s['city']}",
                                              ttl=600))
    builder.add_edge(START, "recall")
    builder.add_edge("recall", "remember")
    builder.add_edge("remember", "forecast")
    builder.add_edge("forecast", END)
    return builder


TURNS = [  # (conversation, what the user says, city)
    ("first", "I drink my coffee black, no sugar", "Lisbon"),
    ("first", "My dog is called Rex", "Lisbon"),
    ("second", "how do I take my coffee?", "Lisbon"),
    ("second", "what is my dog called?", "Porto"),
    ("third", "what is my dog called?", "Porto"),
]


def conversation(graph: Any, user: str, mode: str) -> list[dict[str, Any]]:
    """Every turn's final state, each conversation a thread of its own."""
    threads = {name: f"{user}-{name}" for name in ("first", "second", "third")}
    out = []
    for name, said, city in TURNS:
        config = {"configurable": {"thread_id": threads[name]}}
        state = {"user": user, "said": said, "city": city}
        if mode == "sync":
            result = graph.invoke(state, config)
        else:
            result = asyncio.run(graph.ainvoke(state, config))
        out.append({k: result.get(k) for k in ("recalled", "forecast")})
    return out


def reference(mode: str) -> tuple[list[dict[str, Any]], Counter[str]]:
    runs: Counter[str] = Counter()
    graph = build(runs).compile(
        checkpointer=InMemorySaver(), cache=InMemoryCache(),
        store=InMemoryStore(index={"dims": DIMS, "embed": TrigramEmbeddings(DIMS)}))
    return conversation(graph, "ana", mode), runs


def trio(s: D1Subject) -> tuple[D1Saver, Any, Any]:
    ids = s.database_ids
    saver = D1Saver(account_id=s.account_id, api_token=s.api_token, api_base_url=s.base_url,
                    transport=s.transport, tracer=s.events.append, encryption_keys=s.keys,
                    **({"database_id": ids[0]} if len(ids) == 1 else {"database_ids": ids}))
    store = s.store(index={"dims": DIMS, "embed": TrigramEmbeddings(DIMS)})
    return saver, store, s.cache()


@pytest.fixture(params=[p for p in subject_params(real=True) if "wrangler-fleet4" not in p.id])
def d1(request: pytest.FixtureRequest) -> Any:
    s = make_subject(request.param, request, needs="D1Cache")
    yield s
    s.close()


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_graph_reads_and_writes_memory_and_hits_the_cache(d1: D1Subject, mode: str) -> None:
    want, want_runs = reference(mode)
    assert want[2]["recalled"] == ["I drink my coffee black, no sugar"]
    assert want[3]["recalled"][-1] == "My dog is called Rex"  # the thread accumulates
    assert want_runs["forecast"] == 2  # Lisbon once, Porto once: three hits

    runs: Counter[str] = Counter()
    saver, store, cache = trio(d1)
    graph = build(runs).compile(checkpointer=saver, store=store, cache=cache)
    user = f"ana-{uuid.uuid4().hex[:8]}"  # the real engine's databases are shared
    assert conversation(graph, user, mode) == want
    assert runs == want_runs

    # What the first conversation stored is in the store, under the user's namespace, and
    # the conversations are checkpointed threads of their own.
    facts = store.search(("users", user, "facts"), limit=10)
    assert sorted(i.value["text"] for i in facts) == sorted(t[1] for t in TURNS[:2])
    state = graph.get_state({"configurable": {"thread_id": f"{user}-second"}})
    assert state.values["forecast"] == "Porto: sunny, 22°C"
    saver.close()


def test_cached_node_runs_again_after_its_ttl() -> None:
    from tests.memory.subjects import local_subject

    d1 = local_subject("local")
    try:
        runs: Counter[str] = Counter()
        saver, store, cache = trio(d1)
        if getattr(cache, "clock", None) is not d1.clock:
            pytest.skip("D1Cache takes no clock")
        graph = build(runs).compile(checkpointer=saver, store=store, cache=cache)
        for n in range(3):
            graph.invoke({"user": "bo", "said": f"fact {n}", "city": "Faro"},
                         {"configurable": {"thread_id": f"t{n}"}})
            d1.clock.advance(400)  # the entry lives 600 s: a hit, then a miss, then a hit
        assert runs["forecast"] == 2
        before = len(d1.events)
        graph.invoke({"user": "bo", "said": "fact 3", "city": "Faro"},
                     {"configurable": {"thread_id": "t3"}})
        assert runs["forecast"] == 2  # a hit
        assert len(d1.events) - before > 0
    finally:
        d1.close()
