"""The SQL as sent: every statement of the catalogue pinned by a reviewed snapshot, named
parameters bound by name and checked, and the minifier's rules.

Regenerate the snapshot after a deliberate change to a statement (and review its diff):
    PYTHONPATH=$PWD python -m tests.sql.test_statements --update
"""

from __future__ import annotations

import re
import sqlite3
import sys
from pathlib import Path

import pytest

from d1saver import Statement
from d1saver.sql import catalogue as _sql
from d1saver.sql import memory as _memory
from d1saver.sql.query import MAX_PARAMS, Query, minify, name_queries, q, snapshot

SNAPSHOT = Path(__file__).with_name("statements.snapshot.sql")


def test_every_statement_sent_is_in_the_snapshot() -> None:
    """The exact text of every statement (after minification) is the reviewed file's."""
    expected = SNAPSHOT.read_text(encoding="utf-8")
    actual = snapshot(_sql.STATEMENTS)
    assert actual == expected, (
        "SQL sent differs from tests/sql/statements.snapshot.sql: regenerate it with "
        "`PYTHONPATH=$PWD python -m tests.sql.test_statements --update` and review the diff")


def test_every_statement_has_a_unique_name_and_bounded_parameters() -> None:
    names = [s.name for s in _sql.STATEMENTS]
    assert all(names) and len(names) == len(set(names))
    assert all(len(s.params) <= MAX_PARAMS for s in _sql.STATEMENTS)
    for s in _sql.STATEMENTS:
        # No parameter is left unnumbered but SQLite's own next number, none named.
        assert not re.search(r":[a-z]", re.sub(r"'(?:[^']|'')*'", "''", s.sql)), s.name


def test_every_statement_prepares_on_the_schema() -> None:
    """Every statement parses and names only tables and columns the current schema has, and
    its parameter count is what the names map to (SQLite's own numbering of ? and ?NNN)."""
    conn = sqlite3.connect(":memory:")
    conn.create_function("unhex", 1, lambda _: None)  # D1 has it; older SQLite lacks it
    for s in _sql.SCHEMA:
        conn.execute(s.sql)
    for s in _sql.STATEMENTS:
        if s.name.startswith(("SCHEMA[", "MIGRATIONS[")):
            continue
        conn.execute("SAVEPOINT p")
        try:
            # EXPLAIN prepares without running; binding exactly len(params) values checks the
            # count SQLite sees.
            conn.execute("EXPLAIN " + s.sql, [None] * len(s.params))
        finally:
            conn.execute("ROLLBACK TO p")
            conn.execute("RELEASE p")


# The columns each reader checks (d1saver/ops/rows.py and others), by statement name prefix.
COLUMNS = {
    "SELECT_PAGE_": _sql.PAGE_COLUMNS, "DELTA_HISTORY": _sql.DELTA_HISTORY_COLUMNS,
    "RAW_CHECKPOINTS_": _sql.RAW_CHECKPOINT_COLUMNS, "RAW_WRITES_": _sql.RAW_WRITE_COLUMNS,
    "RAW_FROZEN_": _sql.RAW_FROZEN_COLUMNS, "LIST_TAGS": _sql.LIST_TAGS_COLUMNS,
    "SUMMARIZE_PLAN": _sql.SUMMARY_COLUMNS, "RECORDED_PLAN": _sql.SUMMARY_COLUMNS,
    "CHUNK_CHECK": _sql.CHUNK_CHECK_COLUMNS, "KEY_CENSUS": _sql.KEY_CENSUS_COLUMNS,
    "LEAVING": _sql.LEAVING_COLUMNS, "OP_RESULT": _sql.OP_RESULT_COLUMNS,
    **{f"TRANSFER_PAGE_{t.upper()}": c for t, c in _sql.TRANSFER_PAGE_COLUMNS.items()},
    # Search by meaning's prefilter and the gateway's ranking read these by position.
    "SEARCH_CODES": _memory.CODE_COLUMNS, "RANK_ROWS": _memory.RANK_COLUMNS,
    "CANDIDATE_ITEMS": (*_memory.ITEM_COLUMNS, "verdict"),
    "CANDIDATE_VECTORS": _memory.VECTOR_COLUMNS,
}


