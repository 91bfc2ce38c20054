"""Compaction and prune(keep_latest) bound DeltaChannel threads too (issue 12): a kept checkpoint's
DeltaChannel history is frozen (delta_frozen) before the ancestors it replays from go, so
`--keep 1` with one tag leaves 2 checkpoints of a 21-step thread, with the same state at the
head and at the tag, and the thread runs on as InMemorySaver's does.

The threads are named, so the tests run on both backends (local D1 and Wrangler's real engine).
"""

from __future__ import annotations

import copy
import os
import uuid
from collections import Counter
from typing import Annotated, Any

import pytest
from langchain_core.messages import HumanMessage
from langchain_core.runnables import RunnableConfig
from langgraph.channels.delta import DeltaChannel
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph
from typing_extensions import TypedDict

from benchmarks.workload import append_batches, build_graph, first_input
from d1saver.compaction import compact
from d1saver.compaction.rekey import rekey
from d1saver import D1Saver, PlaintextValueError, Statement
from d1saver.storage.crypto import key_id
from tests.compaction import BIG, cfg, ids_in, new_thread, query
from tests.compaction.test_rekey import RacingTransport
from tests.conftest import Backend
from tests.saver import graphs
from tests.saver.mirror import Recording

KEY = bytes(range(32))
STEPS = 21  # the benchmark agent's checkpoints for 10 turns: input, then agent and tools


def agent(saver: BaseCheckpointSaver, snapshot_frequency: int = 50) -> CompiledStateGraph:
    """The benchmark's agent, its messages in a DeltaChannel (10 turns of 3 parallel tools)."""
    return build_graph(saver, variant="delta", turns=10, snapshot_frequency=snapshot_frequency)


def follow_up(n: int) -> dict[str, Any]:
    return {"messages": [HumanMessage(content=f"and then? ({n})", id=f"human-follow-{n}")]}


def frozen_rows(saver: D1Saver, thread_id: str) -> int:
    return query(saver, "SELECT COUNT(*) FROM delta_frozen WHERE thread_id = ?1", thread_id)[0][0]


def orphan_records(saver: D1Saver) -> int:
    """delta_frozen rows whose holder checkpoint is gone (there must be none)."""
    return query(saver, """SELECT COUNT(*) FROM delta_frozen AS f WHERE NOT EXISTS (
        SELECT 1 FROM checkpoints AS c WHERE c.thread_id = f.thread_id
            AND c.checkpoint_ns = f.checkpoint_ns AND c.checkpoint_id = f.checkpoint_id)""")[0][0]


class Run:
    """One DeltaChannel thread on the saver and the same run on InMemorySaver, side by side."""

    def __init__(self, saver: D1Saver, snapshot_frequency: int = 50) -> None:
        self.saver, self.config = saver, cfg(new_thread())
        self.tid = self.config["configurable"]["thread_id"]
        self.graph = agent(saver, snapshot_frequency)
        self.memory = agent(InMemorySaver(), snapshot_frequency)
        self.config_m: RunnableConfig = {"configurable": {"thread_id": "m"}}
        self.turn(first_input())

    def turn(self, state: dict[str, Any]) -> None:
        """Both run the same input: the same result and the same state."""
        assert self.graph.invoke(state, self.config) == self.memory.invoke(state, self.config_m)
        self.assert_head()

    def assert_head(self) -> None:
        assert (self.graph.get_state(self.config).values
                == self.memory.get_state(self.config_m).values)

    def tag(self, back: int) -> RunnableConfig:
        """Tag the checkpoint `back` steps before the head; returns its config."""
        config = list(self.graph.get_state_history(self.config))[back].config
        self.saver.tag(config, "mid")
        return config


