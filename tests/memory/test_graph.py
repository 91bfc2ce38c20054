"""A LangGraph graph compiled with d1saver's three objects on one local D1: a second
conversation recalls what the first stored, by meaning; a cached node is skipped on a hit."""

from __future__ import annotations

import operator
from typing import Annotated, Any

import pytest
from langgraph.graph import END, START, StateGraph
from langgraph.store.base import BaseStore
from langgraph.types import CachePolicy
from typing_extensions import TypedDict

from tests.memory.conftest import Memory
from tests.memory.embeddings import TrigramEmbeddings


class State(TypedDict):
    user: str
    said: str
    recalled: Annotated[list[str], operator.add]
    looked_up: str


def _graph(calls: list[str]) -> StateGraph:
    def remember(state: State, *, store: BaseStore) -> dict[str, Any]:
        ns = ("users", state["user"], "facts")
        found = store.search(ns, query=state["said"], limit=1)
        store.put(ns, f"f{len(store.search(ns, limit=100))}", {"text": state["said"]})
        return {"recalled": [i.value["text"] for i in found]}

    def slow_tool(state: State) -> dict[str, Any]:
        calls.append(state["user"])
        return {"looked_up": f"weather for {state['user']}"}

    builder = StateGraph(State)
    builder.add_node("remember", remember)
    builder.add_node("slow_tool", slow_tool, cache_policy=CachePolicy(key_func=lambda s: s["user"], ttl=120))
    builder.add_edge(START, "remember")
    builder.add_edge("remember", "slow_tool")
    builder.add_edge("slow_tool", END)
    return builder


def _three(memory: Memory) -> tuple[Any, Any, Any]:
    from d1saver import D1Saver
    db = memory.database_ids[0]
    saver = D1Saver(account_id=memory.account_id, database_id=db, api_token=memory.api_token,
                    api_base_url=memory.base_url, transport=memory.transport)
    return (saver, memory.store(index={"dims": 64, "embed": TrigramEmbeddings()}),
            memory.cache())


def test_memory_and_cache_in_a_graph(memory: Memory) -> None:
    calls: list[str] = []
    saver, store, cache = _three(memory)
    graph = _graph(calls).compile(checkpointer=saver, store=store, cache=cache)
    first = graph.invoke({"user": "ana", "said": "I drink my coffee black"},
                         {"configurable": {"thread_id": "conv-1"}})
    assert first["recalled"] == [] and calls == ["ana"]
    second = graph.invoke({"user": "ana", "said": "how do I take my coffee?"},
                          {"configurable": {"thread_id": "conv-2"}})
    assert second["recalled"] == ["I drink my coffee black"]
    assert calls == ["ana"]  # the slow tool's input was the same: a cache hit skipped it
    memory.clock.advance(121)
    graph.invoke({"user": "ana", "said": "anything"}, {"configurable": {"thread_id": "conv-3"}})
    assert calls == ["ana", "ana"]  # the entry expired


@pytest.mark.anyio
async def test_memory_and_cache_in_a_graph_async(memory: Memory) -> None:
    calls: list[str] = []
    saver, store, cache = _three(memory)
    graph = _graph(calls).compile(checkpointer=saver, store=store, cache=cache)
    await graph.ainvoke({"user": "bo", "said": "my dog is called Rex"},
                        {"configurable": {"thread_id": "a1"}})
    out = await graph.ainvoke({"user": "bo", "said": "what is my dog called"},
                              {"configurable": {"thread_id": "a2"}})
    assert out["recalled"] == ["my dog is called Rex"] and calls == ["bo"]

