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

from d1saver.core.errors import ValueTooLargeError
from d1saver.core.protocol import Result, Statement, compact_json
from d1saver.memory import filters as _filters
from d1saver.memory import namespaces as _ns
from d1saver.memory import encoding as _encoding
from d1saver.sql import memory as _sql
from d1saver.storage.crypto import Sealer

# A JSON list parameter stays under this many bytes as sent (D1 refuses a string over
# 2,000,000 bytes): a list longer than that travels as several statements of the same batch.
PARAM_MAX = 1_950_000

# A prefiltered search reads a scope of at most `whole_items` items (of those its filter's
# plain equalities keep) whole in its first request (one request, as the exact scan), and a
# larger one as codes, then its candidates (two requests, about a quarter of the bytes): at
# most WHOLE_MAX items, and fewer where their vectors would take more than WHOLE_BYTES as read
# (packed). One more round trip (50-300 ms on D1's REST API) costs more than the bytes it saves
# below that bound on a link of 100 Mbit/s or more.
WHOLE_MAX = 1_000
WHOLE_BYTES = 2_000_000


def whole_items(dims: int, fields: int) -> int:
    """The most items a prefiltered search's scope may hold to be read whole, for vectors of
    `dims` dimensions in `fields` fields an item (the index's)."""
    packed = 4 * -(-4 * dims // 3)  # base64 of `dims` float32s
    return min(WHOLE_MAX, WHOLE_BYTES // max(1, fields * packed))


# (ns, key) -> [(field, packed vector, its code)]
Vectors = Mapping[tuple[str, str], Sequence[tuple[str, str, str]]]


@dataclass
class Row:
    """A stored item as read: its stored namespace text and value text, not yet opened; for a
    search, the filter's verdict in SQL (2 holds, 1 cannot tell) and how many rows before it
    SQL knows match (sure_before) and up to it cannot tell (unsure_upto)."""

    ns: str
    key: str
    value: str
    created_at: float
    updated_at: float
    ttl: bool = False
    verdict: int = 2
    sure_before: int = 0
    unsure_upto: int = 0
    db: str = ""  # the database it was read from (set by the store's merge)

    def item(self, sealer: Sealer | None) -> Item:
        return Item(value=_encoding.load_item(self.value, self.ns, self.key, sealer),
                    key=self.key, namespace=_ns.decode(self.ns),
                    created_at=_when(self.created_at), updated_at=_when(self.updated_at))


def _when(seconds: float) -> datetime:
    return datetime.fromtimestamp(float(seconds), timezone.utc)


@dataclass
class Search:
    """Where a search's rows come back, and what SQL did with its page."""

    rows: int                   # the SEARCH_ITEMS statement
    vectors: int | None         # the SEARCH_VECTORS statement (ranked searches)
    skip: int                   # matches SQL was told to leave out before the page
    refreshed: bool             # REFRESH_SEARCH(_FILTERED) ran for the page's rows SQL knew
    counted: bool               # SEARCH_ITEMS_FILTERED (rows carry their verdicts)


@dataclass
class Plan:
    """The statements of one database's part of a batch, and where each op's rows come back."""

    statements: list[Statement] = field(default_factory=list)
    gets: list[int] = field(default_factory=list)        # the GET_ITEMS statements
    searches: dict[int, Search] = field(default_factory=dict)                # op -> its rows
    lists: dict[int, int] = field(default_factory=dict)                      # op -> statement
    codes: dict[int, int] = field(default_factory=dict)   # prefiltered op -> SEARCH_CODES
    ranks: dict[int, int] = field(default_factory=dict)   # ranked op -> RANK_ROWS
    marks: dict[int, int] = field(default_factory=dict)   # op for the gateway -> RANK_MARK

    def add(self, stmt: Statement) -> int:
        self.statements.append(stmt)
        return len(self.statements) - 1


@dataclass
class Partial:
    """What one database returned for a batch."""

    items: dict[tuple[str, str], Row] = field(default_factory=dict)
    searches: dict[int, list[Row]] = field(default_factory=dict)
    skipped: dict[int, int] = field(default_factory=dict)       # op -> matches left out by SQL
    refreshed: set[int] = field(default_factory=set)            # ops SQL refreshed the page of
    vectors: dict[int, dict[tuple[str, str], list[str]]] = field(default_factory=dict)
    namespaces: dict[int, list[str]] = field(default_factory=dict)
    codes: dict[int, list[list[Any]]] = field(default_factory=dict)  # op -> SEARCH_CODES rows
    gateway: set[int] = field(default_factory=set)  # ops whose rows the gateway ranked


def scope_params(prefix: Sequence[str], live_at: float | None) -> dict[str, Any]:
    """The parameters naming the namespaces under `prefix`, and what a read sees."""
    exact, low, high = _ns.scope(prefix)
    return {"exact": exact, "low": low, "high": high, "live_at": live_at}


def row_size(row: Sequence[Any]) -> int:
    """The bytes a row takes in a JSON list parameter, as sent."""
    text = compact_json(list(row))
    return len(text.encode("utf-8", "surrogatepass")) + 1


def json_lists(rows: Sequence[Sequence[Any]], what: str = "a row") -> list[str]:
    """Rows as JSON arrays, in as few parameters as fit PARAM_MAX each as sent; a row that
    fits no parameter is ValueTooLargeError (raised before anything is sent)."""
    if not rows:
        return []
    whole = compact_json([list(row) for row in rows])
    if len(whole) * 4 < PARAM_MAX or _sent(whole) < PARAM_MAX:  # the common case: one
        return [whole]  # parameter (as the loop below counts it), the same text, in one call
    out: list[str] = []
    current: list[str] = []
    size = 2
    for row in rows:
        text = compact_json(list(row))
        n = _sent(text) + 1
        if n + 2 > PARAM_MAX:
            raise ValueTooLargeError(
                f"{what} takes {n:,} bytes as sent; D1 binds at most {PARAM_MAX:,} in one "
                f"parameter (a key this long cannot be stored)")
        if current and size + n > PARAM_MAX:
            out.append("[" + ",".join(current) + "]")
            current, size = [], 2
        current.append(text)
        size += n
    if current:
        out.append("[" + ",".join(current) + "]")
    return out


def _sent(text: str) -> int:
    """The bytes of `text` as sent (UTF-8)."""
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))


