"""Compaction bounds what it keeps, and its walks bound their work: threads calling subgraphs,
DeltaChannels declared but never written, many kept checkpoints far from their DeltaChannel
seed, and corrupt parent loops.

Run on both backends; the threads are named, so the real engine's shared database is fine.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver, empty_checkpoint
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.types import Command, StateSnapshot, interrupt
from typing_extensions import TypedDict

from d1saver.compaction import compact
from d1saver import D1Saver, admin
from d1saver.sql import catalogue as _sql
from d1saver.sql.query import Query
from tests.compaction import cfg, checkpoint_id, ids_in, new_thread, query
from tests.compaction.test_job import by_namespace, count_writes, delta_graph, seed_chain
from tests.conftest import Backend

TURNS = (20, 40, 60)


class Turn(TypedDict, total=False):
    n: int
    reply: str


def turn_graph(saver: BaseCheckpointSaver, runs: Counter, ask: bool = False
               ) -> CompiledStateGraph:
    """count -> child[draft -> review] (-> after): every invoke calls the subgraph once, in a
    namespace of its own; with `ask`, review interrupts for an answer. The state does not grow."""

    def review(state: Turn) -> dict:
        runs["review"] += 1
        answer = interrupt(f"review {state['reply']}?") if ask else "ok"
        return {"reply": f"{state['reply']}:{answer}"}

    def node(name: str, update: Callable[[Turn], dict]) -> Callable[[Turn], dict]:
        def run(state: Turn) -> dict:
            runs[name] += 1
            return update(state)
        return run

    sub = StateGraph(Turn)
    sub.add_node("draft", node("draft", lambda s: {"reply": f"draft{s['n']}"}))
    sub.add_node("review", review)
    sub.add_edge(START, "draft")
    sub.add_edge("draft", "review")
    sub.add_edge("review", END)
    g = StateGraph(Turn)
    g.add_node("count", node("count", lambda s: {"n": s.get("n", 0) + 1}))
    g.add_node("child", sub.compile())
    g.add_node("after", node("after", lambda s: {"reply": s["reply"] + "."}))
    g.add_edge(START, "count")
    g.add_edge("count", "child")
    g.add_edge("child", "after")
    g.add_edge("after", END)
    return g.compile(checkpointer=saver)


def left_by(saver: D1Saver, thread_id: str, keep: int) -> int:
    """The checkpoints compaction with `keep` would leave in the thread (a dry run)."""
    return compact(saver, keep=keep, threads=[thread_id], dry_run=True).checkpoints_kept


def view(snapshot: StateSnapshot) -> tuple:
    """A state as get_state(subgraphs=True) shows it, subgraph states included, without
    parent_config: compaction relinks a kept checkpoint whose parent it deletes, by design."""
    tasks = [(t.id, t.name, t.path, t.error, [i.value for i in t.interrupts], t.result,
              view(t.state) if isinstance(t.state, StateSnapshot) else t.state)
             for t in snapshot.tasks]
    return (snapshot.values, snapshot.next, snapshot.config, snapshot.metadata,
            snapshot.created_at, tasks, [i.value for i in snapshot.interrupts])


# --- subgraphs ------------------------------------------------------------------------------


def test_subgraph_thread_stays_bounded(backend: Backend) -> None:
    """Each turn calls a subgraph, which opens a namespace of its own. After 20, 40 and 60
    turns keep=1 would leave 1 checkpoint (the head; no kept checkpoint reaches an old
    subgraph), not 21, 41 and 61; then it does, and the graph goes on as InMemorySaver's."""
    saver, memory = backend.saver(), InMemorySaver()
    graph, config = turn_graph(saver, Counter()), cfg(new_thread())
    graph_m, config_m = turn_graph(memory, Counter()), cfg("m")
    tid = config["configurable"]["thread_id"]
    left = {}
    for turn in range(1, TURNS[-1] + 1):
        assert graph.invoke({}, config) == graph_m.invoke({}, config_m)
        if turn in TURNS:
            left[turn] = left_by(saver, tid, 1)
    assert left == {20: 1, 40: 1, 60: 1}
    spaces = by_namespace(saver, tid)
    assert len(spaces) == 61
    before, writes = view(graph.get_state(config, subgraphs=True)), count_writes(saver, tid)

    summary = compact(saver, keep=1, threads=[tid])

    assert list(by_namespace(saver, tid)) == [""] and summary.checkpoints_kept == 1
    assert summary.checkpoints_deleted == sum(map(len, spaces.values())) - 1
    assert summary.writes_deleted == writes - count_writes(saver, tid) > 0
    assert view(graph.get_state(config, subgraphs=True)) == before
    assert graph.invoke({}, config) == graph_m.invoke({}, config_m) == {"n": 61,
                                                                         "reply": "draft61:ok."}


