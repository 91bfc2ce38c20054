"""The `d1saver` command: the local D1 server, the demo, long-term memory and cache (store,
cache), and the compaction commands."""

from __future__ import annotations

from importlib.metadata import entry_points
from pathlib import Path
from typing import Optional

import typer

from d1saver.cli.support import OneLineUsageErrors, usage_error

app = typer.Typer(
    cls=OneLineUsageErrors,
    help="LangGraph checkpoints in Cloudflare D1: local D1, demo, and compaction.",
    no_args_is_help=True,
    add_completion=False,
)


@app.command()
def serve(
    host: str = typer.Option("127.0.0.1", help="Address to bind (keep it on loopback)."),
    port: int = typer.Option(8787, min=1, max=65535, help="Port to listen on."),
    data_dir: Optional[Path] = typer.Option(None, help="One SQLite file per database here; in memory if unset."),
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
) -> None:
    """Serve a local D1 that speaks D1's REST API, at http://HOST:PORT/client/v4."""
    from d1saver.local import FaultPlan
    from d1saver.local import serve as run_server

    faults = None
    if fault_429 or fault_5xx or fault_drop or fault_lost or fault_transient:
        try:
            faults = FaultPlan(seed=seed, rate_429=fault_429, rate_5xx=fault_5xx,
                               rate_drop=fault_drop, rate_lost_response=fault_lost,
                               rate_transient=fault_transient,
                               retry_after_s=retry_after)
        except ValueError as exc:  # the rates add up to more than 1
            raise usage_error(str(exc)) from None
    typer.echo(f"local D1 on http://{host}:{port}/client/v4 "
               f"({'in memory' if data_dir is None else data_dir}); Ctrl-C stops it")
    run_server(host, port, data_dir, latency_ms=latency_ms, api_token=token, faults=faults,
               verbose=verbose)


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


def _mount_memory() -> None:
    """`d1saver store ...` and `d1saver cache ...` (d1saver/cli/memory.py), loaded with the app."""
    from d1saver.cli.memory import cache_app, store_app

    app.add_typer(store_app, name="store")
    app.add_typer(cache_app, name="cache")


_mount_memory()


def _mount_plugins() -> None:
    """Add the commands of installed packages that register under "d1saver.commands" (the
    compaction package does: compact, tag, untag, threads, history). An entry point, not an
    import, so d1saver depends on nothing above it."""
    for entry in entry_points(group="d1saver.commands"):
        entry.load()(app)


_mount_plugins()


def main() -> None:
    app()


if __name__ == "__main__":
    main()
