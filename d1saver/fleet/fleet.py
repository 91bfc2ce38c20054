"""A saver's databases: one client and driver per database, routing, and operations across them.

Each database has its own `Node` (client, driver with its own group commit and once-only
setup, operations). A thread lives in one database, its home (d1saver/fleet/routing.py); the
saver sends every per-thread operation there, as one request. What spans databases runs on
each concurrently, at most `limit` at a time (a thread pool for sync callers, a semaphore for
async ones); a failure in some raises `FleetError` with each failed database's error and the
others' results. `list(None)` merges the databases' pages, each read lazily, in the order one
database would return them.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import (AsyncIterator, Awaitable, Callable, Generator, Iterator, Mapping,
                             Sequence)
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from langgraph.checkpoint.base import CheckpointTuple

from d1saver.ops import statements as st
from d1saver.ops import transfer as _transfer
from d1saver.storage.crypto import Sealer
from d1saver.ops.delta_cache import DeltaCache
from d1saver.core.errors import ConfigError, D1Error, FleetError
from d1saver.fleet.databases import Node
from d1saver.ops.operations import ListPlan, Operations
from d1saver.core.protocol import Op, Statement
from d1saver.sql import catalogue as _sql
from d1saver.ops.reseal import SealedCopy
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

    def __init__(self, nodes: Mapping[str, Node], router: Router, previous: Router | None,
                 limit: int = DEFAULT_CONCURRENCY) -> None:
        self.nodes = dict(nodes)
        self.router = router
        self.previous = previous
        self.limit = max(1, int(limit))

    @property
    def database_ids(self) -> tuple[str, ...]:
        return self.router.database_ids

    @property
    def sealer(self) -> Sealer | None:
        """The encryption keys every database's values are sealed with (None without keys)."""
        return next(iter(self.nodes.values())).ops.values.sealer

    @property
    def spans(self) -> bool:
        """True if this saver has more than one database (fan-out errors become FleetError)."""
        return len(self.nodes) > 1

    @property
    def rounds(self) -> int:
        """How many times a delete that is not routed (delete_for_runs) goes to every
        database: twice while migrating (a move may read a database the first round has not
        reached yet, and land in one it has), else once."""
        return 2 if self.previous is not None and self.spans else 1

    def home(self, thread_id: str) -> Node:
        return self.nodes[self.router.home(thread_id)]

    def old_home(self, thread_id: str) -> Node | None:
        """The thread's home in the previous layout, if there is one and it is another."""
        if self.previous is None:
            return None
        old = self.previous.home(thread_id)
        return None if old == self.router.home(thread_id) else self.nodes[old]

    def of(self, config: Any) -> Node:
        """The node of a config's thread (the only node, without reading it, if just one)."""
        if len(self.nodes) == 1:
            return next(iter(self.nodes.values()))
        return self.home(st.thread_id_of(config))

    def homes(self, thread_id: str) -> list[Node]:
        """Every node that may hold the thread: its home, then its old home."""
        old = self.old_home(thread_id)
        return [self.home(thread_id)] + ([old] if old is not None else [])

    def old_of(self, config: Any) -> Node | None:
        return None if self.previous is None else self.old_home(st.thread_id_of(config))

    def thread_nodes(self, config: Any) -> list[Node]:
        """Where a per-thread read looks, in order: the home, then (while migrating) the
        previous home. With no config, the one database of a single-database saver."""
        if len(self.nodes) == 1:
            return list(self.nodes.values())
        if config is None:
            raise ConfigError("this operation needs one database: use saver.database(id)")
        return self.homes(st.thread_id_of(config))

    # --- per thread: its home, and its previous home on a miss ---------------------------

    def on(self, config: Any, make: Callable[[Operations], Op[T]],
           missed: Callable[[T], bool] | None = None,
           missing: type[D1Error] | None = None) -> T:
        """make(ops) at the config's thread's home; if it misses (`missed(result)`, or raises
        `missing`), again at the thread's previous home, if it has one."""
        try:
            out = self.of(config).run(make)
        except D1Error as exc:
            if missing is None or not isinstance(exc, missing) or self.old_of(config) is None:
                raise
            return self.old_of(config).run(make)  # type: ignore[union-attr]
        if missed is not None and missed(out) and (old := self.old_of(config)) is not None:
            return old.run(make)
        return out

    async def aon(self, config: Any, make: Callable[[Operations], Op[T]],
                  missed: Callable[[T], bool] | None = None,
                  missing: type[D1Error] | None = None) -> T:
        try:
            out = await self.of(config).arun(make)
        except D1Error as exc:
            if missing is None or not isinstance(exc, missing) or self.old_of(config) is None:
                raise
            return await self.old_of(config).arun(make)  # type: ignore[union-attr]
        if missed is not None and missed(out) and (old := self.old_of(config)) is not None:
            return await old.arun(make)
        return out

    def set_ops(self, name: str, value: Any) -> None:
        """Set an option of every database's operations (guard_head, auto_setup, is_setup)."""
        for node in self.nodes.values():
            setattr(node.ops, name, value)

    def with_values(self, values: Values) -> Fleet:
        """The same databases (clients, drivers) over another values codec, with a DeltaChannel
        cache of their own: values decoded under one serde's allowlist are never served to a
        saver with another (Operations.with_values)."""
        cache = DeltaCache()
        nodes = {}
        for db, n in self.nodes.items():
            ops = n.ops.with_values(values)
            ops.delta_cache = cache
            nodes[db] = Node(n.database_id, n.client, n.driver, ops)
        return Fleet(nodes, self.router, self.previous, self.limit)

    def view(self, database_id: str) -> Fleet:
        """One of these databases (current or previous) as a fleet of its own."""
        node = self.nodes.get(database_id)
        if node is None:
            raise ConfigError(f"{database_id!r} is not one of this saver's databases "
                              f"{list(self.nodes)}")
        return Fleet({database_id: node}, Router([database_id]), None, self.limit)

    def single(self) -> Node:
        """The one database, or a ConfigError naming the way to pick one of several."""
        if self.spans:
            raise ConfigError(f"this D1Saver spans {len(self.nodes)} databases: use "
                              "saver.database(database_id) for one of them")
        return next(iter(self.nodes.values()))

    def deleting(self, thread_id: str) -> list[Node]:
        """Where a delete of the thread goes, in order: its previous home first (while
        migrating), then its home. A move registers at the new home before it reads the old
        one, so a delete that reaches the new home last voids any move that read it before
        (delete wins: compaction/rebalance.py)."""
        return list(reversed(self.thread_nodes(_config(thread_id))))

    def delete_thread(self, thread_id: str) -> None:
        """At each database that may hold the thread (`deleting`'s order), then wherever
        those say a copy of it is staged (a copy between databases killed midway)."""
        staged: list[tuple[str, str]] = []
        for node in self.deleting(thread_id):
            staged += node.run(_deleting(thread_id))
        for db, staging in dict.fromkeys(staged):
            if db in self.nodes:
                self.nodes[db].run(_deleting(staging))

    async def adelete_thread(self, thread_id: str) -> None:
        staged: list[tuple[str, str]] = []
        for node in self.deleting(thread_id):
            staged += await node.arun(_deleting(thread_id))
        for db, staging in dict.fromkeys(staged):
            if db in self.nodes:
                await self.nodes[db].arun(_deleting(staging))

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

    def selected(self, database_ids: Sequence[str] | None) -> list[Node]:
        return list(self.nodes.values()) if database_ids is None else [
            self.nodes[db] for db in database_ids]

    # --- fan-out ----------------------------------------------------------------------------

    def each(self, fn: Callable[[Node], T], operation: str,
             database_ids: Sequence[str] | None = None) -> dict[str, T]:
        """fn(node) for each database, concurrently (at most `limit` at once)."""
        nodes = self.selected(database_ids)
        if not self.spans:
            return {node.database_id: fn(node) for node in nodes}
        if not nodes:  # nothing to do, as with one database
            return {}
        if len(nodes) == 1:
            return _collect(operation, nodes, [_outcome(fn, nodes[0])])
        with ThreadPoolExecutor(max_workers=min(self.limit, len(nodes)),
                                thread_name_prefix="d1saver-fleet") as pool:
            outcomes = list(pool.map(lambda node: _outcome(fn, node), nodes))
        return _collect(operation, nodes, outcomes)

    async def aeach(self, fn: Callable[[Node], Awaitable[T]], operation: str,
                    database_ids: Sequence[str] | None = None) -> dict[str, T]:
        nodes = self.selected(database_ids)
        if not self.spans:
            return {node.database_id: await fn(node) for node in nodes}
        gate = asyncio.Semaphore(self.limit)

        async def one(node: Node) -> T:
            async with gate:
                return await fn(node)

        outcomes = await asyncio.gather(*(one(n) for n in nodes), return_exceptions=True)
        return _collect(operation, nodes, list(outcomes))

    # --- list: a thread's pages (home, then previous home), or every database's merged -----

    def list(self, config: Any, filter: Mapping[str, Any] | None, before: Any,
             limit: int | None, page_size: int) -> Iterator[CheckpointTuple]:
        if config is None and self.spans:
            yield from self.list_all(filter, before, limit, page_size)
            return
        for node in self.thread_nodes(config):
            plan = ListPlan(config, filter, before, limit, page_size,
                            sealed=self.sealer is not None)
            found = False
            while (stmt := plan.next_statement()) is not None:
                tuples = plan.consume(node.run(lambda ops: ops.page(stmt)))
                found = found or bool(tuples)
                yield from tuples
            if found:
                return

    async def alist(self, config: Any, filter: Mapping[str, Any] | None, before: Any,
                    limit: int | None, page_size: int) -> AsyncIterator[CheckpointTuple]:
        if config is None and self.spans:
            async for tup in self.alist_all(filter, before, limit, page_size):
                yield tup
            return
        for node in self.thread_nodes(config):
            plan = ListPlan(config, filter, before, limit, page_size,
                            sealed=self.sealer is not None)
            found = False
            while (stmt := plan.next_statement()) is not None:
                tuples = plan.consume(await node.arun(lambda ops: ops.page(stmt)))
                found = found or bool(tuples)
                for tup in tuples:
                    yield tup
            if found:
                return


    def list_all(self, filter: Mapping[str, Any] | None, before: Any, limit: int | None,
                 page_size: int) -> Iterator[CheckpointTuple]:
        merge = _Merge(self, filter, before, limit, page_size)
        need = merge.needs()  # every database at first (none for limit <= 0)
        while need is not None:
            if need:  # the first pages, or the next page of databases whose last one is used up
                merge.feed(self.each(merge.fetch, "list", need))
            elif (tup := merge.pop()) is not None:
                yield tup
            need = merge.needs()

    async def alist_all(self, filter: Mapping[str, Any] | None, before: Any, limit: int | None,
                        page_size: int) -> AsyncIterator[CheckpointTuple]:
        merge = _Merge(self, filter, before, limit, page_size)
        need = merge.needs()  # every database at first (none for limit <= 0)
        while need is not None:
            if need:
                merge.feed(await self.aeach(merge.afetch, "list", need))
            elif (tup := merge.pop()) is not None:
                yield tup
            need = merge.needs()

    # --- copy_thread between databases ------------------------------------------------------

    def copy_thread(self, source: str, target: str, page_size: int) -> None:
        """Within the target's home when the source lives there too (one request without keys,
        re-sealed pages with keys: Operations.copy_thread), else the source's rows read where
        it lives and written to the target's home: in bounded atomic batches without keys,
        re-sealed for the target page by page with keys (_reseal.SealedCopy)."""
        if not self.spans:
            self.single().run(lambda ops: ops.copy_thread(source, target, page_size))
            return
        dst = self.home(target)
        steps, out = self._copy(source, target, dst, page_size), None
        try:  # the target changed (perhaps, if this failed): forget its cached histories
            while (step := steps.send(out)) is not None:
                out = step[0].run(step[1])
        except StopIteration:
            pass
        finally:
            dst.ops.delta_cache.invalidate([target])

    async def acopy_thread(self, source: str, target: str, page_size: int) -> None:
        if not self.spans:
            await self.single().arun(lambda ops: ops.copy_thread(source, target, page_size))
            return
        dst = self.home(target)
        steps, out = self._copy(source, target, dst, page_size), None
        try:
            while (step := steps.send(out)) is not None:
                out = await step[0].arun(step[1])
        except StopIteration:
            pass
        finally:
            dst.ops.delta_cache.invalidate([target])

    def _copy(self, source: str, target: str, dst: Node, page_size: int) -> Generator[
            tuple[Node, Callable[[Operations], Op[Any]]], Any, None]:
        """The copy as steps (a node and the operation to run there), for either driver."""
        sources, keyed = self.homes(source), self.sealer is not None
        if sources[0] is dst and keyed and len(sources) == 1:
            yield dst, lambda ops: ops.copy_thread(source, target, page_size)
            return
        if sources[0] is dst and not keyed:
            results = yield dst, lambda ops: ops.exchange(st.copy_thread_statements(source,
                                                                                    target))
            if results[0].changes or len(sources) == 1:
                return
            sources = sources[1:]
        for node in sources:
            if not keyed:
                rows = yield node, lambda ops: _transfer.read_thread(ops.exchange, source)
                if not rows.total:
                    continue
            else:
                copier = SealedCopy(dst.ops.values, source, target, page_size)
                while (read := copier.next_read()) is not None:
                    (result,) = yield node, lambda ops: ops.exchange([read])
                    if stmts := copier.consume(result):
                        yield dst, lambda ops: ops.exchange(stmts)
                if not copier.copied:
                    continue
                rows = yield node, lambda ops: _transfer.read_thread(ops.exchange, source,
                                                                     _UNSEALED_TABLES)
            if not rows.total:
                return
            batches = _transfer.copy_batches(rows, target, staging_prefix=COPYING_PREFIX)
            # Staged (over one batch) in another database: the source's says where, so that
            # delete_thread of the source removes the staged rows too if this copy is killed.
            hint = (source, dst.database_id, COPYING_PREFIX + target)
            elsewhere = len(batches) > 1 and node is not dst
            if elsewhere:
                yield node, _sending([Statement(_sql.STAGE_ELSEWHERE,
                                                (*hint, _transfer.STAGE_SECONDS))])
            for batch in batches:
                yield dst, _sending(batch)
            if elsewhere:
                yield node, _sending([Statement(_sql.UNSTAGE_ELSEWHERE, hint)])
            return


