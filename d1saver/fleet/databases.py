"""A saver's databases, each a `Database`: its client, its driver (group commit, setup once)
and its operations; and the database lists a saver is given, checked."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import httpx

from d1saver.http.client import D1Client
from d1saver.ops.delta_cache import DeltaCache
from d1saver.http.driver import Driver
from d1saver.core.errors import ConfigError
from d1saver.core.ids import validate_database_ids
from d1saver.ops.operations import Operations
from d1saver.core.protocol import Op
from d1saver.storage.values import Values

T = TypeVar("T")


@dataclass(frozen=True)
class Database:
    """One database of a saver: its client, its driver, its operations."""

    database_id: str
    client: D1Client
    driver: Driver
    ops: Operations

    def run(self, make: Callable[[Operations], Op[T]]) -> T:
        return self.driver.run(make(self.ops))

    async def arun(self, make: Callable[[Operations], Op[T]]) -> T:
        return await self.driver.arun(make(self.ops))


def make_databases(database_ids: Sequence[str], new_client: Callable[[str], D1Client],
               values: Values, *, guard_head: bool, auto_setup: bool, group_commit: bool,
               group_commit_window: float | None) -> dict[str, Database]:
    """A `Database` per distinct database id: its own client, driver (group commit, setup once) and
    operations; one DeltaChannel cache for all, so that a read served by a previous home
    also serves LangGraph's history call after it."""
    cache = DeltaCache()
    databases: dict[str, Database] = {}
    for db in dict.fromkeys(database_ids):
        client = new_client(db)
        ops = Operations(values, client.exchange, guard_head=guard_head, auto_setup=auto_setup)
        ops.delta_cache = cache
        databases[db] = Database(db, client, Driver(client, group_commit=group_commit,
                                            group_commit_window=group_commit_window), ops)
    return databases


def database_lists(database_id: str | None, database_ids: Sequence[str] | None,
                   previous_database_ids: Sequence[str] | None
                   ) -> tuple[list[str], list[str] | None]:
    """The databases threads live in and those of the previous layout, checked."""
    if (database_id is None) == (database_ids is None):
        raise ConfigError("give exactly one of database_id (one database) and database_ids "
                          "(several)")
    ids = validate_database_ids([database_id] if database_ids is None else list(database_ids))
    return ids, (None if previous_database_ids is None
                 else validate_database_ids(list(previous_database_ids)))


def client_factory(*, timeout: httpx.Timeout | float | None, **options: Any) -> Callable[[str], D1Client]:
    """A D1Client per database id, all with these options (timeout: the client's default
    when None)."""
    if timeout is not None:
        options["timeout"] = timeout
    return lambda db: D1Client(database_id=db, **options)


__all__ = ["Database", "client_factory", "database_lists", "make_databases"]
