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
from d1saver.local import FaultPlan, LocalD1Transport
from d1saver.sql.query import Query

NOW = datetime.now(timezone.utc).isoformat()
LONG_AGO = "2020-01-01T00:00:00+00:00"
BIG = 2_000_000  # bytes: over D1's 2 MB value limit once encoded, so stored as chunks


# --- helpers: threads -------------------------------------------------------------------------


def new_thread() -> str:
    # Unique per call: the real-engine tests all share one database (tests/realengine.py).
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


# --- helpers: faults --------------------------------------------------------------------------


def statements_of(request: httpx.Request) -> list[dict[str, Any]]:
    """The {"sql", "params"} items of a D1 request (one statement or a batch)."""
    body = json.loads(request.content)
    return body["batch"] if "batch" in body else [body]


class LoseFirstResponse(httpx.BaseTransport, httpx.AsyncBaseTransport):
    """The local D1's transport, except that the first attempt of each request carrying `sql`
    commits and then loses its response (the engine's FaultPlan(rate_lost_response=1.0), for
    that attempt only). The client retries the same request; `lost` counts the lost answers."""

    def __init__(self, inner: LocalD1Transport, query: Query) -> None:
        self.inner, self.sql = inner, query.sql
        self.seen: set[bytes] = set()
        self.lost = 0

    def _arm(self, request: httpx.Request) -> bool:
        if request.content in self.seen:
            return False
        if not any(item["sql"] == self.sql for item in statements_of(request)):
            return False
        self.seen.add(request.content)
        self.lost += 1
        self.inner.engine.faults = FaultPlan(rate_lost_response=1.0)
        return True

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        armed = self._arm(request)
        try:
            return self.inner.handle_request(request)
        finally:
            if armed:
                self.inner.engine.faults = None

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        armed = self._arm(request)
        try:
            return await self.inner.handle_async_request(request)
        finally:
            if armed:
                self.inner.engine.faults = None
