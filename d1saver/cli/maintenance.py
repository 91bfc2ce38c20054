"""Compaction, rebalance, rekey, tag and inspection commands, mounted on `d1saver`: the command
line of d1saver.compaction's jobs (`app` is these commands alone). D1_DATABASE_ID (or --database-id) may list several databases,
separated by commas: each command then spans them (a thread's commands go to its home).
Every command reads D1SAVER_ENCRYPTION_KEYS (through `D1Saver.from_env`); `rekey` needs it.

Each command parses its options, calls one library function, and reports. Exit codes:
0 done, 1 a D1 error (message on stderr) or, for `check`, a thread found not exact, 2 bad
usage (a checkpoint id's start that several ids share, --max-age under 1h without --yes off a
terminal), 3 another run holds the lease, 4 not found (tagging a checkpoint that does not
exist, compacting a --thread that has no checkpoint). The commands that only read (threads,
history, check, show, diff, compact --history) never create nor migrate a schema: a database
without one is reported (exit 4), one with an older schema too (exit 2).

The module imports Typer and d1saver's errors only; each command imports what it runs when it
runs, so that `d1saver --help` and `d1saver threads --help` load no LangGraph nor httpx.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, List, Optional

import typer

from d1saver.cli.support import (CONTEXT_SETTINGS, EXIT_USAGE, Connection, OneLineUsageErrors,
                                 connection_options, printable, progress_bar, table)
from d1saver import (ConfigError, D1Error, FleetError, InvalidInputError, LeaseHeldError,
                     NotFoundError, SchemaNotReadyError, StoredValueError)

if TYPE_CHECKING:  # each command imports what it runs when it runs: `--help` stays light
    from langchain_core.runnables import RunnableConfig

    from d1saver.compaction.rekey import RekeySummary
    from d1saver import D1Saver, RekeyCounts

EXIT_D1, EXIT_LEASE, EXIT_NOT_FOUND = 1, 3, 4

_DURATION = re.compile(r"^(\d+)([smhdw])$")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}


def parse_duration(text: str) -> timedelta:
    """'90m', '12h', '30d', '2w' -> timedelta."""
    m = _DURATION.match(text.strip())
    if not m:
        raise typer.BadParameter("use a number and a unit: 3600s, 90m, 12h, 30d, 2w",
                                 param_hint="'--max-age'")
    try:
        return timedelta(**{_UNITS[m.group(2)]: int(m.group(1))})
    except OverflowError:
        raise typer.BadParameter(f"{text} is longer than a timedelta holds",
                                 param_hint="'--max-age'") from None


def _saver(conn: Connection, **kwargs: Any) -> D1Saver:
    from d1saver import D1Saver

    return D1Saver.from_env(**conn.settings(), **kwargs)


class _Opt:
    """Options (and an argument) several commands declare alike."""

    thread_id = typer.Argument(..., help="Thread id.")
    ns = typer.Option("", "--ns", help="Checkpoint namespace (subgraph).")
    ns_or_root = typer.Option("", "--ns", help="Checkpoint namespace (a subgraph's); default the root.")
    as_json = typer.Option(False, "--json", help="Print JSON.")
    json_summary = typer.Option(False, "--json", help="Print a JSON summary.")
    lease_ttl = typer.Option(300, min=1, help="Seconds the run's lease lives unless renewed (by each batch).")
    break_lease = typer.Option(False, "--break-lease", help="Remove a stale lease first (only if no run is active).")


@contextmanager
def _connected(conn: Connection, *, read_only: bool = False) -> Iterator[D1Saver]:
    """A saver for one command; a D1Error ends the command with its exit code and one line.
    `read_only`: the saver never creates nor migrates a schema (SchemaNotReadyError)."""
    try:
        with _saver(conn) as saver:
            saver.read_only = read_only
            try:
                yield saver
            except SchemaNotReadyError as exc:  # one database: name it
                _fail(exc, where=saver.database_id)
    except D1Error as exc:
        _fail(exc)


def _fail(exc: Exception, where: str | None = None) -> None:
    code = EXIT_D1
    errors = list(exc.errors.values()) if isinstance(exc, FleetError) else [exc]
    unready = [e for e in errors if isinstance(e, SchemaNotReadyError)]
    if unready and len(unready) == len(errors):
        code = EXIT_NOT_FOUND if all(e.version == 0 for e in unready) else EXIT_USAGE
    elif isinstance(exc, FleetError) and all(isinstance(e, LeaseHeldError)
                                             for e in exc.errors.values()):
        code = EXIT_LEASE
    elif isinstance(exc, LeaseHeldError):
        code = EXIT_LEASE
    elif isinstance(exc, NotFoundError):
        code = EXIT_NOT_FOUND
    elif isinstance(exc, ConfigError):
        code = EXIT_USAGE
    typer.echo(f"error: {'' if where is None else f'database {where}: '}{exc}", err=True)
    raise typer.Exit(code)


@connection_options
def compact_cmd(
    keep: Optional[int] = typer.Option(None, "--keep", min=1, help="Checkpoints to keep per thread, and per subgraph namespace still reached (>= 1)."),
    thread: Optional[List[str]] = typer.Option(None, "--thread", help="A thread to compact (repeatable)."),
    all_threads: bool = typer.Option(False, "--all", help="Compact every thread."),
    max_age: Optional[str] = typer.Option(None, "--max-age", help="Also delete threads idle longer than this (30d, 12h): all but their tags. Under 1h needs --yes (a thread paused at an interrupt minutes ago is idle); 0 is refused: leave --max-age out for no limit."),
    yes: bool = typer.Option(False, "--yes", "-y", help="Do not ask before a --max-age under 1h (needed off a terminal)."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Change nothing; print what would go."),
    as_json: bool = _Opt.json_summary,
    lease_ttl: int = _Opt.lease_ttl,
    break_lease: bool = _Opt.break_lease,
    batch_checkpoints: int = typer.Option(2000, min=1, help="Most checkpoints deleted per request."),
    sweep: bool = typer.Option(True, "--sweep/--no-sweep", help="Also delete expired D1Store items and D1Cache entries (one request)."),
    show_history: bool = typer.Option(False, "--history", help="Change nothing; show the gateway Worker's scheduled runs (newest first)."),
    limit: int = typer.Option(20, "--limit", min=1, help="With --history: the runs to show."),
    *,
    conn: Connection,
) -> None:
    """Keep the latest N checkpoints of each thread plus the tagged ones; delete the rest; and
    sweep expired memory items and cache entries."""
    if show_history:
        _print_runs(conn, limit, as_json)
        return
    if keep is None:
        typer.echo("error: pass --keep N (or --history)", err=True)
        raise typer.Exit(EXIT_USAGE)
    if bool(thread) == all_threads:
        typer.echo("error: name threads with --thread ID (repeatable) or pass --all", err=True)
        raise typer.Exit(EXIT_USAGE)
    age = parse_duration(max_age) if max_age else None
    if age is not None and not dry_run:
        _confirm_max_age(age, yes)
    from d1saver.compaction.fleet import compact

    bar: Any = None
    try:
        with _saver(conn) as saver:
            def progress(done: int, total: int) -> None:
                nonlocal bar
                if as_json or not sys.stderr.isatty():
                    return
                if bar is None:
                    bar = typer.progressbar(length=total, label="compacting", file=sys.stderr)
                    bar.__enter__()
                bar.length = max(bar.length, total)  # the plan grows page by page
                bar.update(done - bar.pos)

            summary = compact(saver, keep=keep, threads=thread or None, max_age=age,
                              dry_run=dry_run, lease_ttl=lease_ttl, break_lease=break_lease,
                              batch_checkpoints=batch_checkpoints, progress=progress,
                              sweep=sweep)
    except D1Error as exc:
        _fail(exc)
        return
    finally:
        if bar is not None:
            bar.__exit__(None, None, None)
    if as_json:
        typer.echo(json.dumps(summary.as_dict(with_plan=dry_run), indent=2))
        _not_found(summary.threads_not_found)
        return
    if dry_run:
        typer.echo("dry run: nothing was changed. Plan:")
        for p in summary.plan:
            if p["checkpoints_deleted"] or p["writes_deleted"]:
                where = f" ({p['database_id']})" if "database_id" in p else ""
                typer.echo(f"  {printable(p['thread_id'])}{where}: {p['checkpoints_deleted']} of {p['checkpoints']}"
                           f" checkpoints, {p['writes_deleted']} writes, {p['bytes_freed']} bytes"
                           f"{' (idle: expired)' if p['expired'] else ''}")
    for db, part in getattr(summary, "databases", {}).items():
        typer.echo(f"  {db}: {part['threads_scanned']} threads, {part['checkpoints_deleted']}"
                   f" checkpoints and {part['writes_deleted']} writes"
                   f" {'to delete' if dry_run else 'deleted'}, {part['requests']} requests")
    verb = "would delete" if dry_run else "deleted"
    typer.echo(f"{summary.threads_scanned} threads scanned; {verb} {summary.checkpoints_deleted}"
               f" checkpoints and {summary.writes_deleted} writes ({summary.bytes_freed} bytes);"
               f" {summary.checkpoints_kept} checkpoints kept; {summary.threads_expired} idle"
               f" threads expired; {'would sweep' if dry_run else 'swept'}"
               f" {summary.store_items_swept} expired memory items and"
               f" {summary.cache_entries_swept} cache entries; {summary.requests} requests in"
               f" {summary.seconds:.1f} s")
    _not_found(summary.threads_not_found)


def _not_found(threads: List[str]) -> None:
    """Threads named with --thread that have no checkpoint: exit 4, as every command does for
    what is not there (the others were compacted: `rm a b` removes a when b is missing)."""
    if threads:
        typer.echo(f"error: no checkpoint in thread{'s' if len(threads) > 1 else ''} "
                   f"{', '.join(repr(printable(t)) for t in threads)} (`d1saver threads` lists "
                   "the threads)", err=True)
        raise typer.Exit(EXIT_NOT_FOUND)


def _confirm_max_age(age: timedelta, yes: bool) -> None:
    """--max-age 0 is refused (elsewhere 0 means no limit; here it would mean every thread),
    and under an hour needs --yes or a yes on a terminal: a thread paused at an interrupt a
    few minutes ago is idle that long, and would lose all but its tags."""
    if not age:
        raise typer.BadParameter("0 would expire every thread: leave --max-age out for no "
                                 "idle limit", param_hint="'--max-age'")
    if age >= timedelta(hours=1) or yes:
        return
    what = (f"this deletes every thread idle for {age} or more, all but its tags, a thread "
            "waiting at an interrupt included")
    if not sys.stdin.isatty():
        typer.echo(f"error: --max-age under 1h: {what}: pass --yes (no terminal to ask on)",
                   err=True)
        raise typer.Exit(EXIT_USAGE)
    if not typer.confirm(f"--max-age {age}: {what}. Go on?"):
        typer.echo("nothing was changed")
        raise typer.Exit(0)


def _print_runs(conn: Connection, limit: int, as_json: bool) -> None:
    from d1saver.inspection import run_history

    with _connected(conn, read_only=True) as saver:
        runs = run_history(saver, limit)
    if as_json:
        typer.echo(json.dumps(runs, indent=2))
        return
    if not runs:
        typer.echo("no scheduled compaction run recorded (the gateway Worker's Cron Trigger "
                   "records its runs here; docs/COMPACTION.md)")
        return
    table(["started", "status", "database", "keep", "max_age", "threads", "compacted",
           "expired", "checkpoints", "writes", "bytes", "batches", "ended", "run", "reason"],
          [[r["started_at"], r["status"], r["database_id"], r["keep"],
            "-" if r["max_age_days"] is None else f"{r['max_age_days']}d", r["threads_scanned"],
            r["threads_compacted"], r["threads_expired"], r["checkpoints_deleted"],
            r["writes_deleted"], r["bytes_freed"], r["batches"], r["ended_at"] or "-",
            r["run_id"], printable(str(r["reason"] or ""))] for r in runs],
          right=["keep", "threads", "compacted", "expired", "checkpoints", "writes", "bytes",
                 "batches"])


@connection_options
def rekey_cmd(
    dry_run: bool = typer.Option(False, "--dry-run", help="Change nothing; count values per key."),
    as_json: bool = typer.Option(False, "--json", help="Print a JSON summary (counts per key id before and after)."),
    seal_plaintext: bool = typer.Option(False, "--seal-plaintext", help="Also seal values written before keys were set (trusts them)."),
    batch_rows: int = typer.Option(100, "--batch-rows", min=1, help="Rows re-sealed per request (one atomic batch)."),
    lease_ttl: int = _Opt.lease_ttl,
    break_lease: bool = _Opt.break_lease,
    *,
    conn: Connection,
) -> None:
    """Re-seal every stored value under the newest key of D1SAVER_ENCRYPTION_KEYS (newest
    first), so that older keys can be dropped. Resumable: a rerun continues."""
    from d1saver.compaction.rekey import rekey

    def progress(table: str, counts: RekeyCounts) -> None:
        if not as_json and sys.stderr.isatty():
            typer.echo(f"\rrekeying {table}: {counts.rewritten} rows", err=True, nl=False)

    try:
        with _saver(conn) as saver:
            summary = rekey(saver, dry_run=dry_run, seal_plaintext=seal_plaintext,
                            batch_rows=batch_rows, lease_ttl=lease_ttl,
                            break_lease=break_lease, progress=progress)
    except D1Error as exc:
        _fail(exc)
        return
    if as_json:
        typer.echo(json.dumps(summary.as_dict(), indent=2))
        return
    _print_rekey(summary)


def _print_rekey(summary: RekeySummary) -> None:
    def counts(census: dict[str, dict[str, int]]) -> str:
        return "; ".join(f"{table} " + ", ".join(f"{kid}: {n}" for kid, n in sorted(per.items()))
                         for table, per in census.items() if per) or "no stored values"

    typer.echo(f"keys held (newest first): {', '.join(summary.keys)}")
    typer.echo(f"before: {counts(summary.before)}")
    if summary.dry_run:
        stale = summary.looked_at - summary.already_current - summary.plaintext
        plain = ""
        if summary.plaintext:
            plain = (f"; {summary.plaintext} plaintext rows would be sealed" if summary.to_rewrite > stale
                     else f"; {summary.plaintext} plaintext rows would be left as they are "
                          "(--seal-plaintext would seal them)")
        typer.echo(f"dry run: nothing was changed; of {summary.looked_at} rows, "
                   f"{summary.already_current} are already under {summary.newest_key}, "
                   f"{stale} under older keys would be re-sealed{plain}")
        return
    typer.echo(f"after:  {counts(summary.after or {})}")
    left = (f", {summary.plaintext_left} plaintext left (--seal-plaintext seals them)"
            if summary.plaintext_left else "")
    if summary.staged_skipped:
        left += (f"; {summary.staged_skipped} values of staged rows (a copy or move killed "
                 "midway) skipped: re-run `d1saver rebalance` or the copy to remove them")
    skipped = f", {summary.skipped} skipped ({summary.skipped_why})" if summary.skipped else ""
    typer.echo(f"of {summary.looked_at} rows: {summary.rewritten_rows} re-sealed under "
               f"{summary.newest_key} ({summary.rewritten} values), {summary.already_current} "
               f"already current{left}{skipped}; "
               f"{summary.pages} pages, {summary.requests} requests in {summary.seconds:.1f} s")


@connection_options
def tag_cmd(
    thread_id: str = _Opt.thread_id,
    checkpoint_id: str = typer.Argument(..., help="Checkpoint id, or its start if no other id of the thread shares it (see `d1saver history`)."),
    name: str = typer.Argument(..., help="Tag name, unique per thread and namespace."),
    ns: str = _Opt.ns,
    as_json: bool = _Opt.as_json,
    *,
    conn: Connection,
) -> None:
    """Tag a checkpoint so that compaction keeps it."""
    with _connected(conn) as saver, \
            _thread_hint(saver, thread_id), _history_hint(thread_id):
        checkpoint_id = _checkpoint(saver, thread_id, checkpoint_id, ns)
        saver.tag(_config(thread_id, ns, checkpoint_id), name)
    if as_json:
        typer.echo(json.dumps({"thread_id": thread_id, "checkpoint_ns": ns,
                               "checkpoint_id": checkpoint_id, "tag": name, "tagged": True}))
        return
    typer.echo(f"tagged {printable(thread_id)}/{printable(checkpoint_id)} as {name!r}")


@connection_options
def untag_cmd(
    thread_id: str = _Opt.thread_id,
    name: str = typer.Argument(..., help="Tag name."),
    ns: str = _Opt.ns,
    as_json: bool = _Opt.as_json,
    *,
    conn: Connection,
) -> None:
    """Remove a tag; the checkpoint becomes subject to compaction again."""
    with _connected(conn) as saver:
        existed = saver.untag(_config(thread_id, ns, None), name)
    if as_json:
        typer.echo(json.dumps({"thread_id": thread_id, "checkpoint_ns": ns, "tag": name, "untagged": existed}))
    if not existed:
        typer.echo(f"error: thread {thread_id!r} has no tag {name!r}", err=True)
        raise typer.Exit(EXIT_NOT_FOUND)
    if not as_json:
        typer.echo(f"untagged {name!r} in {printable(thread_id)}")


@connection_options
def threads_cmd(
    sort: str = typer.Option("updated", "--sort", help="updated | checkpoints | bytes | id."),
    limit: int = typer.Option(50, "--limit", min=0, help="Rows to show (0: all)."),
    as_json: bool = _Opt.as_json,
    *,
    conn: Connection,
) -> None:
    """List threads: checkpoints, namespaces, last update, stored bytes, waiting on an
    interrupt. Sorted and cut in SQL, a page of up to 1,000 per request and database."""
    from d1saver.compaction.fleet import leftovers, misplaced_memory
    from d1saver import inspection

    if sort not in inspection.SORTS:
        raise typer.BadParameter(f"--sort takes one of {', '.join(inspection.SORTS)}")
    infos: list[dict[str, Any]] = []
    with _connected(conn, read_only=True) as saver:
        after = None
        while True:
            size = min(limit - len(infos), 1000) if limit else 1000
            page = inspection.threads(saver, sort=sort, limit=size, after=after)
            infos += page.threads
            after = page.next
            if after is None or (limit and len(infos) >= limit):
                break
        staged = leftovers(saver)
        memory = misplaced_memory(saver)
    if as_json:
        typer.echo(json.dumps(infos, indent=2))
        return
    fleet = any("database_id" in i for i in infos)
    table(["thread_id", *(["database"] if fleet else []), "checkpoints", "ns", "bytes", "updated",
           "waiting"],
          [[printable(i["thread_id"]), *([i.get("database_id", "")] if fleet else []),
            i["checkpoints"], i["namespaces"], i["bytes"], printable(str(i["updated"])),
            "interrupt" if i["waiting"] else ""] for i in infos],
          right=["checkpoints", "ns", "bytes"])
    for x in staged:
        typer.echo(f"leftover: {_leftover(x)}")
    for m in memory:
        typer.echo(f"leftover: {_misplaced(m)}")


def _misplaced(m: Any) -> str:
    """One line about memory not at its home (compaction.fleet.MisplacedMemory)."""
    what = "store items" if m.table == "store_items" else "cache entries"
    return (f"{m.rows} {what} in {m.database_id} live in {m.home} (a move pending or killed "
            "midway: `d1saver rebalance` moves them)")


def _leftover(x: Any) -> str:
    """One line about staged rows (admin.Leftover): what they are and what removes them."""
    where = getattr(x, "database_id", None)
    db = f" in {where}" if where is not None else ""
    what = (f"{x.kind} {printable(x.source)} -> {printable(x.target)}" if x.target is not None
            else f"{x.kind}, unregistered")
    state = ("expired: the next rebalance or compaction, or delete_thread of either thread, "
             "removes it" if x.expired else "in progress")
    return f"staged rows {printable(x.thread_id)}{db} ({what}; {state})"


@connection_options
def history_cmd(
    thread_id: str = _Opt.thread_id,
    limit: int = typer.Option(100, "--limit", min=1, help="Newest checkpoints to show (>= 1)."),
    as_json: bool = _Opt.as_json,
    *,
    conn: Connection,
) -> None:
    """A thread's checkpoints, newest first: ids, step, source, pending writes, stored bytes,
    the tasks that run next and any interrupt (a thread waiting on a person), tags, parents."""
    from d1saver.inspection import timeline

    with _connected(conn, read_only=True) as saver, _thread_hint(saver, thread_id):
        rows = timeline(saver, thread_id, limit)
    if as_json:
        typer.echo(json.dumps(rows, indent=2))
    if not rows:  # with --json too ([] printed): a thread without checkpoints is not found
        typer.echo(f"error: thread {printable(thread_id)!r} has no checkpoints (`d1saver "
                   "threads` lists the threads)", err=True)
        raise typer.Exit(EXIT_NOT_FOUND)
    if as_json:
        return
    fleet = any("database_id" in r for r in rows)
    sealed = [r for r in rows if r["sealed"]]
    table(["checkpoint_id", "step", "source", "writes", "bytes", "next", "interrupt", "tags",
           "ns", "parent", *(["database"] if fleet else [])],
          [[printable(r["checkpoint_id"]), "" if r["step"] is None else r["step"],
            printable(str(r["source"] or "")), r["writes"], r["bytes"],
            "?" if r["sealed"] else printable(", ".join(r["next"])),
            "?" if r["sealed"] else _interrupts(r["interrupts"]),
            printable(str(r["tags"] or "")), printable(r["checkpoint_ns"]),
            printable(str(r["parent_checkpoint_id"] or "")),
            *([r.get("database_id", "")] if fleet else [])]
           for r in rows],
          right=["step", "writes", "bytes"])
    if sealed:
        typer.echo(f"note: the values of {len(sealed)} checkpoints cannot be opened "
                   f"({printable(sealed[0]['sealed'])}), so their next tasks and interrupts "
                   "show as '?': set D1SAVER_ENCRYPTION_KEYS with their key", err=True)


def _interrupts(writes: List[Any]) -> str:
    """The first interrupt's value, cut short, and how many more there are (an `__interrupt__`
    write holds a list of LangGraph's Interrupts: {"value": ..., "id": ...})."""
    found = [i for w in writes for i in (w if isinstance(w, list) else [w])]
    if not found:
        return ""
    first = found[0].get("value", found[0]) if isinstance(found[0], dict) else found[0]
    more = f" (+{len(found) - 1})" if len(found) > 1 else ""
    return _short(first, 60) + more


