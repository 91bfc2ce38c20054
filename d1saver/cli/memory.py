"""`d1saver store ...` and `d1saver cache clear`: look into and clean up D1Store's long-term
memory and D1Cache's entries from a terminal, with the connection settings the other commands
use (CLOUDFLARE_ACCOUNT_ID, CLOUDFLARE_API_TOKEN, D1_DATABASE_ID, D1_API_BASE_URL,
D1SAVER_ENCRYPTION_KEYS).

A NAMESPACE is typed as labels separated by '/' (`users/u1/memories`) or as a JSON array of
labels (`'["users", "a/b"]'`) when a label holds a '/'. Exit codes: 0 done, 1 a D1 error,
2 bad usage (a namespace refused, or `rm` or `cache clear` without --yes off a terminal; a
schema older than this d1saver's met by a command that only reads), 4 no such item (or no
schema at all: `ls`, `get` and `namespaces` only read, so they never create nor migrate one).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Optional

import typer

from d1saver.cli.support import (CONTEXT_SETTINGS, EXIT_USAGE, Connection, OneLineUsageErrors,
                                 connection_options, printable, table, usage_error)
from d1saver.core.errors import ConfigError, D1Error, InvalidInputError, SchemaNotReadyError

EXIT_D1, EXIT_NOT_FOUND = 1, 4

store_app = typer.Typer(cls=OneLineUsageErrors, no_args_is_help=True, add_completion=False,
                        context_settings=CONTEXT_SETTINGS, help="Long-term memory (D1Store): list, show and delete items.")
cache_app = typer.Typer(cls=OneLineUsageErrors, no_args_is_help=True, add_completion=False,
                        context_settings=CONTEXT_SETTINGS, help="The node cache (D1Cache).")

_NS_HELP = "Labels separated by '/' (users/u1), or a JSON array of labels."


def _namespace(text: str, *, cache: bool = False) -> tuple[str, ...]:
    from d1saver.memory import namespaces as _ns  # when run: `--help` loads no LangGraph

    try:
        return _ns.parse_cli(text, cache=cache)
    except InvalidInputError as exc:
        raise usage_error(str(exc)) from None


@contextmanager
def _open(cls: str, conn: Connection, *, read_only: bool = False) -> Iterator[Any]:
    """The store or cache of one command: d1saver.memory's `cls` ("D1Store" or "D1Cache"),
    imported when a command opens it. `read_only`: it never creates nor migrates a schema; a
    database without one is reported (exit 4; over several databases, read as empty and named
    on stderr), one with an older schema too (exit 2); a bad setting is a usage error (exit 2), a
    D1 error exit 1."""
    from d1saver import memory

    try:
        with getattr(memory, cls).from_env(**conn.settings()) as opened:
            opened.read_only = read_only
            try:
                yield opened
            except SchemaNotReadyError as exc:
                _unready(exc, opened.database_id)
            if opened.unready:
                if set(opened.unready) == set(opened.database_ids):
                    _unready(SchemaNotReadyError(
                        "no database has a d1saver schema: nothing was ever stored there (this "
                        "command only reads, so it does not create one)"), None)
                for db in sorted(opened.unready):
                    typer.echo(f"note: database {db} has no d1saver schema (nothing stored "
                               "there)", err=True)
    except (ConfigError, InvalidInputError) as exc:
        raise usage_error(str(exc)) from None
    except D1Error as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(EXIT_D1) from None


def _unready(exc: SchemaNotReadyError, where: Optional[str]) -> None:
    typer.echo(f"error: {'' if where is None else f'database {where}: '}{exc}", err=True)
    raise typer.Exit(EXIT_NOT_FOUND if exc.version == 0 else EXIT_USAGE)


def _show(ns: tuple[str, ...]) -> str:
    return printable("/".join(ns)) if not any("/" in label for label in ns) else printable(
        json.dumps(list(ns), ensure_ascii=False))


@store_app.command("namespaces")
@connection_options
def namespaces_cmd(
    prefix: str = typer.Argument("", help=_NS_HELP + " Every namespace if omitted."),
    max_depth: Optional[int] = typer.Option(None, "--max-depth", min=1, help="Cut namespaces to this many labels."),
    limit: int = typer.Option(1000, "--limit", min=1, help="At most this many."),
    as_json: bool = typer.Option(False, "--json", help="Print a JSON array of label arrays."),
    *,
    conn: Connection,
) -> None:
    """List the namespaces that hold live items (under PREFIX)."""
    ns = _namespace(prefix)
    with _open("D1Store", conn, read_only=True) as store:
        found = store.list_namespaces(prefix=ns or None, max_depth=max_depth, limit=limit)
    if as_json:
        typer.echo(json.dumps([list(n) for n in found], ensure_ascii=False))
        return
    for n in found:
        typer.echo(_show(n))


@store_app.command("ls")
@connection_options
def ls_cmd(
    namespace: str = typer.Argument(..., help=_NS_HELP + " Its sub-namespaces are listed too."),
    limit: int = typer.Option(100, "--limit", min=1, help="At most this many items."),
    offset: int = typer.Option(0, "--offset", min=0, help="Skip this many first."),
    as_json: bool = typer.Option(False, "--json", help="Print items as JSON lines."),
    *,
    conn: Connection,
) -> None:
    """List the items of NAMESPACE and of the namespaces under it, newest first."""
    ns = _namespace(namespace)
    with _open("D1Store", conn, read_only=True) as store:
        items = store.search(ns, limit=limit, offset=offset, refresh_ttl=False)
    if as_json:
        for item in items:
            typer.echo(json.dumps(_as_dict(item), ensure_ascii=False))
        return
    rows = []
    for item in items:
        text = json.dumps(item.value, ensure_ascii=False)
        text = text if len(text) <= 80 else text[:77] + "..."
        rows.append([_show(item.namespace), printable(item.key),
                     item.updated_at.isoformat(timespec="milliseconds"), printable(text)])
    table(["namespace", "key", "updated", "value"], rows, header=False)


@store_app.command("get")
@connection_options
def get_cmd(
    namespace: str = typer.Argument(..., help=_NS_HELP),
    key: str = typer.Argument(..., help="The item's key."),
    *,
    conn: Connection,
) -> None:
    """Print one item as JSON (namespace, key, value, created_at, updated_at); exit 4 if none."""
    ns = _namespace(namespace)
    with _open("D1Store", conn, read_only=True) as store:
        item = store.get(ns, key, refresh_ttl=False)
    if item is None:
        typer.echo(f"error: no item {printable(key)!r} in {_show(ns)}", err=True)
        raise typer.Exit(EXIT_NOT_FOUND)
    typer.echo(json.dumps(_as_dict(item), ensure_ascii=False, indent=2))


@store_app.command("rm")
@connection_options
def rm_cmd(
    namespace: str = typer.Argument(..., help=_NS_HELP),
    key: Optional[str] = typer.Argument(None, help="One item's key; without it, every item of NAMESPACE and under it."),
    yes: bool = typer.Option(False, "--yes", "-y", help="Do not ask for confirmation."),
    *,
    conn: Connection,
) -> None:
    """Delete one item, or every item of NAMESPACE and the namespaces under it."""
    ns = _namespace(namespace)
    if not ns:
        raise usage_error("name a namespace: rm does not delete every namespace at once")
    what = (f"item {printable(key)!r} of {_show(ns)}" if key is not None
            else f"every item of {_show(ns)} and of the namespaces under it")
    if not yes:
        if not sys.stdin.isatty():
            raise usage_error(f"this deletes {what}: pass --yes (no terminal to ask on)")
        if not typer.confirm(f"Delete {what}?"):
            raise typer.Exit(0)
    with _open("D1Store", conn) as store:
        if key is not None:
            if store.get(ns, key, refresh_ttl=False) is None:
                typer.echo(f"error: no item {printable(key)!r} in {_show(ns)}", err=True)
                raise typer.Exit(EXIT_NOT_FOUND)
            store.delete(ns, key)
            gone = 1
        else:
            gone = store.delete_namespace(ns)
    typer.echo(f"deleted {gone} item{'s' if gone != 1 else ''}")


@cache_app.command("clear")
@connection_options
def cache_clear_cmd(
    namespace: Optional[str] = typer.Argument(
        None, help=_NS_HELP + " Labels may hold a period (a node's module path). Every entry "
        "if omitted."),
    yes: bool = typer.Option(False, "--yes", "-y", help="Do not ask for confirmation (needed off a terminal)."),
    *,
    conn: Connection,
) -> None:
    """Delete the cache entries of NAMESPACE (exactly that namespace, as BaseCache.clear), or
    every entry; asks first on a terminal, and prints how many it deleted."""
    ns = None if namespace is None else _namespace(namespace, cache=True)
    what = "every cache entry" if ns is None else f"the cache entries of namespace {_show(ns)}"
    if not yes:
        if not sys.stdin.isatty():
            raise usage_error(f"this deletes {what}: pass --yes (no terminal to ask on)")
        if not typer.confirm(f"Delete {what}?"):
            raise typer.Exit(0)
    with _open("D1Cache", conn) as cache:
        gone = cache.clear_and_count(None if ns is None else [ns])
    typer.echo(f"deleted {gone} cache entr{'y' if gone == 1 else 'ies'}"
               + ("" if ns is None else f" of namespace {_show(ns)}"))


def _as_dict(item: Any) -> dict[str, Any]:
    return {"namespace": list(item.namespace), "key": item.key, "value": item.value,
            "created_at": item.created_at.isoformat(), "updated_at": item.updated_at.isoformat()}


__all__ = ["cache_app", "store_app"]
