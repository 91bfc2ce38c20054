"""Each chunk row is sent once: a step's put_writes held for its put (group commit) carry the
new messages' chunks, and the put, whose checkpoint lists the same messages, is built before
they are stored, so it carried them again (issues 27 and 31: 5 KB -> 12 KB of put chunks over
the benchmark's 30 turns). A batch now leaves out a row an earlier statement of it carries, and
one its thread came to hold since the put was built; a write sent apart (a split batch) still
carries all of its own. Counted from the statements each request sent (their `:chunks`
parameters), on the local D1."""

from __future__ import annotations

import asyncio
import json
import os
import threading
from collections import Counter
from typing import Any

import pytest
from langgraph.checkpoint.conformance.test_utils import generate_checkpoint

import d1saver.http.group_commit as group_commit
from d1saver import D1Saver
from d1saver.sql import catalogue as _sql
from tests.http.test_group_commit import (Caller, gated, idle, in_run, seeded,
                                          stored_tasks, wait_until)
from tests.saver.content import assert_exact

# A message each write appends: random (incompressible past hex), one chunk of its own.
SIZE = 6_000


def messages(n: int) -> list[str]:
    return [os.urandom(SIZE // 2).hex() for _ in range(n)]


def chunk_ids(event: Any) -> list[str]:
    """The ids of the chunk rows one request sent, every time it sent one."""
    ids: list[str] = []
    for stmt in event.statements:
        param = stmt.named().get("chunks")
        if isinstance(param, str):
            ids += [row[0] for row in json.loads(param)]
    return ids


def sent_twice(events: list) -> dict[str, int]:
    """Chunk rows sent more than once by these requests, with how many times."""
    counts = Counter(i for e in events for i in chunk_ids(e))
    return {i: n for i, n in counts.items() if n > 1}


@pytest.fixture
def forever(monkeypatch: pytest.MonkeyPatch) -> None:
    """A held write waits for its put however long the machine takes."""
    monkeypatch.setattr(group_commit, "HOLD_WINDOWS", 100_000)
    monkeypatch.setattr(group_commit, "MAX_HOLD", 100_000.0)


def step_writers(saver: D1Saver, config: dict, said: list[str]) -> list[Caller]:
    """One held put_writes per message, each appending it (`[message]`, as a node's state
    update does), on threads of their own as LangGraph's executor runs them."""
    queue = saver.driver.group.queue(None)
    writers = [Caller(lambda i=i, m=m: saver.put_writes(in_run(config), [("messages", [m])],
                                                        f"task-{i}"))
               for i, m in enumerate(said)]
    for w in writers:
        w.start()
    wait_until(lambda: len(queue.pending) == len(said))
    return writers


def test_a_step_sends_each_chunk_of_its_writes_once(forever: None) -> None:
    """Three held writes and the step's put, whose checkpoint holds their three messages: one
    request, each message's chunk in it once, and about one copy of the messages' bytes."""
    saver, engine, events, gate = gated()
    config = seeded(saver)
    said = messages(3)
    writers = step_writers(saver, config, said)
    before = len(events)
    child = saver.put(in_run(config), generate_checkpoint(channel_values={"messages": said}),
                      {}, {})
    assert [w.outcome() for w in writers] == [None] * 3
    step = events[before:]
    assert len(step) == 1
    assert sent_twice(step) == {}
    assert len(chunk_ids(step[0])) >= 3  # the messages are stored by content
    assert step[0].bytes_sent < 3 * SIZE + 6_000, step[0].bytes_sent  # not twice 18 KB
    got = saver.get_tuple(child)
    assert got is not None and got.checkpoint["channel_values"]["messages"] == said
    assert stored_tasks(saver, config) == ["task-0", "task-1", "task-2"]
    assert_exact(saver, "t")
    assert idle(saver)


@pytest.mark.anyio
async def test_an_async_step_sends_each_chunk_of_its_writes_once(forever: None) -> None:
    saver, engine, events, gate = gated()
    config = seeded(saver)
    said = messages(3)
    queue = saver.driver.group.queue(asyncio.get_running_loop())
    before = len(events)
    writes = [asyncio.create_task(saver.aput_writes(in_run(config, "async"),
                                                    [("messages", [m])], f"task-{i}"))
              for i, m in enumerate(said)]
    while len(queue.pending) < 3:
        await asyncio.sleep(0.001)
    put = saver.aput(in_run(config, "async"),
                     generate_checkpoint(channel_values={"messages": said}), {}, {})
    child, *_ = await asyncio.gather(put, *writes)
    step = events[before:]
    assert len(step) == 1 and sent_twice(step) == {}
    assert step[0].bytes_sent < 3 * SIZE + 6_000, step[0].bytes_sent
    got = await saver.aget_tuple(child)
    assert got is not None and got.checkpoint["channel_values"]["messages"] == said
    assert_exact(saver, "t")


def test_a_put_sent_apart_from_its_batch_carries_every_chunk_again(forever: None) -> None:
    """The merged batch fails on one write's SQL and is split: each write goes alone, and the
    put, which left out the chunks the writes carried, goes with all of its own (a write that
    failed stores none). Its checkpoint reads back whole; the chunk table is exact."""
    saver, engine, events, gate = gated()
    config = seeded(saver)
    said = messages(3)
    writers = step_writers(saver, config, said)
    gate.bad = "task-1"  # D1 refuses every request that carries task-1's write
    before = len(events)
    child = saver.put(in_run(config), generate_checkpoint(channel_values={"messages": said}),
                      {}, {})
    outcomes = [w.outcome() for w in writers]
    assert outcomes[0] is None and outcomes[2] is None
    assert "no such table" in str(outcomes[1])
    merged, *alone = events[before:]
    assert len(merged.statements) == 4  # the put and its three writes
    (put_alone,) = [e for e in alone if {s.name for s in e.statements} == {_sql.PUT.name}]
    assert len(chunk_ids(put_alone)) >= 3  # the messages' chunks, left out of it in `merged`
    assert sent_twice([merged]) == {}
    got = saver.get_tuple(child)
    assert got is not None and got.checkpoint["channel_values"]["messages"] == said
    assert stored_tasks(saver, config) == ["task-0", "task-2"]
    assert_exact(saver, "t")


def test_a_put_leaves_out_the_chunks_stored_while_it_waited(
        forever: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """A put built while a write carrying its message is in flight, whose batch is made
    after that write has committed (it waits for a write of its step on its way): the
    message's chunk is sent by the write alone, not again by the put."""
    monkeypatch.setattr(group_commit, "EXPECT_MAX", 100_000.0)
    from d1saver.ops import statements as st

    saver, engine, events, gate = gated()
    config = seeded(saver)
    (said,) = messages(1)
    before = len(events)
    gate.hold, arrived = "task-early", gate.arrived  # the first write's request waits
    early = Caller(lambda: saver.put_writes(config, [("messages", [said])], "task-early"))
    early.start()
    wait_until(lambda: gate.arrived == arrived + 1)
    building, go = threading.Event(), threading.Event()
    real = st.put_writes_statements

    def slow(*args: Any, **kwargs: Any) -> Any:  # a write of the put's step, still being built
        building.set()
        assert go.wait(10)
        return real(*args, **kwargs)

    monkeypatch.setattr(st, "put_writes_statements", slow)
    late = Caller(lambda: saver.put_writes(in_run(config), [("other", 1)], "task-late"))
    late.start()
    assert building.wait(10)
    put = Caller(lambda: saver.put(in_run(config),
                                   generate_checkpoint(channel_values={"messages": [said]}),
                                   {}, {}))
    put.start()  # built now: the message's chunk is not known stored
    wait_until(lambda: any(t.timing == "now" for t in saver.driver.group.queue(None).pending))
    gate.release()
    assert early.outcome() is None  # stored
    go.set()
    assert (late.outcome(), put.outcome()) == (None, None)
    assert len(events) - before == 2
    assert sent_twice(events[before:]) == {}
    assert_exact(saver, "t")


def test_writes_of_two_threads_in_one_batch_each_send_their_chunk() -> None:
    """Writes of two threads in one batch, with the same message: each thread stores its own
    row (chunks are per thread), so neither leaves the other's out."""
    saver, engine, events, gate = gated()
    saver.setup()
    (said,) = messages(1)
    gate.hold, arrived = "task-first", gate.arrived  # the next writes queue behind it
    first = Caller(lambda: saver.put_writes(
        {"configurable": {"thread_id": "a", "checkpoint_ns": "", "checkpoint_id": "1"}},
        [("ch", 0)], "task-first"))
    first.start()
    wait_until(lambda: gate.arrived == arrived + 1)
    queue = saver.driver.group.queue(None)
    writers = [Caller(lambda t=t: saver.put_writes(
        {"configurable": {"thread_id": t, "checkpoint_ns": "", "checkpoint_id": "1"}},
        [("messages", [said])], f"task-{t}")) for t in ("a", "b")]
    for w in writers:
        w.start()
    wait_until(lambda: len(queue.pending) == 2)
    before = len(events)
    gate.release()
    assert [first.outcome(), *(w.outcome() for w in writers)] == [None] * 3
    assert len(events) - before == 2  # the first, then the two writes in one batch
    assert Counter(chunk_ids(events[-1])).most_common(1)[0][1] == 2  # once per thread
    assert_exact(saver, "a", "b")
