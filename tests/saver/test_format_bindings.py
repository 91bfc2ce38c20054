"""Where the stored format and the operations meet (issue 20): a derived record bound to the
row it was derived from, content ids that never collide, a rekey that seals values stored by
content whole, copies of packed writes equal to InMemorySaver's, and the freeze walk inventing
nothing."""

from __future__ import annotations

import os

import pytest
from collections import Counter
from typing import Any

from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.memory import InMemorySaver

from d1saver.compaction.rekey import rekey
from d1saver import D1Saver, Statement
from d1saver.storage.crypto import key_id, key_id_of_text
from tests.compaction import new_thread
from tests.conftest import Backend
from tests.saver import graphs
from tests.ops.test_delta_channels import at, build, chain, history

K1, K2 = bytes([31]) * 32, bytes([32]) * 32


def received(backend: Backend, fn: Any) -> int:
    """Bytes of the responses to what fn sent."""
    before = len(backend.events)
    fn()
    return sum(e.bytes_received for e in backend.events[before:])


# --- defect 9: copy_thread(T, T) is a no-op ---------------------------------------------------


def test_copy_thread_onto_itself_changes_nothing(backend: Backend) -> None:
    """copy_thread(T, T) leaves T as it was: the same state, and get_tuple reads as little as
    before (re-inserting the checkpoints dropped their delta_unwritten rows, so the walk read
    the whole thread: 17 KB instead of 1.8 KB at 40 steps)."""
    saver, tid = backend.saver(), new_thread()
    graph = graphs.chat_graph(saver, Counter())
    config = {"configurable": {"thread_id": tid}}
    for turn in range(14):  # 42 checkpoints
        graph.invoke({"messages": [f"user{turn}"]}, config)
    state = graph.get_state(config).values
    fresh = backend.saver()  # no cache: every get_tuple reads
    before = received(backend, lambda: fresh.get_tuple(config))
    _, requests = backend.count(lambda: saver.copy_thread(tid, tid))
    after = received(backend, lambda: backend.saver().get_tuple(config))
    assert after <= before * 1.05, (before, after)
    assert requests == 0
    assert graph.get_state(config).values == state


# --- defect 8: the freeze walk starts only at a stored checkpoint -----------------------------


def test_prune_does_not_freeze_writes_of_a_parent_never_stored(backend: Backend) -> None:
    """A checkpoint whose parent id has writes but no checkpoint row: its history ends there
    (InMemorySaver's walk stops at a missing parent), before and after prune."""
    saver, memory, tid = backend.saver(), InMemorySaver(), new_thread()
    spec = [(0, None, "m0"), (1, 0, "m1"), (3, 2, "m3"), (4, 3, "m4")]
    for s in (saver, memory):
        build(s, tid, spec)
        s.put_writes(at(tid, 2), [("messages", "ghost")], task_id="task-2")
    assert history(saver, tid, 4) == history(memory, tid, 4)
    saver.prune([tid])
    assert history(saver, tid, 4) == history(memory, tid, 4)
    assert "ghost" not in repr(history(saver, tid, 4))


# --- defect 7: rekey of a write stored in pieces ----------------------------------------------


def test_rekey_of_a_write_stored_in_pieces(backend: Backend) -> None:
    """A 1.5 MB bytes write is sealed over several rows ("c:"); after a rotation, rekey
    re-seals it (its guard names the pieces' owner 'task/0', not 'task/0.0': D1 binds
    numbers as REAL, as the local D1 does too), and the old key can then go."""
    if backend.name != "local":  # rekey covers a whole database, and the real engine's is shared
        pytest.skip("the real engine's database holds other tests' rows under other keys")
    tid, big = new_thread(), os.urandom(1_500_000)
    old = backend.saver(encryption_keys=[K1])
    build(old, tid, chain(2))
    old.put_writes(at(tid, 1), [("blob", big)], task_id="big-task")
    rotated = backend.saver(encryption_keys=[K2, K1])
    rotated.setup()
    if backend.name == "local":
        summary = rekey(rotated, batch_rows=10)
        assert summary.plaintext_left == 0
        dropped = backend.saver(encryption_keys=[K2])
        assert ("big-task", "blob", big) in dropped.get_tuple(at(tid, 1)).pending_writes
    else:  # the real engine's database is shared: rekey the writes (other keys' rows: none)
        rotated.rekey("writes", page_size=10)
        assert ("big-task", "blob", big) in rotated.get_tuple(at(tid, 1)).pending_writes
    (piece,) = rotated.client.execute([Statement(
        "SELECT data FROM chunks WHERE thread_id = ?1 AND owner = 'big-task/0' AND seq = 0",
        (tid,))])
    assert key_id_of_text(piece.rows[0][0]) == key_id(K2).hex()  # re-sealed under the new key


