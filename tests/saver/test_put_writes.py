"""put_writes as InMemorySaver does it (defect 5): in one call, special writes (WRITES_IDX_MAP:
__error__, __scheduled__, __interrupt__, __resume__) are upserted, the latest winning, and
regular writes are inserted or ignored, the first winning. Still one request per call."""

from __future__ import annotations

import uuid
from typing import Any

from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.conformance.test_utils import generate_checkpoint, generate_config
from langgraph.checkpoint.memory import InMemorySaver

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
