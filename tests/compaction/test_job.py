"""The compaction job: what it keeps (N newest per namespace, tags, DeltaChannel seeds), what it
deletes, and how it behaves when runs overlap, are killed, or only pretend (dry runs).

Tests that name their threads run on both backends (local D1 and Wrangler's real engine); tests
that compact or snapshot the whole database run on the local D1 only, where each test has its own.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from datetime import timedelta
from typing import Annotated, Any

import pytest
from langchain_core.runnables import RunnableConfig
from langgraph.channels.delta import DeltaChannel
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.types import Command, StateSnapshot, interrupt
from typing_extensions import TypedDict

from benchmarks.workload import append_batches
from d1saver.compaction import Summary, compact, lease
from d1saver import ConfigError, D1Saver, LeaseHeldError, NotFoundError, RetryPolicy, Statement, admin
from d1saver.sql import catalogue as _sql
from d1saver.local import FaultPlan
from tests.compaction import (BIG, LONG_AGO, LoseFirstResponse, cfg, checkpoint_id, ids_in,
                              new_thread, one_step_behind, put_chain, put_checkpoint, query)
from d1saver.ops.rows import unpacked
from tests.conftest import Backend, local_backend
from tests.saver.graphs import LogState, log_node, sequence

# --- helpers: threads -------------------------------------------------------------------------


def build_fleet(saver: D1Saver, threads: int, *, root: int = 8, child: int = 4,
                tag_every: int = 3, prefix: str = "fleet") -> list[str]:
    """Deterministic threads: `root` checkpoints in '' and `child` in CHILD_NS (the subgraph
    of the root head's task); every `tag_every`-th thread (the first included) tags its 2nd
    root checkpoint. Returns the ids."""
    ids = [f"{prefix}-{i:03d}" for i in range(threads)]
    for i, tid in enumerate(ids):
        configs = put_chain(saver, tid, root)
        if child:
            put_chain(saver, tid, child, ns=child_ns(root - 1))
        if tag_every and i % tag_every == 0:
            saver.tag(configs[1], "approval")
    return ids


# --- helpers: reading the database -----------------------------------------------------------


def child_ns(i: int) -> str:
    """The namespace of a subgraph called by put_chain's task of checkpoint i (as LangGraph
    names it: '<node>:<task_id>'), which that checkpoint's write reaches."""
    return f"child:task-{i}"


def by_namespace(saver: D1Saver, thread_id: str) -> dict[str, list[str]]:
    """{namespace: checkpoint ids oldest first} of a thread."""
    out: dict[str, list[str]] = {}
    for ns, cid in query(saver, "SELECT checkpoint_ns, checkpoint_id FROM checkpoints"
                                " WHERE thread_id = ?1 ORDER BY checkpoint_ns, checkpoint_id", thread_id):
        out.setdefault(ns, []).append(cid)
    return out


def count_writes(saver: D1Saver, thread_id: str) -> int:
    """Writes stored, a "p:" row counting the writes it packs (migration 7)."""
    return query(saver, "SELECT COALESCE(SUM(CASE WHEN substr(value, 1, 2) = 'p:' THEN "
                        "json_array_length(substr(value, 3)) ELSE 1 END), 0) FROM writes "
                        "WHERE thread_id = ?1", thread_id)[0][0]


def write_rows(saver: D1Saver, thread_id: str, checkpoint_ids: Sequence[str]) -> list[list[Any]]:
    """The writes stored, a "p:" row (a put_writes call's writes, migration 7) unpacked."""
    return [r for r in unpacked(query(saver, "SELECT * FROM writes WHERE thread_id = ?1 ORDER BY"
                                             " checkpoint_ns, checkpoint_id, task_id, idx",
                                      thread_id))
            if r[2] in checkpoint_ids]


TABLES = {
    "checkpoints": "SELECT * FROM checkpoints ORDER BY thread_id, checkpoint_ns, checkpoint_id",
    "writes": "SELECT * FROM writes ORDER BY thread_id, checkpoint_ns, checkpoint_id, task_id, idx",
    "chunks": "SELECT * FROM chunks ORDER BY thread_id, checkpoint_ns, checkpoint_id, owner, seq",
    "tags": "SELECT thread_id, checkpoint_ns, checkpoint_id, name FROM tags ORDER BY 1, 2, 4",
    "scratch": "SELECT (SELECT COUNT(*) FROM d1saver_scope) + (SELECT COUNT(*) FROM d1saver_keep)"
               " + (SELECT COUNT(*) FROM d1saver_relink)",
}


def dump(saver: D1Saver) -> dict[str, list[list[Any]]]:
    """Every stored row (tags without their creation time; packed writes unpacked), for
    whole-database comparisons."""
    rows = {name: query(saver, sql) for name, sql in TABLES.items()}
    rows["writes"] = unpacked(rows["writes"])
    return rows


def leases_held(saver: D1Saver) -> list[list[Any]]:
    return query(saver, "SELECT name, holder FROM leases")


def newest(ids: list[str], n: int) -> list[str]:
    return sorted(ids)[-n:]


# --- helpers: graphs ------------------------------------------------------------------------


def asking(name: str, question: str, runs: Counter) -> Callable[[LogState], dict]:
    """A node that interrupts with `question` and logs "<name>:<answer>" once resumed."""

    def run(state: LogState) -> dict:
        runs[name] += 1
        return {"log": [f"{name}:{interrupt(question)}"]}

    return run


def parent_with_subgraph(saver: BaseCheckpointSaver) -> CompiledStateGraph:
    """p1 -> child[c1 -> c2]: each invoke adds 4 checkpoints in '' and 4 in a new 'child:<id>'."""
    sub = sequence(LogState, c1=log_node("c1"), c2=log_node("c2"))
    return sequence(LogState, p1=log_node("p1"), child=sub.compile()).compile(checkpointer=saver)


def one_step_graph(saver: BaseCheckpointSaver) -> CompiledStateGraph:
    """One node; each invoke adds 3 checkpoints (input, start, step)."""
    return sequence(LogState, step=log_node("step")).compile(checkpointer=saver)