# --- defect 3: content ids of different kinds never collide -----------------------------------


def _colliding_state() -> list[str]:
    """Eleven chat messages whose pieces fold into one tree node (the first ten do not close a
    node, the eleventh does), then a long text whose last piece is "^" and their ids: the
    text of that node as schema v8 named it (its id was the hash of "^" + text, and a leaf's
    the hash of its bytes)."""
    from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

    from d1saver.storage import chunking, manifest

    serde = JsonPlusSerializer()

    def piece(message: str) -> str:
        return next(p.id for p in chunking.split(serde.dumps_typed([message] * 8)[1]) if p.id)

    messages = []
    for i in range(11):
        nonce = 0
        while manifest._closes(piece(text := f"message {i} ({nonce}) " + "x" * 300)) != (i == 10):
            nonce += 1
        messages.append(text)
    ids = [p.id for p in chunking.split(serde.dumps_typed(messages)[1]) if p.id]
    # a FastCDC cut falls at 64 KB in a run of one byte: the tail is a piece of its own
    return [*messages, "a" * chunking.CDC_MAX + "^" + ",".join(ids)]


def test_a_piece_spelling_a_node_reads_back(backend: Backend) -> None:
    """A value whose last piece is "^" + the ids of a node of the same value: before domain
    separation the piece and the node had one id, and the read raised StoredValueError."""
    from langgraph.checkpoint.base import empty_checkpoint

    saver, memory, tid = backend.saver(), InMemorySaver(), new_thread()
    messages = _colliding_state()
    for s in (saver, memory):
        cp = empty_checkpoint()
        cp.update(id="1f000000-0000-6000-8000-000000000001", channel_values={"messages": messages},
                  channel_versions={"messages": "1"})
        conf = s.put(at(tid), cp, {"source": "loop", "step": 0, "parents": {}},
                     {"messages": "1"})
        s.put_writes(conf, [("messages", messages), ("other", messages[-1])], task_id="t")
    ours, theirs = saver.get_tuple(at(tid)), memory.get_tuple(at(tid))
    assert ours.checkpoint["channel_values"] == theirs.checkpoint["channel_values"]
    assert ours.pending_writes == theirs.pending_writes


def test_leaf_and_node_ids_are_domain_separated() -> None:
    """The same bytes as a leaf and as a node's text get different ids, and the reader's
    check knows which kind it checks."""
    from d1saver.storage import chunking

    text = "a,b"
    assert chunking.node_id(text) != chunking.chunk_id(text.encode())
    assert chunking.node_id(text) != chunking.chunk_id(b"^" + text.encode())
    assert chunking.names(chunking.node_id(text), text.encode(), chunking.NODE)
    assert not chunking.names(chunking.node_id(text), text.encode())
    assert not chunking.names(chunking.chunk_id(text.encode()), text.encode(), chunking.NODE)


# --- defect 2: a frozen DeltaChannel record is bound to the row it was computed for ----------


def test_restoring_a_backup_onto_a_pruned_thread_duplicates_nothing(backend: Backend) -> None:
    """copy_thread(backup, T) onto T that prune reduced (a tagged checkpoint kept, so the
    head's frozen record ends "go on at the holder's parent"): the head gets its old parent
    back, and its record, computed for the relinked parent, no longer applies. The history is
    InMemorySaver's for the whole chain (messages after the tag were read twice). With and
    without keys (with keys the copy re-seals rows one by one)."""
    for keys in (None, [K1]):
        saver, memory = backend.saver(encryption_keys=keys), InMemorySaver()
        tid, backup = new_thread(), new_thread()
        build(saver, tid, chain(6))
        build(memory, tid, chain(6))
        saver.copy_thread(tid, backup)
        saver.tag(at(tid, 2), "kept")
        saver.prune([tid])
        assert history(saver, tid, 5) == history(memory, tid, 5)
        saver.copy_thread(backup, tid)
        assert [history(saver, tid, i) for i in range(6)] == [history(memory, tid, i)
                                                             for i in range(6)]
        fresh = backend.saver(encryption_keys=keys)  # not from a cache
        assert history(fresh, tid, 5) == history(memory, tid, 5), keys


def test_a_put_retried_after_a_prune_loses_no_history(backend: Backend) -> None:
    """A put whose response was lost is sent again after a prune relinked its row: the row
    keeps the parent its frozen record was computed for, and the history stays whole."""
    for tag in (False, True):
        saver, memory, tid = backend.saver(), InMemorySaver(), new_thread()
        build(saver, tid, chain(5))
        build(memory, tid, chain(5))
        if tag:
            saver.tag(at(tid, 1), "kept")
        saver.prune([tid])
        build(saver, tid, [(4, 3, "m4")])  # the same put (and write) again
        fresh = backend.saver()
        assert history(fresh, tid, 4) == history(memory, tid, 4), tag
        assert fresh.get_tuple(at(tid, 4)).parent_config == (
            fresh.get_tuple(at(tid, 1)).config if tag else None)


