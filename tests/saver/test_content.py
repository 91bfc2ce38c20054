"""Content-addressed values (issue 12): the chunk table stays exact after every deleting
operation of the saver, a chunk assumed stored but missing costs one resend, reads stay one
request with each chunk once, and packed writes keep InMemorySaver's semantics.

Every exactness test first checks that the thread holds chunks (and, where it matters, that
the operation leaves some unreferenced unless collected), so none of them can pass vacuously.
Compaction and rebalance: tests/compaction/test_content_gc.py, tests/fleet/test_content.py.
"""

from __future__ import annotations

import json
import os
import random
from collections import Counter
from typing import Any

import pytest
from langchain_core.messages import ToolMessage
from langgraph.checkpoint.conformance.test_utils import generate_checkpoint, generate_config
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.memory import InMemorySaver

from benchmarks.workload import build_graph, first_input, prose
from d1saver.storage import chunking as _chunking
from d1saver.storage import manifest as _manifest
from d1saver.ops import rows as _rows
from d1saver.ops import statements as st
from d1saver.sql.reads import CHUNK_GROUP
from tests.compaction import cfg, checkpoint_id
from tests.conftest import Backend
from tests.saver.content import (assert_exact, chunk_ids, chunk_levels, conversation_head,
                                 converse, copy_setup, delete_a_written_piece, fork, inexact,
                                 markers, new_thread, query)

# --- exactness after every deleting operation of the saver ---------------------------------


def test_delete_thread_leaves_no_chunk(backend: Backend) -> None:
    saver = backend.saver()
    tid, other = new_thread(), new_thread()
    converse(saver, tid)
    converse(saver, other, turns=3)
    assert chunk_levels(saver, tid)[0] > 0 and chunk_levels(saver, tid)[1] > 0
    before = chunk_levels(saver, other)
    saver.delete_thread(tid)
    assert chunk_levels(saver, tid) == {}
    assert chunk_levels(saver, other) == before  # another thread's chunks are its own
    assert_exact(saver, tid, other)


def test_delete_for_runs_collects_what_only_the_run_reached(backend: Backend) -> None:
    """Two runs on one thread; deleting the first leaves the second's rows reading back, and
    the chunks only the first run's rows reached are gone."""
    saver = backend.saver()
    tid = new_thread()
    r1, r2 = f"r1-{tid}", f"r2-{tid}"
    graph, config = converse(saver, tid, turns=4, run_id=r1)
    # The first run also leaves a branch of its own (a message the second run never sees);
    # the second run goes on from the first run's head.
    r1_head = fork(graph, saver, tid, run_id=r1)
    graph = build_graph(saver, variant="plain", turns=6)
    graph.invoke(first_input(), {**r1_head, "metadata": {"run_id": r2}})
    state = graph.get_state(config).values
    assert_exact(saver, tid)
    stored = chunk_ids(saver, tid)
    saver.delete_for_runs([r1])
    assert {t.metadata.get("run_id") for t in saver.list(config)} == {r2}
    assert graph.get_state(config).values == state
    assert chunk_ids(saver, tid) < stored  # some went: the check below is not vacuous
    assert_exact(saver, tid)


@pytest.mark.parametrize("strategy", ["keep_latest", "delete"])
def test_prune_keeps_exactly_the_chunks_left_reached(backend: Backend, strategy: str) -> None:
    saver = backend.saver()
    tid, other = new_thread(), new_thread()
    graph, config = converse(saver, tid)
    fork(graph, saver, tid)  # the old branch's later turns are then not in the kept head
    converse(saver, other, turns=3)
    state = graph.get_state(config).values
    stored, others = chunk_ids(saver, tid), chunk_ids(saver, other)
    saver.prune([tid], strategy=strategy)
    if strategy == "keep_latest":
        assert len(list(saver.list(config))) == 1
        assert graph.get_state(config).values == state
        assert set() < chunk_ids(saver, tid) < stored
    else:
        assert list(saver.list(config)) == [] and chunk_ids(saver, tid) == set()
    assert chunk_ids(saver, other) == others
    assert_exact(saver, tid, other)


