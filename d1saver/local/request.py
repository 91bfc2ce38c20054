"""D1's request body (`{"sql", "params"}` or `{"batch": [...]}`) parsed and checked against D1's rules.

The result is a flat list of statements to run as one transaction; nothing here touches SQLite
beyond `sqlite3.complete_statement`.
"""

from __future__ import annotations

import json
import sqlite3
from typing import Any

from .envelope import ApiError, d1_error
from .rules import MAX_SQL_BYTES

__all__ = ["Statement", "parse_request", "split_statements"]

Statement = tuple[str, list[Any], bool]
"""(sql, params, answers): a statement whose `answers` is False runs without a result entry."""


def parse_request(body: bytes) -> list[Statement]:
    """The statements a request body asks for, or an `ApiError` worded as D1 words it."""
    return _expand(_parse_body(body))


def _is_blank(sql: str) -> bool:
    """True if `sql` holds only whitespace, comments and semicolons (no statement)."""
    i, n = 0, len(sql)
    while i < n:
        if sql[i].isspace() or sql[i] == ";":
            i += 1
        elif sql.startswith("--", i):
            end = sql.find("\n", i)
            i = n if end < 0 else end + 1
        elif sql.startswith("/*", i):
            end = sql.find("*/", i + 2)
            i = n if end < 0 else end + 2
        else:
            return False
    return True


def split_statements(sql: str) -> list[str]:
    """Split SQL text into statements, honouring string literals, comments and trigger bodies."""
    pieces: list[str] = []
    start = 0
    pos = sql.find(";")
    while pos != -1:
        candidate = sql[start : pos + 1]
        if sqlite3.complete_statement(candidate):
            if not _is_blank(candidate):
                pieces.append(candidate)
            start = pos + 1
        pos = sql.find(";", pos + 1)
    if not _is_blank(sql[start:]):
        pieces.append(sql[start:])
    return pieces


def _parse_entry(entry: Any, where: str) -> tuple[str, list[Any]]:
    if not isinstance(entry, dict) or not isinstance(entry.get("sql"), str):
        raise ApiError(400, 7400, f"{where} must be an object with a string 'sql'")
    params = entry.get("params")
    if params is None:
        params = []
    if not isinstance(params, list):
        raise ApiError(400, 7400, f"{where}.params must be an array")
    for i, value in enumerate(params):
        if value is not None and not isinstance(value, (str, int, float)):
            raise ApiError(400, 7400, f"{where}.params[{i}] must be a string, number, boolean or null")
    return entry["sql"], params


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _parse_body(body: bytes) -> list[tuple[str, list[Any]]]:
    try:
        payload = json.loads(body, parse_constant=_reject_constant)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ApiError(400, 7400, f"The request body is not valid JSON: {exc}") from None
    if not isinstance(payload, dict):
        raise ApiError(400, 7400, "The request body must be a JSON object")
    if ("sql" in payload) == ("batch" in payload):
        raise ApiError(400, 7400, "The request body must hold exactly one of 'sql' or 'batch'")
    if "sql" in payload:
        return [_parse_entry(payload, "body")]
    batch = payload["batch"]
    if not isinstance(batch, list) or not batch:
        raise ApiError(400, 7400, "'batch' must be a non-empty array")
    return [_parse_entry(entry, f"batch[{i}]") for i, entry in enumerate(batch)]


def _expand(entries: list[tuple[str, list[Any]]]) -> list[Statement]:
    """(statement, params, answers) per statement, applying D1's length and multi-statement rules.

    Several statements in one sql answer one result each; with params, as on D1, only the last
    may use them and only the last answers."""
    statements: list[Statement] = []
    for sql, params in entries:
        if len(sql.encode("utf-8", "surrogatepass")) > MAX_SQL_BYTES:
            raise d1_error("statement too long", "SQLITE_TOOBIG")
        pieces = split_statements(sql)
        if not pieces:
            raise d1_error("No SQL statements detected.", None)
        if len(pieces) > 1 and params:
            statements.extend((piece, [], False) for piece in pieces[:-1])
            statements.append((pieces[-1], params, True))
        else:
            statements.extend((piece, params, True) for piece in pieces)
    return statements
