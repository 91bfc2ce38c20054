"""A saver's databases: one client and driver per database, routing, and operations across them.

Each database has its own `Database` (client, driver with its own group commit and once-only
setup, operations). A thread lives in one database, its home (d1saver/fleet/routing.py); the
saver sends every per-thread operation there, as one request. What spans databases runs on
each concurrently, at most `limit` at a time (a thread pool for sync callers, a semaphore for
async ones); a failure in some raises `FleetError` with each failed database's error and the
others' results. `list(None)` merges the databases' pages, each read lazily, in the order one
database would return them.
"""

from __future__ import annotations

from collections import deque
from collections.abc import (AsyncIterator, Awaitable, Callable, Generator, Iterator, Mapping,
                             Sequence)
from functools import partial
from typing import Any, TypeVar

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import CheckpointTuple

from d1saver.ops import statements as st
from d1saver.ops import transfer as _transfer
from d1saver.storage.crypto import Sealer
from d1saver.ops.delta_cache import DeltaCache
from d1saver.core.errors import ConfigError, D1Error
from d1saver.fleet.databases import Database
from d1saver.http.runner import Each, Run, afan_out, aiterate, arun, fan_out, iterate, run
from d1saver.ops.operations import Operations, list_pages
from d1saver.core.protocol import Emit, Op, Param, Result, Statement
from d1saver.ops.reseal import copy_sealed
from d1saver.sql import catalogue as _sql
from d1saver.fleet.routing import COPYING_PREFIX, Router, is_staging
from d1saver.storage.values import Values

T = TypeVar("T")
# With keys, what a copy moves as stored (no value in them is sealed): after the re-sealed rows.
_UNSEALED_TABLES = ("tags", "delta_unwritten")
DEFAULT_CONCURRENCY = 8


