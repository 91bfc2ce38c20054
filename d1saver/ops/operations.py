"""The saver's operations, each a typed generator (`Op[T]`) with no I/O of its own.

An operation builds its statements (d1saver/ops/statements.py), yields them as actions, and
decodes the replies (d1saver/ops/rows.py). `D1Saver` runs the same generator with the sync or
the async driver, so every method's logic exists once.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Container, Generator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    DeltaChannelHistory,
    get_checkpoint_id,
)

from d1saver.ops import rows as _rows
from d1saver.sql import catalogue as _sql
from d1saver.ops import statements as st
from d1saver.ops.delta_cache import DeltaCache
from d1saver.core.errors import (
    CheckpointConflictError,
    ConfigError,
    NotFoundError,
    SchemaNotReadyError,
    QueryError,
)
from d1saver.ops.held import HeldChunks, Holds, StoredRows, checkpoint_key, write_key
from d1saver.core.protocol import (HELD, NOW, SOON, Commit, Emit, Exchange, Expect, Once, Op, Result,
                                   Statement)
from d1saver.ops.rewrites import Rewrites
from d1saver.storage.values import PLAIN_METADATA, Values

T = TypeVar("T")


def list_pages(page: Callable[[Statement], Generator[Any, Any, list[CheckpointTuple]]],
               config: RunnableConfig | None, filter: Mapping[str, Any] | None,
               before: RunnableConfig | None, limit: int | None, page_size: int, *,
               sealed: bool = False) -> Generator[Any, Any, int]:
    """The pages of one `list` call: each page's statement read through `page` (its
    checkpoints, Operations.page), the tuples it keeps handed on as `Emit` before the next
    page is read. Returns how many tuples it handed on."""
    conf = (config or {}).get("configurable") or {}
    thread_id = st.thread_id_of(config) if config is not None else None
    ns = None if conf.get("checkpoint_ns") is None else str(conf.get("checkpoint_ns"))
    checkpoint_id = conf.get("checkpoint_id")
    before_id = get_checkpoint_id(before) if before else None
    wanted = dict(filter or {})
    st.validate_filter(wanted)
    # With keys (`sealed`) a column holds only PLAIN_METADATA: SQL filters on those keys,
    # and the others are decided in Python, on the opened metadata, page after page.
    in_sql = {k: v for k, v in wanted.items()
              if not sealed or k.split(".")[0] in PLAIN_METADATA}
    filter_json = st.validate_filter(in_sql)
    in_python = in_sql != wanted
    remaining, cursor, handed = limit, None, 0
    if remaining is not None and remaining <= 0:
        return 0
    while True:
        size = page_size
        if remaining is not None and not in_python:
            size = min(size, remaining)
        # One row more than the page tells whether another page follows, so that no request
        # is wasted on an empty one; a page that can complete the limit needs no such row.
        last_page = remaining is not None and remaining <= size and not in_python
        asked = size if last_page else size + 1
        tuples = yield from page(st.page_statement(
            thread_id=thread_id, ns=ns, checkpoint_id=checkpoint_id, before=before_id,
            filter_json=filter_json, cursor=cursor, size=asked))
        more = len(tuples) >= asked  # a full answer: rows may follow
        got = tuples[:size]
        if got:
            last = got[-1].config["configurable"]
            cursor = (last["checkpoint_id"], last["thread_id"], last["checkpoint_ns"])
        # SQL has matched the filter already, except on keys of chunked metadata and (with
        # keys) on keys the column does not hold.
        kept = [t for t in got if st.metadata_matches(t.metadata, wanted)]
        if remaining is not None:
            kept = kept[:remaining]
            remaining -= len(kept)
        handed += len(kept)
        yield Emit(kept)
        if not more or not got or remaining == 0:
            return handed


@dataclass
class SchemaState:
    """Whether this instance knows its database's schema to be one it can use."""

    checked: bool = False