def test_subgraph_states_of_head_and_tag_unchanged(backend: Backend) -> None:
    """get_state(subgraphs=True) of the head and of a tagged checkpoint whose next task is the
    subgraph are unchanged by keep=1, which keeps them and that subgraph's newest checkpoint."""
    saver = backend.saver()
    graph, config = turn_graph(saver, Counter()), cfg(new_thread())
    tid = config["configurable"]["thread_id"]
    for _ in range(5):
        graph.invoke({}, config)
    calling = [s for s in graph.get_state_history(config) if s.next == ("child",)]
    tagged = calling[2].config  # the third newest turn's
    saver.tag(tagged, "review")
    before = [view(graph.get_state(c, subgraphs=True)) for c in (config, tagged)]
    child = before[1][5][0][6]  # the tagged checkpoint's subgraph task, its state
    assert isinstance(child, tuple) and child[0] == {"n": 3, "reply": "draft3:ok"}

    compact(saver, keep=1, threads=[tid])

    assert [view(graph.get_state(c, subgraphs=True)) for c in (config, tagged)] == before
    assert sorted(map(len, by_namespace(saver, tid).values())) == [1, 2]  # child, root


def run_turns(graph: CompiledStateGraph, config: RunnableConfig, first: int,
              last: int) -> list[Any]:
    """Turns first..last-1 of the interrupting subgraph graph: each resumes the previous
    turn's pause (if any) and starts one more, left paused in the subgraph. The outputs,
    interrupts by value."""
    out = []
    for turn in range(first, last):
        if turn > 0:
            out.append(graph.invoke(Command(resume=f"ok{turn}"), config))
        paused = graph.invoke({}, config)
        out.append({k: [i.value for i in v] if k == "__interrupt__" else v
                    for k, v in paused.items()})
    return out


def test_interrupted_subgraph_thread_stays_bounded_and_resumes(backend: Backend) -> None:
    """Paused inside a subgraph after 20, 40 and 60 turns, keep=1 would leave 2 checkpoints:
    the root's head and the subgraph's, whose interrupt the head's task holds. Compacted, the
    paused state (subgraphs included) is unchanged and the resume ends as on InMemorySaver."""
    saver, memory = backend.saver(), InMemorySaver()
    runs, runs_m = Counter(), Counter()
    graph, config = turn_graph(saver, runs, ask=True), cfg(new_thread())
    graph_m, config_m = turn_graph(memory, runs_m, ask=True), cfg("m")
    tid = config["configurable"]["thread_id"]
    left, done = {}, 0
    for turns in TURNS:
        assert run_turns(graph, config, done, turns) == run_turns(graph_m, config_m, done, turns)
        done = turns
        left[turns] = left_by(saver, tid, 1)
    assert left == {20: 2, 40: 2, 60: 2}
    before = view(graph.get_state(config, subgraphs=True))
    assert before[1] == ("child",) and before[5][0][6][1] == ("review",)

    compact(saver, keep=1, threads=[tid])

    assert sorted(map(len, by_namespace(saver, tid).values())) == [1, 1]
    assert view(graph.get_state(config, subgraphs=True)) == before
    final = graph.invoke(Command(resume="last"), config)
    assert final == graph_m.invoke(Command(resume="last"), config_m)
    assert final == {"n": 60, "reply": "draft60:last."}
    assert runs == runs_m


