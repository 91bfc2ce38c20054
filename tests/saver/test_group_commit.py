"""Group commit: writes queued behind an in-flight request leave together, each with its own outcome."""

from __future__ import annotations

import asyncio
import threading

import pytest
from langgraph.checkpoint.conformance.test_utils import generate_checkpoint, generate_config

from d1saver import D1Saver, SerializationError
from d1saver.local import LocalD1, LocalD1Transport
from tests.conftest import LOCAL_BASE_URL


def make(latency_ms: float = 30.0) -> tuple[D1Saver, LocalD1, list]:
    engine = LocalD1()
    events: list = []
    saver = D1Saver(account_id="a", database_id="d", api_token="t", api_base_url=LOCAL_BASE_URL,
                    transport=LocalD1Transport(engine, latency_ms=latency_ms), tracer=events.append)
    return saver, engine, events


def seeded(saver: D1Saver) -> dict:
    saver.setup()
    return saver.put(generate_config("t"), generate_checkpoint(), {}, {})


@pytest.mark.anyio
async def test_parallel_writes_share_one_request_after_the_first() -> None:
    """Five concurrent put_writes: the first goes alone, the four queued behind it go as one batch."""
    saver, engine, events = make()
    config = seeded(saver)
    before = len(events)
    await asyncio.gather(*(saver.aput_writes(config, [("ch", i)], f"task-{i}") for i in range(5)))
    assert len(events) - before == 2
    tup = await saver.aget_tuple(config)
    assert sorted(w[2] for w in tup.pending_writes) == [0, 1, 2, 3, 4]


@pytest.mark.anyio
async def test_failed_write_in_a_merged_batch_fails_alone() -> None:
    """A write D1 refuses (a missing table here) fails its caller only; the others commit."""
    saver, engine, events = make()
    config = seeded(saver)
    bad = dict(config, configurable=dict(config["configurable"]))
    real_asend = saver.driver.group._asend

    async def asend(statements):
        # Make the batch holding task-bad fail in D1, as a refused statement would.
        if any("bad" in str(s.params) for s in statements):
            from d1saver import Statement
            statements = [*statements, Statement("SELECT * FROM no_such_table")]
        return await real_asend(statements)

    saver.driver.group._asend = asend
    results = await asyncio.gather(
        saver.aput_writes(config, [("ch", "first")], "task-first"),
        saver.aput_writes(bad, [("ch", "x")], "task-bad"),
        saver.aput_writes(config, [("ch", "ok")], "task-ok"),
        return_exceptions=True)
    assert results[0] is None and results[2] is None
    assert "no such table" in str(results[1])
    tup = await saver.aget_tuple(config)
    assert sorted(w[2] for w in tup.pending_writes) == ["first", "ok"]


def test_threads_share_requests_too() -> None:
    """Sync callers on threads (LangGraph's sync executor) are merged the same way."""
    saver, engine, events = make()
    config = seeded(saver)
    before = len(events)
    start = threading.Barrier(6)

    def write(i: int) -> None:
        start.wait()
        saver.put_writes(config, [("ch", i)], f"task-{i}")

    threads = [threading.Thread(target=write, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(events) - before < 6
    assert sorted(w[2] for w in saver.get_tuple(config).pending_writes) == list(range(6))


def test_unserializable_value_raises_before_any_request() -> None:
    """A value the serializer refuses is a typed error at the caller; nothing is sent."""
    saver, engine, events = make(0)
    config = seeded(saver)
    before = len(events)
    with pytest.raises(SerializationError):
        saver.put_writes(config, [("ch", object())], "task")
    assert len(events) == before


@pytest.mark.anyio
async def test_a_cancelled_waiter_neither_loses_its_write_nor_blocks_later_ones() -> None:
    """Cancelling a caller queued behind an in-flight write: its write still lands, later writes flow."""
    saver, engine, events = make(latency_ms=50)
    config = seeded(saver)
    first = asyncio.create_task(saver.aput_writes(config, [("ch", "first")], "task-first"))
    await asyncio.sleep(0.01)  # first is in flight
    queued = asyncio.create_task(saver.aput_writes(config, [("ch", "queued")], "task-queued"))
    await asyncio.sleep(0.01)
    queued.cancel()
    await first
    with pytest.raises(asyncio.CancelledError):
        await queued
    await asyncio.wait_for(saver.aput_writes(config, [("ch", "later")], "task-later"), 5)
    tup = await saver.aget_tuple(config)
    assert sorted(w[2] for w in tup.pending_writes) == ["first", "later", "queued"]
