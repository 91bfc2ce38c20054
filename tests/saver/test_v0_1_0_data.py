"""The database d1saver 0.1.0 wrote (tests/data/v0_1_0.jsonl) reads back identically, resumes
and compacts with the current code, on the local D1 and on the real engine.

What 0.1.0 read back is in tests/data/v0_1_0_expected.json; the graphs and the scripts that
wrote each thread are in tests/data/v0_1_0_graphs.py. A resumed thread must end as the same
script run in one go on InMemorySaver ends, running only the nodes that had not finished.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from typing import Any

import pytest
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import StateSnapshot

from d1saver.compaction import compact
from tests.data import v0_1_0_fixture as fx
from tests.data import v0_1_0_graphs as g
from tests.data.v0_1_0_fixture import V010Db


def expected(name: str) -> dict[str, Any]:
    return fx.expected()["threads"][name]


def expected_graph(name: str) -> dict[str, Any]:
    return fx.expected()["graphs"][name]


def root(db: V010Db, name: str, **configurable: Any) -> dict[str, Any]:
    return db.config(name, checkpoint_ns="", **configurable)


def compact_all(db: V010Db) -> Any:
    # A fresh database: compact everything in it, as the CLI's --all does. The real engine's
    # one database is shared with other tests: compact only this load's threads.
    if not db.shared:
        return compact(db.saver, keep=1)
    return compact(db.saver, keep=1, threads=list(db.thread_ids.values()))


# --- (a) reads back identically ----------------------------------------------------------------


@pytest.mark.parametrize("name", g.THREADS)
def test_reads_back_identically(v010: Any, name: str) -> None:
    db = v010(name)
    tid = db.thread_ids[name]
    want = expected(name)
    got = fx.read_thread(db.saver, tid, db.subst)
    assert got["heads"] == want["heads"]
    assert got["tags"] == want["tags"]
    assert [e["checkpoint_id"] for e in got["checkpoints"]] == \
        [e["checkpoint_id"] for e in want["checkpoints"]]
    for entry, exp in zip(got["checkpoints"], want["checkpoints"], strict=True):
        assert entry == exp

    # get_tuple of each checkpoint, and list() of each namespace, say the same.
    for exp in want["checkpoints"]:
        tup = db.saver.get_tuple(db.config(name, checkpoint_ns=exp["checkpoint_ns"],
                                           checkpoint_id=exp["checkpoint_id"]))
        assert tup is not None and fx.tuple_entry(tup, db.subst) == exp
    for ns in want["heads"]:
        listed = [fx.tuple_entry(t, db.subst) for t in db.saver.list(db.config(name, checkpoint_ns=ns))]
        assert listed == [e for e in want["checkpoints"] if e["checkpoint_ns"] == ns]

    # What the graph sees: the head with its subgraph state, and every state of the history
    # (on the DeltaChannel thread each one replays the channel from 0.1.0's writes and snapshots).
    assert fx.read_graph(g.graph_for(name, db.saver), tid, db.subst) == expected_graph(name)


@pytest.mark.anyio
@pytest.mark.parametrize("name", [g.DELTA, g.SUBGRAPH, g.FAILED_SIBLING, g.BIG])
async def test_reads_back_identically_async(v010: Any, name: str) -> None:
    db = v010(name)
    want = expected(name)
    listed = [fx.tuple_entry(t, db.subst)
              async for t in db.saver.alist(db.config(name))]
    assert listed == want["checkpoints"]
    for exp in want["checkpoints"]:
        tup = await db.saver.aget_tuple(db.config(
            name, checkpoint_ns=exp["checkpoint_ns"], checkpoint_id=exp["checkpoint_id"]))
        assert tup is not None and fx.tuple_entry(tup, db.subst) == exp
    graph = g.graph_for(name, db.saver)
    snap = await graph.aget_state(db.config(name), subgraphs=True)
    assert fx.snapshot_entry(snap, db.subst) == expected_graph(name)["state"]


def test_reads_back_identically_after_upgrading_its_schema(v010: Any) -> None:
    """Built as 0.1.0 left it (its schema.sql, not upgraded), then set up by the current code."""
    sha = hashlib.sha256(fx.SCHEMA_PATH.read_bytes()).hexdigest()
    assert sha == fx.expected()["generated_by"]["schema_sql_sha256"]
    db = v010(schema="v0.1.0")
    db.saver.setup()  # upgrades through every migration since version 1
    for name in g.THREADS:
        assert fx.read_thread(db.saver, db.thread_ids[name], db.subst) == expected(name)


# --- (b) every thread resumes ---------------------------------------------------------------------


def outcome(result: Any) -> Any:
    """An invoke result with interrupts as their values (their ids depend on checkpoint ids)."""
    if isinstance(result, dict):
        result = {k: [i.value for i in v] if k == "__interrupt__" else v for k, v in result.items()}
    return fx.fingerprint(result)


def view(snap: StateSnapshot) -> dict[str, Any]:
    """What a user sees of a state, without ids: values, next, tasks and their interrupts."""
    return {"values": fx.fingerprint(snap.values), "next": list(snap.next),
            "tasks": [(t.name, [i.value for i in t.interrupts],
                       view(t.state) if isinstance(t.state, StateSnapshot) else None)
                      for t in snap.tasks]}


def history_shape(graph: Any, cfg: dict[str, Any]) -> list[tuple]:
    return [(fx.fingerprint(s.values), list(s.next), s.metadata["step"], s.metadata["source"])
            for s in graph.get_state_history(cfg)]


def reference(name: str) -> tuple[Any, Any, dict[str, Any]]:
    """The thread's script and its continuation, run in one go on InMemorySaver."""
    cfg = g.config(name)
    graph = g.play(name, InMemorySaver(), cfg)
    result = g.run_step(graph, cfg, g.CONTINUATIONS[name][0])
    return graph, result, cfg


