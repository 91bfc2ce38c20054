"""Store items and cache entries moved to their home after the database list changed
(`d1saver rebalance`): the statements of each step, and the rows read back. Pure: no I/O;
compaction/rebalance.py sends them, under the compaction lease, through d1saver.admin.

A page of misplaced rows moves from its source to its target in four requests:

1. at the target, the move registers (`begin`), before anything is read;
2. at the source, the rows are read (`read`), each with a fingerprint the source makes;
3. at the target, the rows are written (`move_in`: in batches within D1's limits, each
   failing with "move_voided" unless the registration is still there, the last ending it);
   what the target holds already wins (a put there since is newer; a killed move's copy is
   the same) unless it is older than the row read (a lower updated_at: an earlier move's copy
   that a writer on the old layout changed since at the source), vectors come with their
   items;
4. at the source, each row is deleted only if it still holds what was read (`move_out`).

So a delete that reaches the source and then the target (a store's delete while migrating)
either comes before the read (nothing to move) or voids the registration (the copy never
lands), and a put at the target is never overwritten. A move killed at any request leaves each
row at its source, at both (identical: readers take the home's), or moved; a rerun finishes.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from d1saver.core.errors import ResponseError
from d1saver.core.protocol import Result, Statement
from d1saver.fleet.routing import MEMORY_MOVE_PREFIX
from d1saver.memory import namespaces as _ns
from d1saver.memory.placement import Layout
from d1saver.memory.plan import json_lists
from d1saver.sql import catalogue as _catalogue
from d1saver.sql import memory as _sql

TABLES = ("store_items", "cache_entries")
# What one page of a move carries at most (values and vectors, as stored): a row larger than
# this moves alone. Its batches keep each parameter under plan.PARAM_MAX.
PAGE_BYTES = 1_500_000
PAGE_ROWS = 100

__all__ = ["PAGE_BYTES", "PAGE_ROWS", "TABLES", "MemoryKey", "MemoryRows", "begin", "home",
           "keys_page", "move_in", "move_out", "pages", "read", "read_keys", "read_rows"]


def check_columns(result: Result, expected: Sequence[str]) -> None:
    """Refuse a result whose columns are not `expected` (rows are read by position)."""
    if result.rows and tuple(result.columns) != tuple(expected):
        raise ResponseError(
            f"D1 returned columns {result.columns} where d1saver expects {list(expected)}")


@dataclass(frozen=True)
class MemoryKey:
    """A row of `table` ("store_items" or "cache_entries"): its stored namespace text, its
    key, and the bytes a move carries."""

    table: str
    ns: str
    key: str
    bytes: int = 0


def keys_page(table: str, after: MemoryKey | None, size: int) -> Statement:
    """The keys of `table` after `after` (None: from the first), `size` at most."""
    query = _sql.ITEM_KEYS_PAGE if table == "store_items" else _sql.ENTRY_KEYS_PAGE
    return Statement.bind(query, {"after_ns": "" if after is None else after.ns,
                                  "after_key": "" if after is None else after.key,
                                  "limit": int(size)})


def read_keys(table: str, result: Result) -> list[MemoryKey]:
    check_columns(result, _sql.MEMORY_KEY_COLUMNS)
    return [MemoryKey(table, str(ns), str(key), int(n or 0)) for ns, key, n in result.rows]


def home(layout: Layout, row: MemoryKey) -> str:
    """The database the row lives in, in `layout`."""
    namespace = _ns.decode(row.ns)
    if row.table == "store_items":
        return layout.item_home(namespace)
    return layout.entry_home(namespace, row.key)


def pages(rows: Sequence[MemoryKey], max_bytes: int = PAGE_BYTES,
          max_rows: int = PAGE_ROWS) -> list[list[MemoryKey]]:
    """Rows of one table grouped into pages of at most `max_rows` rows and about
    `max_bytes` bytes (a larger row alone)."""
    out: list[list[MemoryKey]] = []
    size = 0
    for row in rows:
        if out and out[-1] and len(out[-1]) < max_rows and size + row.bytes <= max_bytes:
            out[-1].append(row)
            size += row.bytes
        else:
            out.append([row])
            size = row.bytes
    return out


def _keys(rows: Sequence[MemoryKey]) -> str:
    return json.dumps([[r.ns, r.key] for r in rows], ensure_ascii=False, separators=(",", ":"))


def begin(move_id: str) -> Statement:
    """The move's registration, at its target."""
    return Statement.bind(_catalogue.BEGIN_MOVE, {"thread_id": MEMORY_MOVE_PREFIX + move_id,
                                                  "move_id": move_id})