def build(ops: Sequence[tuple[int, Any]], puts: Sequence[PutOp], stored: Mapping[int, str],
          vectors: Vectors, reindexed: set[tuple[str, str]], now: float, *,
          live_at: float | None, single: set[int], ranked: set[int],
          expires: Mapping[int, tuple[float, float] | None] | None = None,
          refresh_filtered: bool = True, prefiltered: set[int] | None = None,
          whole: int = WHOLE_MAX,
          ranks: Mapping[int, Mapping[str, Any]] | None = None) -> Plan:
    """The statements of one database: `ops` its reads (index, op); `puts` its writes (deduped,
    last wins) with `stored` their value texts and `expires` their (expires_at, ttl_minutes) by
    position; `vectors` the new vectors of the items put, `reindexed` every item whose vectors
    are replaced. `live_at`: what reads see (now, or None to see expired rows too). `single`:
    the searches this database answers alone, so SQL can leave out the rows before the page.
    `ranked`: the searches ranked by meaning (a query, and the store has an index).
    `refresh_filtered`: refresh a filtered page's TTLs in SQL, in the same request (its
    statement repeats the filter's: worth it when items have TTLs, the store's default); else
    the store refreshes the page's items with a TTL by a second request, only if there are any.
    `prefiltered`: the ranked searches that read codes first (SEARCH_CODES), then their
    candidates in a second request (`candidates`), unless their scope holds at most `whole`
    items (`whole_items`): then it is read whole (RANK_ROWS). `ranks`: the ranked searches sent for the
    gateway Worker to rank: as prefiltered, then RANK_MARK with each one's spec, to which the
    candidates' statements are added (the Worker runs them itself, worker/rank.js)."""
    plan = Plan()
    gets = [(i, op) for i, op in ops if isinstance(op, GetOp)]
    if gets:
        refresh = [[_ns.encode(op.namespace), op.key] for _, op in gets if op.refresh_ttl]
        for param in json_lists(refresh, "a key"):
            plan.add(Statement.bind(_sql.REFRESH_ITEMS, {"keys": param, "now": now,
                                                         "live_at": live_at}))
        keys = [[_ns.encode(op.namespace), op.key] for _, op in gets]
        for param in json_lists(keys, "a key"):
            plan.gets.append(plan.add(Statement.bind(_sql.GET_ITEMS, {"keys": param,
                                                                      "live_at": live_at})))
    for i, op in ops:
        if isinstance(op, SearchOp) and i in (ranks or {}):
            where = _filters.compile_filter(op.filter)
            scope = {**scope_params(op.namespace_prefix, live_at), "filter": where}
            plan.ranks[i] = plan.add(Statement.bind(_sql.RANK_ROWS, {**scope, "whole": whole}))
            plan.codes[i] = plan.add(Statement.bind(_sql.SEARCH_CODES, {**scope, "whole": whole}))
            then = [Statement.bind(_sql.CANDIDATE_ITEMS, {**scope, "items": None}),
                    Statement.bind(_sql.CANDIDATE_VECTORS, {"items": None})]
            spec = {**(ranks or {})[i],
                    "then": [{"sql": t.sql, "params": list(t.params)} for t in then],
                    "items": [_sql.CANDIDATE_ITEMS.params.index("items"),
                              _sql.CANDIDATE_VECTORS.params.index("items")]}
            plan.marks[i] = plan.add(Statement.bind(_sql.RANK_MARK, {
                "spec": json.dumps(spec, separators=(",", ":"))}))
        elif isinstance(op, SearchOp) and i in (prefiltered or ()):
            where = _filters.compile_filter(op.filter)
            scope = {**scope_params(op.namespace_prefix, live_at), "filter": where,
                     "whole": whole}
            plan.ranks[i] = plan.add(Statement.bind(_sql.RANK_ROWS, scope))
            plan.codes[i] = plan.add(Statement.bind(_sql.SEARCH_CODES, scope))
        elif isinstance(op, SearchOp):
            scope = scope_params(op.namespace_prefix, live_at)
            where = _filters.compile_filter(op.filter)
            alone = i in single and i not in ranked
            refreshed = bool(op.refresh_ttl and alone and (where is None or refresh_filtered))
            if where is None:  # SQL takes the page itself, as 0.2.0 did
                page = ({"limit": -1, "offset": 0} if i in ranked else
                        {"limit": op.limit, "offset": op.offset} if alone else
                        {"limit": op.offset + op.limit, "offset": 0})
                if refreshed:
                    plan.add(Statement.bind(_sql.REFRESH_SEARCH, {**scope, **page, "now": now}))
                rows = plan.add(Statement.bind(_sql.SEARCH_ITEMS, {**scope, **page}))
                vec = (plan.add(Statement.bind(_sql.SEARCH_VECTORS, scope))
                       if i in ranked else None)
                plan.searches[i] = Search(rows, vec, page["offset"], refreshed, counted=False)
                continue
            page = ({"need": -1, "skip": 0} if i in ranked else
                    {"need": op.offset + op.limit, "skip": op.offset if alone else 0})
            if refreshed:
                plan.add(Statement.bind(_sql.REFRESH_SEARCH_FILTERED,
                                        {**scope, **page, "now": now, "filter": where}))
            rows = plan.add(Statement.bind(_sql.SEARCH_ITEMS_FILTERED, {**scope, **page,
                                                                        "filter": where}))
            vec = (plan.add(Statement.bind(_sql.SEARCH_VECTORS_FILTERED,
                                           {**scope, "filter": where}))
                   if i in ranked else None)
            plan.searches[i] = Search(rows, vec, page["skip"], refreshed, counted=True)
        elif isinstance(op, ListNamespacesOp):
            head: tuple[str, ...] = ()
            for cond in op.match_conditions or ():
                if cond.match_type == "prefix":
                    head = _ns.literal_head(cond.path)
            plan.lists[i] = plan.add(Statement.bind(_sql.LIST_NAMESPACES,
                                                    scope_params(head, live_at)))
    if puts:
        gone = [[_ns.encode(op.namespace), op.key] for op in puts if op.value is None]
        for param in json_lists(gone, "a key"):
            plan.add(Statement.bind(_sql.DELETE_ITEMS, {"keys": param}))
        if reindexed:
            for param in json_lists(sorted(list(k) for k in reindexed), "a key"):
                plan.add(Statement.bind(_sql.DELETE_VECTORS, {"keys": param}))
        items: list[list[Any]] = []
        for n, op in enumerate(puts):
            if op.value is None:
                continue
            when = (expires or {}).get(n)
            items.append([_ns.encode(op.namespace), op.key, stored[n],
                          *(when if when is not None else (None, None))])
        for param in json_lists(items, "an item"):
            plan.add(Statement.bind(_sql.PUT_ITEMS, {"rows": param, "now": now}))
        vector_rows = [[ns, key, fld, vec, code] for (ns, key), fields in vectors.items()
                       for fld, vec, code in fields]
        for param in json_lists(vector_rows, "a vector"):
            plan.add(Statement.bind(_sql.PUT_VECTORS, {"rows": param}))
    return plan


