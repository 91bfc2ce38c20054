"""D1Cache: LangGraph's node cache (`BaseCache`) in D1, sync and async on one instance.

Entries are (namespace, key) -> the serde's (type, bytes), codec-encoded, or sealed with keys
and bound to (namespace, key, type). A `get` or `set` is one request per database it touches
(one, for a single database), whatever the number of keys, and the async calls of one
event-loop tick share such a request (d1saver/memory/coalesce.py); an expired entry is never returned
(each read compares expires_at with now) and is deleted by the sweep (`sweep_ttl`, and
`d1saver compact`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from langgraph.cache.base import BaseCache, FullKey, Namespace

from d1saver.core.errors import InvalidInputError
from d1saver.core.protocol import Result, Statement
from d1saver.fleet.databases import Database as Node
from d1saver.memory import coalesce as _coalesce
from d1saver.memory import namespaces as _ns
from d1saver.memory import values as _values
from d1saver.memory.base import Memory
from d1saver.memory.plan import json_lists
from d1saver.sql import memory as _sql

ValueT = TypeVar("ValueT")


class D1Cache(Memory, BaseCache[ValueT], Generic[ValueT]):
    """LangGraph's `BaseCache` on Cloudflare D1, constructed as `D1Saver` is (`serde` as the
    saver's; with `encryption_keys`, entries are sealed). Over several databases an entry
    lives in the database of its namespace's first label."""

    def __init__(self, **kwargs: Any) -> None:
        Memory.__init__(self, **kwargs)
        self._tick: _coalesce.Tick[_Call] = _coalesce.Tick(self._aflush)

    # --- BaseCache --------------------------------------------------------------------------

    def get(self, keys: Sequence[FullKey]) -> dict[FullKey, ValueT]:
        plans = self._get_plans(keys)
        found = self._fleet.each(lambda node: self._exchange(node, plans[node.database_id]),
                                 "cache get", list(plans))
        return self._read(found.values())

    async def aget(self, keys: Sequence[FullKey]) -> dict[FullKey, ValueT]:
        """As `get`, gathered with the other calls of this event-loop tick (one request per
        database for all of them, docs/STORE.md)."""
        rows = self._get_rows(keys)
        found: dict[FullKey, ValueT] = await self._tick.submit(
            _Call("get", rows), databases=rows)
        return found

    def set(self, pairs: Mapping[FullKey, tuple[ValueT, int | None]]) -> None:
        plans = self._set_plans(pairs)
        self._fleet.each(lambda node: self._exchange(node, plans[node.database_id]),
                         "cache set", list(plans))

    async def aset(self, pairs: Mapping[FullKey, tuple[ValueT, int | None]]) -> None:
        rows = self._set_rows(pairs)
        size = sum(len(row[2]) for part in rows.values() for row in part)
        await self._tick.submit(_Call("set", rows), size=size, databases=rows)

    def clear(self, namespaces: Sequence[Namespace] | None = None) -> None:
        plans = self._clear_plans(namespaces)
        self._fleet.each(lambda node: self._exchange(node, plans[node.database_id]),
                         "cache clear", list(plans))

    async def aclear(self, namespaces: Sequence[Namespace] | None = None) -> None:
        plans = self._clear_plans(namespaces)  # in the tick's order, after its sets and gets
        await self._tick.submit(_Call("clear", {}, plans), databases=plans)

    # --- gathering: the calls of one tick, in call order ------------------------------------

    async def _aflush(self, calls: list[_coalesce.Call[_Call]]) -> None:
        for chunk in _coalesce.chunks(calls):
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
                    mine.extend(c.work.clear.get(db, []))
        first = _coalesce.cut(chunk, statements)
        if first:
            await self._asend_chunk(chunk[:first])
            await self._asend_chunk(chunk[first:])
            return
        outcomes = await _coalesce.send_each(self._fleet, statements)
        alone = _coalesce.failures(self._fleet, "cache", chunk, outcomes)
        for group, where in zip(groups, reads, strict=True):
            rows: dict[tuple[str, str], dict[str, Any]] = {}
            for db, indices in where.items():
                got = outcomes[db]
                if not isinstance(got, Exception):
                    for i in indices:
                        rows.update({(r["ns"], r["key"]): r for r in got[i].dicts()})
            for c in group:
                if c.future.done() or c in alone:
                    continue
                if c.work.kind != "get":
                    c.settle(None)
                    continue
                try:
                    asked = [rows[(r[0], r[1])] for part in c.work.rows.values() for r in part
                             if (r[0], r[1]) in rows]
                    c.settle(self._read([[_Rows(asked)]]))
                except Exception as exc:
                    c.fail(exc)
        for c in sorted(alone, key=chunk.index):  # each alone, in call order
            try:
                c.settle(await self._asend(c.work))
            except Exception as exc:
                c.fail(exc)

    async def _asend(self, call: _Call) -> Any:
        """One call alone: one request per database it touches."""
        plans = (call.clear if call.kind == "clear" else self._statements(call.kind, call.rows))

        async def one(node: Node) -> list[Result]:
            return await self._aexchange(node, plans[node.database_id])

        found = await self._fleet.aeach(one, f"cache {call.kind}", list(plans))
        return self._read(found.values()) if call.kind == "get" else None

    def sweep_ttl(self) -> int:
        """Delete expired entries in every database; returns how many."""
        stmt = [Statement.bind(_sql.SWEEP_CACHE, {"now": self.clock()})]
        done = self._fleet.each(lambda node: self._exchange(node, stmt), "sweep_ttl")
        return sum(results[0].changes for results in done.values())

    # --- statements -------------------------------------------------------------------------

    def _home_of(self, namespace: Sequence[str]) -> str:
        return self.home(namespace)

    def _get_rows(self, keys: Sequence[FullKey]) -> dict[str, list[list[Any]]]:
        by_db: dict[str, list[list[Any]]] = {}
        for ns, key in keys:
            _check(ns, key)
            by_db.setdefault(self._home_of(ns), []).append([_ns.encode(ns), key])
        return by_db

    def _get_plans(self, keys: Sequence[FullKey]) -> dict[str, list[Statement]]:
        return self._statements("get", self._get_rows(keys))

    def _statements(self, kind: str, rows: Mapping[str, list[list[Any]]]
                    ) -> dict[str, list[Statement]]:
        if kind == "get":
            now = self.clock()
            return {db: [Statement.bind(_sql.CACHE_GET, {"keys": param, "now": now})
                         for param in json_lists(part, "a cache key")]
                    for db, part in rows.items()}
        return {db: [Statement.bind(_sql.CACHE_SET, {"rows": param})
                     for param in json_lists(part, "a cache entry")]
                for db, part in rows.items()}

    def _read(self, found: Any) -> dict[FullKey, ValueT]:
        out: dict[FullKey, ValueT] = {}
        sealer = self.sealer
        for results in found:
            for row in (r for result in results for r in result.dicts()):
                type_, data = _values.load_entry(row["value"], row["ns"], row["key"], sealer)
                out[(_ns.decode(row["ns"]), row["key"])] = self.serde.loads_typed((type_, data))
        return out

    def _set_plans(self, pairs: Mapping[FullKey, tuple[ValueT, int | None]]
                   ) -> dict[str, list[Statement]]:
        return self._statements("set", self._set_rows(pairs))

    def _set_rows(self, pairs: Mapping[FullKey, tuple[ValueT, int | None]]
                  ) -> dict[str, list[list[Any]]]:
        now = self.clock()
        sealer = self.sealer
        by_db: dict[str, list[list[Any]]] = {}
        for (ns, key), (value, ttl) in pairs.items():
            _check(ns, key)
            if ttl is not None:
                _values.check_ttl(ttl, "seconds", 1)
            text = _ns.encode(ns)
            type_, data = self.serde.dumps_typed(value)
            stored = _values.dump_entry(type_, data, text, key, sealer)
            by_db.setdefault(self._home_of(ns), []).append(
                [text, key, stored, None if ttl is None else now + float(ttl)])
        return by_db

    def _clear_plans(self, namespaces: Sequence[Namespace] | None) -> dict[str, list[Statement]]:
        if namespaces is None:
            return {db: [Statement.bind(_sql.CACHE_CLEAR, {"namespaces": None})] for db in self.database_ids}
        by_db: dict[str, list[str]] = {}
        for ns in namespaces:
            _check(ns, "")
            by_db.setdefault(self._home_of(ns), []).append(_ns.encode(ns))
        return {db: [Statement.bind(_sql.CACHE_CLEAR, {"namespaces": json.dumps(names)})]
                for db, names in by_db.items()}


@dataclass
class _Call:
    """One cache call, checked and encoded: its rows (get: [ns, key]; set: [ns, key, stored,
    expires_at]) or its clear statements, by database."""

    kind: str
    rows: dict[str, list[list[Any]]]
    clear: dict[str, list[Statement]] = field(default_factory=dict)


@dataclass
class _Rows:
    """Rows already read, as `_read` takes a result's."""

    rows: list[dict[str, Any]]

    def dicts(self) -> list[dict[str, Any]]:
        return self.rows


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
    _values.check_key(key, "a cache key")


__all__ = ["D1Cache"]
