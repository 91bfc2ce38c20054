"""What D1's API refuses, the gateway refuses, with D1's error envelope and nothing run."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.gateway.client import MAX_BODY_BYTES, Gateway, failed, ok

pytestmark = pytest.mark.realengine


@pytest.mark.parametrize("path", [
    "", "/", "/ping", "/accounts/local/d1/database", "/accounts/local/d1/database/{db}",
    "/accounts/local/d1/database/{db}/", "/accounts/local/d1/database/{db}/nope",
    "/accounts/local/d1/database/{db}/query/more", "/accounts/local/d1/database/{db}/export",
    "/accounts//d1/database/{db}/query", "/accounts/local/d1/databases/{db}/query",
    "/accounts/local/d1/database/{db}/QUERY",
])
def test_bad_path_is_404(gw: Gateway, path: str):
    url = gw.real.base_url + path.format(db=gw.real.database_id)
    response = gw.client.post(url, json={"sql": "SELECT 1"}, headers={"Authorization": f"Bearer {gw.real.api_token}"})
    assert "Could not route to" in failed(response, 404, 7003)


def test_trailing_slash_is_routed(gw: Gateway):
    url = gw.url() + "/"
    response = gw.client.post(url, json={"sql": "SELECT 1 AS one"}, headers={"Authorization": f"Bearer {gw.real.api_token}"})
    assert ok(response)[0]["results"] == [{"one": 1}]


@pytest.mark.parametrize("method", ["GET", "PUT", "PATCH", "DELETE", "OPTIONS"])
def test_non_post_is_405(gw: Gateway, method: str):
    response = gw.client.request(method, gw.url(), headers={"Authorization": f"Bearer {gw.real.api_token}"})
    assert failed(response, 405, 7001) == "Method not allowed"
    assert response.headers["allow"] == "POST"


@pytest.fixture
def untouched(gw: Gateway, table: str) -> Iterator[str]:
    """A table with one row that must still hold exactly that row after the refused request."""
    ok(gw.post({"batch": [{"sql": f"CREATE TABLE {table} (v TEXT)"},
                          {"sql": f"INSERT INTO {table} VALUES ('kept')"}]}))
    yield table
    assert gw.rows(f"SELECT v FROM {table}") == [{"v": "kept"}]


MALFORMED = {
    "not JSON": b"{not json",
    "empty body": b"",
    "JSON array": b'[{"sql": "SELECT 1"}]',
    "JSON string": b'"SELECT 1"',
    "JSON null": b"null",
    "missing sql": b'{"params": [1]}',
    "sql not a string": b'{"sql": 1}',
    "sql null": b'{"sql": null}',
    "params not an array": b'{"sql": "SELECT ?", "params": "1"}',
    "params an object": b'{"sql": "SELECT ?", "params": {"1": 1}}',
    "param an object": b'{"sql": "SELECT ?", "params": [{"an": "object"}]}',
    "param an array": b'{"sql": "SELECT ?", "params": [[65, 66]]}',
    "param infinite": b'{"sql": "SELECT ?", "params": [1e999]}',
    "batch empty": b'{"batch": []}',
    "batch not an array": b'{"batch": {"sql": "SELECT 1"}}',
    "batch entry without sql": b'{"batch": [{"sql": "SELECT 1"}, {"params": []}]}',
    "batch entry not an object": b'{"batch": [{"sql": "SELECT 1"}, "SELECT 2"]}',
    "not UTF-8": b'{"sql": "SELECT \'\xff\'"}',
}


@pytest.mark.parametrize("body", MALFORMED.values(), ids=MALFORMED.keys())
def test_malformed_body_is_400(gw: Gateway, untouched: str, body: bytes):
    # Each carries a write first where it can: a refused body runs nothing at all.
    body = body.replace(b'"SELECT 1"', f'"DELETE FROM {untouched}"'.encode())
    for kind in ("query", "raw"):
        message = failed(gw.post(None, kind=kind, content=body), 400, 7400)
        assert message.startswith("Malformed request body: ")


def test_sql_errors_are_400_7500_and_run_nothing(gw: Gateway, untouched: str):
    message = failed(gw.post({"sql": f"DELETE FROM {untouched}; SELECT * FROM no_such_table_here"}), 400, 7500)
    assert message == "D1_ERROR: no such table: no_such_table_here: SQLITE_ERROR"
    # D1 itself refuses statements over 100,000 bytes of SQL, and more than 100 bound parameters.
    sql = f"DELETE FROM {untouched} WHERE v = '" + "x" * 100_000 + "'"
    assert failed(gw.post({"sql": sql}), 400, 7500) == "D1_ERROR: statement too long: SQLITE_TOOBIG"
    sql = f"DELETE FROM {untouched} WHERE v IN (" + ", ".join("?" * 101) + ")"
    assert "too many SQL variables" in failed(gw.post({"sql": sql, "params": list(range(101))}), 400, 7500)


def test_body_over_the_cap_is_413(gw: Gateway, untouched: str):
    statement = f'{{"sql": "DELETE FROM {untouched}"}}'.encode()
    body = statement + b" " * (MAX_BODY_BYTES + 1 - len(statement))
    assert len(body) == MAX_BODY_BYTES + 1
    # With Content-Length (refused before the body is read), and chunked (counted while read).
    for content in (body, iter([body[:1_000_000], body[1_000_000:]])):
        message = failed(gw.post(None, content=content), 413, 7400)
        assert message == f"Request body larger than the gateway's limit of {MAX_BODY_BYTES} bytes"


def test_body_at_the_cap_is_served(gw: Gateway, table: str):
    ok(gw.post({"sql": f"CREATE TABLE {table} (v TEXT)"}))
    statement = f'{{"sql": "INSERT INTO {table} VALUES (?)", "params": ["x"]}}'.encode()
    body = statement + b" " * (MAX_BODY_BYTES - len(statement))
    for content in (body, iter([body[:1_000_000], body[1_000_000:]])):
        ok(gw.post(None, content=content))
    assert gw.rows(f"SELECT count(*) AS n FROM {table}") == [{"n": 2}]
