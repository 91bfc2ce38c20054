"""D1Store: LangGraph's long-term memory (`BaseStore`) in D1, sync and async on one instance.

A `batch` is one request per database it touches (one, for a single database): its reads and
then its writes as one D1 batch, one transaction. The async calls of one event-loop tick share
such a request, in call order (d1saver/memory/coalesce.py). Items live in `store_items`, their vectors
in `store_vectors`; expired items are invisible to every read (each read compares expires_at
with now) until a sweep deletes them. See docs/STORE.md for the design and its costs.
"""

from __future__ import annotations

import asyncio
import logging
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
from d1saver.http import telemetry
from d1saver.memory import codes as _codes
from d1saver.memory import coalesce as _coalesce
from d1saver.memory import filters as _filters
from d1saver.memory import namespaces as _ns
from d1saver.memory import plan as _plan
from d1saver.memory import encoding as _encoding
from d1saver.memory.base import Memory
from d1saver.sql import memory as _sql

_log = logging.getLogger("d1saver")


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
    asked: dict[int, int] = field(default_factory=dict)  # read op -> databases it asks
    beside_puts: bool = False  # gathered in a request that also writes (`_prefiltered`)
    at: float = 0.0  # the clock when its writes were planned (their updated_at)


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
                    _encoding.check_ttl(ttl["default_ttl"], "minutes", 60)
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
            if config.setdefault("distance_type", "cosine") not in _encoding.DISTANCES:
                raise ConfigError(f"index distance_type {config['distance_type']!r}: use one of "
                                  f"{', '.join(_encoding.DISTANCES)}")
            config["__tokenized_fields"] = [(p, tokenize_path(p)) if p != "$" else (p, p)
                                            for p in (config.get("fields") or ["$"])]
            self.index_config = config
        self._sweeper: threading.Thread | None = None
        self._sweeper_stop = threading.Event()
        self._tick: _coalesce.Tick[_Batch] = _coalesce.Tick(self._aflush)

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
        partials = []
        for n, plans in enumerate(self._rounds(batch)):
            done = self._each_round({db: p.statements for db, p in plans.items()}, "store batch")
            partials += [(db, n, _plan.read(plan, done[db])) for db, plan in plans.items()]
        second = self._candidates(batch, partials)
        if second:
            found = self._each_round({db: s.statements for db, (_, s) in second.items()},
                                     "store search")
            for db, (part, candidates) in second.items():
                candidates.fill(found[db], part)
        results, refresh = self._merge(batch, partials)
        for db, statements in refresh.items():
            self._exchange(self._fleet.databases[db], statements)
        return results

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        """The batch, gathered with the other calls of this event-loop tick (aget, aput,
        asearch, ... of concurrent tasks): checked and encoded here (a bad input raises before
        anything is sent), then sent with them, in call order, as one request per database.
        A batch that takes more than one round (while migrating, one that reads or writes what
        moved) runs its own rounds, as `batch` does, in its place in call order (docs/STORE.md,
        "Concurrent async calls")."""
        batch = self._prepare(ops)
        size = sum(len(text) for text in batch.stored.values())
        results: list[Result] = await self._tick.submit(
            batch, size=size, databases=self._touched(batch), alone=self._moving(batch))
        return results

    def _moving(self, batch: _Batch) -> bool:
        """Whether the batch takes more than one round (`_rounds`): a read that asks where
        what moved may still be, or a put whose item has a previous home."""
        if self.previous_database_ids is None:
            return False
        return (any(self._where(op)[0] for op in batch.ops if not isinstance(op, PutOp))
                or any(self.layout.item_previous(op.namespace) for op in batch.puts))

    def _touched(self, batch: _Batch) -> set[str]:
        """The databases the batch reads or writes (in any round)."""
        dbs = {db for op in batch.ops if not isinstance(op, PutOp)
               for where in self._where(op) for db in where}
        return dbs | {self.home(op.namespace) for op in batch.puts}

    def _one_round(self, batch: _Batch) -> dict[str, _plan.Plan]:
        """A gathered batch's plans: one round (a batch of more is sent alone)."""
        rounds = self._rounds(batch)
        if len(rounds) > 1:  # `_moving` sends such a batch alone, never gathered
            raise RuntimeError("a gathered store batch planned more than one round")
        return rounds[0] if rounds else {}

    # --- gathering: the calls of one tick, in call order ----------------------------------

    async def _aflush(self, calls: list[_coalesce.Call[_Batch]]) -> None:
        calls = await self._aembed(calls)
        for run in _coalesce.runs(calls):
            if run[0].alone:
                await self._asend_alone(run[0])
                continue
            for chunk in _coalesce.chunks(run):
                await self._asend_chunk(chunk)

    async def _asend_alone(self, c: _coalesce.Call[_Batch]) -> None:
        if c.future.done():  # cancelled while the calls before it were sent: not sent
            return
        try:
            c.settle(await self._asend(c.work))
        except Exception as exc:  # noqa: BLE001 - the error is the gathered call's outcome
            c.fail(exc)

    async def _aembed(self, calls: list[_coalesce.Call[_Batch]]) -> list[_coalesce.Call[_Batch]]:
        """Every text and query of the gathered calls embedded at once; a call whose
        embedding fails gets that error and is left out."""
        texts = [c for c in calls if c.work.texts]
        if texts:
            assert self.embeddings is not None
            try:
                found = await self.embeddings.aembed_documents(
                    [t[3] for c in texts for t in c.work.texts])
                if len(found) != sum(len(c.work.texts) for c in texts):
                    raise InvalidInputError(
                        f"the embeddings returned {len(found)} vectors for "
                        f"{sum(len(c.work.texts) for c in texts)} texts")
            except Exception as exc:  # noqa: BLE001 - the error is the gathered call's outcome
                for c in texts:
                    c.fail(exc)
            else:
                at = 0
                for c in texts:
                    n = len(c.work.texts)
                    try:
                        self._keep_vectors(c.work, found[at: at + n])
                    except Exception as exc:  # noqa: BLE001 - the error is the gathered call's outcome
                        c.fail(exc)
                    at += n
        asking = [c for c in calls if c.work.ranked and not c.future.done()]
        if asking:
            assert self.embeddings is not None
            queries = list(dict.fromkeys(q for c in asking for q in self._queries(c.work)))
            try:
                vectors = await asyncio.gather(*(self.embeddings.aembed_query(q)
                                                 for q in queries))
            except Exception as exc:  # noqa: BLE001 - the error is the gathered call's outcome
                for c in asking:
                    c.fail(exc)
            else:
                by_query = dict(zip(queries, vectors, strict=True))
                for c in asking:
                    mine = self._queries(c.work)
                    try:
                        self._keep_queries(c.work, mine, [by_query[q] for q in mine])
                    except Exception as exc:  # noqa: BLE001 - the error is the gathered call's outcome
                        c.fail(exc)
        return [c for c in calls if not c.future.done()]

    async def _asend_chunk(self, chunk: list[_coalesce.Call[_Batch]]) -> None:
        """The chunk's calls as one request per database they touch; a chunk past D1's
        statements bound is cut until each part fits. A chunk that writes nothing lets its
        searches by meaning read codes: their candidates follow in one more request per
        database, for every call of the chunk (`_candidates`); one that writes scans exactly."""
        writes = any(c.work.puts for c in chunk)
        phases = [(group, *_join([c.work for c in group])) for group in _phases(chunk)]
        for _, joined, _ in phases:
            joined.beside_puts = writes
        planned = [(group, joined, offsets, self._one_round(joined))
                   for group, joined, offsets in phases]
        statements: dict[str, list[Statement]] = {}
        starts: list[dict[str, int]] = []
        for _, _, _, plans in planned:
            starts.append({})
            for db, plan in plans.items():
                mine = statements.setdefault(db, [])
                starts[-1][db] = len(mine)
                mine.extend(plan.statements)
        parts = _coalesce.cut(chunk, statements)
        if parts:  # each planned once more (not the tail again and again)
            for calls in parts:
                await self._asend_chunk(calls)
            return
        outcomes = await _coalesce.send_each(self._fleet, statements, self._aexchange)
        alone = _coalesce.failures(self._fleet, "store batch", chunk, outcomes)
        read = []
        for (group, joined, offsets, plans), start in zip(planned, starts, strict=True):
            partials = []
            for db, plan in plans.items():
                got = outcomes[db]
                if not isinstance(got, Exception):
                    part = got[start[db]: start[db] + len(plan.statements)]
                    partials.append((db, 0, _plan.read(plan, part)))
            read.append((group, joined, offsets, partials, self._candidates(joined, partials)))
        alone += await self._asend_candidates(read)
        refresh: dict[str, list[Statement]] = {}
        answers: list[tuple[_coalesce.Call[_Batch], list[Result]]] = []
        for group, joined, offsets, partials, _ in read:
            results, more = self._merge(joined, partials)
            for db, stmts in more.items():
                refresh.setdefault(db, []).extend(stmts)
            for c, at in zip(group, offsets, strict=True):
                if not c.future.done() and c not in alone:
                    answers.append((c, results[at: at + len(c.work.ops)]))
        refreshed = (await _coalesce.send_each(self._fleet, refresh, self._aexchange)
                     if refresh else {})
        for c, results in answers:
            refreshing = any(isinstance(op, SearchOp) and op.refresh_ttl for op in c.work.ops)
            errors = [got for db, got in refreshed.items()
                      if isinstance(got, Exception) and db in c.databases and refreshing]
            if errors:
                c.fail(errors[0])
            else:
                c.settle(results)
        for c in sorted(alone, key=chunk.index):  # each alone, in call order
            try:
                c.settle(await self._asend(c.work))
            except Exception as exc:  # noqa: BLE001 - the error is the gathered call's outcome
                c.fail(exc)

    async def _asend_candidates(self, read: list[Any]) -> list[_coalesce.Call[_Batch]]:
        """The candidates of a gathered chunk's prefiltered searches (`read`: each phase's
        calls, joined batch, offsets, partials and `_candidates`), one request per database,
        filled into the partials. A call whose candidates failed gets the error, or is
        returned to be sent again alone (D1 rolled back a shared request on one call's SQL)."""
        statements: dict[str, list[Statement]] = {}
        starts: list[dict[str, int]] = []
        for *_, wanted in read:
            starts.append({})
            for db, (_, candidates) in wanted.items():
                mine = statements.setdefault(db, [])
                starts[-1][db] = len(mine)
                mine.extend(candidates.statements)
        if not statements:
            return []
        found = await _coalesce.send_each(self._fleet, statements, self._aexchange)
        asking: dict[_coalesce.Call[_Batch], set[str]] = {}
        for (group, _, offsets, _, wanted), start in zip(read, starts, strict=True):
            for db, (part, candidates) in wanted.items():
                got = found[db]
                if not isinstance(got, Exception):
                    candidates.fill(got[start[db]: start[db] + len(candidates.statements)], part)
                    continue
                for c, at in zip(group, offsets, strict=True):
                    if any(at <= i < at + len(c.work.ops) for i, _, _ in candidates.parts):
                        asking.setdefault(c, set()).add(db)
        if not asking:
            return []
        # Each call as touching only the databases its candidates failed in.
        searched = {c: _coalesce.Call(c.work, c.future, c.size, dbs, c.alone)
                    for c, dbs in asking.items() if not c.future.done()}
        again = _coalesce.failures(self._fleet, "store search", list(searched.values()),
                                   {db: found[db] for dbs in asking.values() for db in dbs})
        return [c for c, one in searched.items() if one in again]

    async def _asend(self, batch: _Batch) -> list[Result]:
        """One call's batch alone (embedded already), in rounds: one request per database
        each (one round but while migrating)."""
        partials = []
        for n, plans in enumerate(self._rounds(batch)):
            done = await self._aeach_round({db: p.statements for db, p in plans.items()},
                                           "store batch")
            partials += [(db, n, _plan.read(plan, done[db])) for db, plan in plans.items()]
        second = self._candidates(batch, partials)
        if second:
            found = await self._aeach_round({db: s.statements for db, (_, s) in second.items()},
                                            "store search")
            for db, (part, candidates) in second.items():
                candidates.fill(found[db], part)
        results, refresh = self._merge(batch, partials)
        for db, statements in refresh.items():
            await self._aexchange(self._fleet.databases[db], statements)
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
                    _encoding.check_ttl(op.ttl, "minutes", 60)
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
        stored = {n: _encoding.dump_item(op.value, _ns.encode(op.namespace), op.key, sealer)
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
        packed = _encoding.pack_vectors(found, self._dims(),
                                        [f"the embedding of {t[1]!r}" for t in batch.texts])
        for (ns, key, name, _), text, code in zip(batch.texts, packed,
                                                  _codes.encode_packed(packed), strict=True):
            batch.vectors.setdefault((ns, key), []).append((name, text, code))

    def _queries(self, batch: _Batch) -> list[str]:
        return list(dict.fromkeys(str(batch.ops[i].query)  # type: ignore[union-attr]
                                  for i in sorted(batch.ranked)))

    def _keep_queries(self, batch: _Batch, queries: list[str],
                      found: Sequence[Sequence[float]]) -> None:
        for query, vector in zip(queries, found, strict=True):
            batch.queries[query] = _encoding.check_vector(vector, self._dims(),
                                                        "the query's embedding")

    # --- planning: which database answers what --------------------------------------------

    def _where(self, op: Op) -> tuple[list[str], list[str]]:
        """The databases a read op asks: first (while migrating) where what it reads may still
        be, then where it lives (its namespace's home, or every database). Asking the previous
        home first, the home after, no item a rebalance moves meanwhile is missed: a move
        writes the home before it deletes the previous home."""
        if isinstance(op, GetOp):
            return self.layout.item_previous(op.namespace), [self.home(op.namespace)]
        if isinstance(op, SearchOp):
            head: tuple[str, ...] = tuple(op.namespace_prefix)
        else:
            assert isinstance(op, ListNamespacesOp)
            head = ()
            for cond in op.match_conditions or ():
                if cond.match_type == "prefix":
                    head = _ns.literal_head(cond.path)
        if head:
            return self.layout.item_previous(head), [self.home(head)]
        if self.previous_database_ids is None:
            return [], list(self.database_ids)
        return self.every_database_id, list(self.database_ids)

    @property
    def omit_expired(self) -> bool:
        """Whether reads leave out expired items before a sweep deletes them: TTLConfig's
        `omit_expired`, True when the config does not say (docs/STORE.md)."""
        return bool((self.ttl_config or {}).get("omit_expired", True))

    def _rounds(self, batch: _Batch) -> list[dict[str, _plan.Plan]]:
        """The batch as rounds of requests, one per database each (its plan), the rounds one
        after the other. Without previous databases, one round: every read and write at its
        home.
        While migrating, what moved costs a round before (its previous homes' reads, and its
        deletes there, so that a move reading there after the delete finds nothing) and one
        after (a put's copy at its previous home deleted once the home holds the new value)."""
        now = batch.at = self.clock()
        reads: list[dict[str, list[tuple[int, Op]]]] = [{}, {}]
        for i, op in enumerate(batch.ops):
            if isinstance(op, PutOp):
                continue
            where = self._where(op)
            batch.asked[i] = sum(len(dbs) for dbs in where)
            for n, dbs in enumerate(where):
                for db in dbs:
                    reads[n].setdefault(db, []).append((i, op))
        writes: dict[str, list[int]] = {}
        deletes: list[dict[str, list[PutOp]]] = [{}, {}]  # previous homes: before, after
        voiding: set[str] = set()
        for n, op in enumerate(batch.puts):
            home = self.home(op.namespace)
            writes.setdefault(home, []).append(n)
            for old in self.layout.item_previous(op.namespace):
                deletes[op.value is not None].setdefault(old, []).append(PutOp(
                    op.namespace, op.key, None))
                if op.value is None:
                    voiding.add(home)
        before = self._round_plans(batch, reads[0], {}, deletes[0], now) if reads[0] or deletes[0] else {}
        main = self._round_plans(batch, reads[1], writes, {}, now)
        for db in voiding:
            main[db].statements.append(self._void())
        after = self._round_plans(batch, {}, {}, deletes[1], now) if deletes[1] else {}
        return [plans for plans in (before, main, after) if plans]

    def _round_plans(self, batch: _Batch, reads: dict[str, list[tuple[int, Op]]],
                     writes: dict[str, list[int]], deletes: dict[str, list[PutOp]],
                     now: float) -> dict[str, _plan.Plan]:
        """Each database's statements of one round: its reads, then its writes (`writes`:
        positions in batch.puts; `deletes`: copies at a previous home to delete)."""
        single = {i for i, n in batch.asked.items() if n == 1}
        plans = {}
        prefiltered = self._prefiltered(batch)
        distance = (self.index_config or {}).get("distance_type", "cosine")
        whole = _plan.whole_items(self._dims() or 0,
                                  len((self.index_config or {}).get("__tokenized_fields", ())))
        for db in dict.fromkeys([*reads, *writes, *deletes]):
            mine = writes.get(db, [])
            puts = [batch.puts[n] for n in mine] + deletes.get(db, [])
            stored = {k: batch.stored[n] for k, n in enumerate(mine) if n in batch.stored}
            expires = {k: (now + batch.ttls[n] * 60, batch.ttls[n])
                       for k, n in enumerate(mine) if n in batch.ttls}
            keys = {(_ns.encode(p.namespace), p.key) for p in puts}
            vectors = {k: v for k, v in batch.vectors.items()
                       if k in keys and db in writes}
            reindexed = (batch.reindexed & keys) | {(_ns.encode(p.namespace), p.key)
                                                    for p in deletes.get(db, [])}
            its_reads = reads.get(db, [])
            ranks: dict[int, dict[str, Any]] = {}
            if prefiltered and "rank" in self._fleet.databases[db].client.features:
                ranks = {i: {"query": batch.queries[str(op.query)], "distance": distance,
                             "keep": op.offset + op.limit}
                         for i, op in its_reads if i in prefiltered and isinstance(op, SearchOp)}
            plans[db] = _plan.build(its_reads, puts, stored, vectors, reindexed, now,
                                    live_at=now if self.omit_expired else None,
                                    expires=expires,
                                    refresh_filtered=bool((self.ttl_config or {}).get(
                                        "default_ttl")),
                                    single=single, ranked=batch.ranked,
                                    prefiltered=prefiltered - set(ranks), ranks=ranks,
                                    whole=whole)
        return plans

    def _prefiltered(self, batch: _Batch) -> set[int]:
        """The ranked searches that read codes first, then their candidates in a second
        request: all of them, unless the index says `exact`, the request also writes (the
        second request would see its writes: `batch.puts`, or `batch.beside_puts` for a
        gathered one), or the search asks where moved items may still be (while migrating an
        item can be in two databases, and codes do not say which copy is read). A database
        behind d1saver's gateway Worker ranks them instead, in one request."""
        if batch.puts or batch.beside_puts or (self.index_config or {}).get("exact"):
            return set()
        return {i for i in batch.ranked if not self._where(batch.ops[i])[0]}

    def _candidates(self, batch: _Batch, partials: list[tuple[str, int, _plan.Partial]]
                    ) -> dict[str, tuple[_plan.Partial, _plan.Second]]:
        """The second request of each database for the prefiltered searches that read codes
        (with the partial its answer fills): the rows and vectors of the items whose score
        bounds can reach the page (codes.select), chosen over every database's codes. A
        database that read its scope whole gave its rows already: the candidates of the others
        are chosen among theirs (an item left out has `need` better ones among them, so it is
        not in the page). A prefiltered search is read in one round, once per database."""
        distance = (self.index_config or {}).get("distance_type", "cosine")
        live_at = self.clock() if self.omit_expired else None
        out: dict[str, tuple[_plan.Partial, _plan.Second]] = {}
        for i, op in enumerate(batch.ops):
            holders = {db: part for db, _, part in partials if i in part.codes}
            if not isinstance(op, SearchOp) or not holders:
                continue  # not prefiltered, or every database read its scope whole
            names: dict[tuple[str, int], int] = {}
            verdicts: list[int] = []
            codes: list[str | None] = []
            owner: list[int] = []
            for db, part in holders.items():
                rows = part.codes[i]
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
                if db not in out:
                    out[db] = (holders[db], _plan.Second())
                elif out[db][0] is not holders[db]:
                    raise RuntimeError("a database read prefiltered searches in two rounds")
                out[db][1].add(i, items, op, live_at)
        return out

    # --- merging: every database's rows into each op's result -----------------------------

    def _merge(self, batch: _Batch, partials: list[tuple[str, int, _plan.Partial]]
               ) -> tuple[list[Result], dict[str, list[Statement]]]:
        """Each op's result from what every database returned (`partials`: database, round,
        rows). An item found in two databases (a put or a move caught midway) is read from its
        home, the later round first: the copy elsewhere is an older one."""
        sealer = self.sealer
        now = self.clock()
        results: list[Result] = []
        refresh: dict[str, list[list[str]]] = {}
        restore: dict[str, list[Statement]] = {}
        put = {(_ns.encode(p.namespace), p.key) for p in batch.puts if p.value is not None}
        items = self._pick([(db, n, row) for db, n, part in partials
                            for row in part.items.values()])
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
                    for row in unrefreshed:
                        if (row.ns, row.key) in put:  # refreshed before the put: not new
                            restore.setdefault(self.home(_ns.decode(row.ns)), []).append(
                                Statement.bind(_sql.RESTORE_CREATED, {
                                    "ns": row.ns, "key": row.key, "created_at": row.created_at,
                                    "put_at": batch.at}))
                        else:
                            refresh.setdefault(row.db, []).append([row.ns, row.key])
            else:
                results.append(self._list(i, op, [part for _, _, part in partials]))
        live_at = now if self.omit_expired else None
        statements = {db: [Statement.bind(_sql.REFRESH_ITEMS, {"keys": param, "now": now,
                                                               "live_at": live_at})
                           for param in _plan.json_lists(keys, "a key")]
                      for db, keys in refresh.items()}
        for db, more in restore.items():
            statements.setdefault(db, []).extend(more)
        return results, statements

    def _pick(self, found: Iterable[tuple[str, int, _plan.Row]]
              ) -> dict[tuple[str, str], _plan.Row]:
        """One row per item: its home's, of the latest round, else the latest found."""
        best: dict[tuple[str, str], tuple[str, int, _plan.Row]] = {}
        homes: dict[str, str] = {}

        def rank(db: str, n: int, ns: str) -> tuple[bool, int]:
            if ns not in homes:  # only for an item found twice
                homes[ns] = self.home(_ns.decode(ns))
            return (homes[ns] == db, n)

        for db, n, row in found:
            key = (row.ns, row.key)
            have = best.get(key)
            if have is None or rank(db, n, row.ns) >= rank(have[0], have[1], row.ns):
                best[key] = (db, n, row)
        for db, _, row in best.values():
            row.db = db
        return {key: row for key, (_, _, row) in best.items()}

    def _search(self, i: int, op: SearchOp, batch: _Batch,
                partials: list[tuple[str, int, _plan.Partial]], sealer: Any
                ) -> tuple[list[SearchItem], list[_plan.Row]]:
        """The op's page, and the rows of it with a TTL that SQL did not refresh (a second
        request refreshes them where each was read)."""
        picked = self._pick([(db, n, row) for db, n, part in partials
                             for row in part.searches.get(i, [])])
        rows = list(picked.values())
        vectors: dict[tuple[str, str], list[str]] = {}
        skipped = 0
        refreshed = False
        for db, _, part in partials:
            for key, found in part.vectors.get(i, {}).items():
                if key in picked and picked[key].db == db:
                    vectors[key] = found
            skipped += part.skipped.get(i, 0)  # only a search one database answers skips
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
                [r for r, it in page
                 if r.ttl and not (refreshed and r.verdict == 2 and r.unsure_upto == 0)])

    def _rank(self, op: SearchOp, batch: _Batch, rows: list[_plan.Row],
              vectors: dict[tuple[str, str], list[str]], sealer: Any
              ) -> tuple[list[SearchItem], list[_plan.Row]]:
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
        packed: list[str] = []
        scoreless = []
        for n, r in candidates:
            vs = vectors.get((r.ns, r.key), [])
            for v in vs:
                flat.append((r, n))
                packed.append(v)
            if not vs:
                scoreless.append((r, n))
        scores = _encoding.similarity(query, _encoding.unpack_vectors(packed),
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
                [r for _, r, it in kept if r.ttl])

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
        counts = self._fleet.each(lambda db: self._exchange(db, _sweep(now)), "sweep_ttl")
        return sum(_swept(results) for results in counts.values())

    async def asweep_ttl(self) -> int:
        now = self.clock()
        counts = await self._fleet.aeach(lambda db: self._aexchange(db, _sweep(now)),
                                         "sweep_ttl")
        return sum(_swept(results) for results in counts.values())

    def start_ttl_sweeper(self, sweep_interval_minutes: int | None = None) -> threading.Thread:
        """Sweep every `sweep_interval_minutes` (default: the TTL config's, else 5) in a
        daemon thread until `stop_ttl_sweeper` (or `close`); a failed sweep is logged (WARNING,
        logger "d1saver") and the sweeper goes on: the next sweep deletes what it left."""
        if self._sweeper is not None and self._sweeper.is_alive():
            return self._sweeper
        minutes = (sweep_interval_minutes or (self.ttl_config or {}).get("sweep_interval_minutes")
                   or 5)
        self._sweeper_stop.clear()

        def loop() -> None:
            while not self._sweeper_stop.wait(float(minutes) * 60):
                try:
                    self.sweep_ttl()
                except Exception as exc:  # noqa: BLE001 - logged; the loop goes on
                    if self._sweeper_stop.is_set():
                        return  # cut short by stop_ttl_sweeper or close: not a failure
                    _log.warning("D1Store: a TTL sweep failed (%s: %s); the next is in %s minutes",
                                 type(exc).__name__, exc, minutes, exc_info=True)

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
        database; to every database for the empty prefix); returns how many. While migrating,
        its previous home (every database, for the empty prefix) first, then its home, which
        voids the memory moves into it: no move brings an item back."""
        _ns.check_labels(namespace)
        exact, low, high = _ns.scope(namespace)
        stmts = [Statement.bind(query, {"exact": exact, "low": low, "high": high})
                 for query in _sql.DELETE_SCOPE]
        dbs = [self.home(namespace)] if namespace else list(self.database_ids)
        rounds: list[dict[str, list[Statement]]] = [{db: stmts for db in dbs}]
        if self.previous_database_ids is not None:
            before = (self.layout.item_previous(namespace) if namespace
                      else self.every_database_id)
            rounds = [{db: stmts for db in before},
                      {db: [*stmts, self._void()] for db in dbs}]
        gone: dict[tuple[str, str], int] = {}
        for n, round_ in enumerate(r for r in rounds if r):
            for db, results in self._each_round(round_, "delete_namespace").items():
                gone[(db, str(n))] = results[len(stmts) - 1].changes
        return sum(gone.values())


def _reads_see(batch: _Batch, keys: set[tuple[tuple[str, ...], str]],
               spaces: set[tuple[str, ...]]) -> bool:
    """Whether a read of `batch` could see a put of `keys` (in namespaces `spaces`)."""
    for op in batch.ops:
        if isinstance(op, GetOp) and (tuple(op.namespace), op.key) in keys:
            return True
        if isinstance(op, SearchOp) and any(ns[: len(op.namespace_prefix)]
                                            == tuple(op.namespace_prefix) for ns in spaces):
            return True
        if isinstance(op, ListNamespacesOp) and spaces:
            return True
    return False


def _phases(calls: Sequence[_coalesce.Call[_Batch]]) -> list[list[_coalesce.Call[_Batch]]]:
    """Calls in order, grouped so each group runs as one batch (its reads, then its puts)
    with the outcome of running them one by one: a call whose reads could see a put of an
    earlier call of the group starts the next group."""
    out: list[list[_coalesce.Call[_Batch]]] = []
    keys: set[tuple[tuple[str, ...], str]] = set()
    spaces: set[tuple[str, ...]] = set()
    for c in calls:
        if not out or _reads_see(c.work, keys, spaces):
            out.append([])
            keys, spaces = set(), set()
        out[-1].append(c)
        for op in c.work.puts:
            keys.add((tuple(op.namespace), op.key))
            spaces.add(tuple(op.namespace))
    return out


def _join(batches: Sequence[_Batch]) -> tuple[_Batch, list[int]]:
    """Several calls' batches as one (their puts deduped, the last wins) and where each
    call's ops start in it."""
    ops: list[Op] = []
    offsets: list[int] = []
    last: dict[tuple[tuple[str, ...], str], tuple[_Batch, int]] = {}
    joined = _Batch(ops, [], {})
    for b in batches:
        offsets.append(len(ops))
        joined.ranked |= {len(ops) + i for i in b.ranked}
        joined.queries.update(b.queries)
        ops.extend(b.ops)
        for n, op in enumerate(b.puts):
            last.pop((tuple(op.namespace), op.key), None)
            last[(tuple(op.namespace), op.key)] = (b, n)
    for m, (b, n) in enumerate(last.values()):
        op = b.puts[n]
        joined.puts.append(op)
        if n in b.stored:
            joined.stored[m] = b.stored[n]
        if n in b.ttls:
            joined.ttls[m] = b.ttls[n]
        where = (_ns.encode(op.namespace), op.key)
        if where in b.vectors:
            joined.vectors[where] = b.vectors[where]
        joined.reindexed.add(where)
    return joined, offsets


def _search_item(item: Item, score: float | None = None) -> SearchItem:
    return SearchItem(namespace=item.namespace, key=item.key, value=item.value,
                      created_at=item.created_at, updated_at=item.updated_at,
                      score=None if score is None else float(score))


def _sweep(now: float) -> list[Statement]:
    return [Statement.bind(query, {"now": now}) for query in _sql.SWEEP_STORE]


def _swept(results: Sequence[Any]) -> int:
    return int(results[-1].changes)


def _check_key(key: Any) -> None:
    _encoding.check_key(key, "an item key")


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


# An INTERNAL span per public call (LangGraph's helpers go through batch: one span, theirs),
# when OpenTelemetry is installed (d1saver/http/telemetry.py).
telemetry.instrument(D1Store, [
    "setup", "asetup", "batch", "abatch", "get", "aget", "search", "asearch", "put", "aput",
    "delete", "adelete", "list_namespaces", "alist_namespaces", "sweep_ttl", "asweep_ttl",
    "delete_namespace"])


__all__ = ["D1Store"]