def test_copy_thread_onto_thread_with_other_content_is_exact(backend: Backend) -> None:
    """The target holds another conversation (older checkpoint ids, which stay) and one
    checkpoint under the id of the source's head with other content (which the copy
    replaces): afterwards it holds the chunks of what remains, no more, no fewer."""
    saver = backend.saver()
    source, target = new_thread("src"), new_thread("dst")
    graph, source_config, replaced = copy_setup(saver, source, target)
    only_target = chunk_ids(saver, target) - chunk_ids(saver, source)
    assert_exact(saver, source, target)

    saver.copy_thread(source, target)
    target_config = {"configurable": {"thread_id": target}}
    assert graph.get_state(target_config).values == graph.get_state(source_config).values
    _, data = saver.serde.dumps_typed(replaced[0])
    gone = {p.id for p in _chunking.split(data) if p.id}
    assert gone and gone <= only_target and not gone & chunk_ids(saver, target)
    assert chunk_ids(saver, target) & only_target  # the target's own conversation stays
    assert_exact(saver, source, target)


# --- a chunk assumed stored but missing -----------------------------------------------------


def delete_a_listed_chunk(saver: Any, config: Any) -> str:
    """Delete, behind the saver's back (raw SQL through its client), the first chunk the
    checkpoint's manifest lists itself (a node or a leaf): a put of the same state lists it."""
    conf = config["configurable"]
    ((manifest,),) = query(saver, "SELECT checkpoint FROM checkpoints WHERE thread_id = ?1 "
                                  "AND checkpoint_id = ?2", conf["thread_id"], conf["checkpoint_id"])
    listed = [e.lstrip("^") for e in manifest[2:].split(",") if ":" not in e[:2]]
    assert manifest.startswith("m:") and listed
    query(saver, "DELETE FROM d1saver_chunks WHERE thread_id = ?1 AND id = ?2",
          conf["thread_id"], listed[0])
    return listed[0]


def test_put_recovers_from_a_chunk_deleted_behind_its_back(backend: Backend) -> None:
    """The saver holds the thread's chunks in its set; one the head's manifest lists is
    deleted by someone else. The next put, listing it, fails on "chunk_missing", forgets and
    resends every chunk: 2 requests, the state reads back exact, the table is exact."""
    saver = backend.saver()
    tid = new_thread()
    converse(saver, tid)
    head = saver.get_tuple({"configurable": {"thread_id": tid}})
    assert head is not None
    victim = delete_a_listed_chunk(saver, head.config)
    assert inexact(saver, tid)[0].missing >= 1  # the check sees it

    child = generate_checkpoint(channel_values=head.checkpoint["channel_values"])
    stored, requests = backend.count(lambda: saver.put(head.config, child, {"step": 99}, {}))
    assert requests == 2
    got = saver.get_tuple(stored)
    assert got is not None
    assert got.checkpoint["channel_values"] == head.checkpoint["channel_values"]
    assert victim in chunk_ids(saver, tid)
    assert_exact(saver, tid)


def test_the_check_of_a_damaged_thread_counts_its_own_chunks_only(local: Backend) -> None:
    """`d1saver check` (admin.chunk_check) on a thread that lost chunks behind the saver's
    back, beside a copy holding the same chunk ids: a lost leaf is 1 missing; a lost tree
    node is 1 missing, and the chunks only it reached are unreferenced, whether or not
    another thread holds that node (the thread cannot open it). The copy stays exact."""
    saver = local.saver()
    tid, twin = new_thread(), new_thread()
    converse(saver, tid)
    saver.copy_thread(tid, twin)
    assert chunk_ids(saver, twin) == chunk_ids(saver, tid) and chunk_levels(saver, tid)[1] > 0
    ((leaf,),) = query(saver, "SELECT id FROM d1saver_chunks WHERE thread_id = ?1 AND level = 0"
                              " ORDER BY id LIMIT 1", tid)
    query(saver, "DELETE FROM d1saver_chunks WHERE thread_id = ?1 AND id = ?2", tid, leaf)
    assert [(i.thread_id, i.missing, i.unreferenced) for i in inexact(saver, None)] == [
        (tid, 1, 0)]
    ((node, level),) = query(saver, "SELECT id, level FROM d1saver_chunks WHERE thread_id = ?1"
                                    " ORDER BY level DESC, id LIMIT 1", tid)
    assert level > 0
    query(saver, "DELETE FROM d1saver_chunks WHERE thread_id = ?1 AND id = ?2", tid, node)
    beside_twin = [(i.missing, i.unreferenced) for i in inexact(saver, tid)]
    saver.delete_thread(twin)
    alone = [(i.missing, i.unreferenced) for i in inexact(saver, tid)]
    # missing: the node, and the leaf if another path still reaches it
    assert beside_twin == alone and alone[0][0] in (1, 2) and alone[0][1] > 0, (beside_twin,
                                                                                  alone)


