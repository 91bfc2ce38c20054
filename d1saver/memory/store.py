"""D1Store: LangGraph's long-term memory (`BaseStore`) in D1, sync and async on one instance.

A `batch` is one request per database it touches (one, for a single database): its reads and
then its writes as one D1 batch, one transaction. Items live in `store_items`, their vectors
in `store_vectors`; expired items are invisible to every read (each read compares expires_at
with now) until a sweep deletes them. See docs/STORE.md for the design and its costs.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from langgraph.store.base import (
    BaseStore,
    GetOp,
    IndexConfig,
    Item,
    ListNamespacesOp,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
    TTLConfig,
    ensure_embeddings,
    get_text_at_path,
    tokenize_path,
)

from d1saver.core.errors import ConfigError, InvalidInputError
from d1saver.core.protocol import Statement
from d1saver.fleet.databases import Database as Node
from d1saver.memory import codes as _codes
from d1saver.memory import filters as _filters
from d1saver.memory import namespaces as _ns
from d1saver.memory import plan as _plan
from d1saver.memory import values as _values
from d1saver.memory.base import Memory
from d1saver.sql import memory as _sql


@dataclass
class _Batch:
    """A batch checked and encoded, before anything is sent."""

    ops: list[Op]
    puts: list[PutOp]                               # deduped, last wins
    stored: dict[int, str]                          # put position -> stored value text
    ttls: dict[int, float] = field(default_factory=dict)  # put position -> TTL in minutes
    texts: list[tuple[str, str, str, str]] = field(default_factory=list)  # ns, key, field, text
    vectors: dict[tuple[str, str], list[tuple[str, str, str]]] = field(default_factory=dict)
    reindexed: set[tuple[str, str]] = field(default_factory=set)
    ranked: set[int] = field(default_factory=set)   # searches ranked by meaning
    queries: dict[str, list[float]] = field(default_factory=dict)


class D1Store(Memory, BaseStore):
    """LangGraph's `BaseStore` on Cloudflare D1, constructed as `D1Saver` is.

    `index={"dims", "embed", "fields", "distance_type"}` enables search by meaning as
    LangGraph's stores take it (an Embeddings object, a function of texts, or
    "provider:model"); vectors are stored in D1 with a code that bounds their scores, and a
    search ranks exactly (cosine by default; "inner_product" and "l2" as PostgresStore scores
    them) the items that can be in its page, or scores in d1saver's gateway Worker when the
    database is behind one; `"exact": True` reads every vector (docs/STORE.md). `ttl={"default_ttl",
    "refresh_on_read", "omit_expired", "sweep_interval_minutes"}` as LangGraph's TTLConfig
    (omit_expired unset hides expired items, docs/STORE.md). Over several databases (`database_ids`), a
    namespace lives in the database of its first label; a search or listing whose prefix
    does not name a first label asks every database.
    """

    supports_ttl: bool = True

    def __init__(self, *, index: IndexConfig | None = None, ttl: TTLConfig | None = None,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if ttl is not None:
            if not isinstance(ttl, dict):
                raise ConfigError(f"ttl is a TTLConfig dict, not {type(ttl).__name__}")
            if ttl.get("default_ttl") is not None:
                try:
                    _values.check_ttl(ttl["default_ttl"], "minutes", 60)
                except InvalidInputError as exc:
                    raise ConfigError(f"ttl's default_ttl: {exc}") from None
        self.ttl_config = ttl
        self.index_config: dict[str, Any] | None = None
        self.embeddings = None
        if index:
            config: dict[str, Any] = dict(index)
            if "dims" not in config:
                raise ConfigError("index needs 'dims', the embeddings' dimensions")
            self.embeddings = ensure_embeddings(config.get("embed"))
            if config.get("fields") is None and config.get("text_fields") is not None:
                config["fields"] = config["text_fields"]  # SqliteStore's name for it
            if config.setdefault("distance_type", "cosine") not in _values.DISTANCES:
                raise ConfigError(f"index distance_type {config['distance_type']!r}: use one of "
                                  f"{', '.join(_values.DISTANCES)}")
            config["__tokenized_fields"] = [(p, tokenize_path(p)) if p != "$" else (p, p)
                                            for p in (config.get("fields") or ["$"])]
            self.index_config = config
        self._sweeper: threading.Thread | None = None
        self._sweeper_stop = threading.Event()

    # --- BaseStore ------------------------------------------------------------------------

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        _not_in_event_loop(type(self).__name__)
        batch = self._prepare(ops)
        if batch.texts:
            assert self.embeddings is not None
            self._keep_vectors(batch, self.embeddings.embed_documents([t[3] for t in batch.texts]))
        queries = self._queries(batch)
        if queries:
            assert self.embeddings is not None
            self._keep_queries(batch, queries, [self.embeddings.embed_query(q) for q in queries])
        plans = self._plans(batch)
        partials = self._fleet.each(
            lambda node: _plan.read(plans[node.database_id],
                                    self._exchange(node, plans[node.database_id].statements)),
            "store batch", list(plans))
        second = self._candidates(batch, partials)
        if second:
            answered = self._fleet.each(
                lambda node: self._exchange(node, second[node.database_id].statements),
                "store search", list(second))
            for db, rows in answered.items():
                second[db].fill(rows, partials[db])
        results, refresh = self._merge(batch, list(partials.values()))
        for db, statements in refresh.items():
            self._exchange(self._fleet.nodes[db], statements)
        return results

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        batch = self._prepare(ops)
        if batch.texts:
            assert self.embeddings is not None
            self._keep_vectors(batch, await self.embeddings.aembed_documents(
                [t[3] for t in batch.texts]))
        queries = self._queries(batch)
        if queries:
            assert self.embeddings is not None
            found = await asyncio.gather(*(self.embeddings.aembed_query(q) for q in queries))
            self._keep_queries(batch, queries, list(found))
        plans = self._plans(batch)

        async def one(node: Node) -> _plan.Partial:
            plan = plans[node.database_id]
            return _plan.read(plan, await self._aexchange(node, plan.statements))

        partials = await self._fleet.aeach(one, "store batch", list(plans))
        second = self._candidates(batch, partials)
        if second:
            async def two(node: Node) -> list[Any]:
                return await self._aexchange(node, second[node.database_id].statements)

            answers = await self._fleet.aeach(two, "store search", list(second))
            for db, rows in answers.items():
                second[db].fill(rows, partials[db])
        results, refresh = self._merge(batch, list(partials.values()))
        for db, statements in refresh.items():
            await self._aexchange(self._fleet.nodes[db], statements)
        return results

    # --- preparing: everything checked and encoded before a byte is sent ------------------

    def _prepare(self, ops: Iterable[Op]) -> _Batch:
        ops = [_normal(op) for op in ops]
        last: dict[tuple[tuple[str, ...], str], PutOp] = {}
        for op in ops:
            if isinstance(op, PutOp):
                _ns.check_item_namespace(op.namespace)
                _check_key(op.key)
                if op.value is not None and op.ttl is not None:
                    _values.check_ttl(op.ttl, "minutes", 60)
                last.pop((tuple(op.namespace), op.key), None)
                last[(tuple(op.namespace), op.key)] = op
            elif isinstance(op, GetOp):
                _ns.check_labels(op.namespace)
                _check_key(op.key)
            elif isinstance(op, SearchOp):
                _ns.check_labels(op.namespace_prefix, what="namespace prefix")
                _filters.check_filter(op.filter)
                _check_page(op.limit, op.offset)
            elif isinstance(op, ListNamespacesOp):
                for cond in op.match_conditions or ():
                    _ns.check_labels(cond.path, what="match path")
                    if cond.match_type not in ("prefix", "suffix"):
                        raise InvalidInputError(f"unknown match type {cond.match_type!r}")
                _check_page(op.limit, op.offset)
                if op.max_depth is not None and (not isinstance(op.max_depth, int)
                                                 or op.max_depth < 1):
                    raise InvalidInputError(f"max_depth must be at least 1, not {op.max_depth}")
            else:
                raise InvalidInputError(f"unknown store operation {type(op).__name__}")
        puts = list(last.values())
        sealer = self.sealer
        stored = {n: _values.dump_item(op.value, _ns.encode(op.namespace), op.key, sealer)
                  for n, op in enumerate(puts) if op.value is not None}
        batch = _Batch(ops, puts, stored)
        batch.ttls = {n: float(op.ttl) for n, op in enumerate(puts)
                      if op.value is not None and op.ttl is not None}
        for op in puts:
            where = (_ns.encode(op.namespace), op.key)
            batch.reindexed.add(where)
            if op.value is None or op.index is False or self.index_config is None:
                continue
            paths = (self.index_config["__tokenized_fields"] if op.index is None
                     else [(p, tokenize_path(p)) for p in op.index])
            for path, tokens in paths:
                texts = get_text_at_path(op.value, tokens)
                for i, text in enumerate(texts):
                    name = f"{path}.{i}" if len(texts) > 1 else path
                    batch.texts.append((*where, name, text))
        batch.ranked = {i for i, op in enumerate(ops) if isinstance(op, SearchOp) and op.query
                        and self.embeddings is not None}
        return batch

    def _dims(self) -> int | None:
        return None if self.index_config is None else int(self.index_config["dims"])

    def _keep_vectors(self, batch: _Batch, found: Sequence[Sequence[float]]) -> None:
        if len(found) != len(batch.texts):
            raise InvalidInputError(f"the embeddings returned {len(found)} vectors for "
                                    f"{len(batch.texts)} texts")
        for (ns, key, name, _), vector in zip(batch.texts, found, strict=True):
            checked = _values.check_vector(vector, self._dims(), f"the embedding of {key!r}")
            packed = _values.pack_vector(checked)
            batch.vectors.setdefault((ns, key), []).append(
                (name, packed, _codes.encode(_values.unpack_vector(packed))))

    def _queries(self, batch: _Batch) -> list[str]:
        return list(dict.fromkeys(str(batch.ops[i].query)  # type: ignore[union-attr]
                                  for i in sorted(batch.ranked)))

    def _keep_queries(self, batch: _Batch, queries: list[str],
                      found: Sequence[Sequence[float]]) -> None:
        for query, vector in zip(queries, found, strict=True):
            batch.queries[query] = _values.check_vector(vector, self._dims(),
                                                        "the query's embedding")

    # --- planning: which database answers what --------------------------------------------

    def _where(self, op: Op) -> list[str]:
        """The databases an op needs: its namespace's home, or every database."""
        if isinstance(op, GetOp | PutOp):
            return [self.home(op.namespace)]
        if isinstance(op, SearchOp):
            return [self.home(op.namespace_prefix)] if op.namespace_prefix else list(
                self.database_ids)
        head: tuple[str, ...] = ()
        for cond in op.match_conditions or ():
            if cond.match_type == "prefix":
                head = _ns.literal_head(cond.path)
        return [self.home(head)] if head else list(self.database_ids)

    @property
    def omit_expired(self) -> bool:
        """Whether reads leave out expired items before a sweep deletes them: TTLConfig's
        `omit_expired`, True when the config does not say (docs/STORE.md)."""
        return bool((self.ttl_config or {}).get("omit_expired", True))

    def _plans(self, batch: _Batch) -> dict[str, _plan.Plan]:
        now = self.clock()
        live_at = now if self.omit_expired else None
        reads: dict[str, list[tuple[int, Op]]] = {}
        single: dict[int, bool] = {}
        for i, op in enumerate(batch.ops):
            if isinstance(op, PutOp):
                continue
            dbs = self._where(op)
            single[i] = len(dbs) == 1
            for db in dbs:
                reads.setdefault(db, []).append((i, op))
        writes: dict[str, list[int]] = {}
        for n, op in enumerate(batch.puts):
            writes.setdefault(self.home(op.namespace), []).append(n)
        plans = {}
        prefiltered = self._prefiltered(batch)
        exact = bool((self.index_config or {}).get("exact"))
        distance = (self.index_config or {}).get("distance_type", "cosine")
        for db in dict.fromkeys([*reads, *writes]):
            mine = writes.get(db, [])
            puts = [batch.puts[n] for n in mine]
            stored = {k: batch.stored[n] for k, n in enumerate(mine) if n in batch.stored}
            expires = {k: (now + batch.ttls[n] * 60, batch.ttls[n])
                       for k, n in enumerate(mine) if n in batch.ttls}
            keys = {(_ns.encode(p.namespace), p.key) for p in puts}
            vectors = {k: v for k, v in batch.vectors.items() if k in keys}
            reindexed = batch.reindexed & keys
            its_reads = reads.get(db, [])
            ranks: dict[int, dict[str, Any]] = {}
            # Not beside puts: the Worker reads the candidates after the batch's writes.
            if (batch.ranked and not exact and not batch.puts
                    and "rank" in self._fleet.nodes[db].client.features):
                ranks = {i: {"query": batch.queries[str(op.query)], "distance": distance,
                             "keep": op.offset + op.limit}
                         for i, op in its_reads if i in batch.ranked
                         and isinstance(op, SearchOp)}
            plans[db] = _plan.build(its_reads, puts, stored, vectors, reindexed, now,
                                    live_at=live_at, expires=expires,
                                    refresh_filtered=bool((self.ttl_config or {}).get(
                                        "default_ttl")),
                                    single={i for i, one in single.items() if one},
                                    ranked=batch.ranked, prefiltered=prefiltered - set(ranks),
                                    ranks=ranks)
        return plans

    def _prefiltered(self, batch: _Batch) -> set[int]:
        """The ranked searches that read codes first: all of them, unless the index says
        `exact` or the batch also puts (the second request would see the batch's writes). A
        database behind d1saver's gateway Worker ranks them instead, in one request."""
        if batch.puts or (self.index_config or {}).get("exact"):
            return set()
        return set(batch.ranked)

    def _candidates(self, batch: _Batch, partials: dict[str, _plan.Partial]
                    ) -> dict[str, _plan.Second]:
        """The second request of each database for the prefiltered searches that read codes:
        the rows and vectors of the items whose score bounds can reach the page
        (codes.select), chosen over every database's codes. A database that read its scope
        whole gave its rows already: the candidates of the others are chosen among theirs
        (an item left out has `need` better ones among them, so it is not in the page)."""
        distance = (self.index_config or {}).get("distance_type", "cosine")
        live_at = self.clock() if self.omit_expired else None
        out: dict[str, _plan.Second] = {}
        for i, op in enumerate(batch.ops):
            if not isinstance(op, SearchOp) or not any(i in p.codes for p in partials.values()):
                continue  # not prefiltered, or every database read its scope whole
            names: dict[tuple[str, int], int] = {}
            verdicts: list[int] = []
            codes: list[str | None] = []
            owner: list[int] = []
            for db, part in partials.items():
                rows = part.codes.get(i, [])
                at = [names.setdefault((db, r[0]), len(names)) for r in rows]
                verdicts.extend([0] * (len(names) - len(verdicts)))
                for n, r in zip(at, rows, strict=True):
                    verdicts[n] = r[1]
                codes += [r[2] for r in rows if r[2] is not None]
                owner += [n for n, r in zip(at, rows, strict=True) if r[2] is not None]
            sure = [v == 2 for v in verdicts]
            wanted: dict[str, list[int]] = {}
            order = list(names)
            for n in _codes.select(batch.queries[str(op.query)], codes, owner, sure,
                                   op.offset + op.limit, distance):
                db, item = order[n]
                wanted.setdefault(db, []).append(item)
            for db, items in wanted.items():
                out.setdefault(db, _plan.Second()).add(i, items, op, live_at)
        return out

    # --- merging: every database's rows into each op's result -----------------------------

    def _merge(self, batch: _Batch, partials: list[_plan.Partial]
               ) -> tuple[list[Result], dict[str, list[Statement]]]:
        sealer = self.sealer
        now = self.clock()
        results: list[Result] = []
        refresh: dict[str, list[list[str]]] = {}
        items: dict[tuple[str, str], _plan.Row] = {}
        for part in partials:
            items.update(part.items)
        for i, op in enumerate(batch.ops):
            if isinstance(op, GetOp):
                row = items.get((_ns.encode(op.namespace), op.key))
                results.append(None if row is None else row.item(sealer))
            elif isinstance(op, PutOp):
                results.append(None)
            elif isinstance(op, SearchOp):
                found, unrefreshed = self._search(i, op, batch, partials, sealer)
                results.append(found)
                if op.refresh_ttl:
                    for it in unrefreshed:
                        ns = _ns.encode(it.namespace)
                        refresh.setdefault(self.home(it.namespace), []).append([ns, it.key])
            else:
                results.append(self._list(i, op, partials))
        live_at = now if self.omit_expired else None
        statements = {db: [Statement.bind(_sql.REFRESH_ITEMS, {"keys": param, "now": now,
                                                               "live_at": live_at})
                           for param in _plan.json_lists(keys, "a key")]
                      for db, keys in refresh.items()}
        return results, statements

    def _search(self, i: int, op: SearchOp, batch: _Batch, partials: list[_plan.Partial],
                sealer: Any) -> tuple[list[SearchItem], list[Item]]:
        """The op's page, and the items of it with a TTL that SQL did not refresh (a second
        request refreshes them)."""
        rows: list[_plan.Row] = []
        vectors: dict[tuple[str, str], list[str]] = {}
        skipped = 0
        refreshed = False
        for part in partials:
            rows.extend(part.searches.get(i, []))
            vectors.update(part.vectors.get(i, {}))
            skipped += part.skipped.get(i, 0)
            refreshed = refreshed or i in part.refreshed
        rows.sort(key=lambda r: (-float(r.updated_at), r.ns, r.key))
        if i in batch.ranked:
            return self._rank(op, batch, rows, vectors, sealer)
        candidates = [(row, row.item(sealer)) for row in rows]
        if op.filter:
            candidates = [(r, it) for r, it in candidates
                          if _filters.matches(it.value, op.filter)]
        start = op.offset - skipped  # SQL left out `skipped` matches before the page
        page = candidates[start: start + op.limit]
        return ([_search_item(it) for _, it in page],
                [it for r, it in page
                 if r.ttl and not (refreshed and r.verdict == 2 and r.unsure_upto == 0)])

    def _rank(self, op: SearchOp, batch: _Batch, rows: list[_plan.Row],
              vectors: dict[tuple[str, str], list[str]], sealer: Any
              ) -> tuple[list[SearchItem], list[Item]]:
        """A ranked search's page from its rows in order (every row in scope, or a prefilter's
        candidates) and their vectors. A value is decoded only for a row SQL cannot tell the
        filter of (verdict 1) and for the rows of the page."""
        opened: dict[int, Item] = {}

        def item(n: int) -> Item:
            if n not in opened:
                opened[n] = rows[n].item(sealer)
            return opened[n]

        candidates = [(n, r) for n, r in enumerate(rows)
                      if not op.filter or r.verdict == 2
                      or _filters.matches(item(n).value, op.filter)]
        query = batch.queries[op.query]  # type: ignore[index]
        flat: list[tuple[_plan.Row, int]] = []
        flat_vectors: list[list[float]] = []
        scoreless = []
        for n, r in candidates:
            vs = vectors.get((r.ns, r.key), [])
            for v in vs:
                flat.append((r, n))
                flat_vectors.append(_values.unpack_vector(v))
            if not vs:
                scoreless.append((r, n))
        scores = _values.similarity(query, flat_vectors,
                                    (self.index_config or {}).get("distance_type", "cosine"))
        ranked = sorted(zip(scores, range(len(flat)), strict=True), key=lambda x: (-x[0], x[1]))
        seen: set[tuple[str, str]] = set()
        kept: list[tuple[float | None, _plan.Row, Item]] = []
        for score, at in ranked:
            r, n = flat[at]
            if (r.ns, r.key) in seen:
                continue
            ix = len(seen)
            seen.add((r.ns, r.key))
            if ix >= op.offset + op.limit:
                break
            if ix >= op.offset:
                kept.append((score, r, item(n)))
        if scoreless and len(kept) < op.limit:
            kept.extend((None, r, item(n)) for r, n in scoreless[: op.limit - len(kept)])
        return ([_search_item(it, score) for score, _, it in kept],
                [it for _, r, it in kept if r.ttl])

    def _list(self, i: int, op: ListNamespacesOp, partials: list[_plan.Partial]
              ) -> list[tuple[str, ...]]:
        names: set[tuple[str, ...]] = set()
        for part in partials:
            for text in part.namespaces.get(i, []):
                ns = _ns.decode(text)
                if all(_ns.matches(c.match_type, c.path, ns) for c in op.match_conditions or ()):
                    names.add(ns[: op.max_depth] if op.max_depth is not None else ns)
        return sorted(names)[op.offset: op.offset + op.limit]

    # --- TTL --------------------------------------------------------------------------------

    def sweep_ttl(self) -> int:
        """Delete expired items (and their vectors) in every database; returns how many."""
        now = self.clock()
        counts = self._fleet.each(lambda node: self._exchange(node, _sweep(now)), "sweep_ttl")
        return sum(_swept(results) for results in counts.values())

    async def asweep_ttl(self) -> int:
        now = self.clock()
        counts = await self._fleet.aeach(lambda node: self._aexchange(node, _sweep(now)),
                                         "sweep_ttl")
        return sum(_swept(results) for results in counts.values())

    def start_ttl_sweeper(self, sweep_interval_minutes: int | None = None) -> threading.Thread:
        """Sweep every `sweep_interval_minutes` (default: the TTL config's, else 5) in a
        daemon thread until `stop_ttl_sweeper`; a failed sweep is retried at the next one."""
        if self._sweeper is not None and self._sweeper.is_alive():
            return self._sweeper
        minutes = (sweep_interval_minutes or (self.ttl_config or {}).get("sweep_interval_minutes")
                   or 5)
        self._sweeper_stop.clear()

        def loop() -> None:
            while not self._sweeper_stop.wait(float(minutes) * 60):
                try:
                    self.sweep_ttl()
                except Exception:  # noqa: BLE001 - a sweep failing must not end the loop
                    continue

        self._sweeper = threading.Thread(target=loop, daemon=True, name="d1store-ttl-sweeper")
        self._sweeper.start()
        return self._sweeper

    def stop_ttl_sweeper(self, timeout: float | None = None) -> bool:
        """Stop the sweeper thread; True if it stopped (or none ran)."""
        if self._sweeper is None or not self._sweeper.is_alive():
            return True
        self._sweeper_stop.set()
        self._sweeper.join(timeout)
        stopped = not self._sweeper.is_alive()
        if stopped:
            self._sweeper = None
        return stopped

    def close(self) -> None:
        self.stop_ttl_sweeper(timeout=1)
        super().close()

    # --- maintenance (the CLI) --------------------------------------------------------------

    def delete_namespace(self, namespace: Sequence[str]) -> int:
        """Delete every item of a namespace and of the namespaces under it (one request to its
        database; to every database for the empty prefix); returns how many."""
        _ns.check_labels(namespace)
        exact, low, high = _ns.scope(namespace)
        stmts = [Statement.bind(query, {"exact": exact, "low": low, "high": high})
                 for query in _sql.DELETE_SCOPE]
        dbs = [self.home(namespace)] if namespace else list(self.database_ids)
        out = self._fleet.each(lambda node: self._exchange(node, stmts)[-1].changes,
                               "delete_namespace", dbs)
        return sum(out.values())


