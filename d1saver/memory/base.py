"""What D1Store and D1Cache share with D1Saver: the constructor's arguments, the databases
(each with its client, driver with its once-only schema setup, operations) and the routing
of a namespace to its database by its first label."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from types import TracebackType
from typing import Any, TypeVar

import httpx
from langgraph.checkpoint.serde.base import SerializerProtocol

from d1saver.core.errors import SchemaNotReadyError
from d1saver.core.protocol import Result, Statement, Tracer
from d1saver.core.settings import DEFAULT_API_BASE_URL, load_settings
from d1saver.fleet.databases import Database, client_factory, database_lists, make_databases
from d1saver.fleet.fleet import DEFAULT_CONCURRENCY, Fleet
from d1saver.fleet.routing import MEMORY_MOVE_PREFIX, Route, Router
from d1saver.memory.placement import Layout
from d1saver.sql import memory as _sql
from d1saver.http.retry import RetryPolicy
from d1saver.storage.crypto import Key, Sealer, keys_from_env
from d1saver.storage.serde import default_serde, trusted_serde
from d1saver.storage.values import Values

T = TypeVar("T")
M = TypeVar("M", bound="Memory")


class Memory:
    """Databases reached as D1Saver reaches them, and where a namespace lives.

    A namespace lives in the database its first label routes to (rendezvous hashing of the
    label over `database_ids`, or `route(label)`): a user's memory under ("user-1", ...)
    stays in one database (d1saver/memory/placement.py). `clock` gives unix seconds
    (created_at, TTLs).

    While `d1saver rebalance` moves memory after the database list changed,
    `previous_database_ids` (the list before) keeps everything where it may still be in
    view: an operation whose namespace lived elsewhere asks its previous home first, then its
    home, and a write never leaves a second copy nor brings an old value back (docs/STORE.md,
    "Fleet"): one more request, only for what moved, only while migrating.
    """

    def __init__(
        self,
        *,
        account_id: str,
        database_id: str | None = None,
        database_ids: Sequence[str] | None = None,
        api_token: str,
        api_base_url: str = DEFAULT_API_BASE_URL,
        serde: SerializerProtocol | None = None,
        timeout: httpx.Timeout | float | None = None,
        retry: RetryPolicy | None = None,
        transport: httpx.BaseTransport | httpx.AsyncBaseTransport | None = None,
        async_transport: httpx.AsyncBaseTransport | None = None,
        tracer: Tracer | None = None,
        auto_setup: bool = True,
        route: Route | None = None,
        previous_database_ids: Sequence[str] | None = None,
        fleet_concurrency: int = DEFAULT_CONCURRENCY,
        encryption_keys: Sequence[Key] | Key | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        sealer = None if encryption_keys is None else Sealer(encryption_keys)
        serde = serde or default_serde()
        self.serde = serde if sealer is None else trusted_serde(serde)
        ids, previous = database_lists(database_id, database_ids, previous_database_ids)
        new_client = client_factory(
            account_id=account_id, api_token=api_token, api_base_url=api_base_url, retry=retry,
            transport=transport, async_transport=async_transport, tracer=tracer, timeout=timeout)
        databases = make_databases([*ids, *(previous or [])], new_client,
                                   Values(self.serde, sealer), guard_head=False,
                                   auto_setup=auto_setup, group_commit=False,
                                   group_commit_window=None)
        router = Router(ids, route)
        old = None if previous is None else Router(previous)
        self._fleet = Fleet(databases, router, old, fleet_concurrency)
        self.layout = Layout(router, old)
        self.account_id = account_id
        self.database_id = ids[0] if len(ids) == 1 else None
        self.clock = clock
        self.unready: set[str] = set()  # read-only: databases found without a schema

    @classmethod
    def from_env(cls: type[M], *, account_id: str | None = None, database_id: str | None = None,
                 api_base_url: str | None = None, api_token: str | None = None,
                 **kwargs: Any) -> M:
        """Build from the environment exactly as `D1Saver.from_env` does (CLOUDFLARE_ACCOUNT_ID,
        CLOUDFLARE_API_TOKEN, D1_DATABASE_ID, D1_API_BASE_URL, D1SAVER_ENCRYPTION_KEYS);
        arguments that are not None override them."""
        settings = load_settings(account_id=account_id, database_id=database_id,
                                 api_base_url=api_base_url, api_token=api_token)
        if kwargs.get("encryption_keys") is None:
            kwargs["encryption_keys"] = keys_from_env()
        ids = settings.database_ids
        where: dict[str, Any] = ({"database_id": ids[0]} if len(ids) == 1
                                 else {"database_ids": ids})
        return cls(account_id=settings.account_id, **where,
                   api_token=settings.api_token.get_secret_value(),
                   api_base_url=settings.api_base_url, **kwargs)

    # --- databases ------------------------------------------------------------------------

    @property
    def database_ids(self) -> tuple[str, ...]:
        return self._fleet.database_ids

    @property
    def sealer(self) -> Sealer | None:
        return self._fleet.sealer

    @property
    def previous_database_ids(self) -> tuple[str, ...] | None:
        """The database list before the last change, while memory moves (see rebalance)."""
        previous = self._fleet.previous
        return None if previous is None else previous.database_ids

    @property
    def every_database_id(self) -> list[str]:
        """Every database memory may be in: the current ones, then the previous ones."""
        return list(self._fleet.databases)

    def home(self, namespace: Sequence[str]) -> str:
        """The id of the database a namespace lives in (by its first label)."""
        return self.layout.item_home(namespace)

    def _void(self) -> Statement:
        """Voids every memory move into a database (sent with a delete there while
        migrating): a move that read the old home before the delete reached it publishes
        nothing (delete wins)."""
        return Statement.bind(_sql.VOID_MEMORY_MOVES, _moves_range())

    def _each_round(self, round_: Mapping[str, Sequence[Statement]], operation: str
                    ) -> dict[str, list[Result]]:
        """One request to each database of `round_`, concurrently: their results."""
        return self._fleet.each(lambda db: self._exchange(db, round_[db.database_id]),
                                operation, list(round_))

    async def _aeach_round(self, round_: Mapping[str, Sequence[Statement]], operation: str
                           ) -> dict[str, list[Result]]:
        async def one(db: Database) -> list[Result]:
            return await self._aexchange(db, round_[db.database_id])

        return await self._fleet.aeach(one, operation, list(round_))

    def _database(self, namespace: Sequence[str]) -> Database:
        return self._fleet.databases[self.home(namespace)]

    def _databases(self) -> list[Database]:
        return list(self._fleet.databases.values())

    def setup(self) -> None:
        """Create or migrate the schema in every database (one request each, once)."""
        self._fleet.each(lambda db: db.run(lambda ops: ops.setup_once()), "setup")

    async def asetup(self) -> None:
        await self._fleet.aeach(lambda db: db.arun(lambda ops: ops.setup_once()), "setup")

    @property
    def read_only(self) -> bool:
        """True: never create nor migrate a schema (the CLI's `store ls/get/namespaces`). A
        database without d1saver's schema raises SchemaNotReadyError; over several databases
        it reads as empty instead, and its id joins `unready`."""
        return next(iter(self._fleet.databases.values())).ops.read_only

    @read_only.setter
    def read_only(self, value: bool) -> None:
        self._fleet.set_ops("read_only", bool(value))

    def _exchange(self, db: Database, statements: Sequence[Statement]) -> list[Result]:
        """Statements in one request to `db`, on its driver (the runner's sync loop)."""
        try:
            return db.run(lambda ops: ops.exchange(statements))
        except SchemaNotReadyError as exc:
            return self._unready(db, statements, exc)

    async def _aexchange(self, db: Database, statements: Sequence[Statement]) -> list[Result]:
        try:
            return await db.arun(lambda ops: ops.exchange(statements))
        except SchemaNotReadyError as exc:
            return self._unready(db, statements, exc)

    def _unready(self, db: Database, statements: Sequence[Statement],
                 exc: SchemaNotReadyError) -> list[Result]:
        """A read-only instance over several databases reads one without a schema as empty."""
        if exc.version or not self._fleet.spans:
            raise exc
        self.unready.add(db.database_id)
        return [Result([], []) for _ in statements]

    # --- lifecycle ------------------------------------------------------------------------

    def close(self) -> None:
        for db in self._databases():
            db.client.close()

    async def aclose(self) -> None:
        for db in self._databases():
            await db.client.aclose()

    def __enter__(self: M) -> M:
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    async def __aenter__(self: M) -> M:
        return self

    async def __aexit__(self, et: type[BaseException] | None, ev: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.aclose()

    def __repr__(self) -> str:
        where = (f"database_id={self.database_id!r}" if self.database_id is not None
                 else f"database_ids={list(self.database_ids)!r}")
        return f"{type(self).__name__}(account_id={self.account_id!r}, {where})"


def _moves_range() -> dict[str, str]:
    """The range of d1saver_moves' keys that memory moves register under."""
    return {"low": MEMORY_MOVE_PREFIX,
            "high": MEMORY_MOVE_PREFIX[:-1] + chr(ord(MEMORY_MOVE_PREFIX[-1]) + 1)}


__all__ = ["Memory"]
