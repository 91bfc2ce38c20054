"""A local stand-in for Cloudflare D1: answers D1's REST API (`/query`, `/raw`) from SQLite databases.

It enforces D1's documented limits and the SQL rules seen on D1's engine, so that code which works
here has a good chance of working on a real D1, and it can inject faults deterministically.
"""

from __future__ import annotations

import hmac
import json
import math
import os
import re
import sqlite3
import string
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from .faults import RATE_LIMIT, DroppedConnection, Fault, FaultPlan

__all__ = ["DroppedConnection", "EngineStats", "LocalD1", "LocalResponse", "split_statements"]

MAX_PARAMS = 100
MAX_SQL_BYTES = 100_000
MAX_VALUE_BYTES = 2_000_000
MAX_LIKE_PATTERN_BYTES = 50

_ROUTE = re.compile(r"^/client/v4/accounts/([^/]+)/d1/database/([^/]+)/(query|raw)/?$")
_DATABASE_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,99}$")  # also keeps ids safe as file names

# PRAGMAs D1 documents as supported; anything else is refused.
_ALLOWED_PRAGMAS = frozenset(
    {
        "table_list", "table_info", "table_xinfo", "index_list", "index_info", "index_xinfo",
        "foreign_key_list", "foreign_key_check", "quick_check", "optimize",
        "foreign_keys", "defer_foreign_keys", "legacy_alter_table", "recursive_triggers",
        "reverse_unordered_selects", "case_sensitive_like", "ignore_check_constraints",
    }
)  # fmt: skip
_DENIED_FUNCTIONS = frozenset({"sqlite_version", "load_extension"})
_DDL_ACTIONS = frozenset(
    getattr(sqlite3, name)
    for name in (
        "SQLITE_CREATE_INDEX", "SQLITE_CREATE_TABLE", "SQLITE_CREATE_TRIGGER", "SQLITE_CREATE_VIEW",
        "SQLITE_CREATE_TEMP_INDEX", "SQLITE_CREATE_TEMP_TABLE", "SQLITE_CREATE_TEMP_TRIGGER",
        "SQLITE_CREATE_TEMP_VIEW", "SQLITE_CREATE_VTABLE", "SQLITE_DROP_INDEX", "SQLITE_DROP_TABLE",
        "SQLITE_DROP_TRIGGER", "SQLITE_DROP_VIEW", "SQLITE_DROP_TEMP_INDEX", "SQLITE_DROP_TEMP_TABLE",
        "SQLITE_DROP_TEMP_TRIGGER", "SQLITE_DROP_TEMP_VIEW", "SQLITE_DROP_VTABLE", "SQLITE_ALTER_TABLE",
        "SQLITE_REINDEX", "SQLITE_ANALYZE",
    )
)  # fmt: skip
# Word for word what D1 (workerd) answers to BEGIN, COMMIT, ROLLBACK, SAVEPOINT and RELEASE.
_TRANSACTION_REFUSED = (
    "To execute a transaction, please use the state.storage.transaction() or "
    "state.storage.transactionSync() APIs instead of the SQL BEGIN TRANSACTION or SAVEPOINT "
    "statements. The JavaScript API is safer because it will automatically roll back on exceptions, "
    "and because it interacts correctly with Durable Objects' automatic atomic write coalescing."
)


@dataclass(frozen=True)
class LocalResponse:
    """An HTTP response from the engine: status, headers and the JSON body as bytes."""

    status: int
    headers: dict[str, str]
    body: bytes


@dataclass
class EngineStats:
    """Counters of what crossed the engine's API; safe to read and update from many threads.

    `statements` counts every statement attempted; `rows_written` counts only committed requests.
    """

    requests: int = 0
    bytes_received: int = 0
    bytes_sent: int = 0
    rows_written: int = 0
    statements: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def add(self, **deltas: int) -> None:
        """Add the given deltas, e.g. `add(requests=1, bytes_received=120)`."""
        with self._lock:
            for name, delta in deltas.items():
                setattr(self, name, getattr(self, name) + delta)

    def reset(self) -> None:
        """Set every counter back to zero."""
        with self._lock:
            for f in fields(self):
                if not f.name.startswith("_"):
                    setattr(self, f.name, 0)

    def snapshot(self) -> dict[str, int]:
        """The counters as a plain dict, read consistently."""
        with self._lock:
            return {f.name: getattr(self, f.name) for f in fields(self) if not f.name.startswith("_")}


