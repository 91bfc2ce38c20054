"""DeltaChannels: what a read costs when a channel is declared but never written, and the
history cache answering as InMemorySaver does after every write or delete of the thread."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

import pytest
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver, empty_checkpoint
from langgraph.checkpoint.memory import InMemorySaver

from d1saver import D1Saver
from d1saver.ops import statements as st
from d1saver.ops.rows import chunks_of
from d1saver.ops.delta_cache import DeltaCache
from tests.compaction import cfg, new_thread
from tests.compaction import checkpoint_id as cid
from tests.conftest import Backend
from tests.saver import graphs

# --- a channel declared but never written ----------------------------------------------------


def get_tuple_walk(saver: D1Saver, thread_id: str) -> tuple[int, int, int]:
    """What get_tuple's DeltaChannel prefetch reads for the thread's head, from the very
    statements get_tuple sends: (rows it returns, meta rows_read beyond the page's own, which
    the prefetch repeats to find its starting checkpoints, content-addressed chunks returned)."""
    page = st.page_statement(thread_id=thread_id, ns="", checkpoint_id=None, before=None,
                             filter_json=None, cursor=None, size=1)
    tuples, walk = saver.client.execute([page, st.delta_statement(page)])
    # Content-addressed chunks ('h' rows) of the seeds ride along: the walk is the rest.
    return (len([r for r in walk.rows if r[0] != "h"]),
            int(walk.meta["rows_read"]) - int(tuples.meta["rows_read"]),
            sum(len(list(chunks_of(r))) for r in walk.rows if r[0] == "h"))


def test_never_written_channel_costs_get_tuple_nothing(backend: Backend) -> None:
    """With a second DeltaChannel never written, get_tuple's walk reads only back to the seed
    of the written one (at most 3 checkpoints here), not the whole thread, as it grows from 15
    to 90 checkpoints; get_state stays one request and equals InMemorySaver's."""
    saver, memory = backend.saver(), InMemorySaver()
    graph, graph_m = graphs.chat_graph(saver, Counter()), graphs.chat_graph(memory, Counter())
    tid = new_thread()
    config, config_m = {"configurable": {"thread_id": tid}}, {"configurable": {"thread_id": "m"}}
    walks: dict[int, tuple[int, int]] = {}
    for turn in range(1, 31):
        graph.invoke({"messages": [f"user{turn}"]}, config)
        graph_m.invoke({"messages": [f"user{turn}"]}, config_m)
        if turn % 5 == 0:
            walks[turn] = get_tuple_walk(saver, tid)
            state, requests = backend.count(lambda: graph.get_state(config))
            assert requests == 1
            assert state.values == graph_m.get_state(config_m).values
    assert len(list(saver.list(config))) == 90
    rows = {turn: walk[0] for turn, walk in walks.items()}
    # The seed of `messages` comes every 3 updates: the walk's rows cycle every 15 turns.
    assert max(rows.values()) <= 6 and rows[25] == rows[10] and rows[30] == rows[15]
    rows_read = {turn: walk[1] for turn, walk in walks.items()}
    chunks = {turn: walk[2] for turn, walk in walks.items()}
    # The walk itself cycles (it read 31/60/89 rows at 30/60/90 checkpoints before defect 7:
    # a row per checkpoint of the thread, 3 per turn). Beyond it, only the reading of the
    # seeds' content-addressed chunks (tree nodes, about one per 8 messages) grows with the
    # conversation: far less than a row per checkpoint (measured on Wrangler's engine: +12
    # rows from turn 10 to 25, 45 checkpoints).
    for late, early in ((25, 10), (30, 15)):
        assert rows_read[late] - rows_read[early] < (late - early) * 3 / 2, (rows_read, chunks)


def test_unwritten_channel_becomes_sought_once_written(backend: Backend) -> None:
    """A channel first written late is replayed from then on: state equals InMemorySaver's
    at every step (the walk leaves it alone only while it is unwritten)."""
    saver, memory = backend.saver(), InMemorySaver()
    config, config_m = {"configurable": {"thread_id": new_thread()}}, {"configurable": {"thread_id": "m"}}
    graph, graph_m = graphs.chat_graph(saver, Counter()), graphs.chat_graph(memory, Counter())
    for turn in range(4):
        update = {"messages": [f"user{turn}"]}
        if turn == 2:
            update["notes"] = ["a note"]
        graph.invoke(update, config)
        graph_m.invoke(update, config_m)
        assert graph.get_state(config).values == graph_m.get_state(config_m).values
    assert graph.get_state(config).values["notes"] == ["a note"]