def test_keep_one_with_a_tag_leaves_two_checkpoints(backend: Backend) -> None:
    """The issue's target: `--keep 1` with one tag on a 21-step DeltaChannel thread
    (snapshot_frequency=50: no snapshot) leaves the head and the tag, with the state of both
    as before; the thread runs on as InMemorySaver's."""
    run = Run(backend.saver())
    assert len(ids_in(run.saver, run.tid)) == STEPS
    tagged = run.tag(10)
    head_before = run.graph.get_state(run.config).values
    tag_before = run.graph.get_state(tagged).values
    assert len(head_before["messages"]) > len(tag_before["messages"]) > 1

    summary = compact(run.saver, keep=1, threads=[run.tid])

    assert summary.checkpoints_deleted == STEPS - 2
    assert len(list(run.saver.list(run.config))) == 2
    assert run.graph.get_state(run.config).values == head_before
    assert run.graph.get_state(tagged).values == tag_before
    assert frozen_rows(run.saver, run.tid) > 0 and orphan_records(run.saver) == 0
    run.turn(follow_up(1))


def test_prune_keep_latest_leaves_the_head(backend: Backend) -> None:
    """saver.prune(strategy="keep_latest") on the same thread leaves 1 checkpoint, same state."""
    run = Run(backend.saver())
    before = run.graph.get_state(run.config).values

    run.saver.prune([run.tid], strategy="keep_latest")

    assert len(list(run.saver.list(run.config))) == 1
    assert run.graph.get_state(run.config).values == before
    run.turn(follow_up(1))


def test_second_compaction_refreezes(backend: Backend) -> None:
    """After more steps, a second compaction freezes the new head from the old head's record
    (deleted with it) and the newer writes; the tag keeps its own. State as before, every
    turn, and records only on kept checkpoints."""
    run = Run(backend.saver())
    tagged = run.tag(10)
    tag_before = run.graph.get_state(tagged).values
    compact(run.saver, keep=1, threads=[run.tid])
    for n in range(1, 3):
        run.turn(follow_up(n))
        assert len(ids_in(run.saver, run.tid)) > 2
        compact(run.saver, keep=1, threads=[run.tid])
        assert len(ids_in(run.saver, run.tid)) == 2
        run.assert_head()
        assert run.graph.get_state(tagged).values == tag_before
        assert orphan_records(run.saver) == 0
    run.turn(follow_up(3))


def test_frozen_with_encryption_keys(backend: Backend) -> None:
    """With keys: the values are copied as stored (sealed, never opened by compaction) and open
    with the binding of the rows they were stored at."""
    run = Run(backend.saver(encryption_keys=[KEY]))
    tagged = run.tag(10)
    head_before = run.graph.get_state(run.config).values
    tag_before = run.graph.get_state(tagged).values
    stored = {r[0] for r in query(run.saver, "SELECT value FROM writes WHERE thread_id = ?1",
                                  run.tid)}

    compact(run.saver, keep=1, threads=[run.tid])

    copied = query(run.saver, "SELECT value FROM delta_frozen WHERE thread_id = ?1 AND kind = 'w'",
                   run.tid)
    assert copied and all(v.startswith("e:") and v in stored for (v,) in copied)
    assert len(ids_in(run.saver, run.tid)) == 2
    assert run.graph.get_state(run.config).values == head_before
    assert run.graph.get_state(tagged).values == tag_before
    run.turn(follow_up(1))


def test_copy_with_keys_reseals_the_records(backend: Backend) -> None:
    """copy_thread under keys re-seals the records for the target: one request more, their
    write (their first read rides with the writes' last batch, so a thread without records
    costs what it did). The copy's state is the source's; its frozen values differ from the
    source's (bound to the target)."""
    run = Run(backend.saver(encryption_keys=[KEY], page_size=1000))
    compact(run.saver, keep=1, threads=[run.tid])
    copy = new_thread()
    _, requests = backend.count(lambda: run.saver.copy_thread(run.tid, copy))
    # checkpoints: read, write; writes: read, write + the records' read; records: write.
    assert requests == 2 + 2 + 1
    assert run.graph.get_state(cfg(copy)).values == run.graph.get_state(run.config).values
    source, target = ({r[0] for r in query(run.saver, "SELECT value FROM delta_frozen"
                                           " WHERE thread_id = ?1 AND kind = 'w'", t)}
                      for t in (run.tid, copy))
    assert len(source) == len(target) > 0 and not source & target
    run.graph.invoke(follow_up(1), cfg(copy))
    run.turn(follow_up(1))
    assert run.graph.get_state(cfg(copy)).values == run.graph.get_state(run.config).values


