"""Parity: the same probes on the local D1 and on Wrangler's real D1 engine give the same outcome.

Every test runs twice through the ``backend`` fixture (tests/conftest.py): on the in-process local
D1 (d1saver/local/) and on workerd's D1 behind the gateway Worker (tests/realengine.py). A
test states ONE expected outcome (success and the returned values, or the error class and the key
part of D1's message), so passing on both backends means both engines agree.

The last section pins the differences found so far (docs/PARITY.md): each such test states what
the real engine does and is a strict xfail on the local D1, so it turns into a failure (XPASS)
the day the local D1 is matched to the real engine, and the xfail and the doc must then go.

The wrangler backend shares ONE database across the whole session: every table name is unique
(uuid), and tables are dropped after each test.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from d1saver import D1Error, QueryError, Statement
from d1saver import Result

S = Statement

# The real engine words transaction statements with this Durable Objects sentence (so does the local D1).
TRANSACTION_REFUSED = "please use the state.storage.transaction() or state.storage.transactionSync() APIs"


def run(backend: Any, *statements: Statement) -> list[Result]:
    """One request: one statement, or several as one atomic batch."""
    return backend.saver().client.execute(list(statements))


def rows(backend: Any, sql: str, *params: Any) -> list[list[Any]]:
    [result] = run(backend, S(sql, params))
    return result.rows


def refused(backend: Any, *statements: Statement) -> str:
    """Run statements that must fail as a SQL error (HTTP 400, code 7500); return D1's message."""
    with pytest.raises(QueryError) as info:
        run(backend, *statements)
    assert (info.value.status, info.value.code) == (400, 7500), str(info.value)
    assert info.value.message.startswith("D1_ERROR: "), info.value.message
    return info.value.message


def differs_on_local(backend: Any, request: pytest.FixtureRequest, why: str) -> None:
    """The test states the real engine's behaviour; the local D1 is known to differ (strict xfail)."""
    if backend.name == "local":
        request.applymarker(pytest.mark.xfail(strict=True, reason=f"known difference: {why}"))


@pytest.fixture
def table(backend: Any) -> Iterator[Callable[[], str]]:
    """A maker of unique table names; every table made is dropped afterwards (best effort)."""
    names: list[str] = []

    def make() -> str:
        names.append(f"parity_{uuid.uuid4().hex[:12]}")
        return names[-1]

    yield make
    for name in names:
        try:
            run(backend, S(f"DROP TABLE IF EXISTS {name}"))
        except D1Error:
            pass


def assert_no_table(backend: Any, name: str) -> None:
    assert rows(backend, "SELECT count(*) FROM sqlite_master WHERE name = ?", name) == [[0]]
    assert "no such table" in refused(backend, S(f"SELECT * FROM {name}"))


# --- limits --------------------------------------------------------------------------------------


def test_100_bound_parameters_accepted(backend):
    # Columns named uniquely: the gateway returns rows through the binding as objects.
    sql = "SELECT " + ", ".join(f"? AS c{i}" for i in range(100))
    assert rows(backend, sql, *range(100)) == [list(range(100))]


def test_100_numbered_parameters_accepted(backend):
    sql = "SELECT " + ", ".join(f"?{i}" for i in range(100, 0, -1))
    assert rows(backend, sql, *range(1, 101)) == [list(range(100, 0, -1))]


def test_101_bound_parameters_refused(backend):
    sql = "SELECT " + ", ".join("?" for _ in range(101))
    message = refused(backend, S(sql, list(range(101))))
    assert "too many SQL variables" in message and message.endswith(": SQLITE_ERROR")


def _statement(size: int) -> str:
    """SELECT of a string literal, exactly `size` bytes of SQL."""
    return "SELECT '" + "x" * (size - len("SELECT ''")) + "'"


def test_statement_of_100_000_bytes_accepted(backend):
    sql = _statement(100_000)
    assert len(sql.encode()) == 100_000
    assert rows(backend, sql) == [["x" * 99_991]]


