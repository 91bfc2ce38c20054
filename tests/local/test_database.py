"""One local database alone: a request is one transaction, results and meta shaped as D1's, SQLite
errors worded as D1's."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from d1saver.local.database import Database
from d1saver.local.envelope import ApiError


@pytest.fixture
def db() -> Iterator[Database]:
    database = Database(":memory:")
    yield database
    database.close()


def test_results_and_meta(db: Database) -> None:
    created, inserted = db.run([("CREATE TABLE t (id INTEGER PRIMARY KEY, v)", [], True),
                                ("INSERT INTO t (v) VALUES (?), (?)", ["a", 2], True)], raw=False)
    assert created["meta"]["changed_db"] is True and created["meta"]["changes"] == 0
    assert inserted["meta"]["rows_written"] == 2 and inserted["meta"]["last_row_id"] == 2
    [raw] = db.run([("SELECT id, v FROM t ORDER BY id", [], True)], raw=True)
    assert raw["results"] == {"columns": ["id", "v"], "rows": [[1, "a"], [2, 2]]}
    [rows] = db.run([("SELECT v FROM t WHERE id = ?", [1], True)], raw=False)
    assert rows["results"] == [{"v": "a"}] and rows["meta"]["changed_db"] is False


def test_a_failure_rolls_back_every_statement(db: Database) -> None:
    db.run([("CREATE TABLE t (id INTEGER PRIMARY KEY)", [], True)], raw=False)
    with pytest.raises(ApiError) as err:
        db.run([("INSERT INTO t VALUES (1)", [], True), ("CREATE TABLE u (x)", [], True),
                ("INSERT INTO t VALUES (1)", [], True)], raw=False)
    assert (err.value.status, err.value.code) == (400, 7500)
    assert err.value.message.endswith("SQLITE_CONSTRAINT (extended: SQLITE_CONSTRAINT_PRIMARYKEY)")
    [count] = db.run([("SELECT count(*) AS n FROM t", [], True),], raw=False)
    assert count["results"] == [{"n": 0}]
    assert "no such table: u" in _refusal(db, "SELECT * FROM u")


def test_silent_statements_run_without_answering(db: Database) -> None:
    results = db.run([("CREATE TABLE t (x)", [], False), ("INSERT INTO t VALUES (?)", [7], True)], raw=False)
    assert len(results) == 1 and results[0]["meta"]["changes"] == 1


def _refusal(db: Database, sql: str) -> str:
    with pytest.raises(ApiError) as err:
        db.run([(sql, [], True)], raw=False)
    return err.value.message


def test_d1_authorizer(db: Database) -> None:
    assert "state.storage.transaction()" in _refusal(db, "BEGIN")
    assert "not authorized" in _refusal(db, "SELECT sqlite_version()")
    assert "not authorized" in _refusal(db, "PRAGMA journal_mode")
    assert "not authorized" in _refusal(db, "ATTACH ':memory:' AS other")
    assert db.run([("PRAGMA table_list", [], True)], raw=False)[0]["results"]