def test_rekey_reseals_the_records(local: Backend) -> None:
    """Rotation: `rekey` re-seals frozen values (and their pieces) under the new key like any
    other value, so the old key can go and the compacted thread still reads the same."""
    old_key, new_key = bytes([1]) * 32, bytes([2]) * 32
    saver, config = local.saver(encryption_keys=[old_key]), cfg(new_thread())
    graph = blob_graph(saver, os.urandom(BIG).hex())
    graph.invoke({"messages": ["hi"], "n": 0}, config)
    compact(saver, keep=1, threads=[config["configurable"]["thread_id"]])
    before = graph.get_state(config).values
    rotated = local.saver(encryption_keys=[new_key, old_key])
    census = rotated.key_census()
    assert set(census["delta_frozen"]) == {key_id(old_key).hex()}

    summary = rekey(rotated)

    assert summary.after is not None
    assert set(summary.after["delta_frozen"]) == {key_id(new_key).hex()}
    dropped = local.saver(encryption_keys=[new_key])
    assert blob_graph(dropped, "").get_state(config).values == before


def test_rekey_of_a_thread_and_its_copy_guards_each_row_by_its_own_pieces(local: Backend
                                                                           ) -> None:
    """A keyed copy holds pieces under its source's checkpoint ids and owners, in another
    thread (a frozen write and a checkpoint over the row limit). A rekey compares each row
    read with its own pieces only: one pass re-seals every value of both, and both read back
    under the new key alone."""
    old_key, new_key = bytes([3]) * 32, bytes([4]) * 32
    saver, config = local.saver(encryption_keys=[old_key]), cfg(new_thread())
    tid, copy = config["configurable"]["thread_id"], new_thread()
    graph = blob_graph(saver, os.urandom(BIG).hex())
    graph.invoke({"messages": ["hi"], "n": 0}, config)
    compact(saver, keep=1, threads=[tid])
    big = {"configurable": {"thread_id": tid, "checkpoint_ns": "big"}}
    big = saver.put(big, {**empty_checkpoint(), "channel_values": {"b": os.urandom(BIG)}},
                    {"step": 0}, {})
    saver.copy_thread(tid, copy)
    pieces = "SELECT COUNT(*) FROM chunks WHERE thread_id = ?1 AND owner = ?2"
    for owner in ("f/%", ""):
        assert query(saver, pieces.replace("owner =", "owner LIKE"), copy, owner)[0][0] > 1
    fresh = blob_graph(local.saver(encryption_keys=[new_key]), "")
    before = [graph.get_state(cfg(t)).values for t in (tid, copy)]
    summary = rekey(local.saver(encryption_keys=[new_key, old_key]))
    assert summary.skipped == 0 and summary.after is not None
    assert {t: set(per) for t, per in summary.after.items() if per} == {
        t: {key_id(new_key).hex()} for t in ("checkpoints", "delta_frozen")}
    assert [fresh.get_state(cfg(t)).values for t in (tid, copy)] == before
    keyed = local.saver(encryption_keys=[new_key])
    for t in (tid, copy):
        got = keyed.get_tuple({"configurable": {**big["configurable"], "thread_id": t}})
        assert got is not None and len(got.checkpoint["channel_values"]["b"]) == BIG