# --- the history cache answers as InMemorySaver does -----------------------------------------

CHANNELS = ["messages"]


def at(thread_id: str, i: int | None = None) -> RunnableConfig:
    """The config of checkpoint i of the thread (None: its head)."""
    return cfg(thread_id, checkpoint_id=None if i is None else cid(i))


def build(saver: BaseCheckpointSaver, thread_id: str, spec: Sequence[tuple[int, int | None, str]],
          *, seeds: Sequence[int] = (0,), run_of: dict[int, str] | None = None) -> None:
    """Checkpoints cid(i) with the parent given (None: none) writing `value` to the DeltaChannel
    'messages' (one pending write each); those in `seeds` hold its value (a snapshot), the others
    only what LangGraph stores for a DeltaChannel (a version and a metadata counter)."""
    for i, parent, value in spec:
        cp = empty_checkpoint()
        cp.update(id=cid(i), channel_versions={"messages": f"{i + 1:010}.0"})
        if i in seeds:
            cp["channel_values"] = {"messages": [f"seed{i}"]}
        metadata: dict[str, Any] = {"source": "loop", "step": i, "parents": {}}
        if i not in seeds:
            metadata["counters_since_delta_snapshot"] = {"messages": [i, i]}
        if run_of and i in run_of:
            metadata["run_id"] = run_of[i]
        config = at(thread_id, parent)
        saver.put(config, cp, metadata, {"messages": cp["channel_versions"]["messages"]})
        saver.put_writes(at(thread_id, i), [("messages", value)], task_id=f"task-{i}")


def chain(n: int, value: str = "m") -> list[tuple[int, int | None, str]]:
    return [(i, i - 1 if i else None, f"{value}{i}") for i in range(n)]


def history(saver: BaseCheckpointSaver, thread_id: str, i: int) -> Any:
    return saver.get_delta_channel_history(config=at(thread_id, i), channels=CHANNELS)


def cache(saver: D1Saver, thread_id: str) -> None:
    """Read the thread as LangGraph does (list, then get_tuple of the head): every
    checkpoint's history is now cached."""
    list(saver.list(at(thread_id)))
    saver.get_tuple(at(thread_id))


def test_history_after_put_writes_on_the_parent(backend: Backend) -> None:
    """A write put on the head's parent after the head was read is in the head's history."""
    saver, memory, tid = backend.saver(), InMemorySaver(), new_thread()
    for s in (saver, memory):
        build(s, tid, chain(4))
    cache(saver, tid)
    for s in (saver, memory):
        s.put_writes(at(tid, 2), [("messages", "late")], task_id="late-task")
    assert history(saver, tid, 3) == history(memory, tid, 3)
    assert ("late-task", "messages", "late") in history(saver, tid, 3)["messages"]["writes"]


def test_history_after_delete_thread(backend: Backend) -> None:
    """After delete_thread, the thread has no history, as in InMemorySaver."""
    saver, memory, tid = backend.saver(), InMemorySaver(), new_thread()
    for s in (saver, memory):
        build(s, tid, chain(4))
    cache(saver, tid)
    for s in (saver, memory):
        s.delete_thread(tid)
    assert history(saver, tid, 3) == history(memory, tid, 3) == {"messages": {"writes": []}}


def test_history_after_prune(backend: Backend) -> None:
    """After prune(keep_latest), a pruned checkpoint has no history and the head keeps its own
    (frozen: its ancestors are gone), as InMemorySaver's holding the checkpoints it replays
    (2 to 4, 2 a seed)."""
    saver, memory, tid = backend.saver(), InMemorySaver(), new_thread()
    build(saver, tid, chain(5), seeds=(0, 2))
    build(memory, tid, [(2, None, "m2"), (3, 2, "m3"), (4, 3, "m4")], seeds=(2,))
    cache(saver, tid)
    saver.prune([tid])
    assert history(saver, tid, 4) == history(memory, tid, 4)
    assert history(saver, tid, 4)["messages"]["writes"] == [("task-2", "messages", "m2"),
                                                            ("task-3", "messages", "m3")]
    for i in range(4):
        assert history(saver, tid, i) == {"messages": {"writes": []}}


