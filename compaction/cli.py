"""Compaction, rebalance, rekey, tag and inspection commands; mounted on `d1saver` and on
`python -m compaction`. D1_DATABASE_ID (or --database-id) may list several databases,
separated by commas: each command then spans them (a thread's commands go to its home).
Every command reads D1SAVER_ENCRYPTION_KEYS (through `D1Saver.from_env`); `rekey` needs it.

Each command parses its options, calls one library function, and reports. Exit codes:
0 done, 1 a D1 error (message on stderr) or, for `check`, a thread found not exact, 2 bad
usage, 3 another run holds the lease, 4 not found (tagging a checkpoint that does not exist).
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any, List, Optional

import typer

from d1saver import (ConfigError, D1Error, D1Saver, FleetError, LeaseHeldError, NotFoundError,
                     RekeyCounts, admin)
from d1saver.cli.support import EXIT_USAGE, OneLineUsageErrors, printable, progress_bar
from compaction import inspector
from compaction.fleet import check_chunks, compact, history, list_threads
from compaction.rebalance import rebalance
from compaction.rekey import RekeySummary, rekey

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


def _saver(account_id: Optional[str], database_id: Optional[str], api_base_url: Optional[str],
           api_token: Optional[str] = None, **kwargs: Any) -> D1Saver:
    return D1Saver.from_env(account_id=account_id, database_id=database_id,
                            api_base_url=api_base_url, api_token=api_token, **kwargs)


class _Conn:
    """The connection options every command shares (flags override the environment)."""

    account_id = typer.Option(None, "--account-id", help="Default: $CLOUDFLARE_ACCOUNT_ID.")
    database_id = typer.Option(None, "--database-id",
                               help="Default: $D1_DATABASE_ID. Several: comma-separated.")
    api_base_url = typer.Option(None, "--api-base-url", help="Default: $D1_API_BASE_URL or Cloudflare's API.")
    # The environment is the better place for a secret (a flag shows in `ps`); never echoed.
    api_token = typer.Option(None, "--api-token", help="Default: $CLOUDFLARE_API_TOKEN.", show_default=False)


@contextmanager
def _connected(account_id: Optional[str], database_id: Optional[str],
               api_base_url: Optional[str], api_token: Optional[str] = None) -> Iterator[D1Saver]:
    """A saver for one command; a D1Error ends the command with its exit code and one line."""
    try:
        with _saver(account_id, database_id, api_base_url, api_token) as saver:
            yield saver
    except D1Error as exc:
        _fail(exc)


def _fail(exc: Exception) -> None:
    code = EXIT_D1
    if isinstance(exc, FleetError) and all(isinstance(e, LeaseHeldError)
                                           for e in exc.errors.values()):
        code = EXIT_LEASE
    elif isinstance(exc, LeaseHeldError):
        code = EXIT_LEASE
    elif isinstance(exc, NotFoundError):
        code = EXIT_NOT_FOUND
    elif isinstance(exc, ConfigError):
        code = EXIT_USAGE
    typer.echo(f"error: {exc}", err=True)
    raise typer.Exit(code)


def compact_cmd(
    keep: int = typer.Option(..., "--keep", min=1, help="Checkpoints to keep per thread, and per subgraph namespace still reached (>= 1)."),
    thread: Optional[List[str]] = typer.Option(None, "--thread", help="A thread to compact (repeatable)."),
    all_threads: bool = typer.Option(False, "--all", help="Compact every thread."),
    max_age: Optional[str] = typer.Option(None, "--max-age", help="Also delete threads idle longer than this (30d, 12h): all but their tags."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Change nothing; print what would go."),
    as_json: bool = typer.Option(False, "--json", help="Print a JSON summary."),
    lease_ttl: int = typer.Option(300, min=1, help="Seconds the run's lease lives unless renewed (by each batch)."),
    break_lease: bool = typer.Option(False, "--break-lease", help="Remove a stale lease first (only if no run is active)."),
    batch_checkpoints: int = typer.Option(2000, min=1, help="Most checkpoints deleted per request."),
    account_id: Optional[str] = _Conn.account_id,
    database_id: Optional[str] = _Conn.database_id,
    api_base_url: Optional[str] = _Conn.api_base_url,
    api_token: Optional[str] = _Conn.api_token,
) -> None:
    """Keep the latest N checkpoints of each thread plus the tagged ones; delete the rest."""
    if bool(thread) == all_threads:
        typer.echo("error: name threads with --thread ID (repeatable) or pass --all", err=True)
        raise typer.Exit(EXIT_USAGE)
    age = parse_duration(max_age) if max_age else None
    bar: Any = None
    try:
        with _saver(account_id, database_id, api_base_url, api_token) as saver:
            def progress(done: int, total: int) -> None:
                nonlocal bar
                if as_json or not sys.stderr.isatty():
                    return
                if bar is None:
                    bar = typer.progressbar(length=total, label="compacting", file=sys.stderr)
                    bar.__enter__()
                bar.update(done - bar.pos)

            summary = compact(saver, keep=keep, threads=thread or None, max_age=age,
                              dry_run=dry_run, lease_ttl=lease_ttl, break_lease=break_lease,
                              batch_checkpoints=batch_checkpoints, progress=progress)
    except D1Error as exc:
        _fail(exc)
        return
    finally:
        if bar is not None:
            bar.__exit__(None, None, None)
    if as_json:
        typer.echo(json.dumps(summary.as_dict(with_plan=dry_run), indent=2))
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
               f" threads expired; {summary.requests} requests in {summary.seconds:.1f} s")


def rekey_cmd(
    dry_run: bool = typer.Option(False, "--dry-run", help="Change nothing; count values per key."),
    as_json: bool = typer.Option(False, "--json", help="Print a JSON summary (counts per key id before and after)."),
    seal_plaintext: bool = typer.Option(False, "--seal-plaintext", help="Also seal values written before keys were set (trusts them)."),
    batch_rows: int = typer.Option(100, "--batch-rows", min=1, help="Rows re-sealed per request (one atomic batch)."),
    lease_ttl: int = typer.Option(300, min=1, help="Seconds the run's lease lives unless renewed (by each batch)."),
    break_lease: bool = typer.Option(False, "--break-lease", help="Remove a stale lease first (only if no run is active)."),
    account_id: Optional[str] = _Conn.account_id,
    database_id: Optional[str] = _Conn.database_id,
    api_base_url: Optional[str] = _Conn.api_base_url,
    api_token: Optional[str] = _Conn.api_token,
) -> None:
    """Re-seal every stored value under the newest key of D1SAVER_ENCRYPTION_KEYS (newest
    first), so that older keys can be dropped. Resumable: a rerun continues."""
    def progress(table: str, counts: RekeyCounts) -> None:
        if not as_json and sys.stderr.isatty():
            typer.echo(f"\rrekeying {table}: {counts.rewritten} rows", err=True, nl=False)

    try:
        with _saver(account_id, database_id, api_base_url, api_token) as saver:
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
        typer.echo(f"dry run: nothing was changed; {summary.to_rewrite} values would be "
                   f"re-sealed under {summary.newest_key}")
        return
    typer.echo(f"after:  {counts(summary.after or {})}")
    left = (f"; {summary.plaintext_left} plaintext rows left (--seal-plaintext seals them)"
            if summary.plaintext_left else "")
    typer.echo(f"re-sealed {summary.rewritten} rows under {summary.newest_key} in "
               f"{summary.pages} pages{left}; {summary.requests} requests in "
               f"{summary.seconds:.1f} s")


def tag_cmd(
    thread_id: str = typer.Argument(..., help="Thread id."),
    checkpoint_id: str = typer.Argument(..., help="Checkpoint id (see `d1saver history`)."),
    name: str = typer.Argument(..., help="Tag name, unique per thread and namespace."),
    ns: str = typer.Option("", "--ns", help="Checkpoint namespace (subgraph)."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
    account_id: Optional[str] = _Conn.account_id,
    database_id: Optional[str] = _Conn.database_id,
    api_base_url: Optional[str] = _Conn.api_base_url,
    api_token: Optional[str] = _Conn.api_token,
) -> None:
    """Tag a checkpoint so that compaction keeps it."""
    with _connected(account_id, database_id, api_base_url, api_token) as saver:
        saver.tag(_config(thread_id, ns, checkpoint_id), name)
    if as_json:
        typer.echo(json.dumps({"thread_id": thread_id, "checkpoint_ns": ns,
                               "checkpoint_id": checkpoint_id, "tag": name, "tagged": True}))
        return
    typer.echo(f"tagged {printable(thread_id)}/{printable(checkpoint_id)} as {name!r}")


def untag_cmd(
    thread_id: str = typer.Argument(..., help="Thread id."),
    name: str = typer.Argument(..., help="Tag name."),
    ns: str = typer.Option("", "--ns", help="Checkpoint namespace (subgraph)."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
    account_id: Optional[str] = _Conn.account_id,
    database_id: Optional[str] = _Conn.database_id,
    api_base_url: Optional[str] = _Conn.api_base_url,
    api_token: Optional[str] = _Conn.api_token,
) -> None:
    """Remove a tag; the checkpoint becomes subject to compaction again."""
    with _connected(account_id, database_id, api_base_url, api_token) as saver:
        existed = saver.untag(_config(thread_id, ns, None), name)
    if as_json:
        typer.echo(json.dumps({"thread_id": thread_id, "checkpoint_ns": ns, "tag": name, "untagged": existed}))
    if not existed:
        typer.echo(f"error: thread {thread_id!r} has no tag {name!r}", err=True)
        raise typer.Exit(EXIT_NOT_FOUND)
    if not as_json:
        typer.echo(f"untagged {name!r} in {printable(thread_id)}")


def threads_cmd(
    sort: str = typer.Option("updated", "--sort", help="updated | checkpoints | bytes | id."),
    limit: int = typer.Option(50, "--limit", min=0, help="Rows to show (0: all)."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
    account_id: Optional[str] = _Conn.account_id,
    database_id: Optional[str] = _Conn.database_id,
    api_base_url: Optional[str] = _Conn.api_base_url,
    api_token: Optional[str] = _Conn.api_token,
) -> None:
    """List threads: checkpoints, namespaces, last update, stored bytes."""
    keys = {"updated": lambda t: t.updated or "", "checkpoints": lambda t: t.checkpoints,
            "bytes": lambda t: t.bytes, "id": lambda t: t.thread_id}
    if sort not in keys:
        raise typer.BadParameter(f"--sort takes one of {', '.join(keys)}")
    with _connected(account_id, database_id, api_base_url, api_token) as saver:
        infos = list_threads(saver)
    infos.sort(key=keys[sort], reverse=sort != "id")
    if limit:
        infos = infos[:limit]
    if as_json:
        typer.echo(json.dumps([i.__dict__ for i in infos], indent=2))
        return
    fleet = any(hasattr(i, "database_id") for i in infos)
    db_head = f" {'database':<20}" if fleet else ""
    typer.echo(f"{'thread_id':<40}{db_head} {'checkpoints':>11} {'ns':>3} {'bytes':>10}  updated")
    for i in infos:
        db = f" {getattr(i, 'database_id', ''):<20}" if fleet else ""
        typer.echo(f"{printable(i.thread_id):<40}{db} {i.checkpoints:>11} {i.namespaces:>3} {i.bytes:>10}  {printable(str(i.updated))}")


def history_cmd(
    thread_id: str = typer.Argument(..., help="Thread id."),
    limit: int = typer.Option(100, "--limit", min=1, help="Newest checkpoints to show (>= 1)."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
    account_id: Optional[str] = _Conn.account_id,
    database_id: Optional[str] = _Conn.database_id,
    api_base_url: Optional[str] = _Conn.api_base_url,
    api_token: Optional[str] = _Conn.api_token,
) -> None:
    """A thread's checkpoints, newest first: ids, parents, step, source, writes, tags."""
    with _connected(account_id, database_id, api_base_url, api_token) as saver:
        rows = history(saver, thread_id, limit)
    if as_json:
        typer.echo(json.dumps(rows, indent=2))
        return
    if not rows:
        typer.echo(f"thread {thread_id!r} has no checkpoints", err=True)
        raise typer.Exit(EXIT_NOT_FOUND)
    for r in rows:
        shown = {k: printable(str(r[k])) for k in ("checkpoint_id", "parent_checkpoint_id",
                                                   "checkpoint_ns", "tags", "source")}
        ns = f" ns={shown['checkpoint_ns']}" if r["checkpoint_ns"] else ""
        tags = f" tags={shown['tags']}" if r["tags"] else ""
        db = f" db={r['database_id']}" if "database_id" in r else ""
        typer.echo(f"{shown['checkpoint_id']}  step {r['step']!s:>3} "
                   f"{shown['source'] if r['source'] else '':<6} writes={r['writes']:<3} "
                   f"bytes={r['bytes']:<7} parent={shown['parent_checkpoint_id']}{ns}{tags}{db}")


