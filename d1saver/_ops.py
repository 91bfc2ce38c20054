"""The saver's operations, each a typed generator (`Op[T]`) with no I/O of its own.

An operation builds its statements (d1saver/_statements.py), yields them as actions, and
decodes the replies (d1saver/_rows.py). `D1Saver` runs the same generator with the sync or
the async driver, so every method's logic exists once.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    DeltaChannelHistory,
    get_checkpoint_id,
)

from d1saver import _rows, _sql
from d1saver import _statements as st
from d1saver._delta_cache import DeltaCache
from d1saver._errors import CheckpointConflictError, ConfigError, NotFoundError, QueryError
from d1saver._protocol import Commit, Once, Op, Result, Statement
from d1saver._values import Values

Exchange = Callable[[Sequence[Statement]], Op[list[Result]]]
T = TypeVar("T")


class ListPlan:
    """The pages of one `list` call: the next page's statement and the cursor it leaves."""

    def __init__(self, config: RunnableConfig | None, filter: Mapping[str, Any] | None,
                 before: RunnableConfig | None, limit: int | None, page_size: int) -> None:
        conf = (config or {}).get("configurable") or {}
        self.thread_id = st.thread_id_of(config) if config is not None else None
        ns = conf.get("checkpoint_ns")
        self.ns = None if ns is None else str(ns)
        self.checkpoint_id = conf.get("checkpoint_id")
        self.before = get_checkpoint_id(before) if before else None
        self.filter_json = st.validate_filter(filter)
        self.filter = dict(filter or {})
        self.remaining = limit
        self.page_size = page_size
        self.size = page_size
        self.asked = page_size
        self.cursor: st.Cursor | None = None
        self.done = limit is not None and limit <= 0

    def next_statement(self) -> Statement | None:
        if self.done:
            return None
        size = self.page_size
        if self.remaining is not None:
            size = min(size, self.remaining)
        self.size = size
        # One row more than the page tells whether another page follows, so that no request
        # is wasted on an empty one; a page that can complete the limit needs no such row.
        self.asked = size if self.remaining is not None and self.remaining <= size else size + 1
        return st.page_statement(
            thread_id=self.thread_id, ns=self.ns, checkpoint_id=self.checkpoint_id,
            before=self.before, filter_json=self.filter_json, cursor=self.cursor,
            size=self.asked)

    def consume(self, tuples: list[CheckpointTuple]) -> list[CheckpointTuple]:
        more = len(tuples) >= self.asked  # a full answer: rows may follow
        page = tuples[: self.size]
        if page:
            last = page[-1].config["configurable"]
            self.cursor = (last["checkpoint_id"], last["thread_id"], last["checkpoint_ns"])
        # SQL has matched the filter already, except on keys of chunked metadata.
        kept = [t for t in page if st.metadata_matches(t.metadata, self.filter)]
        if self.remaining is not None:
            kept = kept[: self.remaining]
            self.remaining -= len(kept)
        if not more or not page or self.remaining == 0:
            self.done = True
        return kept


