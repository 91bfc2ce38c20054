"""`d1saver rebalance`: move every thread to its home database after the database list changed.

Each database of the saver (and each previous one given, e.g. one being removed) lists its
threads; a thread whose home (`saver.home`: rendezvous hashing, or the saver's `route`) is
another database is misplaced, and moves:

1. read all its rows where it is (the source), in bounded pages;
2. read it at its home: if the home already holds every source row, identical (a run killed
   after copying), go to 4;
3. copy the rows to the home in atomic batches, values as bound parameters (a thread over one
   batch is staged under another id and renamed by a last batch, so a reader never sees part
   of it); read it back and verify that the home holds every source row: the same row counts
   and SHA-256 digest;
4. delete it from the source only if the source still holds exactly the rows read in 1: they
   are written back there under a scratch id (_routing.LEAVING_PREFIX; in several batches if
   large) and one last batch compares, in SQL, every row and column of the thread with them,
   and the row counts with those read, deletes the thread only if all are equal, and drops
   the scratch rows. A writer on the old layout that added a row, or replaced one under the
   same key (a special write, a tag moved, a checkpoint put again), keeps the thread there,
   and it moves again.

Every write is one atomic, idempotent batch and nothing is deleted before its copy is verified,
so a run killed at any point leaves each thread whole in its source, whole in both, or moved,
never lost and, once rerun, never in two databases: the rerun finishes the job. Staged rows a
killed run left are removed at the end of the next. While threads move, savers configured with
`previous_database_ids` read a thread from its previous home when its new home has none of it.

The run takes the compaction lease in every database involved (compaction and rebalance never
overlap in a database), and every write batch fails unless the run still holds it.

Memory moves too (issue 30): every store item and cache entry whose home (its namespace's
first label; a cache entry's namespace and key: d1saver/memory/placement.py) is another
database moves there in pages (d1saver/memory/moves.py): registered at the target, read at
the source, written at the target where it holds nothing newer (a batch that fails when a
delete voided the registration meanwhile), then deleted at the source if unchanged. While it
runs, D1Store and D1Cache given `previous_database_ids` find everything and never leave a
second copy. `memory=False` leaves memory where it is.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from typing import Any

from d1saver import (D1Error, D1Saver, LeaseHeldError, QueryError, Result, Statement,
                     VerificationError, admin)
from . import fleet
from .fleet import memory_plan
from . import lease as leases
from .job import (ThreadInfo, list_threads, log, prepare, refuse_older,
                            stored_version)

Progress = Callable[[int, int], None]
ATTEMPTS = 3  # moves of one thread in a run while writers on the old layout keep changing it


@dataclass(frozen=True)
class Move:
    """A misplaced thread: where it is, where it belongs."""

    thread_id: str
    source: str
    target: str
    checkpoints: int
    bytes: int


@dataclass
class RebalanceSummary:
    """What a run did (or, dry, would do); `--json` prints this."""

    dry_run: bool
    databases: list[str]
    threads_scanned: int = 0
    threads_misplaced: int = 0
    threads_moved: int = 0
    threads_found_copied: int = 0   # complete at home already (a killed run): only deleted
    threads_changed: int = 0        # a writer kept changing it at the source: left there
    threads_failed: int = 0
    rows_copied: int = 0
    bytes_copied: int = 0
    staged_removed: int = 0
    # Memory (D1Store's items, D1Cache's entries): rows not at their home, moved, and left at
    # their source because a writer on the old layout changed them meanwhile.
    memory_misplaced: int = 0
    store_items_moved: int = 0
    cache_entries_moved: int = 0
    memory_changed: int = 0
    memory_bytes_copied: int = 0
    requests: int = 0
    seconds: float = 0.0
    per_database: dict[str, dict[str, int]] = field(default_factory=dict)
    moves: list[dict[str, Any]] = field(default_factory=list)
    errors: dict[str, str] = field(default_factory=dict)  # thread_id -> "database: error"

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def plan(saver: D1Saver, databases: Sequence[str]) -> tuple[dict[str, list[ThreadInfo]],
                                                             list[Move]]:
    """Each database's threads, and the moves that put every thread at its home."""
    found = saver.each_database(list_threads, operation="rebalance scan",
                                database_ids=databases) if databases else {}
    moves = [Move(i.thread_id, db, saver.home(i.thread_id), i.checkpoints, i.bytes)
             for db, infos in found.items() for i in infos
             if not admin.is_staging(i.thread_id) and saver.home(i.thread_id) != db]
    return found, moves