def rebalance_cmd(
    previous: Optional[str] = typer.Option(
        None, "--previous-database-id",
        help="Databases threads may still be in besides the current ones (comma-separated): "
             "those removed from D1_DATABASE_ID."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Change nothing; print the moves."),
    as_json: bool = typer.Option(False, "--json", help="Print a JSON summary."),
    lease_ttl: int = typer.Option(300, min=1, help="Seconds each database's lease lives unless renewed (by each batch)."),
    break_lease: bool = typer.Option(False, "--break-lease", help="Remove stale leases first (only if no run is active)."),
    concurrency: int = typer.Option(8, min=1, help="Threads moved at once."),
    account_id: Optional[str] = _Conn.account_id,
    database_id: Optional[str] = _Conn.database_id,
    api_base_url: Optional[str] = _Conn.api_base_url,
    api_token: Optional[str] = _Conn.api_token,
) -> None:
    """Move each thread to its home after the database list changed: copy, verify, delete."""
    try:
        extra = ({"previous_database_ids": [p.strip() for p in previous.split(",")]}
                 if previous else {})  # "c, d" as D1_DATABASE_ID reads it
        with _saver(account_id, database_id, api_base_url, api_token, **extra) as saver, \
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
                   f"changed meanwhile, {summary.threads_failed} failed; {summary.requests} "
                   f"requests in {summary.seconds:.1f} s")
    if summary.errors:
        raise typer.Exit(EXIT_D1)