def test_history_after_delete_for_runs(backend: Backend) -> None:
    """After delete_for_runs, what the run made has no history, and what remains of the next
    run replays without it: as InMemorySaver holding the remains (3, now without a parent, and 4)."""
    saver, memory, tid = backend.saver(), InMemorySaver(), new_thread()
    r1, r2 = f"r1-{tid}", f"r2-{tid}"
    build(saver, tid, chain(5), run_of={0: r1, 1: r1, 2: r1, 3: r2, 4: r2})
    build(memory, tid, [(3, None, "m3"), (4, 3, "m4")], seeds=())
    cache(saver, tid)
    saver.delete_for_runs([r1])
    assert [history(saver, tid, i) for i in range(5)] == [history(memory, tid, i)
                                                         for i in range(5)]
    assert history(saver, tid, 4) == {"messages": {"writes": [("task-3", "messages", "m3")]}}


def test_history_after_copy_thread_onto_it(backend: Backend) -> None:
    """copy_thread onto a thread that was read replaces its checkpoints: their histories are
    the source's, as InMemorySaver holding the source's checkpoints under the target."""
    saver, memory, source, target = backend.saver(), InMemorySaver(), new_thread(), new_thread()
    build(saver, target, chain(4, "old"))
    build(saver, source, chain(4, "new"))
    build(memory, target, chain(4, "new"))
    cache(saver, target)
    saver.copy_thread(source, target)
    assert [history(saver, target, i) for i in range(4)] == [history(memory, target, i)
                                                            for i in range(4)]


@pytest.mark.anyio
async def test_history_after_adelete_thread(backend: Backend) -> None:
    """The async path invalidates too."""
    saver, memory, tid = backend.saver(), InMemorySaver(), new_thread()
    for s in (saver, memory):
        build(s, tid, chain(3))
    await saver.aget_tuple(at(tid))
    await saver.adelete_thread(tid)
    memory.delete_thread(tid)
    ours = await saver.aget_delta_channel_history(config=at(tid, 2), channels=CHANNELS)
    assert ours == history(memory, tid, 2)
    await saver.aclose()


def test_the_cache_still_saves_the_request(backend: Backend) -> None:
    """get_tuple then get_delta_channel_history of the same checkpoint: one request in all."""
    saver, tid = backend.saver(), new_thread()
    build(saver, tid, chain(4))
    _, requests = backend.count(lambda: (saver.get_tuple(at(tid)), history(saver, tid, 3)))
    assert requests == 1


# --- DeltaCache alone ------------------------------------------------------------------------


def test_cache_refuses_what_a_read_found_before_a_change() -> None:
    """A read that began before its thread changed stores nothing; other threads' reads do."""
    cache_, entry = DeltaCache(), {"messages": {"writes": []}}
    since = cache_.mark()
    cache_.invalidate(["a"])
    cache_.put(("a", "", "1"), entry, since)
    cache_.put(("b", "", "1"), entry, since)
    assert cache_.take(("a", "", "1"), CHANNELS) is None
    assert cache_.take(("b", "", "1"), CHANNELS) == entry


def test_cache_invalidation_is_bounded_and_errs_safe() -> None:
    """Past max_changed remembered threads, the oldest are folded into 'everything changed'."""
    cache_, entry = DeltaCache(max_changed=2), {"messages": {"writes": []}}
    since = cache_.mark()
    for thread_id in ("a", "b", "c"):
        cache_.invalidate([thread_id])
    cache_.put(("z", "", "1"), entry, since)  # 'a' was forgotten: every older read is refused
    assert cache_.take(("z", "", "1"), CHANNELS) is None
    cache_.put(("z", "", "1"), entry, cache_.mark())
    assert cache_.take(("z", "", "1"), CHANNELS) == entry


def test_cache_invalidate_all() -> None:
    cache_, entry = DeltaCache(), {"messages": {"writes": []}}
    cache_.put(("a", "", "1"), entry, cache_.mark())
    cache_.invalidate_all()
    assert cache_.take(("a", "", "1"), CHANNELS) is None


def test_history_of_a_chain_that_loops_holds_each_write_once(local: Backend) -> None:
    """A corrupt parent chain that loops (1's parent is 2, 2's is 1) ends the walk where it
    comes back: each ancestor's writes once, oldest first, not once per lap."""
    saver, tid = local.saver(), new_thread()
    build(saver, tid, [(1, 2, "m1"), (2, 1, "m2"), (3, 2, "m3")], seeds=())
    assert history(local.saver(), tid, 3) == {
        "messages": {"writes": [("task-1", "messages", "m1"), ("task-2", "messages", "m2")]}}
