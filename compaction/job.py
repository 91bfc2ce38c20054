"""The compaction job as a library function: keep the latest N checkpoints of every thread.

Per thread it keeps the N newest checkpoints of the root namespace, every tagged one, the
ancestors their DeltaChannels replay from, and the N newest of each subgraph namespace a kept
checkpoint reaches (d1saver's PLAN_KEEP); it deletes the rest with their writes and relinks
parents. Threads idle longer than `max_age` lose everything but their tags. Writes of a
checkpoint whose put is still in flight stay (it runs beside live graphs). The work goes in
batches of whole threads, one request each, atomic: killed midway, a rerun finishes the job.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

from d1saver import ConfigError, D1Saver, LeaseHeldError, QueryError, admin
from . import lease as leases

Progress = Callable[[int, int], None]
# Each step of a run at INFO (`d1saver -v`): counts and database ids, never a value.
log = logging.getLogger("d1saver.compaction")


@dataclass(frozen=True)
class ThreadInfo:
    thread_id: str
    checkpoints: int
    namespaces: int
    updated: str | None
    bytes: int


@dataclass
class Summary:
    """What a run did (or, dry, would do); `--json` prints this."""

    dry_run: bool
    keep: int
    threads_scanned: int = 0
    threads_compacted: int = 0
    threads_expired: int = 0
    checkpoints_deleted: int = 0
    writes_deleted: int = 0
    checkpoints_kept: int = 0
    bytes_freed: int = 0
    batches: int = 0
    store_items_swept: int = 0
    cache_entries_swept: int = 0
    staged_removed: int = 0  # staged rows of killed copies and moves (whole-database runs)
    requests: int = 0
    seconds: float = 0.0
    plan: list[dict[str, Any]] = field(default_factory=list)
    # Threads named to compact that have no checkpoint (in --json only when there are some).
    threads_not_found: list[str] = field(default_factory=list)

    def as_dict(self, *, with_plan: bool = True) -> dict[str, Any]:
        out = asdict(self)
        if not with_plan:
            out.pop("plan")
        if not out["threads_not_found"]:
            out.pop("threads_not_found")
        return out


def list_threads(saver: D1Saver, *, page_size: int = 1000) -> list[ThreadInfo]:
    """Every thread with its figures, in keyset pages (one request each)."""
    out: list[ThreadInfo] = []
    after = ""
    while True:
        (page,) = saver.execute([admin.threads_page(after, page_size)])
        out += [_info(row) for row in page.dicts()]
        if len(page.rows) < page_size:
            return out
        after = out[-1].thread_id


def thread_infos(saver: D1Saver, thread_ids: Sequence[str]) -> list[ThreadInfo]:
    (res,) = saver.execute([admin.thread_infos(thread_ids)])
    return [_info(row) for row in res.dicts()]


def _info(row: dict[str, Any]) -> ThreadInfo:
    """A thread's figures, read by column name (d1saver.admin.threads_page names them)."""
    return ThreadInfo(str(row["thread_id"]), int(row["checkpoints"]), int(row["namespaces"]),
                      row["updated"], int(row["bytes"] or 0))


def stored_version(saver: D1Saver) -> int:
    """The schema version a database records, 0 if it has none (a new database), read without
    setting it up or migrating it (as a dry run must); no request once this saver set it up."""
    if saver.is_setup:
        return admin.SCHEMA_VERSION
    try:
        (result,) = saver.client.execute([admin.read_schema()])
    except QueryError as exc:
        if "no such table" in str(exc):
            return 0
        raise
    return max(1, admin.schema_version(result))  # a table without rows: as old as can be


def refuse_older(versions: dict[str, int]) -> None:
    """A dry run changes nothing, so it cannot migrate: ConfigError naming each database whose
    schema is older than this d1saver's. (One with none, new, holds nothing: read as empty.)"""
    older = {db: v for db, v in versions.items() if 0 < v < admin.SCHEMA_VERSION}
    if older:
        listed = ", ".join(f"{db} (v{v})" for db, v in older.items())
        raise ConfigError(
            f"a dry run changes nothing, so it does not migrate, and these databases have an "
            f"older schema than this d1saver's (v{admin.SCHEMA_VERSION}): {listed}. Run the "
            "command without --dry-run (it migrates them first), or saver.setup(), then "
            "dry-run again")