# --- defect 6: copy_thread of packed writes is InMemorySaver's, per (task, idx) ---------------


def packed_writes(saver: Any, source: str, target: str) -> None:
    """The same checkpoint in both threads, with writes stored packed ("p:": one row per
    put_writes call of two or more) on one side and single on the other."""
    build(saver, source, chain(1))
    build(saver, target, chain(1))
    c = at(target, 0)
    s = at(source, 0)
    saver.put_writes(c, [("a", 1), ("b", 2), ("c", 3)], task_id="t1")  # a pack of 3
    saver.put_writes(s, [("a", 10)], task_id="t1")  # a single row at idx 0
    saver.put_writes(c, [("a", 1)], task_id="t2")  # single rows at 0, then 1
    saver.put_writes(c, [("a", 1), ("b", 2)], task_id="t2")
    saver.put_writes(s, [("a", 10), ("b", 20)], task_id="t2")  # a pack of 2
    saver.put_writes(c, [("__error__", "old")], task_id="t3")
    saver.put_writes(s, [("__error__", "new")], task_id="t3")
    saver.put_writes(c, [("a", 4), ("b", 4)], task_id="t4")  # a task the source lacks
    # A task the source has only in another namespace, under the same checkpoint id.
    twin = empty_checkpoint()
    twin["id"] = s["configurable"]["checkpoint_id"]
    x = saver.put({"configurable": {"thread_id": source, "checkpoint_ns": "x"}}, twin, {}, {})
    saver.put_writes(x, [("a", 50)], task_id="t5")
    saver.put_writes(c, [("a", 5), ("b", 5)], task_id="t5")


def memory_copy(memory: InMemorySaver, source: str, target: str) -> None:
    """InMemorySaver's storage copied as D1Saver's copy_thread does: every row of the source
    replaces the target's of the same key (a write's key: checkpoint, task and idx)."""
    for ns, checkpoints in memory.storage[source].items():
        memory.storage[target][ns].update(checkpoints)
    for (thread, ns, cid), writes in list(memory.writes.items()):
        if thread == source:
            memory.writes[(target, ns, cid)].update(writes)


def sorted_writes(saver: Any, thread_id: str) -> list[Any]:
    return sorted(saver.get_tuple(at(thread_id, 0)).pending_writes, key=repr)


def test_copy_thread_of_packed_writes_is_per_task_and_idx(backend: Backend) -> None:
    """After copy_thread(B, T) a write keyed (task, idx) is B's if B has it, else T's, once:
    packed rows replaced by row key gave a write twice or lost T's others. T's packs of tasks
    B has no write of at that checkpoint (and namespace) stay packed: one row each."""
    for keys in (None, [K1]):
        saver, memory = backend.saver(encryption_keys=keys), InMemorySaver()
        source, target = new_thread(), new_thread()
        packed_writes(saver, source, target)
        packed_writes(memory, source, target)
        memory_copy(memory, source, target)
        saver.copy_thread(source, target)
        assert sorted_writes(saver, target) == sorted_writes(memory, target), keys
        assert sorted_writes(backend.saver(encryption_keys=keys), source) == sorted_writes(
            memory, source)
        if keys is None:
            (res,) = saver.execute([Statement(
                "SELECT task_id, COUNT(*) FROM writes WHERE thread_id = ?1"
                " AND checkpoint_ns = '' AND task_id IN ('t4', 't5') GROUP BY task_id",
                [target])])
            assert res.rows == [["t4", 1], ["t5", 1]]


# --- defect 4: rekey --seal-plaintext seals a thread stored by content whole ------------------


def stored_by_content(saver: D1Saver, thread_id: str | None = None) -> int:
    (result,) = saver.client.execute([Statement(
        "SELECT COUNT(*) FROM d1saver_chunks WHERE ?1 IS NULL OR thread_id = ?1", (thread_id,))])
    return int(result.rows[0][0])


LONG = [f"message {i} " + "lorem ipsum " * 15 for i in range(12)]


