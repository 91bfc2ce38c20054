"""The gateway Worker's run records and cursor (RUN_BEGIN, RUNS_INTERRUPTED, RUN_ADD_BATCH,
RUN_END, CURSOR_*), by what they store: sent here as worker/compaction.js sends them, in the
same batches, on the local D1, and read back as `d1saver compact --history` reads them.
tests/gateway runs the Worker itself under wrangler; these say, statement by statement, what
each clause is for."""

from __future__ import annotations

import uuid
from typing import Any

from d1saver import D1Saver, Statement, admin
from tests.compaction import put_chain
from tests.conftest import Backend

A, B = "db-a", "db-b"  # two databases' records in one table (the shared record is per database)


def runs(saver: D1Saver) -> dict[tuple[str, str], dict[str, Any]]:
    (result,) = saver.execute([admin.compaction_runs(100)])
    return {(r[0], r[1]): dict(zip(admin.COMPACTION_RUNS_COLUMNS, r)) for r in result.rows}


def begin(run_id: str, database_id: str, status: str = "running") -> Any:
    return admin.run_begin(run_id, database_id, "17 3 * * *", 2, None, status, None)


def test_a_run_that_takes_the_lease_marks_only_its_databases_running_runs_interrupted(
        local: Backend) -> None:
    saver = local.saver()
    saver.setup()
    saver.execute([begin("old", A), begin("older", A), begin("done", A), begin("old", B),
                   admin.run_end("done", A, "done", None, 3)])
    saver.execute([admin.runs_interrupted(A, "new"), begin("new", A)])
    got = runs(saver)
    assert {k: r["status"] for k, r in got.items()} == {
        ("old", A): "interrupted", ("older", A): "interrupted", ("done", A): "done",
        ("old", B): "running", ("new", A): "running"}
    assert "new went on" in got[("old", A)]["reason"] and got[("old", A)]["ended_at"]
    assert got[("old", B)]["reason"] is None and got[("old", B)]["ended_at"] is None
    # A run sending it again (a retried batch) leaves itself running.
    saver.execute([admin.runs_interrupted(A, "new")])
    assert runs(saver)[("new", A)]["status"] == "running"


def batch(saver: D1Saver, threads: list[str], keep: int, expired: bool, run_id: str,
          database_id: str, after: str) -> list[list[Any]]:
    """One Worker batch (retention, the run's figures, the cursor); the summary's rows."""
    op_id = uuid.uuid4().hex
    stmts = [*admin.retention(threads, keep, summarize=True, delete=True, op_id=op_id),
             admin.run_add_batch(run_id, database_id, op_id, int(expired)),
             admin.cursor_set(after, run_id)]
    results = saver.execute(stmts)
    return admin.retention_summary(stmts, results).rows


def test_each_batch_adds_what_its_own_recorded_plan_deleted(local: Backend) -> None:
    """threads_compacted counts the threads of a kept batch that lost checkpoints, and
    threads_expired every thread of an expired batch; the sums are of this batch's plan only
    (another batch's plan, recorded under another op id, is not added twice), and only to
    this run's record on this database."""
    saver = local.saver()
    for thread, n in (("t1", 5), ("t2", 2), ("t3", 4), ("t4", 3)):
        put_chain(saver, thread, n, writes=2)
    saver.execute([begin("r", A), begin("r", B), begin("s", A)])
    want = {"threads_compacted": 0, "threads_expired": 0, "checkpoints_deleted": 0,
            "writes_deleted": 0, "bytes_freed": 0, "batches": 0}
    for threads, keep, expired in ((["t1", "t2"], 2, False), (["t3"], 3, False),
                                   (["t4"], 0, True)):
        rows = batch(saver, threads, keep, expired, "r", A, threads[-1])
        want["batches"] += 1
        for _, _, gone, writes, freed in rows:
            want["checkpoints_deleted"] += gone
            want["writes_deleted"] += writes
            want["bytes_freed"] += freed
            if expired:
                want["threads_expired"] += 1
            elif gone:
                want["threads_compacted"] += 1
    assert want["threads_compacted"] == 2 and want["threads_expired"] == 1
    assert want["checkpoints_deleted"] == 3 + 1 + 3 and want["bytes_freed"] > 0
    got = runs(saver)
    assert {k: got[("r", A)][k] for k in want} == want
    for other in (("r", B), ("s", A)):  # the same run elsewhere, another run here
        assert {k: got[other][k] for k in want} == dict.fromkeys(want, 0)


def test_the_cursor_of_a_pass_is_kept_per_name_until_cleared(local: Backend) -> None:
    saver = local.saver()
    saver.setup()
    (none,) = saver.execute([admin.cursor_get()])
    assert none.rows == []
    saver.execute([admin.cursor_set("t3", "r1"), admin.cursor_set("x9", "r0", name="other")])
    saver.execute([admin.cursor_set("t5", "r2")])  # a later batch moves it on
    got, other = saver.execute([admin.cursor_get(), admin.cursor_get("other")])
    assert got.columns == ["after", "run_id"]
    assert got.rows == [["t5", "r2"]] and other.rows == [["x9", "r0"]]
    saver.execute([admin.cursor_clear()])
    got, other = saver.execute([admin.cursor_get(), admin.cursor_get("other")])
    assert got.rows == [] and other.rows == [["x9", "r0"]]


def test_a_run_ends_on_one_database_only(local: Backend) -> None:
    saver = local.saver()
    saver.setup()
    saver.execute([begin("r", A), begin("r", B), begin("s", A)])
    saver.execute([admin.run_end("r", A, "done", None, 7)])
    got = runs(saver)
    assert (got[("r", A)]["status"], got[("r", A)]["threads_scanned"]) == ("done", 7)
    assert got[("r", A)]["ended_at"] is not None
    for other in (("r", B), ("s", A)):
        assert (got[other]["status"], got[other]["threads_scanned"]) == ("running", 0)
        assert got[other]["ended_at"] is None


def test_the_history_lists_the_newest_first_then_by_run_and_database(local: Backend) -> None:
    """Records begun at the same moment (one run over several databases) come in a fixed
    order; --limit keeps the newest."""
    saver = local.saver()
    saver.setup()
    rows = [("r2", B, "2024-01-02"), ("r1", B, "2024-01-02"), ("r2", A, "2024-01-02"),
            ("r0", A, "2024-01-01"), ("r9", A, "2024-01-03")]
    saver.execute([Statement("INSERT INTO d1saver_compaction_runs (run_id, database_id, "
                             "trigger, started_at, status) VALUES (?1, ?2, 'cron', ?3, 'done')",
                             row) for row in rows])
    (result,) = saver.execute([admin.compaction_runs(4)])
    assert [(r[0], r[1]) for r in result.rows] == [("r9", A), ("r1", B), ("r2", A), ("r2", B)]