def rebalance(saver: D1Saver, *, dry_run: bool = False, lease_ttl: int = 300,
              break_lease: bool = False, concurrency: int = 8,
              progress: Progress | None = None, memory: bool = True,
              memory_route: Any = None) -> RebalanceSummary:
    """Move every misplaced thread to its home (see the module's docstring), and with
    `memory` (the default) every misplaced store item and cache entry (placed as a D1Store
    or D1Cache with `route=memory_route` places them).

    Scans the saver's databases and its `previous_database_ids`. Per-thread failures are
    reported in the summary's `errors` (that thread stays where it was); losing a lease
    raises LeaseHeldError. Dry runs change nothing and take no lease: they neither set up nor
    migrate a database (one whose schema is older is refused with a ConfigError; one with
    none holds no thread).
    """
    started = time.monotonic()
    databases = fleet.databases(saver)
    views = {db: saver.database(db) for db in databases}
    requests0 = {db: v.client.requests for db, v in views.items()}
    summary = RebalanceSummary(dry_run=dry_run, databases=databases)
    scanned = databases
    if dry_run:  # no setup, which would migrate: an older schema is refused, none is empty
        versions = saver.each_database(stored_version, operation="schema",
                                       database_ids=databases)
        refuse_older(versions)
        scanned = [db for db in databases if versions[db]]
    else:  # set up only what is missing or older (compaction.job.prepare)
        saver.each_database(lambda db: prepare(db, dry_run=False), operation="setup",
                            database_ids=databases)
    held = {} if dry_run else _acquire_all(views, lease_ttl, break_lease)
    try:
        found, moves = plan(saver, scanned)
        summary.threads_scanned = sum(len(infos) for infos in found.values())
        summary.threads_misplaced = len({m.thread_id for m in moves})
        log.info("rebalance: %d threads in %d databases, %d misplaced%s",
                 summary.threads_scanned, len(scanned), summary.threads_misplaced,
                 " (dry run)" if dry_run else "")
        summary.per_database = {db: {"threads": len(found.get(db, ())), "moved_out": 0,
                                     "moved_in": 0} for db in databases}
        misplaced = {}
        if memory:
            layout = admin.memory_layout(saver.database_ids, saver.previous_database_ids,
                                         memory_route)
            misplaced = memory_plan(saver, scanned, layout)
            summary.memory_misplaced = sum(len(rows) for rows in misplaced.values())
        if dry_run:
            summary.moves = [asdict(m) for m in moves]
        else:
            _Mover(views, held, summary).run(moves, concurrency, progress)
            _MemoryMover(views, held, summary).run(misplaced)
            summary.staged_removed = _remove_staged(views, held)
    except BaseException as exc:
        _release_all(views, held, exc)
        raise
    _release_all(views, held)
    summary.requests = sum(v.client.requests - requests0[db] for db, v in views.items())
    summary.seconds = round(time.monotonic() - started, 3)
    return summary


def _acquire_all(views: dict[str, D1Saver], ttl: int, break_lease: bool
                 ) -> dict[str, leases.Lease]:
    """The lease of every database, or none: those taken are released, and the error raised
    (LeaseHeldError naming the database whose lease is held)."""
    held: dict[str, leases.Lease] = {}
    try:
        for db, view in views.items():
            if break_lease:
                leases.break_lease(view)
            held[db] = leases.acquire(view, ttl=ttl, job="rebalance")
    except D1Error as exc:
        error = LeaseHeldError(f"database {db}: {exc}") if isinstance(exc, LeaseHeldError) else exc
        _release_all(views, held, error)
        if error is exc:
            raise
        raise error from exc
    return held


