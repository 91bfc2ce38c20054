"""A thread's rows moved between databases: read in bounded pages, written in bounded atomic
batches, compared by digest.

copy_thread between two databases and `d1saver rebalance` both use it. Reading is a keyset
walk (`read_thread`) over every table the thread has rows in; writing is one INSERT
per row, every value a bound parameter, packed into batches within D1's limits (100 KB of SQL
and 100 parameters per statement, 2 MB per value; the batch itself is kept to a few MB so it
finishes well inside D1's 30 s). A thread that fits one batch appears at once; a larger one is
written under a staging thread id (d1saver/fleet/routing.py) and renamed in one last batch, so a
reader never sees part of a thread. No I/O here: `read_thread` and `write_thread` are
operations over an exchange, which the saver runs with a database's driver.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Generator, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from d1saver.sql import catalogue as _sql
from d1saver.core.errors import ResponseError
from d1saver.core.protocol import Exchange, Result, Statement

__all__ = ["TABLES", "ThreadRows", "copy_batches", "delete_if_unchanged",
           "deleted", "leftovers", "read_thread", "staged_threads", "write_thread"]

TABLES = tuple(_sql.TRANSFER_TABLES)
Row = tuple[Any, ...]

READ_PAGE_ROWS = 500
READ_PAGE_BYTES = 1_000_000       # per table and request; a page holds at least one row
WRITE_BATCH_BYTES = 4_000_000     # parameters and SQL of one write request
WRITE_BATCH_STATEMENTS = 500
# Staged rows no batch has renewed for this long belong to a copy that was killed: any cleanup
# (rebalance, compaction) may remove them. Each batch of a copy renews it.
STAGE_SECONDS = 3600


@dataclass
class ThreadRows:
    """Every row of one thread, per table, in primary-key order (thread_id left out)."""

    thread_id: str
    tables: dict[str, list[Row]] = field(default_factory=lambda: {t: [] for t in TABLES})

    def counts(self) -> dict[str, int]:
        return {table: len(rows) for table, rows in self.tables.items()}

    @property
    def total(self) -> int:
        return sum(len(rows) for rows in self.tables.values())

    @property
    def bytes(self) -> int:
        """Characters of the stored values (what a copy sends, near enough)."""
        return sum(_row_bytes(row) for rows in self.tables.values() for row in rows)

    def digest(self) -> str:
        """SHA-256 of the rows, tables in a fixed order: equal digests, equal rows."""
        h = hashlib.sha256()
        for table in TABLES:
            h.update(table.encode())
            for row in self.tables[table]:
                h.update(json.dumps(row, ensure_ascii=False, separators=(",", ":")).encode(
                    "utf-8", "surrogatepass"))
                h.update(b"\n")
        return h.hexdigest()

    def restricted_to(self, other: ThreadRows) -> ThreadRows:
        """This thread's rows whose primary keys `other` holds too."""
        out = ThreadRows(self.thread_id)
        for table, (keys, _) in _sql.TRANSFER_TABLES.items():
            wanted = {row[: len(keys)] for row in other.tables[table]}
            out.tables[table] = [row for row in self.tables[table] if row[: len(keys)] in wanted]
        return out

    def holds(self, other: ThreadRows) -> bool:
        """True if every row of `other` is here, identical: same counts and digest on its keys."""
        mine = self.restricted_to(other)
        return mine.counts() == other.counts() and mine.digest() == other.digest()


def _check_columns(result: Result, expected: Sequence[str]) -> None:
    if result.rows and tuple(result.columns) != tuple(expected):
        raise ResponseError(f"D1 returned columns {result.columns} where d1saver expects "
                            f"{list(expected)}")


def _row_bytes(row: Row) -> int:
    return sum(len(v) if isinstance(v, str) else 8 for v in row)


# --- reading ----------------------------------------------------------------------------------


