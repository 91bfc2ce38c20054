"""D1Cache: LangGraph's node cache (`BaseCache`) in D1, sync and async on one instance.

Entries are (namespace, key) -> the serde's (type, bytes), codec-encoded, or sealed with keys
and bound to (namespace, key, type). A `get` or `set` is one request per database it touches
(one, for a single database), whatever the number of keys, and the async calls of one
event-loop tick share such a request (d1saver/memory/coalesce.py); an expired entry is never returned
(each read compares expires_at with now) and is deleted by the sweep (`sweep_ttl`, and
`d1saver compact`). Over several databases an entry lives by its namespace and key
(d1saver/memory/placement.py), so LangGraph's node cache spreads over the fleet.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from langgraph.cache.base import BaseCache, FullKey, Namespace

from d1saver.core.errors import InvalidInputError
from d1saver.core.protocol import Result, Statement
from d1saver.http import telemetry
from d1saver.memory import coalesce as _coalesce
from d1saver.memory import namespaces as _ns
from d1saver.memory import encoding as _encoding
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
        self._tick: _coalesce.Tick[_Call] = _coalesce.Tick(self._aflush)

    # --- BaseCache --------------------------------------------------------------------------
    #
    # Each call is rounds of requests, one request per database in each (d1saver/memory/base.py):
    # one round but while migrating (previous_database_ids), when what moved costs a round
    # before its home's (its previous homes' reads and deletes) or after it (a set's old copy
    # deleted once the home holds the new value). The async calls of one event-loop tick are
    # gathered into one round (d1saver/memory/coalesce.py), except while migrating: then each
    # runs its own rounds, as the sync calls do.

    def get(self, keys: Sequence[FullKey]) -> dict[FullKey, ValueT]:
        rounds = self._get_rounds(keys)
        return self._read([self._each_round(r, "cache get") for r in rounds])

    async def aget(self, keys: Sequence[FullKey]) -> dict[FullKey, ValueT]:
        """As `get`, gathered with the other calls of this event-loop tick (one request per
        database for all of them); while migrating, a get of an entry that may still be at a
        previous home runs its own rounds in its place in call order (docs/STORE.md,
        "Concurrent async calls")."""
        previous, rows = self._get_rows(keys)
        found: dict[FullKey, ValueT] = await self._tick.submit(
            _Call("get", rows, previous), databases=rows, alone=bool(previous))
        return found

    def set(self, pairs: Mapping[FullKey, tuple[ValueT, int | None]]) -> None:
        for round_ in self._set_rounds(pairs):
            self._each_round(round_, "cache set")

    async def aset(self, pairs: Mapping[FullKey, tuple[ValueT, int | None]]) -> None:
        rows, stale = self._set_rows(pairs)
        size = sum(len(row[2]) for part in rows.values() for row in part)
        await self._tick.submit(_Call("set", rows, stale), size=size, databases=rows,
                                alone=bool(stale))

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
        rounds = self._clear_rounds(namespaces)  # in the tick's order, after its sets and gets
        await self._tick.submit(_Call("clear", {}, {}, rounds), databases=rounds[0],
                                alone=len(rounds) > 1)

    # --- gathering: the calls of one tick, in call order ------------------------------------

    async def _aflush(self, calls: list[_coalesce.Call[_Call]]) -> None:
        for run in _coalesce.runs(calls):
            if run[0].alone:
                if not run[0].future.done():  # cancelled while the calls before it were sent
                    try:
                        run[0].settle(await self._asend(run[0].work))
                    except Exception as exc:  # noqa: BLE001 - the error is the gathered call's outcome
                        run[0].fail(exc)
                continue
            for chunk in _coalesce.chunks(run):
                await self._asend_chunk(chunk)

    async def _asend_chunk(self, chunk: list[_coalesce.Call[_Call]]) -> None:
        """The chunk's calls as one request per database: each group's gets, then its sets
        (deduped, the last wins), or a clear; cut while past D1's statements bound."""
        now = self.clock()
        groups = _groups(chunk)
        statements: dict[str, list[Statement]] = {}
        reads: list[dict[str, list[int]]] = []  # group -> db -> its CACHE_GET statements
        for group in groups:
            reads.append({})
            for db in dict.fromkeys(db for c in group for db in c.databases):
                mine = statements.setdefault(db, [])
                gets = list({(r[0], r[1]): r for c in group if c.work.kind == "get"
                             for r in c.work.rows.get(db, [])}.values())
                for param in json_lists(gets, "a cache key"):
                    reads[-1].setdefault(db, []).append(len(mine))
                    mine.append(Statement.bind(_sql.CACHE_GET, {"keys": param, "now": now}))
                sets = {(r[0], r[1]): r for c in group if c.work.kind == "set"
                        for r in c.work.rows.get(db, [])}
                for param in json_lists(list(sets.values()), "a cache entry"):
                    mine.append(Statement.bind(_sql.CACHE_SET, {"rows": param}))
                for c in group:
                    if c.work.kind == "clear":
                        mine.extend(c.work.clear[0].get(db, []))
        parts = _coalesce.cut(chunk, statements)
        if parts:  # each planned once more (not the tail again and again)
            for calls in parts:
                await self._asend_chunk(calls)
            return
        outcomes = await _coalesce.send_each(self._fleet, statements, self._aexchange)
        alone = _coalesce.failures(self._fleet, "cache", chunk, outcomes)
        for group, where in zip(groups, reads, strict=True):
            rows: dict[str, dict[tuple[str, str], dict[str, Any]]] = {}  # by database
            for db, indices in where.items():
                got = outcomes[db]
                if not isinstance(got, Exception):
                    for i in indices:
                        rows.setdefault(db, {}).update(
                            {(r["ns"], r["key"]): r for r in got[i].dicts()})
            for c in group:
                if c.future.done() or c in alone:
                    continue
                if c.work.kind != "get":
                    c.settle(None)
                    continue
                try:
                    asked = {db: [_found([rows[db][(r[0], r[1])] for r in part
                                          if (r[0], r[1]) in rows.get(db, {})])]
                             for db, part in c.work.rows.items()}
                    c.settle(self._read([asked]))
                except Exception as exc:  # noqa: BLE001 - the error is the gathered call's outcome
                    c.fail(exc)
        for c in sorted(alone, key=chunk.index):  # each alone, in call order
            try:
                c.settle(await self._asend(c.work))
            except Exception as exc:  # noqa: BLE001 - the error is the gathered call's outcome
                c.fail(exc)

    async def _asend(self, call: _Call) -> Any:
        """One call alone, in its rounds (one but while migrating): one request per database
        it touches in each, as the sync call sends them."""
        if call.kind == "get":
            rounds = [self._statements("get", by_db) for by_db in (call.previous, call.rows)
                      if by_db]
        elif call.kind == "set":
            rounds = self._set_statements(call.rows, call.previous)
        else:
            rounds = call.clear
        found = [await self._aeach_round(r, f"cache {call.kind}") for r in rounds]
        return self._read(found) if call.kind == "get" else None

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

    def _get_rows(self, keys: Sequence[FullKey]
                  ) -> tuple[dict[str, list[list[Any]]], dict[str, list[list[Any]]]]:
        """The keys as [namespace, key] rows by database: where they may still be (while
        migrating), and their homes."""
        previous: dict[str, list[list[Any]]] = {}
        homes: dict[str, list[list[Any]]] = {}
        for ns, key in keys:
            _check(ns, key)
            row = [_ns.encode(ns), key]
            for db in self.layout.entry_previous(ns, key):
                previous.setdefault(db, []).append(row)
            homes.setdefault(self.home_of(ns, key), []).append(row)
        return previous, homes

    def _get_rounds(self, keys: Sequence[FullKey]) -> list[dict[str, list[Statement]]]:
        return [self._statements("get", by_db) for by_db in self._get_rows(keys) if by_db]

    def _statements(self, kind: str, rows: Mapping[str, list[list[Any]]]
                    ) -> dict[str, list[Statement]]:
        """A get's (rows [ns, key]) or a set's (rows [ns, key, stored, expires_at]) statements
        by database."""
        if kind == "get":
            now = self.clock()
            return {db: [Statement.bind(_sql.CACHE_GET, {"keys": param, "now": now})
                         for param in json_lists(part, "a cache key")]
                    for db, part in rows.items()}
        return {db: [Statement.bind(_sql.CACHE_SET, {"rows": param})
                     for param in json_lists(part, "a cache entry")]
                for db, part in rows.items()}

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
            type_, data = _encoding.load_entry(value, ns, key, sealer)
            out[(_ns.decode(ns), key)] = self.serde.loads_typed((type_, data))
        return out

    def _set_rounds(self, pairs: Mapping[FullKey, tuple[ValueT, int | None]]
                    ) -> list[dict[str, list[Statement]]]:
        return self._set_statements(*self._set_rows(pairs))

    def _set_statements(self, by_db: Mapping[str, list[list[Any]]],
                        stale: Mapping[str, list[list[Any]]]
                        ) -> list[dict[str, list[Statement]]]:
        rounds = [self._statements("set", by_db)]
        if stale:  # after the home holds the new value: the old copy goes
            rounds.append({db: [Statement.bind(_sql.CACHE_DELETE, {"keys": param})
                                for param in json_lists(rows, "a cache key")]
                           for db, rows in stale.items()})
        return rounds

    def _set_rows(self, pairs: Mapping[FullKey, tuple[ValueT, int | None]]
                  ) -> tuple[dict[str, list[list[Any]]], dict[str, list[list[Any]]]]:
        """The entries checked and encoded as rows [ns, key, stored, expires_at] by their home,
        and [ns, key] by where an old copy may still be (while migrating)."""
        now = self.clock()
        sealer = self.sealer
        by_db: dict[str, list[list[Any]]] = {}
        stale: dict[str, list[list[str]]] = {}
        for (ns, key), (value, ttl) in pairs.items():
            _check(ns, key)
            if ttl is not None:
                _encoding.check_ttl(ttl, "seconds", 1)
            text = _ns.encode(ns)
            type_, data = self.serde.dumps_typed(value)
            stored = _encoding.dump_entry(type_, data, text, key, sealer)
            by_db.setdefault(self.home_of(ns, key), []).append(
                [text, key, stored, None if ttl is None else now + float(ttl)])
            for db in self.layout.entry_previous(ns, key):
                stale.setdefault(db, []).append([text, key])
        return by_db, stale

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


