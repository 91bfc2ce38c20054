"""The request layer alone: D1's body shapes and statement rules, with no database behind it."""

from __future__ import annotations

import json
from typing import Any

import pytest

from d1saver.local.envelope import ApiError
from d1saver.local.request import parse_request
from d1saver.local.rules import MAX_SQL_BYTES


def parse(payload: Any) -> list[tuple[str, list[Any], bool]]:
    return parse_request(json.dumps(payload).encode())


def refusal(body: bytes) -> tuple[int, int, str]:
    with pytest.raises(ApiError) as err:
        parse_request(body)
    return err.value.status, err.value.code, err.value.message


def test_one_statement_and_a_batch() -> None:
    assert parse({"sql": "SELECT ?", "params": [1]}) == [("SELECT ?", [1], True)]
    assert parse({"sql": "SELECT 1", "params": None}) == [("SELECT 1", [], True)]
    assert parse({"batch": [{"sql": "SELECT 1"}, {"sql": "SELECT ?", "params": ["a"]}]}) == [
        ("SELECT 1", [], True), ("SELECT ?", ["a"], True)]


def test_several_statements_in_one_sql() -> None:
    assert parse({"sql": "CREATE TABLE t (x); INSERT INTO t VALUES (1);"}) == [
        ("CREATE TABLE t (x);", [], True), (" INSERT INTO t VALUES (1);", [], True)]
    # With params, as on D1, only the last statement binds them and only it answers.
    assert parse({"sql": "DELETE FROM t; INSERT INTO t VALUES (?)", "params": [2]}) == [
        ("DELETE FROM t;", [], False), (" INSERT INTO t VALUES (?)", [2], True)]


@pytest.mark.parametrize(("body", "where"), [
    (b"{not json", "not valid JSON"),
    (b"NaN", "not valid JSON"),
    (b"[1]", "JSON object"),
    (b'{"sql": "SELECT 1", "batch": []}', "exactly one"),
    (b"{}", "exactly one"),
    (b'{"batch": []}', "non-empty array"),
    (b'{"sql": 1}', "string 'sql'"),
    (b'{"sql": "SELECT ?", "params": {"a": 1}}', "params must be an array"),
    (b'{"batch": [{"sql": "SELECT ?", "params": [[1]]}]}', "batch[0].params[0]"),
])
def test_malformed_bodies_are_400_7400(body: bytes, where: str) -> None:
    status, code, message = refusal(body)
    assert (status, code) == (400, 7400) and where in message


def test_d1_statement_rules() -> None:
    too_long = json.dumps({"sql": "SELECT '" + "x" * MAX_SQL_BYTES + "'"}).encode()
    assert refusal(too_long) == (400, 7500, "D1_ERROR: statement too long: SQLITE_TOOBIG")
    assert refusal(b'{"sql": " ; -- nothing\\n /* here */"}') == (
        400, 7500, "D1_ERROR: No SQL statements detected.")