@pytest.mark.anyio
async def test_aput_recovers_from_a_chunk_deleted_behind_its_back(backend: Backend) -> None:
    """The async path: the same single resend."""
    saver = backend.saver()
    tid = new_thread()
    converse(saver, tid, turns=3)
    head = await saver.aget_tuple({"configurable": {"thread_id": tid}})
    assert head is not None
    delete_a_listed_chunk(saver, head.config)
    child = generate_checkpoint(channel_values=head.checkpoint["channel_values"])
    before = backend.requests
    stored = await saver.aput(head.config, child, {"step": 99}, {})
    assert backend.requests - before == 2
    got = await saver.aget_tuple(stored)
    assert got is not None and got.checkpoint["channel_values"] == head.checkpoint["channel_values"]
    assert_exact(saver, tid)
    await saver.aclose()


def test_put_writes_recovers_from_a_chunk_deleted_behind_its_back(backend: Backend) -> None:
    """Two writes (one packed "p:" row) of messages the thread holds; one message's chunk was
    deleted behind the saver's back: 2 requests, the writes read back, the table is exact."""
    saver = backend.saver()
    tid, head, messages = conversation_head(saver)
    writes = [("messages", [m]) for m in messages]
    delete_a_written_piece(saver, tid, [messages[0]])

    _, requests = backend.count(lambda: saver.put_writes(head.config, writes, "task-again"))
    assert requests == 2
    got = saver.get_tuple(head.config)
    assert got is not None
    assert [(t, c, v) for t, c, v in got.pending_writes if t == "task-again"] == \
        [("task-again", c, v) for c, v in writes]
    assert markers(saver, tid)["wp:"] > 0
    assert_exact(saver, tid)


# --- reads: one request, each chunk once ----------------------------------------------------


def without_task_ids(history: Any) -> Any:
    """A history without task ids, which derive from checkpoint ids (they differ between two
    runs); parallel tasks' writes sort by task id, so as a sorted list."""
    return {ch: (h.get("seed"), sorted(repr(w[1:]) for w in h["writes"]))
            for ch, h in history.items()}


def h_ids(rows: list[list[Any]]) -> list[str]:
    """The chunk ids of a read's 'h' rows (each holds a group of chunks), as often as sent."""
    return [i for r in rows if r[0] == "h" for i, _ in _rows.chunks_of(r)]


def test_get_state_and_list_pages_are_one_request_each_chunk_once(backend: Backend) -> None:
    """30 turns of the benchmark's agent: get_state is 1 request; each page of list is 1
    request; every response returns each chunk once, however many of its rows list it."""
    saver = backend.saver(page_size=20)
    tid = new_thread()
    graph, config = converse(saver, tid, turns=30)
    _, requests = backend.count(lambda: graph.get_state(config))
    assert requests == 1

    tuples, requests = backend.count(lambda: list(saver.list(config)))
    assert len(tuples) == 61 and requests == 4  # 20 + 20 + 20 + 1

    for size in (1, 20):
        page = st.page_statement(thread_id=tid, ns="", checkpoint_id=None, before=None,
                                 filter_json=None, cursor=None, size=size)
        rows, _ = saver.client.execute([page, st.delta_statement(page)])
        ids = h_ids(rows.rows)
        assert ids and len(ids) == len(set(ids)), size


