"""The database id in the path picks the binding: each database is its own, and ids not mapped are 404."""

from __future__ import annotations

import pytest

from tests.gateway.client import Gateway, failed, ok

pytestmark = pytest.mark.realengine


def test_four_databases_are_served(gw: Gateway):
    assert list(gw.real.databases) == ["DB_A", "DB_B", "DB_C", "DB_D"]
    assert len(set(gw.real.databases.values())) == 4
    for binding in gw.real.databases:
        assert gw.rows("SELECT 1 AS one", binding=binding) == [{"one": 1}]


def test_a_table_made_through_one_database_is_not_in_another(gw: Gateway, table: str):
    ok(gw.post({"sql": f"CREATE TABLE {table} (v TEXT)"}, "DB_A"))
    assert gw.rows(f"SELECT count(*) AS n FROM {table}", binding="DB_A") == [{"n": 0}]
    for binding in ("DB_B", "DB_C", "DB_D"):
        message = failed(gw.post({"sql": f"SELECT count(*) AS n FROM {table}"}, binding), 400, 7500)
        assert message == f"D1_ERROR: no such table: {table}: SQLITE_ERROR"
    # /raw routes the same way.
    failed(gw.post({"sql": f"SELECT * FROM {table}"}, "DB_B", "raw"), 400, 7500)


def test_same_table_name_in_two_databases_holds_separate_rows(gw: Gateway, table: str):
    for binding, values in (("DB_A", ["a1", "a2"]), ("DB_B", ["b1"])):
        ok(gw.post({"batch": [
            {"sql": f"CREATE TABLE {table} (v TEXT)"},
            {"sql": f"INSERT INTO {table} VALUES " + ", ".join("(?)" for _ in values), "params": values},
        ]}, binding))
    ok(gw.post({"sql": f"DELETE FROM {table} WHERE v = ?", "params": ["a1"]}, "DB_B"))  # no a1 in B
    assert gw.rows(f"SELECT v FROM {table} ORDER BY v", binding="DB_A") == [{"v": "a1"}, {"v": "a2"}]
    assert gw.rows(f"SELECT v FROM {table} ORDER BY v", binding="DB_B") == [{"v": "b1"}]


def test_unknown_database_id_is_404(gw: Gateway):
    for db in ("00000000-0000-0000-0000-00000000000e", "DB_A", "constructor", "__proto__", "toString"):
        url = gw.real.url(db)
        response = gw.client.post(url, json={"sql": "SELECT 1"},
                                  headers={"Authorization": f"Bearer {gw.real.api_token}"})
        assert failed(response, 404, 7404) == f"The database {db} could not be found"


def test_any_account_id_reaches_the_database(gw: Gateway):
    # The gateway has no account: `:account` is not checked (docs/REAL_ENGINE.md).
    url = gw.url("DB_B").replace("/accounts/local/", "/accounts/0123456789abcdef/")
    response = gw.client.post(url, json={"sql": "SELECT 2 AS two"},
                              headers={"Authorization": f"Bearer {gw.real.api_token}"})
    assert ok(response)[0]["results"] == [{"two": 2}]