@connection_options
def rebalance_cmd(
    previous: Optional[str] = typer.Option(
        None, "--previous-database-id",
        help="Databases threads may still be in besides the current ones (comma-separated): "
             "those removed from D1_DATABASE_ID."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Change nothing; print the moves."),
    as_json: bool = _Opt.json_summary,
    lease_ttl: int = typer.Option(300, min=1, help="Seconds each database's lease lives unless renewed (by each batch)."),
    break_lease: bool = typer.Option(False, "--break-lease", help="Remove stale leases first (only if no run is active)."),
    concurrency: int = typer.Option(8, min=1, help="Threads moved at once."),
    *,
    conn: Connection,
) -> None:
    """Move each thread, store item and cache entry to its home after the database list
    changed: copy, verify, delete."""
    from d1saver.compaction.rebalance import rebalance

    try:
        extra = ({"previous_database_ids": [p.strip() for p in previous.split(",")]}
                 if previous else {})  # "c, d" as D1_DATABASE_ID reads it
        with _saver(conn, **extra) as saver, \
                progress_bar("moving threads", quiet=as_json) as progress:
            summary = rebalance(saver, dry_run=dry_run, lease_ttl=lease_ttl,
                                break_lease=break_lease, concurrency=concurrency, progress=progress)
    except D1Error as exc:
        _fail(exc)
        return
    if as_json:
        typer.echo(json.dumps(summary.as_dict(), indent=2))
    else:
        if dry_run:
            typer.echo("dry run: nothing was changed. Moves:")
        for m in summary.moves:
            outcome = f" ({m['outcome']})" if "outcome" in m else ""
            typer.echo(f"  {printable(m['thread_id'])}: {m['source']} -> {m['target']}, "
                       f"{m['checkpoints']} checkpoints{outcome}")
        for thread_id, error in summary.errors.items():
            typer.echo(f"  {printable(thread_id)}: FAILED {printable(error)}", err=True)
        typer.echo(f"{summary.threads_scanned} threads in {len(summary.databases)} databases; "
                   f"{summary.threads_misplaced} misplaced; {summary.threads_moved} moved "
                   f"({summary.rows_copied} rows, {summary.bytes_copied} bytes), "
                   f"{summary.threads_found_copied} found copied, {summary.threads_changed} "
                   f"changed meanwhile, {summary.threads_failed} failed; memory: "
                   f"{summary.memory_misplaced} misplaced, {summary.store_items_moved} store "
                   f"items and {summary.cache_entries_moved} cache entries moved"
                   f"{f', {summary.memory_changed} changed meanwhile' if summary.memory_changed else ''}"
                   f"; {summary.requests} requests in {summary.seconds:.1f} s")
    if summary.errors:
        raise typer.Exit(EXIT_D1)


@connection_options
def check_cmd(
    thread_id: Optional[str] = typer.Option(None, "--thread-id", help="Check one thread (default: every thread)."),
    as_json: bool = _Opt.as_json,
    *,
    conn: Connection,
) -> None:
    """Check the content-addressed chunk table: every chunk a row lists is stored, and every
    stored chunk is listed. Prints the threads that break either rule; exit 1 if any."""
    from d1saver.compaction.fleet import check_chunks, leftovers, misplaced_memory
    from d1saver import admin
    from d1saver.inspection import history

    with _connected(conn, read_only=True) as saver:
        found = check_chunks(saver, thread_id)
        if thread_id is not None and not found and not history(saver, thread_id, 1):
            typer.echo(f"error: thread {printable(thread_id)!s} has no checkpoints", err=True)
            raise typer.Exit(EXIT_NOT_FOUND)
        staged = [x for x in leftovers(saver) if thread_id is None or thread_id in (
            x.target, x.source)]
        memory = misplaced_memory(saver) if thread_id is None else []
    # Staged rows are no thread: listed as leftovers, not as inexact threads.
    found = [t for t in found if not admin.is_staging(t.thread_id)]
    if as_json:
        typer.echo(json.dumps([t.__dict__ for t in found]
                              + [{**x.__dict__, "leftover": x.kind} for x in staged]
                              + [{**m.__dict__, "leftover": "memory"} for m in memory],
                              indent=2))
    else:
        for x in staged:
            typer.echo(f"leftover: {_leftover(x)}")
        for m in memory:
            typer.echo(f"leftover: {_misplaced(m)}")
        for t in found:
            db = f" ({t.database_id})" if hasattr(t, "database_id") else ""
            typer.echo(f"{printable(t.thread_id)}{db}: {t.missing} chunks missing, "
                       f"{t.unreferenced} unreferenced")
        scope = f"thread {printable(thread_id)}" if thread_id is not None else "every thread"
        typer.echo(f"{len(found)} threads not exact" if found else f"{scope}: chunk table exact")
    if found or any(x.expired for x in staged):
        raise typer.Exit(EXIT_D1)


def gateway_build_cmd(
    out_path: Optional[Path] = typer.Option(None, "--out", help="The generated module (default: worker/compaction.generated.js, from the repository's root)."),
    check: bool = typer.Option(False, "--check", help="Change nothing; exit 1 if the file differs from the catalogue."),
) -> None:
    """Generate the SQL of the Worker's scheduled compaction from d1saver's catalogue
    (worker/compaction.generated.js): the statements `d1saver compact` sends."""
    from d1saver.compaction.gateway import GENERATED_PATH
    from d1saver.compaction.gateway import render as render_gateway
    from d1saver.compaction.gateway import write as write_gateway

    out = GENERATED_PATH if out_path is None else out_path
    if check:
        current = out.read_text(encoding="utf-8") if out.is_file() else None
        if current != render_gateway():
            typer.echo(f"error: {out} differs from d1saver's catalogue: run `d1saver gateway build`",
                       err=True)
            raise typer.Exit(EXIT_D1)
        typer.echo(f"{out} matches d1saver's catalogue")
        return
    if not out.parent.is_dir():
        typer.echo(f"error: {out.parent} is not a directory: run from the repository's root, or "
                   "pass --out", err=True)
        raise typer.Exit(EXIT_USAGE)
    changed = write_gateway(out)
    typer.echo(f"{'wrote' if changed else 'unchanged:'} {out}")


def _short(value: Any, width: int = 100) -> str:
    text = printable(value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str))
    return text if len(text) <= width else text[: width - 3] + "..."