def stored_size(saver: Any, thread_id: str, checkpoint_id: str) -> tuple[int, int]:
    """A checkpoint as stored: its manifest's length plus its chunks' data, each once (the
    state's encoded size, docs/STORAGE_DESIGN.md); and how many chunks that is."""
    ((manifest,),) = query(saver, "SELECT checkpoint FROM checkpoints WHERE thread_id = ?1 "
                                  "AND checkpoint_id = ?2", thread_id, checkpoint_id)
    chunks = dict(query(saver, "SELECT id, data FROM d1saver_chunks WHERE thread_id = ?1",
                        thread_id))
    seen: set[str] = set()
    todo = [e for e in manifest[2:].split(",") if ":" not in e[:2]]
    while todo:
        ref = todo.pop()
        if ref.lstrip("^") not in seen:
            seen.add(ref.lstrip("^"))
            if ref.startswith("^"):
                todo += chunks[ref[1:]].split(",")
    return len(manifest) + sum(len(chunks[i]) for i in seen), len(seen)


def test_get_state_response_is_at_most_1_2x_the_state_encoded(backend: Backend) -> None:
    """Issue 12: a get_state response is at most 1.2x the state's encoded size (30 turns)."""
    saver = backend.saver()
    tid = new_thread()
    graph, config = converse(saver, tid, turns=30)
    snapshot, requests = backend.count(lambda: graph.get_state(config))
    assert requests == 1
    received = backend.events[-1].bytes_received
    encoded, chunks = stored_size(saver, tid, snapshot.config["configurable"]["checkpoint_id"])
    assert chunks > 100
    assert received <= 1.2 * encoded, (received, encoded, chunks)


def test_a_state_of_many_large_chunks_reads_back_in_rows_under_the_limit(backend: Backend
                                                                          ) -> None:
    """A state whose chunks hold 2.8 MB of text: a read returns them in several 'h' rows, each
    well under D1's 2 MB limit on a value, and the state reads back whole."""
    saver, thread = backend.saver(), new_thread("big")
    rng = random.Random(12)
    messages = [ToolMessage(rng.randbytes(30_000).hex(), tool_call_id=f"c{i}", id=f"m{i}")
                for i in range(60)]
    config = generate_config(thread)
    for n in (20, 40, 60):  # a request carries a third of them
        checkpoint = generate_checkpoint(channel_values={"messages": messages[:n]})
        config = saver.put(config, checkpoint, {"step": n}, {})
    page = st.page_statement(thread_id=thread, ns="", checkpoint_id=None, before=None,
                             filter_json=None, cursor=None, size=1)
    (rows,) = saver.client.execute([page])
    groups = [len(r[10]) for r in rows.rows if r[0] == "h"]
    assert len(groups) >= 3 and max(groups) < 1_200_000, groups
    assert len(h_ids(rows.rows)) == len(set(h_ids(rows.rows))) >= 60
    got = backend.saver().get_tuple(config)
    assert got is not None and got.checkpoint["channel_values"]["messages"] == messages


def test_a_state_of_many_small_chunks_comes_in_groups_of_the_group_size(local: Backend
                                                                         ) -> None:
    """A state of 4,000 messages of 300 bytes (one chunk each, 1.6 MB stored): every page
    variant returns them in 'h' rows of at most the group size and one chunk (each chunk
    counted with room for its id and spaces), every chunk once, and the state reads back."""
    saver, thread = local.saver(), new_thread("small")
    rng = random.Random(5)
    messages = [rng.randbytes(225).hex() for _ in range(4000)]
    checkpoint = generate_checkpoint(channel_values={"messages": messages})
    metadata: Any = {"step": 1, "user": "u"}
    config = saver.put(generate_config(thread), checkpoint, metadata, {})
    biggest = query(saver, "SELECT MAX(LENGTH(data)), COUNT(*) FROM d1saver_chunks"
                           " WHERE thread_id = ?1", thread)[0]
    assert biggest[1] >= 4000
    only = json.dumps([["$.user", json.dumps({"user": "u"})]])
    for thread_id, ns in ((thread, ""), (thread, None), (None, None)):
        for f in (None, only):
            page = st.page_statement(thread_id=thread_id, ns=ns, checkpoint_id=None,
                                     before=None, filter_json=f, cursor=None, size=1)
            (rows,) = saver.client.execute([page])
            groups = [len(r[10]) for r in rows.rows if r[0] == "h"]
            assert len(groups) >= 2, (page.name, groups)
            assert max(groups) <= CHUNK_GROUP + biggest[0] + 30, (page.name, groups)
            assert len(h_ids(rows.rows)) == len(set(h_ids(rows.rows))) == biggest[1]
    got = local.saver().get_tuple(config)
    assert got is not None and got.checkpoint["channel_values"]["messages"] == messages


