"""Every read statement variant answers as InMemorySaver does, on the same checkpoints.

The page statements come in six variants (every thread, one thread, one namespace; each plain
or with a metadata filter), each with the DeltaChannel prefetch that rides along, and
get_delta_channel_history has its own. One corpus (tests/saver/mirror.py: DeltaChannels,
packed writes, special writes, values stored by content, a subgraph's namespace) is put
through D1Saver and InMemorySaver alike, then each variant is read with its parameters
(before, limit, a checkpoint id, pages of a few rows) and compared with InMemorySaver's
answer: the tuples, and the history of every DeltaChannel LangGraph would ask for, which a
list or get_tuple must have prefetched (no request). `./dev mutate` checks that dropping or
changing any clause of these statements fails one of these tests.
"""

from __future__ import annotations

import base64
import json
import random
from typing import Annotated, Any

import pytest
from langchain_core.runnables import RunnableConfig
from langgraph.channels.delta import DeltaChannel
from langgraph.checkpoint.base import CheckpointTuple
from langgraph.graph import END, START, StateGraph
from typing_extensions import TypedDict

from benchmarks.workload import append_batches
from d1saver import D1Saver, Statement
from d1saver.ops import statements as st
from d1saver.ops.rows import chunks_of
from d1saver.sql import catalogue as _sql
from tests.conftest import Backend
from tests.saver import mirror
from tests.saver.mirror import Recording

FILTERS: list[dict[str, Any]] = [
    {"user": "u1"}, {"turn": 2}, {"team": {"id": 0}}, {"source": "loop", "user": "u0"},
    {"source": "input"}, {"user": "nobody"}, {"missing": None}, {"step": 3}, {"turn": 1},
    {"note": mirror.NOTE}, {"user": "u1", "note": mirror.NOTE}, {"note": "other"},
]


@pytest.fixture(scope="module")
def recording() -> Recording:
    return mirror.record_corpus()


# A copy of a thread staged under a hidden id (a move or copy under way): never listed.
STAGED = "\x1fd1saver-staged-t1"


def saver_with(backend: Backend, recording: Recording, **options: Any) -> D1Saver:
    """A D1Saver holding the corpus, and a staged copy of its first thread."""
    saver = backend.saver(**options)
    mirror.replay(recording, saver)
    saver.client.execute(Statement.bind_each(
        [_sql.COPY_D1SAVER_CHUNKS, _sql.COPY_CHECKPOINTS, _sql.COPY_WRITES],
        {"source": "t1", "target": STAGED}))
    return saver


def namespaces(memory: Recording, thread_id: str) -> list[str]:
    return sorted(memory.storage[thread_id])


def check_list(backend: Backend, saver: D1Saver, memory: Recording,
               config: RunnableConfig | None, **kwargs: Any) -> list[CheckpointTuple]:
    """saver.list(config, **kwargs) is InMemorySaver's answer (in D1Saver's order; `limit`
    the newest), and every DeltaChannel history of what it listed is served from what the
    list fetched, as InMemorySaver answers it."""
    limit = kwargs.pop("limit", None)
    got = list(saver.list(config, limit=limit, **kwargs))
    want = mirror.in_order(list(memory.list(config, **kwargs)))[:limit]
    assert [t.config for t in got] == [t.config for t in want], (config, kwargs)
    for g, w in zip(got, want):
        assert mirror.comparable(g, w) == mirror.comparable(w, g), g.config
    wrong = served_histories(backend, saver, memory, got)
    assert not wrong, (f"{len(wrong)} of {sum(bool(mirror.sought(t)) for t in got)} histories "
                       f"differ after list({config}, {kwargs}), as {wrong[:2]}")
    return got


def served_histories(backend: Backend, saver: D1Saver, memory: Recording,
                     tuples: list[CheckpointTuple]) -> list[RunnableConfig]:
    """The configs whose DeltaChannel histories, taken from the prefetch (no request is
    made), differ from InMemorySaver's."""
    before = backend.requests
    wrong = []
    for t in tuples:
        channels = mirror.sought(t)
        if channels and (saver.get_delta_channel_history(config=t.config, channels=channels)
                         != memory.get_delta_channel_history(config=t.config,
                                                             channels=channels)):
            wrong.append(t.config)
    assert backend.requests == before, "a history was not prefetched with its checkpoint"
    return wrong