def test_a_record_changed_during_a_rekey_is_not_overwritten(local: Backend) -> None:
    """A frozen record changed by another writer while `rekey --seal-plaintext` seals it is
    not overwritten with what was read, even where a plaintext copy of its thread still
    holds that very record: the page is read again and the newer value sealed."""
    plain, config = local.saver(), cfg(new_thread())
    tid = config["configurable"]["thread_id"]
    graph = blob_graph(plain, "blob")
    graph.invoke({"messages": ["hi"], "n": 0}, config)
    compact(plain, keep=1, threads=[tid])
    plain.copy_thread(tid, new_thread())  # the same records, their values as stored
    (first, *_, last) = query(plain, "SELECT checkpoint_id, channel, kind, depth, task_id, idx,"
                                     " value FROM delta_frozen WHERE thread_id = ?1"
                                     " AND kind = 'w' ORDER BY depth", tid)
    assert first[-1] != last[-1]

    def change(thread_id: str) -> None:  # the first record now holds the last one's write
        plain.execute([Statement(
            "UPDATE delta_frozen SET value = ?1 WHERE thread_id = ?2 AND checkpoint_ns = ''"
            " AND checkpoint_id = ?3 AND channel = ?4 AND kind = ?5 AND depth = ?6"
            " AND task_id = ?7 AND idx = ?8", [last[-1], thread_id, *first[:-1]])])

    expected = cfg(new_thread())  # what the thread reads once changed, seen on another copy
    plain.copy_thread(tid, expected["configurable"]["thread_id"])
    change(expected["configurable"]["thread_id"])
    changed = [graph.get_state(expected).values]
    racing = RacingTransport(local.engine, lambda: change(tid), table="delta_frozen")
    keyed = D1Saver(account_id=local.account_id, database_id=local.database_id,
                    api_token=local.api_token, api_base_url=local.base_url,
                    transport=racing, encryption_keys=[KEY])
    before = graph.get_state(config).values
    for table in ("checkpoints", "writes", "delta_frozen"):
        keyed.rekey(table, seal_plaintext=True)
    assert racing.raced == 1 and changed[0] != before
    assert blob_graph(local.saver(encryption_keys=[KEY]), "").get_state(config).values == changed[0]


def test_rekey_reseals_the_pieces_of_each_holder_of_one_write(local: Backend) -> None:
    """Two children of one checkpoint (the head put again under the next id), the older
    tagged: compaction gives each its own record of the same writes, the big one in pieces
    under the same owner at both holders. A rekey one row a page re-seals both holders' pieces
    (each row's key is read from its own holder's pieces), so the old key can go."""
    old_key, new_key = bytes([1]) * 32, bytes([2]) * 32
    memory, config = Recording(), cfg(new_thread())
    tid = config["configurable"]["thread_id"]
    blob_graph(memory, os.urandom(BIG).hex()).invoke({"messages": ["hi"], "n": 0}, config)
    _, head = memory.calls[-1]
    sibling = copy.deepcopy(head)
    sibling[1]["id"] = str(uuid.UUID(int=uuid.UUID(head[1]["id"]).int + 1))
    saver = local.saver(encryption_keys=[old_key])
    for method, args in [*memory.calls, ("put", sibling)]:
        getattr(saver, method)(*copy.deepcopy(args))
    older = cfg(tid, checkpoint_id=head[1]["id"])
    saver.tag(older, "older")
    before = [blob_graph(saver, "").get_state(c).values for c in (older, config)]
    compact(saver, keep=1, threads=[tid])
    owners = query(saver, "SELECT owner, COUNT(DISTINCT checkpoint_id) FROM chunks"
                          " WHERE thread_id = ?1 AND substr(owner, 1, 2) = 'f/' GROUP BY owner",
                   tid)
    assert len(owners) == 1 and owners[0][1] == 2, owners
    rotated = local.saver(encryption_keys=[new_key, old_key])
    rekey(rotated, batch_rows=1)
    assert set(rotated.key_census()["delta_frozen"]) == {key_id(new_key).hex()}
    dropped = blob_graph(local.saver(encryption_keys=[new_key]), "")
    assert [dropped.get_state(c).values for c in (older, config)] == before


def test_copy_with_keys_carries_records_in_pieces(local: Backend) -> None:
    """A frozen write over the row limit (its pieces held by the record's holder) is
    re-sealed for the target with its pieces: the copy's state reads back whole."""
    saver, config = local.saver(encryption_keys=[KEY]), cfg(new_thread())
    tid = config["configurable"]["thread_id"]
    graph = blob_graph(saver, os.urandom(BIG).hex())
    graph.invoke({"messages": ["hi"], "n": 0}, config)
    compact(saver, keep=1, threads=[tid])
    assert query(saver, "SELECT COUNT(*) FROM chunks WHERE thread_id = ?1 AND owner LIKE 'f/%'",
                 tid)[0][0] > 0
    copy = cfg(new_thread())
    saver.copy_thread(tid, copy["configurable"]["thread_id"])
    fresh = blob_graph(local.saver(encryption_keys=[KEY]), "")
    assert fresh.get_state(copy).values == graph.get_state(config).values