class Fleet:
    """The databases of one saver: where each thread lives, and fan-out over all of them.

    `previous` is the layout before the database list changed (`previous_database_ids`):
    while `d1saver rebalance` moves threads, a per-thread read that finds nothing at the
    home looks at the thread's home under `previous`, one more request, only on a miss.
    """

    def __init__(self, databases: Mapping[str, Database], router: Router, previous: Router | None,
                 limit: int = DEFAULT_CONCURRENCY) -> None:
        self.databases = dict(databases)
        self.router = router
        self.previous = previous
        self.limit = max(1, int(limit))

    @property
    def database_ids(self) -> tuple[str, ...]:
        return self.router.database_ids

    @property
    def sealer(self) -> Sealer | None:
        """The encryption keys every database's values are sealed with (None without keys)."""
        return next(iter(self.databases.values())).ops.values.sealer

    @property
    def spans(self) -> bool:
        """True if this saver has more than one database (fan-out errors become FleetError)."""
        return len(self.databases) > 1

    @property
    def rounds(self) -> int:
        """How many times a delete that is not routed (delete_for_runs) goes to every
        database: twice while migrating (a move may read a database the first round has not
        reached yet, and land in one it has), else once."""
        return 2 if self.previous is not None and self.spans else 1

    def home(self, thread_id: str) -> Database:
        return self.databases[self.router.home(thread_id)]

    def old_home(self, thread_id: str) -> Database | None:
        """The thread's home in the previous layout, if there is one and it is another."""
        if self.previous is None:
            return None
        old = self.previous.home(thread_id)
        return None if old == self.router.home(thread_id) else self.databases[old]

    def of(self, config: RunnableConfig) -> Database:
        """The database of a config's thread (the only one, without reading it, if just one)."""
        if len(self.databases) == 1:
            return next(iter(self.databases.values()))
        return self.home(st.thread_id_of(config))

    def homes(self, thread_id: str) -> list[Database]:
        """Every database that may hold the thread: its home, then its old home."""
        old = self.old_home(thread_id)
        return [self.home(thread_id)] + ([old] if old is not None else [])

    def old_of(self, config: RunnableConfig) -> Database | None:
        return None if self.previous is None else self.old_home(st.thread_id_of(config))

    def thread_databases(self, config: RunnableConfig | None) -> list[Database]:
        """Where a per-thread read looks, in order: the home, then (while migrating) the
        previous home. With no config, the one database of a single-database saver."""
        if len(self.databases) == 1:
            return list(self.databases.values())
        if config is None:
            raise ConfigError("this operation needs one database: use saver.database(id)")
        return self.homes(st.thread_id_of(config))

    # --- per thread: its home, and its previous home on a miss ---------------------------

    def on(self, config: RunnableConfig, make: Callable[[Operations], Op[T]],
           missed: Callable[[T], bool] | None = None,
           missing: type[D1Error] | None = None) -> T:
        """make(ops) at the config's thread's home; if it misses (`missed(result)`, or raises
        `missing`), again at the thread's previous home, if it has one."""
        return run(self._on(config, make, missed, missing))

    async def aon(self, config: RunnableConfig, make: Callable[[Operations], Op[T]],
                  missed: Callable[[T], bool] | None = None,
                  missing: type[D1Error] | None = None) -> T:
        return await arun(self._on(config, make, missed, missing))

    def _on(self, config: RunnableConfig, make: Callable[[Operations], Op[T]],
            missed: Callable[[T], bool] | None, missing: type[D1Error] | None) -> Steps[T]:
        try:
            out: T = yield _at(self.of(config), make)
        except D1Error as exc:
            old = self.old_of(config)
            if missing is None or not isinstance(exc, missing) or old is None:
                raise
            return (yield _at(old, make))
        if missed is not None and missed(out) and (old := self.old_of(config)) is not None:
            return (yield _at(old, make))
        return out

    def set_ops(self, name: str, value: Any) -> None:
        """Set an option of every database's operations (guard_head, auto_setup, read_only,
        is_setup)."""
        for db in self.databases.values():
            setattr(db.ops, name, value)

    def with_values(self, values: Values) -> Fleet:
        """The same databases (clients, drivers) over another values codec, with a DeltaChannel
        cache of their own: values decoded under one serde's allowlist are never served to a
        saver with another (Operations.with_values)."""
        cache = DeltaCache()
        databases = {}
        for database_id, db in self.databases.items():
            ops = db.ops.with_values(values)
            ops.delta_cache = cache
            databases[database_id] = Database(db.database_id, db.client, db.driver, ops)
        return Fleet(databases, self.router, self.previous, self.limit)

    def view(self, database_id: str) -> Fleet:
        """One of these databases (current or previous) as a fleet of its own."""
        db = self.databases.get(database_id)
        if db is None:
            raise ConfigError(f"{database_id!r} is not one of this saver's databases "
                              f"{list(self.databases)}")
        return Fleet({database_id: db}, Router([database_id]), None, self.limit)

    def single(self) -> Database:
        """The one database, or a ConfigError naming the way to pick one of several."""
        if self.spans:
            raise ConfigError(f"this D1Saver spans {len(self.databases)} databases: use "
                              "saver.database(database_id) for one of them")
        return next(iter(self.databases.values()))

    def deleting(self, thread_id: str) -> list[Database]:
        """Where a delete of the thread goes, in order: its previous home first (while
        migrating), then its home. A move registers at the new home before it reads the old
        one, so a delete that reaches the new home last voids any move that read it before
        (delete wins: compaction/rebalance.py)."""
        return list(reversed(self.thread_databases(_config(thread_id))))

    def delete_thread(self, thread_id: str) -> None:
        """At each database that may hold the thread (`deleting`'s order), then wherever
        those say a copy of it is staged (a copy between databases killed midway)."""
        run(self._delete_thread(thread_id))

    async def adelete_thread(self, thread_id: str) -> None:
        await arun(self._delete_thread(thread_id))

    def _delete_thread(self, thread_id: str) -> Steps[None]:
        staged: list[tuple[str, str]] = []
        for db in self.deleting(thread_id):
            staged += yield _at(db, _deleting(thread_id))
        for database_id, staging in dict.fromkeys(staged):
            if database_id in self.databases:
                yield _at(self.databases[database_id], _deleting(staging))

    def group(self, thread_ids: Sequence[str]) -> list[dict[str, list[str]]]:
        """Thread ids by every database that may hold them, in rounds: their previous homes
        first (only while migrating), then their homes (see `deleting`). No rounds for none."""
        first: dict[str, list[str]] = {}
        then: dict[str, list[str]] = {}
        for thread_id in map(str, thread_ids):
            if (old := self.old_home(thread_id)) is not None:
                first.setdefault(old.database_id, []).append(thread_id)
            then.setdefault(self.home(thread_id).database_id, []).append(thread_id)
        return [groups for groups in (first, then) if groups]

    def selected(self, database_ids: Sequence[str] | None) -> list[Database]:
        return list(self.databases.values()) if database_ids is None else [
            self.databases[db] for db in database_ids]

    # --- fan-out ----------------------------------------------------------------------------

    def each(self, fn: Callable[[Database], T], operation: str,
             database_ids: Sequence[str] | None = None) -> dict[str, T]:
        """fn(db) for each database, concurrently (at most `limit` at once)."""
        dbs = self.selected(database_ids)
        return fan_out({db.database_id: partial(fn, db) for db in dbs}, operation,
                       self.limit, spans=self.spans)

    async def aeach(self, fn: Callable[[Database], Awaitable[T]], operation: str,
                    database_ids: Sequence[str] | None = None) -> dict[str, T]:
        dbs = self.selected(database_ids)
        return await afan_out({db.database_id: partial(fn, db) for db in dbs},
                              operation, self.limit, spans=self.spans)

    # --- list: a thread's pages (home, then previous home), or every database's merged -----

    def list(self, config: RunnableConfig | None, filter: Mapping[str, Any] | None,
             before: RunnableConfig | None, limit: int | None, page_size: int
             ) -> Iterator[CheckpointTuple]:
        return iterate(self._list(config, filter, before, limit, page_size))

    def alist(self, config: RunnableConfig | None, filter: Mapping[str, Any] | None,
              before: RunnableConfig | None, limit: int | None, page_size: int
              ) -> AsyncIterator[CheckpointTuple]:
        return aiterate(self._list(config, filter, before, limit, page_size))

    def _list(self, config: RunnableConfig | None, filter: Mapping[str, Any] | None,
              before: RunnableConfig | None, limit: int | None, page_size: int
              ) -> Steps[None]:
        if config is None and self.spans:
            yield from self._list_all(filter, before, limit, page_size)
            return
        for db in self.thread_databases(config):
            found = yield from list_pages(_pages_at(db), config, filter, before, limit,
                                          page_size, sealed=self.sealer is not None)
            if found:
                return

    def _list_all(self, filter: Mapping[str, Any] | None, before: RunnableConfig | None,
                  limit: int | None, page_size: int) -> Steps[None]:
        """A k-way merge of every database's `list(None)` pages, newest checkpoint first.

        Each database runs its own `list_pages`; a database's next page is read only when the
        merge has used up its last one (the pages wanted at once read concurrently), so `limit`
        and `before` hold exactly and nothing is read past what the caller takes. A key seen
        twice in a row (a thread caught mid-move, in two databases at once) is yielded once;
        staged rows of a move are never yielded.
        """
        if limit is not None and limit <= 0:
            return
        size = page_size if limit is None else max(1, min(page_size, limit))
        plans = {db: list_pages(_ask, None, filter, before, None, size,
                                sealed=self.sealer is not None) for db in self.databases}
        # Each database's next page statement (None once its pages are done), and its tuples.
        pending = {db: _next(plan, None) for db, plan in plans.items()}
        buffers: dict[str, deque[CheckpointTuple]] = {db: deque() for db in plans}
        remaining, last = limit, None
        while remaining is None or remaining > 0:
            need = {db: stmt for db, stmt in pending.items()
                    if stmt is not None and not buffers[db]}
            if need:
                pages = yield Each("list", {db: _at(self.databases[db], _page(stmt))
                                             for db, stmt in need.items()},
                                   self.limit, self.spans)
                for db, tuples in pages.items():
                    emitted = plans[db].send(tuples)
                    buffers[db].extend(emitted.items)
                    pending[db] = _next(plans[db], None)
                continue
            if not any(buffers.values()):
                return
            db = max((d for d, buf in buffers.items() if buf),
                     key=lambda d: _order(buffers[d][0]))
            tup = buffers[db].popleft()
            key = _order(tup)
            if key == last or is_staging(key[1]):
                continue
            last = key
            if remaining is not None:
                remaining -= 1
            yield Emit([tup])

    # --- copy_thread between databases ------------------------------------------------------

    def copy_thread(self, source: str, target: str, page_size: int) -> None:
        """Within the target's home when the source lives there too (one request without keys,
        re-sealed pages with keys: Operations.copy_thread), else the source's rows read where
        it lives and written to the target's home: in bounded atomic batches without keys,
        re-sealed for the target page by page with keys (reseal.copy_sealed). A thread copied
        onto itself is left as it is (re-inserting its rows would drop derived rows)."""
        if source == target:
            return
        if not self.spans:
            self.single().run(lambda ops: ops.copy_thread(source, target, page_size))
            return
        run(self._copy(source, target, page_size))

    async def acopy_thread(self, source: str, target: str, page_size: int) -> None:
        if source == target:
            return
        if not self.spans:
            await self.single().arun(lambda ops: ops.copy_thread(source, target, page_size))
            return
        await arun(self._copy(source, target, page_size))

    def _copy(self, source: str, target: str, page_size: int) -> Steps[None]:
        dst = self.home(target)
        try:
            yield from self._copy_into(source, target, dst, page_size)
        finally:  # the target changed (perhaps, if this failed): forget its cached histories
            dst.ops.delta_cache.invalidate([target])

    def _copy_into(self, source: str, target: str, dst: Database, page_size: int) -> Steps[None]:
        sources, keyed = self.homes(source), self.sealer is not None
        if sources[0] is dst and keyed and len(sources) == 1:
            yield _at(dst, lambda ops: ops.copy_thread(source, target, page_size))
            return
        if sources[0] is dst and not keyed:
            results = yield _at(dst, lambda ops: ops.exchange(
                st.copy_thread_statements(source, target)))
            if results[0].changes or len(sources) == 1:
                return
            sources = sources[1:]
        for src in sources:
            if not keyed:
                rows = yield _at(src, lambda ops: _transfer.read_thread(ops.exchange, source))
                if not rows.total:
                    continue
            else:
                copied = yield from copy_sealed(_exchange(src), _exchange(dst), dst.ops.values,
                                                source, target, page_size)
                if not copied:
                    continue
                rows = yield _at(src, lambda ops: _transfer.read_thread(ops.exchange, source,
                                                                         _UNSEALED_TABLES))
            if not rows.total:
                return
            batches = _transfer.copy_batches(rows, target, staging_prefix=COPYING_PREFIX)
            # Staged (over one batch) in another database: the source's says where, so that
            # delete_thread of the source removes the staged rows too if this copy is killed.
            hint: dict[str, Param] = {"source_id": source, "database_id": dst.database_id,
                                      "staging_id": COPYING_PREFIX + target}
            elsewhere = len(batches) > 1 and src is not dst
            if elsewhere:
                yield _at(src, _sending([Statement.bind(
                    _sql.STAGE_ELSEWHERE, {**hint, "seconds": _transfer.STAGE_SECONDS})]))
            for batch in batches:
                yield _at(dst, _sending(batch))
            if elsewhere:
                yield _at(src, _sending([Statement.bind(_sql.UNSTAGE_ELSEWHERE, hint)]))
            return

