"""What the saver remembers of each thread (d1saver/ops/held.py) is bounded: past the bound,
the thread used longest ago is forgotten (and a thread used again is renewed), and what is
forgotten reads as "not known", which errs safe: chunks are sent again, a row's loss is
checked, a write leaves at once."""

from __future__ import annotations

from d1saver.core.protocol import HELD, SOON
from d1saver.ops.held import DURABILITY_KEY, HeldChunks, Holds, StoredRows


def test_held_chunks_keep_the_threads_used_last() -> None:
    held = HeldChunks(max_threads=2)
    held.add("a", ["x"])
    held.add("b", ["y"])
    held.add("a", ["z"])  # used again: now the newest
    held.add("c", ["w"])
    assert held.of("a") == {"x", "z"}
    assert held.of("c") == {"w"}
    assert held.of("b") == set()  # forgotten: its chunks are sent again


def test_delta_channels_keep_the_threads_seen_last() -> None:
    held = HeldChunks(max_threads=2)
    for thread_id in ("a", "b", "a", "c"):
        held.saw_metadata(thread_id, {"counters_since_delta_snapshot": {f"ch_{thread_id}": 1}})
    assert held.delta_channels("b") == frozenset()
    assert held.delta_channels("a") == {"ch_a"}
    assert held.delta_channels("c") == {"ch_c"}


def test_stored_rows_keep_the_threads_written_last() -> None:
    rows = StoredRows(max_threads=2)
    key = ("c", "", "1")
    for thread_id in ("a", "b", "a", "c"):
        rows.add(thread_id, [key], by_content=True)
    assert rows.add("a", [key], by_content=True)  # known: a chunk may be left
    assert not rows.add("b", [key], by_content=True)  # forgotten: written as new


def held_timing(holds: Holds, thread_id: str) -> str:
    return holds.timing({"configurable": {"thread_id": thread_id, "checkpoint_ns": "",
                                          DURABILITY_KEY: "async"}}, [("messages", 1)])


def test_holds_keep_the_threads_seen_last() -> None:
    holds = Holds(max_keys=2)
    for thread_id in ("a", "b", "a", "c"):
        holds.saw_deltas(thread_id, "", [])
    assert held_timing(holds, "b") == SOON  # forgotten: its writes leave at once
    assert held_timing(holds, "a") == HELD
    assert held_timing(holds, "c") == HELD
