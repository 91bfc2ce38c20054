"""d1saver's maintenance API: what compaction, rebalance, rekey, copy and the command line use.

Statements to send with `D1Saver.execute`, readers of their results by column name, and the few
types and helpers a maintenance job needs (the rows of a thread being moved, the staged ids a
killed copy leaves, the layout of memory over a fleet). d1saver.compaction is built on this
module and on d1saver's public names only (tests/test_layers.py checks it); the SQL itself stays
in d1saver/sql, so every statement d1saver ships lives in one place and runs on the real engine
in CI.

    saver.execute([threads_page("", 1000)])       # a page of threads with their figures
    saver.execute(retention(["t1"], keep=5))      # one atomic retention batch

Stability: the names in `__all__` follow semantic versioning from 0.3.0: a name, a
parameter, a column a reader returns or a statement's effect is removed or changed only in a
major release, and added ones are announced in the CHANGELOG. The SQL text of a statement is not
part of the API (it changes with the schema, which `D1Saver.setup()` migrates); nor is any
name outside `__all__`, nor anything this module imports. The constants:

- `SCHEMA_VERSION`: the schema this d1saver writes (`schema_version` reads a database's).
- `STAGING_PREFIX`, `MOVING_PREFIX`, `COPYING_PREFIX`, `LEAVING_PREFIX`: the hidden thread ids
  under which a move, a copy between databases and a move's comparison stage rows
  (`is_staging` recognises them all; `staged_threads` takes one).
- `STAGED`: the table name under which a key census counts staged values (rekey skips them).
- `CRON_CURSOR`: the gateway Worker's cursor name.
- `SUMMARY_COLUMNS`, `PLAN_COLUMNS`, `COMPACTION_RUNS_COLUMNS`: the columns of
  `retention_summary`, `retention_plan` and `compaction_runs` results.
- `FINISH_FIGURES`: where `finished` reads each figure of a run's end (the gateway's cron
  reads the same table).
- `SWEEP_MARGIN`: the seconds of clock skew a sweep of expired memory allows.
- `MEMORY_TABLES`: the tables of D1Store's items and D1Cache's entries, which a rebalance moves.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, TypeVar

from d1saver.core.errors import FleetError, QueryError, SchemaNotReadyError
from d1saver.core.protocol import Exchange as _Exchange
from d1saver.core.protocol import Param as _Param
from d1saver.core.protocol import Result, Statement
from d1saver.fleet import routing as _routing
from d1saver.memory import moves as _moves
from d1saver.memory import placement as _placement
from d1saver.ops import reseal as _reseal
from d1saver.ops import rows as _rows
from d1saver.ops import statements as _st
from d1saver.ops import transfer as _transfer
from d1saver.sql import catalogue as _sql
from d1saver.sql import memory as _memory_sql

if TYPE_CHECKING:  # types only: the saver is the caller's
    from d1saver.saver import D1Saver

_T = TypeVar("_T")


def threads_page(after: str, size: int) -> Statement:
    """Threads after `after` ('' first) in thread_id order; columns: thread_id, checkpoints,
    namespaces, updated (newest ts), bytes (stored checkpoint bytes)."""
    return Statement.bind(_sql.THREADS_PAGE, {"after": after, "limit": int(size)})


def thread_infos(thread_ids: Sequence[str]) -> Statement:
    """The same figures as `threads_page` for the named threads (those that exist)."""
    return Statement.bind(_sql.THREADS_INFO, {"thread_ids": _st.id_list(thread_ids)})


def history(thread_id: str, limit: int) -> Statement:
    """One thread's checkpoints, newest first; columns: checkpoint_ns, checkpoint_id,
    parent_checkpoint_id, step, source, ts, bytes, writes, tags (comma-separated)."""
    return Statement.bind(_sql.HISTORY, {"thread_id": thread_id, "limit": int(limit)})


def stored_sample(thread_id: str, chars: int = 40) -> Statement:
    """A thread's newest checkpoint row as stored; columns: checkpoint_id, head (the first
    `chars` characters of its value), bytes (of the value), metadata (the column)."""
    return Statement.bind(_sql.STORED_SAMPLE, {"thread_id": thread_id, "chars": int(chars)})


def storage_summary() -> Statement:
    """Rows and stored bytes per table; columns: tbl, row_count, bytes."""
    return Statement.bind(_sql.STORAGE_SUMMARY)


def retention(thread_ids: Sequence[str], keep: int, *, summarize: bool = False,
              delete: bool = True, op_id: str | None = None) -> list[Statement]:
    """One atomic batch over `thread_ids`: keep the `keep` newest checkpoints of the root
    namespace and of each subgraph namespace a kept checkpoint reaches, the tagged ones and what
    their DeltaChannels replay from; relink parents; delete the rest.
    Writes of checkpoints not stored yet (a put in flight) stay. With `summarize`, one
    statement reports per thread what goes (see `retention_summary`); a batch that deletes
    records that report under an id drawn here, so build the batch once and send it (with
    its retries) as is: a retry after a lost response then reports what the first try did.
    `op_id` names that record instead (the caller drew it, once per batch)."""
    return _st.retention_statements(thread_ids, keep, summarize=summarize, delete=delete,
                                   op_id=op_id)


SUMMARY_COLUMNS: Final[tuple[str, ...]] = tuple(_sql.SUMMARY_COLUMNS)
"""The columns of a `retention_summary` result."""


# --- one compaction policy: the plan of a page, and a run's end (issue 30) --------------------
# `d1saver compact` (compaction/job.py) and the gateway Worker's cron (worker/compaction.js,
# through worker/compaction.generated.js) send the same statements, built here.

PLAN_COLUMNS: Final[tuple[str, ...]] = tuple(_sql.PLAN_COLUMNS)
"""The columns of a `retention_plan` result (`read_plan` reads them)."""


@dataclass(frozen=True)
class PlannedThread:
    """A thread of a plan page: its figures, whether it is staged (a copy or a move, never
    compacted) or idle past the cutoff (`expired`), and its batch (None: nothing to do)."""

    thread_id: str
    checkpoints: int
    updated: str | None
    staged: bool
    expired: bool
    batch: int | None


def _plan_params(keep: int, cutoff: str | None, batch_checkpoints: int,
                 batch_threads: int) -> dict[str, _Param]:
    return {"keep": int(keep), "cutoff": cutoff, "batch_checkpoints": int(batch_checkpoints),
            "batch_threads": int(batch_threads)}


def retention_plan(after: str, size: int, keep: int, cutoff: str | None, *,
                   batch_checkpoints: int, batch_threads: int) -> Statement:
    """The threads after `after` ('' first), `size` at most, each with its batch: those idle
    since before `cutoff` (ISO 8601 text, as checkpoints' ts; None: none) keep only their tags,
    those with more than `keep` checkpoints keep `keep`, and those a replaced row may have left
    garbage in are collected; batches in thread order, of one kind, at most `batch_threads`
    threads and about `batch_checkpoints` deletions (read it with `read_plan`)."""
    return Statement.bind(_sql.PLAN_PAGE, {"after": after, "limit": int(size),
                                           **_plan_params(keep, cutoff, batch_checkpoints,
                                                          batch_threads)})


def retention_plan_threads(thread_ids: Sequence[str], keep: int, cutoff: str | None, *,
                           batch_checkpoints: int, batch_threads: int) -> Statement:
    """`retention_plan` of the named threads (those that exist), as one page."""
    return Statement.bind(_sql.PLAN_THREADS, {"thread_ids": _st.id_list(thread_ids),
                                              **_plan_params(keep, cutoff, batch_checkpoints,
                                                             batch_threads)})


def read_plan(result: Result) -> list[PlannedThread]:
    """The threads of a `retention_plan` (or `retention_plan_threads`) result, typed, in order."""
    _rows.check_columns(result, _sql.PLAN_COLUMNS)
    return [PlannedThread(str(t), int(n), None if u is None else str(u), bool(s), bool(e),
                          None if b is None else int(b)) for t, n, u, s, e, b in result.rows]


def finish(name: str, holder: str, *, whole: bool = True, sweep: bool = True
           ) -> list[Statement]:
    """The batch that ends a live run and releases its lease. A whole-database run first
    removes the staged rows killed copies and moves left (every move's and comparison's,
    copies' once expired; only while the lease is still this run's, and without failing when it
    is not), forgets the gc marks of threads gone, and (with `sweep`) deletes the D1Store items
    and D1Cache entries expired by the database's clock, less `SWEEP_MARGIN` seconds; read its
    figures with `finished`. A run over named threads only releases the lease."""
    release = Statement.bind(_sql.RELEASE_LEASE, {"name": name, "holder": holder})
    if not whole:
        return [release]
    scope = {"name": name, "holder": holder, **_staging_range()}
    return [Statement.bind(_sql.CLEAR_SCOPE),
            Statement.bind(_sql.SCOPE_LEFTOVERS_REMOVABLE, scope),
            Statement.bind(_sql.SCOPED), Statement.bind(_sql.UNSTAGE_SCOPE),
            *Statement.bind_each(_sql.LEAVE, {}), Statement.bind(_sql.CLEAR_SCOPE),
            Statement.bind(_sql.FORGET_GC_GONE),
            *(Statement.bind_each(_memory_sql.SWEEP_EXPIRED, {}) if sweep else []), release]


def finish_counts(*, sweep: bool = True) -> list[Statement]:
    """A dry run's `finish`: counts what it would remove (column: staged) and (with `sweep`)
    sweep (columns: items, cache), changing nothing."""
    return [Statement.bind(_sql.COUNT_LEFTOVERS_REMOVABLE, _staging_range()),
            *([Statement.bind(_memory_sql.COUNT_EXPIRED)] if sweep else [])]


def _staging_range() -> dict[str, _Param]:
    return {"low": STAGING_PREFIX, "high": STAGING_PREFIX[:-1] + chr(ord(STAGING_PREFIX[-1]) + 1)}


@dataclass(frozen=True)
class Finished:
    """What a run's end removed (or, dry, would remove): staged ids, expired store items,
    expired cache entries."""

    staged_removed: int = 0
    store_items_swept: int = 0
    cache_entries_swept: int = 0


# Where a live run's end reads each figure: (statement name, "row": its first value, or
# "changes": the rows it changed). compaction/gateway.py hands the same table to the Worker.
FINISH_FIGURES: Final[Mapping[str, tuple[str, str]]] = {"staged_removed": ("SCOPED", "row"),
                  "store_items_swept": ("SWEEP_EXPIRED[1]", "changes"),
                  "cache_entries_swept": ("SWEEP_EXPIRED[2]", "changes")}


def finished(statements: Sequence[Statement], results: Sequence[Result]) -> Finished:
    """The figures of a `finish` (or `finish_counts`) batch, found among its results by name
    (a figure whose statement is not in the batch is 0)."""
    by = {s.name: r for s, r in zip(statements, results)}
    if "COUNT_LEFTOVERS_REMOVABLE" in by:  # a dry run's counts
        _rows.check_columns(by["COUNT_LEFTOVERS_REMOVABLE"], _sql.LEFTOVERS_REMOVABLE_COLUMNS)
        items = cache = 0
        if "COUNT_EXPIRED" in by:
            _rows.check_columns(by["COUNT_EXPIRED"], _memory_sql.EXPIRED_COLUMNS)
            items, cache = (int(n) for n in by["COUNT_EXPIRED"].rows[0])
        return Finished(int(by["COUNT_LEFTOVERS_REMOVABLE"].rows[0][0]), items, cache)
    figures: dict[str, int] = {}
    for figure, (name, how) in FINISH_FIGURES.items():
        found = by.get(name)
        if found is None:
            figures[figure] = 0
        elif how == "row":
            _rows.check_columns(found, _sql.SCOPED_COLUMNS)
            figures[figure] = int(found.rows[0][0])
        else:
            figures[figure] = found.changes
    return Finished(**figures)


SWEEP_MARGIN: Final[int] = _memory_sql.SWEEP_MARGIN
"""Seconds of clock skew a sweep of expired memory allows (it removes what expired before)."""


def retention_summary(statements: Sequence[Statement], results: Sequence[Result]) -> Result:
    """The summary among a retention batch's results; columns: thread_id, checkpoints_total,
    checkpoints, writes, bytes (what the batch deletes per thread)."""
    summary = next(r for s, r in zip(statements, results)
                   if s.name in ("SUMMARIZE_PLAN", "RECORDED_PLAN"))
    _rows.check_columns(summary, _sql.SUMMARY_COLUMNS)
    return summary


# --- schema: what a dry run may read without setting anything up ----------------------------

SCHEMA_VERSION: Final[int] = _sql.SCHEMA_VERSION
"""The schema version this d1saver writes and reads."""


def read_schema() -> Statement:
    """Every schema version the database records (`schema_version` reads the result). Send it
    with the raw client (`saver.client.execute`): `saver.execute` would set up or migrate."""
    return Statement.bind(_sql.READ_SCHEMA)


def schema_version(result: Result) -> int:
    """The newest schema version a `read_schema` result records."""
    return _rows.schema_info(result).version


def setup_statements() -> list[Statement]:
    """schema.sql and the stored versions, in one batch, as `D1Saver.setup()` sends it to a
    fresh database (it fails with schema_outdated on an older one: migrate that instead)."""
    return _st.setup_statements()


def migration_statements(version: int) -> list[Statement]:
    """The step to `version` (2 to SCHEMA_VERSION) in one batch, as `D1Saver.setup()` sends it;
    it fails on "d1saver_schema.version" if the step is applied already."""
    return _st.migration_statements(version)


# --- leases: keep two maintenance runs from overlapping, on the database's clock ----------

def acquire_lease(name: str, holder: str, ttl: int) -> Statement:
    """Takes the lease if free, expired or already ours; returns a row (holder) if taken."""
    return Statement.bind(_sql.ACQUIRE_LEASE, {"name": name, "holder": holder, "seconds": int(ttl)})


def lease_guard(name: str, holder: str, ttl: int) -> list[Statement]:
    """Prefix for a batch: fail it ("lease_lost") unless the lease is still ours; renew it."""
    return Statement.bind_each([_sql.CHECK_LEASE, _sql.RENEW_LEASE],
                               {"name": name, "holder": holder, "seconds": int(ttl)})


def release_lease(name: str, holder: str) -> Statement:
    """Removes the lease if `holder` holds it (nothing otherwise)."""
    return Statement.bind(_sql.RELEASE_LEASE, {"name": name, "holder": holder})


def break_lease(name: str) -> Statement:
    """Removes the lease whoever holds it."""
    return Statement.bind(_sql.BREAK_LEASE, {"name": name})


def lease_holder(name: str) -> Statement:
    """Columns: holder, seconds_left."""
    return Statement.bind(_sql.LEASE_HOLDER, {"name": name})


# --- the gateway Worker's scheduled compaction: run records and the pass's cursor ----------
# The Worker sends these (generated by `d1saver gateway build`); `d1saver compact --history`
# reads the records with `compaction_runs`.

CRON_CURSOR: Final[str] = "cron"
"""The gateway Worker's Cron Trigger's cursor name."""


def compaction_runs(limit: int) -> Statement:
    """The newest run records, newest first; columns: COMPACTION_RUNS_COLUMNS."""
    return Statement.bind(_sql.COMPACTION_RUNS, {"limit": int(limit)})


COMPACTION_RUNS_COLUMNS: Final[tuple[str, ...]] = tuple(_sql.COMPACTION_RUNS_COLUMNS)
"""The columns of a `compaction_runs` result."""


def run_begin(run_id: str, database_id: str, trigger: str, keep: int | None,
              max_age_days: int | None, status: str = "running",
              reason: str | None = None) -> Statement:
    """Record a run on one database (status running, or skipped/failed with its reason)."""
    return Statement.bind(_sql.RUN_BEGIN, {
        "run_id": run_id, "database_id": database_id, "trigger": trigger, "keep": keep,
        "max_age_days": max_age_days, "status": status, "reason": reason})


def runs_interrupted(database_id: str, run_id: str) -> Statement:
    """Mark the runs still "running" on this database, but `run_id`, as interrupted (sent by a
    run that holds the lease: no other run can be active)."""
    return Statement.bind(_sql.RUNS_INTERRUPTED, {"database_id": database_id, "run_id": run_id})


def run_add_batch(run_id: str, database_id: str, op_id: str, expired: int) -> Statement:
    """Last in a retention batch recorded under `op_id`: add its figures to the run's record
    (`expired` 1 for a batch of idle threads, counted as expired; 0 otherwise)."""
    return Statement.bind(_sql.RUN_ADD_BATCH, {"run_id": run_id, "database_id": database_id,
                                               "op_id": op_id, "expired": int(expired)})


def run_end(run_id: str, database_id: str, status: str, reason: str | None,
            threads_scanned: int) -> Statement:
    """Close a run's record: its status (done, failed, ...), the reason, the threads scanned."""
    return Statement.bind(_sql.RUN_END, {"run_id": run_id, "database_id": database_id,
                                         "status": status, "reason": reason,
                                         "threads_scanned": int(threads_scanned)})


def cursor_get(name: str = CRON_CURSOR) -> Statement:
    """Columns: after (the last thread id the pass finished), run_id; no row: a new pass."""
    return Statement.bind(_sql.CURSOR_GET, {"name": name})


def cursor_set(after: str, run_id: str, name: str = CRON_CURSOR) -> Statement:
    """Last in a retention batch: the pass has finished every thread up to `after`."""
    return Statement.bind(_sql.CURSOR_SET, {"name": name, "after": after, "run_id": run_id})


def cursor_clear(name: str = CRON_CURSOR) -> Statement:
    """Forget the pass's cursor: the next run starts a new pass from the first thread."""
    return Statement.bind(_sql.CURSOR_CLEAR, {"name": name})


# --- moving threads between databases (`d1saver rebalance`) -----------------------------------

STAGING_PREFIX: Final[str] = _routing.STAGING_PREFIX
"""What every staged thread id starts with (`is_staging`)."""
MOVING_PREFIX: Final[str] = _routing.MOVING_PREFIX
"""Rows a move (`d1saver rebalance`) is writing into their new home."""
COPYING_PREFIX: Final[str] = _routing.COPYING_PREFIX
"""Rows `copy_thread` is writing into another database."""
LEAVING_PREFIX: Final[str] = _routing.LEAVING_PREFIX
"""A moved thread's rows written back into its old database, to compare with it there."""


def is_staging(thread_id: str) -> bool:
    """True for a staged thread id (rows still being copied or compared): never an
    application's thread, so a listing or a compaction skips it."""
    return _routing.is_staging(thread_id)


class ThreadRows:
    """Every row of one thread in one database, as `read_thread` read them: what `copy_batches`
    writes and `delete_if_unchanged` compares. `ThreadRows(thread_id)` holds no row."""

    __slots__ = ("_rows",)

    def __init__(self, thread_id: str) -> None:
        self._rows = _transfer.ThreadRows(thread_id)

    @classmethod
    def _of(cls, rows: _transfer.ThreadRows) -> ThreadRows:
        out = cls.__new__(cls)
        out._rows = rows
        return out

    @property
    def thread_id(self) -> str:
        """The thread the rows were read from."""
        return self._rows.thread_id

    @property
    def total(self) -> int:
        """How many rows, in all tables."""
        return self._rows.total

    @property
    def bytes(self) -> int:
        """Characters of the stored values (what a copy sends, near enough)."""
        return self._rows.bytes

    def counts(self) -> dict[str, int]:
        """Rows per table."""
        return self._rows.counts()

    def digest(self) -> str:
        """SHA-256 of the rows, tables in a fixed order: equal digests, equal rows."""
        return self._rows.digest()

    def holds(self, other: ThreadRows) -> bool:
        """True if every row of `other` is here, identical."""
        return self._rows.holds(other._rows)

    def __repr__(self) -> str:
        return f"ThreadRows({self.thread_id!r}, {self.counts()})"


def read_thread(saver: D1Saver, thread_id: str, *, lead: Sequence[Statement] = (),
                page_rows: int = _transfer.READ_PAGE_ROWS,
                page_bytes: int = _transfer.READ_PAGE_BYTES) -> ThreadRows:
    """Every row of a thread, read in bounded keyset pages (one request for most threads),
    each request sent as `saver.execute` sends it, on the saver's runner. `saver` is a
    single-database saver or `saver.database(id)`. `lead` leads the first request in one
    atomic batch with it (a lease's guard, a move's registration), its results dropped:

        rows = read_thread(saver, "t1")    # a ThreadRows: counts(), digest(), holds(other)
    """
    ops = saver.ops
    return ThreadRows._of(saver.driver.run(_transfer.read_thread(
        _led(ops.execute, lead), thread_id, page_rows=page_rows, page_bytes=page_bytes)))


def _led(send: _Exchange, lead: Sequence[Statement]) -> _Exchange:
    """`send`, with `lead` before the statements of its first request."""
    first = [list(lead)]

    def exchange(statements: Sequence[Statement]) -> Generator[Any, Any, list[Result]]:
        led = first.pop() if first else []
        results = yield from send([*led, *statements])
        return results[len(led):]
    return exchange


def copy_batches(rows: ThreadRows, target: str, *, staging_prefix: str = MOVING_PREFIX,
                 move_id: str | None = None) -> list[list[Statement]]:
    """The atomic batches that write `rows` as thread `target` (values as bound parameters,
    within D1's limits); over one batch, staged under `staging_prefix + target` (registered,
    with an expiry) and renamed by the last, so readers never see part of the thread. With
    `move_id` (see `begin_move`), the batch that publishes fails ("move_voided") unless the
    move is still registered, and ends it."""
    publish: list[Statement] = []
    published: list[Statement] = []
    if move_id is not None:
        move = {"thread_id": target, "move_id": move_id}
        publish = [Statement.bind(_sql.CHECK_MOVE, move)]
        published = [Statement.bind(_sql.END_MOVE, move)]
    return _transfer.copy_batches(rows._rows, target, staging_prefix=staging_prefix,
                                  publish=publish, published=published)


def begin_move(thread_id: str, move_id: str) -> Statement:
    """Registers a move of `thread_id` into this database (send it there before reading the
    thread where it is): a delete_thread or prune of the thread here voids it, and
    `copy_batches(..., move_id=move_id)` then publishes nothing (delete wins)."""
    return Statement.bind(_sql.BEGIN_MOVE, {"thread_id": thread_id, "move_id": move_id})


def moves_registered() -> Statement:
    """How many moves are registered in this database; column: moves."""
    return Statement.bind(_sql.MOVES_REGISTERED)


def clear_moves() -> Statement:
    """Forgets every move registered in this database (killed runs': send it holding the
    lease, when no move runs)."""
    return Statement.bind(_sql.CLEAR_MOVES)


def delete_if_unchanged(rows: ThreadRows) -> list[list[Statement]]:
    """The atomic batches, sent in order, that delete the thread `rows` were read from, in that
    database, only if it still holds exactly `rows` (every row and column compared there, in
    SQL, against a scratch copy under `LEAVING_PREFIX + thread_id` the batches write);
    `moved_away(results of the last)` says whether it did."""
    return _transfer.delete_if_unchanged(rows._rows, staging_prefix=LEAVING_PREFIX)


def moved_away(results: Sequence[Result]) -> bool:
    """Whether the last `delete_if_unchanged` batch (the last statements of a request) deleted."""
    return _transfer.deleted(results)


def staged_threads(prefix: str = MOVING_PREFIX) -> Statement:
    """Thread ids holding staged rows under `prefix` (MOVING_PREFIX: a copy killed midway;
    LEAVING_PREFIX: a comparison killed midway); column: thread_id."""
    return _transfer.staged_threads(prefix)


@dataclass(frozen=True)
class Leftover:
    """Rows staged under a hidden thread id (`thread_id`) by a copy or a move: the thread they
    would become (`target`) and came from (`source`), both None if unregistered; `expired`:
    no copy renews them any more (killed), so any cleanup may remove them."""

    thread_id: str
    target: str | None
    source: str | None
    expired: bool

    @property
    def kind(self) -> str:
        """"moving", "leaving" or "copying": the staging prefix's name."""
        return self.thread_id.split("\x1f")[1].removeprefix("d1saver-")


def leftovers() -> Statement:
    """Every staged thread id in the database, with its registration (read the result with
    `read_leftovers`)."""
    return _transfer.leftovers(STAGING_PREFIX)


def read_leftovers(result: Result) -> list[Leftover]:
    """The rows of a `leftovers` result, typed."""
    _rows.check_columns(result, _sql.LEFTOVERS_COLUMNS)
    return [Leftover(str(t), None if g is None else str(g), None if s is None else str(s),
                     bool(e)) for t, g, s, e in result.rows]


def removable(found: Sequence[Leftover]) -> list[str]:
    """The staged ids a maintenance run holding the lease removes: every move's and
    comparison's (no move runs without that lease), and copies' that expired."""
    return [x.thread_id for x in found
            if x.expired or x.thread_id.startswith((MOVING_PREFIX, LEAVING_PREFIX))]


def delete_threads(thread_ids: Sequence[str]) -> list[Statement]:
    """Delete these threads entirely, in one batch."""
    return _st.delete_threads_statements(thread_ids)


# --- moving memory between databases (`d1saver rebalance`; d1saver/memory/moves.py) -------------
# A page of misplaced rows moves in four requests: `begin_memory_move` at the target,
# `read_memory` at the source (`read_memory_rows` reads it), `memory_move_in`'s batches at the
# target, `memory_move_out` at the source (its first statement's changes: the rows deleted).

MEMORY_TABLES: Final[tuple[str, ...]] = tuple(_moves.TABLES)
"""The tables of D1Store's items and D1Cache's entries ("store_items", "cache_entries")."""


@dataclass(frozen=True)
class MemoryKey:
    """A row of `table` (one of MEMORY_TABLES): its stored namespace text, its key, and the
    bytes a move carries."""

    table: str
    ns: str
    key: str
    bytes: int = 0

    def _internal(self) -> _moves.MemoryKey:
        return _moves.MemoryKey(self.table, self.ns, self.key, self.bytes)


class MemoryRows:
    """A page's rows as `read_memory_rows` read them at the source: what `memory_move_in`
    writes at the target and `memory_move_out` deletes at the source."""

    __slots__ = ("_rows",)

    def __init__(self, rows: _moves.MemoryRows) -> None:
        self._rows = rows

    @property
    def table(self) -> str:
        """The table the rows are of."""
        return self._rows.table

    @property
    def count(self) -> int:
        """How many rows were read (0: the page was deleted meanwhile)."""
        return len(self._rows.rows)

    @property
    def bytes(self) -> int:
        """Characters of the values and vectors the page carries."""
        return self._rows.bytes


class MemoryLayout:
    """Where D1Store's items and D1Cache's entries live over a fleet (and lived over its previous
    database list), as `memory_layout` builds it; `memory_home` reads it."""

    __slots__ = ("_layout",)

    def __init__(self, layout: _placement.Layout) -> None:
        self._layout = layout


def memory_keys_page(table: str, after: MemoryKey | None, size: int) -> Statement:
    """The keys of `table` after `after` (None: from the first), `size` at most (read the
    result with `read_memory_keys`)."""
    return _moves.keys_page(table, None if after is None else after._internal(), size)


def read_memory_keys(table: str, result: Result) -> list[MemoryKey]:
    """The rows of a `memory_keys_page` result, typed."""
    return [MemoryKey(k.table, k.ns, k.key, k.bytes) for k in _moves.read_keys(table, result)]


def memory_pages(rows: Sequence[MemoryKey]) -> list[list[MemoryKey]]:
    """Rows of one table grouped into the pages a move carries (bounded in rows and bytes; a
    larger row alone)."""
    pages = _moves.pages([r._internal() for r in rows])
    return [[MemoryKey(k.table, k.ns, k.key, k.bytes) for k in page] for page in pages]


def begin_memory_move(move_id: str) -> Statement:
    """The registration of a memory move, sent to its target first: a delete there voids it."""
    return _moves.begin(move_id)


def read_memory(page: Sequence[MemoryKey]) -> list[Statement]:
    """The rows of a page (one table's) as stored, sent to its source (`read_memory_rows`)."""
    return _moves.read([r._internal() for r in page])


def read_memory_rows(table: str, results: Sequence[Result]) -> MemoryRows:
    """The rows of `read_memory`'s results, for `memory_move_in` and `memory_move_out`."""
    return MemoryRows(_moves.read_rows(table, results))


def memory_move_in(found: MemoryRows, move_id: str) -> list[list[Statement]]:
    """The batches that write a page at its target, each failing ("move_voided") unless the
    move is still registered there; the last ends the registration."""
    return _moves.move_in(found._rows, move_id)


def memory_move_out(found: MemoryRows) -> list[Statement]:
    """The statements that delete a page at its source, each row only if it still holds what
    was read; the first's changes are the rows deleted."""
    return _moves.move_out(found._rows)


def memory_layout(database_ids: Sequence[str], previous_database_ids: Sequence[str] | None = None,
                  route: Callable[[str], str] | None = None) -> MemoryLayout:
    """Where D1Store's items and D1Cache's entries live over `database_ids` (and lived over the
    previous ones), as a store or cache built with the same arguments places them."""
    return MemoryLayout(_placement.Layout(
        _routing.Router(list(database_ids), route),
        None if previous_database_ids is None else _routing.Router(list(previous_database_ids))))


def memory_home(layout: MemoryLayout, row: MemoryKey) -> str:
    """The database a store item's or cache entry's row lives in, in `layout`."""
    return _moves.home(layout._layout, row._internal())


# --- content-addressed chunks: the check (`d1saver check`) ------------------------------------


@dataclass(frozen=True)
class InexactThread:
    """A thread whose chunk table breaks exactness: `missing` ids its rows reach that are not
    stored (its reads fail), `unreferenced` chunks stored that no row reaches (wasted bytes)."""

    thread_id: str
    missing: int
    unreferenced: int


def chunk_check(thread_id: str | None = None) -> Statement:
    """One row per thread (`thread_id`, or every thread when None) whose content-addressed
    chunks are not exact; columns: thread_id, missing, unreferenced. No row: exact. Read the
    result with `inexact_threads`."""
    return Statement.bind(_sql.CHUNK_CHECK, {"thread_id": thread_id})


def inexact_threads(result: Result) -> list[InexactThread]:
    """The rows of a `chunk_check` result, typed, in thread_id order."""
    _rows.check_columns(result, _sql.CHUNK_CHECK_COLUMNS)
    return [InexactThread(str(t), int(m), int(u)) for t, m, u in result.rows]


# --- key censuses (`d1saver rekey`) ----------------------------------------------------------

STAGED: Final[str] = _reseal.STAGED
"""The table name under which a key census (`D1Saver.key_census`) counts staged values."""


def add_census(censuses: Iterable[Mapping[str, Mapping[str, int]]]) -> dict[str, dict[str, int]]:
    """Key censuses (`D1Saver.key_census`), or any {table: {name: count}} figures, of several
    databases added up, table by table and name by name (`d1saver rekey` over a fleet)."""
    return _reseal.add_census(censuses)


# --- the databases of a saver ---------------------------------------------------------------


def databases(saver: D1Saver) -> list[str]:
    """Every database of the saver: the current ones, then the previous ones not among them
    (databases being drained while threads move)."""
    return list(dict.fromkeys([*saver.database_ids, *(saver.previous_database_ids or ())]))


def spans(saver: D1Saver) -> bool:
    """True if the saver has more than one database (current or previous)."""
    return len(databases(saver)) > 1


def each_reading(saver: D1Saver, fn: Callable[[D1Saver], list[_T]], operation: str
                 ) -> dict[str, list[_T]]:
    """fn on every database ({database_id: its list}); a read-only saver (`saver.read_only`)
    meeting a database without d1saver's schema reads it as empty (nothing was ever stored
    there), as long as another database has one (none at all: the FleetError says so)."""
    try:
        return saver.each_database(fn, operation=operation)
    except FleetError as exc:
        if not exc.results or not all(isinstance(e, SchemaNotReadyError) and e.version == 0
                                      for e in exc.errors.values()):
            raise
        return {db: list(exc.results.get(db) or []) for db in databases(saver)}


def query(saver: D1Saver, statement: Statement, columns: Sequence[str] | None = None
          ) -> list[dict[str, Any]]:
    """The rows of one read-only statement as dicts, checked by column name (`columns`); none
    from a database without d1saver's tables when the saver may not set it up
    (`auto_setup=False`), so that a read never creates a schema."""
    try:
        (result,) = saver.execute([statement])
    except QueryError as exc:
        if "no such table" not in str(exc) or saver.auto_setup:
            raise
        return []
    # D1 names no column when no row comes back (the local D1 does): only rows are checked.
    if columns is not None and result.rows and tuple(result.columns) != tuple(columns):
        raise QueryError(f"{statement.name} returned columns {result.columns}, not {columns}")
    return result.dicts()


def thread_history(saver: D1Saver, thread_id: str, limit: int) -> list[dict[str, Any]]:
    """A thread's newest checkpoints, `limit` at most, as `history` reads them (one dict per
    row). Over several databases, from every one that holds some (each row then names its
    database_id), newest first."""
    if not spans(saver):
        return query(saver, history(thread_id, limit))
    found = each_reading(saver, lambda db: query(db, history(thread_id, limit)), "history")
    rows = [{**row, "database_id": db} for db, part in found.items() for row in part]
    rows.sort(key=lambda r: r["checkpoint_ns"])
    rows.sort(key=lambda r: r["checkpoint_id"], reverse=True)  # as HISTORY orders one database
    return rows[:limit]


__all__ = ["COMPACTION_RUNS_COLUMNS", "COPYING_PREFIX", "CRON_CURSOR", "FINISH_FIGURES",
           "Finished", "InexactThread", "LEAVING_PREFIX", "Leftover", "MEMORY_TABLES",
           "MOVING_PREFIX", "MemoryKey", "MemoryLayout", "MemoryRows", "PLAN_COLUMNS",
           "PlannedThread", "SCHEMA_VERSION", "STAGED", "STAGING_PREFIX", "SUMMARY_COLUMNS",
           "SWEEP_MARGIN", "ThreadRows", "acquire_lease", "add_census", "begin_memory_move",
           "begin_move", "break_lease", "chunk_check", "clear_moves", "compaction_runs",
           "copy_batches", "cursor_clear", "cursor_get", "cursor_set", "databases",
           "delete_if_unchanged", "delete_threads", "each_reading", "finish", "finish_counts",
           "finished", "history", "inexact_threads", "is_staging", "lease_guard", "lease_holder",
           "leftovers", "memory_home", "memory_keys_page", "memory_layout", "memory_move_in",
           "memory_move_out", "memory_pages", "migration_statements", "moved_away",
           "moves_registered", "query", "read_leftovers", "read_memory", "read_memory_keys",
           "read_memory_rows", "read_plan", "read_schema", "read_thread", "release_lease",
           "removable", "retention", "retention_plan", "retention_plan_threads",
           "retention_summary", "run_add_batch", "run_begin", "run_end", "runs_interrupted",
           "schema_version", "setup_statements", "spans", "staged_threads", "storage_summary",
           "stored_sample", "thread_history", "thread_infos", "threads_page"]