def test_nested_and_repeated_subgraph_namespaces(backend: Backend) -> None:
    """Namespaces as LangGraph nests them: a subgraph's own subgraph ('<ns>|<node>:<task>')
    is reached through the subgraph's kept checkpoints, and a second call of a subgraph by
    one task ('<ns>|1') through that task. What no kept checkpoint reaches goes, a second
    call of a subgraph by a task of a checkpoint that goes too."""
    saver, tid = backend.saver(), new_thread()
    root = "child:task-5"
    spaces = {"": 6, root: 5, f"{root}|1": 2, f"{root}|grand:task-4": 3,
              f"{root}|grand:task-0": 3, "child:task-0": 2, "child:task-0|1": 2,
              "child:task-0|grand:task-1": 2}
    for ns, n in spaces.items():
        put_writes_chain(saver, tid, n, ns)

    compact(saver, keep=1, threads=[tid])

    assert by_namespace(saver, tid) == {
        "": [checkpoint_id(5)], root: [checkpoint_id(4)], f"{root}|1": [checkpoint_id(1)],
        f"{root}|grand:task-4": [checkpoint_id(2)]}


def test_running_subgraph_namespace_is_kept(backend: Backend) -> None:
    """A subgraph written after its parent's head, which no write names yet (its task still
    runs), keeps its newest checkpoint: the running task goes on from it."""
    saver, tid = backend.saver(), new_thread()
    put_writes_chain(saver, tid, 3, "")
    put_writes_chain(saver, tid, 5, "child:running-task")  # ids 0..4, newer than the head's 2
    compact(saver, keep=1, threads=[tid])
    assert by_namespace(saver, tid) == {"": [checkpoint_id(2)],
                                        "child:running-task": [checkpoint_id(4)]}


def put_writes_chain(saver: D1Saver, thread_id: str, n: int, ns: str, *, delta: bool = False,
                     seeds: tuple[int, ...] = (0,),
                     parents: Callable[[int], int | None] | None = None) -> list[RunnableConfig]:
    """n checkpoints checkpoint_id(0..n-1) in `ns`, checkpoint i with a write of task
    'task-<i>'; with `delta`, to a DeltaChannel 'messages' that only `seeds` hold a value of.
    `parents` maps i to its parent (default i - 1)."""
    out = []
    for i in range(n):
        cp = empty_checkpoint()
        cp.update(id=checkpoint_id(i), channel_versions={"messages": f"{i + 1:010}.0"})
        metadata: dict[str, Any] = {"source": "loop", "step": i, "parents": {}}
        if not delta or i in seeds:
            cp["channel_values"] = {"messages": [f"seed{i}"]}
        else:
            metadata["counters_since_delta_snapshot"] = {"messages": [i, i]}
        parent = (parents or (lambda j: j - 1 if j else None))(i)
        config = cfg(thread_id, ns, None if parent is None else checkpoint_id(parent))
        out.append(saver.put(config, cp, metadata, {}))
        saver.put_writes(out[-1], [("messages", f"m{i}")], task_id=f"task-{i}")
    return out


# --- DeltaChannels --------------------------------------------------------------------------


def test_never_written_delta_channel_does_not_keep_the_thread(backend: Backend) -> None:
    """A second DeltaChannel ('notes') declared but never written is not replayed by LangGraph:
    keep=1 keeps the head and the seed chain of 'messages' (at most 5 checkpoints), not the
    whole thread, turn after turn; state and results stay InMemorySaver's."""
    saver, memory = backend.saver(), InMemorySaver()
    graph, config = delta_graph(saver, note_at=-1), cfg(new_thread())
    graph_m, config_m = delta_graph(memory, note_at=-1), cfg("m")
    tid = config["configurable"]["thread_id"]
    kept = []
    for turn in range(3):
        state = {"messages": [f"user{turn}"], "n": 0}
        assert graph.invoke(state, config) == graph_m.invoke(state, config_m)
        assert len(ids_in(saver, tid)) >= 14
        compact(saver, keep=1, threads=[tid])
        kept.append(len(ids_in(saver, tid)))
        assert sorted(ids_in(saver, tid)) == sorted(seed_chain(saver, config))
        assert graph.get_state(config).values == graph_m.get_state(config_m).values
    assert max(kept) <= 5
    assert not graph.get_state(config).values.get("notes")


