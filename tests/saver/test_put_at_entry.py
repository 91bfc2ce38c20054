"""Nothing LangGraph may still change is read after put or put_writes is entered (issue 26).

Under durability "async" LangGraph runs the next super-step while a put waits, and what it
handed over may change in place meanwhile (langgraph#8748). So a put serializes its checkpoint,
metadata and writes before its first request, and builds every request it sends from those
bytes. Each test changes the value LangGraph handed over after the put's first request, on
one path that sends again (a resend with every chunk, the schema set up first, a batch shared
by group commit), and reads back the value as it was when the put was entered. The two
resend tests failed before (the resend serialized the values again); the other two guard paths
that already sent what was built at entry.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from langchain_core.messages import AIMessage
from langgraph.checkpoint.conformance.test_utils import generate_checkpoint

from d1saver.local import LocalD1Transport
from tests.conftest import Backend
from d1saver.storage import chunking as _chunking
from tests.saver.content import converse, new_thread, query
from tests.saver.test_content import delete_a_listed_chunk

LATER = AIMessage("written by the next super-step", id="later")


class AfterResponse(httpx.BaseTransport, httpx.AsyncBaseTransport):
    """The local D1's transport; once armed, it runs `act` once, after the first response
    whose body `matches` (before the saver sees it): LangGraph's next step changing what a
    put holds."""

    def __init__(self, inner: LocalD1Transport, matches: Callable[[bytes], bool]) -> None:
        self.inner, self.matches, self.done = inner, matches, False
        self.act: Callable[[], None] | None = None

    def _after(self, response: httpx.Response) -> httpx.Response:
        if self.act is not None and not self.done and self.matches(response.read()):
            self.done = True
            self.act()
        return response

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        return self._after(self.inner.handle_request(request))

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await self.inner.handle_async_request(request)
        await response.aread()
        return self._after(response)


def _chunk_missing(body: bytes) -> bool:
    return b"chunk_missing" in body


def test_put_resent_with_every_chunk_stores_the_checkpoint_as_entered(local: Backend) -> None:
    """The put lists a chunk deleted behind the saver's back: its batch fails on
    chunk_missing and is built again with every chunk, from the bytes taken at entry."""
    assert local.engine is not None
    transport = AfterResponse(LocalD1Transport(local.engine), _chunk_missing)
    saver = local.saver(transport=transport)
    tid = new_thread()
    converse(saver, tid)
    head = saver.get_tuple({"configurable": {"thread_id": tid}})
    assert head is not None
    delete_a_listed_chunk(saver, head.config)
    entered = list(head.checkpoint["channel_values"]["messages"])
    child = generate_checkpoint(channel_values={"messages": list(entered)})
    metadata: dict[str, Any] = {"step": 99, "source": "loop", "notes": ["entered"]}

    def next_step() -> None:
        child["channel_values"]["messages"].append(LATER)
        metadata["notes"].append("later")

    transport.act = next_step
    stored = saver.put(head.config, child, metadata, {})
    assert transport.done  # the resend happened, after the change
    got = saver.get_tuple(stored)
    assert got is not None
    assert got.checkpoint["channel_values"]["messages"] == entered
    assert got.metadata["notes"] == ["entered"]


def test_put_writes_resent_with_every_chunk_stores_the_writes_as_entered(local: Backend) -> None:
    """A write's piece deleted behind the saver's back (as in test_content's
    test_put_writes_recovers_from_a_chunk_deleted_behind_its_back)."""
    assert local.engine is not None
    transport = AfterResponse(LocalD1Transport(local.engine), _chunk_missing)
    saver = local.saver(transport=transport)
    tid = new_thread()
    converse(saver, tid)
    head = saver.get_tuple({"configurable": {"thread_id": tid}})
    assert head is not None
    messages = head.checkpoint["channel_values"]["messages"][-2:]
    written = [[m] for m in messages]
    entered = [[m] for m in messages]
    _, data = saver.serde.dumps_typed(written[0])
    (piece,) = [p.id for p in _chunking.split(data) if p.id]
    query(saver, "DELETE FROM d1saver_chunks WHERE thread_id = ?1 AND id = ?2", tid, piece)

    def next_step() -> None:
        written[0].append(LATER)

    transport.act = next_step
    saver.put_writes(head.config, [("messages", w) for w in written], "task-1")
    assert transport.done
    got = saver.get_tuple(head.config)
    assert got is not None and got.pending_writes is not None
    assert [v for t, _, v in got.pending_writes if t == "task-1"] == entered


@pytest.mark.anyio
async def test_aput_on_a_fresh_database_stores_the_checkpoint_as_entered(local: Backend) -> None:
    """The first put on a fresh database meets no table, sets the schema up, then sends its
    statements again."""
    entered = ["a", "b"]
    child = generate_checkpoint(channel_values={"seen": set(entered)})

    def next_step() -> None:
        child["channel_values"]["seen"].add("c")

    assert local.engine is not None
    transport = AfterResponse(LocalD1Transport(local.engine), lambda body: b"no such table" in body)
    transport.act = next_step
    config = {"configurable": {"thread_id": new_thread(), "checkpoint_ns": ""}}
    stored = await local.saver(transport=transport).aput(config, child, {"step": 0}, {})
    assert transport.done
    got = await local.saver().aget_tuple(stored)
    assert got is not None and got.checkpoint["channel_values"]["seen"] == set(entered)


@pytest.mark.anyio
async def test_aputs_sharing_a_group_commit_store_what_each_was_entered_with(
        local: Backend) -> None:
    """Puts arriving while one is in flight wait in group commit's queue: a change made while
    they wait is not stored."""
    assert local.engine is not None
    saver = local.saver(transport=LocalD1Transport(local.engine, latency_ms=20))
    await saver.asetup()
    tid = new_thread()
    children = [generate_checkpoint(channel_values={"log": [f"c{i}"]}) for i in range(4)]
    config = {"configurable": {"thread_id": tid, "checkpoint_ns": ""}}
    puts = [asyncio.ensure_future(saver.aput(config, c, {"step": i}, {}))
            for i, c in enumerate(children)]
    await asyncio.sleep(0)  # every put entered: the first in flight, the others queued
    for c in children:
        c["channel_values"]["log"].append("later")
    stored = await asyncio.gather(*puts)
    for i, conf in enumerate(stored):
        got = await saver.aget_tuple(conf)
        assert got is not None and got.checkpoint["channel_values"]["log"] == [f"c{i}"]
    await saver.aclose()


def test_held_writes_resent_with_every_chunk_store_the_writes_as_entered(
        local: Backend, monkeypatch: pytest.MonkeyPatch) -> None:
    """A step's put_writes held for its put (group commit, durability "sync") are changed by
    the next super-step while they wait; the put carries them, the batch fails on
    chunk_missing, and the write is built again with every chunk: from the bytes taken when
    put_writes was entered, not from what LangGraph holds by then."""
    from d1saver.http import group_commit
    from tests.saver.test_group_commit import Caller, in_run, wait_until

    monkeypatch.setattr(group_commit, "HOLD_WINDOWS", 100_000)  # held until the put comes
    monkeypatch.setattr(group_commit, "MAX_HOLD", 100_000.0)
    assert local.engine is not None
    saver = local.saver()
    tid = new_thread()
    converse(saver, tid)
    head = saver.get_tuple({"configurable": {"thread_id": tid}})
    assert head is not None
    messages = head.checkpoint["channel_values"]["messages"][-2:]
    written = [[m] for m in messages]
    entered = [[m] for m in messages]
    _, data = saver.serde.dumps_typed(written[0])
    (piece,) = [p.id for p in _chunking.split(data) if p.id]
    query(saver, "DELETE FROM d1saver_chunks WHERE thread_id = ?1 AND id = ?2", tid, piece)

    queue = saver.driver.group.queue(None)
    writer = Caller(lambda: saver.put_writes(in_run(head.config),
                                             [("answers", w) for w in written], "task-1"))
    writer.start()
    wait_until(lambda: len(queue.pending) == 1)  # held: it waits for its step's put
    written[0].append(LATER)  # the next super-step
    child = generate_checkpoint(channel_values={"messages": list(messages)})
    saver.put(in_run(head.config), child, {"step": 99}, {})
    writer.join(10)
    assert writer.finished and writer.error is None, writer.error
    got = saver.get_tuple(head.config)
    assert got is not None and got.pending_writes is not None
    assert [v for t, _, v in got.pending_writes if t == "task-1"] == entered
