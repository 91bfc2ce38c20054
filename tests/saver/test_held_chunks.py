"""A saver learns from what it reads which chunks a thread holds, so that its next write sends
only new content: a fresh process (a restarted server, another instance) that reads a thread,
as `graph.invoke` does before it writes, must not send the thread's history again. Compared
with a saver that has read nothing, which has to send every chunk its rows reach.

(The same after `get_delta_channel_history` of one thread is not tested: on the benchmark's
DeltaChannel conversation the reader learns the chunks of the writes it read in some runs and
not in others, which is to be looked into before a test can pin it.)"""

from __future__ import annotations

import os
import uuid
from typing import Any

from langgraph.checkpoint.base import Checkpoint, empty_checkpoint

from tests.conftest import Backend


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