@dataclass
class _Call:
    """One cache call, checked and encoded: its rows at their homes by database (get: [ns,
    key]; set: [ns, key, stored, expires_at]) and, while migrating, by where they may still
    be (get: to read there first; set: the old copies to delete after), or a clear's rounds."""

    kind: str
    rows: dict[str, list[list[Any]]]
    previous: dict[str, list[list[Any]]] = field(default_factory=dict)
    clear: list[dict[str, list[Statement]]] = field(default_factory=list)


def _found(rows: Sequence[Mapping[str, Any]]) -> Result:
    """Entries a gathered request read, as a result of their own (what `_read` takes)."""
    return Result(["ns", "key", "value"], [[r["ns"], r["key"], r["value"]] for r in rows])


def _groups(calls: Sequence[_coalesce.Call[_Call]]) -> list[list[_coalesce.Call[_Call]]]:
    """Calls in order, grouped so each group (its gets, then its sets) has the outcome of
    running them one by one: a get of a key an earlier call of the group sets, and a clear or
    anything after one, starts the next group."""
    out: list[list[_coalesce.Call[_Call]]] = []
    written: set[tuple[str, str]] = set()
    closed = True
    for c in calls:
        asked = {(r[0], r[1]) for part in c.work.rows.values() for r in part}
        if closed or c.work.kind == "clear" or (c.work.kind == "get" and asked & written):
            out.append([])
            written, closed = set(), False
        out[-1].append(c)
        if c.work.kind == "set":
            written |= asked
        closed = c.work.kind == "clear"
    return out


def _check(ns: Any, key: Any) -> None:
    if not isinstance(ns, tuple | list) or not all(isinstance(label, str) for label in ns):
        raise InvalidInputError(f"a cache namespace is a tuple of strings, not {ns!r}")
    _encoding.check_key(key, "a cache key")


# An INTERNAL span per public call, when OpenTelemetry is installed (d1saver/http/telemetry.py).
telemetry.instrument(D1Cache, ["setup", "asetup", "get", "aget", "set", "aset", "clear",
                               "aclear", "sweep_ttl"])


__all__ = ["D1Cache"]