def test_list_page_of_a_delta_thread_sends_each_chunk_once(backend: Backend) -> None:
    """A page holding DeltaChannel snapshots (stored as manifests) and checkpoints that
    replay from them: the response (page + prefetch) carries each chunk once."""
    saver = backend.saver()
    tid = new_thread()
    converse(saver, tid, turns=8, variant="delta", snapshot_frequency=4)
    page = st.page_statement(thread_id=tid, ns="", checkpoint_id=None, before=None,
                             filter_json=None, cursor=None, size=20)
    rows, walk = saver.client.execute([page, st.delta_statement(page)])
    ids = h_ids(rows.rows) + h_ids(walk.rows)
    # The prefetch carries seeds stored by content, whose chunks the page returned already.
    assert [r for r in walk.rows if r[0] == "a" and str(r[10] or "").startswith("m:")]
    assert ids and len(ids) == len(set(ids)), Counter(ids).most_common(3)


def test_delta_channel_history_is_one_request_each_chunk_once(backend: Backend) -> None:
    """A DeltaChannel conversation whose snapshots are stored as manifests: a fresh saver's
    history read is 1 request, returns each chunk once, and equals InMemorySaver's."""
    writer, memory = backend.saver(), InMemorySaver()
    tid = new_thread()
    _, config = converse(writer, tid, turns=8, variant="delta", snapshot_frequency=4)
    converse(memory, tid, turns=8, variant="delta", snapshot_frequency=4)
    assert markers(writer, tid)["cm:"] > 0
    # The same checkpoint of InMemorySaver's run: checkpoint (and task) ids differ.
    (mem_head, mem_parent) = list(memory.list(config, limit=2))
    reader = backend.saver()
    reader.setup()
    head = reader.get_tuple(config)  # its cache holds this one: ask for its parent's
    assert head is not None and head.parent_config is not None
    at = head.parent_config
    history, requests = backend.count(
        lambda: reader.get_delta_channel_history(config=at, channels=["messages"]))
    assert requests == 1
    theirs = memory.get_delta_channel_history(config=mem_parent.config, channels=["messages"])
    assert without_task_ids(history) == without_task_ids(theirs)
    assert history["messages"]["writes"]  # the read crossed checkpoints
    (result,) = reader.client.execute([st.delta_history_statement(at, ["messages"])])
    ids = h_ids(result.rows)
    assert ids and len(ids) == len(set(ids))


def test_a_history_read_teaches_the_saver_its_chunks(local: Backend) -> None:
    """The chunks a history read returns (its seed's checkpoint, stored by content) are known
    stored afterwards: a fresh saver that only read the history puts the next checkpoint,
    holding the same 60 KB value, without sending its chunks again."""
    writer, doc = local.saver(), os.urandom(60_000)

    def put(saver: Any, i: int, seed: bool) -> None:
        cp = empty_checkpoint()
        cp.update(id=checkpoint_id(i), channel_versions={"messages": f"{i + 1:010}.0", "doc": "1"})
        cp["channel_values"] = {"doc": doc, **({"messages": ["seed"]} if seed else {})}
        metadata: dict[str, Any] = {"source": "loop", "step": i, "parents": {}}
        if not seed:
            metadata["counters_since_delta_snapshot"] = {"messages": [i, i]}
        saver.put(cfg("t", checkpoint_id=checkpoint_id(i - 1) if i else None), cp, metadata,
                  {"messages": cp["channel_versions"]["messages"]})

    put(writer, 0, seed=True)
    put(writer, 1, seed=False)
    reader = local.saver()
    assert reader.get_delta_channel_history(config=cfg("t", checkpoint_id=checkpoint_id(1)),
                                            channels=["messages"]) == {
        "messages": {"writes": [], "seed": ["seed"]}}
    before = len(local.events)
    put(reader, 2, seed=False)
    assert sum(e.bytes_sent for e in local.events[before:]) < 5_000