@pytest.mark.parametrize("size", [100_001, 120_000], ids=["100_001B", "120KB"])
def test_statement_over_100_000_bytes_refused(backend, size):
    message = refused(backend, S(_statement(size)))
    assert message == "D1_ERROR: statement too long: SQLITE_TOOBIG"


def test_statement_limit_counts_utf8_bytes(backend):
    # 'é' is two bytes in UTF-8: SELECT '<49,995 of them>' is 99,999 bytes, one more is 100,001.
    assert rows(backend, "SELECT '" + "é" * 49_995 + "'") == [["é" * 49_995]]
    assert "statement too long" in refused(backend, S("SELECT '" + "é" * 49_996 + "'"))


def test_value_of_2_000_000_bytes_accepted(backend):
    assert rows(backend, "SELECT length(?), length(CAST(? AS BLOB))", "x" * 2_000_000, "é" * 1_000_000) == [
        [2_000_000, 2_000_000]]


def test_row_just_under_2_000_000_bytes_stored(backend, table):
    # A row's record is its values plus a few bytes of header: 1,999,990 bytes of value fit on both.
    t = table()
    run(backend, S(f"CREATE TABLE {t} (k INTEGER PRIMARY KEY, v TEXT)"))
    [insert, select] = run(backend, S(f"INSERT INTO {t} VALUES (1, ?)", ["x" * 1_999_990]),
                           S(f"SELECT length(v), substr(v, -3) FROM {t}"))
    assert insert.changes == 1
    assert select.rows == [[1_999_990, "xxx"]]


@pytest.mark.parametrize("sql, params", [
    ("SELECT length(?)", ["x" * 2_500_000]),             # a bound string of 2.5 MB
    ("SELECT length(?)", ["é" * 1_250_000]),             # 2.5 MB of UTF-8 in 1.25 M characters
    ("SELECT length(zeroblob(2500000))", []),            # a BLOB made in SQL
    ("SELECT length(hex(zeroblob(1250000)))", []),       # a string made in SQL
], ids=["param", "param-utf8", "zeroblob", "hex"])
def test_value_of_2_5_mb_refused(backend, sql, params):
    assert refused(backend, S(sql, params)) == "D1_ERROR: string or blob too big: SQLITE_TOOBIG"


def test_row_of_2_6_mb_refused_and_nothing_written(backend, table):
    t = table()
    run(backend, S(f"CREATE TABLE {t} (k INTEGER PRIMARY KEY, a TEXT, b TEXT)"))
    message = refused(backend, S(f"INSERT INTO {t} VALUES (1, ?, ?)", ["x" * 1_300_000, "y" * 1_300_000]))
    assert message == "D1_ERROR: string or blob too big: SQLITE_TOOBIG"
    assert rows(backend, f"SELECT count(*) FROM {t}") == [[0]]


# --- transactions --------------------------------------------------------------------------------


@pytest.mark.parametrize("sql", ["BEGIN", "BEGIN TRANSACTION", "BEGIN IMMEDIATE", "COMMIT",
                                 "ROLLBACK", "SAVEPOINT sp", "RELEASE sp"])
def test_transaction_statements_refused(backend, sql):
    assert TRANSACTION_REFUSED in refused(backend, S(sql))
    assert rows(backend, "SELECT 1") == [[1]]  # and nothing is left half-open


def test_begin_inside_a_batch_refused_and_rolled_back(backend, table):
    t = table()
    assert TRANSACTION_REFUSED in refused(backend, S(f"CREATE TABLE {t} (k)"), S("BEGIN"))
    assert_no_table(backend, t)


def test_failing_statement_rolls_back_the_whole_batch_including_ddl(backend, table):
    t = table()
    message = refused(backend,
                      S(f"CREATE TABLE {t} (k INTEGER PRIMARY KEY, v TEXT)"),
                      S(f"INSERT INTO {t} VALUES (1, 'a')"),
                      S(f"INSERT INTO {t} VALUES (2, 'b')"),
                      S(f"INSERT INTO {t} VALUES (1, 'again')"))
    assert f"UNIQUE constraint failed: {t}.k: SQLITE_CONSTRAINT" in message
    assert_no_table(backend, t)