def fan_out_interrupt_graph(saver: BaseCheckpointSaver, runs: Counter) -> CompiledStateGraph:
    """s1 -> s2 -> (a, b, ask in parallel; ask interrupts) -> join."""
    g = StateGraph(LogState)
    for name in ("s1", "s2", "a", "b", "join"):
        g.add_node(name, log_node(name, runs))
    g.add_node("ask", asking("ask", "go on?", runs))
    g.add_edge(START, "s1")
    g.add_edge("s1", "s2")
    for name in ("a", "b", "ask"):
        g.add_edge("s2", name)
    g.add_edge(["a", "b", "ask"], "join")
    g.add_edge("join", END)
    return g.compile(checkpointer=saver)


def subgraph_interrupt_graph(saver: BaseCheckpointSaver, runs: Counter) -> CompiledStateGraph:
    """before -> child[draft -> review (interrupts)] -> after."""
    sub = sequence(LogState, draft=log_node("draft", runs), review=asking("review", "ok?", runs))
    return sequence(LogState, before=log_node("before", runs), child=sub.compile(),
                    after=log_node("after", runs)).compile(checkpointer=saver)


class Chat(TypedDict):
    messages: Annotated[list, DeltaChannel(append_batches, snapshot_frequency=4)]
    n: int


class ChatWithNotes(Chat):
    notes: Annotated[list, DeltaChannel(append_batches, snapshot_frequency=4)]


def delta_graph(saver: BaseCheckpointSaver, steps: int = 13, note_at: int | None = None
                ) -> CompiledStateGraph:
    """One node looping `steps` super-steps, each appending a message to a DeltaChannel
    (and, at step `note_at`, one note to a second DeltaChannel)."""

    def step(state: Chat) -> dict:
        out: dict[str, Any] = {"messages": [f"m{state['n']}"], "n": state["n"] + 1}
        if state["n"] == note_at:
            out["notes"] = [f"note@{note_at}"]
        return out

    g = StateGraph(Chat if note_at is None else ChatWithNotes)
    g.add_node("step", step)
    g.add_edge(START, "step")
    g.add_conditional_edges("step", lambda s: END if s["n"] >= steps else "step", ["step", END])
    return g.compile(checkpointer=saver)


def run_delta_thread(saver: D1Saver) -> tuple[CompiledStateGraph, RunnableConfig]:
    graph, config = delta_graph(saver), cfg(new_thread())
    graph.invoke({"messages": ["hi"], "n": 0}, config)
    return graph, config


def seed_chain(saver: D1Saver, config: RunnableConfig) -> list[str]:
    """Ids from `config`'s checkpoint back to the nearest one storing 'messages' (its seed)."""
    chain = []
    tup = saver.get_tuple(config)
    while tup is not None:
        chain.append(tup.config["configurable"]["checkpoint_id"])
        if "messages" in tup.checkpoint["channel_values"] or tup.parent_config is None:
            break
        tup = saver.get_tuple(tup.parent_config)
    return chain


def tagged_delta_thread(saver: D1Saver) -> tuple[CompiledStateGraph, RunnableConfig,
                                                  list[StateSnapshot], StateSnapshot]:
    """A delta thread with one checkpoint tagged "approval": the newest from the 5th newest back
    that has no snapshot of its own. Gives the graph, config, history (newest first) and it."""
    graph, config = run_delta_thread(saver)
    history = list(graph.get_state_history(config))
    tagged = next(s for s in history[4:] if len(seed_chain(saver, s.config)) > 1)
    saver.tag(tagged.config, "approval")
    return graph, config, history, tagged


# --- keep N per (thread, namespace) ---------------------------------------------------------


@pytest.mark.parametrize("keep", [1, 3])
def test_keeps_n_newest_per_namespace(backend: Backend, keep: int) -> None:
    """The N newest of the root remain, and the N newest of the subgraph namespaces those
    reach: none with keep=1 (the head ends the turn), the last turn's with keep=3."""
    saver = backend.saver()
    graph, config = parent_with_subgraph(saver), cfg(new_thread())
    for i in range(3):
        graph.invoke({"log": [f"in{i}"]}, config)
    before = by_namespace(saver, config["configurable"]["thread_id"])
    assert len(before) == 4 and all(ns.startswith("child:") for ns in before if ns)
    last_child = max((ns for ns in before if ns), key=lambda ns: before[ns][-1])

    compact(saver, keep=keep, threads=[config["configurable"]["thread_id"]])

    after = by_namespace(saver, config["configurable"]["thread_id"])
    reached = [""] if keep == 1 else ["", last_child]
    assert after == {ns: newest(before[ns], keep) for ns in reached}


@pytest.mark.parametrize("keep", [1, 3])
def test_keeps_n_newest_of_hand_built_namespaces(backend: Backend, keep: int) -> None:
    """Checkpoints put directly in '' and in two subgraph namespaces: N newest of the root and
    of the one its head reaches remain, by checkpoint_id; the one only checkpoint 0 reached goes."""
    saver, tid = backend.saver(), new_thread()
    put_chain(saver, tid, 6)
    put_chain(saver, tid, 5, ns=child_ns(5))
    put_chain(saver, tid, 3, ns=child_ns(0))

    compact(saver, keep=keep, threads=[tid])

    assert by_namespace(saver, tid) == {
        "": [checkpoint_id(i) for i in range(6 - keep, 6)],
        child_ns(5): [checkpoint_id(i) for i in range(5 - keep, 5)]}


def test_other_threads_untouched(backend: Backend) -> None:
    """Compacting named threads leaves every other thread as it was."""
    saver, a, b = backend.saver(), new_thread(), new_thread()
    put_chain(saver, a, 5)
    put_chain(saver, b, 5)
    compact(saver, keep=1, threads=[a])
    assert len(ids_in(saver, a)) == 1 and len(ids_in(saver, b)) == 5


def test_keep_zero_refused(local: Backend) -> None:
    """keep < 1 is a ConfigError: every thread must keep its head to stay resumable."""
    with pytest.raises(ConfigError):
        compact(local.saver(), keep=0)


@pytest.mark.parametrize("kwargs", [{"lease_ttl": 0}, {"lease_ttl": -5},
                                    {"max_age": timedelta(days=999_999)}, {"max_age": timedelta.max}],
                         ids=["lease-ttl-0", "lease-ttl-negative", "max-age-before-year-1",
                              "max-age-max"])