def read(page: Sequence[MemoryKey]) -> list[Statement]:
    """The rows of a page (one table's) as stored, at the source: read them with `read_rows`."""
    if page[0].table == "store_items":
        return Statement.bind_each([_sql.READ_ITEMS_TO_MOVE, _sql.READ_VECTORS_TO_MOVE],
                                   {"keys": _keys(page)})
    return [Statement.bind(_sql.READ_ENTRIES_TO_MOVE, {"keys": _keys(page)})]


@dataclass
class MemoryRows:
    """A page's rows as read at the source: for the target (`rows`, `vectors`), and what the
    source compares before it deletes them (`fingerprints`: [ns, key, fp])."""

    table: str
    rows: list[list[Any]] = field(default_factory=list)
    vectors: list[list[Any]] = field(default_factory=list)
    fingerprints: list[list[Any]] = field(default_factory=list)

    @property
    def bytes(self) -> int:
        return sum(len(str(r[2])) for r in self.rows) + sum(len(str(v[3])) for v in self.vectors)


def read_rows(table: str, results: Sequence[Result]) -> MemoryRows:
    out = MemoryRows(table)
    columns = _sql.MOVED_ITEM_COLUMNS if table == "store_items" else _sql.MOVED_ENTRY_COLUMNS
    check_columns(results[0], columns)
    for row in results[0].rows:
        out.rows.append(list(row[:-1]))
        out.fingerprints.append([row[0], row[1], row[-1]])
    if table == "store_items":
        check_columns(results[1], _sql.VECTOR_COLUMNS)
        out.vectors = [list(v) for v in results[1].rows]
    return out


def move_in(found: MemoryRows, move_id: str) -> list[list[Statement]]:
    """The batches that write a page at its target, each failing ("move_voided") unless the
    move is still registered there; the last ends the registration. Vectors go in the batch
    of their items, before them (they are written only for items the target lacks)."""
    move = {"thread_id": MEMORY_MOVE_PREFIX + move_id, "move_id": move_id}
    check = Statement.bind(_catalogue.CHECK_MOVE, move)
    query = _sql.MOVE_IN_ITEMS if found.table == "store_items" else _sql.MOVE_IN_ENTRIES
    batches: list[list[Statement]] = []
    for param in json_lists(found.rows):
        page = json.loads(param)
        keys = {(r[0], r[1]) for r in page}
        vectors = [v for v in found.vectors if (v[0], v[1]) in keys]
        older = Statement.bind_each([_sql.MOVE_IN_OLDER_VECTORS, _sql.MOVE_IN_OLDER_ITEMS], {
            "keys": json.dumps([[r[0], r[1], r[4]] for r in page],
                               ensure_ascii=False, separators=(",", ":"))}
        ) if found.table == "store_items" else []
        batches.append([check, *older, *(Statement.bind(_sql.MOVE_IN_VECTORS, {"rows": p})
                                         for p in json_lists(vectors, "a vector")),
                        Statement.bind(query, {"rows": param})])
    if not batches:
        batches = [[check]]
    batches[-1].append(Statement.bind(_catalogue.END_MOVE, move))
    return batches


def move_out(found: MemoryRows) -> list[Statement]:
    """The statements that delete a page at its source, each row only if it still holds what
    was read; the first's changes are the rows deleted."""
    rows = json.dumps(found.fingerprints, ensure_ascii=False, separators=(",", ":"))
    if found.table == "store_items":
        return Statement.bind_each([_sql.MOVE_OUT_ITEMS, _sql.MOVE_OUT_VECTORS], {"rows": rows})
    return [Statement.bind(_sql.MOVE_OUT_ENTRIES, {"rows": rows})]