def test_failing_statement_rolls_back_earlier_writes_to_an_existing_table(backend, table):
    t = table()
    run(backend, S(f"CREATE TABLE {t} (k INTEGER PRIMARY KEY, v TEXT)"),
        S(f"INSERT INTO {t} VALUES (1, 'kept')"))
    message = refused(backend,
                      S(f"INSERT INTO {t} VALUES (2, 'b')"),
                      S(f"UPDATE {t} SET v = 'changed' WHERE k = 1"),
                      S(f"DELETE FROM {t} WHERE k = 1"),
                      S(f"INSERT INTO {t}_missing VALUES (3)"))
    assert f"no such table: {t}_missing" in message
    assert rows(backend, f"SELECT k, v FROM {t} ORDER BY k") == [[1, "kept"]]


def test_a_successful_batch_commits_all(backend, table):
    t = table()
    results = run(backend, S(f"CREATE TABLE {t} (k INTEGER PRIMARY KEY)"),
                  S(f"INSERT INTO {t} VALUES (1), (2)"), S(f"SELECT count(*) FROM {t}"))
    assert [r.rows for r in results] == [[], [], [[2]]]
    assert results[1].changes == 2
    assert rows(backend, f"SELECT count(*) FROM {t}") == [[2]]


def test_params_on_a_statement_before_the_last_of_one_sql_refused(backend):
    # Both refuse (QueryError, 400/7500); the wording differs (docs/PARITY.md).
    refused(backend, S("SELECT ?; SELECT 2", [5]))


# --- refused and absent functions ---------------------------------------------------------------


def test_sqlite_version_not_authorized(backend):
    message = refused(backend, S("SELECT sqlite_version()"))
    assert "not authorized to use function: sqlite_version" in message
    assert message.endswith(": SQLITE_ERROR")


def test_base64_absent(backend):
    message = refused(backend, S("SELECT base64('x')"))
    assert "no such function: base64" in message and message.endswith(": SQLITE_ERROR")


# --- values --------------------------------------------------------------------------------------


def test_blob_comes_back_as_a_list_of_ints(backend):
    assert rows(backend, "SELECT unhex('4142'), typeof(unhex('4142'))") == [[[65, 66], "blob"]]


def test_blob_round_trip_through_a_table(backend, table):
    t = table()
    [_, insert, select] = run(backend, S(f"CREATE TABLE {t} (k INTEGER PRIMARY KEY, b BLOB)"),
                              S(f"INSERT INTO {t} VALUES (1, unhex('00ff7f')) RETURNING b"),
                              S(f"SELECT b, hex(b), length(b) FROM {t}"))
    assert insert.rows == [[[0, 255, 127]]]
    assert select.rows == [[[0, 255, 127], "00FF7F", 3]]


def test_scalar_values_round_trip(backend):
    assert rows(backend, "SELECT ? AS a, ? AS b, ? AS c, ? AS d, 1.5, NULL", 7, -3, "é ☃", None) == [
        [7, -3, "é ☃", None, 1.5, None]]


# --- SQL features --------------------------------------------------------------------------------


def test_json_extract(backend):
    doc = '{"a": [1, 2, {"b": "x"}], "n": 3}'
    assert rows(backend, "SELECT json_extract(?1, '$.a[2].b'), json_extract(?1, '$.n'),"
                         " json_extract(?1, '$.a'), ?1 ->> '$.a[1]', json_extract(?1, '$.none')",
                doc) == [["x", 3, "[1,2,{\"b\":\"x\"}]", 2, None]]


