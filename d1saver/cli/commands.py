"""The `d1saver` command: the local D1 server, the demo, long-term memory and cache (store,
cache), and the compaction commands.

Start-up stays light: this module and the command modules it mounts import Typer and d1saver's
errors only; each command imports what it runs when it runs (benchmarks/cli_bench.py measures
it, tests/cli/test_cli.py holds it)."""

from __future__ import annotations

import errno
import socket
import sys
from contextlib import suppress
from pathlib import Path
from typing import Optional

import typer

from d1saver.cli.support import (CONTEXT_SETTINGS, EXIT_RUNTIME, STATE, OneLineUsageErrors,
                                 print_version, set_verbosity, usage_error)
from d1saver.core.errors import ConfigError
from d1saver.local.defaults import DEFAULT_DATABASE, DEFAULT_PORT


app = typer.Typer(
    cls=OneLineUsageErrors,
    help="LangGraph checkpoints in Cloudflare D1: local D1, demo, and compaction.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings=CONTEXT_SETTINGS,
)


@app.callback()
def _options(
    version: bool = typer.Option(False, "--version", "-V", callback=print_version, is_eager=True,
                                 help="Print the version and exit."),
    verbose: int = typer.Option(0, "--verbose", "-v", count=True,
                                help="Log to stderr: -v each maintenance step (INFO), -vv every D1 request too (DEBUG). These flags may also follow the command."),
    debug: bool = typer.Option(False, "--debug", help="Show the traceback of an unexpected error."),
) -> None:
    """LangGraph checkpoints in Cloudflare D1: local D1, demo, and compaction."""
    STATE["debug"] = debug
    set_verbosity(verbose)


@app.command()
def serve(
    host: str = typer.Option("127.0.0.1", help="Address to bind (keep it on loopback)."),
    port: int = typer.Option(DEFAULT_PORT, min=0, max=65535,
                             help="Port to listen on; 0 picks a free one (not 8787, which `wrangler dev` takes)."),
    data_dir: Optional[Path] = typer.Option(None, help="One SQLite file per database here; in memory if unset."),
    database: list[str] = typer.Option([DEFAULT_DATABASE], "--database", metavar="NAME",
                                       help="A database to serve, created if missing (repeat for more). Databases already in --data-dir are served too; any other id gets D1's not-found error (404, code 7404)."),
    latency_ms: float = typer.Option(0.0, min=0.0, help="Delay added to every request, to imitate the network."),
    token: Optional[str] = typer.Option(None, envvar="LOCAL_D1_API_TOKEN", show_envvar=True,
                                        help="Bearer token to require (any if unset)."),
    seed: int = typer.Option(0, help="Seed of the fault injection."),
    fault_429: float = typer.Option(0.0, min=0.0, max=1.0, help="Share of requests refused with 429 + Retry-After."),
    fault_5xx: float = typer.Option(0.0, min=0.0, max=1.0, help="Share of requests refused with 500/503."),
    fault_drop: float = typer.Option(0.0, min=0.0, max=1.0, help="Share of requests dropped before running."),
    fault_lost: float = typer.Option(0.0, min=0.0, max=1.0, help="Share of requests run and committed, then the response lost."),
    fault_transient: float = typer.Option(0.0, min=0.0, max=1.0, help="Share of requests answered with a D1 error Cloudflare documents as transient."),
    retry_after: float = typer.Option(1.0, min=0.0, help="Retry-After seconds on injected 429s."),
    verbose: bool = typer.Option(False, help="Log each request line."),
    create: bool = typer.Option(False, "--create/--no-create",
                                help="Also create a database for any other id on its first request (said on stderr): then a typo in D1_DATABASE_ID makes a new, empty database."),
) -> None:
    """Serve a local D1 that speaks D1's REST API, at http://HOST:PORT/client/v4, and print the
    settings that point your code at it."""
    from d1saver.core.ids import validate_database_id
    from d1saver.local import FaultPlan
    from d1saver.local.server import client_settings, make_server

    try:
        for name in database:
            validate_database_id(name)
    except ConfigError as exc:
        raise usage_error(f"--database: {exc}") from None
    faults = None
    if fault_429 or fault_5xx or fault_drop or fault_lost or fault_transient:
        try:
            faults = FaultPlan(seed=seed, rate_429=fault_429, rate_5xx=fault_5xx,
                               rate_drop=fault_drop, rate_lost_response=fault_lost,
                               rate_transient=fault_transient,
                               retry_after_s=retry_after)
        except ValueError as exc:  # the rates add up to more than 1
            raise usage_error(str(exc)) from None
    try:  # bind first: nothing is printed for a server that cannot start
        server = make_server(host, port, data_dir, latency_ms=latency_ms, api_token=token,
                             faults=faults, verbose=verbose, create=create,
                             databases=list(dict.fromkeys(database)),
                             on_create=lambda db, where: typer.echo(f"created database {db} ({where})", err=True))
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            raise usage_error(f"port {port} on {host} is in use: choose another with --port") from None
        if exc.errno == errno.EADDRNOTAVAIL or isinstance(exc, socket.gaierror):
            raise usage_error(f"cannot bind to {host}: give a local address with --host") from None
        raise
    served = ", ".join(server.engine.database_ids())
    others = ("any other id is created on its first request (--create)" if create
              else "any other id gets D1's not-found error")
    typer.echo(f"local D1 on http://{host}:{server.server_address[1]}/client/v4 "
               f"({'in memory' if data_dir is None else data_dir}); Ctrl-C stops it\n"
               f"databases: {served}; {others}\n"
               f"point your code and the d1saver commands at it:\n"
               f"  {client_settings(server, database[0], token_required=token is not None)}")
    with server, suppress(KeyboardInterrupt):  # Ctrl-C stops it; the socket is closed
        server.serve_forever()