def work(backend: Backend, saver: D1Saver, stmts: list, target: Query) -> int:
    """The work of a batch: meta rows_read of its statement `target` on the real engine; SQLite
    virtual-machine steps of the whole batch (in thousands) on the local D1, whose rows_read
    is only the rows a statement returns."""
    if backend.engine is None:
        results = saver.execute(stmts)
        return next(int(r.meta["rows_read"]) for s, r in zip(stmts, results) if s.name == target.name)
    saver.setup()
    conn = backend.engine._registry.get(backend.database_id).conn  # the test's own database
    steps = [0]

    def tick() -> int:
        steps[0] += 1
        return 0

    conn.set_progress_handler(tick, 1000)
    try:
        saver.execute(stmts)
    finally:
        conn.set_progress_handler(None, 1000)
    return steps[0]


def plan_work(backend: Backend, saver: D1Saver, thread_id: str, keep: int) -> int:
    """The work of planning keep=`keep` on the thread (a retention batch that deletes nothing)."""
    return work(backend, saver, admin.retention([thread_id], keep, delete=False), _sql.PLAN_KEEP)


def freeze_work(backend: Backend, saver: D1Saver, thread_id: str, keep: int) -> int:
    """The work of compacting the thread with keep=`keep` (freezing its DeltaChannel histories
    included), on a copy so that the thread stays as it was."""
    copy = new_thread()
    saver.copy_thread(thread_id, copy)
    return work(backend, saver, admin.retention([copy], keep), _sql.FREEZE)


def test_retention_walk_work_grows_with_checkpoints_not_with_kept_ones(backend: Backend) -> None:
    """60 checkpoints of a DeltaChannel seeded only at the first: keeping the newest 30 freezes
    the history of the oldest kept one only (walks through kept checkpoints change nothing), so
    it costs less than twice keeping the newest 1 (one walk over all 60)."""
    saver, tid = backend.saver(), new_thread()
    put_writes_chain(saver, tid, 60, "", delta=True)
    one, thirty = freeze_work(backend, saver, tid, 1), freeze_work(backend, saver, tid, 30)
    assert thirty < 2 * one
    assert left_by(saver, tid, 30) == 30 and left_by(saver, tid, 1) == 1


def test_parent_loops_end_the_walks(backend: Backend) -> None:
    """Corrupt parent links that loop (3 -> 2 -> 1 -> 0 -> 2) end both walks: the
    DeltaChannel freeze's, which takes at most as many steps as the namespace has checkpoints,
    and the relink's, which finds no kept ancestor and relinks the head to none."""
    saver, delta_tid, plain_tid = backend.saver(), new_thread(), new_thread()
    loop = {0: 2, 1: 0, 2: 1, 3: 2}.__getitem__
    put_writes_chain(saver, delta_tid, 4, "", delta=True, seeds=(), parents=loop)
    put_writes_chain(saver, plain_tid, 4, "", parents=loop)
    saver.execute([*admin.retention([delta_tid], 1), *admin.retention([plain_tid], 1)])
    assert ids_in(saver, delta_tid) == [checkpoint_id(3)]
    frozen = query(saver, "SELECT COUNT(*) FROM delta_frozen WHERE thread_id = ?1", delta_tid)
    assert frozen == [[4]]  # the writes of 2, 1, 0 and 2 again: the walk's 4 steps
    assert ids_in(saver, plain_tid) == [checkpoint_id(3)]
    assert saver.get_tuple(cfg(plain_tid)).parent_config is None


def test_relink_work_does_not_grow_with_other_threads(backend: Backend) -> None:
    """Relinking a compacted thread starts from its kept checkpoints: 1,000 checkpoints more in
    other threads add (almost) nothing to its work, where it used to scan them all."""
    saver, first, second = backend.saver(), new_thread(), new_thread()
    for tid in (first, second):
        put_writes_chain(saver, tid, 10, "")
    before = work(backend, saver, admin.retention([first], 1), _sql.PLAN_RELINK)
    for _ in range(10):
        put_writes_chain(saver, new_thread(), 100, "")
    after = work(backend, saver, admin.retention([second], 1), _sql.PLAN_RELINK)
    assert after <= before + 2
    assert ids_in(saver, second) == [checkpoint_id(9)]
    assert saver.get_tuple(cfg(second)).parent_config is None