def test_out_of_range_options_refused_before_any_request(local: Backend, kwargs: dict) -> None:
    """A lease that is born expired guards nothing, and a max_age reaching before year 1 cannot
    be a cutoff: both are ConfigErrors, raised before the first request (was: OverflowError, or
    a run under an expired lease)."""
    saver = local.saver()
    with pytest.raises(ConfigError):
        compact(saver, keep=1, **kwargs)
    assert local.requests == 0


# --- tags -----------------------------------------------------------------------------------


def test_tagged_checkpoint_survives_repeated_compaction(backend: Backend) -> None:
    """A tagged old checkpoint is kept by compaction, and by the next ones."""
    saver, tid = backend.saver(), new_thread()
    configs = put_chain(saver, tid, 6)
    saver.tag(configs[1], "approval")
    for _ in range(3):
        compact(saver, keep=2, threads=[tid])
        assert ids_in(saver, tid) == [checkpoint_id(i) for i in (1, 4, 5)]
    assert saver.tags(cfg(tid)) == {"approval": checkpoint_id(1)}


def test_tag_in_subgraph_namespace_is_kept(backend: Backend) -> None:
    """A tag applies in its namespace: the tagged subgraph checkpoint survives keep=1, also in a
    namespace no kept root checkpoint reaches (where it is all that remains)."""
    saver, tid = backend.saver(), new_thread()
    put_chain(saver, tid, 4)
    child = put_chain(saver, tid, 4, ns=child_ns(3))
    saver.tag(child[0], "draft")
    old = put_chain(saver, tid, 3, ns=child_ns(1))
    saver.tag(old[1], "draft")
    compact(saver, keep=1, threads=[tid])
    assert by_namespace(saver, tid) == {"": [checkpoint_id(3)],
                                        child_ns(1): [checkpoint_id(1)],
                                        child_ns(3): [checkpoint_id(0), checkpoint_id(3)]}


def test_untag_then_compaction_removes_it(backend: Backend) -> None:
    """Once untagged, the old checkpoint goes at the next compaction."""
    saver, tid = backend.saver(), new_thread()
    configs = put_chain(saver, tid, 6)
    saver.tag(configs[1], "approval")
    compact(saver, keep=2, threads=[tid])
    assert saver.untag(cfg(tid), "approval") is True
    compact(saver, keep=2, threads=[tid])
    assert ids_in(saver, tid) == [checkpoint_id(4), checkpoint_id(5)]
    assert saver.tags(cfg(tid)) == {}


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_untag_after_a_lost_response_reports_the_tag(local: Backend, mode: str) -> None:
    """untag's first try commits and its response is lost; the retry finds the tag already
    gone, yet untag answers True, as the stored state says (defect 11)."""
    saver = local.saver()
    configs = put_chain(saver, "t", 3)
    saver.tag(configs[1], "approval")
    lossy = LoseFirstResponse(local.transport, _sql.UNTAG)
    local.transport = lossy
    retrying = local.saver(retry=RetryPolicy(backoff_initial=0.0))

    if mode == "sync":
        existed = retrying.untag(cfg("t"), "approval")
    else:
        existed = asyncio.run(retrying.auntag(cfg("t"), "approval"))

    assert lossy.lost == 1 and existed is True
    assert retrying.tags(cfg("t")) == {}
    assert retrying.untag(cfg("t"), "approval") is False  # now there truly is none
    assert lossy.lost == 2  # (that one's response was lost too, and it still says False)


def test_tag_missing_checkpoint_raises_not_found(backend: Backend) -> None:
    """Tagging a checkpoint that does not exist raises NotFoundError and stores no tag."""
    saver, tid = backend.saver(), new_thread()
    put_chain(saver, tid, 2)
    with pytest.raises(NotFoundError):
        saver.tag(cfg(tid, checkpoint_id="no-such-checkpoint"), "approval")
    with pytest.raises(NotFoundError):
        saver.tag(cfg(new_thread(), checkpoint_id=checkpoint_id(0)), "approval")
    assert saver.tags(cfg(tid)) == {}


# --- writes and parents ---------------------------------------------------------------------


def test_writes_follow_their_checkpoints(backend: Backend) -> None:
    """Writes of deleted checkpoints are gone; those of kept checkpoints are intact."""
    saver, tid = backend.saver(), new_thread()
    put_chain(saver, tid, 6, writes=2)
    kept = [checkpoint_id(4), checkpoint_id(5)]
    kept_writes = write_rows(saver, tid, kept)
    assert count_writes(saver, tid) == 12 and len(kept_writes) == 4

    summary = compact(saver, keep=2, threads=[tid])

    assert count_writes(saver, tid) == 4
    assert write_rows(saver, tid, kept) == kept_writes
    assert (summary.checkpoints_deleted, summary.writes_deleted) == (4, 8)


def test_chunks_follow_their_checkpoints(backend: Backend) -> None:
    """Values over D1's 2 MB row limit live in pieces (with keys: without, values are stored by
    content, tests/compaction/test_content_gc.py): those of deleted checkpoints and writes go."""
    saver, tid = backend.saver(encryption_keys=[bytes([5]) * 32]), new_thread()
    blobs = {i: os.urandom(BIG) for i in range(3)}
    put_chain(saver, tid, 3, value=blobs.__getitem__)
    chunks = "SELECT COUNT(*) FROM chunks WHERE thread_id = ?1"
    per_checkpoint = query(saver, chunks, tid)[0][0] // 3
    assert per_checkpoint >= 4  # 2+ pieces for the checkpoint, 2+ for its write

    compact(saver, keep=1, threads=[tid])

    assert query(saver, chunks, tid)[0][0] == per_checkpoint
    head = saver.get_tuple(cfg(tid))
    assert head.checkpoint["channel_values"]["x"] == blobs[2]
    assert head.pending_writes == [("task-2", "x", blobs[2])]