def _rows(result: Result) -> list[Row]:
    out = []
    for r in result.dicts():
        out.append(Row(r["ns"], r["key"], r["value"], r["created_at"], r["updated_at"],
                       r.get("ttl_minutes") is not None, int(r.get("verdict", 2)),
                       int(r.get("sure_before", 0)), int(r.get("unsure_upto", 0))))
    return out


def read(plan: Plan, results: Sequence[Result]) -> Partial:
    """A database's results, sorted into what each op asked."""
    out = Partial()
    for index in plan.gets:
        for row in _rows(results[index]):
            out.items[(row.ns, row.key)] = row
    for i, search in plan.searches.items():
        rows = _rows(results[search.rows])
        out.searches[i] = rows
        if search.counted:  # every row before the first one returned was a match SQL left out
            out.skipped[i] = rows[0].sure_before if rows and search.skip else 0
        else:  # LIMIT/OFFSET: every row was a match
            out.skipped[i] = search.skip
        if search.refreshed:
            out.refreshed.add(i)
        if search.vectors is not None:
            found: dict[tuple[str, str], list[str]] = {}
            for r in results[search.vectors].dicts():
                found.setdefault((r["ns"], r["key"]), []).append(r["vector"])
            out.vectors[i] = found
    for i, index in plan.lists.items():
        out.namespaces[i] = [r["ns"] for r in results[index].dicts()]
    for i, index in plan.ranks.items():
        vectors: dict[tuple[str, str], list[str]] = {}
        items: dict[tuple[str, str], Row] = {}
        for r in results[index].dicts():
            where = (r["ns"], r["key"])
            if where not in items:
                items[where] = Row(r["ns"], r["key"], r["value"], r["created_at"],
                                   r["updated_at"], r["ttl_minutes"] is not None,
                                   int(r["verdict"]))
            if r["vector"] is not None:
                vectors.setdefault(where, []).append(r["vector"])
        out.searches[i], out.vectors[i], out.skipped[i] = list(items.values()), vectors, 0
        if i in plan.marks and results[plan.marks[i]].rows == [[1]]:
            out.gateway.add(i)  # the gateway ranked them: only the rows of the page's items
    for i, index in plan.codes.items():
        if i not in out.gateway and results[index].rows:  # a large scope: its codes
            out.codes[i] = results[index].rows
    return out