def test_every_result_column_has_a_name() -> None:
    """What a statement returns is read by column name checks (d1saver/ops/rows.py), so every
    column is named, union queries included: no anonymous f1..f6, no expression text."""
    conn = sqlite3.connect(":memory:")
    conn.create_function("unhex", 1, lambda _: None)
    for s in _sql.SCHEMA:
        conn.execute(s.sql)
    named = re.compile(r"^[a-z][a-z_]*$")
    for s in _sql.STATEMENTS:
        if s.name.startswith(("SCHEMA[", "MIGRATIONS[")):
            continue
        conn.execute("SAVEPOINT p")
        try:  # on the empty schema, every parameter an integer (LIMIT needs one)
            columns = [d[0] for d in conn.execute(s.sql, [1] * len(s.params)).description or ()]
        except sqlite3.IntegrityError:  # a write that wants real values: it returns nothing
            assert not s.sql.startswith("SELECT") and "RETURNING" not in s.sql, s.name
            columns = []
        finally:
            conn.execute("ROLLBACK TO p")
            conn.execute("RELEASE p")
        assert all(named.match(c) and not re.match(r"^f[0-9]$", c) for c in columns), (
            s.name, columns)
        for prefix, expected in COLUMNS.items():
            if s.name.startswith(prefix):
                assert tuple(columns) == tuple(expected), s.name


def test_parameters_bind_by_name() -> None:
    query = q("SELECT 1 FROM t WHERE a = :a AND b = :b AND c = :a", name="T")
    assert query.sql == "SELECT 1 FROM t WHERE a=? AND b=? AND c=?1"
    assert query.params == ("a", "b")
    st = Statement.bind(query, {"b": 2, "a": 1})
    assert (st.sql, tuple(st.params), st.name, st.named()) == (query.sql, (1, 2), "T",
                                                                  {"a": 1, "b": 2})
    with pytest.raises(TypeError, match=r"missing \['b'\]"):
        Statement.bind(query, {"a": 1})
    with pytest.raises(TypeError, match=r"unknown \['z'\]"):
        Statement.bind(query, {"a": 1, "b": 2, "z": 3})
    with pytest.raises(TypeError, match="Statement.bind"):
        Statement(query, (1, 2))  # type: ignore[arg-type]


def test_a_batch_binds_each_statement_from_one_pool() -> None:
    one, two = q("SELECT :a", name="ONE"), q("SELECT :b, :a", name="TWO")
    assert [tuple(s.params) for s in Statement.bind_each([one, two], {"a": 1, "b": 2})] == [
        (1,), (2, 1)]
    with pytest.raises(TypeError, match="taken by no statement"):
        Statement.bind_each([one], {"a": 1, "b": 2})


def test_numbering_follows_sqlite() -> None:
    """A bare ? is SQLite's next number after the largest so far; a repeat keeps ?N."""
    sql, names = minify("SELECT :a, :b, :a, :c, :b")
    assert (sql, names) == ("SELECT ?,?,?1,?,?2", ("a", "b", "c"))
    conn = sqlite3.connect(":memory:")
    assert conn.execute(sql, (1, 2, 3)).fetchone() == (1, 2, 1, 3, 2)


def test_minify_keeps_what_sqlite_needs() -> None:
    text = """
    -- a comment, dropped
    DELETE FROM t AS x WHERE x.a = :a   -- AS stays: DELETE's alias needs it
      AND CAST(x.b AS TEXT) = 'it''s  -- not a comment' AND x.c IN (SELECT y.c FROM u AS y)
    """
    sql, _ = minify(text)
    assert sql == ("DELETE FROM t AS x WHERE x.a=? AND CAST(x.b AS TEXT)='it''s  -- not a "
                   "comment' AND x.c IN(SELECT y.c FROM u y)")
    assert minify("UPDATE OR REPLACE t AS x SET a = 1")[0] == "UPDATE OR REPLACE t AS x SET a=1"
    assert minify("SELECT x'00' || 'a' AS b")[0] == "SELECT x'00'||'a' b"


def test_positional_and_unnamed_parameters_are_refused() -> None:
    for text in ("SELECT ?", "SELECT ?1", "SELECT @a", "SELECT $a"):
        with pytest.raises(ValueError, match="name every parameter"):
            minify(text)
    with pytest.raises(ValueError, match="at most 100"):
        minify("SELECT " + ", ".join(f":p{i}" for i in range(101)))


def test_every_statement_reached_through_a_list_has_a_name() -> None:
    unnamed = q("SELECT 1")
    with pytest.raises(ValueError, match="no name of its own"):
        name_queries({"BATCH": [unnamed]})
    assert isinstance(_sql.COPY_THREAD[0], Query)


if __name__ == "__main__":
    if sys.argv[1:] != ["--update"]:
        sys.exit("usage: python -m tests.sql.test_statements --update")
    SNAPSHOT.write_text(snapshot(_sql.STATEMENTS), encoding="utf-8")
    print(f"wrote {SNAPSHOT} ({len(_sql.STATEMENTS)} statements)")