def test_bytes_freed_counts_the_parts_of_deleted_checkpoints(backend: Backend) -> None:
    """A plan's bytes include the parts (the chunks table) of what goes, with checkpoints kept
    beside them (the parts' alias once hid d1saver_keep's inside the kept test, so only the
    checkpoint and write rows were counted), in the dry run and in the run's record."""
    saver, tid = backend.saver(encryption_keys=[bytes([5]) * 32]), new_thread()
    put_chain(saver, tid, 3, value=lambda i: os.urandom(BIG))
    head = saver.get_tuple(cfg(tid))
    assert head is not None
    going = query(saver, "SELECT COALESCE(SUM(LENGTH(data)), 0) FROM chunks "
                  "WHERE thread_id = ?1 AND checkpoint_id <> ?2", tid,
                  head.config["configurable"]["checkpoint_id"])[0][0]
    assert going > 4 * BIG

    dry = compact(saver, keep=1, threads=[tid], dry_run=True)
    summary = compact(saver, keep=1, threads=[tid])

    assert summary.checkpoints_deleted == 2
    assert going <= summary.bytes_freed < going + 100_000
    assert dry.bytes_freed == summary.bytes_freed


def test_writes_of_a_checkpoint_not_stored_yet_survive(backend: Backend) -> None:
    """With durability="async" a task's writes can land while its checkpoint's put is still in
    flight. Compaction leaves alone writes (and their chunks) of a checkpoint newer than its
    namespace's newest stored one, or of a namespace with none yet; the put then finds them
    (defect 12). Dry-run figures still equal what goes."""
    saver, tid = backend.saver(), new_thread()
    configs = put_chain(saver, tid, 4)
    big = os.urandom(BIG)
    pending = cfg(tid, checkpoint_id=checkpoint_id(4))
    saver.put_writes(pending, [("x", "soon"), ("x", big)], task_id="task-4")
    saver.put_writes(cfg(tid, "child:1", checkpoint_id(0)), [("x", "first")], task_id="task-c")
    # Stored by content (d1saver_chunks) without keys; pieces ("chunks") with them.
    chunks = ("SELECT (SELECT COUNT(*) FROM chunks WHERE thread_id = ?1) + "
              "(SELECT COUNT(*) FROM d1saver_chunks WHERE thread_id = ?1)")
    pending_chunks = query(saver, chunks, tid)[0][0]
    assert pending_chunks >= 2

    dry = compact(saver, keep=1, threads=[tid], dry_run=True)
    summary = compact(saver, keep=1, threads=[tid])

    assert (summary.checkpoints_deleted, summary.writes_deleted) == (3, 3)
    assert (dry.checkpoints_deleted, dry.writes_deleted, dry.bytes_freed) == (
        summary.checkpoints_deleted, summary.writes_deleted, summary.bytes_freed)
    assert query(saver, chunks, tid)[0][0] == pending_chunks
    head = put_checkpoint(saver, configs[-1], 4)
    assert saver.get_tuple(head).pending_writes == [("task-4", "x", "soon"), ("task-4", "x", big)]
    child = put_chain(saver, tid, 1, ns="child:1", writes=0)[0]
    assert saver.get_tuple(child).pending_writes == [("task-c", "x", "first")]


def test_orphan_writes_of_a_superseded_checkpoint_go(backend: Backend) -> None:
    """Writes whose checkpoint is missing while a newer one of its namespace is stored will
    never be read (the puts of a namespace are chained): compaction deletes and counts them."""
    saver, tid = backend.saver(), new_thread()
    configs = put_chain(saver, tid, 4)
    compact(saver, keep=1, threads=[tid])
    # a late put_writes of a checkpoint compaction already deleted: an orphan
    saver.put_writes(cfg(tid, checkpoint_id=checkpoint_id(1)), [("x", "late"), ("x", os.urandom(BIG))],
                     task_id="late")
    head = put_checkpoint(saver, configs[-1], 4)
    put_checkpoint(saver, head, 5)

    dry = compact(saver, keep=1, threads=[tid], dry_run=True)
    summary = compact(saver, keep=1, threads=[tid])

    assert (summary.checkpoints_deleted, summary.writes_deleted) == (2, 3)
    assert (dry.checkpoints_deleted, dry.writes_deleted, dry.bytes_freed) == (
        summary.checkpoints_deleted, summary.writes_deleted, summary.bytes_freed)
    assert count_writes(saver, tid) == 0
    assert query(saver, "SELECT COUNT(*) FROM chunks WHERE thread_id = ?1", tid) == [[0]]
    assert ids_in(saver, tid) == [checkpoint_id(5)]


def test_parent_pointers_stay_valid(backend: Backend) -> None:
    """Every kept checkpoint's parent is None or a kept checkpoint; the history walks them all."""
    saver = backend.saver()
    graph, config = one_step_graph(saver), cfg(new_thread())
    for i in range(5):
        graph.invoke({"log": [f"in{i}"]}, config)
    history = list(graph.get_state_history(config))
    tagged = history[7]  # a middle one of 15, whose parent will be deleted
    saver.tag(tagged.config, "approval")

    compact(saver, keep=2, threads=[config["configurable"]["thread_id"]])

    tuples = list(saver.list(config))
    kept = {t.config["configurable"]["checkpoint_id"] for t in tuples}
    assert len(kept) == 3
    assert all(t.parent_config is None or t.parent_config["configurable"]["checkpoint_id"] in kept
               for t in tuples)
    after = list(graph.get_state_history(config))
    assert [s.config["configurable"]["checkpoint_id"] for s in after] == sorted(kept, reverse=True)
    assert [s.values for s in after] == [history[0].values, history[1].values, tagged.values]
    assert after[0].parent_config == after[1].config and after[-1].parent_config is None


def test_graph_goes_on_after_compaction(backend: Backend) -> None:
    """After keep=1 the graph resumes from its head: state and new checkpoints as before."""
    saver = backend.saver()
    graph, config = one_step_graph(saver), cfg(new_thread())
    for i in range(3):
        graph.invoke({"log": [f"in{i}"]}, config)
    compact(saver, keep=1, threads=[config["configurable"]["thread_id"]])
    result = graph.invoke({"log": ["in3"]}, config)
    assert result == {"log": ["in0", "step", "in1", "step", "in2", "step", "in3", "step"]}
    assert len(list(graph.get_state_history(config))) == 1 + 3


# --- DeltaChannel ---------------------------------------------------------------------------


