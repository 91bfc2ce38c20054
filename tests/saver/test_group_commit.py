"""Group commit: writes queued behind an in-flight request leave together, each with its own outcome."""

from __future__ import annotations

import asyncio
import gc
import threading
import time
import types
from collections.abc import Callable

import pytest
from langgraph.checkpoint.conformance.test_utils import generate_checkpoint, generate_config

import d1saver.http.group_commit as group_commit
from d1saver import (
    D1Error,
    D1Saver,
    RetryPolicy,
    SerializationError,
    ServerError,
    TransientQueryError,
)
from d1saver.local import FaultPlan, LocalD1, LocalD1Transport
from tests.conftest import LOCAL_BASE_URL


def make(latency_ms: float = 30.0, **kwargs) -> tuple[D1Saver, LocalD1, list]:
    engine = LocalD1()
    events: list = []
    saver = D1Saver(account_id="a", database_id="d", api_token="t", api_base_url=LOCAL_BASE_URL,
                    transport=LocalD1Transport(engine, latency_ms=latency_ms), tracer=events.append,
                    **kwargs)
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


# --- whatever stops the committer, no write is stranded (defect 1) ----------------------------


def stored_tasks(saver: D1Saver, config: dict) -> list[str]:
    return sorted(w[0] for w in saver.get_tuple(config).pending_writes)


def wait_until(condition: Callable[[], bool]) -> None:
    """Poll a condition another thread makes true (bounded, so a bug fails instead of hanging)."""
    for _ in range(5000):
        if condition():
            return
        time.sleep(0.001)
    raise AssertionError("condition never met")


class Caller(threading.Thread):
    """A write on its own thread, recording its outcome; daemon, so a hang cannot block pytest."""

    def __init__(self, write: Callable[[], object]) -> None:
        super().__init__(daemon=True)
        self.write, self.error, self.finished = write, None, False

    def run(self) -> None:
        try:
            self.write()
        except BaseException as exc:  # noqa: BLE001 - the outcome is what the test inspects
            self.error = exc
        self.finished = True

    def outcome(self) -> BaseException | None:
        self.join(timeout=10)
        assert self.finished, "the write hung"
        return self.error


def gate_first_send(saver: D1Saver) -> threading.Event:
    """Hold the saver's first group-commit request until the returned event is set, so the
    writes after it queue up behind a request in flight (no timing involved)."""
    group = saver.driver.group
    real, gate, calls = group._send, threading.Event(), []

    def send(statements):
        calls.append(1)
        if len(calls) == 1:
            assert gate.wait(10)
        return real(statements)

    group._send = send
    return gate


def test_ctrl_c_in_the_collection_window_strands_no_write(monkeypatch) -> None:
    """KeyboardInterrupt in the 10 ms window: the caller queued behind gets an error at once,
    the queue is reset, and the saver's next write goes through."""
    saver, engine, events = make(0)
    config = seeded(saver)
    group = saver.driver.group
    gate = gate_first_send(saver)
    first = Caller(lambda: saver.put_writes(config, [("ch", 1)], "task-first"))
    first.start()
    wait_until(lambda: group._inflight == 1)
    queued = Caller(lambda: saver.put_writes(config, [("ch", 3)], "task-queued"))

    def interrupted_sleep(seconds: float) -> None:
        queued.start()  # another thread's write joins the queue during the window
        wait_until(lambda: len(group._pending) == 2)
        raise KeyboardInterrupt

    monkeypatch.setattr(group_commit, "time", types.SimpleNamespace(sleep=interrupted_sleep))
    with pytest.raises(KeyboardInterrupt):
        saver.put_writes(config, [("ch", 2)], "task-collector")
    assert isinstance(queued.outcome(), D1Error)  # an error, not a hang
    assert "not sent" in str(queued.error)
    gate.set()
    assert first.outcome() is None
    monkeypatch.setattr(group_commit, "time", time)
    later = Caller(lambda: saver.put_writes(config, [("ch", 4)], "task-later"))
    later.start()
    assert later.outcome() is None
    assert (group._pending, group._collecting, group._inflight) == ([], False, 0)
    assert stored_tasks(saver, config) == ["task-first", "task-later"]