def test_json_each(backend):
    assert rows(backend, "SELECT key, value, type FROM json_each(?) ORDER BY key",
                '[1, "x", null, 2.5, true]') == [
        [0, 1, "integer"], [1, "x", "text"], [2, None, "null"], [3, 2.5, "real"], [4, 1, "true"]]


def test_json_group_array(backend):
    assert rows(backend, "SELECT json_group_array(value) FROM json_each(?)",
                '["a", 2, null]') == [['["a",2,null]']]


def test_window_function(backend, table):
    t = table()
    run(backend, S(f"CREATE TABLE {t} (g TEXT, v INTEGER)"),
        S(f"INSERT INTO {t} VALUES ('a', 3), ('a', 1), ('b', 5), ('a', 2), ('b', 4)"))
    assert rows(backend, f"SELECT g, v, ROW_NUMBER() OVER (PARTITION BY g ORDER BY v DESC),"
                         f" sum(v) OVER (PARTITION BY g) FROM {t} ORDER BY g, v") == [
        ["a", 1, 3, 6], ["a", 2, 2, 6], ["a", 3, 1, 6], ["b", 4, 2, 9], ["b", 5, 1, 9]]


def test_recursive_cte(backend):
    assert rows(backend, "WITH RECURSIVE c(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM c WHERE n < ?)"
                         " SELECT count(*), group_concat(n, ',') FROM c", 10) == [
        [10, "1,2,3,4,5,6,7,8,9,10"]]


def test_upsert_returning(backend, table):
    t = table()
    run(backend, S(f"CREATE TABLE {t} (k TEXT PRIMARY KEY, n INTEGER NOT NULL, v TEXT)"))
    upsert = (f"INSERT INTO {t} (k, n, v) VALUES (?, 1, ?) "
              f"ON CONFLICT (k) DO UPDATE SET n = n + 1, v = v || excluded.v RETURNING k, n, v")
    [first, second] = run(backend, S(upsert, ["a", "x"]), S(upsert, ["a", "y"]))
    assert first.rows == [["a", 1, "x"]] and first.changes == 1
    assert second.rows == [["a", 2, "xy"]] and second.changes == 1
    assert rows(backend, f"SELECT k, n, v FROM {t}") == [["a", 2, "xy"]]


def test_update_from(backend, table):
    t, u = table(), table()
    run(backend, S(f"CREATE TABLE {t} (k INTEGER PRIMARY KEY, v TEXT)"),
        S(f"CREATE TABLE {u} (k INTEGER PRIMARY KEY, v TEXT)"),
        S(f"INSERT INTO {t} VALUES (1, 'old'), (2, 'old'), (3, 'old')"),
        S(f"INSERT INTO {u} VALUES (1, 'new1'), (3, 'new3')"))
    [update] = run(backend, S(f"UPDATE {t} SET v = {u}.v FROM {u} WHERE {u}.k = {t}.k"))
    assert update.changes == 2
    assert rows(backend, f"SELECT k, v FROM {t} ORDER BY k") == [[1, "new1"], [2, "old"], [3, "new3"]]


def test_row_value_comparison(backend, table):
    t = table()
    run(backend, S(f"CREATE TABLE {t} (a INTEGER, b TEXT)"),
        S(f"INSERT INTO {t} VALUES (1, 'x'), (1, 'z'), (2, 'a'), (2, 'c'), (3, 'a')"))
    assert rows(backend, f"SELECT a, b FROM {t} WHERE (a, b) < (?, ?) ORDER BY a, b", 2, "b") == [
        [1, "x"], [1, "z"], [2, "a"]]
    assert rows(backend, f"SELECT a, b FROM {t} WHERE (a, b) > (?, ?) ORDER BY a DESC, b DESC LIMIT ?",
                2, "a", 10) == [[3, "a"], [2, "c"]]


# --- known differences (docs/PARITY.md): the real engine's behaviour, strict xfail on local -------


