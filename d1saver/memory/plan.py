"""One store batch as the statements of one request per database, and its results read back.

Pure: the store (d1saver/memory/store.py) embeds texts, groups ops by database, sends each
database's statements in one D1 batch (reads first, then writes: reads see the state before
the batch's puts, as LangGraph's stores do) and merges what every database returned.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from langgraph.store.base import GetOp, Item, ListNamespacesOp, PutOp, SearchOp

from d1saver.core.protocol import Result, Statement
from d1saver.memory import namespaces as _ns
from d1saver.memory import values as _values
from d1saver.sql import memory as _sql
from d1saver.storage.crypto import Sealer

# A JSON list parameter stays under this many bytes (D1 refuses strings over 2,000,000).
PARAM_MAX = 1_800_000

Vectors = Mapping[tuple[str, str], Sequence[tuple[str, str]]]  # (ns, key) -> [(field, packed)]


@dataclass
class Row:
    """A stored item as read: its stored namespace text and value text, not yet opened."""

    ns: str
    key: str
    value: str
    created_at: float
    updated_at: float
    ttl: bool = False
    db: str = ""  # the database it was read from (set by the store's merge)

    def item(self, sealer: Sealer | None) -> Item:
        return Item(value=_values.load_item(self.value, self.ns, self.key, sealer),
                    key=self.key, namespace=_ns.decode(self.ns),
                    created_at=_when(self.created_at), updated_at=_when(self.updated_at))


def _when(seconds: float) -> datetime:
    return datetime.fromtimestamp(float(seconds), timezone.utc)


@dataclass
class Plan:
    """The statements of one database's part of a batch, and where each op's rows come back."""

    statements: list[Statement] = field(default_factory=list)
    gets: int | None = None            # index of the GET_ITEMS statement
    # op -> statements of its rows, of the rows SQL cannot filter, of its vectors
    searches: dict[int, tuple[int, int | None, int | None]] = field(default_factory=dict)
    lists: dict[int, int] = field(default_factory=dict)                        # op -> statement

    def add(self, stmt: Statement) -> int:
        self.statements.append(stmt)
        return len(self.statements) - 1


@dataclass
class Partial:
    """What one database returned for a batch."""

    items: dict[tuple[str, str], Row] = field(default_factory=dict)
    searches: dict[int, list[Row]] = field(default_factory=dict)
    vectors: dict[int, dict[tuple[str, str], list[str]]] = field(default_factory=dict)
    namespaces: dict[int, list[str]] = field(default_factory=dict)


def scope_params(prefix: Sequence[str], now: float) -> dict[str, Any]:
    """The parameters naming the namespaces under `prefix`, and now."""
    exact, low, high = _ns.scope(prefix)
    return {"exact": exact, "low": low, "high": high, "now": now}


def _json_lists(rows: Sequence[Sequence[Any]]) -> list[str]:
    """Rows as JSON arrays, in as few parameters as fit PARAM_MAX each."""
    out: list[str] = []
    current: list[str] = []
    size = 2
    for row in rows:
        text = json.dumps(list(row), ensure_ascii=False, separators=(",", ":"))
        n = len(text.encode("utf-8", "surrogatepass")) + 1
        if current and size + n > PARAM_MAX:
            out.append("[" + ",".join(current) + "]")
            current, size = [], 2
        current.append(text)
        size += n
    if current:
        out.append("[" + ",".join(current) + "]")
    return out


def build(ops: Sequence[tuple[int, Any]], puts: Sequence[PutOp], stored: Mapping[int, str],
          vectors: Vectors, reindexed: set[tuple[str, str]], now: float, *,
          single: set[int], ranked: set[int], sealed: bool = False) -> Plan:
    """The statements of one database: `ops` its reads (index, op); `puts` its writes (deduped,
    last wins) with `stored` their value texts by position; `vectors` the new vectors of
    the items put, `reindexed` every item whose vectors are replaced. `single`: the searches this
    database answers alone, so SQL can take its page exactly. `ranked`: the searches
    ranked by meaning (a query, and the store has an index). `sealed`: values are sealed,
    so SQL cannot filter them."""
    plan = Plan()
    gets = [(i, op) for i, op in ops if isinstance(op, GetOp)]
    if gets:
        keys = json.dumps([[_ns.encode(op.namespace), op.key] for _, op in gets],
                          separators=(",", ":"))
        refresh = [[_ns.encode(op.namespace), op.key] for _, op in gets if op.refresh_ttl]
        if refresh:
            plan.add(Statement.bind(_sql.REFRESH_ITEMS, {"keys": json.dumps(refresh), "now": now}))
        plan.gets = plan.add(Statement.bind(_sql.GET_ITEMS, {"keys": keys, "now": now}))
    for i, op in ops:
        if isinstance(op, SearchOp):
            scope = scope_params(op.namespace_prefix, now)
            ranked_here = i in ranked
            where, exact = (None, False) if sealed else _values.sql_filter(op.filter)
            if sealed and not op.filter:
                exact = True
            if not op.filter and not ranked_here and i in single:
                limit, offset = op.limit, op.offset  # SQL takes the page exactly
                if op.refresh_ttl:
                    plan.add(Statement.bind(_sql.REFRESH_SEARCH, {**scope, "limit": limit,
                                                                    "offset": offset}))
            elif exact and not ranked_here:
                limit, offset = op.offset + op.limit, 0  # merged and paged here
            else:
                limit, offset = -1, 0
            rows = plan.add(Statement.bind(_sql.SEARCH_ITEMS, {
                **scope, "limit": limit, "offset": offset, "filter": where}))
            opaque = (plan.add(Statement.bind(_sql.SEARCH_OPAQUE, scope))
                      if where is not None else None)
            vec = (plan.add(Statement.bind(_sql.SEARCH_VECTORS, {**scope, "filter": where}))
                   if ranked_here else None)
            plan.searches[i] = (rows, opaque, vec)
        elif isinstance(op, ListNamespacesOp):
            head: tuple[str, ...] = ()
            for cond in op.match_conditions or ():
                if cond.match_type == "prefix":
                    head = _ns.literal_head(cond.path)
            plan.lists[i] = plan.add(Statement.bind(_sql.LIST_NAMESPACES, scope_params(head, now)))
    if puts:
        gone = [[_ns.encode(op.namespace), op.key] for op in puts if op.value is None]
        for param in _json_lists(gone):
            plan.add(Statement.bind(_sql.DELETE_ITEMS, {"keys": param}))
        if reindexed:
            for param in _json_lists(sorted(list(k) for k in reindexed)):
                plan.add(Statement.bind(_sql.DELETE_VECTORS, {"keys": param}))
        items: list[list[Any]] = []
        for n, op in enumerate(puts):
            if op.value is None:
                continue
            ttl = None if op.ttl is None else float(op.ttl)
            expires = None if ttl is None else now + ttl * 60
            items.append([_ns.encode(op.namespace), op.key, stored[n], expires, ttl])
        for param in _json_lists(items):
            plan.add(Statement.bind(_sql.PUT_ITEMS, {"rows": param, "now": now}))
        vector_rows = [[ns, key, fld, vec] for (ns, key), fields in vectors.items()
                       for fld, vec in fields]
        for param in _json_lists(vector_rows):
            plan.add(Statement.bind(_sql.PUT_VECTORS, {"rows": param}))
    return plan


def _rows(result: Result) -> list[Row]:
    return [Row(r["ns"], r["key"], r["value"], r["created_at"], r["updated_at"],
                r.get("ttl_minutes") is not None) for r in result.dicts()]


def read(plan: Plan, results: Sequence[Result]) -> Partial:
    """A database's results, sorted into what each op asked."""
    out = Partial()
    if plan.gets is not None:
        for row in _rows(results[plan.gets]):
            out.items[(row.ns, row.key)] = row
    for i, (rows, opaque, vec) in plan.searches.items():
        out.searches[i] = _rows(results[rows]) + (
            [] if opaque is None else _rows(results[opaque]))
        if vec is not None:
            found: dict[tuple[str, str], list[str]] = {}
            for r in results[vec].dicts():
                found.setdefault((r["ns"], r["key"]), []).append(r["vector"])
            out.vectors[i] = found
    for i, index in plan.lists.items():
        out.namespaces[i] = [r["ns"] for r in results[index].dicts()]
    return out
