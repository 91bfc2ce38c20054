"""A filtered list prefetches the DeltaChannel histories of every checkpoint it returns,
those whose filter is decided in Python included (metadata over the row limit, in pieces)."""

from __future__ import annotations

import base64
import os
from typing import Any

from langgraph.checkpoint.base import empty_checkpoint

from tests.compaction import cfg, checkpoint_id
from tests.conftest import Backend


def test_a_checkpoint_with_metadata_in_pieces_has_its_history_prefetched(local: Backend
                                                                         ) -> None:
    """In each scope of list (one namespace, one thread, every thread) a checkpoint found by a
    metadata key kept only in its pieces comes with its DeltaChannel history."""
    saver = local.saver()
    note = base64.b64encode(os.urandom(1_600_000)).decode()
    ref = "r" * 5_000  # too long to stay in the column: the filter on it is decided in Python
    parent = cfg("t")
    for i in range(4):
        cp = empty_checkpoint()
        cp.update(id=checkpoint_id(i), ts="2026-11-01T00:00:00+00:00",
                  channel_versions={"messages": f"{i + 1:010}.0"})
        metadata: dict[str, Any] = {"source": "loop", "step": i, "parents": {}}
        if i == 0:
            cp["channel_values"] = {"messages": ["seed"]}
        else:
            metadata["counters_since_delta_snapshot"] = {"messages": [i, i]}
        if i == 2:
            metadata.update(note=note, ref=ref)
        parent = saver.put(parent, cp, metadata, {})
        saver.put_writes(parent, [("messages", f"m{i}")], task_id=f"task-{i}")
    want = local.saver().get_delta_channel_history(config=cfg("t", "", checkpoint_id(2)),
                                                   channels=["messages"])
    assert "m1" in str(want)
    scopes: list[Any] = [{"configurable": {"thread_id": "t", "checkpoint_ns": ""}},
                         {"configurable": {"thread_id": "t"}}, None]
    for config in scopes:  # one namespace, every namespace of the thread, every thread
        reader = local.saver()
        (found,) = reader.list(config, filter={"ref": ref})
        assert found.config["configurable"]["checkpoint_id"] == checkpoint_id(2), config
        before = local.requests
        served = reader.get_delta_channel_history(config=found.config, channels=["messages"])
        assert local.requests == before, config  # prefetched with the page
        assert served == want, config


def test_metadata_in_pieces_that_its_column_rejects_takes_no_place_in_a_page(local: Backend
                                                                            ) -> None:
    """The newest checkpoint's metadata lives in pieces, but the key filtered on stays in its
    column with another value: SQL rejects it, so in pages of 2 (and a list of 2) every
    listed checkpoint, in each scope, comes with its DeltaChannel history (its own: the
    checkpoint after it holds a seed, so no other walk passes through it)."""
    saver = local.saver()
    note = base64.b64encode(os.urandom(1_600_000)).decode()
    parent = cfg("t")
    for i in range(5):
        cp = empty_checkpoint()
        cp.update(id=checkpoint_id(i), ts="2026-11-01T00:00:00+00:00",
                  channel_versions={"messages": f"{i + 1:010}.0"})
        metadata: dict[str, Any] = {"source": "loop", "step": i, "parents": {}, "user": "u"}
        if i in (0, 3):  # seeds: the history of 2 walks apart from 3's
            cp["channel_values"] = {"messages": [f"seed{i}"]}
        else:
            metadata["counters_since_delta_snapshot"] = {"messages": [i, i]}
        if i == 4:
            metadata.update(note=note, user="other")
        parent = saver.put(parent, cp, metadata, {})
        saver.put_writes(parent, [("messages", f"m{i}")], task_id=f"task-{i}")
    want = {i: local.saver().get_delta_channel_history(config=cfg("t", "", checkpoint_id(i)),
                                                       channels=["messages"])
            for i in (1, 2)}
    scopes: list[Any] = [{"configurable": {"thread_id": "t", "checkpoint_ns": ""}},
                         {"configurable": {"thread_id": "t"}}, None]
    for config in scopes:
        for limit in (None, 2):
            reader = local.saver(page_size=2)
            found = list(reader.list(config, filter={"user": "u"}, limit=limit))
            assert [t.config["configurable"]["checkpoint_id"] for t in found] == [
                checkpoint_id(i) for i in (3, 2, 1, 0)][:limit], config
            before = local.requests
            for t in found[1:3]:
                assert reader.get_delta_channel_history(
                    config=t.config, channels=["messages"]) == want[3 - found.index(t)], config
            assert local.requests == before, config  # prefetched with the pages