def middle(memory: Recording, config: RunnableConfig | None) -> RunnableConfig:
    """A checkpoint about halfway down the list, for `before`."""
    listed = mirror.in_order(list(memory.list(config)))
    return listed[len(listed) // 2].config


# --- list(None): every thread -----------------------------------------------------------------


@pytest.mark.parametrize("page_size", [100, 4])
def test_histories_served_after_a_filtered_list_of_every_thread(
        local: Backend, recording: Recording, page_size: int) -> None:
    """list(None, filter=...) (SELECT_PAGE_ALL_FILTERED and its prefetch): the tuples, and
    the DeltaChannel histories then served from the prefetch, packed writes included."""
    saver = saver_with(local, recording, page_size=page_size)
    served = 0
    for f in FILTERS:
        served += sum(bool(mirror.sought(t)) for t in check_list(local, saver, recording, None,
                                                                  filter=f))
        check_list(local, saver, recording, None, filter=f, limit=5)
        check_list(local, saver, recording, None, filter=f,
                   before=middle(recording, None))
    assert served > 20  # the corpus has histories to serve


@pytest.mark.parametrize("page_size", [100, 4])
def test_list_of_every_thread(local: Backend, recording: Recording, page_size: int) -> None:
    """list(None) (SELECT_PAGE_ALL and its prefetch), with before and limit."""
    saver = saver_with(local, recording, page_size=page_size)
    assert len(check_list(local, saver, recording, None)) == len(list(recording.list(None)))
    for limit in (1, 7):
        check_list(local, saver, recording, None, limit=limit)
    check_list(local, saver, recording, None, before=middle(recording, None))
    check_list(local, saver, recording, None, before=middle(recording, None), limit=3)


# --- list({thread_id}): every namespace of one thread -----------------------------------------


@pytest.mark.parametrize("page_size", [100, 3])
def test_list_of_one_thread(local: Backend, recording: Recording, page_size: int) -> None:
    """list({thread_id}) without a namespace (SELECT_PAGE_THREAD): the root's checkpoints and
    the subgraph's, with before and limit."""
    saver = saver_with(local, recording, page_size=page_size)
    for thread in recording.storage:
        config: RunnableConfig = {"configurable": {"thread_id": thread}}
        got = check_list(local, saver, recording, config)
        assert {t.config["configurable"]["checkpoint_ns"] for t in got} == set(
            namespaces(recording, thread))
        check_list(local, saver, recording, config, limit=4)
        check_list(local, saver, recording, config, before=middle(recording, config))
        one = {"configurable": {"thread_id": thread,
                                "checkpoint_id": middle(recording, config)["configurable"][
                                    "checkpoint_id"]}}
        assert len(check_list(local, saver, recording, one)) == 1


@pytest.mark.parametrize("page_size", [100, 3])
def test_filtered_list_of_one_thread(local: Backend, recording: Recording,
                                     page_size: int) -> None:
    """list({thread_id}, filter=...) (SELECT_PAGE_THREAD_FILTERED)."""
    saver = saver_with(local, recording, page_size=page_size)
    for thread in recording.storage:
        config: RunnableConfig = {"configurable": {"thread_id": thread}}
        for f in FILTERS:
            check_list(local, saver, recording, config, filter=f)
        check_list(local, saver, recording, config, filter=FILTERS[0], limit=2,
                   before=middle(recording, config))
        one = {"configurable": {"thread_id": thread,
                                "checkpoint_id": middle(recording, config)["configurable"][
                                    "checkpoint_id"]}}
        check_list(local, saver, recording, one, filter={"source": "loop"})


# --- list({thread_id, checkpoint_ns}) and get_tuple: one namespace ----------------------------


@pytest.mark.parametrize("page_size", [100, 3])
def test_list_of_one_namespace(local: Backend, recording: Recording, page_size: int) -> None:
    """list({thread_id, checkpoint_ns}) (SELECT_PAGE_THREAD_NS), a checkpoint id given or not,
    with before and limit; plain and filtered (SELECT_PAGE_THREAD_NS_FILTERED)."""
    saver = saver_with(local, recording, page_size=page_size)
    for thread in recording.storage:
        for ns in namespaces(recording, thread):
            config: RunnableConfig = {"configurable": {"thread_id": thread, "checkpoint_ns": ns}}
            listed = check_list(local, saver, recording, config)
            check_list(local, saver, recording, config, limit=2)
            check_list(local, saver, recording, config, before=middle(recording, config))
            for f in FILTERS:
                check_list(local, saver, recording, config, filter=f)
            one = listed[len(listed) // 2].config
            assert len(check_list(local, saver, recording, one)) == 1
            check_list(local, saver, recording, one, filter=FILTERS[0])


def test_get_tuple(local: Backend, recording: Recording) -> None:
    """get_tuple (SELECT_PAGE_THREAD_NS, one row, and its prefetch) of every checkpoint, and
    of each namespace's head, is InMemorySaver's; so are the histories it prefetched."""
    saver = saver_with(local, recording)
    for thread in recording.storage:
        for ns in namespaces(recording, thread):
            head: RunnableConfig = {"configurable": {"thread_id": thread, "checkpoint_ns": ns}}
            for config in [head, *(t.config for t in recording.list(head))]:
                got, want = saver.get_tuple(config), recording.get_tuple(config)
                assert got is not None and want is not None
                assert mirror.comparable(got, want) == mirror.comparable(want, got)
                assert not served_histories(local, saver, recording, [got])
    missing = {"configurable": {"thread_id": "t1", "checkpoint_ns": "",
                                "checkpoint_id": "1f0-none"}}
    assert saver.get_tuple(missing) is None
    assert saver.get_tuple({"configurable": {"thread_id": "nobody"}}) is None


# --- get_delta_channel_history: its own statement ---------------------------------------------


def test_delta_channel_history(local: Backend, recording: Recording) -> None:
    """get_delta_channel_history (DELTA_HISTORY) with nothing prefetched, of every checkpoint
    and each namespace's head, for each DeltaChannel and both at once: InMemorySaver's answer."""
    saver_with(local, recording)
    saver = local.saver()  # another instance: nothing cached
    asked = 0
    for thread in recording.storage:
        for ns in namespaces(recording, thread):
            head: RunnableConfig = {"configurable": {"thread_id": thread, "checkpoint_ns": ns}}
            for config in [head, *(t.config for t in recording.list(head))]:
                for channels in (["messages"], ["notes"], ["messages", "notes"]):
                    got = saver.get_delta_channel_history(config=config, channels=channels)
                    want = recording.get_delta_channel_history(config=config, channels=channels)
                    assert got == want, (config, channels)
                    asked += 1
    assert asked > 100


def test_a_checkpoint_that_is_its_own_parent_reads_back(local: Backend) -> None:
    """A checkpoint put with its own id as parent (its DeltaChannel written, never seeded):
    every read ends, get_tuple and each list (plain and filtered, in each scope) with its
    prefetched history, which is the one DELTA_HISTORY walks alone: the checkpoint's own
    writes, once. (InMemorySaver walks such a chain forever.)"""
    saver = local.saver()
    cid = "1f0aaaaa-0000-6000-8000-000000000005"
    cp = mirror.empty_checkpoint()
    cp.update(id=cid, channel_versions={"messages": "2.0"})
    config: RunnableConfig = {"configurable": {"thread_id": "loop", "checkpoint_ns": "",
                                               "checkpoint_id": cid}}
    saver.put(config, cp, {"step": 1, "parents": {}, "user": "u",
                           "counters_since_delta_snapshot": {"messages": [1, 1]}},
              {"messages": "2.0"})
    saver.put_writes(config, [("messages", "m1")], "task-1")
    want = local.saver().get_delta_channel_history(config=config, channels=["messages"])
    assert want == {"messages": {"writes": [("task-1", "messages", "m1")]}}
    scopes: list[RunnableConfig | None] = [
        config, {"configurable": {"thread_id": "loop"}}, None]
    for scope in scopes:
        for f in (None, {"user": "u"}):
            reader = local.saver()
            if scope is config and f is None:
                got = [reader.get_tuple(config)]
            else:
                got = list(reader.list(scope, filter=f))
            assert [t and t.config for t in got] == [config], (scope, f)
            assert got[0] is not None and got[0].parent_config == config
            before = local.requests
            assert reader.get_delta_channel_history(config=config, channels=["messages"]) == (
                want), (scope, f)
            assert local.requests == before, (scope, f)  # prefetched with the page

@pytest.mark.parametrize("other", [("u", "b"), ("v", "")], ids=["namespace", "thread"])
def test_a_channel_never_written_in_one_namespace_is_sought_in_its_twin(
        local: Backend, other: tuple[str, str]) -> None:
    """Two namespaces of a thread (or two threads) hold the same checkpoint ids: in one the
    checkpoint declares its DeltaChannel but never wrote it (nothing to seek), in the other
    it wrote it (a history from the seed). Each page variant prefetches the second's history,
    as InMemorySaver gives it; the first's declared channel stays unsought."""
    memory, saver = Recording(), local.saver()
    ids = [f"1f0aaaaa-0000-6000-8000-00000000000{i}" for i in range(2)]
    for target in (memory, saver):
        for (thread_id, ns), written in ((("u", ""), False), (other, True)):
            parent: RunnableConfig = {"configurable": {"thread_id": thread_id,
                                                       "checkpoint_ns": ns}}
            for i, cid in enumerate(ids):
                cp = mirror.empty_checkpoint()
                cp["id"] = cid
                metadata: Any = {"source": "loop", "step": i, "parents": {}, "user": "u"}
                versions = {"messages": f"{i + 1}.0"} if written else {}
                if i == 0:
                    cp["channel_values"] = {"messages": ["seed"]} if written else {}
                else:
                    metadata["counters_since_delta_snapshot"] = {"messages": [1, 1]}
                cp["channel_versions"] = versions
                parent = target.put(parent, cp, metadata, versions)
                target.put_writes(parent, [("messages", f"{ns}{i}")], task_id=f"task-{i}")
    twin: RunnableConfig = {"configurable": {"thread_id": other[0], "checkpoint_ns": other[1],
                                             "checkpoint_id": ids[1]}}
    want = memory.get_delta_channel_history(config=twin, channels=["messages"])
    assert "seed" in str(want)
    for reader, t, read in mirror.every_read(local.saver, twin, {"user": "u"}):
        assert mirror.sought(t) == ["messages"], read
        before = local.requests
        assert reader.get_delta_channel_history(config=t.config, channels=["messages"]) == (
            want), read
        assert local.requests == before, read  # prefetched with the page


def test_values_stored_by_content_over_a_value_limit_read_back_in_every_variant(
        local: Backend) -> None:
    """A checkpoint whose messages, stored by content, add up to more than one value may hold
    (D1's 2 MB): each page variant returns their chunks in groups under the limit, and the
    checkpoint reads back whole."""
    rng = random.Random(7)
    messages = [base64.b64encode(rng.randbytes(90_000)).decode() for _ in range(30)]
    saver = local.saver()
    cp = mirror.empty_checkpoint()
    cp.update(id="1f0aaaaa-0000-6000-8000-000000000001", channel_values={"messages": messages},
              channel_versions={"messages": "1.0"})
    config = saver.put({"configurable": {"thread_id": "big", "checkpoint_ns": ""}}, cp,
                       {"source": "loop", "step": 0, "parents": {}, "user": "u"},
                       {"messages": "1.0"})
    (stored,) = saver.client.execute([Statement(
        "SELECT COUNT(*), SUM(LENGTH(data)) FROM d1saver_chunks WHERE thread_id = 'big'")])
    assert stored.rows[0][0] >= 30 and stored.rows[0][1] > 3_000_000
    for _, t, read in mirror.every_read(local.saver, config, {"user": "u"}):
        assert t.checkpoint["channel_values"] == {"messages": messages}, read


class Steps(TypedDict):
    messages: Annotated[list, DeltaChannel(append_batches, snapshot_frequency=4)]
    n: int


def delta_run(texts: list[str]) -> Recording:
    """Thread "big" on InMemorySaver: a step per text, each appending it to a DeltaChannel
    snapshotted every 4 steps (the head replays from the seed 2 steps back); metadata
    {"user": "u"}."""
    def step(state: Steps) -> dict[str, Any]:
        return {"messages": [texts[state["n"]]], "n": state["n"] + 1}

    g = StateGraph(Steps)
    g.add_node("step", step)
    g.add_edge(START, "step")
    g.add_conditional_edges("step", lambda s: END if s["n"] >= len(texts) else "step",
                            ["step", END])
    memory = Recording()
    g.compile(checkpointer=memory).invoke(
        {"messages": [], "n": 0}, {"configurable": {"thread_id": "big"},
                                   "metadata": {"user": "u"}})
    return memory


def test_a_delta_seed_over_a_value_limit_is_prefetched_by_every_variant(local: Backend) -> None:
    """A DeltaChannel of ten 400 KB messages, snapshotted every 4 steps: the head replays from
    a seed whose chunks (stored by content) add up to more than one value may hold (D1's
    2 MB). Each page variant's prefetch, for a page of the head alone (the seed is not in it:
    the page would return its chunks), returns them in groups under the limit, and the head's
    history, read after it without a request, is InMemorySaver's."""
    rng = random.Random(3)
    memory = delta_run([base64.b64encode(rng.randbytes(300_000)).decode() for _ in range(10)])
    saver = local.saver()
    mirror.replay(memory, saver)
    head = memory.get_tuple({"configurable": {"thread_id": "big"}})
    assert head is not None and mirror.sought(head) == ["messages"]
    (stored,) = saver.client.execute([Statement(
        "SELECT SUM(LENGTH(data)) FROM d1saver_chunks WHERE thread_id = 'big'")])
    assert stored.rows[0][0] > 3_000_000
    want = memory.get_delta_channel_history(config=head.config, channels=["messages"])
    scopes: list[RunnableConfig | None] = [
        {"configurable": {"thread_id": "big", "checkpoint_ns": ""}},
        {"configurable": {"thread_id": "big"}}, None]
    filters: list[dict[str, Any] | None] = [None, {"user": "u"}]
    reads: list[tuple[RunnableConfig | None, dict[str, Any] | None] | None] = [
        (scope, f) for scope in scopes for f in filters]
    for read in [*reads, None]:  # each a page of the head alone (None: get_tuple), not the seed
        reader = local.saver()
        (t,) = ([reader.get_tuple(head.config)] if read is None
                else list(reader.list(read[0], filter=read[1], limit=1)))
        assert t is not None and t.config == head.config, read
        before = local.requests
        assert reader.get_delta_channel_history(config=t.config, channels=["messages"]) == (
            want), read
        assert local.requests == before, read

def test_a_head_with_metadata_in_pieces_is_prefetched_by_every_filtered_variant(
        local: Backend) -> None:
    """The head of a DeltaChannel thread holds metadata too big for its row (in pieces: the
    column keeps only small keys): a list filtered on a key the column lacks returns it
    (decided in Python), and each filtered variant's prefetch carried its history: read
    after the list without a request, it is InMemorySaver's."""
    memory = delta_run([f"m{n}" for n in range(10)])
    method, head_put = memory.calls[-1]
    assert method == "put"
    head_put[2].update(note=mirror.NOTE, big="b" * 2_000_000)
    saver = local.saver()
    mirror.replay(memory, saver)
    head = memory.get_tuple({"configurable": {"thread_id": "big"}})
    assert head is not None and mirror.sought(head) == ["messages"]
    (column,) = saver.client.execute([Statement(
        "SELECT metadata FROM checkpoints WHERE thread_id = 'big' AND checkpoint_id = ?",
        [head.config["configurable"]["checkpoint_id"]])])
    assert "note" not in json.loads(column.rows[0][0])
    want = memory.get_delta_channel_history(config=head.config, channels=["messages"])
    scopes: list[RunnableConfig | None] = [
        {"configurable": {"thread_id": "big", "checkpoint_ns": ""}},
        {"configurable": {"thread_id": "big"}}, None]
    for scope in scopes:
        reader = local.saver()
        (t,) = reader.list(scope, filter={"note": mirror.NOTE})
        assert t.config == head.config, scope
        before = local.requests
        assert reader.get_delta_channel_history(config=t.config, channels=["messages"]) == (
            want), scope
        assert local.requests == before, scope


def test_a_filter_on_a_nested_object_matches_its_keys_not_only_its_values(
        local: Backend) -> None:
    """A filter on a nested object, as InMemorySaver's `==`: metadata holding the same values
    under other keys (or the values swapped between the keys) does not match, in every
    filtered variant; SQL decides it, so the first match alone (limit=1) is one request,
    newer checkpoints that do not match notwithstanding."""
    memory, saver = Recording(), local.saver()
    teams = [{"id": 0}, {"key": 0}, {"id": 0, "key": 1}, {"id": 1, "key": 0}]
    for target in (memory, saver):
        for i, team in enumerate(teams):
            cp = mirror.empty_checkpoint()
            cp["id"] = f"1f0aaaaa-0000-6000-8000-00000000000{i}"
            metadata: Any = {"source": "loop", "step": i, "parents": {}, "team": team}
            target.put({"configurable": {"thread_id": "f", "checkpoint_ns": ""}}, cp, metadata,
                       {})
    scopes: list[RunnableConfig | None] = [
        {"configurable": {"thread_id": "f", "checkpoint_ns": ""}},
        {"configurable": {"thread_id": "f"}}, None]
    for f in ({"team": {"id": 0}}, {"team": {"id": 0, "key": 1}}, {"team": {"key": 0}}):
        want = [t.config for t in mirror.in_order(list(memory.list(None, filter=f)))]
        assert len(want) == 1, f
        for scope in scopes:
            assert [t.config for t in saver.list(scope, filter=f)] == want, (scope, f)
            before = local.requests
            got = [t.config for t in saver.list(scope, filter=f, limit=1)]
            requests = local.requests - before
            assert (got, requests) == (want, 1), (scope, f)


# --- what each page statement itself returns --------------------------------------------------


def test_each_page_statement_returns_what_it_can_decide_once(
        local: Backend, recording: Recording) -> None:
    """Each page statement, sent as is, returns the checkpoints InMemorySaver lists, plus
    only those whose metadata lives in chunks and whose column cannot decide the filter (they
    are decided in Python); each content-addressed chunk once, and its DeltaChannel prefetch
    none of the page's chunks again."""
    saver = saver_with(local, recording)
    (result,) = saver.client.execute([Statement(
        "SELECT metadata FROM checkpoints WHERE thread_id = ?", [mirror.BIG_THREAD])])
    column = json.loads(result.rows[0][0])
    assert "d1saver:metadata" in column and "user" in column and "note" not in column

    (stored,) = saver.client.execute([Statement(
        "SELECT thread_id, id, data FROM d1saver_chunks WHERE level > 0")])
    nodes = {(t, i): data for t, i, data in stored.rows}

    def reached(rows: list[list[Any]], kinds: tuple[str, ...]) -> set[tuple[str, str]]:
        """The chunks the values of these rows reach (manifests, packed writes, tree nodes)."""
        out: set[tuple[str, str]] = set()

        def walk(thread: str, entries: list[str]) -> None:
            for entry in entries:
                if entry[1:2] == ":":  # an inline piece
                    continue
                chunk = entry.lstrip("^")
                out.add((thread, chunk))
                if entry.startswith("^"):
                    walk(thread, nodes[(thread, chunk)].split(","))

        for row in rows:
            value = row[10]
            if row[0] not in kinds or not isinstance(value, str):
                continue
            texts = [value] if not value.startswith("p:") else [
                w[3] for w in json.loads(value[2:]) if isinstance(w[3], str)]
            for text in texts:
                if text.startswith("m:"):
                    walk(row[1], text[2:].split(","))
        return out

    def undecided(f: dict[str, Any]) -> bool:
        return all(column.get(k, v) == v for k, v in f.items()) and any(
            k not in column for k in f)

    scopes: list[RunnableConfig | None] = [
        None, {"configurable": {"thread_id": "t1"}},
        {"configurable": {"thread_id": "t1", "checkpoint_ns": ""}},
        {"configurable": {"thread_id": mirror.BIG_THREAD, "checkpoint_ns": ""}},
        {"configurable": {"thread_id": mirror.BIG_THREAD}}]
    for config in scopes:
        conf = (config or {}).get("configurable", {})
        before = middle(recording, config)
        for f, until in [(None, None), (None, before), *((f, None) for f in FILTERS)]:
            page = st.page_statement(
                thread_id=conf.get("thread_id"), ns=conf.get("checkpoint_ns"),
                checkpoint_id=None, filter_json=st.validate_filter(f), cursor=None, size=1000,
                before=until and until["configurable"]["checkpoint_id"])
            rows, walk = saver.client.execute([page, st.delta_statement(page)])
            got = {(r[1], r[2], r[3]) for r in rows.rows if r[0] == "c"}
            want = {(t.config["configurable"]["thread_id"], t.config["configurable"][
                "checkpoint_ns"], t.config["configurable"]["checkpoint_id"])
                for t in recording.list(config, filter=f, before=until)}
            if f and undecided(f) and conf.get("thread_id") in (None, mirror.BIG_THREAD):
                want.add((mirror.BIG_THREAD, "", mirror.BIG_ID))
            assert got == want, (page.name, f)
            small = Statement.bind(_sql.__dict__[page.name], {**page.named(), "limit": 2})
            (few,) = saver.client.execute([small])
            assert len([r for r in few.rows if r[0] == "c"]) == min(2, len(got)), page.name
            chunks = [(r[1], i) for r in rows.rows if r[0] == "h" for i, _ in chunks_of(r)]
            assert len(chunks) == len(set(chunks)), page.name
            assert set(chunks) == reached(rows.rows, ("c", "w")), page.name
            walked = [(r[1], i) for r in walk.rows if r[0] == "h" for i, _ in chunks_of(r)]
            assert len(walked) == len(set(walked)), page.name
            assert set(walked) == reached(walk.rows, ("a", "w", "f")) - set(chunks), page.name


def test_histories_after_compaction(local: Backend, recording: Recording) -> None:
    """After prune(keep_latest) of a thread (its kept checkpoints' histories frozen before
    their ancestors go: delta_frozen), every read of what was kept still gives InMemorySaver's
    answer: the tuples, the prefetched histories of each page variant, and DELTA_HISTORY's."""
    saver = saver_with(local, recording)
    saver.prune(["t3"], strategy="keep_latest")
    (frozen,) = saver.client.execute([Statement(
        "SELECT COUNT(*) FROM delta_frozen WHERE thread_id = 't3'")])
    assert frozen.rows[0][0] > 0
    kept = list(saver.list({"configurable": {"thread_id": "t3"}}))
    assert kept
    for scope, f in [(None, None), (None, {"user": "u0"}),
                     ({"configurable": {"thread_id": "t3"}}, None),
                     ({"configurable": {"thread_id": "t3"}}, {"user": "u0"}),
                     ({"configurable": {"thread_id": "t3", "checkpoint_ns": ""}}, None),
                     ({"configurable": {"thread_id": "t3", "checkpoint_ns": ""}},
                      {"user": "u0"})]:
        got = [t for t in saver.list(scope, filter=f)
               if t.config["configurable"]["thread_id"] == "t3"]
        assert got, (scope, f)
        for t in got:  # the same, but for the parent a prune relinks (gone: none)
            want = recording.get_tuple(t.config)
            assert want is not None
            assert mirror.comparable(t, want)._replace(parent_config=None) == (
                mirror.comparable(want, t)._replace(parent_config=None))
        assert not served_histories(local, saver, recording, got), (scope, f)
    fresh = local.saver()  # nothing cached: DELTA_HISTORY reads the frozen records
    asked = 0
    for t in kept:  # what LangGraph asks of a kept checkpoint (a prune keeps no more)
        if channels := mirror.sought(t):
            asked += 1
            assert fresh.get_delta_channel_history(config=t.config, channels=channels) == (
                recording.get_delta_channel_history(config=t.config, channels=channels))
    assert asked