def check_cmd(
    thread_id: Optional[str] = typer.Option(None, "--thread-id", help="Check one thread (default: every thread)."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
    account_id: Optional[str] = _Conn.account_id,
    database_id: Optional[str] = _Conn.database_id,
    api_base_url: Optional[str] = _Conn.api_base_url,
    api_token: Optional[str] = _Conn.api_token,
) -> None:
    """Check the content-addressed chunk table: every chunk a row lists is stored, and every
    stored chunk is listed. Prints the threads that break either rule; exit 1 if any."""
    with _connected(account_id, database_id, api_base_url, api_token) as saver:
        found = check_chunks(saver, thread_id)
        if thread_id is not None and not found and not history(saver, thread_id, 1):
            typer.echo(f"error: thread {printable(thread_id)!s} has no checkpoints", err=True)
            raise typer.Exit(EXIT_NOT_FOUND)
    if as_json:
        typer.echo(json.dumps([t.__dict__ for t in found], indent=2))
    else:
        for t in found:
            db = f" ({getattr(t, 'database_id')})" if hasattr(t, "database_id") else ""
            typer.echo(f"{printable(t.thread_id)}{db}: {t.missing} chunks missing, "
                       f"{t.unreferenced} unreferenced")
        scope = f"thread {printable(thread_id)}" if thread_id is not None else "every thread"
        typer.echo(f"{len(found)} threads not exact" if found else f"{scope}: chunk table exact")
    if found:
        raise typer.Exit(EXIT_D1)


def _short(value: Any, width: int = 100) -> str:
    text = printable(value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str))
    return text if len(text) <= width else text[: width - 3] + "..."