def test_delta_channel_state_survives_compaction(backend: Backend) -> None:
    """keep=1 keeps the head only, its DeltaChannel history frozen first: same state after."""
    saver = backend.saver()
    graph, config = run_delta_thread(saver)
    before = graph.get_state(config).values
    chain = seed_chain(saver, config)
    assert len(chain) > 1  # the head stores no snapshot: the channel replays from ancestors

    compact(saver, keep=1, threads=[config["configurable"]["thread_id"]])

    assert ids_in(saver, config["configurable"]["thread_id"]) == [chain[0]]
    assert graph.get_state(config).values == before
    assert before["messages"] == ["hi", *(f"m{i}" for i in range(13))]


def test_delta_channel_state_survives_prune(backend: Backend) -> None:
    """saver.prune (keep_latest) keeps the head only, its DeltaChannel history frozen: same
    state after."""
    saver = backend.saver()
    graph, config = run_delta_thread(saver)
    before = graph.get_state(config).values
    chain = seed_chain(saver, config)

    saver.prune([config["configurable"]["thread_id"]])

    assert ids_in(saver, config["configurable"]["thread_id"]) == [chain[0]]
    assert len(chain) > 1
    assert graph.get_state(config).values == before


def test_delta_channel_without_seed_is_frozen_whole(backend: Backend) -> None:
    """A DeltaChannel written once and never snapshotted replays from the thread's start: keep=1
    keeps the head only, its frozen history reaching back to the start: same state after."""
    saver = backend.saver()
    graph, config = delta_graph(saver, note_at=2), cfg(new_thread())
    graph.invoke({"messages": ["hi"], "n": 0}, config)
    before = graph.get_state(config).values
    tid = config["configurable"]["thread_id"]
    count = len(ids_in(saver, tid))

    summary = compact(saver, keep=1, threads=[tid])

    assert summary.checkpoints_deleted == count - 1 and len(ids_in(saver, tid)) == 1
    assert graph.get_state(config).values == before
    assert before["notes"] == ["note@2"]


def test_delta_channel_graph_goes_on_after_compaction(backend: Backend) -> None:
    """After keep=1, a DeltaChannel graph runs on from its head exactly as it would have."""
    saver = backend.saver()
    graph, config = run_delta_thread(saver)
    compact(saver, keep=1, threads=[config["configurable"]["thread_id"]])
    memory = InMemorySaver()
    graph_m, config_m = run_delta_thread(memory)
    for turn in range(2):
        state = {"messages": [f"user{turn}"], "n": 0}
        assert graph.invoke(state, config) == graph_m.invoke(state, config_m)
    assert graph.get_state(config).values == graph_m.get_state(config_m).values


def test_delta_channel_tagged_checkpoint_keeps_its_seed(backend: Backend) -> None:
    """A tagged checkpoint without a snapshot keeps its state (its history frozen), and so does
    the head: both, and only they, remain."""
    saver = backend.saver()
    graph, config, history, tagged = tagged_delta_thread(saver)
    expected = {seed_chain(saver, config)[0], seed_chain(saver, tagged.config)[0]}

    compact(saver, keep=1, threads=[config["configurable"]["thread_id"]])

    assert set(ids_in(saver, config["configurable"]["thread_id"])) == expected
    assert graph.get_state(tagged.config).values == tagged.values
    assert graph.get_state(config).values == history[0].values


def test_idle_delta_thread_keeps_tagged_seed_chain(backend: Backend) -> None:
    """An idle DeltaChannel thread keeps only its tagged checkpoint, its history frozen."""
    saver = backend.saver()
    graph, config, _, tagged = tagged_delta_thread(saver)
    chain = seed_chain(saver, tagged.config)
    tid = config["configurable"]["thread_id"]

    summary = compact(saver, keep=1, threads=[tid], max_age=timedelta(0))  # idle: all of them

    assert summary.threads_expired == 1
    assert ids_in(saver, tid) == [chain[0]]
    assert graph.get_state(tagged.config).values == tagged.values


# --- interrupts -----------------------------------------------------------------------------


def run_interrupted(make_graph: Callable[[BaseCheckpointSaver, Counter], CompiledStateGraph],
                    saver: BaseCheckpointSaver, between: Callable[[RunnableConfig], None]
                    ) -> dict[str, Any]:
    """Invoke until interrupt(), call `between`, resume with "yes": what a user observes."""
    runs: Counter = Counter()
    graph, config = make_graph(saver, runs), cfg(new_thread())
    graph.invoke({"log": ["in"]}, config)
    paused = graph.get_state(config)
    between(config)
    resumed = graph.get_state(config)
    final = graph.invoke(Command(resume="yes"), config)
    return {"paused": (paused.values, paused.next), "resumed": (resumed.values, resumed.next),
            "final": final, "runs": dict(runs)}


def nothing(config: RunnableConfig) -> None:
    pass


def test_interrupt_with_finished_siblings_survives_compaction(backend: Backend) -> None:
    """Paused at interrupt() with two finished siblings, compacted to keep=1, resumed: same
    final state as without compaction, and the finished siblings do not run again."""
    saver = backend.saver()
    pending: list[list] = []

    def compact_keep_1(config: RunnableConfig) -> None:
        tid = config["configurable"]["thread_id"]
        pending.append(saver.get_tuple(config).pending_writes)
        assert len(ids_in(saver, tid)) > 1
        compact(saver, keep=1, threads=[tid])
        assert len(ids_in(saver, tid)) == 1
        pending.append(saver.get_tuple(config).pending_writes)

    got = run_interrupted(fan_out_interrupt_graph, saver, compact_keep_1)
    want = run_interrupted(fan_out_interrupt_graph, InMemorySaver(), nothing)

    assert got == want
    assert got["runs"] == {"s1": 1, "s2": 1, "a": 1, "b": 1, "ask": 2, "join": 1}
    assert got["resumed"] == got["paused"] and got["paused"][1] == ("ask",)
    # The siblings' writes and the interrupt were pending on the head, and still are.
    assert pending[0] == pending[1]
    assert {channel for _, channel, _ in pending[0]} >= {"log", "__interrupt__"}


