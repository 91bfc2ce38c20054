"""D1Store's items and D1Cache's entries re-sealed under the newest key (`d1saver rekey`),
without being decoded: the memory half of d1saver/ops/reseal.py.

An item's value is sealed whole, bound to (namespace, key); a cache entry's is
"<serde type>\\n<sealed text>", bound to (namespace, key, type) (d1saver/memory/encoding.py).
Rows are read in keyset pages of (ns, key), only those not sealed under the newest key; each
value is opened under the key it names and sealed again under the newest, and written back
only if the row still holds what was read (a live writer's newer value stays). A plaintext
value (written before keys were set) is sealed only when asked (`seal_plaintext`), as the
checkpoints' are. No I/O: rows in, statements out.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from d1saver.ops.reseal import RekeyCounts, fingerprint
from d1saver.ops.rows import check_columns
from d1saver.core.protocol import Param, Result, Statement
from d1saver.sql import memory as _sql
from d1saver.storage import codec as _codec
from d1saver.storage.crypto import aad_for_cache_entry, aad_for_store_item
from d1saver.storage.values import Values

MemoryCursor = tuple[str, str]  # ns, key

# What a re-sealed value may take in its row: as d1saver/memory/encoding.py's VALUE_MAX (a
# plaintext value that would outgrow it once sealed stays in plaintext, counted as left).
VALUE_MAX = 1_800_000


@dataclass(frozen=True)
class RawMemory:
    """A store item's or cache entry's row as stored."""

    ns: str
    key: str
    value: str

    @property
    def cursor(self) -> MemoryCursor:
        return (self.ns, self.key)


def _page(query: Any) -> Callable[[str | None, MemoryCursor | None, int, list[str] | None],
                                  Statement]:
    def statement(_thread_id: str | None, after: MemoryCursor | None, size: int,
                  heads: list[str] | None) -> Statement:
        ns, key = after or ("", "")
        params: dict[str, Param] = {"after_ns": ns, "after_key": key, "limit": int(size),
                                    "heads": None if heads is None else json.dumps(heads)}
        return Statement.bind(query, params)
    return statement


items_statement = _page(_sql.RAW_ITEMS)
entries_statement = _page(_sql.RAW_ENTRIES)


def raw_memory(result: Result) -> list[RawMemory]:
    check_columns(result, _sql.RAW_MEMORY_COLUMNS)
    return [RawMemory(str(ns), str(key), str(value)) for ns, key, value in result.rows]


def _item(values: Values, row: RawMemory, plaintext: bool) -> str | None:
    """The item's value sealed under the newest key; None: plaintext left as it is."""
    sealer, aad = values._sealer(), aad_for_store_item(row.ns, row.key)
    if _codec.is_sealed(row.value):
        return sealer.reseal_text(row.value, aad)
    if not plaintext:
        return None
    data = (row.value.encode("utf-8", "surrogatepass") if row.value.startswith("{")
            else _codec.decode(row.value))
    sealed = sealer.seal_text(data, aad)
    return sealed if len(sealed) <= VALUE_MAX else None


def _entry(values: Values, row: RawMemory, plaintext: bool) -> str | None:
    """The cache entry's value (type, then its text) sealed under the newest key; None:
    plaintext left as it is."""
    type_, _, body = row.value.partition("\n")
    sealer, aad = values._sealer(), aad_for_cache_entry(row.ns, row.key, type_)
    if _codec.is_sealed(body):
        return f"{type_}\n{sealer.reseal_text(body, aad)}"
    if not plaintext:
        return None
    sealed = f"{type_}\n{sealer.seal_text(_codec.decode(body), aad)}"
    return sealed if len(sealed.encode("utf-8", "surrogatepass")) <= VALUE_MAX else None


def _rekey(query: Any, reseal: Callable[[Values, RawMemory, bool], str | None]
           ) -> Callable[..., list[Statement]]:
    def rekey(values: Values, rows: list[RawMemory], counts: RekeyCounts, *, plaintext: bool
              ) -> list[Statement]:
        """Statements that re-seal `rows` in place, each applied only if its row still holds
        what was read."""
        stmts: list[Statement] = []
        for row in rows:
            value = reseal(values, row, plaintext)
            if value is None:
                counts.plaintext += 1
                continue
            stmts.append(Statement.bind(query, {"ns": row.ns, "key": row.key, "value": value,
                                                "value_fp": fingerprint(row.value)}))
            counts.rewritten += 1
        return stmts
    return rekey


rekey_items = _rekey(_sql.REKEY_ITEM, _item)
rekey_entries = _rekey(_sql.REKEY_ENTRY, _entry)

# Per table, as d1saver/ops/reseal.py's REKEY_PLANS: its page read, row parser, keyset cursor
# and page rewrite (Operations.rekey).
REKEY_PLANS: dict[str, tuple[Callable[..., Statement], Callable[[Result], list[Any]],
                             Callable[[Any], Any], Callable[..., list[Statement]]]] = {
    "store_items": (items_statement, raw_memory, lambda r: r.cursor, rekey_items),
    "cache_entries": (entries_statement, raw_memory, lambda r: r.cursor, rekey_entries),
}
REKEY_TABLES = tuple(REKEY_PLANS)

__all__ = ["REKEY_PLANS", "REKEY_TABLES", "RawMemory", "entries_statement", "items_statement",
           "raw_memory", "rekey_entries", "rekey_items"]