@app.command()
def demo(
    data_dir: Optional[Path] = typer.Option(None, help="Keep the demo's database here (in memory if unset)."),
) -> None:
    """Run a tool-calling agent on the embedded local D1: crash, resume, interrupt, history."""
    try:
        from d1saver.demo import run
    except ModuleNotFoundError as exc:
        if exc.name is None or exc.name.split(".")[0] != "langgraph":
            raise
        raise usage_error("the demo runs a LangGraph graph: pip install 'd1saver[demo]'") from None
    run(data_dir)


gateway_app = typer.Typer(cls=OneLineUsageErrors, no_args_is_help=True, add_completion=False,
                          context_settings=CONTEXT_SETTINGS, help="The gateway Worker: D1's REST API on D1 bindings, deployed by you.")
app.add_typer(gateway_app, name="gateway")


@gateway_app.command("init")
def gateway_init(
    directory: Path = typer.Argument(..., help="Folder to write the Worker into (created if missing)."),
    force: bool = typer.Option(False, "--force", help="Overwrite the gateway's files if they exist."),
) -> None:
    """Write the gateway Worker (worker/, wrangler.toml, package.json, schema.sql, a .gitignore
    and its guide as README.md) to deploy it."""
    from d1saver.cli import gateway

    try:
        written = gateway.init(directory, force=force)
    except FileExistsError as exc:
        raise usage_error(str(exc)) from None
    typer.echo(f"wrote {len(written)} files to {directory}. Next, in that folder (its README.md "
               "has each step): npm install; npx wrangler d1 create NAME; edit wrangler.toml "
               "(your database ids); npx wrangler deploy; npx wrangler secret put API_TOKEN")


def _mount_memory() -> None:
    """`d1saver store ...` and `d1saver cache ...` (d1saver/cli/memory.py), loaded with the app."""
    from d1saver.cli.memory import cache_app, store_app

    app.add_typer(store_app, name="store")
    app.add_typer(cache_app, name="cache")


_mount_memory()


def _mount_ui() -> None:
    """`d1saver ui`: the web inspector (d1saver/cli/ui.py; the `ui` extra)."""
    from d1saver.cli.ui import ui

    app.command("ui")(ui)


_mount_ui()


def _mount_maintenance() -> None:
    """The maintenance commands (d1saver/cli/maintenance.py: compact, rebalance, rekey, tag,
    untag, threads, history, check, show, diff, gateway build), on d1saver.compaction's jobs."""
    from d1saver.cli.maintenance import register

    register(app)


_mount_maintenance()


def main() -> None:
    """The console script: an unexpected error prints one line (exit 1); --debug adds the traceback."""
    try:
        app()
    except Exception as exc:  # the last line of defence of a command line (re-raised with --debug)
        if STATE["debug"] or "--debug" in sys.argv[1:]:
            raise
        typer.echo(f"error: {type(exc).__name__}: {exc} (run with --debug for the traceback)", err=True)
        sys.exit(EXIT_RUNTIME)


if __name__ == "__main__":
    main()