@connection_options
def show_cmd(
    thread_id: str = _Opt.thread_id,
    checkpoint_id: Optional[str] = typer.Option(None, "--checkpoint", help="A checkpoint id, or its start if no other id of the thread shares it (default: the newest)."),
    ns: str = _Opt.ns_or_root,
    as_json: bool = typer.Option(False, "--json", help="Print JSON: every value whole."),
    *,
    conn: Connection,
) -> None:
    """A checkpoint's state: channel values decoded, pending writes, next tasks, interrupts,
    metadata, tags and stored bytes. Values sealed under a key not given: what is in clear,
    and which key they need."""
    from d1saver import inspection

    with _connected(conn, read_only=True) as saver, _thread_hint(saver, thread_id), \
            _history_hint(thread_id, checkpoint_id is not None):
        if checkpoint_id is not None:
            checkpoint_id = _checkpoint(saver, thread_id, checkpoint_id, ns)
        try:
            snap = inspection.snapshot(saver, thread_id, checkpoint_id, ns)  # NotFoundError: 4
        except StoredValueError as exc:  # sealed under a key not given: show what is clear
            snap = inspection.sealed(saver, thread_id, checkpoint_id, ns, exc)
    if as_json:
        typer.echo(json.dumps(snap, indent=2, ensure_ascii=False))
        return
    db = f"  database {snap['database_id']}" if "database_id" in snap else ""
    typer.echo(f"thread {printable(thread_id)}  checkpoint {printable(snap['checkpoint_id'])}"
               f"{'  ns ' + printable(ns) if ns else ''}{db}")
    if "sealed" in snap:
        _show_sealed(snap)
        return
    meta = snap["metadata"]
    typer.echo(f"  step {meta.get('step')}  source {meta.get('source')}  at {snap['ts']}  "
               f"parent {snap['parent_checkpoint_id']}  stored {snap['bytes']} bytes")
    typer.echo(f"  next: {', '.join(snap['next']) or '(none)'}   tags: {', '.join(map(printable, snap['tags'])) or '(none)'}")
    for value in snap["interrupts"]:
        typer.echo(f"  interrupt: {_short(value)}")
    typer.echo("  channels:")
    for name, value in snap["channels"].items():
        if isinstance(value, list):
            typer.echo(f"    {printable(name)}: {len(value)} items" + (f", last: {_short(value[-1], 80)}" if value else ""))
        else:
            typer.echo(f"    {printable(name)}: {_short(value)}")
    typer.echo(f"  pending writes: {len(snap['pending_writes'])}")
    for w in snap["pending_writes"]:
        typer.echo(f"    {printable(w['task_id'])} {printable(w['channel'])}: {_short(w['value'], 80)}")