def test_interrupt_in_subgraph_survives_compaction(backend: Backend) -> None:
    """Paused inside a subgraph, compacted to keep=1 per namespace, resumed: same as without compaction."""
    saver = backend.saver()

    def compact_keep_1(config: RunnableConfig) -> None:
        tid = config["configurable"]["thread_id"]
        before = by_namespace(saver, tid)
        assert len(before) == 2 and all(len(ids) > 1 for ids in before.values())
        compact(saver, keep=1, threads=[tid])
        assert by_namespace(saver, tid) == {ns: newest(ids, 1) for ns, ids in before.items()}

    got = run_interrupted(subgraph_interrupt_graph, saver, compact_keep_1)
    want = run_interrupted(subgraph_interrupt_graph, InMemorySaver(), nothing)

    assert got == want
    assert got["runs"] == {"before": 1, "draft": 1, "review": 2, "after": 1}


# --- killed mid-run, then rerun -------------------------------------------------------------


class Killed(Exception):
    pass


def kill_after(batches: int) -> Callable[[int, int], None]:
    calls = Counter()

    def progress(done: int, total: int) -> None:
        calls["batches"] += 1
        if calls["batches"] == batches:
            raise Killed(f"killed after batch {batches} ({done} of {total} threads)")
    return progress


def test_rerun_after_kill_matches_a_clean_run(local: Backend) -> None:
    """Killed after its 2nd batch, a rerun ends exactly where one uninterrupted run ends."""
    saver = local.saver()
    threads = build_fleet(saver, 12)
    other = local_backend()  # an identical database, compacted in one go
    try:
        reference = other.saver()
        build_fleet(reference, 12)
        assert dump(reference) == dump(saver)
        compact(reference, keep=2, batch_checkpoints=20)

        with pytest.raises(Killed):
            compact(saver, keep=2, batch_checkpoints=20, progress=kill_after(2))
        trimmed = [t for t in threads if len(ids_in(saver, t)) < 8]
        assert 0 < len(trimmed) < len(threads)  # partially compacted, whole threads at a time
        assert all(len(ids_in(saver, t)) == 8 for t in threads if t not in trimmed)

        summary = compact(saver, keep=2, batch_checkpoints=20)

        assert summary.threads_compacted == len(threads) - len(trimmed)
        assert dump(saver) == dump(reference)
    finally:
        assert other.engine is not None
        other.engine.close()


def test_rerun_keeps_everything_it_should(local: Backend) -> None:
    """After a kill and a rerun: N per namespace plus the tagged checkpoints, nothing more or less."""
    saver = local.saver()
    threads = build_fleet(saver, 12)
    with pytest.raises(Killed):
        compact(saver, keep=2, batch_checkpoints=20, progress=kill_after(2))
    compact(saver, keep=2, batch_checkpoints=20)
    for i, tid in enumerate(threads):
        root = ([checkpoint_id(1)] if i % 3 == 0 else []) + [checkpoint_id(6), checkpoint_id(7)]
        assert by_namespace(saver, tid) == {"": root,
                                            child_ns(7): [checkpoint_id(2), checkpoint_id(3)]}
        assert count_writes(saver, tid) == len(root) + 2


def test_killed_run_releases_its_lease(local: Backend) -> None:
    """A run that fails midway releases the lease on its way out: the next run needs no --break-lease."""
    saver = local.saver()
    build_fleet(saver, 12)
    with pytest.raises(Killed):
        compact(saver, keep=2, batch_checkpoints=20, progress=kill_after(2))
    assert leases_held(saver) == []
    compact(saver, keep=2, batch_checkpoints=20)


def test_faults_retried_to_the_same_end_state(local: Backend) -> None:
    """With 5xx, dropped and lost responses retried, the run ends where a clean run ends."""
    saver = local.saver()
    build_fleet(saver, 12)
    other = local_backend()
    try:
        reference = other.saver()
        build_fleet(reference, 12)
        clean = compact(reference, keep=2, batch_checkpoints=20)
        assert local.engine is not None
        local.engine.faults = FaultPlan(seed=3, rate_5xx=0.2, rate_drop=0.1, rate_lost_response=0.4)
        retrying = local.saver(retry=RetryPolicy(max_attempts=30, backoff_initial=0.0))

        faulty = compact(retrying, keep=2, batch_checkpoints=20)

        local.engine.faults = None
        assert faulty.requests > clean.requests  # faults were met, and retried
        assert dump(saver) == dump(reference)
        assert leases_held(saver) == []
        assert figures(faulty) == figures(clean)
    finally:
        assert other.engine is not None
        other.engine.close()


def figures(summary: Summary) -> dict[str, Any]:
    """What a run reports, but for its cost (requests, seconds)."""
    out = dataclasses.asdict(summary)
    del out["requests"], out["seconds"]
    return out


def test_summary_after_lost_responses_equals_a_clean_run(local: Backend) -> None:
    """Every batch's first try commits and loses its response; the retry finds nothing more
    to delete, yet the run reports what a clean run reports: each batch's figures are read
    back from what its first try recorded (defect 11)."""
    def fleet(saver: D1Saver) -> None:
        build_fleet(saver, 12)
        put_chain(saver, "idle", 5, ts=LONG_AGO, writes=2)

    other = local_backend()
    try:
        reference = other.saver()
        fleet(reference)
        clean = compact(reference, keep=2, batch_checkpoints=20, max_age=timedelta(days=30))
        fleet(local.saver())
        lossy = LoseFirstResponse(local.transport, _sql.CHECK_LEASE)  # every compaction batch
        local.transport = lossy
        retrying = local.saver(retry=RetryPolicy(backoff_initial=0.0))

        faulty = compact(retrying, keep=2, batch_checkpoints=20, max_age=timedelta(days=30))

        assert lossy.lost == faulty.batches == clean.batches > 1
        assert figures(faulty) == figures(clean)
        assert dump(retrying) == dump(reference)
    finally:
        assert other.engine is not None
        other.engine.close()


# --- dry run --------------------------------------------------------------------------------


def test_dry_run_changes_nothing(local: Backend) -> None:
    """A dry run leaves every row of every table as it was, and takes no lease."""
    saver = local.saver()
    build_fleet(saver, 6)
    before = dump(saver)
    summary = compact(saver, keep=2, dry_run=True, max_age=timedelta(days=1))
    assert summary.checkpoints_deleted > 0
    assert dump(saver) == before
    assert leases_held(saver) == []


