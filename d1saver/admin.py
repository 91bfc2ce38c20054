"""Statements for maintenance tools, to send with `D1Saver.execute`: d1saver's public SQL.

The compaction job and the CLI build their requests here and read the named columns of the
results; the SQL itself stays in d1saver's catalogue (d1saver/sql/catalogue.py), so every statement
d1saver ships lives in one place and runs on the real engine in CI.

    saver.execute([threads_page("", 1000)])       # a page of threads with their figures
    saver.execute(retention(["t1"], keep=5))      # one atomic retention batch
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from d1saver.ops import rows as _rows
from d1saver.sql import catalogue as _sql
from d1saver.ops import statements as st
from d1saver.ops import transfer as _transfer
from d1saver.core.protocol import Result, Statement
from d1saver.ops.reseal import add_census
from d1saver.fleet.routing import LEAVING_PREFIX, MOVING_PREFIX, is_staging
from d1saver.ops.transfer import ThreadReader, ThreadRows


def threads_page(after: str, size: int) -> Statement:
    """Threads after `after` ('' first) in thread_id order; columns: thread_id, checkpoints,
    namespaces, updated (newest ts), bytes (stored checkpoint bytes)."""
    return Statement.bind(_sql.THREADS_PAGE, {"after": after, "limit": int(size)})


def thread_infos(thread_ids: Sequence[str]) -> Statement:
    """The same figures as `threads_page` for the named threads (those that exist)."""
    return Statement.bind(_sql.THREADS_INFO, {"thread_ids": st.id_list(thread_ids)})


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
              delete: bool = True) -> list[Statement]:
    """One atomic batch over `thread_ids`: keep the `keep` newest checkpoints of the root
    namespace and of each subgraph namespace a kept checkpoint reaches, the tagged ones and what
    their DeltaChannels replay from; relink parents; delete the rest.
    Writes of checkpoints not stored yet (a put in flight) stay. With `summarize`, one
    statement reports per thread what goes (see `retention_summary`); a batch that deletes
    records that report under an id drawn here, so build the batch once and send it (with
    its retries) as is: a retry after a lost response then reports what the first try did."""
    return st.retention_statements(thread_ids, keep, summarize=summarize, delete=delete)


def retention_summary(statements: Sequence[Statement], results: Sequence[Result]) -> Result:
    """The summary among a retention batch's results; columns: thread_id, checkpoints_total,
    checkpoints, writes, bytes (what the batch deletes per thread)."""
    summary = next(r for s, r in zip(statements, results)
                   if s.name in ("SUMMARIZE_PLAN", "RECORDED_PLAN"))
    _rows.check_columns(summary, _sql.SUMMARY_COLUMNS)
    return summary


# --- schema: what a dry run may read without setting anything up ----------------------------

SCHEMA_VERSION = _sql.SCHEMA_VERSION


def read_schema() -> Statement:
    """Every schema version the database records (`schema_version` reads the result). Send it
    with the raw client (`saver.client.execute`): `saver.execute` would set up or migrate."""
    return Statement.bind(_sql.READ_SCHEMA)


def schema_version(result: Result) -> int:
    """The newest schema version a `read_schema` result records."""
    return _rows.schema_info(result).version


# --- leases: keep two maintenance runs from overlapping, on the database's clock ----------

def acquire_lease(name: str, holder: str, ttl: int) -> Statement:
    """Takes the lease if free, expired or already ours; returns a row (holder) if taken."""
    return Statement.bind(_sql.ACQUIRE_LEASE, {"name": name, "holder": holder, "seconds": int(ttl)})


def lease_guard(name: str, holder: str, ttl: int) -> list[Statement]:
    """Prefix for a batch: fail it ("lease_lost") unless the lease is still ours; renew it."""
    return Statement.bind_each([_sql.CHECK_LEASE, _sql.RENEW_LEASE],
                               {"name": name, "holder": holder, "seconds": int(ttl)})


def release_lease(name: str, holder: str) -> Statement:
    return Statement.bind(_sql.RELEASE_LEASE, {"name": name, "holder": holder})


def break_lease(name: str) -> Statement:
    """Removes the lease whoever holds it."""
    return Statement.bind(_sql.BREAK_LEASE, {"name": name})


def lease_holder(name: str) -> Statement:
    """Columns: holder, seconds_left."""
    return Statement.bind(_sql.LEASE_HOLDER, {"name": name})


# --- moving threads between databases (`d1saver rebalance`) -----------------------------------

def thread_reader(thread_id: str) -> ThreadReader:
    """Reads every row of a thread in bounded keyset pages:

        reader = thread_reader("t1")
        while (stmts := reader.next_statements()) is not None:
            reader.consume(saver.execute(stmts))
        rows = reader.rows          # a ThreadRows: counts(), digest(), holds(other)
    """
    return ThreadReader(thread_id)


def copy_batches(rows: ThreadRows, target: str, *, staging_prefix: str = MOVING_PREFIX
                 ) -> list[list[Statement]]:
    """The atomic batches that write `rows` as thread `target` (values as bound parameters,
    within D1's limits); over one batch, staged under `staging_prefix + target` and renamed
    by the last, so readers never see part of the thread."""
    return _transfer.copy_batches(rows, target, staging_prefix=staging_prefix)


def delete_if_unchanged(rows: ThreadRows) -> list[list[Statement]]:
    """The atomic batches, sent in order, that delete the thread `rows` were read from, in that
    database, only if it still holds exactly `rows` (every row and column compared there, in
    SQL, against a scratch copy under `LEAVING_PREFIX + thread_id` the batches write);
    `moved_away(results of the last)` says whether it did."""
    return _transfer.delete_if_unchanged(rows, staging_prefix=LEAVING_PREFIX)


def moved_away(results: Sequence[Result]) -> bool:
    """Whether the last `delete_if_unchanged` batch (the last statements of a request) deleted."""
    return _transfer.deleted(results)


def staged_threads(prefix: str = MOVING_PREFIX) -> Statement:
    """Thread ids holding staged rows under `prefix` (MOVING_PREFIX: a copy killed midway;
    LEAVING_PREFIX: a comparison killed midway); column: thread_id."""
    return _transfer.staged_threads(prefix)


def delete_threads(thread_ids: Sequence[str]) -> list[Statement]:
    """Delete these threads entirely, in one batch."""
    return st.delete_threads_statements(thread_ids)


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


# --- figures of several databases ------------------------------------------------------------
# `add_census(censuses)`: key censuses (`D1Saver.key_census`), or any {table: {name: count}}
# figures, of several databases added up (`d1saver rekey` over a fleet).

__all__ = ["LEAVING_PREFIX", "MOVING_PREFIX", "SCHEMA_VERSION", "InexactThread", "ThreadReader",
           "ThreadRows", "acquire_lease", "add_census", "break_lease", "chunk_check",
           "copy_batches", "delete_if_unchanged", "delete_threads", "history",
           "inexact_threads", "is_staging", "lease_guard", "lease_holder", "moved_away",
           "read_schema", "release_lease", "retention", "retention_summary", "schema_version",
           "staged_threads", "storage_summary", "stored_sample", "thread_infos",
           "thread_reader", "threads_page"]