@dataclass
class Second:
    """The second request of prefiltered searches in one database: for each search, the rows
    (CANDIDATE_ITEMS, with its filter's verdict) and the full vectors (CANDIDATE_VECTORS) of
    its candidates, as many statements of each as the keys' parameters need."""

    statements: list[Statement] = field(default_factory=list)
    parts: list[tuple[int, list[int], list[int]]] = field(default_factory=list)

    def add(self, i: int, items: Sequence[int], op: SearchOp, live_at: float | None) -> None:
        """The candidates `items` (rowids of store_items) of search `i`."""
        scope = {**scope_params(op.namespace_prefix, live_at),
                 "filter": _filters.compile_filter(op.filter)}
        # Rowids, at most 20 characters each as sent: 90,000 a parameter stay under PARAM_MAX.
        texts = [json.dumps(list(items[n: n + 90_000])) for n in range(0, len(items), 90_000)]
        rows = [len(self.statements) + n for n in range(len(texts))]
        self.statements += [Statement.bind(_sql.CANDIDATE_ITEMS, {**scope, "items": t})
                            for t in texts]
        vectors = [len(self.statements) + n for n in range(len(texts))]
        self.statements += [Statement.bind(_sql.CANDIDATE_VECTORS, {"items": t}) for t in texts]
        self.parts.append((i, rows, vectors))

    def fill(self, results: Sequence[Result], part: Partial) -> None:
        """Each search's candidates read back, as its rows and vectors in `part`."""
        for i, rows, vectors in self.parts:
            part.searches[i] = [row for n in rows for row in _rows(results[n])]
            found: dict[tuple[str, str], list[str]] = {}
            for n in vectors:
                for r in results[n].dicts():
                    found.setdefault((r["ns"], r["key"]), []).append(r["vector"])
            part.vectors[i] = found
