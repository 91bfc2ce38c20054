"""The dev Worker (worker/index.js) on the real D1 engine speaks D1's REST API shapes.

Plain httpx against the ``wrangler_d1`` fixture (tests/realengine.py). Every test uses its own
table names: all database ids share one database for the whole session.
"""

from __future__ import annotations

import uuid

import httpx
import pytest

pytestmark = pytest.mark.realengine


@pytest.fixture
def d1(wrangler_d1):
    """POST a body to /query or /raw of a fresh database id; returns the httpx.Response."""
    db_id = wrangler_d1.new_database_id()
    headers = {"Authorization": f"Bearer {wrangler_d1.api_token}"}
    with httpx.Client(timeout=30.0, headers=headers) as client:
        def post(body, kind="query", **kwargs):
            return client.post(wrangler_d1.url(db_id, kind), json=body, **kwargs)
        yield post


@pytest.fixture
def table():
    return "t_" + uuid.uuid4().hex[:12]


def ok(response: httpx.Response) -> list[dict]:
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["success"] is True
    assert body["errors"] == [] and body["messages"] == []
    for entry in body["result"]:
        assert entry["success"] is True
        assert isinstance(entry["meta"], dict)
    return body["result"]


def failed(response: httpx.Response, status: int, code: int) -> str:
    assert response.status_code == status, response.text
    body = response.json()
    assert body["success"] is False and body["result"] is None and body["messages"] == []
    assert len(body["errors"]) == 1 and body["errors"][0]["code"] == code, body
    return body["errors"][0]["message"]


def test_select(d1):
    [entry] = ok(d1({"sql": "SELECT ?1 AS n, ?2 AS s, ?3 AS z, 1.5 AS f", "params": [7, "x", None]}))
    assert entry["results"] == [{"n": 7, "s": "x", "z": None, "f": 1.5}]
    meta = entry["meta"]
    for key in ("duration", "changes", "last_row_id", "changed_db", "size_after", "rows_read", "rows_written"):
        assert key in meta, meta


def test_batch_one_result_per_statement(d1, table):
    result = ok(d1({"batch": [
        {"sql": f"CREATE TABLE {table} (id INTEGER PRIMARY KEY, v TEXT)"},
        {"sql": f"INSERT INTO {table} (v) VALUES (?), (?)", "params": ["a", "b"]},
        {"sql": f"SELECT v FROM {table} ORDER BY id"},
    ]}))
    assert len(result) == 3
    assert result[1]["meta"]["changes"] == 2 and result[1]["meta"]["rows_written"] >= 2
    assert result[2]["results"] == [{"v": "a"}, {"v": "b"}]


def test_failing_batch_rolls_back(d1, table):
    ok(d1({"sql": f"CREATE TABLE {table} (v TEXT)"}))
    message = failed(d1({"batch": [
        {"sql": f"INSERT INTO {table} VALUES ('kept?')"},
        {"sql": f"CREATE TABLE {table}_2 (v TEXT)"},
        {"sql": "SELECT * FROM no_such_table_here"},
    ]}), 400, 7500)
    assert message.startswith("D1_ERROR: ") and "no such table: no_such_table_here" in message
    [entry] = ok(d1({"sql": f"SELECT count(*) AS n FROM {table}"}))
    assert entry["results"] == [{"n": 0}]
    [entry] = ok(d1({"sql": "SELECT count(*) AS n FROM sqlite_master WHERE name = ?", "params": [f"{table}_2"]}))
    assert entry["results"] == [{"n": 0}]  # DDL rolled back too


def test_several_statements_in_one_sql(d1, table):
    result = ok(d1({"sql": f"CREATE TABLE {table} (v TEXT); INSERT INTO {table} VALUES ('a;b');"
                           f" -- trailing comment\nSELECT v FROM {table};"}))
    assert len(result) == 3
    assert result[2]["results"] == [{"v": "a;b"}]
    # A batch entry holding several statements is split the same way.
    result = ok(d1({"batch": [{"sql": f"INSERT INTO {table} VALUES ('c'); SELECT count(*) AS n FROM {table}"},
                              {"sql": "SELECT ?1 AS p", "params": [1]}]}))
    assert [r["results"] for r in result] == [[], [{"n": 2}], [{"p": 1}]]


def test_auth_failure(wrangler_d1, d1):
    url = wrangler_d1.url(wrangler_d1.new_database_id())
    for headers in ({}, {"Authorization": "Bearer wrong"},
                    {"Authorization": f"Basic {wrangler_d1.api_token}"}):
        response = httpx.post(url, json={"sql": "SELECT 1"}, headers=headers)
        assert failed(response, 401, 10000) == "Authentication error"


def test_raw_shape(d1):
    [entry] = ok(d1({"sql": "SELECT 1 AS a, 'x' AS b, 2 AS a"}, kind="raw"))
    assert entry["results"] == {"columns": ["a", "b", "a"], "rows": [[1, "x", 2]]}
    assert "rows_read" in entry["meta"]
    result = ok(d1({"batch": [{"sql": "SELECT 1 AS one"}, {"sql": "SELECT 2 AS two WHERE 0"}]}, kind="raw"))
    assert [r["results"] for r in result] == [
        {"columns": ["one"], "rows": [[1]]},
        {"columns": ["two"], "rows": []},
    ]


def test_blob_comes_back_as_array_of_ints(d1, table):
    [entry] = ok(d1({"sql": "SELECT unhex('4142') AS b, typeof(unhex('4142')) AS t"}))
    assert entry["results"] == [{"b": [65, 66], "t": "blob"}]
    # A stored BLOB too, in both formats (params are scalars: a BLOB goes in as unhex(?)).
    ok(d1({"batch": [
        {"sql": f"CREATE TABLE {table} (b BLOB)"},
        {"sql": f"INSERT INTO {table} VALUES (x'00ff'), (unhex(?))", "params": ["010203"]},
    ]}))
    [entry] = ok(d1({"sql": f"SELECT b, typeof(b) AS t FROM {table} ORDER BY rowid"}, kind="raw"))
    assert entry["results"]["rows"] == [[[0, 255], "blob"], [[1, 2, 3], "blob"]]


def test_sqlite_version_refused(d1):
    message = failed(d1({"sql": "SELECT sqlite_version()"}), 400, 7500)
    assert "not authorized to use function: sqlite_version" in message


def test_malformed_body_and_unknown_path(wrangler_d1, d1):
    assert "Malformed" in failed(d1(None, content=b"{not json"), 400, 7400)
    failed(d1({"params": [1]}), 400, 7400)
    failed(d1({"batch": []}), 400, 7400)
    failed(d1({"sql": "SELECT ?", "params": [{"an": "object"}]}), 400, 7400)
    headers = {"Authorization": f"Bearer {wrangler_d1.api_token}"}
    response = httpx.post(f"{wrangler_d1.base_url}/accounts/local/d1/database/x/nope",
                          json={"sql": "SELECT 1"}, headers=headers)
    failed(response, 404, 7003)
