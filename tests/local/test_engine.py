"""The local D1 answers D1's REST API like D1 does: shapes, limits, SQL rules, faults, persistence."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from d1saver.local import FaultPlan, LocalD1, LocalD1Transport, make_server
from d1saver.local.engine import split_statements
from tests.servers import serving

TOKEN = "test-token"
BASE = "https://api.cloudflare.com/client/v4/accounts/acc/d1/database/db1"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def engine() -> Iterator[LocalD1]:
    with LocalD1(api_token=TOKEN) as eng:
        yield eng


@pytest.fixture
def client(engine: LocalD1) -> Iterator[httpx.Client]:
    with httpx.Client(transport=LocalD1Transport(engine), headers=AUTH) as c:
        yield c


def query(client: httpx.Client, sql: str, params: list[Any] | None = None, *, raw: bool = False) -> httpx.Response:
    body: dict[str, Any] = {"sql": sql}
    if params is not None:
        body["params"] = params
    return client.post(f"{BASE}/{'raw' if raw else 'query'}", json=body)


def rows(response: httpx.Response, index: int = 0) -> list[dict[str, Any]]:
    assert response.status_code == 200, response.text
    return response.json()["result"][index]["results"]


def error(response: httpx.Response) -> tuple[int, int, str]:
    payload = response.json()
    assert payload["success"] is False and payload["result"] is None
    return response.status_code, payload["errors"][0]["code"], payload["errors"][0]["message"]


def test_single_statement_and_envelope(client: httpx.Client) -> None:
    response = query(client, "SELECT 1 AS one, 'x' AS s, 2.5 AS f, NULL AS n")
    payload = response.json()
    assert payload["success"] is True and payload["errors"] == [] and payload["messages"] == []
    entry = payload["result"][0]
    assert entry["success"] is True
    assert entry["results"] == [{"one": 1, "s": "x", "f": 2.5, "n": None}]
    meta = entry["meta"]
    assert meta["served_by_region"] == "local" and meta["served_by_primary"] is True
    assert meta["changes"] == 0 and meta["changed_db"] is False and meta["rows_read"] == 1
    assert response.headers["X-RateLimit-Limit"] == "1200"


def test_params_and_meta(client: httpx.Client) -> None:
    query(client, "CREATE TABLE t (id INTEGER PRIMARY KEY, name TEXT, score REAL)")
    response = query(client, "INSERT INTO t (name, score) VALUES (?, ?), (?, ?)", ["a", 1.5, "b", True])
    meta = response.json()["result"][0]["meta"]
    assert meta["changes"] == 2 and meta["rows_written"] == 2 and meta["changed_db"] is True
    assert meta["last_row_id"] == 2 and meta["size_after"] > 0
    assert rows(query(client, "SELECT name, score FROM t WHERE name = ?", ["b"])) == [{"name": "b", "score": 1.0}]


def test_raw_shape(client: httpx.Client) -> None:
    result = rows(query(client, "SELECT 1 AS a, 'b' AS b UNION ALL SELECT 2, 'c'", raw=True))
    assert result == {"columns": ["a", "b"], "rows": [[1, "b"], [2, "c"]]}


def test_batch_has_one_result_per_statement(client: httpx.Client) -> None:
    body = {"batch": [{"sql": "CREATE TABLE b (x)"}, {"sql": "INSERT INTO b VALUES (?)", "params": [1]},
                      {"sql": "SELECT x FROM b"}]}  # fmt: skip
    result = client.post(f"{BASE}/query", json=body).json()["result"]
    assert len(result) == 3 and result[2]["results"] == [{"x": 1}]


def test_batch_is_atomic_including_ddl(client: httpx.Client) -> None:
    query(client, "CREATE TABLE kept (x)")
    body = {"batch": [{"sql": "CREATE TABLE gone (x)"}, {"sql": "INSERT INTO kept VALUES (1)"},
                      {"sql": "INSERT INTO missing VALUES (1)"}]}  # fmt: skip
    status, code, message = error(client.post(f"{BASE}/query", json=body))
    assert (status, code) == (400, 7500)
    assert message == "D1_ERROR: no such table: missing: SQLITE_ERROR"
    assert rows(query(client, "SELECT count(*) AS n FROM kept")) == [{"n": 0}]
    assert rows(query(client, "SELECT name FROM sqlite_master WHERE name = 'gone'")) == []


def test_multi_statement_sql(client: httpx.Client) -> None:
    sql = """
        -- a comment; with a semicolon
        CREATE TABLE m (x TEXT);
        INSERT INTO m VALUES ('a;b');  /* another; comment */
        CREATE TRIGGER m_trg AFTER INSERT ON m BEGIN SELECT 1; END;
        SELECT x FROM m;
    """
    response = query(client, sql)
    assert len(response.json()["result"]) == 4
    assert rows(response, 3) == [{"x": "a;b"}]
    status, code, message = error(query(client, "SELECT ?; SELECT ?", [1, 2]))
    assert (status, code) == (400, 7500) and message.startswith("D1_ERROR:")


def test_failing_multi_statement_rolls_back(client: httpx.Client) -> None:
    error(query(client, "CREATE TABLE r (x); INSERT INTO r VALUES (1); SELECT * FROM nope"))
    assert rows(query(client, "SELECT name FROM sqlite_master WHERE name = 'r'")) == []


def test_split_statements() -> None:
    assert split_statements("SELECT 1; ; -- c\n SELECT ';' ; /* x; */") == ["SELECT 1;", " -- c\n SELECT ';' ;"]
    assert split_statements("SELECT 1") == ["SELECT 1"]
    assert split_statements("  -- only a comment") == []


def test_limits(client: httpx.Client) -> None:
    sql = "SELECT " + ", ".join("?" for _ in range(101))
    status, code, message = error(query(client, sql, list(range(101))))
    assert (status, code) == (400, 7500) and "too many SQL variables" in message
    assert rows(query(client, "SELECT " + ", ".join("?" for _ in range(100)), list(range(100))))

    long_sql = "SELECT '" + "x" * 120_000 + "'"
    status, code, message = error(query(client, long_sql))
    assert "statement too long" in message and message.endswith("SQLITE_TOOBIG")

    query(client, "CREATE TABLE big (v TEXT)")
    status, code, message = error(query(client, "INSERT INTO big VALUES (?)", ["x" * 2_100_000]))
    assert (status, code) == (400, 7500) and "string or blob too big" in message and "SQLITE_TOOBIG" in message
    status, code, message = error(query(client, "SELECT zeroblob(2100000) AS z"))
    assert "SQLITE_TOOBIG" in message
    assert query(client, "INSERT INTO big VALUES (?)", ["x" * 1_900_000]).status_code == 200


def test_refused_statements(client: httpx.Client) -> None:
    for sql in ("BEGIN", "BEGIN TRANSACTION", "COMMIT", "ROLLBACK", "SAVEPOINT s", "RELEASE s"):
        status, code, message = error(query(client, sql))
        assert (status, code) == (400, 7500) and "To execute a transaction" in message, sql
    assert error(query(client, "ATTACH 'x.db' AS x"))[2] == "D1_ERROR: not authorized: SQLITE_AUTH"
    assert "not authorized to use function" in error(query(client, "SELECT sqlite_version()"))[2]
    assert "not authorized" in error(query(client, "PRAGMA journal_mode = DELETE"))[2]
    assert "no such function: base64" in error(query(client, "SELECT base64('a')"))[2]
    # Our own transactions still work after refusals.
    assert rows(query(client, "SELECT 1 AS ok")) == [{"ok": 1}]


def test_constraint_error_code(client: httpx.Client) -> None:
    query(client, "CREATE TABLE u (id INTEGER PRIMARY KEY)")
    query(client, "INSERT INTO u VALUES (1)")
    message = error(query(client, "INSERT INTO u VALUES (1)"))[2]
    assert message == (
        "D1_ERROR: UNIQUE constraint failed: u.id: SQLITE_CONSTRAINT (extended: SQLITE_CONSTRAINT_PRIMARYKEY)"
    )


def test_sql_features(client: httpx.Client) -> None:
    assert rows(query(client, "SELECT unhex('4142') AS b, hex('AB') AS h")) == [{"b": [65, 66], "h": "4142"}]
    assert rows(query(client, "SELECT json_extract(?, '$.a.b') AS v", ['{"a": {"b": 7}}'])) == [{"v": 7}]
    each = rows(query(client, "SELECT value FROM json_each(?) ORDER BY value", ["[3, 1, 2]"]))
    assert [r["value"] for r in each] == [1, 2, 3]
    assert rows(query(client, "SELECT json_group_array(x) AS a FROM (SELECT 1 AS x UNION ALL SELECT 2)")) == [
        {"a": "[1,2]"}
    ]
    window = "SELECT x, ROW_NUMBER() OVER (ORDER BY x DESC) AS rn FROM (SELECT 1 AS x UNION ALL SELECT 2)"
    ranked = rows(query(client, window))
    assert ranked == [{"x": 2, "rn": 1}, {"x": 1, "rn": 2}]
    recursive = "WITH RECURSIVE c(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM c WHERE n < 5) SELECT sum(n) AS s FROM c"
    assert rows(query(client, recursive)) == [{"s": 15}]
    assert rows(query(client, "PRAGMA table_list"))
    unhexed = rows(query(client, "SELECT unhex('zz') AS a, unhex('41-42', '-') AS b, unhex('4-1', '-') AS c"))
    assert unhexed == [{"a": None, "b": [65, 66], "c": None}]


def test_upsert_and_returning(client: httpx.Client) -> None:
    query(client, "CREATE TABLE kv (k TEXT PRIMARY KEY, v INTEGER)")
    upsert = "INSERT INTO kv VALUES (?, ?) ON CONFLICT (k) DO UPDATE SET v = v + excluded.v RETURNING k, v"
    assert rows(query(client, upsert, ["a", 1])) == [{"k": "a", "v": 1}]
    response = query(client, upsert, ["a", 5])
    assert rows(response) == [{"k": "a", "v": 6}]
    assert response.json()["result"][0]["meta"]["changes"] == 1
    query(client, "PRAGMA table_info(kv)")


def test_auth_failures(engine: LocalD1) -> None:
    with httpx.Client(transport=LocalD1Transport(engine)) as c:
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "Basic x"}):
            response = c.post(f"{BASE}/query", json={"sql": "SELECT 1"}, headers=headers)
            assert error(response) == (401, 10000, "Authentication error")
            assert "wrong" not in response.text
    with httpx.Client(transport=LocalD1Transport(LocalD1())) as open_client:
        ok = open_client.post(f"{BASE}/query", json={"sql": "SELECT 1"}, headers={"Authorization": "Bearer any"})
        assert ok.status_code == 200


def test_bad_requests(client: httpx.Client) -> None:
    assert error(client.post(f"{BASE}/query", content=b"{not json"))[:2] == (400, 7400)
    assert error(client.post(f"{BASE}/query", json=[1]))[:2] == (400, 7400)
    assert error(client.post(f"{BASE}/query", json={"sql": "SELECT ?", "params": [{"a": 1}]}))[:2] == (400, 7400)
    assert error(client.post(f"{BASE}/query", json={"batch": []}))[:2] == (400, 7400)
    assert error(client.post(f"{BASE}/nope", json={"sql": "SELECT 1"}))[:2] == (404, 7003)
    assert error(client.get(f"{BASE}/query"))[0] == 405
    assert error(client.post(f"{BASE.replace('db1', '..%2Fx')}/query", json={"sql": "SELECT 1"}))[0] == 404


def test_file_backed_persistence(tmp_path: Any) -> None:
    with LocalD1(tmp_path / "d1") as first, httpx.Client(transport=LocalD1Transport(first), headers=AUTH) as c:
        query(c, "CREATE TABLE p (x); INSERT INTO p VALUES (42)")
    assert (tmp_path / "d1" / "db1.sqlite").exists()
    with LocalD1(tmp_path / "d1") as second, httpx.Client(transport=LocalD1Transport(second), headers=AUTH) as c:
        assert rows(query(c, "SELECT x FROM p")) == [{"x": 42}]


def test_databases_are_separate(client: httpx.Client) -> None:
    query(client, "CREATE TABLE only_here (x)")
    other = client.post(BASE.replace("db1", "db2") + "/query", json={"sql": "SELECT * FROM only_here"})
    assert "no such table" in error(other)[2]


def test_stats(engine: LocalD1, client: httpx.Client) -> None:
    engine.stats.reset()
    query(client, "CREATE TABLE s (x); INSERT INTO s VALUES (1), (2)")
    snap = engine.stats.snapshot()
    assert snap["requests"] == 1 and snap["statements"] == 2 and snap["rows_written"] == 2
    assert snap["bytes_received"] > 0 and snap["bytes_sent"] > 0


def fault_sequence(plan: FaultPlan, n: int) -> list[str | None]:
    out: list[str | None] = []
    for _ in range(n):
        fault = plan.decide()
        out.append(None if fault is None else f"{fault.kind.value}:{fault.status}")
    return out


def test_fault_plan_is_deterministic() -> None:
    rates = {"rate_429": 0.1, "rate_5xx": 0.1, "rate_drop": 0.1, "rate_lost_response": 0.1}
    first = fault_sequence(FaultPlan(seed=7, **rates), 200)
    assert first == fault_sequence(FaultPlan(seed=7, **rates), 200)
    assert first != fault_sequence(FaultPlan(seed=8, **rates), 200)
    assert {"429:None", "5xx:500", "5xx:503", "drop:None", "lost_response:None"} <= set(first)
    with pytest.raises(ValueError):
        FaultPlan(rate_429=0.7, rate_5xx=0.7)


def test_http_faults() -> None:
    engine = LocalD1(faults=FaultPlan(rate_429=1.0, retry_after_s=2.5))
    with httpx.Client(transport=LocalD1Transport(engine), headers=AUTH) as c:
        response = query(c, "SELECT 1")
        assert error(response)[:2] == (429, 971)
        assert response.headers["Retry-After"] == "3" and response.headers["X-RateLimit-Remaining"] == "0"
    engine.faults = FaultPlan(rate_5xx=1.0)
    with httpx.Client(transport=LocalD1Transport(engine), headers=AUTH) as c:
        status, code, _ = error(query(c, "SELECT 1"))
        assert status in (500, 503) and code == 7500
    assert engine.faults.counts["5xx"] == 1


def test_drop_does_not_execute_but_lost_response_commits() -> None:
    engine = LocalD1()
    with httpx.Client(transport=LocalD1Transport(engine), headers=AUTH) as c:
        query(c, "CREATE TABLE f (x)")
        engine.faults = FaultPlan(rate_drop=1.0)
        with pytest.raises(httpx.ReadError):
            query(c, "INSERT INTO f VALUES ('dropped')")
        engine.faults = FaultPlan(rate_lost_response=1.0)
        with pytest.raises(httpx.ReadError):
            query(c, "INSERT INTO f VALUES ('lost')")
        assert engine.faults.counts["lost_response"] == 1
        engine.faults = None
        assert rows(query(c, "SELECT x FROM f")) == [{"x": "lost"}]


@pytest.mark.anyio
async def test_async_transport_overlaps_latency(anyio_backend: str) -> None:
    import time

    import anyio

    transport = LocalD1Transport(latency_ms=100)
    async with httpx.AsyncClient(transport=transport, headers=AUTH) as c:
        started = time.perf_counter()
        results: list[httpx.Response] = []

        async def one(i: int) -> None:
            results.append(await c.post(f"{BASE}/query", json={"sql": "SELECT ? AS i", "params": [i]}))

        async with anyio.create_task_group() as tg:
            for i in range(10):
                tg.start_soon(one, i)
        elapsed = time.perf_counter() - started
    assert sorted(r.json()["result"][0]["results"][0]["i"] for r in results) == list(range(10))
    assert elapsed < 0.6  # ten 100 ms round trips, overlapped


def test_real_http_server(tmp_path: Any) -> None:
    server = make_server("127.0.0.1", 0, tmp_path, api_token=TOKEN)
    with serving(server) as base_url, httpx.Client(headers=AUTH) as c:
        url = f"{base_url}/accounts/acc/d1/database/db1"
        response = c.post(f"{url}/query", json={"batch": [{"sql": "CREATE TABLE h (x)"},
                                                          {"sql": "INSERT INTO h VALUES (?)", "params": ["v"]},
                                                          {"sql": "SELECT x FROM h"}]})  # fmt: skip
        assert response.status_code == 200 and response.json()["result"][2]["results"] == [{"x": "v"}]
        assert c.post(f"{url}/raw", json={"sql": "SELECT x FROM h"}).json()["result"][0]["results"] == {
            "columns": ["x"], "rows": [["v"]]
        }  # fmt: skip
        denied = c.post(f"{url}/query", json={"sql": "SELECT 1"}, headers={"Authorization": "Bearer no"})
        assert error(denied)[0] == 401
        server.engine.faults = FaultPlan(rate_lost_response=1.0)
        with pytest.raises(httpx.TransportError):
            c.post(f"{url}/query", json={"sql": "INSERT INTO h VALUES ('lost')"})
        server.engine.faults = None
        assert len(c.post(f"{url}/query", json={"sql": "SELECT x FROM h"}).json()["result"][0]["results"]) == 2
