"""D1Cache: LangGraph's node cache (`BaseCache`) in D1, sync and async on one instance.

Entries are (namespace, key) -> the serde's (type, bytes), codec-encoded, or sealed with keys
and bound to (namespace, key, type). A `get` or `set` is one request per database it touches
(one, for a single database), whatever the number of keys; an expired entry is never returned
(each read compares expires_at with now) and is deleted by the sweep (`sweep_ttl`, and
`d1saver compact`). Over several databases an entry lives by its namespace and key
(d1saver/memory/placement.py), so LangGraph's node cache spreads over the fleet.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, Generic, TypeVar

from langgraph.cache.base import BaseCache, FullKey, Namespace

from d1saver.core.errors import InvalidInputError
from d1saver.core.protocol import Result, Statement
from d1saver.http import telemetry
from d1saver.memory import namespaces as _ns
from d1saver.memory import values as _values
from d1saver.memory.base import Memory
from d1saver.memory.plan import json_lists
from d1saver.sql import memory as _sql

ValueT = TypeVar("ValueT")


class D1Cache(Memory, BaseCache[ValueT], Generic[ValueT]):
    """LangGraph's `BaseCache` on Cloudflare D1, constructed as `D1Saver` is (`serde` as the
    saver's; with `encryption_keys`, entries are sealed). Over several databases an entry
    lives by a hash of its namespace and key (with a `route`: its namespace's first label's
    database); `previous_database_ids` while `d1saver rebalance` moves entries."""

    def __init__(self, **kwargs: Any) -> None:
        Memory.__init__(self, **kwargs)

    # --- BaseCache --------------------------------------------------------------------------
    #
    # Each call is rounds of requests, one request per database in each (d1saver/memory/base.py):
    # one round but while migrating (previous_database_ids), when what moved costs a round
    # before its home's (its previous homes' reads and deletes) or after it (a set's old copy
    # deleted once the home holds the new value).

    def get(self, keys: Sequence[FullKey]) -> dict[FullKey, ValueT]:
        rounds = self._get_rounds(keys)
        return self._read([self._each_round(r, "cache get") for r in rounds])

    async def aget(self, keys: Sequence[FullKey]) -> dict[FullKey, ValueT]:
        rounds = self._get_rounds(keys)
        return self._read([await self._aeach_round(r, "cache get") for r in rounds])

    def set(self, pairs: Mapping[FullKey, tuple[ValueT, int | None]]) -> None:
        for round_ in self._set_rounds(pairs):
            self._each_round(round_, "cache set")

    async def aset(self, pairs: Mapping[FullKey, tuple[ValueT, int | None]]) -> None:
        for round_ in self._set_rounds(pairs):
            await self._aeach_round(round_, "cache set")

    def clear(self, namespaces: Sequence[Namespace] | None = None) -> None:
        self.clear_and_count(namespaces)

    def clear_and_count(self, namespaces: Sequence[Namespace] | None = None) -> int:
        """`clear`, returning how many entries it deleted (`d1saver cache clear` prints it)."""
        deleted = 0
        for round_ in self._clear_rounds(namespaces):
            done = self._each_round(round_, "cache clear")
            deleted += sum(results[0].changes for results in done.values())
        return deleted

    async def aclear(self, namespaces: Sequence[Namespace] | None = None) -> None:
        for round_ in self._clear_rounds(namespaces):
            await self._aeach_round(round_, "cache clear")

    def sweep_ttl(self) -> int:
        """Delete expired entries in every database; returns how many."""
        stmt = [Statement.bind(_sql.SWEEP_CACHE, {"now": self.clock()})]
        done = self._fleet.each(lambda db: self._exchange(db, stmt), "sweep_ttl",
                                self.every_database_id)
        return sum(results[0].changes for results in done.values())

    # --- where an entry lives ---------------------------------------------------------------

    def home_of(self, namespace: Sequence[str], key: str) -> str:
        """The id of the database a cache entry lives in: by its namespace and key (LangGraph's
        node cache spreads over the fleet), or by its first label with a `route`."""
        return self.layout.entry_home(namespace, key)

    # --- statements -------------------------------------------------------------------------

    def _get_rounds(self, keys: Sequence[FullKey]) -> list[dict[str, list[Statement]]]:
        rounds: list[dict[str, list[list[str]]]] = [{}, {}]
        for ns, key in keys:
            _check(ns, key)
            row = [_ns.encode(ns), key]
            for db in self.layout.entry_previous(ns, key):
                rounds[0].setdefault(db, []).append(row)
            rounds[1].setdefault(self.home_of(ns, key), []).append(row)
        now = self.clock()
        return [{db: [Statement.bind(_sql.CACHE_GET, {"keys": param, "now": now})
                      for param in json_lists(rows, "a cache key")]
                 for db, rows in by_db.items()} for by_db in rounds if by_db]

    def _read(self, rounds: Sequence[Mapping[str, list[Result]]]) -> dict[FullKey, ValueT]:
        """The entries found, each from its home if there (the later round), else from where
        it still is (a previous home, read first)."""
        found: dict[tuple[str, str], tuple[bool, str]] = {}
        for done in rounds:
            for db, results in done.items():
                for row in (r for result in results for r in result.dicts()):
                    where = (row["ns"], row["key"])
                    home = self.home_of(_ns.decode(row["ns"]), row["key"]) == db
                    if where not in found or home or not found[where][0]:
                        found[where] = (home, row["value"])
        out: dict[FullKey, ValueT] = {}
        sealer = self.sealer
        for (ns, key), (_, value) in found.items():
            type_, data = _values.load_entry(value, ns, key, sealer)
            out[(_ns.decode(ns), key)] = self.serde.loads_typed((type_, data))
        return out

    def _set_rounds(self, pairs: Mapping[FullKey, tuple[ValueT, int | None]]
                    ) -> list[dict[str, list[Statement]]]:
        now = self.clock()
        sealer = self.sealer
        by_db: dict[str, list[list[Any]]] = {}
        stale: dict[str, list[list[str]]] = {}
        for (ns, key), (value, ttl) in pairs.items():
            _check(ns, key)
            if ttl is not None:
                _values.check_ttl(ttl, "seconds", 1)
            text = _ns.encode(ns)
            type_, data = self.serde.dumps_typed(value)
            stored = _values.dump_entry(type_, data, text, key, sealer)
            by_db.setdefault(self.home_of(ns, key), []).append(
                [text, key, stored, None if ttl is None else now + float(ttl)])
            for db in self.layout.entry_previous(ns, key):
                stale.setdefault(db, []).append([text, key])
        rounds = [{db: [Statement.bind(_sql.CACHE_SET, {"rows": param})
                        for param in json_lists(rows, "a cache entry")]
                   for db, rows in by_db.items()}]
        if stale:  # after the home holds the new value: the old copy goes
            rounds.append({db: [Statement.bind(_sql.CACHE_DELETE, {"keys": param})
                                for param in json_lists(rows, "a cache key")]
                           for db, rows in stale.items()})
        return rounds

    def _clear_rounds(self, namespaces: Sequence[Namespace] | None
                      ) -> list[dict[str, list[Statement]]]:
        """A namespace's entries are spread over the fleet (by key): every database is cleared
        of it, but with a `route` (its first label's). While migrating, every database first,
        then the current ones again, each voiding the memory moves into it (delete wins)."""
        if namespaces is None:
            names = None
            dbs: list[str] = list(self.database_ids)
        else:
            listed: list[str] = []
            homes: list[str] = []
            for ns in namespaces:
                _check(ns, "")
                listed.append(_ns.encode(ns))
                homes += self.layout.namespace_homes(ns) or list(self.database_ids)
            names, dbs = json.dumps(listed), list(dict.fromkeys(homes))
        clear = Statement.bind(_sql.CACHE_CLEAR, {"namespaces": names})
        if self.previous_database_ids is None:
            return [{db: [clear] for db in dbs}]
        return [{db: [clear] for db in self.every_database_id},
                {db: [clear, self._void()] for db in dbs}]


def _check(ns: Any, key: Any) -> None:
    if not isinstance(ns, tuple | list) or not all(isinstance(label, str) for label in ns):
        raise InvalidInputError(f"a cache namespace is a tuple of strings, not {ns!r}")
    _values.check_key(key, "a cache key")


# An INTERNAL span per public call, when OpenTelemetry is installed (d1saver/http/telemetry.py).
telemetry.instrument(D1Cache, ["setup", "asetup", "get", "aget", "set", "aset", "clear",
                               "aclear", "sweep_ttl"])


__all__ = ["D1Cache"]