def prepare(saver: D1Saver, *, dry_run: bool) -> bool:
    """Before a run on one database: make sure of its schema, setting it up (create, migrate)
    only when it is missing or older, never on every run (that was schema.sql whole, 52
    statements, a request each time). A saver that sets up on first use (auto_setup, the
    default) reads the version riding with the run's first request, no request more, as every
    saver call does; otherwise one read of the version comes first. A dry run only reads the
    version (refuse_older). Returns False if there is no schema, so no rows."""
    if not dry_run and saver.auto_setup:
        return True
    version = stored_version(saver)
    if dry_run:
        refuse_older({str(saver.database_id): version})
        return version > 0
    if version != admin.SCHEMA_VERSION:
        saver.setup()
    return True


def compact(
    saver: D1Saver,
    *,
    keep: int,
    threads: Sequence[str] | None = None,
    max_age: timedelta | None = None,
    dry_run: bool = False,
    lease_ttl: int = 300,
    break_lease: bool = False,
    batch_checkpoints: int = 2000,
    batch_threads: int = 100,
    progress: Progress | None = None,
    sweep: bool = True,
) -> Summary:
    """Compact `threads` (all when None). Returns a Summary; raises D1Error subclasses.

    The policy is one, shared with the gateway Worker's Cron Trigger (worker/compaction.js):
    pages of threads planned by the database (`admin.retention_plan`: which threads need a
    batch, and how they group), each batch one atomic request under the lease; then a
    whole-database run ends (`admin.finish`, with the lease's release: no request more) by
    removing the staged rows killed copies and moves left, and, with `sweep` (the default),
    the D1Store items and D1Cache entries expired by the database's clock. A run over named
    threads touches nothing else: no leftover, no memory.

    `batch_checkpoints` bounds the deletions of one request (D1 stops a request at 30 s) and
    `batch_threads` its thread list. Dry runs change nothing (nor set up or migrate: a schema
    older than this d1saver's is refused with a ConfigError), take no lease, and count what
    a run would do.
    """
    if keep < 1:
        raise ConfigError("--keep must be at least 1: every thread keeps its head, so it stays resumable")
    if lease_ttl < 1:
        raise ConfigError("--lease-ttl must be at least 1 second: a lease already expired guards nothing")
    if batch_checkpoints < 1 or batch_threads < 1:
        raise ConfigError("--batch-checkpoints and batch_threads must be at least 1")
    cutoff = _cutoff(max_age)  # before any request: a max_age out of range is a ConfigError
    started, requests0 = time.monotonic(), saver.client.requests
    summary = Summary(dry_run=dry_run, keep=keep)
    has_schema = prepare(saver, dry_run=dry_run)
    whole = threads is None
    log.info("%s: %s, keeping %d checkpoints%s%s", saver.database_id,
             "every thread" if whole else f"{len(threads or ())} named threads", keep,
             "" if cutoff is None else f", idle since {cutoff} expired",
             " (dry run)" if dry_run else "")
    held = None
    if not dry_run:
        if break_lease:
            leases.break_lease(saver)
        held = leases.acquire(saver, ttl=lease_ttl)
        log.info("%s: lease %s held for %d s", saver.database_id, held.name, lease_ttl)
    try:
        done = total = 0
        for page in _plan_pages(saver, keep, cutoff, threads, batch_checkpoints, batch_threads)\
                if has_schema else ():
            if threads is not None:  # one page: the named threads that exist
                summary.threads_not_found = sorted(set(threads) - {p.thread_id for p in page})
            listed = [p for p in page if not p.staged]  # staged rows are no thread
            summary.threads_scanned += len(listed)
            summary.checkpoints_kept += sum(p.checkpoints for p in listed if p.batch is None)
            batches: dict[int, list[admin.PlannedThread]] = {}
            for p in listed:
                if p.batch is not None:
                    batches.setdefault(p.batch, []).append(p)
            total += sum(len(b) for b in batches.values())
            log.info("%s: %d threads planned; %d to trim to %d checkpoints, %d idle to expire",
                     saver.database_id, len(listed),
                     sum(len(b) for b in batches.values() if not b[0].expired), keep,
                     sum(len(b) for b in batches.values() if b[0].expired))
            for batch in batches.values():
                expired = batch[0].expired
                _run_batch(saver, [p.thread_id for p in batch], 0 if expired else keep,
                           summary, held, expired=expired)
                done += len(batch)
                if progress is not None:
                    progress(done, total)
        if has_schema and whole:
            _finish(saver, summary, held, sweep)  # releases the lease in the same request
            held = None
    finally:
        if held is not None:
            leases.release(saver, held)
    summary.requests = saver.client.requests - requests0
    summary.seconds = round(time.monotonic() - started, 3)
    log.info("%s: done, %d checkpoints and %d writes %s in %d batches, %d requests, %.1f s",
             saver.database_id, summary.checkpoints_deleted, summary.writes_deleted,
             "to delete" if dry_run else "deleted", summary.batches, summary.requests,
             summary.seconds)
    return summary


