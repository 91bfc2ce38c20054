"""A saver learns from what it reads which chunks a thread holds, so that its next write sends
only new content: a fresh process (a restarted server, another instance) that reads a thread,
as `graph.invoke` does before it writes, must not send the thread's history again. Compared
with a saver that has read nothing, which has to send every chunk its rows reach."""

from __future__ import annotations

import os
import uuid
from typing import Any

from langgraph.checkpoint.base import Checkpoint, empty_checkpoint

from tests.conftest import Backend
from tests.saver.content import converse


def sent(backend: Backend, fn: Any) -> tuple[Any, int]:
    """fn's result, and the bytes its requests sent."""
    before = len(backend.events)
    out = fn()
    return out, sum(e.bytes_sent for e in backend.events[before:])


def holding(values: list[str], step: int) -> Checkpoint:
    cp = empty_checkpoint()
    cp["channel_values"] = {"messages": values}
    cp["channel_versions"] = {"messages": step}
    return cp


def test_a_put_after_a_read_of_the_page_sends_no_chunk_the_thread_holds(
        backend: Backend) -> None:
    writer = backend.saver()
    writer.setup()
    thread = f"held-{uuid.uuid4().hex[:8]}"
    history = [os.urandom(20_000).hex() for _ in range(10)]  # 400 KB stored by content
    config = writer.put({"configurable": {"thread_id": thread, "checkpoint_ns": ""}},
                        holding(history, 1), {"step": 0}, {"messages": 1})
    # A saver that has read nothing sends every chunk again (it cannot know them held).
    cold = backend.saver()
    _, cold_bytes = sent(backend, lambda: cold.put(config, holding([*history, "a"], 2),
                                                   {"step": 1}, {"messages": 2}))
    assert cold_bytes > 200_000  # 400 KB of hex, compressed
    reader = backend.saver()
    got, _ = sent(backend, lambda: reader.get_tuple({"configurable": {"thread_id": thread}}))
    assert got is not None and got.checkpoint["channel_values"]["messages"][:10] == history
    _, warm_bytes = sent(backend, lambda: reader.put(
        got.config, holding([*history, "b"], 3), {"step": 2}, {"messages": 3}))
    assert warm_bytes < 5_000, (warm_bytes, cold_bytes)
    head = backend.saver().get_tuple({"configurable": {"thread_id": thread}})
    assert head is not None and head.checkpoint["channel_values"]["messages"] == [*history, "b"]


def test_a_write_after_a_delta_history_read_sends_no_chunk_the_history_held(
        backend: Backend) -> None:
    """get_delta_channel_history of one thread teaches the saver the chunks of the writes it
    returned: a write of the same value sends a reference, not the value."""
    writer = backend.saver()
    thread = f"held-{uuid.uuid4().hex[:8]}"
    _, config = converse(writer, thread, turns=8, variant="delta", snapshot_frequency=4)
    tuples = list(writer.list(config))
    head, at = tuples[0], tuples[3]
    cold = backend.saver()
    reader = backend.saver()
    history, _ = sent(backend, lambda: reader.get_delta_channel_history(
        config=at.config, channels=["messages"]))
    writes = history["messages"]["writes"]
    assert writes
    value = writes[0][2]
    _, cold_bytes = sent(backend, lambda: cold.put_writes(head.config, [("messages", value)],
                                                          "task-cold"))
    _, warm_bytes = sent(backend, lambda: reader.put_writes(head.config, [("messages", value)],
                                                            "task-warm"))
    assert warm_bytes < cold_bytes - 400, (warm_bytes, cold_bytes)
    got = backend.saver().get_tuple(head.config)
    assert got is not None
    mine = {task: v for task, ch, v in got.pending_writes if ch == "messages"}
    assert mine["task-warm"] == mine["task-cold"] == value