def read_thread(exchange: Exchange, thread_id: str, tables: Sequence[str] = TABLES, *,
                page_rows: int = READ_PAGE_ROWS, page_bytes: int = READ_PAGE_BYTES
                ) -> Generator[Any, Any, ThreadRows]:
    """Every row of `thread_id` in the database behind `exchange` (in `tables`), in keyset
    pages: each request reads the next page of every table not yet exhausted (one request for
    most threads), at most `page_rows` rows and about `page_bytes` of values per table."""
    rows = ThreadRows(thread_id)
    page_rows, page_bytes = max(1, int(page_rows)), max(1, int(page_bytes))
    cursors: dict[str, Row | None] = {t: None for t in TABLES}
    open_tables = [t for t in TABLES if t in tables]
    while open_tables:
        asked = list(open_tables)
        stmts = []
        for table in asked:
            keys, _ = _sql.TRANSFER_TABLES[table]
            cursor = cursors[table] or (None,) * len(keys)
            stmts.append(Statement.bind(_sql.TRANSFER_PAGE[table], {
                "thread_id": thread_id,
                **{f"after_{key}": value for key, value in zip(keys, cursor)},
                "limit": page_rows, "budget": page_bytes}))
        results = yield from exchange(stmts)
        if len(results) != len(asked):
            raise ResponseError(f"expected {len(asked)} results, got {len(results)}")
        for table, result in zip(asked, results):
            _check_columns(result, _sql.TRANSFER_PAGE_COLUMNS[table])
            page = [tuple(r[:-1]) for r in result.rows]
            rows.tables[table] += page
            available = int(result.rows[0][-1]) if result.rows else 0
            if available < page_rows and len(page) == available:
                open_tables.remove(table)
            else:
                keys, _ = _sql.TRANSFER_TABLES[table]
                cursors[table] = page[-1][: len(keys)]
    return rows


# --- writing ----------------------------------------------------------------------------------


def _inserts(rows: ThreadRows, thread_id: str) -> Iterator[tuple[Statement, int]]:
    for table in TABLES:
        query = _sql.TRANSFER_INSERT[table]
        keys, rest = _sql.TRANSFER_TABLES[table]
        columns = ("thread_id", *keys, *rest)
        for row in rows.tables[table]:
            yield (Statement.bind(query, dict(zip(columns, (thread_id, *row), strict=True))),
                   len(query.sql) + len(thread_id) + _row_bytes(row))


def _pack(items: Iterator[tuple[Statement, int]], max_bytes: int, max_statements: int
          ) -> list[list[Statement]]:
    batches: list[list[Statement]] = []
    size = 0
    for stmt, n in items:
        if not batches or size + n > max_bytes or len(batches[-1]) >= max_statements:
            batches.append([])
            size = 0
        batches[-1].append(stmt)
        size += n
    return batches


def copy_batches(rows: ThreadRows, target: str, *, staging_prefix: str,
                 publish: Sequence[Statement] = (), published: Sequence[Statement] = (),
                 max_bytes: int = WRITE_BATCH_BYTES,
                 max_statements: int = WRITE_BATCH_STATEMENTS) -> list[list[Statement]]:
    """The write requests that put `rows` into thread `target`, each an atomic batch.

    The rows go under the staging id `staging_prefix + target` (emptied first, so a rerun
    after a kill starts clean) and the last batch renames them to `target`: one batch if they
    fit, so the thread appears whole, at once. Rows already in `target` with the same keys are
    replaced, and its writes of a task the rows have writes of are taken per (task, idx), as
    copy_thread within one database does (writes are stored packed: a row key is not a
    write's key); the chunks no row of `target` reaches any more go in the same batch.
    Staged rows that outlive a request (more than one batch) are registered with their
    target, their source and an expiry (STAGE_SECONDS, renewed by each batch) so that every
    cleanup path finds them, and the renaming batch fails ("staging_lost") if a cleanup removed
    them meanwhile. The batch that publishes starts with `publish` (guards) and ends with
    `published`.
    """
    collect = Statement.bind_each(_sql.COLLECT_THREAD, {"thread_id": target})
    staging = staging_prefix + target
    ids = json.dumps([staging.encode("utf-8", "surrogatepass").hex()])
    head = Statement.bind_each(_sql.DELETE_THREADS, {"thread_ids": ids})
    rename = Statement.bind_each(_sql.RENAME_THREAD, {"staged": staging, "thread_id": target})
    stage = Statement.bind(_sql.STAGE, {"staging_id": staging, "thread_id": target,
                                        "source_id": rows.thread_id, "seconds": STAGE_SECONDS})
    held = Statement.bind(_sql.STAGING_HELD, {"staging_id": staging})
    unstage = Statement.bind(_sql.UNSTAGE, {"staging_id": staging})
    fixed = len(head) + len(rename) + len(collect) + len(publish) + len(published) + 3
    batches = _pack(_inserts(rows, staging), max_bytes, max(1, max_statements - fixed))
    if not batches:
        return []
    if len(batches) == 1:
        batches[0][:0] = [*publish, *head]
        batches[0] += [*rename, *collect, *published]
        return batches
    batches[0][:0] = [*head, stage]
    for batch in batches[1:]:
        batch[:0] = [held, stage]
    batches.append([*publish, held, *rename, unstage, *collect, *published])
    return batches