def test_a_dry_run_migrates_nothing(local: Backend) -> None:
    """A schema older than this d1saver's is refused by a dry run, not migrated (a run that is
    not dry migrates it); a database with none stays without one and finds nothing."""
    saver = local.saver()
    assert compact(saver, keep=1, dry_run=True).threads_scanned == 0
    (tables,) = saver.client.execute([Statement("SELECT name FROM sqlite_master")])
    assert tables.rows == []
    with local.saver(auto_setup=False) as raw:
        one_step_behind(raw)
        build_fleet(raw, 3)
    latest = Statement("SELECT MAX(version) AS v FROM d1saver_schema")
    saver = local.saver()
    with pytest.raises(ConfigError, match=rf"v{_sql.SCHEMA_VERSION - 1}\).*without --dry-run"):
        compact(saver, keep=1, dry_run=True)
    assert saver.client.execute([latest])[0].rows == [[_sql.SCHEMA_VERSION - 1]]
    assert compact(saver, keep=1).checkpoints_deleted > 0
    assert saver.client.execute([latest])[0].rows == [[_sql.SCHEMA_VERSION]]


def test_dry_run_reports_what_the_real_run_deletes(local: Backend) -> None:
    """Dry-run figures equal the real run's, and those equal the rows that actually went."""
    saver = local.saver()
    build_fleet(saver, 6)
    put_chain(saver, "idle", 5, ts=LONG_AGO, writes=2)
    before = dump(saver)

    dry = compact(saver, keep=2, dry_run=True, max_age=timedelta(days=30))
    real = compact(saver, keep=2, max_age=timedelta(days=30))
    after = dump(saver)

    figures = ("threads_scanned", "threads_compacted", "threads_expired", "checkpoints_deleted",
               "writes_deleted", "checkpoints_kept", "bytes_freed")
    assert {f: getattr(dry, f) for f in figures} == {f: getattr(real, f) for f in figures}
    assert real.checkpoints_deleted == len(before["checkpoints"]) - len(after["checkpoints"])
    assert real.writes_deleted == len(before["writes"]) - len(after["writes"])
    assert real.checkpoints_kept == len(after["checkpoints"])
    assert sum(p["checkpoints_deleted"] for p in dry.plan) == dry.checkpoints_deleted
    assert [p["thread_id"] for p in dry.plan if p["expired"]] == ["idle"]


def test_recorded_summary_reads_back_as_the_plan(backend: Backend) -> None:
    """A deleting batch's summary, recorded and read back, has the dry run's rows, thread ids
    (unicode, NUL) included."""
    saver = backend.saver()
    threads = sorted(new_thread() + suffix for suffix in ("-é漢", "-\x00nul", ""))
    for tid in threads:
        put_chain(saver, tid, 4, writes=2)
    dry_batch = admin.retention(threads, 1, summarize=True, delete=False)
    dry = admin.retention_summary(dry_batch, saver.execute(dry_batch))
    batch = admin.retention(threads, 1, summarize=True)
    real = admin.retention_summary(batch, saver.execute(batch))
    assert real.columns == dry.columns == list(_sql.SUMMARY_COLUMNS)
    assert real.rows == dry.rows == [[tid, 4, 3, 6, dry.rows[i][4]] for i, tid in enumerate(threads)]
    assert all(row[4] > 0 for row in real.rows)


# --- the lease ------------------------------------------------------------------------------


@pytest.fixture
def leased(backend: Backend) -> Iterator[Backend]:
    """The backend; the compaction lease is removed afterwards (the real engine's database is
    shared by every test, so a lease left behind would block the next ones)."""
    yield backend
    with backend.saver() as saver:
        lease.break_lease(saver)


def fleet_sizes(saver: D1Saver, threads: list[str]) -> list[int]:
    return [len(ids_in(saver, t)) for t in threads]


def test_overlapping_run_is_refused(leased: Backend) -> None:
    """While another run holds the lease, compact() raises LeaseHeldError and deletes nothing."""
    saver = leased.saver()
    threads = build_fleet(saver, 3, prefix=new_thread())
    held = lease.acquire(saver, ttl=300)
    with pytest.raises(LeaseHeldError, match="another compaction run holds the lease"):
        compact(saver, keep=1, threads=threads)
    assert fleet_sizes(saver, threads) == [8, 8, 8]
    assert leases_held(saver) == [["compaction", held.holder]]


def test_dry_run_ignores_the_lease(leased: Backend) -> None:
    """A dry run works while another run holds the lease (it changes nothing)."""
    saver = leased.saver()
    threads = build_fleet(saver, 3, prefix=new_thread())
    lease.acquire(saver, ttl=300)
    assert compact(saver, keep=1, threads=threads, dry_run=True).checkpoints_deleted > 0


@pytest.mark.parametrize("how", ["ttl=-1", "expired row"])
def test_stale_lease_does_not_block(leased: Backend, how: str) -> None:
    """A lease past its expiry (its run died) is taken over, and released at the end."""
    saver = leased.saver()
    threads = build_fleet(saver, 3, prefix=new_thread())
    if how == "ttl=-1":
        lease.acquire(saver, ttl=-1)
    else:
        query(saver, "INSERT INTO leases (name, holder, expires_at) VALUES ('compaction', 'ghost',"
                     " CAST(strftime('%s', 'now') AS INTEGER) - 60)")
    compact(saver, keep=1, threads=threads)
    assert fleet_sizes(saver, threads) == [2, 1, 1]  # the first thread is tagged
    assert leases_held(saver) == []


def test_break_lease_removes_a_live_lease(leased: Backend) -> None:
    """break_lease=True removes a live lease first, then runs."""
    saver = leased.saver()
    threads = build_fleet(saver, 3, prefix=new_thread())
    lease.acquire(saver, ttl=300)
    compact(saver, keep=1, threads=threads, break_lease=True)
    assert fleet_sizes(saver, threads) == [2, 1, 1]
    assert leases_held(saver) == []