def _release_all(views: dict[str, D1Saver], held: dict[str, leases.Lease],
                 failing: BaseException | None = None) -> None:
    """Release every lease held, each tried whatever the others do. A lease not released
    expires by itself: said in a note on `failing` (the error that ended the run, which stays
    the one raised), else raised (the first failure, the others in its notes)."""
    errors: list[tuple[str, D1Error]] = []
    for db, lease in held.items():
        try:
            leases.release(views[db], lease)
        except D1Error as exc:
            errors.append((db, exc))
    notes = [f"the lease of database {db} was not released (it expires by itself): {exc}"
             for db, exc in errors]
    if not errors:
        return
    error = errors[0][1] if failing is None else failing
    for note in notes[1:] if failing is None else notes:
        error.add_note(note)
    if failing is None:
        raise error


def _read(view: D1Saver, thread_id: str, lease: leases.Lease | None = None,
          lead: Sequence[Statement] = ()) -> admin.ThreadRows:
    """Every row of the thread; with `lease`, its first page is read in one atomic batch led
    by the lease's guard and `lead`."""
    if lease is None:
        return admin.read_thread(view, thread_id)
    with _lease_kept(view):
        return admin.read_thread(view, thread_id, lead=[*lease.guard_statements(), *lead])


class _Mover:
    """Moves threads, several at once; each thread's moves (it may sit in more than one
    database) one after the other."""

    def __init__(self, views: dict[str, D1Saver], held: dict[str, leases.Lease],
                 summary: RebalanceSummary) -> None:
        self.views, self.held, self.summary = views, held, summary
        self.lock = threading.Lock()
        self.lost: LeaseHeldError | None = None

    def run(self, moves: list[Move], concurrency: int, progress: Progress | None) -> None:
        by_thread: dict[str, list[Move]] = {}
        for m in moves:
            by_thread.setdefault(m.thread_id, []).append(m)
        done = 0

        def one(group: list[Move]) -> None:
            nonlocal done
            for m in group:
                if self.lost is None:
                    self._move_reporting(m)
            with self.lock:
                done += 1
                if progress is not None:
                    progress(done, len(by_thread))

        with ThreadPoolExecutor(max_workers=max(1, concurrency),
                                thread_name_prefix="d1saver-rebalance") as pool:
            list(pool.map(one, by_thread.values()))
        if self.lost is not None:
            raise self.lost

    def _move_reporting(self, m: Move) -> None:
        try:
            outcome, rows = self._move(m)
        except LeaseHeldError as exc:
            self.lost = exc
            return
        except D1Error as exc:
            with self.lock:
                self.summary.threads_failed += 1
                self.summary.errors[m.thread_id] = f"{m.source} -> {m.target}: {exc}"
            return
        log.info("rebalance: thread %r %s -> %s: %s (%d rows)", m.thread_id, m.source,
                 m.target, outcome, rows.total)
        with self.lock:
            s = self.summary
            s.moves.append({**asdict(m), "outcome": outcome})
            if outcome == "changed":
                s.threads_changed += 1
                return
            if outcome == "moved":
                s.threads_moved += 1
                s.rows_copied += rows.total
                s.bytes_copied += rows.bytes
            elif outcome == "found copied":
                s.threads_found_copied += 1
            if outcome != "gone":
                s.per_database[m.source]["moved_out"] += 1
                s.per_database[m.target]["moved_in"] += 1

    def _move(self, m: Move) -> tuple[str, admin.ThreadRows]:
        src, dst = self.views[m.source], self.views[m.target]
        rows = admin.ThreadRows(m.thread_id)
        unverified = False
        for _ in range(ATTEMPTS):
            # Registered at the target before the source is read, in the request that reads
            # the target: a delete or a prune of the thread (which goes to its old home first,
            # then to its new one) voids the move, and the copy read before it never lands.
            move_id = uuid.uuid4().hex
            held = _read(dst, m.thread_id, self.held[m.target],
                         [admin.begin_move(m.thread_id, move_id)])
            rows = _read(src, m.thread_id)
            if not rows.total:
                return "gone", rows  # deleted meanwhile, or moved by an earlier attempt
            copied = False
            if not held.holds(rows):
                try:
                    for batch in admin.copy_batches(rows, m.thread_id, move_id=move_id):
                        self._write(m.target, batch)
                except QueryError as exc:
                    if "move_voided" in str(exc) or "staging_lost" in str(exc):
                        continue  # deleted or pruned meanwhile: read the source again
                    raise
                unverified = not _read(dst, m.thread_id).holds(rows)
                if unverified:
                    continue  # changed at the target since it landed (a delete, a prune)
                copied = True
            results: list[Result] = []
            for batch in admin.delete_if_unchanged(rows):
                results = self._write(m.source, batch)
            if admin.moved_away(results):
                return ("moved" if copied else "found copied"), rows
        if unverified:
            raise VerificationError(
                f"thread {m.thread_id!r} copied to {m.target} does not read back as in "
                f"{m.source} ({rows.counts()}): left in {m.source}")
        return "changed", rows

    def _write(self, db: str, statements: list[Statement]) -> list[Result]:
        return _guarded(self.views[db], self.held[db], statements)


