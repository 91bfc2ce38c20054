"""put_writes as InMemorySaver does it (defect 5): in one call, special writes (WRITES_IDX_MAP:
__error__, __scheduled__, __interrupt__, __resume__) are upserted, the latest winning, and
regular writes are inserted or ignored, the first winning. Still one request per call."""

from __future__ import annotations

import base64
import random
import uuid
from typing import Any

from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.conformance.test_utils import generate_checkpoint, generate_config
from langgraph.checkpoint.memory import InMemorySaver

from tests.compaction import query
from tests.conftest import Backend

CALLS: list[tuple[str, list[tuple[str, Any]]]] = [
    ("task-1", [("__error__", "first error"), ("a", 1), ("b", "one")]),
    ("task-1", [("__error__", "second error"), ("a", 2), ("b", "two")]),
    ("task-1", [("a", 3), ("__interrupt__", {"value": "ask"}), ("__resume__", "yes")]),
    ("task-1", [("__interrupt__", {"value": "ask again"}), ("__resume__", "no"), ("c", None)]),
    ("task-2", [("a", 10), ("__scheduled__", "s1")]),
    ("task-2", [("__scheduled__", "s2"), ("a", 20)]),
]


def pending(saver: BaseCheckpointSaver, thread: str) -> tuple[list, int]:
    """The writes put_writes leaves, after CALLS; and the checkpoint config used."""
    config = saver.put(generate_config(thread), generate_checkpoint(), {"step": 0}, {})
    for task_id, writes in CALLS:
        saver.put_writes(config, writes, task_id)
    got = saver.get_tuple(config)
    assert got is not None
    return got.pending_writes, 0


def test_mixed_special_and_regular_writes_match_inmemory(backend: Backend) -> None:
    thread = f"pw-{uuid.uuid4().hex[:12]}"
    want, _ = pending(InMemorySaver(), thread)
    saver = backend.saver()
    saver.setup()
    before = backend.requests
    got, _ = pending(saver, thread)
    assert got == want
    assert ("task-1", "__error__", "second error") in got and ("task-1", "a", 1) in got
    assert backend.requests - before == 1 + len(CALLS) + 1  # put, one per put_writes, get_tuple



def test_a_task_packed_once_then_written_row_by_row_keeps_the_first_of_each_index(
        local: Backend) -> None:
    """A task's writes packed in one row, then put again with a DeltaChannel's write over a
    row's limit (stored whole, in parts: one row per write) and one more: an index the pack
    holds keeps its first value, the new indexes are stored; as InMemorySaver."""
    thread = f"pw-{uuid.uuid4().hex[:12]}"
    big = base64.b64encode(random.Random(5).randbytes(1_800_000)).decode()
    got = []
    for saver in (InMemorySaver(), local.saver()):
        config = saver.put(generate_config(thread), generate_checkpoint(), {
            "step": 0, "counters_since_delta_snapshot": {"d": [1, 1]}}, {})
        saver.put_writes(config, [("a", 1)], "task-1")
        saver.put_writes(config, [("a", 2), ("d", big)], "task-1")
        saver.put_writes(config, [("a", 3), ("d", "small"), ("c", 4)], "task-1")
        tup = saver.get_tuple(config)
        assert tup is not None
        got.append(tup.pending_writes)
    assert got[1] == got[0] == [("task-1", "a", 1), ("task-1", "d", big), ("task-1", "c", 4)]


def test_a_replayed_write_in_parts_adds_no_piece_when_another_row_holds_its_marker(
        local: Backend) -> None:
    """A DeltaChannel's write stored in parts at one checkpoint; the same write (task, index,
    value) replayed where that index is already stored (packed) in another thread, namespace,
    checkpoint or task sharing the rest of the key: the stored row is kept and no piece is
    added beside it (a write's pieces follow its own row, not another's)."""
    big = base64.b64encode(random.Random(7).randbytes(1_800_000)).decode()
    saver = local.saver()
    meta = {"step": 0, "counters_since_delta_snapshot": {"d": [1, 1]}}
    first, second = generate_checkpoint(), generate_checkpoint()
    base = f"pw-{uuid.uuid4().hex[:8]}"
    slots = [(base, "", first), (base + "-twin", "", first), (base, "sub:1", first),
             (base, "", second)]
    configs = [saver.put({"configurable": {"thread_id": t, "checkpoint_ns": ns}}, cp, meta, {})
               for t, ns, cp in slots]
    saver.put_writes(configs[0], [("d", big)], "task-1")
    for config in configs[1:]:
        saver.put_writes(config, [("d", "small")], "task-1")
        saver.put_writes(config, [("d", big)], "task-1")
    pieces = [query(saver, "SELECT count(*) FROM chunks WHERE thread_id = ?1 AND "
                           "checkpoint_ns = ?2 AND checkpoint_id = ?3", t, ns, cp["id"])[0][0]
              for t, ns, cp in slots]
    assert pieces[0] > 0 and pieces[1:] == [0, 0, 0]
    for config in configs[1:]:
        tup = saver.get_tuple(config)
        assert tup is not None and tup.pending_writes == [("task-1", "d", "small")]
    # Another task of the held write's checkpoint, likewise.
    saver.put_writes(configs[0], [("d", "small")], "task-2")
    saver.put_writes(configs[0], [("d", big)], "task-2")
    assert query(saver, "SELECT count(*) FROM chunks WHERE thread_id = ?1 AND owner = ?2",
                 base, "task-2/0") == [[0]]


def test_a_single_write_is_stored_beside_packs_that_differ_only_in_one_key(
        local: Backend) -> None:
    """One task's writes packed in one row (two or more); then a single write of index 0 in
    another thread, namespace, checkpoint or task, each sharing every other key with the pack:
    each is stored and read back, as InMemorySaver does (a pack holds only its own task's
    indexes)."""
    first, second = generate_checkpoint(), generate_checkpoint()
    base = f"pw-{uuid.uuid4().hex[:8]}"
    slots = [(base, "", first, "task-1"), (base + "-twin", "", first, "task-1"),
             (base, "sub:1", first, "task-1"), (base, "", second, "task-1"),
             (base, "", first, "task-2")]
    got = []
    for saver in (InMemorySaver(), local.saver()):
        configs = [saver.put({"configurable": {"thread_id": t, "checkpoint_ns": ns}}, cp,
                             {"step": 0}, {}) for t, ns, cp, _ in slots]
        saver.put_writes(configs[0], [("a", 1), ("b", 2)], "task-1")
        for config, (*_, task) in zip(configs[1:], slots[1:], strict=True):
            saver.put_writes(config, [("a", 5)], task)
        got.append([tup.pending_writes for tup in map(saver.get_tuple, configs) if tup])
    assert got[1] == got[0] and len(got[0]) == 5 and got[0][1] == [("task-1", "a", 5)]
