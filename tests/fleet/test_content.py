"""Content-addressed chunks across databases (issue 12): a rebalance moves each thread's chunks
with it and leaves none behind, and copy_thread into another database onto a thread with other
content leaves the target's chunk table exact. Checked with compaction.fleet.check_chunks."""

from __future__ import annotations


from benchmarks.workload import build_graph
from d1saver.compaction import rebalance
from d1saver.compaction.fleet import check_chunks
from d1saver import admin
from tests.conftest import Backend
from tests.fleet.conftest import FleetBackend, unique
from tests.saver.content import assert_exact, chunk_ids, converse, copy_setup, query


def test_staged_threads_statement_runs(backend: Backend) -> None:
    """admin.staged_threads (THREADS_IN_RANGE, read first by every rebalance) names each table
    that may hold a thread's rows, d1saver_chunks included; the real engine refuses a compound
    SELECT of more than 5 terms ("too many terms in compound SELECT")."""
    saver = backend.saver()
    saver.setup()
    staged = f"{admin.MOVING_PREFIX}{unique('st')}"
    query(saver, "INSERT INTO d1saver_chunks (thread_id, id, level, data) "
                 "VALUES (?1, 'x', 0, 'b:x')", staged)  # a copy killed after its first batch
    (result,) = saver.execute([admin.staged_threads()])
    assert [staged] == [r[0] for r in result.rows if r[0] == staged]
    query(saver, "DELETE FROM d1saver_chunks WHERE thread_id = ?1", staged)


def test_rebalance_moves_chunks_whole_and_leaves_none(fleet: FleetBackend) -> None:
    two_ids = fleet.database_ids[:2]
    two = fleet.saver(two_ids)
    prefix = unique("cas")
    threads = [f"{prefix}-{i}" for i in range(6)]
    states, held = {}, {}
    for t in threads:
        graph, config = converse(two, t, turns=3)
        states[t] = graph.get_state(config).values
        with fleet.single(two.home(t)) as db:
            held[t] = chunk_ids(db, t)
        assert held[t], t
    four = fleet.saver()
    moving = [t for t in threads if four.home(t) != two.home(t)]
    assert moving

    summary = rebalance(four)
    assert not summary.errors and summary.threads_moved >= len(moving)
    for t in threads:
        for db_id in fleet.database_ids:
            with fleet.single(db_id) as db:
                # The thread's chunks are in its home, all of them, and nowhere else.
                assert chunk_ids(db, t) == (held[t] if db_id == four.home(t) else set()), (t, db_id)
                assert_exact(db, t)
    for t in threads:
        assert build_graph(four, turns=3).get_state(
            {"configurable": {"thread_id": t}}).values == states[t]
    for t in threads:
        assert check_chunks(four, t) == []


def test_copy_thread_into_another_database_onto_other_content(fleet: FleetBackend) -> None:
    """The target, homed in another database, holds another conversation and one checkpoint
    under the id of the source's head with other content: the copy leaves it exact."""
    saver = fleet.saver()
    prefix = unique("cpy")
    source = f"{prefix}-src"
    target = next(f"{prefix}-dst{i}" for i in range(1000)
                  if saver.home(f"{prefix}-dst{i}") != saver.home(source))
    graph, source_config, _ = copy_setup(saver, source, target)
    assert check_chunks(saver, target) == []
    saver.copy_thread(source, target)
    target_config = {"configurable": {"thread_id": target}}
    assert graph.get_state(target_config).values == graph.get_state(source_config).values
    assert check_chunks(saver, target) == [] and check_chunks(saver, source) == []