def show_cmd(
    thread_id: str = typer.Argument(..., help="Thread id."),
    checkpoint_id: Optional[str] = typer.Option(None, "--checkpoint", help="A checkpoint id (default: the newest)."),
    ns: str = typer.Option("", "--ns", help="Checkpoint namespace (a subgraph's); default the root."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON: every value whole."),
    account_id: Optional[str] = _Conn.account_id,
    database_id: Optional[str] = _Conn.database_id,
    api_base_url: Optional[str] = _Conn.api_base_url,
    api_token: Optional[str] = _Conn.api_token,
) -> None:
    """A checkpoint's state: channel values decoded, pending writes, next tasks, interrupts,
    metadata, tags and stored bytes."""
    with _connected(account_id, database_id, api_base_url, api_token) as saver:
        snap = inspector.snapshot(saver, thread_id, checkpoint_id, ns)  # NotFoundError: exit 4
    if as_json:
        typer.echo(json.dumps(snap, indent=2, ensure_ascii=False))
        return
    meta = snap["metadata"]
    db = f"  database {snap['database_id']}" if "database_id" in snap else ""
    typer.echo(f"thread {printable(thread_id)}  checkpoint {snap['checkpoint_id']}"
               f"{'  ns ' + printable(ns) if ns else ''}{db}")
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


def diff_cmd(
    thread_id: str = typer.Argument(..., help="Thread id."),
    a: str = typer.Argument(..., help="The older checkpoint id."),
    b: str = typer.Argument(..., help="The newer checkpoint id."),
    ns: str = typer.Option("", "--ns", help="Checkpoint namespace (a subgraph's); default the root."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
    account_id: Optional[str] = _Conn.account_id,
    database_id: Optional[str] = _Conn.database_id,
    api_base_url: Optional[str] = _Conn.api_base_url,
    api_token: Optional[str] = _Conn.api_token,
) -> None:
    """What changed between two checkpoints of a thread, channel by channel (messages added and
    removed)."""
    with _connected(account_id, database_id, api_base_url, api_token) as saver:
        found = inspector.diff(saver, thread_id, a, b, ns)
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


def _config(thread_id: str, ns: str, checkpoint_id: str | None) -> dict[str, Any]:
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


app = typer.Typer(cls=OneLineUsageErrors, help="Compaction of d1saver checkpoints.",
                  no_args_is_help=True, add_completion=False)
register(app)

