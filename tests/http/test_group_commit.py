"""Group commit: writes queued behind an in-flight request leave together, each with its own outcome."""

from __future__ import annotations

import asyncio
import gc
import json
import threading
import time
from collections.abc import Callable

import httpx
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
from d1saver.http import runner
from d1saver.local import FaultPlan, LocalD1, LocalD1Transport
from tests.conftest import LOCAL_BASE_URL


class Gate(httpx.BaseTransport, httpx.AsyncBaseTransport):
    """The local D1's transport with a hand on requests, by a word their body holds: `hold`
    keeps such a request until `release()`; `fail` raises a RuntimeError instead of sending
    it (a bug under the client); `bad` appends a statement D1 refuses (an SQL error)."""

    def __init__(self, inner: LocalD1Transport) -> None:
        self.inner = inner
        self.hold: str | None = None
        self.fail: str | None = None
        self.bad: str | None = None
        self.released = threading.Event()
        self.arrived = 0  # requests that reached the gate

    def release(self) -> None:
        self.released.set()

    def _check(self, request: httpx.Request) -> tuple[httpx.Request, bool]:
        self.arrived += 1
        body = request.read().decode()
        if self.fail is not None and self.fail in body:
            raise RuntimeError("a bug under the client")
        if self.bad is not None and self.bad in body:
            parsed = json.loads(body)
            items = parsed["batch"] if "batch" in parsed else [parsed]
            items.append({"sql": "SELECT * FROM no_such_table", "params": []})
            request = httpx.Request(request.method, request.url, headers=request.headers,
                                    content=json.dumps({"batch": items}).encode())
        return request, self.hold is not None and self.hold in body

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        request, held = self._check(request)
        if held:
            assert self.released.wait(10)
        return self.inner.handle_request(request)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        request, held = self._check(request)
        while held and not self.released.is_set():
            await asyncio.sleep(0.001)
        return await self.inner.handle_async_request(request)


def make(latency_ms: float = 30.0, **kwargs) -> tuple[D1Saver, LocalD1, list]:
    engine = LocalD1()
    events: list = []
    saver = D1Saver(account_id="a", database_id="d", api_token="t", api_base_url=LOCAL_BASE_URL,
                    transport=LocalD1Transport(engine, latency_ms=latency_ms), tracer=events.append,
                    **kwargs)
    return saver, engine, events


def gated(**kwargs) -> tuple[D1Saver, LocalD1, list, Gate]:
    engine = LocalD1()
    events: list = []
    gate = Gate(LocalD1Transport(engine))
    saver = D1Saver(account_id="a", database_id="d", api_token="t", api_base_url=LOCAL_BASE_URL,
                    transport=gate, tracer=events.append, **kwargs)
    return saver, engine, events, gate


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
    saver, engine, events, gate = gated()
    config = seeded(saver)
    gate.hold, gate.bad = "task-first", "task-bad"  # the others queue behind the first
    first = asyncio.create_task(saver.aput_writes(config, [("ch", "first")], "task-first"))
    while not gate.arrived:
        await asyncio.sleep(0.001)
    queued = asyncio.gather(saver.aput_writes(config, [("ch", "x")], "task-bad"),
                            saver.aput_writes(config, [("ch", "ok")], "task-ok"),
                            return_exceptions=True)
    await asyncio.sleep(0.05)
    gate.release()
    results = [await first, *await queued]
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


# --- whatever stops a caller, no write is stranded (defect 1) -------------------------------


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


def idle(saver: D1Saver) -> bool:
    queue = saver.driver.group.queue(None)
    return (queue.pending, queue.inflight) == ([], 0)


def test_ctrl_c_in_the_collection_window_strands_no_write(monkeypatch) -> None:
    """KeyboardInterrupt while a write waits in the window: that write is not sent, the write
    queued beside it still leaves on its own, the queue is left empty, and the saver's next
    write goes through."""
    saver, engine, events, gate = gated()
    config = seeded(saver)
    queue = saver.driver.group.queue(None)
    gate.hold = "task-first"
    first = Caller(lambda: saver.put_writes(config, [("ch", 1)], "task-first"))
    first.start()
    wait_until(lambda: queue.inflight == 1)
    queued = Caller(lambda: saver.put_writes(config, [("ch", 3)], "task-queued"))
    main, real_wait = threading.current_thread(), runner.Signal.wait

    def wait(signal: runner.Signal, timeout: float | None) -> None:
        if threading.current_thread() is not main:
            return real_wait(signal, timeout)
        queued.start()  # another thread's write joins the queue during the window
        wait_until(lambda: len(queue.pending) == 2)
        raise KeyboardInterrupt

    monkeypatch.setattr(runner.Signal, "wait", wait)
    with pytest.raises(KeyboardInterrupt):
        saver.put_writes(config, [("ch", 2)], "task-collector")
    monkeypatch.setattr(runner.Signal, "wait", real_wait)
    assert queued.outcome() is None  # sent by itself, not stranded behind the interrupted one
    gate.release()
    assert first.outcome() is None
    later = Caller(lambda: saver.put_writes(config, [("ch", 4)], "task-later"))
    later.start()
    assert later.outcome() is None
    assert idle(saver)
    assert stored_tasks(saver, config) == ["task-first", "task-later", "task-queued"]


