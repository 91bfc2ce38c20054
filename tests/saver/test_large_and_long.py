"""States of any size and histories of any length: 10 MB values, 1,000-checkpoint histories."""

from __future__ import annotations

import os
import uuid

import pytest

from langgraph.checkpoint.conformance.test_utils import generate_checkpoint, generate_config

from d1saver.compaction import compact
from d1saver import Statement
from tests.conftest import Backend

TEN_MB = 10 * 1024 * 1024


def big_state() -> dict:
    # Random bytes do not compress: the stored value really is over 10 MB.
    return {"blob": os.urandom(TEN_MB), "note": "ten megabytes"}


def chunk_rows(backend_saver, thread_id: str) -> int:
    (res,) = backend_saver.client.execute(
        [Statement("SELECT (SELECT COUNT(*) FROM chunks WHERE thread_id = ?1) + "
                   "(SELECT COUNT(*) FROM d1saver_chunks WHERE thread_id = ?1)", (thread_id,))])
    return res.rows[0][0]


@pytest.mark.parametrize("keyed", [False, True], ids=["plain", "keys"])
def test_ten_megabyte_state_round_trips_everywhere(backend: Backend, keyed: bool) -> None:
    """A 10 MB checkpoint and a 10 MB write survive put, get_tuple, list, copy_thread and
    compaction, without and with encryption keys (sealed, then split)."""
    saver = backend.saver(**({"encryption_keys": [bytes([3]) * 32]} if keyed else {}))
    thread, copy = f"big-{uuid.uuid4().hex}", f"big-copy-{uuid.uuid4().hex}"
    state, write = big_state(), os.urandom(TEN_MB)
    first = saver.put(generate_config(thread), generate_checkpoint(), {"step": 0}, {})
    cfg = generate_config(thread)
    cfg["configurable"]["checkpoint_id"] = first["configurable"]["checkpoint_id"]
    stored = saver.put(cfg, generate_checkpoint(channel_values=state), {"step": 1}, {})
    saver.put_writes(stored, [("blob", write), ("small", 1)], "task-1")
    # Each value split under D1's 2 MB limit: in pieces with keys, else by content (FastCDC
    # chunks of 16 KB on average).
    assert chunk_rows(saver, thread) >= 12

    def check(tup) -> None:
        assert tup.checkpoint["channel_values"] == state
        assert [(w[1], w[2]) for w in tup.pending_writes] == [("blob", write), ("small", 1)]

    check(saver.get_tuple(stored))
    check(next(saver.list(generate_config(thread), limit=1)))
    saver.copy_thread(thread, copy)
    check(saver.get_tuple(generate_config(copy)))
    summary = compact(saver, keep=1, threads=[thread])
    assert summary.checkpoints_deleted == 1
    check(saver.get_tuple(generate_config(thread)))
    saver.delete_thread(copy)
    assert chunk_rows(saver, copy) == 0


def test_history_of_1000_checkpoints_streams_one_request_per_page(local: Backend) -> None:
    """list over 1,000 checkpoints reads page by page, lazily: one request per page of 100."""
    saver = local.saver(page_size=100)
    thread = f"long-{uuid.uuid4().hex}"
    parent = None
    for i in range(1000):
        cfg = generate_config(thread)
        if parent:
            cfg["configurable"]["checkpoint_id"] = parent["configurable"]["checkpoint_id"]
        parent = saver.put(cfg, generate_checkpoint(channel_values={"i": i}), {"step": i}, {})
    before = local.requests
    pages = saver.list(generate_config(thread))
    first = next(pages)
    assert first.checkpoint["channel_values"] == {"i": 999}
    assert local.requests - before == 1  # nothing read beyond the first page yet
    rest = list(pages)
    assert len(rest) == 999 and rest[-1].checkpoint["channel_values"] == {"i": 0}
    assert local.requests - before == 10