def test_copy_with_keys_refuses_a_plaintext_record_naming_its_write(local: Backend) -> None:
    """Records frozen before keys were set stay plaintext when only the checkpoints and
    writes are sealed; a keyed copy then refuses the first record as a read would: a
    PlaintextValueError naming the write it holds (its source checkpoint), nothing copied."""
    run = Run(local.saver())
    compact(run.saver, keep=1, threads=[run.tid])
    keyed = local.saver(encryption_keys=[KEY])
    for table in ("checkpoints", "writes"):
        keyed.rekey(table, seal_plaintext=True)
    ((src,),) = query(keyed, "SELECT src_checkpoint_id FROM delta_frozen WHERE thread_id = ?1"
                             " AND kind <> 'c' ORDER BY checkpoint_ns, checkpoint_id, channel,"
                             " kind, depth, task_id, idx LIMIT 1", run.tid)
    copy = new_thread()
    with pytest.raises(PlaintextValueError, match="^stored write of thread") as info:
        keyed.copy_thread(run.tid, copy)
    assert (info.value.thread_id, info.value.checkpoint_id) == (run.tid, src)
    assert frozen_rows(keyed, copy) == 0


def test_a_record_that_ends_a_history_stops_the_walk_before_a_kept_ancestor(
        local: Backend) -> None:
    """Compaction keeping the head, its parent (the records' holder) and an older tagged
    checkpoint: `messages` ends at the holder's record (it holds a seed), while `notes`,
    written once before the tag, goes on to the tagged checkpoint. Each kept checkpoint
    reads back as before, in one request for the whole history."""
    saver, config = local.saver(), cfg(new_thread())
    graph = graphs.chat_graph(saver, Counter())
    for turn in range(7):
        graph.invoke({"messages": [f"user{turn}"], **({"notes": ["a note"]} if turn == 1 else {})},
                     config)
        if turn == 2:
            saver.tag(graph.get_state(config).config, "early")
    before = {s.config["configurable"]["checkpoint_id"]: s.values
              for s in graph.get_state_history(config)}
    compact(saver, keep=2, threads=[config["configurable"]["thread_id"]])
    fresh = graphs.chat_graph(local.saver(), Counter())
    after, requests = local.count(lambda: list(fresh.get_state_history(config)))
    assert len(after) == 3 and requests == 1
    assert all(s.values == before[s.config["configurable"]["checkpoint_id"]] for s in after)


def test_snapshot_at_the_head_needs_no_record(backend: Backend) -> None:
    """A kept checkpoint that holds a real _DeltaSnapshot of its channel replays nothing: no
    record is kept."""
    run = Run(backend.saver(), snapshot_frequency=1)  # every step snapshots
    before = run.graph.get_state(run.config).values
    compact(run.saver, keep=1, threads=[run.tid])
    assert len(ids_in(run.saver, run.tid)) == 1 and frozen_rows(run.saver, run.tid) == 0
    assert run.graph.get_state(run.config).values == before
    run.turn(follow_up(1))


@pytest.mark.parametrize("sealed", [False, True])
def test_record_ends_at_the_nearest_snapshot(backend: Backend, sealed: bool) -> None:
    """With snapshots every 7 updates (the head 6 past one), the head's record holds the seed
    (the nearest snapshot's row) and fewer than 7 updates' writes (3 tool messages at most
    each), not the thread's history: LangGraph's snapshots bound every record. With keys the
    seed opens with its checkpoint's binding, here and in a copy."""
    run = Run(backend.saver(**({"encryption_keys": [KEY]} if sealed else {})),
              snapshot_frequency=7)
    compact(run.saver, keep=1, threads=[run.tid])
    kinds = dict(query(run.saver, "SELECT kind, COUNT(*) FROM delta_frozen WHERE thread_id = ?1"
                                  " GROUP BY kind", run.tid))
    assert kinds.get("s") == 1 and 0 < kinds.get("w", 0) < 7 * 3 and "c" not in kinds
    run.assert_head()
    copy = new_thread()
    run.saver.copy_thread(run.tid, copy)
    assert run.graph.get_state(cfg(copy)).values == run.graph.get_state(run.config).values
    run.turn(follow_up(1))