def test_a_foreign_exception_in_a_send_strands_no_write(monkeypatch) -> None:
    """A non-D1Error from one batch's send fails that batch's callers only; the writes queued
    behind it in further batches are still sent, and later writes flow."""
    monkeypatch.setattr(group_commit, "MAX_OPS", 1)  # one write per batch: three batches queue
    saver, engine, events, gate = gated()
    config = seeded(saver)
    queue = saver.driver.group.queue(None)
    gate.hold, gate.fail = "task-first", "task-boom"
    first = Caller(lambda: saver.put_writes(config, [("ch", 1)], "task-first"))
    first.start()
    wait_until(lambda: queue.inflight == 1)
    boom = Caller(lambda: saver.put_writes(config, [("ch", 2)], "task-boom"))
    boom.start()
    queued = [Caller(lambda i=i: saver.put_writes(config, [("ch", i)], f"task-q{i}"))
              for i in range(2)]
    for caller in queued:
        caller.start()
    assert isinstance(boom.outcome(), RuntimeError)
    assert [caller.outcome() for caller in queued] == [None, None]
    gate.release()
    assert first.outcome() is None
    later = Caller(lambda: saver.put_writes(config, [("ch", 5)], "task-later"))
    later.start()
    assert later.outcome() is None
    assert idle(saver)
    assert stored_tasks(saver, config) == ["task-first", "task-later", "task-q0", "task-q1"]


@pytest.mark.anyio
async def test_a_foreign_exception_in_an_async_send_fails_only_its_batch(monkeypatch) -> None:
    """The async committer: a non-D1Error in one batch fails that batch alone; the batches
    queued behind it are still sent (not failed as if the loop were closing)."""
    monkeypatch.setattr(group_commit, "MAX_OPS", 1)
    saver, engine, events, gate = gated()
    config = seeded(saver)
    gate.hold, gate.fail = "task-first", "task-boom"
    first = asyncio.create_task(saver.aput_writes(config, [("ch", 1)], "task-first"))
    await asyncio.sleep(0)
    queued = [asyncio.create_task(saver.aput_writes(config, [("ch", i)], f"task-{name}"))
              for i, name in enumerate(["boom", "q0", "q1"])]
    results = await asyncio.gather(*queued, return_exceptions=True)
    gate.release()
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
    saver, engine, events, gate = gated(retry=RetryPolicy.none())
    config = seeded(saver)
    gate.hold = "task-first"
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
    gate.release()
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
    # A finished loop can wait in a reference cycle for the collector (its weak keys go then):
    # what must not happen is a loop kept alive by the saver.
    gc.collect()
    assert len(saver.driver.group._loops) <= 1
    assert len(saver.client._async) <= 1
    assert len(saver.driver._arunning) <= 1
    assert loops() - before <= 1


# --- the floor: a step's writes ride with its put (issue 31) ----------------------------------


@pytest.fixture
def forever(monkeypatch: pytest.MonkeyPatch) -> None:
    """A held write waits for a put as long as it takes: no test depends on how long a busy
    machine takes between a write and its put, and a write held by mistake hangs."""
    monkeypatch.setattr(group_commit, "HOLD_WINDOWS", 100_000)
    monkeypatch.setattr(group_commit, "MAX_HOLD", 100_000.0)


def in_run(config: dict, durability: str = "sync") -> dict:
    """`config` as LangGraph's run loop passes it to put_writes: with the run's durability."""
    return {**config, "configurable": {**config["configurable"],
                                       "__pregel_durability": durability}}