# --- packed writes keep InMemorySaver's semantics -------------------------------------------


def message(n: int) -> ToolMessage:
    return ToolMessage(prose(f"packed-{n}"), tool_call_id=f"call-{n}", id=f"tool-{n}")


CALLS: list[tuple[str, list[tuple[str, Any]]]] = [
    # Three regular writes: one packed row (of manifests); then the same task again with
    # overlapping indexes (ignored) and one more (idx 3: stored), specials replaced.
    ("task-1", [("messages", [message(1)]), ("notes", message(2)), ("__error__", "first")]),
    ("task-1", [("messages", [message(3)]), ("notes", "other"), ("x", 1), ("y", [message(4)]),
                ("__error__", "second")]),
    ("task-1", [("__interrupt__", {"value": "ask"}), ("z", 5)]),
    # A single regular write stays a row of its own; then a call with more writes.
    ("task-2", [("messages", [message(5)])]),
    ("task-2", [("messages", [message(6)]), ("notes", [message(7)]), ("__scheduled__", "s")]),
    # Writes of one task that are all special.
    ("task-3", [("__error__", "e1"), ("__resume__", "r1")]),
    ("task-3", [("__error__", "e2"), ("messages", [message(8)])]),
]


def pending(saver: Any, thread: str) -> list:
    config = saver.put(generate_config(thread), generate_checkpoint(), {"step": 0}, {})
    for task_id, writes in CALLS:
        saver.put_writes(config, writes, task_id)
    got = saver.get_tuple(config)
    assert got is not None
    return got.pending_writes


def test_packed_writes_match_inmemory(backend: Backend) -> None:
    thread = new_thread("pw")
    want = pending(InMemorySaver(), thread)
    saver = backend.saver()
    got = pending(saver, thread)
    assert got == want
    stored = markers(saver, thread)
    assert stored["wp:"] >= 1 and stored["wm:"] >= 1, stored  # packed rows; a manifest alone
    assert [i.missing for i in inexact(saver, thread)] in ([], [0])
    saver.prune([thread], strategy="keep_latest")  # its only checkpoint stays; GC runs
    assert_exact(saver, thread)
    # A fresh saver (nothing known of the thread) reads the same.
    fresh = backend.saver()
    got_fresh = fresh.get_tuple(generate_config(thread))
    assert got_fresh is not None and got_fresh.pending_writes == want


def put_twice(saver: Any, thread: str, first: list, second: list, task: str = "task-1") -> None:
    config = saver.put(generate_config(thread), generate_checkpoint(), {"step": 0}, {})
    saver.put_writes(config, first, task)
    saver.put_writes(config, second, task)


@pytest.mark.parametrize("case", ["packed-replayed", "single-replayed", "special-replaced",
                                  "checkpoint-replaced"])
def test_ignored_or_replaced_values_leave_no_unreferenced_chunk(backend: Backend,
                                                                 case: str) -> None:
    """A replayed regular write is ignored and a special write or a checkpoint put again is
    replaced (InMemorySaver's semantics); the chunks only the losing value listed must not
    stay, or the check reports a thread no deletion touched."""
    saver, thread = backend.saver(), new_thread("rp")
    if case == "packed-replayed":
        put_twice(saver, thread, [("m", [message(1)]), ("n", 1)], [("m", [message(2)]), ("n", 2)])
    elif case == "single-replayed":
        put_twice(saver, thread, [("m", [message(1)])], [("m", [message(2)])])
    elif case == "special-replaced":
        put_twice(saver, thread, [("__error__", [message(1)])], [("__error__", [message(2)])])
    else:
        checkpoint = generate_checkpoint(channel_values={"m": [message(1)]})
        saver.put(generate_config(thread), checkpoint, {"step": 0}, {})
        saver.put(generate_config(thread), {**checkpoint, "channel_values": {"m": [message(2)]}},
                  {"step": 0}, {})
    assert chunk_ids(saver, thread)
    assert_exact(saver, thread)