# A multi-step operation over the fleet: yields Run, Each and Emit, is sent their replies;
# the runner runs it (d1saver/http/runner.py).
Steps = Generator[Any, Any, T]


def _at(db: Database, make: Callable[[Operations], Op[Any]]) -> Run:
    """A step: make(ops) at one database, on its driver."""
    return Run(db.driver, make(db.ops))


def _run(db: Database, make: Callable[[Operations], Op[T]]) -> Steps[T]:
    return (yield _at(db, make))


def _exchange(db: Database) -> Callable[[Sequence[Statement]], Steps[list[Result]]]:
    """An exchange with one database, as steps."""
    return lambda stmts: _run(db, lambda ops: ops.exchange(stmts))


def _page(stmt: Statement) -> Callable[[Operations], Op[list[CheckpointTuple]]]:
    return lambda ops: ops.page(stmt)


def _pages_at(db: Database) -> Callable[[Statement], Steps[list[CheckpointTuple]]]:
    """A page read at one database, as steps."""
    return lambda stmt: _run(db, _page(stmt))


def _ask(stmt: Statement) -> Generator[Statement, Any, list[CheckpointTuple]]:
    """A page read by the merge itself: the statement is yielded to it as is."""
    return (yield stmt)


def _next(plan: Generator[Any, Any, Any], reply: Any) -> Any:
    """The plan's next step, or None once it is done."""
    try:
        return plan.send(reply)
    except StopIteration:
        return None


def _deleting(thread_id: str) -> Callable[[Operations], Op[list[tuple[str, str]]]]:
    return lambda ops: ops.delete_thread(thread_id)


def _sending(statements: list[Statement]) -> Callable[[Operations], Op[list[Any]]]:
    return lambda ops: ops.exchange(statements)


def _config(thread_id: str) -> RunnableConfig:
    return {"configurable": {"thread_id": thread_id}}


def _order(tup: CheckpointTuple) -> tuple[str, str, str]:
    """The sort key of list pages (checkpoint_id, thread_id, checkpoint_ns), as SQLite's
    BINARY collation orders them: code point order is UTF-8 byte order."""
    conf = tup.config["configurable"]
    return (conf["checkpoint_id"], conf["thread_id"], conf["checkpoint_ns"])


__all__ = ["DEFAULT_CONCURRENCY", "Fleet"]