def write_thread(exchange: Exchange, rows: ThreadRows, target: str, *, staging_prefix: str
                 ) -> Generator[Any, Any, None]:
    """Write `rows` as thread `target` in the database behind `exchange` (see copy_batches)."""
    for batch in copy_batches(rows, target, staging_prefix=staging_prefix):
        yield from exchange(batch)


# --- after a move -----------------------------------------------------------------------------


def delete_if_unchanged(rows: ThreadRows, *, staging_prefix: str,
                        max_bytes: int = WRITE_BATCH_BYTES,
                        max_statements: int = WRITE_BATCH_STATEMENTS) -> list[list[Statement]]:
    """The write requests that delete the thread from the database `rows` were read from, only
    if it still holds exactly `rows` (`deleted` reads the last one's results).

    Counts cannot tell a same-key replacement (a special write replaced, a tag moved, a
    checkpoint rewritten), and D1's SQLite has no hash function, so the rows go back into that
    database under the scratch id `staging_prefix + thread_id` (cleared first: a rerun after a
    kill starts clean), in as many batches as they need, and the last batch compares, in SQL,
    every row and column of the thread with them (and the row counts with `rows`), deletes
    the thread only if all are equal, and drops the scratch rows. Costs the thread's bytes
    once more; a thread that fits one batch takes one request, as the copy does.
    """
    thread_id = rows.thread_id
    scratch = staging_prefix + thread_id
    counts = rows.counts()
    pair = {"thread_id": thread_id, "scratch_id": scratch}
    tail = [Statement.bind(_sql.CLEAR_SCOPE),
            Statement.bind(_sql.LEAVE_SCOPE, {**pair, **{f"count_{t}": counts[t] for t in TABLES}}),
            *(Statement.bind(_sql.LEAVE_UNLESS_SAME[t], pair) for t in TABLES),
            Statement.bind(_sql.LEAVING),
            *(Statement.bind(s) for s in _sql.LEAVE),
            # after the comparison: takes the rows along
            Statement.bind(_sql.UNSTAGE, {"staging_id": scratch}),
            *Statement.bind_each(_sql.DROP_THREAD, {"thread_id": scratch}),
            Statement.bind(_sql.CLEAR_SCOPE)]
    head = Statement.bind_each(_sql.DROP_THREAD, {"thread_id": scratch})
    batches = _pack(_inserts(rows, scratch), max_bytes,
                    max(1, max_statements - len(head) - len(tail) - 2)) or [[]]
    if len(batches) > 1:  # scratch rows outlive this request: registered, found by cleanups
        head.append(Statement.bind(_sql.STAGE, {"staging_id": scratch, "thread_id": thread_id,
                                                "source_id": thread_id,
                                                "seconds": STAGE_SECONDS}))
    batches[0][:0] = head
    batches[-1] += tail
    return batches


def deleted(results: Sequence[Result]) -> bool:
    """Whether the last `delete_if_unchanged` request (its results, which end with those of
    its statements) deleted the thread."""
    at = len(_sql.LEAVE) + len(_sql.DROP_THREAD) + 3
    result = results[len(results) - at]
    _check_columns(result, _sql.LEAVING_COLUMNS)
    return bool(result.rows) and int(result.rows[0][0]) > 0


def leftovers(prefix: str) -> Statement:
    """Every staged thread id (`prefix`: the staging ids' common prefix) with its registration
    (columns LEFTOVERS_COLUMNS)."""
    upper = prefix[:-1] + chr(ord(prefix[-1]) + 1)
    return Statement.bind(_sql.LEFTOVERS, {"low": prefix, "high": upper})


def staged_threads(prefix: str) -> Statement:
    """The thread ids in any table that start with `prefix` (staged rows of a killed copy)."""
    upper = prefix[:-1] + chr(ord(prefix[-1]) + 1)
    return Statement.bind(_sql.THREADS_IN_RANGE, {"low": prefix, "high": upper})
