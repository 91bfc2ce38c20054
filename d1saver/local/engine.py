"""A local stand-in for Cloudflare D1: answers D1's REST API (`/query`, `/raw`) from SQLite databases.

It enforces D1's documented limits and the SQL rules seen on D1's engine, so that code which works
here has a good chance of working on a real D1, and it can inject faults deterministically.

This module routes and authenticates a request and applies the fault plan; the rest is done by
`request` (the body and D1's statement rules), `registry` and `database` (SQLite run as D1 runs
it, with `values` for D1's value rules) and `envelope` (Cloudflare's JSON envelope).
"""

from __future__ import annotations

import hmac
import os
import re
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from d1saver.core.errors import ConfigError
from d1saver.core.ids import validate_account_id, validate_database_id

from .envelope import ApiError, LocalResponse, encode, error_envelope, success_envelope
from .faults import RATE_LIMIT, DroppedConnection, Fault, FaultPlan
from .registry import Registry, UnknownDatabase
from .request import parse_request, split_statements
from .stats import EngineStats

__all__ = ["DroppedConnection", "EngineStats", "LocalD1", "LocalResponse", "split_statements"]

_ROUTE = re.compile(r"/client/v4/accounts/([^/]+)/d1/database/([^/]+)/(query|raw)/?\Z")


class LocalD1:
    """D1's REST API over local SQLite: one database per database id, in memory or in `data_dir`.

    `handle()` takes a raw HTTP request and returns a `LocalResponse`; it raises `DroppedConnection`
    when the fault plan drops the connection. A request naming an invalid account or database id
    (see `d1saver.core.ids`) gets a 404 and never reaches the file system.

    `create` (the default, which tests and the demo rely on) makes a database on the first request
    naming a new id; with create=False an unknown id gets D1's own 404 (code 7404), as on an
    account, and databases are made with `create_database` (`d1saver serve --database NAME`).

    `service_time_ms` imitates D1's execution time: each statement takes that long while its
    database is held, so requests to one database queue behind each other as on D1 (one query
    at a time per database) and requests to different databases overlap (the scaling
    benchmark measures this; see docs/SCALING.md).
    """

    def __init__(
        self,
        data_dir: str | os.PathLike[str] | None = None,
        *,
        api_token: str | None = None,
        faults: FaultPlan | None = None,
        service_time_ms: float = 0.0,
        create: bool = True,
        on_create: Callable[[str, str], None] | None = None,
    ) -> None:
        self.service_s = max(0.0, service_time_ms) / 1000
        self.data_dir = Path(data_dir) if data_dir is not None else None
        self._api_token = api_token
        self.faults = faults
        self.stats = EngineStats()
        self._registry = Registry(self.data_dir, create=create, on_create=on_create)

    def __enter__(self) -> LocalD1:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"LocalD1(data_dir={str(self.data_dir) if self.data_dir else None!r})"

    def close(self) -> None:
        """Close every database connection; the engine cannot be used afterwards."""
        self._registry.close()

    def create_database(self, database_id: str) -> None:
        """Create `database_id` now (an engine built with create=False refuses unknown ids)."""
        self._registry.create(database_id)

    def database_ids(self) -> list[str]:
        """The databases this engine serves, sorted: those created or opened, and those whose
        file is in `data_dir` (an engine built with create=False refuses any other id)."""
        return self._registry.known()

    def handle(self, method: str, path: str, headers: Mapping[str, str], body: bytes) -> LocalResponse:
        """Answer one HTTP request the way D1's REST API would."""
        self.stats.add(requests=1, bytes_received=len(body))
        fault = self.faults.decide() if self.faults else None
        if fault is not None and fault.kind is Fault.DROP:
            raise DroppedConnection("connection dropped before the request was executed")
        extra: dict[str, str] = {}
        if fault is not None and fault.kind in (Fault.RATE_LIMITED, Fault.SERVER_ERROR, Fault.TRANSIENT):
            if fault.executed:
                self._dispatch(method, path, headers, body)
            status, extra, payload = fault.response()
        else:
            status, payload = self._dispatch(method, path, headers, body)
        response = LocalResponse(
            status,
            {"Content-Type": "application/json", "X-RateLimit-Limit": str(RATE_LIMIT), **extra},
            encode(payload),
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
        if match is None or not _valid_ids(match.group(1), match.group(2)):
            return 404, error_envelope(7003, f"Could not route to {path}, perhaps your object identifier is invalid?")
        if method.upper() != "POST":
            return 405, error_envelope(7001, f"Method {method.upper()} not allowed for {path}")
        if not self._authorized(headers):
            return 401, error_envelope(10000, "Authentication error")
        try:
            statements = parse_request(body)
            try:
                database = self._registry.get(match.group(2))
            except UnknownDatabase:  # D1's answer for an id the account does not have
                return 404, error_envelope(7404, f"The database {match.group(2)} could not be found")
            self.stats.add(statements=len(statements))
            with database.lock:
                results = database.run(statements, raw=match.group(3) == "raw")
                if self.service_s:
                    time.sleep(self.service_s * len(statements))
        except ApiError as exc:
            return exc.status, error_envelope(exc.code, exc.message)
        self.stats.add(rows_written=sum(r["meta"]["rows_written"] for r in results))
        return 200, success_envelope(results)

    def _authorized(self, headers: Mapping[str, str]) -> bool:
        value = next((v for k, v in headers.items() if k.lower() == "authorization"), "")
        scheme, _, token = value.partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            return False
        if self._api_token is None:
            return True
        return hmac.compare_digest(token.encode(), self._api_token.encode())


def _valid_ids(account_id: str, database_id: str) -> bool:
    """True if both ids pass d1saver's id rules, the same the client applies before sending."""
    try:
        validate_account_id(account_id)
        validate_database_id(database_id)
    except ConfigError:
        return False
    return True