class _Merge:
    """A k-way merge of every database's `list(None)` pages, newest checkpoint first.

    Each database runs its own ListPlan; a database's next page is read only when the merge
    has used up its last one, so `limit` and `before` hold exactly and nothing is read past
    what the caller takes. A key seen twice in a row (a thread caught mid-move, in two
    databases at once) is yielded once; staged rows of a move are never yielded.
    """

    def __init__(self, fleet: Fleet, filter: Mapping[str, Any] | None, before: Any,
                 limit: int | None, page_size: int) -> None:
        size = page_size if limit is None else max(1, min(page_size, limit))
        sealed = fleet.sealer is not None
        self.plans = {db: ListPlan(None, filter, before, None, size, sealed=sealed)
                      for db in fleet.nodes}
        self.buffers: dict[str, deque[CheckpointTuple]] = {db: deque() for db in fleet.nodes}
        self.remaining = limit
        self.last: tuple[str, str, str] | None = None

    def fetch(self, node: Node) -> list[CheckpointTuple]:
        """The next page of one database (none once its plan is done)."""
        plan = self.plans[node.database_id]
        stmt = plan.next_statement()
        return [] if stmt is None else plan.consume(node.run(lambda ops: ops.page(stmt)))

    async def afetch(self, node: Node) -> list[CheckpointTuple]:
        plan = self.plans[node.database_id]
        stmt = plan.next_statement()
        return [] if stmt is None else plan.consume(await node.arun(lambda ops: ops.page(stmt)))

    def feed(self, pages: Mapping[str, list[CheckpointTuple]]) -> None:
        for db, tuples in pages.items():
            self.buffers[db].extend(tuples)

    def needs(self) -> list[str] | None:
        """None when done; else the databases whose next page must be read first (maybe none)."""
        if self.remaining is not None and self.remaining <= 0:
            return None
        need = [db for db, buf in self.buffers.items() if not buf and not self.plans[db].done]
        if not need and not any(self.buffers.values()):
            return None
        return need

    def pop(self) -> CheckpointTuple | None:
        db = max((d for d, buf in self.buffers.items() if buf),
                 key=lambda d: _order(self.buffers[d][0]))
        tup = self.buffers[db].popleft()
        key = _order(tup)
        if key == self.last or is_staging(key[1]):
            return None
        self.last = key
        if self.remaining is not None:
            self.remaining -= 1
        return tup