def held_writers(saver: D1Saver, config: dict, n: int) -> list[Caller]:
    """n put_writes of one step, each on its own thread, all held for the step's put."""
    queue = saver.driver.group.queue(None)
    writers = [Caller(lambda i=i: saver.put_writes(in_run(config), [("ch", i)], f"task-{i}"))
               for i in range(n)]
    for w in writers:
        w.start()
    wait_until(lambda: len(queue.pending) == n)
    return writers


def test_held_writes_ride_with_the_put_and_return_only_once_it_committed(forever: None) -> None:
    """The step's put_writes wait for its put, which leaves at once and carries them: one
    request. None returns before that batch has committed (the batch is held at the
    transport: all its callers still wait)."""
    saver, engine, events, gate = gated()
    config = seeded(saver)
    before = len(events)
    writers = held_writers(saver, config, 3)
    assert len(events) == before  # nothing sent: the writes wait for the put
    gate.hold, arrived = '"t"', gate.arrived  # the put's batch, carrying the writes, is held
    put = Caller(lambda: saver.put(in_run(config), generate_checkpoint(), {}, {}))
    put.start()
    wait_until(lambda: gate.arrived == arrived + 1)
    time.sleep(0.05)
    assert not any(w.finished for w in [*writers, put])  # acknowledged means stored
    gate.release()
    assert [w.outcome() for w in [*writers, put]] == [None] * 4
    assert len(events) - before == 1
    assert sorted(w[2] for w in saver.get_tuple(config).pending_writes) == [0, 1, 2]
    assert idle(saver)


def test_a_held_write_leaves_when_no_put_follows() -> None:
    """A held write whose put never comes (the run ended) still leaves, alone, soon after."""
    saver, engine, events, gate = gated()
    config = seeded(saver)
    before = len(events)
    writer = Caller(lambda: saver.put_writes(in_run(config), [("ch", 1)], "task"))
    writer.start()
    assert writer.outcome() is None
    assert len(events) - before == 1
    assert stored_tasks(saver, config) == ["task"]


@pytest.mark.anyio
async def test_a_held_async_write_leaves_when_no_put_follows() -> None:
    saver, engine, events, gate = gated()
    config = seeded(saver)
    before = len(events)
    await asyncio.wait_for(saver.aput_writes(in_run(config, "async"), [("ch", 1)], "task"), 10)
    assert len(events) - before == 1
    assert stored_tasks(saver, config) == ["task"]


@pytest.mark.parametrize("plan", [FaultPlan(rate_5xx=1.0), FaultPlan(rate_transient=1.0)],
                         ids=["5xx", "transient"])
def test_an_error_in_the_carrying_batch_reaches_every_held_write(forever: None,
                                                                  plan: FaultPlan) -> None:
    """The put's batch fails (retries spent): the put and every write it carried get that
    error, in one request."""
    saver, engine, events, gate = gated(retry=RetryPolicy.none())
    config = seeded(saver)
    writers = held_writers(saver, config, 3)
    engine.faults = plan
    before = len(events)
    with pytest.raises(D1Error) as caught:
        saver.put(in_run(config), generate_checkpoint(), {}, {})
    errors = [w.outcome() for w in writers]
    assert len(events) - before == 1
    assert all(e is caught.value for e in errors)


@pytest.mark.anyio
async def test_an_error_in_the_carrying_batch_reaches_every_held_async_write(forever: None) -> None:
    saver, engine, events, gate = gated(retry=RetryPolicy.none())
    config = seeded(saver)
    writes = [asyncio.create_task(saver.aput_writes(in_run(config, "async"), [("ch", i)],
                                                    f"task-{i}")) for i in range(3)]
    await asyncio.sleep(0.001)
    engine.faults = FaultPlan(rate_5xx=1.0)
    before = len(events)
    results = await asyncio.gather(saver.aput(in_run(config, "async"), generate_checkpoint(),
                                              {}, {}), *writes, return_exceptions=True)
    assert len(events) - before == 1
    assert all(isinstance(r, ServerError) for r in results) and len({id(r) for r in results}) == 1
    engine.faults = None