@pytest.mark.parametrize("size", [2_000_001, 2_100_000, 2_200_000])
def test_value_between_2_0_and_2_2_mb_accepted_by_the_real_engine(backend, request, size):
    differs_on_local(backend, request, "the local D1 caps values and rows at 2,000,000 bytes "
                                       "(D1's documented limit); workerd at 2,200,000")
    assert rows(backend, "SELECT length(?)", "x" * size) == [[size]]


def test_row_of_2_000_000_byte_value_stored_by_the_real_engine(backend, request, table):
    differs_on_local(backend, request, "the local D1 caps a row's record at 2,000,000 bytes, so a "
                                       "2,000,000-byte value plus the record header is refused")
    t = table()
    run(backend, S(f"CREATE TABLE {t} (k INTEGER PRIMARY KEY, v TEXT)"))
    run(backend, S(f"INSERT INTO {t} VALUES (1, ?)", ["x" * 2_000_000]))
    assert rows(backend, f"SELECT length(v) FROM {t}") == [[2_000_000]]


def test_row_of_2_1_mb_stored_by_the_real_engine(backend, request, table):
    differs_on_local(backend, request, "rows: the local D1 refuses records over 2,000,000 bytes; "
                                       "workerd over 2,200,000")
    t = table()
    run(backend, S(f"CREATE TABLE {t} (k INTEGER PRIMARY KEY, a TEXT, b TEXT)"))
    run(backend, S(f"INSERT INTO {t} VALUES (1, ?, ?)", ["x" * 1_050_000, "y" * 1_050_000]))
    assert rows(backend, f"SELECT length(a) + length(b) FROM {t}") == [[2_100_000]]


def test_value_over_2_200_000_bytes_refused(backend):
    # Both engines refuse just past the real engine's cap (the local D1 refuses from 2,000,001).
    assert "SQLITE_TOOBIG" in refused(backend, S("SELECT length(?)", ["x" * 2_200_001]))


def test_number_params_bind_as_real(backend, request):
    assert rows(backend, "SELECT typeof(?1), ?1 / 2, ?1 || '', json_object('n', ?1)", 5) == [
        ["real", 2.5, "5.0", '{"n":5.0}']]


def test_integer_affinity_columns_hide_the_real_binding(backend, table):
    # What d1saver relies on: INTEGER (and TEXT) columns convert a REAL 5.0 to 5, so both agree.
    t = table()
    run(backend, S(f"CREATE TABLE {t} (k INTEGER PRIMARY KEY, n INTEGER, s TEXT)"),
        S(f"INSERT INTO {t} VALUES (?, ?, ?)", [1, 5, "5"]))
    assert rows(backend, f"SELECT k, n, typeof(n), n / 2, s FROM {t} WHERE n = ?", 5) == [
        [1, 5, "integer", 2, "5"]]


def test_integral_reals_come_back_as_json_integers(backend, request):
    [[value, kind]] = rows(backend, "SELECT 2.0, typeof(2.0)")
    assert kind == "real" and value == 2 and type(value) is int


def test_integers_beyond_2_53_lose_precision(backend, request):
    assert rows(backend, "SELECT ?", 2**53 + 1) == [[2**53]]


def test_parse_errors_carry_an_offset_on_the_real_engine(backend, request):
    differs_on_local(backend, request, "workerd adds SQLite's error offset (' at offset 7'); "
                                       "Python's sqlite3 does not expose sqlite3_error_offset()")
    assert refused(backend, S("SELECT sqlite_version()")) == (
        "D1_ERROR: not authorized to use function: sqlite_version at offset 7: SQLITE_ERROR")


def test_array_param_refused(backend):
    """Params are strings, numbers, booleans or null (D1's documented API); an array is a 400/7400."""
    with pytest.raises(QueryError) as info:
        run(backend, S("SELECT typeof(?1)", [[65, 66]]))
    assert (info.value.status, info.value.code) == (400, 7400), str(info.value)


def test_params_on_the_last_of_several_statements_in_one_sql_accepted(backend, request):
    assert rows(backend, "SELECT 1; SELECT ?", 5) == [[5]]
