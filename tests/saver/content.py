"""Helpers for the tests of content-addressed values (d1saver_chunks, migration 7): a real
conversation to store, what the chunk table holds, and the exactness check (admin.chunk_check)."""

from __future__ import annotations

import uuid
from collections import Counter
from typing import Any

from langchain_core.messages import HumanMessage, ToolMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import CheckpointTuple
from langgraph.graph.state import CompiledStateGraph

from benchmarks.workload import build_graph, first_input, prose
from d1saver import D1Saver, Statement, admin
from d1saver.storage import chunking as _chunking


def new_thread(prefix: str = "ca") -> str:
    # Unique per call: the real-engine tests share one database.
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def converse(saver: Any, thread_id: str, *, turns: int = 6, run_id: str | None = None,
             variant: str = "plain", **options: Any) -> tuple[CompiledStateGraph, RunnableConfig]:
    """The benchmark's agent (3 parallel tools per turn) run to its answer on `thread_id`:
    checkpoints hold "m:" manifests with tree nodes, tool calls leave packed "p:" writes."""
    graph = build_graph(saver, variant=variant, turns=turns, **options)
    config: RunnableConfig = {"configurable": {"thread_id": thread_id}}
    if run_id is not None:
        config["metadata"] = {"run_id": run_id}
    graph.invoke(first_input(), config)
    return graph, {"configurable": {"thread_id": thread_id}}


def fork(graph: CompiledStateGraph, saver: Any, thread_id: str, *, back: int = 5,
         run_id: str | None = None) -> RunnableConfig:
    """Time travel: a new head forked from the thread's `back`-th oldest checkpoint, adding a
    message of its own. Returns the old branch's head. An append-only conversation frees no
    chunk when its older checkpoints go (its head reaches every message and node); the turns
    after the fork point are reached only by the old branch."""
    config: RunnableConfig = {"configurable": {"thread_id": thread_id}}
    old_head = saver.get_tuple(config)
    at = list(saver.list(config))[-back]
    if run_id is not None:
        at = at._replace(config={**at.config, "metadata": {"run_id": run_id}})
    graph.update_state(at.config, {"messages": [HumanMessage(prose(f"fork-{thread_id}"),
                                                             id=f"fork-{thread_id}")]},
                       as_node="tool")
    return old_head.config


def copy_setup(saver: Any, source: str, target: str) -> tuple[CompiledStateGraph, RunnableConfig, list[Any]]:
    """A source conversation, and a target holding another one (older checkpoint ids, which
    a copy keeps) plus a checkpoint under the id of the source's head with other content (which
    a copy replaces). Returns the source's graph and config, and the replaced messages."""
    converse(saver, target, turns=3, fanout=4)
    graph, source_config = converse(saver, source, turns=4)
    head = saver.get_tuple(source_config)
    assert head is not None
    replaced = [ToolMessage(prose(f"replaced-{i}"), tool_call_id="x", id=f"r{i}") for i in range(3)]
    saver.put({"configurable": {"thread_id": target, "checkpoint_ns": ""}},
              {**head.checkpoint, "channel_values": {"messages": replaced}}, head.metadata, {})
    return graph, source_config, replaced


def query(saver: D1Saver, sql: str, *params: Any) -> list[list[Any]]:
    """Raw SQL through the client: the saver itself learns and forgets nothing."""
    (result,) = saver.client.execute([Statement(sql, params)])
    return result.rows


def chunk_levels(saver: D1Saver, thread_id: str) -> Counter[int]:
    """The thread's stored chunks per level (0: bytes, n: tree nodes)."""
    return Counter({int(level): int(n) for level, n in query(
        saver, "SELECT level, COUNT(*) FROM d1saver_chunks WHERE thread_id = ?1 GROUP BY level",
        thread_id)})


def chunk_ids(saver: D1Saver, thread_id: str) -> set[str]:
    return {r[0] for r in query(saver, "SELECT id FROM d1saver_chunks WHERE thread_id = ?1",
                                thread_id)}


def markers(saver: D1Saver, thread_id: str) -> Counter[str]:
    """How the thread's rows are stored: checkpoints and writes per marker ("m:", "p:", "d:"...)."""
    rows = query(saver, "SELECT 'c' || substr(checkpoint, 1, 2) FROM checkpoints WHERE thread_id = ?1"
                        " UNION ALL SELECT 'w' || substr(value, 1, 2) FROM writes"
                        " WHERE thread_id = ?1", thread_id)
    return Counter(r[0] for r in rows)


def inexact(saver: D1Saver, thread_id: str | None) -> list[admin.InexactThread]:
    """What the check finds (one thread: the real engine's database is shared)."""
    (result,) = saver.client.execute([admin.chunk_check(thread_id)])
    return admin.inexact_threads(result)


def assert_exact(saver: D1Saver, *thread_ids: str) -> None:
    """No chunk referenced but missing, none stored but unreferenced."""
    for thread_id in thread_ids:
        assert inexact(saver, thread_id) == [], thread_id


def conversation_head(saver: Any) -> tuple[str, CheckpointTuple, list[Any]]:
    """A new thread conversed to its answer: its id, its head, and the head's last two messages."""
    tid = new_thread()
    converse(saver, tid)
    head = saver.get_tuple({"configurable": {"thread_id": tid}})
    assert head is not None
    return tid, head, head.checkpoint["channel_values"]["messages"][-2:]


def delete_a_written_piece(saver: Any, thread_id: str, written: list[Any]) -> str:
    """Delete, behind the saver's back, the one stored piece a write of `written` (a list the
    thread holds) names; returns its id."""
    _, data = saver.serde.dumps_typed(written)
    (piece,) = [p.id for p in _chunking.split(data) if p.id]
    assert piece in chunk_ids(saver, thread_id)
    query(saver, "DELETE FROM d1saver_chunks WHERE thread_id = ?1 AND id = ?2", thread_id, piece)
    return piece