class Operations(Rewrites):
    """Every operation of the saver, as generators over one values codec and one cache.

    `send` is the client's `exchange`: a generator that sends statements in one request.
    """

    def __init__(self, values: Values, send: Exchange, *, guard_head: bool = False,
                 auto_setup: bool = True) -> None:
        self.values, self.guard_head, self.auto_setup = values, guard_head, auto_setup
        # Read-only (the CLI's listing and inspecting commands): the schema is checked as
        # usual, riding along, but a database without it, or with an older one, is reported
        # (SchemaNotReadyError), never set up or migrated.
        self.read_only = False
        self._send = send  # the client's exchange: statements -> Send/Sleep -> results
        self.delta_cache = DeltaCache()
        self.schema = SchemaState()  # shared with copies (with_values)
        self.held = HeldChunks()  # what the database holds: shared with copies too
        self.holds = Holds()  # which writes may wait for their step's put: shared too
        self.stored = StoredRows()  # rows known stored, which a write may replace: shared too

    @property
    def is_setup(self) -> bool:
        return self.schema.checked

    def with_values(self, values: Values) -> Operations:
        """The same operations (the schema state shared) over another values codec, with a
        cache of their own: values decoded under one serde's allowlist are never served to a
        saver with another."""
        clone = copy.copy(self)
        clone.values, clone.delta_cache = values, DeltaCache()
        return clone

    # --- sending ------------------------------------------------------------------------

    def exchange(self, statements: Sequence[Statement]) -> Op[list[Result]]:
        """Send statements in one request (with retries), the schema checked on first use."""
        return (yield from self._checked(statements, self._send))

    def commit(self, statements: Sequence[Statement], timing: str = SOON,
               step: tuple[str, str, str] | None = None,
               known: Callable[[], Container[str]] | None = None,
               stored: Callable[[], None] | None = None) -> Op[list[Result]]:
        """Like exchange, for writes that may ride in one batch with concurrent writes, leaving
        at `timing`, of LangGraph's `step`, their chunk rows sent once a batch and not when
        `known`, `stored` called once they commit (d1saver/http/group_commit.py)."""
        return (yield from self._checked(statements, lambda stmts: _one(
            Commit(stmts, timing, step, known, stored))))

    def read(self, statements: Sequence[Statement]) -> Op[list[Result]]:
        """Like exchange, for a read of a thread: it leaves at once, and writes held for a put
        ride in front of it, so it sees them (one request either way)."""
        return (yield from self.commit(statements, NOW))

    def _checked(self, statements: Sequence[Statement],
                 send: Callable[[Sequence[Statement]], Op[list[Result]]]) -> Op[list[Result]]:
        """Send; until this instance knows its database's schema, with READ_SCHEMA riding along
        (bytes, not a request): an older schema is then migrated once per driver, and one this
        d1saver cannot use refused. A statement failing for a missing table or column (a fresh
        database, or one older than the statement) sets the schema up, then is resent."""
        if self.read_only:
            return (yield from self._read_only(statements, send))
        if not self.auto_setup:
            return (yield from send(statements))
        probe = not self.schema.checked
        try:
            results = yield from send([st.read_schema(), *statements] if probe else statements)
        except QueryError as exc:
            if not _schema_missing(exc):
                raise
            # D1 names the first statement that failed, and the read goes first: without
            # d1saver_schema the database is fresh (create it whole); with it, it is older
            # than a statement of this batch (read its versions, migrate).
            older = probe and "d1saver_schema" not in str(exc)
            yield Once("setup", self._migrate if older else self._setup)
            return (yield from send(statements))
        if probe:
            info = _rows.read_rows(_rows.schema_info, results[0])
            results = results[1:]
            if info.version < _sql.SCHEMA_VERSION:
                yield Once("setup", lambda: self._upgrade(info))
            else:
                self._accept(info)
        return results

    def _read_only(self, statements: Sequence[Statement],
                   send: Callable[[Sequence[Statement]], Op[list[Result]]]) -> Op[list[Result]]:
        """Send, the schema checked as `_checked` does, but never set up nor migrated: a
        database without d1saver's schema, or with an older one, is SchemaNotReadyError."""
        probe = not self.schema.checked
        try:
            results = yield from send([st.read_schema(), *statements] if probe else statements)
        except QueryError as exc:
            if not _schema_missing(exc):
                raise
            if "d1saver_schema" in str(exc):
                raise _not_ready(0) from None
            (again,) = yield from self._send([st.read_schema()])  # which version, then?
            raise _not_ready(_rows.read_rows(_rows.schema_info, again).version) from exc
        if not probe:
            return results
        info = _rows.read_rows(_rows.schema_info, results[0])
        if info.version < _sql.SCHEMA_VERSION:
            raise _not_ready(info.version)
        self._accept(info)
        return results[1:]

    # --- schema -------------------------------------------------------------------------

    def setup_once(self) -> Op[None]:
        if not self.schema.checked:
            yield Once("setup", self._setup)

    def _setup(self) -> Op[None]:
        """Create the schema on a fresh database, or migrate an older one (docs/MIGRATIONS.md)."""
        try:
            results = yield from self._send(st.setup_statements())
        except QueryError as exc:
            # schema.sql stopped on a database it must not touch (D1 rolled it back).
            if "schema_outdated" not in str(exc) and "schema_too_new" not in str(exc):
                raise
            yield from self._migrate()
            return
        yield from self._upgrade(_rows.read_rows(_rows.schema_info, results[-1]))

    def _migrate(self) -> Op[None]:
        """Read the versions an existing database records, then apply the steps after them."""
        (result,) = yield from self._send([st.read_schema()])
        yield from self._upgrade(_rows.read_rows(_rows.schema_info, result))

    def _upgrade(self, info: _rows.SchemaInfo) -> Op[None]:
        """Apply each migration after `info.version`, one atomic batch each.

        Two instances may run the same step at once, and a step whose response was lost is
        retried: the batch's first statement claims the version, so the later batch fails on
        it, rolls back whole, and the step counts as applied.
        """
        self._refuse_unusable(info)
        for version in range(max(info.version, 1) + 1, _sql.SCHEMA_VERSION + 1):
            try:
                yield from self._send(st.migration_statements(version))
            except QueryError as exc:
                if "d1saver_schema.version" not in str(exc):  # UNIQUE: applied already
                    raise
        self.schema.checked = True

    def _accept(self, info: _rows.SchemaInfo) -> None:
        """A database at this version or a newer one this d1saver can still use."""
        self._refuse_unusable(info)
        self.schema.checked = True

    @staticmethod
    def _refuse_unusable(info: _rows.SchemaInfo) -> None:
        if info.min_reader > _sql.SCHEMA_VERSION:
            raise ConfigError(
                f"database schema v{info.version} requires d1saver schema >= "
                f"v{info.min_reader}; this d1saver knows v{_sql.SCHEMA_VERSION}: upgrade d1saver")

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
        result, deltas = yield from self.read([stmt, st.delta_statement(stmt)])
        self._learn(result, deltas)
        tuples = _rows.read_rows(_rows.tuples_from_page, result, self.values)
        for row in result.rows:  # rows a write may replace (StoredRows), as stored
            kind, thread_id, ns, cid, ref, *_, channel, _, value = row
            if kind == "c":
                self.stored.add(thread_id, [checkpoint_key(ns, cid)], _lists_chunks(value))
            elif kind == "w":
                self.stored.add(thread_id, [write_key(ns, cid, ref, channel)],
                                _lists_chunks(value))
        for tup in tuples[:1]:  # the newest: what the next put_writes builds on
            conf = tup.config["configurable"]
            self.held.saw_metadata(conf["thread_id"], tup.metadata)
            self.holds.saw(conf["thread_id"], conf.get("checkpoint_ns", ""), tup.checkpoint,
                           tup.metadata)
        histories = _rows.read_rows(_rows.histories_from_walk, deltas, tuples, self.values,
                                    result)
        for key, entry in histories.items():
            self.delta_cache.put(key, entry, since)
        return tuples

    def delta_history(self, config: RunnableConfig, channels: Sequence[str]
                      ) -> Op[Mapping[str, DeltaChannelHistory]]:
        if not channels:
            return {}
        channels = list(channels)
        self.holds.saw_deltas(st.thread_id_of(config), st.ns_of(config), channels)
        cid = get_checkpoint_id(config)
        if cid:
            key = (st.thread_id_of(config), st.ns_of(config), str(cid))
            hit = self.delta_cache.take(key, channels)
            if hit is not None:
                return hit
        (result,) = yield from self.read([st.delta_history_statement(config, channels)])
        self._learn(result, thread_id=st.thread_id_of(config))
        return _rows.read_rows(_rows.delta_history, result, st.thread_id_of(config),
                               st.ns_of(config), channels, self.values)

    # --- writes -------------------------------------------------------------------------

    def _learn(self, *results: Result, thread_id: str | None = None) -> None:
        """Remember the chunks a read returned: its threads hold them."""
        for result in results:
            for thread, ids in _rows.read_rows(_rows.chunk_ids, result, thread_id).items():
                self.held.add(thread, ids)

    def _write(self, thread_id: str, build: Callable[[set[str]], tuple[list[Statement], set[str]]],
               timing: str, step: tuple[str, str, str], keys: Sequence[tuple[str, ...]]
               ) -> Op[None]:
        """Commit a put's or put_writes' statements, built over the chunks the thread is known
        to hold, and leaving out as well those known by the time its batch is made, or carried
        by a batch-mate (group commit); then it holds the ones its rows reach. If one was
        deleted behind this process's back (compaction, another instance), the batch fails
        whole on "chunk_missing": forget the thread and send again with every chunk (in the
        same atomic batch as its rows, so it cannot fail that way again). A write to rows this
        process knows are stored (`keys`, StoredRows) then collects what the loser leaves."""
        stmts, reached = build(self.held.of(thread_id))
        if not stmts:
            return
        # Before it is sent: a write of the same rows in the same batch is seen too.
        collect = self.stored.add(thread_id, keys, by_content=bool(reached))
        try:
            yield from self._changing([thread_id], self.commit(
                stmts, timing, step, lambda: self.held.of(thread_id),
                lambda: self.held.add(thread_id, reached)))
        except QueryError as exc:
            if "chunk_missing" not in str(exc):
                raise
            self.held.forget([thread_id])
            stmts, reached = build(set())
            yield from self._changing([thread_id], self.commit(stmts, timing, step))
        self.held.add(thread_id, reached)
        if collect:
            yield from self._collect(thread_id)

    def _collect(self, thread_id: str) -> Op[None]:
        """Collect the thread's chunks that no row reaches, in a request of its own (after a
        write that may have lost to a stored row: see StoredRows). Alone, so that no statement
        after it in a batch can rely on a chunk it deletes; atomic, so a chunk a committed row
        reaches stays (a write racing it that assumed one stored fails on chunk_missing and
        sends it again, as beside compaction)."""
        try:
            yield from self.exchange(st.collect_statements(thread_id))
        finally:
            self.held.forget([thread_id])  # its rows stay: the keys in self.stored too

    def put(self, config: RunnableConfig, checkpoint: Checkpoint,
            metadata: CheckpointMetadata) -> Op[RunnableConfig]:
        # Serialized here, before the first yield: under durability "async" LangGraph runs the
        # next step while this put waits (for setup, group commit, a retry), and what it hands
        # over may change meanwhile. The statements are built from these bytes.
        put = st.put_input(self.values, config, checkpoint, metadata)

        def build(held: set[str]) -> tuple[list[Statement], set[str]]:
            stmts, _, reached = st.put_statements(self.values, put, guard_head=self.guard_head,
                                                  held=held)
            return stmts, reached

        self.held.saw_metadata(put.thread_id, put.metadata)
        self.holds.saw(put.thread_id, st.ns_of(config), checkpoint, metadata)  # at entry: see above
        step = (put.thread_id, st.ns_of(config), str(get_checkpoint_id(config) or ""))
        try:  # a put leaves at once, with the writes held for it (its step's)
            yield from self._write(put.thread_id, build, NOW, step,
                                   [checkpoint_key(put.ns, put.cid)])
        except QueryError as exc:
            if self.guard_head and "head_moved" in str(exc):
                raise CheckpointConflictError(
                    f"thread {put.thread_id!r} moved on: the parent {put.parent_id!r} is no "
                    "longer its newest checkpoint (another writer resumed it); reload the "
                    "state and retry") from exc
            raise
        return put.next_config

    def put_writes(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]],
                   task_id: str, task_path: str) -> Op[None]:
        put = st.writes_input(self.values, config, writes, task_id, task_path)  # see put
        timing = self.holds.timing(config, writes)
        step = (put.thread_id, st.ns_of(config), str(get_checkpoint_id(config) or ""))
        if timing == HELD:  # on its way: the step's put waits for it to join the queue
            yield Expect(step)
        deltas = self.held.delta_channels(put.thread_id)
        yield from self._write(put.thread_id, lambda held: st.put_writes_statements(
            self.values, put, held, whole=deltas), timing, step,
            [write_key(put.ns, put.cid, put.task_id, channel) for channel, _ in put.writes])

    # --- deletes and copies -------------------------------------------------------------

    def delete_thread(self, thread_id: str) -> Op[list[tuple[str, str]]]:
        """Deletes the thread here, and what is staged here to become it or copied from it;
        returns where copies of it are staged in other databases (database id, staging id)."""
        results = yield from self._changing(
            [str(thread_id)], self.exchange(st.delete_threads_statements([thread_id])),
            deletes=True)
        return st.staged_elsewhere(results[-1])

    def delete_for_runs(self, run_ids: Sequence[str]) -> Op[None]:
        if run_ids:  # the runs' threads are known only to the database: forget every thread
            yield from self._changing(None, self.exchange(st.delete_for_runs_statements(run_ids)),
                                      deletes=True)

    def prune(self, thread_ids: Sequence[str], strategy: str) -> Op[None]:
        if not thread_ids:
            return
        if strategy == "delete":
            stmts = st.delete_threads_statements(thread_ids)
        elif strategy == "keep_latest":
            stmts = st.retention_statements(thread_ids, 1)
        else:
            raise ConfigError(f"unknown prune strategy {strategy!r}: use 'keep_latest' or 'delete'")
        yield from self._changing([str(t) for t in thread_ids], self.exchange(stmts),
                                  deletes=True)

    def execute(self, statements: Sequence[Statement]) -> Op[list[Result]]:
        """Maintenance statements (d1saver.admin), which may change any thread."""
        return (yield from self._changing(None, self.exchange(statements), deletes=True))

    def _changing(self, thread_ids: Sequence[str] | None, op: Op[T], *,
                  deletes: bool = False) -> Op[T]:
        """Run a write or delete of `thread_ids` (None: any thread), then drop their cached
        DeltaChannel histories, also when it fails (it may have been applied); after a
        delete, also what they were known to hold (chunks may have gone)."""
        try:
            return (yield from op)
        finally:
            if thread_ids is None:
                self.delta_cache.invalidate_all()
            else:
                self.delta_cache.invalidate(thread_ids)
            if deletes:
                self.held.forget(thread_ids)
                self.stored.forget(thread_ids)

    # --- tags ---------------------------------------------------------------------------

    def tag(self, config: RunnableConfig, name: str) -> Op[None]:
        thread_id, ns, cid = st.thread_id_of(config), st.ns_of(config), get_checkpoint_id(config)
        (result,) = yield from self.exchange(
            [Statement.bind(_sql.TAG, {"thread_id": thread_id, "checkpoint_ns": ns,
                                       "checkpoint_id": cid, "name": str(name)})])
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
            [Statement.bind(_sql.LIST_TAGS, {"thread_id": st.thread_id_of(config),
                                             "checkpoint_ns": st.ns_of(config)})])
        return _rows.read_rows(_rows.tags_from, result)


def _lists_chunks(value: object) -> bool:
    """Whether a stored value may list chunks: a manifest, or a pack holding one."""
    text = str(value or "")
    return text.startswith("m:") or (text.startswith("p:") and '"m:' in text)


def _one(action: Commit) -> Op[list[Result]]:
    return (yield action)


def _not_ready(version: int) -> SchemaNotReadyError:
    if version <= 0:
        return SchemaNotReadyError(
            "the database has no d1saver schema: nothing was ever stored there (this command "
            "only reads, so it does not create one)")
    return SchemaNotReadyError(
        f"the database's schema is v{version}, older than this d1saver's "
        f"(v{_sql.SCHEMA_VERSION}); this command only reads, so it does not migrate it: run "
        "one that writes first (`d1saver compact`, or saver.setup())", version=version)


def _schema_missing(exc: QueryError) -> bool:
    """A statement met a database without a table or column it needs: fresh, or older."""
    return "no such table" in str(exc) or "no such column" in str(exc)
