"""The gateway answers in D1's REST shapes: /query rows as objects, /raw {columns, rows}, meta per statement.

Plain httpx against the session's gateway (tests/realengine.py) on the real D1 engine. Every test
uses its own table names: the session's databases are shared.
"""

from __future__ import annotations

import pytest

from tests.gateway.client import Gateway, failed, ok

pytestmark = pytest.mark.realengine

# What the local engine's meta holds (D1 also sends served_by_region, served_by_primary, timings).
META_KEYS = {"duration", "changes", "last_row_id", "changed_db", "size_after", "rows_read", "rows_written"}


def test_select(gw: Gateway):
    [entry] = ok(gw.post({"sql": "SELECT ?1 AS n, ?2 AS s, ?3 AS z, 1.5 AS f", "params": [7, "x", None]}))
    assert entry["results"] == [{"n": 7, "s": "x", "z": None, "f": 1.5}]
    assert META_KEYS <= entry["meta"].keys(), entry["meta"]


def test_batch_one_result_and_meta_per_statement(gw: Gateway, table: str):
    for kind in ("query", "raw"):
        result = ok(gw.post({"batch": [
            {"sql": f"CREATE TABLE {table}_{kind} (id INTEGER PRIMARY KEY, v TEXT)"},
            {"sql": f"INSERT INTO {table}_{kind} (v) VALUES (?), (?)", "params": ["a", "b"]},
            {"sql": f"SELECT v FROM {table}_{kind} ORDER BY id"},
        ]}, kind=kind))
        assert len(result) == 3
        assert all(META_KEYS <= r["meta"].keys() for r in result), result
        create, insert, select = (r["meta"] for r in result)
        assert create["changed_db"] is True
        assert insert["changes"] == 2 and insert["last_row_id"] == 2 and insert["rows_written"] >= 2
        assert select["changes"] == 0 and select["rows_read"] == 2 and select["changed_db"] is False
        rows = result[2]["results"]
        assert rows == ([{"v": "a"}, {"v": "b"}] if kind == "query" else {"columns": ["v"], "rows": [["a"], ["b"]]})


def test_raw_shape(gw: Gateway):
    [entry] = ok(gw.post({"sql": "SELECT 1 AS a, 'x' AS b, NULL AS c"}, kind="raw"))
    assert entry["results"] == {"columns": ["a", "b", "c"], "rows": [[1, "x", None]]}
    assert META_KEYS <= entry["meta"].keys()


def test_raw_columns_come_from_the_rows(gw: Gateway):
    """Documented limits of rows as objects (worker/d1.js): what d1saver's SQL avoids."""
    # No rows: no columns.
    result = ok(gw.post({"batch": [{"sql": "SELECT 1 AS one"}, {"sql": "SELECT 2 AS two WHERE 0"}]}, kind="raw"))
    assert [r["results"] for r in result] == [{"columns": ["one"], "rows": [[1]]}, {"columns": [], "rows": []}]
    # Duplicate names collapse into one column holding the last value, at the first's place.
    [entry] = ok(gw.post({"sql": "SELECT 1 AS a, 'x' AS b, 2 AS a"}, kind="raw"))
    assert entry["results"] == {"columns": ["a", "b"], "rows": [[2, "x"]]}
    # Integer-like names come first.
    [entry] = ok(gw.post({"sql": "SELECT 'x' AS b, 7"}, kind="raw"))
    assert entry["results"] == {"columns": ["7", "b"], "rows": [[7, "x"]]}


def test_several_statements_in_one_sql(gw: Gateway, table: str):
    result = ok(gw.post({"sql": f"CREATE TABLE {table} (v TEXT); INSERT INTO {table} VALUES ('a;b');"
                                f" -- trailing comment\nSELECT v FROM {table};"}))
    assert len(result) == 3
    assert result[2]["results"] == [{"v": "a;b"}]
    # A batch entry holding several statements is split the same way.
    result = ok(gw.post({"batch": [{"sql": f"INSERT INTO {table} VALUES ('c'); SELECT count(*) AS n FROM {table}"},
                                   {"sql": "SELECT ?1 AS p", "params": [1]}]}))
    assert [r["results"] for r in result] == [[], [{"n": 2}], [{"p": 1}]]


def test_blob_comes_back_as_array_of_ints(gw: Gateway, table: str):
    [entry] = ok(gw.post({"sql": "SELECT unhex('4142') AS b, typeof(unhex('4142')) AS t"}))
    assert entry["results"] == [{"b": [65, 66], "t": "blob"}]
    # A stored BLOB too, in both formats (params are scalars: a BLOB goes in as unhex(?)).
    ok(gw.post({"batch": [
        {"sql": f"CREATE TABLE {table} (b BLOB)"},
        {"sql": f"INSERT INTO {table} VALUES (x'00ff'), (unhex(?))", "params": ["010203"]},
    ]}))
    [entry] = ok(gw.post({"sql": f"SELECT b, typeof(b) AS t FROM {table} ORDER BY rowid"}, kind="raw"))
    assert entry["results"]["rows"] == [[[0, 255], "blob"], [[1, 2, 3], "blob"]]


def test_booleans_bind_as_numbers(gw: Gateway):
    # 1 and 0, as the binding's bind() and the local D1 make them; numbers bind as REAL.
    assert gw.rows("SELECT ?1 AS t, ?2 AS f, typeof(?1) AS k", True, False) == [{"t": 1, "f": 0, "k": "real"}]


def test_sql_errors_use_d1s_wording(gw: Gateway):
    message = failed(gw.post({"sql": "SELECT sqlite_version()"}), 400, 7500)
    assert message == "D1_ERROR: not authorized to use function: sqlite_version at offset 7: SQLITE_ERROR"