def test_a_write_that_may_lose_collects_in_one_more_request_only(backend: Backend) -> None:
    """A write to a key this process has not seen stored costs its one request; one to a key it
    wrote or read (a replay, a special write again) costs one more, which collects. A fresh
    saver that read the thread knows its keys: what a special write it replaces leaves goes."""
    saver, thread = backend.saver(), new_thread("rq")
    config = saver.put(generate_config(thread), generate_checkpoint(), {"step": 0}, {})
    _, first = backend.count(lambda: saver.put_writes(config, [("m", [message(1)])], "task-1"))
    _, other = backend.count(lambda: saver.put_writes(config, [("m", [message(2)])], "task-2"))
    _, again = backend.count(lambda: saver.put_writes(config, [("m", [message(3)])], "task-1"))
    assert (first, other, again) == (1, 1, 2)
    saver.put_writes(config, [("__error__", [message(4)])], "task-3")
    reader = backend.saver()
    got = reader.get_tuple(config)
    assert got is not None and ("task-3", "__error__", [message(4)]) in got.pending_writes
    reader.put_writes(config, [("__error__", [message(5)])], "task-3")
    assert _manifest_chunk_of(reader, message(4)) not in chunk_ids(reader, thread)
    assert_exact(saver, thread)


def _manifest_chunk_of(saver: Any, value: Any) -> str:
    _, data = saver.serde.dumps_typed(value)
    (piece,) = [p.id for p in _chunking.split(data) if p.id]
    return piece


def test_packed_writes_of_a_graph_match_inmemory(backend: Backend) -> None:
    """The agent's parallel tool calls: every checkpoint's pending writes as InMemorySaver's."""
    saver, memory, tid = backend.saver(), InMemorySaver(), new_thread()
    _, config = converse(saver, tid, turns=4)
    converse(memory, tid, turns=4)
    assert markers(saver, tid)["wp:"] > 0
    # Task ids derive from checkpoint ids, which differ between the two runs.
    ours = [(t.checkpoint["channel_values"], [(c, v) for _, c, v in t.pending_writes])
            for t in saver.list(config)]
    theirs = [(t.checkpoint["channel_values"], [(c, v) for _, c, v in t.pending_writes])
              for t in memory.list(config)]
    assert ours == theirs



# --- found by review: a manifest beside metadata that fills the row; packs and row writes ----


def test_manifest_beside_metadata_filling_the_row_stays_readable_and_kept(backend: Backend
                                                                          ) -> None:
    """Metadata that fits the row alone but not beside the manifest moves to pieces; the
    manifest is never split (SQL could not see its chunks: reads failed, and the next prune
    collected every chunk)."""
    saver, thread = backend.saver(), new_thread("md")
    messages = [message(i) for i in range(5)]
    cp = generate_checkpoint(channel_values={"messages": messages})
    config = saver.put(generate_config(thread), cp, {"step": 0, "notes": "n" * 1_899_750}, {})
    saver.prune([thread], strategy="keep_latest")
    got = saver.get_tuple(config)
    assert got is not None and got.checkpoint["channel_values"]["messages"] == messages
    assert got.metadata["notes"] == "n" * 1_899_750
    assert markers(saver, thread)["cm:"] == 1
    assert_exact(saver, thread)


def test_row_by_row_writes_of_a_task_skip_what_its_pack_holds(backend: Backend) -> None:
    """A task's writes packed by one saver, then the same task written by a saver that stores
    writes row by row (with keys): the first write of each index stays the only one."""
    thread = new_thread("mix")
    plain, keyed = backend.saver(), backend.saver(encryption_keys=[bytes([9]) * 32])
    config = plain.put(generate_config(thread), generate_checkpoint(), {"step": 0}, {})
    plain.put_writes(config, [("a", "first-a"), ("b", "first-b")], "task-1")
    keyed.put_writes(config, [("a", "second-a"), ("b", "second-b"), ("c", "new-c")], "task-1")
    rows = query(plain, "SELECT idx, channel FROM writes WHERE thread_id = ?1 AND task_id = ?2 "
                        "ORDER BY idx", thread, "task-1")
    assert [tuple(r) for r in rows] == [(0, ""), (2, "c")]  # the pack, then the new index