class Operations:
    """Every operation of the saver, as generators over one values codec and one cache.

    `send` is the client's `exchange`: a generator that sends statements in one request.
    """

    def __init__(self, values: Values, send: Exchange, *, guard_head: bool = False,
                 auto_setup: bool = True) -> None:
        self.values = values
        self._send = send  # the client's exchange: statements -> Send/Sleep -> results
        self.guard_head = guard_head
        self.auto_setup = auto_setup
        self.delta_cache = DeltaCache()
        self.is_setup = False

    def with_values(self, values: Values) -> Operations:
        """The same operations over another values codec, with a cache of their own: values
        decoded under one serde's allowlist are never served to a saver with another."""
        clone = copy.copy(self)
        clone.values = values
        clone.delta_cache = DeltaCache()
        return clone

    # --- sending ------------------------------------------------------------------------

    def exchange(self, statements: Sequence[Statement]) -> Op[list[Result]]:
        """Send statements in one request (with retries), setting the schema up if missing."""
        return (yield from self._set_up_if_missing(lambda: self._send(statements)))

    def commit(self, statements: Sequence[Statement]) -> Op[list[Result]]:
        """Like exchange, for writes that may ride in one batch with concurrent writes."""
        return (yield from self._set_up_if_missing(lambda: _one(Commit(statements))))

    def _set_up_if_missing(self, send: Callable[[], Op[list[Result]]]) -> Op[list[Result]]:
        """Run `send()`; on a fresh database, create the schema once (per driver) and resend."""
        try:
            return (yield from send())
        except QueryError as exc:
            if not self.auto_setup or "no such table" not in str(exc):
                raise
        yield Once("setup", self._setup)
        return (yield from send())

    # --- schema -------------------------------------------------------------------------

    def setup_once(self) -> Op[None]:
        yield Once("setup", self._setup)

    def _setup(self) -> Op[None]:
        results = yield from self._send(st.setup_statements())
        current = int(results[-1].rows[0][0])
        if current > _sql.SCHEMA_VERSION:
            raise ConfigError(
                f"the database has d1saver schema v{current}, newer than this d1saver's "
                f"v{_sql.SCHEMA_VERSION}: upgrade d1saver")
        for version in range(max(current, 1) + 1, _sql.SCHEMA_VERSION + 1):
            yield from self._send(st.migration_statements(version))
        self.is_setup = True

    # --- reads --------------------------------------------------------------------------

    def get_tuple(self, config: RunnableConfig) -> Op[CheckpointTuple | None]:
        thread_id = st.thread_id_of(config)
        cid = get_checkpoint_id(config)
        stmt = st.page_statement(thread_id=thread_id, ns=st.ns_of(config), checkpoint_id=cid,
                                 before=None, filter_json=None, cursor=None, size=1)
        tuples = yield from self.page(stmt)
        if not tuples:
            return None
        if cid:  # as other savers do: a config naming the checkpoint comes back as given
            return tuples[0]._replace(config=config)
        return tuples[0]

    def page(self, stmt: Statement) -> Op[list[CheckpointTuple]]:
        """One page of checkpoints; their DeltaChannel histories ride along into the cache."""
        since = self.delta_cache.mark()
        result, deltas = yield from self.exchange([stmt, st.delta_statement(stmt)])
        load = self.values.load
        tuples = _rows.read_rows(_rows.tuples_from_page, result, load)
        histories = _rows.read_rows(_rows.histories_from_walk, deltas, tuples, load)
        for key, entry in histories.items():
            self.delta_cache.put(key, entry, since)
        return tuples

    def delta_history(self, config: RunnableConfig, channels: Sequence[str]
                      ) -> Op[Mapping[str, DeltaChannelHistory]]:
        if not channels:
            return {}
        channels = list(channels)
        cid = get_checkpoint_id(config)
        if cid:
            key = (st.thread_id_of(config), st.ns_of(config), str(cid))
            hit = self.delta_cache.take(key, channels)
            if hit is not None:
                return hit
        (result,) = yield from self.exchange([st.delta_history_statement(config, channels)])
        return _rows.read_rows(_rows.delta_history, result, channels, self.values.load)

    # --- writes -------------------------------------------------------------------------

    def put(self, config: RunnableConfig, checkpoint: Checkpoint,
            metadata: CheckpointMetadata) -> Op[RunnableConfig]:
        stmts, next_config = st.put_statements(self.values, config, checkpoint, metadata,
                                               guard_head=self.guard_head)
        try:
            yield from self._changing([st.thread_id_of(config)], self.commit(stmts))
        except QueryError as exc:
            if self.guard_head and "head_moved" in str(exc):
                raise CheckpointConflictError(
                    f"thread {next_config['configurable']['thread_id']!r} moved on: the parent "
                    f"{config['configurable'].get('checkpoint_id')!r} is no longer its newest "
                    "checkpoint (another writer resumed it); reload the state and retry"
                ) from exc
            raise
        return next_config

    def put_writes(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]],
                   task_id: str, task_path: str) -> Op[None]:
        stmts = st.put_writes_statements(self.values, config, writes, task_id, task_path)
        if stmts:
            yield from self._changing([st.thread_id_of(config)], self.commit(stmts))

    # --- deletes and copies -------------------------------------------------------------

    def delete_thread(self, thread_id: str) -> Op[None]:
        yield from self._changing(
            [str(thread_id)], self.exchange(st.delete_threads_statements([thread_id])))

    def delete_for_runs(self, run_ids: Sequence[str]) -> Op[None]:
        if run_ids:  # the runs' threads are known only to the database: forget every thread
            yield from self._changing(None, self.exchange(st.delete_for_runs_statements(run_ids)))

    def copy_thread(self, source: str, target: str) -> Op[None]:
        yield from self._changing(
            [str(target)], self.exchange(st.copy_thread_statements(source, target)))

    def prune(self, thread_ids: Sequence[str], strategy: str) -> Op[None]:
        if not thread_ids:
            return
        if strategy == "delete":
            stmts = st.delete_threads_statements(thread_ids)
        elif strategy == "keep_latest":
            stmts = st.retention_statements(thread_ids, 1)
        else:
            raise ConfigError(f"unknown prune strategy {strategy!r}: use 'keep_latest' or 'delete'")
        yield from self._changing([str(t) for t in thread_ids], self.exchange(stmts))

    def execute(self, statements: Sequence[Statement]) -> Op[list[Result]]:
        """Maintenance statements (d1saver.admin), which may change any thread."""
        return (yield from self._changing(None, self.exchange(statements)))

    def _changing(self, thread_ids: Sequence[str] | None, op: Op[T]) -> Op[T]:
        """Run a write or delete of `thread_ids` (None: any thread), then drop their cached
        DeltaChannel histories, also when it fails (it may have been applied)."""
        try:
            return (yield from op)
        finally:
            if thread_ids is None:
                self.delta_cache.invalidate_all()
            else:
                self.delta_cache.invalidate(thread_ids)

    # --- tags ---------------------------------------------------------------------------

    def tag(self, config: RunnableConfig, name: str) -> Op[None]:
        thread_id, ns, cid = st.thread_id_of(config), st.ns_of(config), get_checkpoint_id(config)
        (result,) = yield from self.exchange(
            [Statement(_sql.TAG, (thread_id, ns, cid, str(name)))])
        if not result.rows:
            raise NotFoundError(
                f"no checkpoint {cid!r} in thread {thread_id!r} (namespace {ns!r}) to tag")

    def untag(self, config: RunnableConfig, name: str) -> Op[bool]:
        """True if the tag existed: recorded by the batch's first try, so a retry after a
        lost response (which finds it gone) still answers True."""
        *_, result = yield from self.exchange(
            st.untag_statements(config, name, st.new_op_id()))
        return _rows.read_rows(_rows.op_count, result) > 0

    def tags(self, config: RunnableConfig) -> Op[dict[str, str]]:
        (result,) = yield from self.exchange(
            [Statement(_sql.LIST_TAGS, (st.thread_id_of(config), st.ns_of(config)))])
        return _rows.read_rows(_rows.tags_from, result)


def _one(action: Commit) -> Op[list[Result]]:
    return (yield action)