def test_lost_lease_stops_the_run(leased: Backend) -> None:
    """If another run takes the lease midway, the next batch is refused whole and the run stops."""
    saver, intruder = leased.saver(), leased.saver()
    threads = build_fleet(saver, 6, tag_every=0, prefix=new_thread())
    taken: list[lease.Lease] = []

    def steal(done: int, total: int) -> None:
        if not taken:
            lease.break_lease(intruder)
            taken.append(lease.acquire(intruder, ttl=300))

    with pytest.raises(LeaseHeldError, match="lost its lease"):
        compact(saver, keep=2, threads=threads, batch_checkpoints=20, progress=steal)
    # Batch 1 (2 threads) was applied, batch 2 not at all; the intruder's lease is untouched.
    assert fleet_sizes(saver, threads) == [2, 2, 8, 8, 8, 8]
    assert leases_held(saver) == [["compaction", taken[0].holder]]


# --- --max-age ------------------------------------------------------------------------------


def test_max_age_deletes_idle_threads_except_tags(backend: Backend) -> None:
    """A thread idle longer than max_age loses all but its tagged checkpoints; an active one is trimmed."""
    saver, idle, active = backend.saver(), new_thread(), new_thread()
    idle_configs = put_chain(saver, idle, 5, ts=LONG_AGO, writes=2)
    put_chain(saver, idle, 3, ns="child:1", ts=LONG_AGO)
    saver.tag(idle_configs[2], "approval")
    put_chain(saver, active, 5)

    summary = compact(saver, keep=2, threads=[idle, active], max_age=timedelta(days=30))

    assert by_namespace(saver, idle) == {"": [checkpoint_id(2)]}
    assert count_writes(saver, idle) == 2
    assert saver.get_tuple(cfg(idle)).parent_config is None
    assert ids_in(saver, active) == [checkpoint_id(3), checkpoint_id(4)]
    assert (summary.threads_expired, summary.threads_compacted) == (1, 1)


def test_max_age_deletes_untagged_idle_threads_entirely(backend: Backend) -> None:
    """An idle thread without tags is gone, writes included."""
    saver, idle = backend.saver(), new_thread()
    put_chain(saver, idle, 4, ts=LONG_AGO)
    compact(saver, keep=2, threads=[idle], max_age=timedelta(days=30))
    assert by_namespace(saver, idle) == {} and count_writes(saver, idle) == 0


# --- bounded work ---------------------------------------------------------------------------


def test_requests_are_bounded_by_batches(local: Backend) -> None:
    """30 threads x 20 checkpoints, keep 5, batches of <= 100 deletions: list (the schema's
    version riding with it) + acquire + 5 batches + release requests, each batch within D1's
    limits and its deletion budget."""
    build_fleet(local.saver(), 30, root=20, child=0, tag_every=0)
    counter = local.saver()
    saver = local.saver()  # fresh: it has not seen the schema yet
    remaining = [30 * 20]

    def per_batch(done: int, total: int) -> None:
        left = query(counter, "SELECT COUNT(*) FROM checkpoints")[0][0]
        assert remaining[-1] - left <= 100
        remaining.append(left)

    summary = compact(saver, keep=5, batch_checkpoints=100, progress=per_batch)

    assert summary.batches == 5  # 15 deletions a thread: 6 threads (90) a batch
    assert summary.requests == saver.client.requests == 1 + 1 + summary.batches + 1
    assert remaining[-1] == 30 * 5 and summary.checkpoints_deleted == 30 * 15


def _statements(events: list[Any]) -> list[str]:
    return [s.name for e in events for s in e.statements]


def test_a_run_probes_the_schema_instead_of_setting_it_up(local: Backend) -> None:
    """On a database at this schema version, a run sends no statement of schema.sql: the
    version is read riding with its first request (0.2.0 sent schema.sql whole, 52 statements
    in a request of its own, every run). A fresh database is set up by that first request, an
    older one migrated (test_a_dry_run_migrates_nothing); a saver that does not set up on first
    use reads the version in one request of its own, and sets up only what is missing."""
    build_fleet(local.saver(), 3, root=4, child=0, tag_every=0)
    events: list[Any] = []
    summary = compact(local.saver(tracer=events.append), keep=1)
    sent = _statements(events)
    assert sent.count("READ_SCHEMA") == 1 and not [n for n in sent if n.startswith("SCHEMA[")]
    assert summary.requests == len(events) == 4  # list + version, acquire, 1 batch, release
    assert summary.checkpoints_deleted == 3 * 3

    events.clear()
    compact(local.saver(tracer=events.append, auto_setup=False), keep=1)
    sent = _statements(events)
    assert sent[0] == "READ_SCHEMA" and len(events[0].statements) == 1
    assert not [n for n in sent if n.startswith("SCHEMA[")]

    for auto_setup in (True, False):
        fresh = local_backend()
        try:
            assert compact(fresh.saver(auto_setup=auto_setup), keep=1).threads_scanned == 0
            assert query(fresh.saver(), "SELECT MAX(version) FROM d1saver_schema") == [
                [_sql.SCHEMA_VERSION]]
        finally:
            assert fresh.engine is not None
            fresh.engine.close()


def test_named_threads_batches_within_limits(backend: Backend) -> None:
    """The same on named threads, on both engines: thread info + acquire + 5 batches + release,
    every batch accepted by the engine (D1's limits on parameters, SQL size and time)."""
    saver = backend.saver()
    saver.setup()  # so the count below has no setup request, whatever the database held before
    threads = build_fleet(saver, 30, root=20, child=0, tag_every=0, prefix=new_thread())
    summary = compact(saver, keep=5, threads=threads, batch_checkpoints=100)
    assert (summary.batches, summary.requests) == (5, 1 + 1 + 5 + 1)
    assert fleet_sizes(saver, threads) == [5] * 30


def test_threads_within_keep_cost_no_batch(local: Backend) -> None:
    """Threads with no more than N checkpoints are skipped without a request."""
    saver = local.saver()
    build_fleet(saver, 5, root=3, child=0, tag_every=0)
    summary = compact(saver, keep=3)
    assert summary.batches == 0 and summary.checkpoints_kept == 15
    assert summary.requests == 3  # list, acquire, release


def test_summary_as_dict_without_plan() -> None:
    """Summary.as_dict(with_plan=False) has the figures the CLI prints, without the plan."""
    out = Summary(dry_run=False, keep=2).as_dict(with_plan=False)
    assert "plan" not in out and {"threads_scanned", "checkpoints_deleted", "writes_deleted",
                                  "checkpoints_kept", "requests"} <= set(out)