def _deleting(thread_id: str) -> Callable[[Operations], Op[list[tuple[str, str]]]]:
    return lambda ops: ops.delete_thread(thread_id)


def _sending(statements: list[Statement]) -> Callable[[Operations], Op[list[Any]]]:
    return lambda ops: ops.exchange(statements)


def _config(thread_id: str) -> Any:
    return {"configurable": {"thread_id": thread_id}}


def _order(tup: CheckpointTuple) -> tuple[str, str, str]:
    """The sort key of list pages (checkpoint_id, thread_id, checkpoint_ns), as SQLite's
    BINARY collation orders them: code point order is UTF-8 byte order."""
    conf = tup.config["configurable"]
    return (conf["checkpoint_id"], conf["thread_id"], conf["checkpoint_ns"])


def _outcome(fn: Callable[[Node], T], node: Node) -> T | BaseException:
    try:
        return fn(node)
    except D1Error as exc:
        return exc


def _collect(operation: str, nodes: Sequence[Node], outcomes: Sequence[Any]) -> dict[str, Any]:
    """Results by database id; FleetError if some failed with a D1Error; other exceptions
    (bugs, cancellation) propagate as they are."""
    errors: dict[str, D1Error] = {}
    results: dict[str, Any] = {}
    for node, outcome in zip(nodes, outcomes):
        if isinstance(outcome, D1Error):
            errors[node.database_id] = outcome
        elif isinstance(outcome, BaseException):
            raise outcome
        else:
            results[node.database_id] = outcome
    if errors:
        raise FleetError(operation, errors, results)
    return results


__all__ = ["DEFAULT_CONCURRENCY", "Fleet"]