def _plan_pages(saver: D1Saver, keep: int, cutoff: str | None, threads: Sequence[str] | None,
                batch_checkpoints: int, batch_threads: int, page_size: int = 1000
                ) -> Iterator[list[admin.PlannedThread]]:
    """The plan, page by page (one request each; named threads: one page)."""
    bounds = {"batch_checkpoints": batch_checkpoints, "batch_threads": batch_threads}
    if threads is not None:
        (res,) = saver.execute([admin.retention_plan_threads(threads, keep, cutoff, **bounds)])
        yield admin.read_plan(res)
        return
    after = ""
    while True:
        (res,) = saver.execute([admin.retention_plan(after, page_size, keep, cutoff, **bounds)])
        page = admin.read_plan(res)
        yield page
        if len(page) < page_size:
            return
        after = page[-1].thread_id


def _finish(saver: D1Saver, summary: Summary, held: leases.Lease | None, sweep: bool) -> None:
    """A whole-database run's end, in one request (admin.finish): the staged rows killed runs
    left removed, the expired memory swept (with `sweep`), the lease released; a dry run counts
    instead (admin.finish_counts). Not lease-guarded: a retry after a lost answer finds the
    lease released, removes and counts nothing more, and must not fail."""
    stmts = (admin.finish_counts(sweep=sweep) if held is None
             else admin.finish(held.name, held.holder, sweep=sweep))
    figures = admin.finished(stmts, saver.execute(stmts))
    summary.staged_removed = figures.staged_removed
    summary.store_items_swept = figures.store_items_swept
    summary.cache_entries_swept = figures.cache_entries_swept
    log.info("%s: %s %d staged rows, %d expired memory items and %d cache entries%s",
             saver.database_id, "would remove" if summary.dry_run else "removed",
             summary.staged_removed, summary.store_items_swept, summary.cache_entries_swept,
             "; lease released" if held is not None else "")


def _cutoff(max_age: timedelta | None) -> str | None:
    if max_age is None:
        return None
    # Checkpoint ts are UTC ISO 8601 strings, so they compare as text.
    try:
        return (datetime.now(timezone.utc) - max_age).isoformat()
    except OverflowError:
        raise ConfigError(f"--max-age {max_age.days} days reaches back before year 1") from None


def _run_batch(saver: D1Saver, thread_ids: list[str], keep: int, summary: Summary,
               held: leases.Lease | None, *, expired: bool) -> None:
    # Built once: a retry re-sends these very statements, so the summary the first try
    # recorded (under the id drawn here) is the one read back, even if its response was lost.
    stmts = admin.retention(thread_ids, keep, summarize=True, delete=not summary.dry_run)
    prefix = held.guard_statements() if held is not None else []
    try:
        results = saver.execute([*prefix, *stmts])
    except QueryError as exc:
        if "lease_lost" in str(exc):
            raise LeaseHeldError("this run lost its lease (it expired and another run took it);"
                                 " nothing of this batch was applied") from exc
        raise
    plan = admin.retention_summary([*prefix, *stmts], results)
    summary.batches += 1
    rows = plan.dicts()
    log.info("%s: batch %d, %d threads%s: %d checkpoints and %d writes %s (%d bytes)",
             saver.database_id, summary.batches, len(thread_ids), " idle" if expired else "",
             sum(int(r["checkpoints"]) for r in rows), sum(int(r["writes"]) for r in rows),
             "to delete" if summary.dry_run else "deleted", sum(int(r["bytes"]) for r in rows))
    for row in rows:
        thread_id, total, gone, writes, size = (
            row["thread_id"], row["checkpoints_total"], row["checkpoints"], row["writes"],
            row["bytes"])
        summary.checkpoints_deleted += int(gone)
        summary.writes_deleted += int(writes)
        summary.checkpoints_kept += int(total) - int(gone)
        summary.bytes_freed += int(size)
        summary.threads_compacted += 1 if gone and not expired else 0
        summary.threads_expired += 1 if expired else 0
        if summary.dry_run:
            summary.plan.append({"thread_id": thread_id, "checkpoints": int(total),
                                 "checkpoints_deleted": int(gone), "writes_deleted": int(writes),
                                 "bytes_freed": int(size), "expired": expired})