@pytest.mark.parametrize("writes", [
    [("messages", "m")],  # a DeltaChannel named by the checkpoint's counters
    [("notes", "n")],  # a DeltaChannel snapshotted at the checkpoint
    [("ch", 1), ("__interrupt__", "why")],  # an interrupt ends the run: no put follows
    [("ch", 1), ("__error__", "boom")],  # so does an error
    [("ch", 1), ("__error_source_node__", "node")],  # LangGraph waits on it before a handler
], ids=["delta-counted", "delta-snapshotted", "interrupt", "error", "error-source"])
def test_what_langgraph_waits_on_is_never_held(forever: None, writes: list) -> None:
    from langgraph.checkpoint.serde.types import _DeltaSnapshot

    saver, engine, events, gate = gated()
    saver.setup()
    checkpoint = generate_checkpoint()
    checkpoint["channel_values"]["notes"] = _DeltaSnapshot(["n0"])
    config = saver.put(generate_config("t"), checkpoint,
                       {"counters_since_delta_snapshot": {"messages": [1, 1]}}, {})
    before = len(events)
    writer = Caller(lambda: saver.put_writes(in_run(config), writes, "task"))
    writer.start()
    assert writer.outcome() is None  # left at once: no put came, none was needed
    assert len(events) - before == 1


@pytest.mark.parametrize("case", ["no run", "exit", "unseen thread", "other namespace",
                                  "after its put"])
def test_writes_no_put_is_known_to_follow_are_never_held(forever: None, case: str) -> None:
    """update_state waits on its put_writes before its put (its config names no run), a
    run under durability "exit" writes after its one put, a thread or namespace this process
    has seen no checkpoint of may have DeltaChannels it cannot know, and a task's write may
    reach the saver after its step's put has left (LangGraph's threads run out of order)."""
    saver, engine, events, gate = gated()
    config = seeded(saver)
    conf = dict(config["configurable"])
    if case == "after its put":
        saver.put(in_run(config), generate_checkpoint(), {}, {})
        write_config = in_run(config)
    elif case == "no run":
        write_config = config
    elif case == "exit":
        write_config = in_run(config, "exit")
    elif case == "unseen thread":
        write_config = in_run({"configurable": {**conf, "thread_id": "another"}})
    else:
        write_config = in_run({"configurable": {**conf, "checkpoint_ns": "child:1"}})
    writer = Caller(lambda: saver.put_writes(write_config, [("ch", 1)], "task"))
    writer.start()
    assert writer.outcome() is None


@pytest.mark.parametrize("variant", ["plain", "delta"])
@pytest.mark.parametrize(("api", "durability"), [
    ("invoke", "sync"), ("invoke", "async"), ("ainvoke", "sync"), ("ainvoke", "async")])
def test_no_run_waits_on_a_held_write(forever: None, variant: str, api: str,
                                      durability: str) -> None:
    """With writes held for as long as no put comes, the agent still finishes on every API
    and durability: each held write rides with a put, and LangGraph never waits on one (a
    DeltaChannel's writes leave at once), so no run depends on a hold running out."""
    from benchmarks.workload import build_graph, first_input

    saver, engine, events, gate = gated()
    saver.setup()
    graph = build_graph(saver, variant=variant, turns=4, fanout=3)
    config = {"configurable": {"thread_id": f"agent-{variant}"}}
    if api == "invoke":
        run = Caller(lambda: graph.invoke(first_input(), config, durability=durability))
    else:
        run = Caller(lambda: asyncio.run(graph.ainvoke(first_input(), config,
                                                       durability=durability)))
    run.start()
    run.join(60)
    assert run.finished and run.error is None
    assert len(list(saver.list(config))) == 2 * 4 + 1


def test_a_put_waits_for_the_writes_of_its_step_on_their_way(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """LangGraph runs a task's put_writes and the step's put on threads of their own, so the
    put can reach group commit while a write of its step is still being built: the write
    announced itself (`Expect`), the put waits for it, and both leave in one request."""
    monkeypatch.setattr(group_commit, "EXPECT_MAX", 100_000.0)
    from d1saver.ops import statements as st

    saver, engine, events, gate = gated()
    config = seeded(saver)
    building, go = threading.Event(), threading.Event()
    real = st.put_writes_statements

    def slow(*args, **kwargs):  # the write's statements take until `go` to build
        building.set()
        assert go.wait(10)
        return real(*args, **kwargs)

    monkeypatch.setattr(st, "put_writes_statements", slow)
    before = len(events)
    writer = Caller(lambda: saver.put_writes(in_run(config), [("ch", 1)], "task"))
    writer.start()
    assert building.wait(10)
    put = Caller(lambda: saver.put(in_run(config), generate_checkpoint(), {}, {}))
    put.start()
    wait_until(lambda: any(t.timing == "now" for t in saver.driver.group.queue(None).pending))
    go.set()
    assert (writer.outcome(), put.outcome()) == (None, None)
    assert len(events) - before == 1
    assert stored_tasks(saver, config) == ["task"]