def test_copy_and_delete_keep_records_exact(backend: Backend) -> None:
    """copy_thread copies the records (the copy's state is the source's); delete_thread and
    a later compaction leave no record of a checkpoint that is gone."""
    run = Run(backend.saver())
    compact(run.saver, keep=1, threads=[run.tid])
    copy = new_thread()
    run.saver.copy_thread(run.tid, copy)
    assert run.graph.get_state(cfg(copy)).values == run.graph.get_state(run.config).values
    assert frozen_rows(run.saver, copy) == frozen_rows(run.saver, run.tid) > 0
    run.saver.delete_thread(run.tid)
    assert frozen_rows(run.saver, run.tid) == 0 and orphan_records(run.saver) == 0
    run.graph.invoke(follow_up(1), cfg(copy))
    compact(run.saver, keep=1, threads=[copy])
    assert orphan_records(run.saver) == 0


def frozen_pieces(saver: D1Saver, thread_id: str) -> int:
    """Pieces of frozen values, held by their records' holders."""
    return query(saver, "SELECT COUNT(*) FROM chunks WHERE thread_id = ?1"
                        " AND substr(owner, 1, 2) = 'f/'", thread_id)[0][0]


class Blobs(TypedDict):
    messages: Annotated[list, DeltaChannel(append_batches, snapshot_frequency=50)]
    n: int


def blob_graph(saver: BaseCheckpointSaver, blob: str) -> CompiledStateGraph:
    """Four steps appending a message each; the second's is `blob`, over D1's row limit."""
    def step(state: Blobs) -> dict:
        return {"messages": [blob if state["n"] == 1 else f"m{state['n']}"], "n": state["n"] + 1}

    g = StateGraph(Blobs)
    g.add_node("step", step)
    g.add_edge(START, "step")
    g.add_conditional_edges("step", lambda s: END if s["n"] >= 4 else "step", ["step", END])
    return g.compile(checkpointer=saver)


def test_frozen_values_over_the_row_limit(local: Backend) -> None:
    """A write stored in pieces (over 2 MB) is frozen with its pieces, held by the record's
    holder; a second compaction copies them on; the state reads back whole."""
    saver, config = local.saver(), cfg(new_thread())
    tid = config["configurable"]["thread_id"]
    graph = blob_graph(saver, os.urandom(BIG).hex())
    graph.invoke({"messages": ["hi"], "n": 0}, config)
    saver.tag(config, "first-head")
    before = graph.get_state(config).values
    compact(saver, keep=1, threads=[tid])
    assert len(ids_in(saver, tid)) == 1 and frozen_pieces(saver, tid) > 1
    assert graph.get_state(config).values == before
    graph.invoke({"messages": ["again"], "n": 0}, config)
    after = graph.get_state(config).values
    saver.untag(config, "first-head")
    compact(saver, keep=1, threads=[tid])
    assert len(ids_in(saver, tid)) == 1 and orphan_records(saver) == 0
    assert frozen_pieces(saver, tid) > 1
    assert graph.get_state(config).values == after
    assert any(len(m) > BIG for m in after["messages"])


def test_a_run_deleted_after_a_prune_leaves_the_head_state(backend: Backend) -> None:
    """prune(keep_latest) freezes the head's history, which the checkpoints of earlier runs
    hold; delete_for_runs of such a run afterwards finds none of its checkpoints and leaves
    the frozen history, the head's state (as a snapshot in its channel_values would be): the
    state stays InMemorySaver's and the thread runs on (the stateful test's model agrees)."""
    run = Run(backend.saver())
    for n, run_id in enumerate(["r1", "r2"], start=1):
        run.config = {**run.config, "metadata": {"run_id": run_id}}
        run.turn(follow_up(n))
    run.saver.prune([run.tid], strategy="keep_latest")
    frozen = frozen_rows(run.saver, run.tid)
    assert frozen > 0

    run.saver.delete_for_runs(["r1"])

    assert len(list(run.saver.list(run.config))) == 1
    assert frozen_rows(run.saver, run.tid) == frozen
    run.assert_head()
    run.config = {**run.config, "metadata": {"run_id": "r3"}}
    run.turn(follow_up(3))
