"""One SQLite database run as D1 runs it: D1's limits, its authorizer, one transaction per request,
results and `meta` shaped as D1 returns them, and SQLite errors worded as D1 words them."""

from __future__ import annotations

import sqlite3
import threading
import time
from typing import Any

from .envelope import ApiError, d1_error
from .request import Statement
from .rules import (
    ALLOWED_PRAGMAS,
    DDL_ACTIONS,
    DENIED_FUNCTIONS,
    MAX_LIKE_PATTERN_BYTES,
    MAX_PARAMS,
    MAX_SQL_BYTES,
    MAX_VALUE_BYTES,
    TRANSACTION_REFUSED,
)
from .conversion import bind_value, json_value, unhex

__all__ = ["Database"]


class Database:
    """One SQLite database with D1's limits and authorizer; callers hold `lock` while using it."""

    def __init__(self, target: str) -> None:
        conn = sqlite3.connect(target, check_same_thread=False, isolation_level=None, cached_statements=0)
        # The statement cache stays off: a cached statement skips the authorizer, so a client could
        # otherwise reuse our own prepared BEGIN/COMMIT.
        conn.setlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER, MAX_PARAMS)
        conn.setlimit(sqlite3.SQLITE_LIMIT_SQL_LENGTH, MAX_SQL_BYTES)
        conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, MAX_VALUE_BYTES)
        conn.setlimit(sqlite3.SQLITE_LIMIT_LIKE_PATTERN_LENGTH, MAX_LIKE_PATTERN_BYTES)
        conn.execute("PRAGMA foreign_keys = ON")  # D1 enforces foreign keys by default
        if target != ":memory:":
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("PRAGMA synchronous = NORMAL")
        try:
            conn.execute("SELECT unhex('00')")
        except sqlite3.OperationalError:
            conn.create_function("unhex", 1, unhex, deterministic=True)
            conn.create_function(
                "unhex", 2, lambda x, y: None if y is None else unhex(x, str(y)), deterministic=True
            )
        conn.set_authorizer(self._authorize)
        self.conn = conn
        self.lock = threading.Lock()
        self._trusted = False  # our own statements bypass the authorizer
        self._ddl = False
        self._refusal: str | None = None

    def _authorize(self, action: int, arg1: str | None, arg2: str | None, _db: str | None, _src: str | None) -> int:
        if self._trusted:
            return sqlite3.SQLITE_OK
        if action in (sqlite3.SQLITE_TRANSACTION, sqlite3.SQLITE_SAVEPOINT):
            self._refusal = TRANSACTION_REFUSED
            return sqlite3.SQLITE_DENY
        if action in (sqlite3.SQLITE_ATTACH, sqlite3.SQLITE_DETACH):
            return sqlite3.SQLITE_DENY  # "not authorized: SQLITE_AUTH", as on D1
        if action == sqlite3.SQLITE_FUNCTION and (arg2 or "").lower() in DENIED_FUNCTIONS:
            return sqlite3.SQLITE_DENY  # SQLite words this "not authorized to use function: X"
        if action == sqlite3.SQLITE_PRAGMA and (arg1 or "").lower() not in ALLOWED_PRAGMAS:
            return sqlite3.SQLITE_DENY
        if action in DDL_ACTIONS:
            self._ddl = True
        return sqlite3.SQLITE_OK

    def _trusted_execute(self, sql: str) -> list[tuple[Any, ...]]:
        self._trusted = True
        try:
            return self.conn.execute(sql).fetchall()
        finally:
            self._trusted = False

    def run(self, statements: list[Statement], raw: bool) -> list[dict[str, Any]]:
        """Run all statements as one transaction; any failure rolls all of them back.

        A statement whose third item is False runs without answering (the leading statements of
        a multi-statement sql sent with params, as on D1)."""
        try:
            self._trusted_execute("BEGIN IMMEDIATE")
            try:
                results = []
                for sql, params, answers in statements:
                    if answers:
                        results.append(self._run_one(sql, params, raw))
                    else:
                        self._run_silent(sql)
                self._trusted_execute("COMMIT")  # can fail too, e.g. on deferred foreign keys
            except BaseException:
                if self.conn.in_transaction:
                    self._trusted_execute("ROLLBACK")
                raise
        except sqlite3.Error as exc:
            raise self._translate(exc) from None
        return results

    def _run_silent(self, sql: str) -> None:
        self._ddl, self._refusal = False, None
        try:
            self.conn.execute(sql).fetchall()
        except sqlite3.ProgrammingError as exc:
            if "number of bindings" not in str(exc):
                raise
            raise d1_error("When executing multiple SQL statements in a single call, only the "
                           "last statement can have parameters.", None) from None
        except sqlite3.Error as exc:
            raise self._translate(exc) from None

    def _run_one(self, sql: str, params: list[Any], raw: bool) -> dict[str, Any]:
        self._ddl, self._refusal = False, None
        before = self.conn.total_changes
        started = time.perf_counter()
        try:
            cursor = self.conn.execute(sql, [bind_value(p) for p in params])
            columns = [d[0] for d in cursor.description or ()]
            rows = [[json_value(v) for v in row] for row in cursor.fetchall()]
        except sqlite3.Error as exc:
            raise self._translate(exc) from None
        except (ValueError, OverflowError) as exc:
            raise d1_error(str(exc)) from None
        duration_ms = (time.perf_counter() - started) * 1000
        changes_now, last_row_id, size = self._trusted_execute(
            "SELECT changes(), last_insert_rowid(),"
            " (SELECT page_count FROM pragma_page_count()) * (SELECT page_size FROM pragma_page_size())"
        )[0]
        # changes() keeps the count of the last DML statement, so only trust it if this one wrote.
        # Rows written count what its triggers wrote too (an insert into d1saver_put writes
        # its rows that way), as D1 bills them; `changes` is SQLite's changes() as D1 reports.
        written = self.conn.total_changes - before
        changes = changes_now if written else 0
        if raw:
            results: Any = {"columns": columns, "rows": rows}
        else:
            results = [dict(zip(columns, row)) for row in rows]
        meta = {
            "changed_db": changes > 0 or self._ddl,
            "changes": changes,
            "duration": duration_ms,
            "last_row_id": last_row_id,
            "rows_read": changes or len(rows),  # approximate: D1 counts rows scanned
            "rows_written": written,
            "size_after": size,
            "served_by": "d1saver.local",
            "served_by_region": "local",
            "served_by_primary": True,
        }
        return {"results": results, "success": True, "meta": meta}

    def _translate(self, exc: sqlite3.Error) -> ApiError:
        if self._refusal and getattr(exc, "sqlite_errorname", None) == "SQLITE_AUTH":
            return d1_error(self._refusal, None)
        if isinstance(exc, sqlite3.ProgrammingError) and "number of bindings" in str(exc):
            return d1_error("Wrong number of parameter bindings for SQL query.", None)
        name = getattr(exc, "sqlite_errorname", None) or "SQLITE_ERROR"
        primary = "_".join(name.split("_")[:2])  # SQLITE_CONSTRAINT_PRIMARYKEY -> SQLITE_CONSTRAINT
        if primary != name:  # D1 words it "...: SQLITE_CONSTRAINT (extended: SQLITE_CONSTRAINT_PRIMARYKEY)"
            primary = f"{primary} (extended: {name})"
        return d1_error(str(exc), primary)

    def close(self) -> None:
        with self.lock:
            self.conn.close()