class _ApiError(Exception):
    """A request that ends in a Cloudflare error envelope."""

    def __init__(self, status: int, code: int, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


def _d1_error(message: str, code_name: str | None = "SQLITE_ERROR") -> _ApiError:
    suffix = f": {code_name}" if code_name else ""
    return _ApiError(400, 7500, f"D1_ERROR: {message}{suffix}")


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


def _unhex(text: Any, ignore: str = "") -> bytes | None:
    """SQLite's unhex() (3.41+) for older libraries: NULL unless `text` is hex pairs, optionally
    separated by characters from `ignore`."""
    if text is None:
        return None
    text = text.decode("utf-8", "replace") if isinstance(text, bytes) else str(text)
    out = bytearray()
    i = 0
    while i < len(text):
        if text[i] in ignore:
            i += 1
            continue
        pair = text[i : i + 2]
        if len(pair) < 2 or not all(ch in string.hexdigits for ch in pair):
            return None
        out.append(int(pair, 16))
        i += 2
    return bytes(out)


_JS_SAFE = 2**53


def _json_value(value: Any) -> Any:
    """A result value as D1 (JavaScript) serializes it: numbers are doubles."""
    if isinstance(value, bytes):
        return list(value)  # D1 returns BLOBs as arrays of byte values
    if isinstance(value, float):
        if not math.isfinite(value):
            return None
        # A double with an integral value prints as an integer in JSON: REAL 2.0 -> 2.
        return int(value) if value.is_integer() and abs(value) <= _JS_SAFE else value
    if isinstance(value, int) and abs(value) > _JS_SAFE:
        return int(float(value))  # beyond 2**53 a JavaScript number loses precision
    return value


def _bind_value(value: Any) -> Any:
    """A JSON parameter as D1 binds it: every number is a JavaScript double, so it binds as REAL
    (probed on workerd: typeof(?) is 'real' for 5). INTEGER columns turn 5.0 back into 5."""
    if isinstance(value, (bool, int)):
        return float(value)
    return value


class _Database:
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
            conn.create_function("unhex", 1, _unhex, deterministic=True)
            conn.create_function(
                "unhex", 2, lambda x, y: None if y is None else _unhex(x, str(y)), deterministic=True
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
            self._refusal = _TRANSACTION_REFUSED
            return sqlite3.SQLITE_DENY
        if action in (sqlite3.SQLITE_ATTACH, sqlite3.SQLITE_DETACH):
            return sqlite3.SQLITE_DENY  # "not authorized: SQLITE_AUTH", as on D1
        if action == sqlite3.SQLITE_FUNCTION and (arg2 or "").lower() in _DENIED_FUNCTIONS:
            return sqlite3.SQLITE_DENY  # SQLite words this "not authorized to use function: X"
        if action == sqlite3.SQLITE_PRAGMA and (arg1 or "").lower() not in _ALLOWED_PRAGMAS:
            return sqlite3.SQLITE_DENY
        if action in _DDL_ACTIONS:
            self._ddl = True
        return sqlite3.SQLITE_OK

    def _trusted_execute(self, sql: str) -> list[tuple[Any, ...]]:
        self._trusted = True
        try:
            return self.conn.execute(sql).fetchall()
        finally:
            self._trusted = False

    def run(self, statements: list[tuple[str, list[Any], bool]], raw: bool) -> list[dict[str, Any]]:
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
            raise _d1_error("When executing multiple SQL statements in a single call, only the "
                            "last statement can have parameters.", None) from None
        except sqlite3.Error as exc:
            raise self._translate(exc) from None

    def _run_one(self, sql: str, params: list[Any], raw: bool) -> dict[str, Any]:
        self._ddl, self._refusal = False, None
        before = self.conn.total_changes
        started = time.perf_counter()
        try:
            cursor = self.conn.execute(sql, [_bind_value(p) for p in params])
            columns = [d[0] for d in cursor.description or ()]
            rows = [[_json_value(v) for v in row] for row in cursor.fetchall()]
        except sqlite3.Error as exc:
            raise self._translate(exc) from None
        except (ValueError, OverflowError) as exc:
            raise _d1_error(str(exc)) from None
        duration_ms = (time.perf_counter() - started) * 1000
        changes_now, last_row_id, size = self._trusted_execute(
            "SELECT changes(), last_insert_rowid(),"
            " (SELECT page_count FROM pragma_page_count()) * (SELECT page_size FROM pragma_page_size())"
        )[0]
        # changes() keeps the count of the last DML statement, so only trust it if this one wrote.
        changes = changes_now if self.conn.total_changes != before else 0
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
            "rows_written": changes,
            "size_after": size,
            "served_by": "d1saver.local",
            "served_by_region": "local",
            "served_by_primary": True,
        }
        return {"results": results, "success": True, "meta": meta}

    def _translate(self, exc: sqlite3.Error) -> _ApiError:
        if self._refusal and getattr(exc, "sqlite_errorname", None) == "SQLITE_AUTH":
            return _d1_error(self._refusal, None)
        if isinstance(exc, sqlite3.ProgrammingError) and "number of bindings" in str(exc):
            return _d1_error("Wrong number of parameter bindings for SQL query.", None)
        name = getattr(exc, "sqlite_errorname", None) or "SQLITE_ERROR"
        primary = "_".join(name.split("_")[:2])  # SQLITE_CONSTRAINT_PRIMARYKEY -> SQLITE_CONSTRAINT
        if primary != name:  # D1 words it "...: SQLITE_CONSTRAINT (extended: SQLITE_CONSTRAINT_PRIMARYKEY)"
            primary = f"{primary} (extended: {name})"
        return _d1_error(str(exc), primary)

    def close(self) -> None:
        with self.lock:
            self.conn.close()


def _envelope_error(status: int, code: int, message: str) -> tuple[int, dict[str, Any]]:
    return status, {"success": False, "errors": [{"code": code, "message": message}], "messages": [], "result": None}


def _parse_entry(entry: Any, where: str) -> tuple[str, list[Any]]:
    if not isinstance(entry, dict) or not isinstance(entry.get("sql"), str):
        raise _ApiError(400, 7400, f"{where} must be an object with a string 'sql'")
    params = entry.get("params")
    if params is None:
        params = []
    if not isinstance(params, list):
        raise _ApiError(400, 7400, f"{where}.params must be an array")
    for i, value in enumerate(params):
        if value is not None and not isinstance(value, (str, int, float)):
            raise _ApiError(400, 7400, f"{where}.params[{i}] must be a string, number, boolean or null")
    return entry["sql"], params


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _parse_body(body: bytes) -> list[tuple[str, list[Any]]]:
    try:
        payload = json.loads(body, parse_constant=_reject_constant)
    except (ValueError, UnicodeDecodeError) as exc:
        raise _ApiError(400, 7400, f"The request body is not valid JSON: {exc}") from None
    if not isinstance(payload, dict):
        raise _ApiError(400, 7400, "The request body must be a JSON object")
    if ("sql" in payload) == ("batch" in payload):
        raise _ApiError(400, 7400, "The request body must hold exactly one of 'sql' or 'batch'")
    if "sql" in payload:
        return [_parse_entry(payload, "body")]
    batch = payload["batch"]
    if not isinstance(batch, list) or not batch:
        raise _ApiError(400, 7400, "'batch' must be a non-empty array")
    return [_parse_entry(entry, f"batch[{i}]") for i, entry in enumerate(batch)]


def _expand(entries: list[tuple[str, list[Any]]]) -> list[tuple[str, list[Any], bool]]:
    """(statement, params, answers) per statement, applying D1's length and multi-statement rules.

    Several statements in one sql answer one result each; with params, as on D1, only the last
    may use them and only the last answers."""
    statements: list[tuple[str, list[Any], bool]] = []
    for sql, params in entries:
        if len(sql.encode("utf-8", "surrogatepass")) > MAX_SQL_BYTES:
            raise _d1_error("statement too long", "SQLITE_TOOBIG")
        pieces = split_statements(sql)
        if not pieces:
            raise _d1_error("No SQL statements detected.", None)
        if len(pieces) > 1 and params:
            statements.extend((piece, [], False) for piece in pieces[:-1])
            statements.append((pieces[-1], params, True))
        else:
            statements.extend((piece, params, True) for piece in pieces)
    return statements


class LocalD1:
    """D1's REST API over local SQLite: one database per database id, in memory or in `data_dir`.

    `handle()` takes a raw HTTP request and returns a `LocalResponse`; it raises `DroppedConnection`
    when the fault plan drops the connection.
    """

    def __init__(
        self,
        data_dir: str | os.PathLike[str] | None = None,
        *,
        api_token: str | None = None,
        faults: FaultPlan | None = None,
    ) -> None:
        self.data_dir = Path(data_dir) if data_dir is not None else None
        if self.data_dir is not None:
            self.data_dir.mkdir(parents=True, exist_ok=True)
        self._api_token = api_token
        self.faults = faults
        self.stats = EngineStats()
        self._databases: dict[str, _Database] = {}
        self._lock = threading.Lock()
        self._closed = False

    def __enter__(self) -> LocalD1:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"LocalD1(data_dir={str(self.data_dir) if self.data_dir else None!r})"

    def close(self) -> None:
        """Close every database connection; the engine cannot be used afterwards."""
        with self._lock:
            self._closed = True
            databases, self._databases = list(self._databases.values()), {}
        for database in databases:
            database.close()

    def _database(self, database_id: str) -> _Database:
        with self._lock:
            if self._closed:
                raise RuntimeError("LocalD1 is closed")
            database = self._databases.get(database_id)
            if database is None:
                target = str(self.data_dir / f"{database_id}.sqlite") if self.data_dir else ":memory:"
                database = self._databases[database_id] = _Database(target)
            return database

    def handle(self, method: str, path: str, headers: Mapping[str, str], body: bytes) -> LocalResponse:
        """Answer one HTTP request the way D1's REST API would."""
        self.stats.add(requests=1, bytes_received=len(body))
        fault = self.faults.decide() if self.faults else None
        if fault is not None and fault.kind is Fault.DROP:
            raise DroppedConnection("connection dropped before the request was executed")
        extra: dict[str, str] = {}
        if fault is not None and fault.kind in (Fault.RATE_LIMITED, Fault.SERVER_ERROR):
            status, extra, payload = fault.response()
        else:
            status, payload = self._dispatch(method, path, headers, body)
        response = LocalResponse(
            status,
            {"Content-Type": "application/json", "X-RateLimit-Limit": str(RATE_LIMIT), **extra},
            json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode(),
        )
        if fault is not None and fault.kind is Fault.LOST_RESPONSE:
            raise DroppedConnection("connection dropped after the request was executed")
        self.stats.add(bytes_sent=len(response.body))
        return response

    def _dispatch(
        self, method: str, path: str, headers: Mapping[str, str], body: bytes
    ) -> tuple[int, dict[str, Any]]:
        path = path.split("?", 1)[0]
        match = _ROUTE.match(path)
        if match is None or not _DATABASE_ID.match(match.group(2)):
            return _envelope_error(404, 7003, f"Could not route to {path}, perhaps your object identifier is invalid?")
        if method.upper() != "POST":
            return _envelope_error(405, 7001, f"Method {method.upper()} not allowed for {path}")
        if not self._authorized(headers):
            return _envelope_error(401, 10000, "Authentication error")
        try:
            statements = _expand(_parse_body(body))
            database = self._database(match.group(2))
            self.stats.add(statements=len(statements))
            with database.lock:
                results = database.run(statements, raw=match.group(3) == "raw")
        except _ApiError as exc:
            return _envelope_error(exc.status, exc.code, exc.message)
        self.stats.add(rows_written=sum(r["meta"]["rows_written"] for r in results))
        return 200, {"success": True, "errors": [], "messages": [], "result": results}

    def _authorized(self, headers: Mapping[str, str]) -> bool:
        value = next((v for k, v in headers.items() if k.lower() == "authorization"), "")
        scheme, _, token = value.partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            return False
        if self._api_token is None:
            return True
        return hmac.compare_digest(token.encode(), self._api_token.encode())