def content_shapes(saver: D1Saver, thread_id: str) -> Counter[str]:
    """How the thread's values are stored: 'm:' per table, and packs holding one ('p:m:')."""
    (result,) = saver.client.execute([Statement("""
SELECT 'checkpoints:' || substr(checkpoint, 1, 2) FROM checkpoints WHERE thread_id = ?1
UNION ALL SELECT 'writes:' || substr(value, 1, 2) || CASE WHEN substr(value, 1, 2) = 'p:'
    AND instr(value, '"m:') > 0 THEN 'm:' ELSE '' END FROM writes WHERE thread_id = ?1
UNION ALL SELECT 'delta_frozen:' || substr(value, 1, 2) FROM delta_frozen
    WHERE thread_id = ?1 AND kind <> 'c'""", (thread_id,))])
    return Counter(str(row[0]) for row in result.rows)


def write_content(saver: D1Saver, delta_thread: str, graph_thread: str) -> Any:
    """Every shape of content storage, written without keys: a graph's checkpoints and writes
    ("m:", and packs holding "m:"), and a DeltaChannel thread whose long writes a prune froze
    ("m:" in delta_frozen); the graph's final state."""
    from benchmarks.workload import build_graph, first_input

    graph = build_graph(saver, variant="plain", turns=3, fanout=2)
    final = graph.invoke(first_input(), {"configurable": {"thread_id": graph_thread}})
    build(saver, delta_thread, [(i, i - 1 if i else None, [*LONG, f"m{i}"]) for i in range(6)])
    saver.prune([delta_thread], strategy="keep_latest")
    shapes = content_shapes(saver, graph_thread) + content_shapes(saver, delta_thread)
    assert {"checkpoints:m:", "writes:m:", "writes:p:m:", "delta_frozen:m:"} <= set(shapes), shapes
    return final


@pytest.mark.parametrize("batch_rows", [1, 100])
def test_seal_plaintext_seals_a_thread_stored_by_content_whole(local: Backend,
                                                                batch_rows: int) -> None:
    """A database that started without keys stores long values by content ("m:" manifests
    over d1saver_chunks: checkpoints, writes, writes in packs, frozen DeltaChannel values).
    `rekey --seal-plaintext` seals each such value whole, read with the chunks it reaches, and
    the chunks no row reaches any more go in the same batch: afterwards a saver with the key
    reads every thread as the saver without keys did (before the fix it left such a thread in
    plaintext, and the keyed reader raised PlaintextValueError). One row per page: a chunk
    still listed by a later page is kept until that page is sealed."""
    from benchmarks.workload import build_graph

    from d1saver.compaction.fleet import check_chunks
    from tests.reliability.harness import observe

    plain = local.saver()
    final = write_content(plain, "frozen", "by-content")
    build(plain, "whole", chain(2))  # small values: no manifest
    threads = ["by-content", "frozen", "whole"]
    before = observe(plain, threads)
    assert stored_by_content(plain) > 0

    keyed = local.saver(encryption_keys=[K1])
    summary = rekey(keyed, seal_plaintext=True, batch_rows=batch_rows)
    assert observe(local.saver(encryption_keys=[K1]), threads) == before
    assert summary.plaintext_left == 0 and summary.skipped == 0
    assert set(summary.after or {}) == {"checkpoints", "writes", "delta_frozen"}
    assert all(set(per) == {key_id(K1).hex()} for per in (summary.after or {}).values())
    config = {"configurable": {"thread_id": "by-content"}}
    assert build_graph(keyed, variant="plain", turns=3, fanout=2).get_state(
        config).values == final
    assert stored_by_content(keyed) == 0 and check_chunks(keyed) == []
    assert rekey(keyed, seal_plaintext=True).rewritten == 0  # nothing left to seal


def test_the_page_seal_plaintext_reads_returns_the_content(backend: Backend) -> None:
    """The raw pages rekey reads, with `content`, return the chunks their rows' manifests
    reach ('h'), each once, on both engines; without it (copies, a rekey that leaves
    plaintext) none."""
    from d1saver.ops import reseal

    saver, cps, frozen = backend.saver(), new_thread(), new_thread()
    write_content(saver, frozen, cps)
    for tid in (cps, frozen):
        (stored,) = saver.client.execute([Statement(
            "SELECT id FROM d1saver_chunks WHERE thread_id = ?1", (tid,))])
        reached: set[str] = set()
        for statement, id_at in ((reseal.checkpoints_statement, 11),
                                 (reseal.writes_statement, 10), (reseal.frozen_statement, 4)):
            (page,) = saver.client.execute([statement(tid, None, 1000, None, content=True)])
            ids = [row[id_at] for row in page.rows if row[0] == "h"]
            assert len(ids) == len(set(ids))
            reached |= set(ids)
            (bare,) = saver.client.execute([statement(tid, None, 1000, None)])
            assert not [row for row in bare.rows if row[0] == "h"]
        assert reached == {row[0] for row in stored.rows}