def test_a_page_decodes_and_checks_each_chunk_once(backend: Backend, monkeypatch: Any) -> None:
    """A page's checkpoints list the same messages again and again: each chunk is decoded and
    checked against its id once per read, not once per checkpoint that lists it."""
    saver = backend.saver()
    graph, config = converse(saver, new_thread())
    checked: Counter[str] = Counter()
    names = _manifest.names
    monkeypatch.setattr(_manifest, "names", lambda c, d, *kind: checked.update([c]) or names(c, d, *kind))
    assert len(list(saver.list(config))) > 10
    assert checked and max(checked.values()) == 1


# --- schema v15: a thread written half in base85 (0.2) and half in base64 --------------------


def _encode_0_2(data: bytes) -> str:
    """What 0.2's `codec.encode` wrote: "r:", the same raw deflate as "s:", in base85."""
    import base64

    from d1saver.storage import codec as _codec

    raw = "b:" + base64.b64encode(data).decode("ascii")
    if len(data) >= _codec.R_MIN:
        deflated = _codec._raw_deflate(data)
        if len(deflated) <= len(data) * 0.9:
            packed = "r:" + base64.b85encode(deflated).decode("ascii")
            if len(packed) < len(raw):
                return packed
    return raw


def test_a_thread_of_0_2_goes_on_in_base64_sharing_its_chunks(
        backend: Backend, monkeypatch: pytest.MonkeyPatch) -> None:
    """A conversation stored by 0.2 ("r:" chunks and values) and resumed by a fresh saver of
    this version: it reads back as InMemorySaver's; the chunks 0.2 stored stay as they were
    and are listed by id, never sent again (ids name bytes, not text); new ones are "s:"."""
    from langchain_core.messages import HumanMessage

    from d1saver.storage import codec as _codec

    tid = new_thread("mx")
    memory = InMemorySaver()
    with monkeypatch.context() as m:
        m.setattr(_codec, "encode", _encode_0_2)
        converse(backend.saver(), tid, turns=3)
    converse(memory, tid, turns=3)
    leaves = "SELECT id, data FROM d1saver_chunks WHERE thread_id = ?1 AND level = 0"
    old = dict(query(backend.saver(), leaves, tid))
    assert old and {text[:2] for text in old.values()} <= {"r:", "b:"}
    assert "r:" in {text[:2] for text in old.values()}

    resumed = backend.saver()  # knows nothing of the thread: learns it from its first read
    sent_from = len(backend.events)
    go_on = {"messages": [HumanMessage(content="And the refunds?", id="human-2")]}
    config = {"configurable": {"thread_id": tid}}
    build_graph(resumed, turns=6).invoke(go_on, config)
    build_graph(memory, turns=6).invoke(go_on, config)

    ours = [(t.checkpoint["channel_values"], [(c, v) for _, c, v in t.pending_writes])
            for t in resumed.list(config)]
    theirs = [(t.checkpoint["channel_values"], [(c, v) for _, c, v in t.pending_writes])
              for t in memory.list(config)]
    assert ours == theirs and len(ours) == 14  # 7 checkpoints of 0.2's run, 7 of this one's
    now = dict(query(resumed, leaves, tid))
    assert {i: now[i] for i in old} == old  # 0.2's chunks as they were, each still listed
    new = {i: text for i, text in now.items() if i not in old}
    assert new and {text[:2] for text in new.values()} <= {"s:", "b:"}
    assert "s:" in {text[:2] for text in new.values()}
    # No request after the resume carried an old chunk, in either text.
    sent = " ".join(str(p) for event in backend.events[sent_from:]
                    for stmt in event.statements for p in stmt.params)
    for i, text in old.items():
        assert text[2:] not in sent and _codec.encode(_codec.decode(text))[2:] not in sent, i
    assert_exact(resumed, tid)
