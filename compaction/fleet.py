"""Compaction and inspection over a saver of several databases: the single-database job
(compaction/job.py) runs on each database, concurrently, and the figures add up.

Each database takes its own lease, so a run over four databases holds four, and one
database's failure does not stop the others: it is reported (FleetError) with their results.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from d1saver import D1Saver, admin
from d1saver.admin import databases, each_reading, spans
from . import job
from .job import Progress, Summary, ThreadInfo

@dataclass(frozen=True)
class FleetThreadInfo(ThreadInfo):
    """A thread's figures and the database it was found in."""

    database_id: str


@dataclass
class FleetSummary(Summary):
    """The sum of the per-database summaries; `databases` holds each one's figures."""

    databases: dict[str, dict[str, Any]] = field(default_factory=dict)


def compact(saver: D1Saver, *, keep: int, threads: Sequence[str] | None = None,
            progress: Progress | None = None, **options: Any) -> Summary:
    """compaction.job.compact on every database of the saver (one lease each), concurrently.

    With one database this is job.compact itself. Named threads go to their home databases;
    `options` are job.compact's. Returns a FleetSummary over several databases.
    """
    if not spans(saver):
        return job.compact(saver, keep=keep, threads=threads, progress=progress, **options)
    if threads is None:
        groups: dict[str, list[str] | None] = {db: None for db in databases(saver)}
    else:
        groups = {}
        for thread_id in threads:
            groups.setdefault(saver.home(thread_id), []).append(thread_id)  # type: ignore[union-attr]
    counts: dict[str, tuple[int, int]] = {}
    lock = threading.Lock()

    def run(db: D1Saver) -> Summary:
        def report(done: int, total: int) -> None:
            with lock:
                counts[str(db.database_id)] = (done, total)
                if progress is not None:
                    progress(sum(d for d, _ in counts.values()), sum(t for _, t in counts.values()))

        return job.compact(db, keep=keep, threads=groups[str(db.database_id)],
                           progress=report, **options)

    started = time.monotonic()
    parts = saver.each_database(run, operation="compact", database_ids=list(groups))
    summary = add_up(parts)
    summary.seconds = round(time.monotonic() - started, 3)
    return summary


def add_up(parts: dict[str, Summary]) -> FleetSummary:
    """One summary from per-database ones: numbers add, plans concatenate (each entry naming
    its database), and `databases` keeps every database's own figures."""
    first = next(iter(parts.values()))
    total = FleetSummary(dry_run=first.dry_run, keep=first.keep)
    for db, part in parts.items():
        for f in dataclasses.fields(Summary):
            value = getattr(part, f.name)
            if isinstance(value, (int, float)) and not isinstance(value, bool) \
                    and f.name not in ("keep", "seconds"):
                setattr(total, f.name, getattr(total, f.name) + value)
        total.plan += [{"database_id": db, **p} for p in part.plan]
        total.threads_not_found += part.threads_not_found
        total.databases[db] = part.as_dict(with_plan=False)
    return total


def list_threads(saver: D1Saver) -> list[ThreadInfo]:
    """Every thread of every database (FleetThreadInfo over several), without the staged
    rows of a move in progress."""
    if not spans(saver):
        return [i for i in job.list_threads(saver) if not admin.is_staging(i.thread_id)]
    found = each_reading(saver, job.list_threads, "threads")
    return [FleetThreadInfo(**dataclasses.asdict(info), database_id=db)
            for db, infos in found.items() for info in infos
            if not admin.is_staging(info.thread_id)]


@dataclass(frozen=True)
class FleetLeftover(admin.Leftover):
    """Staged rows, and the database they were found in."""

    database_id: str