def _search_item(item: Item, score: float | None = None) -> SearchItem:
    return SearchItem(namespace=item.namespace, key=item.key, value=item.value,
                      created_at=item.created_at, updated_at=item.updated_at,
                      score=None if score is None else float(score))


def _sweep(now: float) -> list[Statement]:
    return [Statement.bind(query, {"now": now}) for query in _sql.SWEEP_STORE]


def _swept(results: Sequence[Any]) -> int:
    return int(results[-1].changes)


def _check_key(key: Any) -> None:
    _values.check_key(key, "an item key")


def _normal(op: Any) -> Any:
    """An op as LangGraph's stores read it: a match condition's path given as a str is the
    sequence of its characters (InMemoryStore and PostgresStore iterate it)."""
    if isinstance(op, ListNamespacesOp) and op.match_conditions:
        conds = tuple(c._replace(path=tuple(c.path)) if isinstance(c.path, str) else c
                      for c in op.match_conditions)
        return op._replace(match_conditions=conds)
    return op


def _not_in_event_loop(name: str) -> None:
    """A sync call from the thread of a running event loop would block the loop for a whole
    request: refused, as LangGraph's async stores refuse it."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return
    raise asyncio.InvalidStateError(
        f"Synchronous calls to {name} detected in the main event loop. This can lead to "
        f"deadlocks or performance issues. Please use the asynchronous interface for main "
        f"thread operations: replace `store.get(...)` with `await store.aget(...)`, and so on.")


def _check_page(limit: Any, offset: Any) -> None:
    if not isinstance(limit, int) or not isinstance(offset, int) or limit < 0 or offset < 0:
        raise InvalidInputError(f"limit and offset are whole numbers >= 0, not {limit!r}, "
                                f"{offset!r}")


__all__ = ["D1Store"]