class _MemoryMover:
    """Moves misplaced memory page by page (d1saver/memory/moves.py), one page at a time."""

    def __init__(self, views: dict[str, D1Saver], held: dict[str, leases.Lease],
                 summary: RebalanceSummary) -> None:
        self.views, self.held, self.summary = views, held, summary

    def run(self, misplaced: dict[tuple[str, str, str], list[admin.MemoryKey]]) -> None:
        for (source, target, table), rows in misplaced.items():
            for page in admin.memory_pages(rows):
                moved, left, copied = self._move(source, target, table, page)
                s = self.summary
                if table == "store_items":
                    s.store_items_moved += moved
                else:
                    s.cache_entries_moved += moved
                s.memory_changed += left
                s.memory_bytes_copied += copied

    def _move(self, source: str, target: str, table: str, page: list[admin.MemoryKey]
              ) -> tuple[int, int, int]:
        """(rows moved, rows left at the source, bytes copied) of one page."""
        for _ in range(ATTEMPTS):
            move_id = uuid.uuid4().hex
            self._write(target, [admin.begin_memory_move(move_id)])
            found = admin.read_memory_rows(table, self.views[source].execute(
                admin.read_memory(page)))
            if not found.count:
                return 0, 0, 0  # deleted meanwhile
            try:
                for batch in admin.memory_move_in(found, move_id):
                    self._write(target, batch)
            except QueryError as exc:
                if "move_voided" in str(exc):
                    continue  # a delete reached the target meanwhile: read the source again
                raise
            out = admin.memory_move_out(found)
            results = self._write(source, out)
            deleted = results[-len(out)].changes
            return deleted, found.count - deleted, found.bytes
        return 0, len(page), 0

    def _write(self, db: str, statements: list[Statement]) -> list[Result]:
        return _guarded(self.views[db], self.held[db], statements)


def _guarded(view: D1Saver, lease: leases.Lease, statements: list[Statement]) -> list[Result]:
    """One atomic batch, refused by D1 unless this run still holds the database's lease."""
    with _lease_kept(view):
        return view.execute([*lease.guard_statements(), *statements])


@contextmanager
def _lease_kept(view: D1Saver) -> Iterator[None]:
    """A batch led by the lease's guard: refused (lease_lost) means this run lost the lease."""
    try:
        yield
    except QueryError as exc:
        if "lease_lost" in str(exc):
            raise LeaseHeldError(f"database {view.database_id}: this run lost its lease (it "
                                 "expired and another run took it); nothing of this batch was "
                                 "applied") from exc
        raise


def _remove_staged(views: dict[str, D1Saver], held: dict[str, leases.Lease]) -> int:
    """Delete the staged rows killed runs left (this run renamed its own): every move's and
    comparison's, and the expired ones of copies between databases; forget killed runs'
    move registrations."""
    removed = 0
    for db, view in views.items():
        found, moves = view.execute([admin.leftovers(), admin.moves_registered()])
        ids = admin.removable(admin.read_leftovers(found))
        if ids or moves.rows[0][0]:
            _guarded(view, held[db], [*(admin.delete_threads(ids) if ids else []),
                                      admin.clear_moves()])
        removed += len(ids)
    return removed


__all__ = ["Move", "RebalanceSummary", "plan", "rebalance"]