def leftovers(saver: D1Saver) -> list[admin.Leftover]:
    """Rows staged under hidden ids in every database (a copy or a move in flight, or killed:
    `expired`), each naming the thread it would become and the one it came from."""
    def read(db: D1Saver) -> list[admin.Leftover]:
        (result,) = db.execute([admin.leftovers()])
        return admin.read_leftovers(result)

    if not spans(saver):
        return read(saver)
    found = each_reading(saver, read, "leftovers")
    return [FleetLeftover(**dataclasses.asdict(x), database_id=db)
            for db, xs in found.items() for x in xs]


# --- memory not at its home (a rebalance pending, or killed midway) ---------------------------


def history(saver: D1Saver, thread_id: str, limit: int) -> list[dict[str, Any]]:
    """A thread's newest checkpoints, `limit` at most, from every database that holds some
    (admin.thread_history; `d1saver history` prints them)."""
    return admin.thread_history(saver, thread_id, limit)


def memory_plan(saver: D1Saver, databases: Sequence[str], layout: admin.MemoryLayout,
                page_size: int = 1000
                ) -> dict[tuple[str, str, str], list[admin.MemoryKey]]:
    """Every store item and cache entry not at its home in `layout` (admin.memory_layout):
    {(database it is in, its home, table): rows}, in key order; one request per page of keys,
    per table and database."""
    out: dict[tuple[str, str, str], list[admin.MemoryKey]] = {}

    def scan(view: D1Saver) -> list[tuple[str, admin.MemoryKey]]:
        found = []
        for table in admin.MEMORY_TABLES:
            after = None
            while True:
                (res,) = view.execute([admin.memory_keys_page(table, after, page_size)])
                keys = admin.read_memory_keys(table, res)
                found += [(admin.memory_home(layout, k), k) for k in keys]
                if len(keys) < page_size:
                    break
                after = keys[-1]
        return found

    scanned = saver.each_database(scan, operation="memory scan",
                                  database_ids=list(databases)) if databases else {}
    for db, found in scanned.items():
        for home, key in found:
            if home != db:
                out.setdefault((db, home, key.table), []).append(key)
    return out


@dataclass(frozen=True)
class MisplacedMemory:
    """Rows of `table` (D1Store's items, D1Cache's entries) in `database_id` whose home, in
    the saver's layout, is `home`: a rebalance pending, or one killed midway (then also at
    their home, identical: readers read the home's); `d1saver rebalance` moves them."""

    database_id: str
    home: str
    table: str
    rows: int


def misplaced_memory(saver: D1Saver) -> list[MisplacedMemory]:
    """Memory not at its home, by database, home and table (every database of the saver,
    previous ones included; routed as D1Store and D1Cache route without a `route`)."""
    if not spans(saver):
        return []  # one database: every row is at home
    layout = admin.memory_layout(saver.database_ids, saver.previous_database_ids)
    found = each_reading(saver, lambda db: [memory_plan(db, [str(db.database_id)], layout)],
                     "memory scan")
    return [MisplacedMemory(db, home, table, len(rows)) for plans in found.values()
            for plan in plans for (db, home, table), rows in plan.items()]


@dataclass(frozen=True)
class FleetInexactThread(admin.InexactThread):
    """A thread whose chunk table is not exact, and the database it was found in."""

    database_id: str


def check_chunks(saver: D1Saver, thread_id: str | None = None) -> list[admin.InexactThread]:
    """The threads (`thread_id`, or all) whose content-addressed chunks are not exact: ids
    referenced but not stored, or chunks stored but referenced by no row (admin.chunk_check).
    Over several databases, every one is checked (a thread mid-move may be in two), and each
    result names its database (FleetInexactThread). Empty: exact."""
    def check(db: D1Saver) -> list[admin.InexactThread]:
        (result,) = db.execute([admin.chunk_check(thread_id)])
        return admin.inexact_threads(result)

    if not spans(saver):
        return check(saver)
    found = each_reading(saver, check, "check")
    return [FleetInexactThread(**dataclasses.asdict(t), database_id=db)
            for db, threads in found.items() for t in threads]