def _show_sealed(snap: dict[str, Any]) -> None:
    """A checkpoint whose values could not be opened (d1saver.inspection.sealed): what is in
    clear, what is sealed, and the key it needs."""
    key = f" under key {snap['key_id']}" if snap["key_id"] else ""
    typer.echo(f"  sealed: its channel values, pending writes and the rest of its metadata are "
               f"sealed{key}, and cannot be opened here ({printable(snap['sealed'])}); set "
               "D1SAVER_ENCRYPTION_KEYS with that key to see them")
    typer.echo(f"  step {snap['step']}  source {printable(str(snap['source']))}  at {snap['ts']}  "
               f"parent {printable(str(snap['parent_checkpoint_id']))}  stored {snap['bytes']} bytes")
    typer.echo(f"  pending writes: {snap['writes']}   tags: {printable(snap['tags'] or '(none)')}")
    typer.echo(f"  metadata in clear: {_short(snap['metadata'])}")


@connection_options
def diff_cmd(
    thread_id: str = _Opt.thread_id,
    a: str = typer.Argument(..., help="The older checkpoint id (or its start, as for show)."),
    b: str = typer.Argument(..., help="The newer checkpoint id (or its start)."),
    ns: str = _Opt.ns_or_root,
    as_json: bool = _Opt.as_json,
    *,
    conn: Connection,
) -> None:
    """What changed between two checkpoints of a thread, channel by channel (messages added and
    removed)."""
    from d1saver import inspection

    with _connected(conn, read_only=True) as saver, _thread_hint(saver, thread_id), \
            _history_hint(thread_id):
        a, b = (_checkpoint(saver, thread_id, x, ns) for x in (a, b))
        found = inspection.diff(saver, thread_id, a, b, ns)
    if as_json:
        typer.echo(json.dumps(found, indent=2, ensure_ascii=False))
        return
    typer.echo(f"thread {printable(thread_id)}: {found['a']} -> {found['b']}")
    if not found["channels"]:
        typer.echo("  no channel changed")
    for name, change in found["channels"].items():
        if "added" in change:
            typer.echo(f"  {printable(name)}: +{len(change['added'])} -{len(change['removed'])}")
            for item in change["added"]:
                typer.echo(f"    + {_short(item, 90)}")
            for item in change["removed"]:
                typer.echo(f"    - {_short(item, 90)}")
        else:
            typer.echo(f"  {printable(name)}: {_short(change['before'], 45)} -> {_short(change['after'], 45)}")


