"""D1Cache: LangGraph's node cache (`BaseCache`) in D1, sync and async on one instance.

Entries are (namespace, key) -> the serde's (type, bytes), codec-encoded, or sealed with keys
and bound to (namespace, key, type). A `get` or `set` is one request per database it touches
(one, for a single database), whatever the number of keys; an expired entry is never returned
(each read compares expires_at with now) and is deleted by the sweep (`sweep_ttl`, and
`d1saver compact`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, Generic, TypeVar

from langgraph.cache.base import BaseCache, FullKey, Namespace

from d1saver.core.errors import InvalidInputError
from d1saver.core.protocol import Result, Statement
from d1saver.fleet.databases import Database
from d1saver.memory import namespaces as _ns
from d1saver.memory import values as _values
from d1saver.memory.base import Memory
from d1saver.memory.plan import _json_lists
from d1saver.sql import memory as _sql

ValueT = TypeVar("ValueT")


class D1Cache(Memory, BaseCache[ValueT], Generic[ValueT]):
    """LangGraph's `BaseCache` on Cloudflare D1, constructed as `D1Saver` is (`serde` as the
    saver's; with `encryption_keys`, entries are sealed). Over several databases an entry
    lives in the database of its namespace's first label."""

    def __init__(self, **kwargs: Any) -> None:
        Memory.__init__(self, **kwargs)

    # --- BaseCache --------------------------------------------------------------------------

    def get(self, keys: Sequence[FullKey]) -> dict[FullKey, ValueT]:
        plans = self._get_plans(keys)
        found = self._fleet.each(lambda db: self._exchange(db, plans[db.database_id]),
                                 "cache get", list(plans))
        return self._read(found.values())

    async def aget(self, keys: Sequence[FullKey]) -> dict[FullKey, ValueT]:
        plans = self._get_plans(keys)

        async def one(db: Database) -> list[Result]:
            return await self._aexchange(db, plans[db.database_id])

        found = await self._fleet.aeach(one, "cache get", list(plans))
        return self._read(found.values())

    def set(self, pairs: Mapping[FullKey, tuple[ValueT, int | None]]) -> None:
        plans = self._set_plans(pairs)
        self._fleet.each(lambda db: self._exchange(db, plans[db.database_id]),
                         "cache set", list(plans))

    async def aset(self, pairs: Mapping[FullKey, tuple[ValueT, int | None]]) -> None:
        plans = self._set_plans(pairs)

        async def one(db: Database) -> list[Result]:
            return await self._aexchange(db, plans[db.database_id])

        await self._fleet.aeach(one, "cache set", list(plans))

    def clear(self, namespaces: Sequence[Namespace] | None = None) -> None:
        plans = self._clear_plans(namespaces)
        self._fleet.each(lambda db: self._exchange(db, plans[db.database_id]),
                         "cache clear", list(plans))

    async def aclear(self, namespaces: Sequence[Namespace] | None = None) -> None:
        plans = self._clear_plans(namespaces)

        async def one(db: Database) -> list[Result]:
            return await self._aexchange(db, plans[db.database_id])

        await self._fleet.aeach(one, "cache clear", list(plans))

    def sweep_ttl(self) -> int:
        """Delete expired entries in every database; returns how many."""
        stmt = [Statement.bind(_sql.SWEEP_CACHE, {"now": self.clock()})]
        done = self._fleet.each(lambda db: self._exchange(db, stmt), "sweep_ttl")
        return sum(results[0].changes for results in done.values())

    # --- statements -------------------------------------------------------------------------

    def _home_of(self, namespace: Sequence[str]) -> str:
        return self.home(namespace)

    def _get_plans(self, keys: Sequence[FullKey]) -> dict[str, list[Statement]]:
        by_db: dict[str, list[list[str]]] = {}
        for ns, key in keys:
            _check(ns, key)
            by_db.setdefault(self._home_of(ns), []).append([_ns.encode(ns), key])
        now = self.clock()
        return {db: [Statement.bind(_sql.CACHE_GET, {"keys": json.dumps(rows), "now": now})]
                for db, rows in by_db.items()}

    def _read(self, found: Any) -> dict[FullKey, ValueT]:
        out: dict[FullKey, ValueT] = {}
        sealer = self.sealer
        for results in found:
            for row in results[0].dicts():
                type_, data = _values.load_entry(row["value"], row["ns"], row["key"], sealer)
                out[(_ns.decode(row["ns"]), row["key"])] = self.serde.loads_typed((type_, data))
        return out

    def _set_plans(self, pairs: Mapping[FullKey, tuple[ValueT, int | None]]
                   ) -> dict[str, list[Statement]]:
        now = self.clock()
        sealer = self.sealer
        by_db: dict[str, list[list[Any]]] = {}
        for (ns, key), (value, ttl) in pairs.items():
            _check(ns, key)
            if ttl is not None and (not isinstance(ttl, int | float) or ttl != ttl):
                raise InvalidInputError(f"a cache TTL is a number of seconds, not {ttl!r}")
            text = _ns.encode(ns)
            type_, data = self.serde.dumps_typed(value)
            stored = _values.dump_entry(type_, data, text, key, sealer)
            by_db.setdefault(self._home_of(ns), []).append(
                [text, key, stored, None if ttl is None else now + float(ttl)])
        return {db: [Statement.bind(_sql.CACHE_SET, {"rows": param}) for param in _json_lists(rows)]
                for db, rows in by_db.items()}

    def _clear_plans(self, namespaces: Sequence[Namespace] | None) -> dict[str, list[Statement]]:
        if namespaces is None:
            return {db: [Statement.bind(_sql.CACHE_CLEAR, {"namespaces": None})] for db in self.database_ids}
        by_db: dict[str, list[str]] = {}
        for ns in namespaces:
            _check(ns, "")
            by_db.setdefault(self._home_of(ns), []).append(_ns.encode(ns))
        return {db: [Statement.bind(_sql.CACHE_CLEAR, {"namespaces": json.dumps(names)})]
                for db, names in by_db.items()}


def _check(ns: Any, key: Any) -> None:
    if not isinstance(ns, tuple | list) or not all(isinstance(label, str) for label in ns):
        raise InvalidInputError(f"a cache namespace is a tuple of strings, not {ns!r}")
    if not isinstance(key, str):
        raise InvalidInputError(f"a cache key is a string, not {type(key).__name__}")


__all__ = ["D1Cache"]
