"""A thread d1saver 0.1.0 wrote (tests/data/v0_1_0.jsonl), resumed by the content-addressed
code: its new rows are "m:" manifests, its old rows still read as 0.1.0 read them, its whole
history is what 0.1.0 + InMemorySaver give, and the chunk table stays exact, also once the
mixed thread is compacted to its head."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from d1saver.compaction import compact
from tests.data import v0_1_0_fixture as fx
from tests.data import v0_1_0_graphs as g
from tests.saver.content import assert_exact, chunk_ids, query
from tests.saver.test_v0_1_0_data import history_shape, outcome, reference, view

# Threads whose values hold pieces worth storing apart (messages of about 300 B; 2.1 MB).
THREADS = [g.PLAIN, g.DELTA, g.TAGGED, g.BIG]


def stored_as(saver: Any, thread_id: str) -> dict[str, str]:
    """checkpoint_id -> the marker its row is stored with ("m:", "d:", "c:"...)."""
    return dict(query(saver, "SELECT checkpoint_id, substr(checkpoint, 1, 2) FROM checkpoints"
                             " WHERE thread_id = ?1", thread_id))


def without_writes(entry: dict[str, Any]) -> dict[str, Any]:
    """A checkpoint's entry without its pending writes (a resume adds some to the old head)."""
    return {k: v for k, v in entry.items() if k != "pending_writes"}


@pytest.mark.parametrize("name", THREADS)
def test_resumed_010_thread_is_mixed_exact_and_compacts(v010: Any, name: str) -> None:
    db = v010(name)
    saver, tid = db.saver, db.thread_ids[name]
    old = stored_as(saver, tid)
    assert old and "m:" not in old.values() and chunk_ids(saver, tid) == set()

    step, must_run = g.CONTINUATIONS[name]
    runs: Counter = Counter()
    graph = g.graph_for(name, saver, runs)
    cfg = g.config(tid)
    result = g.run_step(graph, cfg, step)
    assert runs == Counter(must_run)

    # New rows are manifests; old rows kept their format and read as 0.1.0 read them.
    now = stored_as(saver, tid)
    assert {cid: now[cid] for cid in old} == old
    new = Counter(marker for cid, marker in now.items() if cid not in old)
    assert new["m:"] > 0, new
    want = fx.expected()["threads"][name]["checkpoints"]
    for exp in want:
        tup = saver.get_tuple(db.config(name, checkpoint_ns=exp["checkpoint_ns"],
                                        checkpoint_id=exp["checkpoint_id"]))
        assert tup is not None
        assert without_writes(fx.tuple_entry(tup, db.subst)) == without_writes(exp)

    # The whole history is what 0.1.0 + InMemorySaver give, run in one go.
    ref_graph, ref_result, ref_cfg = reference(name)
    assert outcome(result) == outcome(ref_result)
    assert history_shape(graph, cfg) == history_shape(ref_graph, ref_cfg)
    assert_exact(saver, tid)

    # Compacted to its head (and tags): the same state, an exact chunk table.
    state = view(graph.get_state(cfg, subgraphs=True))
    stored = chunk_ids(saver, tid)
    compact(saver, keep=1, threads=[tid])
    assert view(graph.get_state(cfg, subgraphs=True)) == state
    assert len(list(saver.list(cfg))) < len(now)
    assert chunk_ids(saver, tid) <= stored
    assert_exact(saver, tid)