def _checkpoint(saver: D1Saver, thread_id: str, text: str, ns: str) -> str:
    """The checkpoint id `text` names (whole, or its start: d1saver.inspection's
    resolve_checkpoint); a start several ids share is a usage error (exit 2) listing them and
    pointing at `d1saver history`, which lists the ids."""
    from d1saver.inspection import resolve_checkpoint

    try:
        return resolve_checkpoint(saver, thread_id, text, ns)
    except InvalidInputError as exc:
        typer.echo(f"error: {printable(str(exc))} (`d1saver history {_quoted(thread_id)}` "
                   "lists them)", err=True)
        raise typer.Exit(EXIT_USAGE) from None


@contextmanager
def _history_hint(thread_id: str, named: bool = True) -> Iterator[None]:
    """A checkpoint not found (exit 4): the error says where the ids are listed (the thread's
    with `named`, else the threads)."""
    try:
        yield
    except NotFoundError as exc:
        if not named:  # the thread's newest: the thread has none
            raise NotFoundError(f"{exc} (`d1saver threads` lists the threads)") from None
        raise NotFoundError(f"{exc} (`d1saver history {_quoted(thread_id)}` lists its "
                            "checkpoints)") from None


@contextmanager
def _thread_hint(saver: D1Saver, thread_id: str) -> Iterator[None]:
    """A command about one thread whose database has no d1saver schema (nothing was ever
    stored there; a command that only reads creates none): the thread is not found (exit 4),
    said as for any thread without checkpoints, with the database that has no schema."""
    try:
        yield
    except (SchemaNotReadyError, FleetError) as exc:
        errors = list(exc.errors.values()) if isinstance(exc, FleetError) else [exc]
        if not all(isinstance(e, SchemaNotReadyError) and e.version == 0 for e in errors):
            raise
        raise NotFoundError(
            f"thread {printable(thread_id)!r} has no checkpoints: its database "
            f"{saver.home(thread_id)} has no d1saver schema, nothing was ever stored there "
            "(`d1saver threads` lists the threads)") from None


