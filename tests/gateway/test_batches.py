"""Batches are atomic through the gateway: a failing statement rolls back the ones before it."""

from __future__ import annotations

import pytest

from tests.gateway.client import Gateway, failed, ok

pytestmark = pytest.mark.realengine


@pytest.mark.parametrize("kind", ["query", "raw"])
def test_failing_second_statement_rolls_back_the_first(gw: Gateway, table: str, kind: str):
    ok(gw.post({"batch": [{"sql": f"CREATE TABLE {table} (k INTEGER PRIMARY KEY, v TEXT)"},
                          {"sql": f"INSERT INTO {table} VALUES (1, 'before')"}]}))
    message = failed(gw.post({"batch": [
        {"sql": f"UPDATE {table} SET v = ? WHERE k = 1", "params": ["changed"]},
        {"sql": f"INSERT INTO {table} VALUES (1, 'duplicate key')"},
    ]}, kind=kind), 400, 7500)
    assert message.startswith("D1_ERROR: UNIQUE constraint failed"), message
    assert gw.rows(f"SELECT k, v FROM {table}") == [{"k": 1, "v": "before"}]


def test_rollback_covers_ddl_and_every_earlier_statement(gw: Gateway, table: str):
    ok(gw.post({"sql": f"CREATE TABLE {table} (v TEXT)"}))
    failed(gw.post({"batch": [
        {"sql": f"INSERT INTO {table} VALUES ('one')"},
        {"sql": f"CREATE TABLE {table}_2 (v TEXT)"},
        {"sql": f"INSERT INTO {table} VALUES ('two')"},
        {"sql": "SELECT * FROM no_such_table_here"},
    ]}), 400, 7500)
    assert gw.rows(f"SELECT count(*) AS n FROM {table}") == [{"n": 0}]
    assert gw.rows("SELECT count(*) AS n FROM sqlite_master WHERE name = ?", f"{table}_2") == [{"n": 0}]


def test_several_statements_in_one_sql_are_atomic_too(gw: Gateway, table: str):
    ok(gw.post({"sql": f"CREATE TABLE {table} (v TEXT)"}))
    failed(gw.post({"sql": f"INSERT INTO {table} VALUES ('x'); INSERT INTO nowhere VALUES (1)"}), 400, 7500)
    assert gw.rows(f"SELECT count(*) AS n FROM {table}") == [{"n": 0}]


def test_a_batch_on_one_database_leaves_the_others_alone(gw: Gateway, table: str):
    for binding in ("DB_A", "DB_B"):
        ok(gw.post({"sql": f"CREATE TABLE {table} (v TEXT)"}, binding))
    ok(gw.post({"batch": [{"sql": f"INSERT INTO {table} VALUES ('a')"}] * 3}, "DB_A"))
    failed(gw.post({"batch": [{"sql": f"INSERT INTO {table} VALUES ('b')"},
                              {"sql": "SELECT * FROM no_such_table_here"}]}, "DB_B"), 400, 7500)
    assert gw.rows(f"SELECT count(*) AS n FROM {table}", binding="DB_A") == [{"n": 3}]
    assert gw.rows(f"SELECT count(*) AS n FROM {table}", binding="DB_B") == [{"n": 0}]


def test_a_successful_batch_commits_all(gw: Gateway, table: str):
    result = ok(gw.post({"batch": [
        {"sql": f"CREATE TABLE {table} (v TEXT)"},
        {"sql": f"INSERT INTO {table} VALUES (?), (?)", "params": ["a", "b"]},
        {"sql": f"UPDATE {table} SET v = upper(v) WHERE v = ?", "params": ["a"]},
    ]}))
    assert [r["meta"]["changes"] for r in result] == [0, 2, 1]
    assert gw.rows(f"SELECT v FROM {table} ORDER BY v") == [{"v": "A"}, {"v": "b"}]