def test_a_foreign_exception_in_a_send_strands_no_write(monkeypatch) -> None:
    """A non-D1Error from one batch's send fails that batch's callers only; the writes queued
    behind it in further batches are still sent, and later writes flow."""
    monkeypatch.setattr(group_commit, "MAX_OPS", 1)  # one write per batch: three batches queue
    saver, engine, events = make(0)
    config = seeded(saver)
    group = saver.driver.group
    gate = gate_first_send(saver)
    gated_send = group._send

    def send(statements):
        if any("task-boom" in str(s.params) for s in statements):
            raise RuntimeError("a bug under the client")
        return gated_send(statements)

    group._send = send
    # The window lasts until all three writes are queued.
    monkeypatch.setattr(group_commit, "time", types.SimpleNamespace(
        sleep=lambda seconds: wait_until(lambda: len(group._pending) == 3)))
    first = Caller(lambda: saver.put_writes(config, [("ch", 1)], "task-first"))
    first.start()
    wait_until(lambda: group._inflight == 1)
    boom = Caller(lambda: saver.put_writes(config, [("ch", 2)], "task-boom"))
    boom.start()
    wait_until(lambda: group._collecting)
    queued = [Caller(lambda i=i: saver.put_writes(config, [("ch", i)], f"task-q{i}"))
              for i in range(2)]
    for caller in queued:
        caller.start()
    gate.set()
    assert first.outcome() is None
    assert isinstance(boom.outcome(), RuntimeError)
    assert [caller.outcome() for caller in queued] == [None, None]
    monkeypatch.setattr(group_commit, "time", time)
    later = Caller(lambda: saver.put_writes(config, [("ch", 5)], "task-later"))
    later.start()
    assert later.outcome() is None
    assert (group._pending, group._collecting, group._inflight) == ([], False, 0)
    assert stored_tasks(saver, config) == ["task-first", "task-later", "task-q0", "task-q1"]


def agate_first_send(saver: D1Saver, failing: str | None = None) -> asyncio.Event:
    """Async: hold the request of the write of "task-first" until the returned event is set;
    the request of the write of task `failing` raises a RuntimeError instead of being sent."""
    group = saver.driver.group
    real, gate = group._asend, asyncio.Event()

    async def asend(statements):
        if any("task-first" in str(s.params) for s in statements):
            await gate.wait()
        if failing is not None and any(failing in str(s.params) for s in statements):
            raise RuntimeError("a bug under the client")
        return await real(statements)

    group._asend = asend
    return gate


@pytest.mark.anyio
async def test_a_foreign_exception_in_an_async_send_fails_only_its_batch(monkeypatch) -> None:
    """The async committer: a non-D1Error in one batch fails that batch alone; the batches
    queued behind it are still sent (not failed as if the loop were closing)."""
    monkeypatch.setattr(group_commit, "MAX_OPS", 1)
    saver, engine, events = make(0)
    config = seeded(saver)
    gate = agate_first_send(saver, failing="task-boom")
    first = asyncio.create_task(saver.aput_writes(config, [("ch", 1)], "task-first"))
    await asyncio.sleep(0)
    queued = [asyncio.create_task(saver.aput_writes(config, [("ch", i)], f"task-{name}"))
              for i, name in enumerate(["boom", "q0", "q1"])]
    results = await asyncio.gather(*queued, return_exceptions=True)
    gate.set()
    await first
    assert isinstance(results[0], RuntimeError) and results[1:] == [None, None]
    await saver.aput_writes(config, [("ch", 5)], "task-later")
    tup = await saver.aget_tuple(config)
    assert sorted(w[0] for w in tup.pending_writes) == [
        "task-first", "task-later", "task-q0", "task-q1"]


# --- only an SQL error splits a merged batch (defect 2) ---------------------------------------


@pytest.mark.anyio
@pytest.mark.parametrize(("plan", "error"), [
    (FaultPlan(rate_5xx=1.0), ServerError),
    (FaultPlan(rate_transient=1.0), TransientQueryError),
], ids=["5xx", "transient"])
async def test_a_merged_batch_failing_on_the_server_is_not_resent_write_by_write(
        plan: FaultPlan, error: type) -> None:
    """A merged batch answered 503 (or a transient D1 error), retries exhausted: every write
    of it gets that error, in one request, not one more request per write."""
    saver, engine, events = make(0, retry=RetryPolicy.none())
    config = seeded(saver)
    gate = agate_first_send(saver)
    first = asyncio.create_task(saver.aput_writes(config, [("ch", 0)], "task-first"))
    await asyncio.sleep(0)
    engine.faults = plan
    before = len(events)
    results = await asyncio.gather(
        *(saver.aput_writes(config, [("ch", i)], f"task-{i}") for i in range(1, 4)),
        return_exceptions=True)
    assert len(events) - before == 1
    assert [type(r) for r in results] == [error] * 3
    assert results[0] is results[1] is results[2]
    engine.faults = None
    gate.set()
    await first


# --- no event loop is kept once finished (defect 16) ------------------------------------------


def test_asyncio_run_per_call_keeps_no_loop() -> None:
    """200 x asyncio.run(aput): the saver keeps O(1) per-loop state, not one per loop."""
    def loops() -> int:
        gc.collect()
        return sum(isinstance(o, asyncio.AbstractEventLoop) for o in gc.get_objects())

    saver, engine, events = make(0)
    saver.setup()
    before = loops()
    for i in range(200):
        asyncio.run(saver.aput(generate_config(f"t-{i}"), generate_checkpoint(), {}, {}))
    assert len(saver.driver.group._loops) <= 1
    assert len(saver.client._async) <= 1
    assert len(saver.driver._aonce) <= 1
    assert loops() - before <= 1