def _quoted(text: str) -> str:
    """`text` as one shell word (shlex.quote), escaped for the terminal."""
    import shlex

    return printable(shlex.quote(text))


def _config(thread_id: str, ns: str, checkpoint_id: str | None) -> RunnableConfig:
    conf: dict[str, Any] = {"thread_id": thread_id, "checkpoint_ns": ns}
    if checkpoint_id:
        conf["checkpoint_id"] = checkpoint_id
    return {"configurable": conf}


def register(app: typer.Typer) -> None:
    """Add the compaction commands to a Typer app."""
    app.command("compact")(compact_cmd)
    app.command("rebalance")(rebalance_cmd)
    app.command("rekey")(rekey_cmd)
    app.command("tag")(tag_cmd)
    app.command("untag")(untag_cmd)
    app.command("threads")(threads_cmd)
    app.command("history")(history_cmd)
    app.command("check")(check_cmd)
    app.command("show")(show_cmd)
    app.command("diff")(diff_cmd)
    # `gateway build` joins the app's gateway group (d1saver's has `gateway init`), or makes one.
    group = next((g.typer_instance for g in app.registered_groups
                  if g.name == "gateway" and g.typer_instance is not None), None)
    if group is None:
        group = typer.Typer(cls=OneLineUsageErrors, no_args_is_help=True, add_completion=False,
                            context_settings=CONTEXT_SETTINGS,
                            help="The gateway Worker (worker/, wrangler.toml).")
        app.add_typer(group, name="gateway")
    group.command("build")(gateway_build_cmd)


app = typer.Typer(cls=OneLineUsageErrors, help="Compaction of d1saver checkpoints.",
                  no_args_is_help=True, add_completion=False, context_settings=CONTEXT_SETTINGS)
register(app)