@pytest.mark.parametrize("compacted", [False, True], ids=["as-stored", "compacted"])
@pytest.mark.parametrize("name", g.THREADS)
def test_resumes(v010: Any, name: str, compacted: bool) -> None:
    db = v010(name)
    if compacted:
        compact_all(db)
    step, must_run = g.CONTINUATIONS[name]
    runs: Counter = Counter()
    graph = g.graph_for(name, db.saver, runs)
    cfg = g.config(db.thread_ids[name])
    result = g.run_step(graph, cfg, step)

    # Only the nodes that had not finished ran (a finished sibling's stored write is reused).
    assert runs == Counter(must_run)
    ref_graph, ref_result, ref_cfg = reference(name)
    assert outcome(result) == outcome(ref_result)
    assert view(graph.get_state(cfg, subgraphs=True)) == view(ref_graph.get_state(ref_cfg, subgraphs=True))
    if not compacted:
        assert history_shape(graph, cfg) == history_shape(ref_graph, ref_cfg)


# --- (c) compaction ------------------------------------------------------------------------------


def test_compacts_keeping_heads_and_tags(v010: Any) -> None:
    db = v010()
    counts = fx.expected()["row_counts"]
    assert db.counts == {t: counts.get(t, 0) for t in fx.DATA_TABLES}

    summary = compact_all(db)
    assert summary.checkpoints_deleted > 0 and summary.writes_deleted > 0

    for name in g.THREADS:
        want = expected(name)
        by_id = {e["checkpoint_id"]: e for e in want["checkpoints"]}
        head = db.saver.get_tuple(root(db, name))
        assert head is not None
        # The head reads back as before, but for its parent: compaction relinks past deleted ones.
        assert fx.without_parents(fx.tuple_entry(head, db.subst)) == \
            fx.without_parents(by_id[want["heads"][""]])
        if head.parent_config is not None:
            assert db.saver.get_tuple(head.parent_config) is not None
        # The graph's view of the head, subgraph state included, is unchanged.
        state = g.graph_for(name, db.saver).get_state(db.config(name), subgraphs=True)
        assert fx.without_parents(fx.snapshot_entry(state, db.subst)) == \
            fx.without_parents(expected_graph(name)["state"])
        # Tagged checkpoints survive, reading back as before.
        assert db.saver.tags(root(db, name)) == want["tags"][""]
        for cid in want["tags"][""].values():
            tagged = db.saver.get_tuple(root(db, name, checkpoint_id=cid))
            assert tagged is not None
            assert fx.without_parents(fx.tuple_entry(tagged, db.subst)) == \
                fx.without_parents(by_id[cid])

    # Bounded: a thread with no DeltaChannel and no subgraph keeps its head (and its tags) only.
    for name, left in ((g.PLAIN, 1), (g.INTERRUPTED, 1), (g.FAILED_SIBLING, 1), (g.BIG, 1),
                       (g.TAGGED, 2)):
        assert len(list(db.saver.list(db.config(name)))) == left, name
