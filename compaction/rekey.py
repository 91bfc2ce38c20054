"""Rekeying as a library function: every stored value re-sealed under the newest key.

After a key rotation (D1SAVER_ENCRYPTION_KEYS gains a new first key) new rows are sealed
under the new key and old rows stay readable under the old ones. `rekey` rewrites the old
rows, so that the old keys can then be dropped. It reads rows in keyset pages (only those
not sealed under the newest key) and re-seals their values without deserializing them;
each page is one atomic batch, led by the compaction lease's check, so a run stopped midway
is continued by the next one. With `seal_plaintext` it also seals rows written before keys
were set: that trusts them, so it is asked for explicitly.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from d1saver import ConfigError, D1Saver, LeaseHeldError, QueryError, RekeyCounts, admin
from . import lease as leases
from .fleet import databases
from .job import log, prepare

# d1saver.ops.reseal.REKEY_TABLES, then memory's (d1saver.ops.reseal_memory.REKEY_TABLES)
TABLES = ("checkpoints", "writes", "delta_frozen", "store_items", "cache_entries")
Census = dict[str, dict[str, int]]
Progress = Callable[[str, RekeyCounts], None]


@dataclass
class RekeySummary:
    """What a run did (or, dry, would do); `--json` prints this. `before` and `after` count
    stored values per table ("checkpoints", their metadata sealed with them, and "writes")
    and key id, "plaintext" for values under no key."""

    dry_run: bool
    newest_key: str
    keys: list[str]
    before: Census
    after: Census | None = None
    to_rewrite: int = 0
    # Rows looked at (every row the census counted before the run) add up: looked_at =
    # rewritten_rows + already_current + plaintext_left + skipped. `rewritten` counts values
    # written (a plaintext pack sealed becomes one row per write); `plaintext` is what
    # --seal-plaintext seals (dry: what it would).
    looked_at: int = 0
    already_current: int = 0
    plaintext: int = 0
    rewritten: int = 0
    rewritten_rows: int = 0
    plaintext_left: int = 0
    # Values in staged rows (a copy or a move killed midway), left as they are: they are never
    # read (a rerun stages afresh from the source) and the next rebalance or copy removes them.
    staged_skipped: int = 0
    skipped: int = 0
    skipped_why: str = ""
    pages: int = 0
    requests: int = 0
    seconds: float = 0.0
    tables: dict[str, dict[str, int]] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def stale(census: Census, newest: str, *, seal_plaintext: bool) -> int:
    """Values a run would re-seal: under another key, or (if asked) under none."""
    return sum(n for table, per_key in census.items() if table != admin.STAGED
               for kid, n in per_key.items()
               if kid != newest and (kid != "plaintext" or seal_plaintext))


def rekey(
    saver: D1Saver,
    *,
    dry_run: bool = False,
    seal_plaintext: bool = False,
    batch_rows: int = 100,
    lease_ttl: int = 300,
    break_lease: bool = False,
    progress: Progress | None = None,
) -> RekeySummary:
    """Re-seal every stored value under `saver`'s newest key. Raises D1Error subclasses:
    ConfigError without keys, UnknownKeyError for a row under a key the saver lacks (give
    every key rows may be under, newest first), LeaseHeldError if compaction or another
    rekey holds the lease. Dry runs count and change nothing (nor set up or migrate: a schema
    older than this d1saver's is refused with a ConfigError), and take no lease. Over several
    databases it runs on each (one lease each) and the figures add up."""
    if len(databases(saver)) > 1:
        started = time.monotonic()
        parts = saver.each_database(
            lambda db: rekey(db, dry_run=dry_run, seal_plaintext=seal_plaintext,
                             batch_rows=batch_rows, lease_ttl=lease_ttl,
                             break_lease=break_lease, progress=progress),
            operation="rekey", database_ids=databases(saver))
        return _add_up(list(parts.values()), round(time.monotonic() - started, 3))
    keys = saver.key_ids
    if not keys:
        raise ConfigError("rekey needs the encryption keys: set D1SAVER_ENCRYPTION_KEYS to "
                          "comma-separated base64 keys, the new key first, then every key rows "
                          "may still be sealed under")
    if batch_rows < 1:
        raise ConfigError("--batch-rows must be at least 1")
    if lease_ttl < 1:
        raise ConfigError("--lease-ttl must be at least 1 second: a lease already expired "
                          "guards nothing")
    started, requests0 = time.monotonic(), saver.client.requests
    holds_rows = prepare(saver, dry_run=dry_run)
    summary = RekeySummary(dry_run=dry_run, newest_key=keys[0], keys=keys,
                           before=saver.key_census() if holds_rows else {})
    summary.to_rewrite = stale(summary.before, keys[0], seal_plaintext=seal_plaintext)
    summary.staged_skipped = summary.before.get(admin.STAGED, {}).get("skipped", 0)
    per_key = [per for tbl, per in summary.before.items() if tbl != admin.STAGED]
    summary.looked_at = sum(n for per in per_key for n in per.values())
    summary.already_current = sum(per.get(keys[0], 0) for per in per_key)
    summary.plaintext = sum(per.get("plaintext", 0) for per in per_key)
    if not dry_run:
        if break_lease:
            leases.break_lease(saver)
        held = leases.acquire(saver, ttl=lease_ttl, job="rekey")
        try:
            # A table the census found no value in (delta_frozen before any compaction) costs
            # no request; values a prune froze meanwhile wait for the next run, as the old key.
            log.info("%s: rekey under %s, %d values of %d to re-seal; lease %s held",
                     saver.database_id, keys[0], summary.to_rewrite, summary.looked_at,
                     held.name)
            for table in (t for t in TABLES if t in summary.before):
                counts = _rekey_table(saver, table, held, batch_rows, seal_plaintext, progress)
                log.info("%s: %s: %d values re-sealed in %d pages, %d plaintext left",
                         saver.database_id, table, counts.rewritten, counts.pages,
                         counts.plaintext)
                summary.tables[table] = {"rewritten": counts.rewritten,
                                         "plaintext_left": counts.plaintext,
                                         "pages": counts.pages}
                summary.rewritten += counts.rewritten
                summary.plaintext_left += counts.plaintext
                summary.pages += counts.pages
        finally:
            leases.release(saver, held)
        summary.after = saver.key_census()
        after = [per for tbl, per in summary.after.items() if tbl != admin.STAGED]
        summary.plaintext_left = sum(per.get("plaintext", 0) for per in after)
        summary.skipped = sum(n for per in after for kid, n in per.items()
                              if kid not in (keys[0], "plaintext"))
        summary.rewritten_rows = max(0, summary.looked_at - summary.already_current
                                     - summary.plaintext_left - summary.skipped)
        if summary.skipped:
            summary.skipped_why = ("still under an older key: written by a live writer during "
                                   "the run; run rekey again")
    summary.requests = saver.client.requests - requests0
    summary.seconds = round(time.monotonic() - started, 3)
    return summary


def _rekey_table(saver: D1Saver, table: str, held: leases.Lease, batch_rows: int,
                 seal_plaintext: bool, progress: Progress | None) -> RekeyCounts:
    report = None if progress is None else (lambda counts: progress(table, counts))
    try:
        return saver.rekey(table, page_size=batch_rows, seal_plaintext=seal_plaintext,
                           guard=held.guard_statements(), progress=report)
    except QueryError as exc:
        if "lease_lost" in str(exc):
            raise LeaseHeldError("this run lost its lease (it expired and another run took "
                                 "it); the batch in flight was not applied, the ones before "
                                 "were: run rekey again to finish") from exc
        raise


def _add_up(parts: list[RekeySummary], seconds: float) -> RekeySummary:
    """One summary from per-database ones: counts and censuses add up."""
    first = parts[0]
    afters = [p.after for p in parts]
    out = RekeySummary(dry_run=first.dry_run, newest_key=first.newest_key, keys=first.keys,
                       before=admin.add_census(p.before for p in parts),
                       after=None if None in afters else admin.add_census(
                           a for a in afters if a is not None),
                       tables=admin.add_census(p.tables for p in parts), seconds=seconds,
                       skipped_why=next((p.skipped_why for p in parts if p.skipped_why), ""))
    for name in ("to_rewrite", "looked_at", "already_current", "plaintext", "rewritten",
                 "rewritten_rows", "plaintext_left", "staged_skipped", "skipped", "pages", "requests"):
        setattr(out, name, sum(getattr(p, name) for p in parts))
    return out
