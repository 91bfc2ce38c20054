"""Tests of the compaction job and its commands; the helpers both test modules use."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any

import httpx
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import empty_checkpoint

from d1saver import D1Saver, Statement

NOW = datetime.now(timezone.utc).isoformat()
LONG_AGO = "2020-01-01T00:00:00+00:00"
BIG = 2_000_000  # bytes: over D1's 2 MB value limit once encoded, so stored as chunks


# --- helpers: threads -------------------------------------------------------------------------


def new_thread() -> str:
    # Unique per call: the real engine's dev Worker puts every database id in one database.
    return f"t-{uuid.uuid4().hex[:12]}"


def cfg(thread_id: str, ns: str = "", checkpoint_id: str | None = None) -> RunnableConfig:
    conf: dict[str, Any] = {"thread_id": thread_id, "checkpoint_ns": ns}
    if checkpoint_id is not None:
        conf["checkpoint_id"] = checkpoint_id
    return {"configurable": conf}


def checkpoint_id(i: int) -> str:
    """Ids that sort by i, shaped like LangGraph's uuid6 ids."""
    return f"1f000000-0000-6000-8000-{i:012d}"


def put_chain(saver: D1Saver, thread_id: str, n: int, *, ns: str = "", ts: str = NOW,
              writes: int = 1, value: Callable[[int], Any] = str) -> list[RunnableConfig]:
    """n linked checkpoints in (thread_id, ns), each holding value(i) and with `writes` pending
    writes of it; configs oldest first."""
    parent, out = cfg(thread_id, ns), []
    for i in range(n):
        parent = put_checkpoint(saver, parent, i, ts=ts, value=value)
        if writes:
            saver.put_writes(parent, [("x", value(i)) for _ in range(writes)], task_id=f"task-{i}")
        out.append(parent)
    return out


def put_checkpoint(saver: D1Saver, parent: RunnableConfig, i: int, *, ts: str = NOW,
                   value: Callable[[int], Any] = str) -> RunnableConfig:
    """Checkpoint `checkpoint_id(i)` holding value(i), child of `parent`; returns its config."""
    cp = empty_checkpoint()
    cp.update(id=checkpoint_id(i), ts=ts, channel_values={"x": value(i)},
              channel_versions={"x": str(i + 1)})
    return saver.put(parent, cp, {"source": "loop", "step": i, "parents": {}}, {})


def query(saver: D1Saver, sql: str, *params: Any) -> list[list[Any]]:
    (result,) = saver.client.execute([Statement(sql, params)])
    return result.rows


def ids_in(saver: D1Saver, thread_id: str, ns: str = "") -> list[str]:
    """Checkpoint ids of one (thread, namespace), oldest first."""
    return [r[0] for r in query(saver, "SELECT checkpoint_id FROM checkpoints WHERE thread_id = ?1"
                                       " AND checkpoint_ns = ?2 ORDER BY checkpoint_id", thread_id, ns)]


# --- helpers: requests --------------------------------------------------------------------------


def statements_of(request: httpx.Request) -> list[dict[str, Any]]:
    """The {"sql", "params"} items of a D1 request (one statement or a batch)."""
    body = json.loads(request.content)
    return body["batch"] if "batch" in body else [body]
