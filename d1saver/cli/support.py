"""Public helpers for d1saver's command-line apps and the packages that plug commands into it
(`d1saver`, `python -m d1saver`): usage errors on one line, the global flags (-v, --debug,
-V) taken before or after a command, tables, and stored text made safe to print on a terminal.

It imports only Typer: the commands import what they use when they run, so that `--help` and
`--version` start without loading LangGraph, httpx or pydantic.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import io
import logging
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from typing import Any, Optional, TypeVar

import typer
from typer.core import TyperGroup

from d1saver.http import telemetry

try:  # recent typer carries its own copy of click
    from typer._click.core import Command, Context, Parameter
    from typer._click.exceptions import UsageError
except ImportError:  # older typer runs on click
    from click import (  # type: ignore[no-redef,assignment,unused-ignore]
        Command, Context, Parameter, UsageError)

# Exit codes of every d1saver command (docs list them): 0 done, 1 a runtime or D1 error,
# 2 bad usage or configuration, 3 the maintenance lease is held, 4 not found.
EXIT_RUNTIME = 1
EXIT_USAGE = 2


def usage_error(message: str) -> typer.Exit:
    """Print `error: message` on one line and give the Exit (code 2) to raise."""
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(EXIT_USAGE)


# -h as well as --help, in every group and command (click hands it down to subcontexts).
CONTEXT_SETTINGS: dict[str, Any] = {"help_option_names": ["-h", "--help"]}


def _asks_help(ctx: Context) -> bool:
    """Whether the rest of the command line (what the group's invoke will hand on) asks for a
    help page (-h/--help before any `--`)."""
    rest = [*(getattr(ctx, "_protected_args", None) or getattr(ctx, "protected_args", [])),
            *ctx.args]
    rest = rest[:rest.index("--")] if "--" in rest else rest
    return any(arg in ctx.help_option_names for arg in rest)


class OneLineUsageErrors(TyperGroup):
    """A command group whose usage errors (an option out of range, a missing argument, a
    BadParameter raised by a command) print one `error:` line and exit 2, as the commands' own
    errors do, instead of Rich's framed panel: scripts and CI logs read one line.

    Each command it hands out also takes the global flags (-v, --debug, -V), so that they
    work after the command's name as well as before it (hidden there: the top-level help
    lists them once)."""

    def invoke(self, ctx: Context) -> Any:
        try:
            # A span per command, with OpenTelemetry installed; not for a command's help, which
            # runs nothing (and so starts without importing OpenTelemetry's API).
            with nullcontext() if _asks_help(ctx) else telemetry.command(ctx):
                return super().invoke(ctx)
        except UsageError as exc:
            see = f" (see '{exc.ctx.command_path} --help')" if exc.ctx is not None else ""
            raise usage_error(" ".join(exc.format_message().split()) + see) from None
        finally:
            if ctx.parent is None:  # the command line is done: stop logging to its stderr
                set_verbosity(0)

    def get_command(self, ctx: Context, cmd_name: str) -> Command | None:
        command = super().get_command(ctx, cmd_name)
        if command is not None:
            add_global_options(command)
        return command


# --- the global flags: -v/--verbose, --debug, -V/--version -----------------------------------

# Set by the flags wherever they are given, read by the console script (`debug`) and by
# `set_verbosity`; one invocation at a time, as a command line runs.
STATE: dict[str, Any] = {"verbosity": 0, "debug": False}
LOGGER = "d1saver"  # compaction logs under d1saver.compaction, requests under d1saver
_handler: list[logging.Handler] = []


def set_verbosity(level: int) -> None:
    """Log to stderr (the current one): 1 (-v) each maintenance step, INFO; 2 (-vv) each D1
    request too, DEBUG (d1saver/http/client.py: never the token, never values); 0 nothing.
    Replaces the handler an earlier invocation in this process set."""
    STATE["verbosity"] = level
    logger = logging.getLogger(LOGGER)
    for old in _handler:
        logger.removeHandler(old)
    _handler.clear()
    if level <= 0:
        logger.setLevel(logging.NOTSET)
        return
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
    logger.addHandler(handler)
    _handler.append(handler)
    logger.setLevel(logging.DEBUG if level > 1 else logging.INFO)


def print_version(ctx: Context, _param: Parameter, value: bool) -> None:
    """The eager callback of --version: print it and stop."""
    if value and not ctx.resilient_parsing:
        from d1saver import __version__

        typer.echo(f"d1saver {__version__}")
        raise typer.Exit()


def _more_verbose(_ctx: Context, _param: Parameter, value: int) -> None:
    if value:
        set_verbosity(STATE["verbosity"] + value)


def _debug(_ctx: Context, _param: Parameter, value: bool) -> None:
    if value:
        STATE["debug"] = True


def _globals(
    _verbose: int = typer.Option(0, "-v", "--verbose", count=True, expose_value=False,
                                 hidden=True, callback=_more_verbose),
    _debug_: bool = typer.Option(False, "--debug", expose_value=False, hidden=True,
                                 callback=_debug),
    _version: bool = typer.Option(False, "-V", "--version", expose_value=False, hidden=True,
                                  is_eager=True, callback=print_version),
) -> None:
    """Never run: its options, made by Typer, are the global flags a command takes after it."""


def _global_options() -> list[Parameter]:
    holder = typer.Typer(add_completion=False)
    holder.command()(_globals)
    return list(typer.main.get_command(holder).params)


def add_global_options(command: Command) -> None:
    """Give `command` the global flags it does not declare itself (`serve --verbose` keeps its
    own meaning), once."""
    if getattr(command, "_d1saver_globals", False):
        return
    taken = {opt for param in command.params for opt in [*param.opts, *param.secondary_opts]}
    for option in _global_options():
        if not taken.intersection(option.opts):
            command.params.append(option)
    command._d1saver_globals = True  # type: ignore[attr-defined]


# --- the connection options: --account-id, --database-id, --api-base-url, --api-token ---------

@dataclasses.dataclass(frozen=True)
class Connection:
    """The connection options a command was given, None where the environment's hold (the
    keyword arguments of D1Saver.from_env, D1Store.from_env and D1Cache.from_env); its repr
    leaves the token out."""

    account_id: Optional[str] = None
    database_id: Optional[str] = None
    api_base_url: Optional[str] = None
    api_token: Optional[str] = dataclasses.field(default=None, repr=False)

    def settings(self) -> dict[str, Optional[str]]:
        """The options as keyword arguments of `from_env`."""
        return dataclasses.asdict(self)


# Every command that reaches D1 takes them after its own options (flags override the
# environment). The environment is the better place for the token (a flag shows in `ps`).
_CONNECTION = [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=option,
                                 annotation=Optional[str]) for name, option in [
    ("account_id", typer.Option(None, "--account-id", help="Default: $CLOUDFLARE_ACCOUNT_ID.")),
    ("database_id", typer.Option(None, "--database-id",
                                 help="Default: $D1_DATABASE_ID. Several: comma-separated.")),
    ("api_base_url", typer.Option(None, "--api-base-url",
                                  help="Default: $D1_API_BASE_URL or Cloudflare's API.")),
    ("api_token", typer.Option(None, "--api-token", help="Default: $CLOUDFLARE_API_TOKEN.",
                               show_default=False)),
]]

R = TypeVar("R")


def connection_options(command: Callable[..., R]) -> Callable[..., R]:
    """`command`, which takes a keyword `conn: Connection`, as a command with the connection
    options after its own (the signature Typer reads), called with `conn` made of them."""
    signature = inspect.signature(command)
    own = [p for p in signature.parameters.values() if p.name != "conn"]

    @functools.wraps(command)
    def with_connection(*args: Any, **kwargs: Any) -> R:
        conn = Connection(**{p.name: kwargs.pop(p.name, None) for p in _CONNECTION})
        return command(*args, conn=conn, **kwargs)

    with_connection.__signature__ = signature.replace(  # type: ignore[attr-defined]
        parameters=[*own, *_CONNECTION])
    return with_connection


# --- output ------------------------------------------------------------------------------------

def printable(text: str) -> str:
    """`text` with control and other unprintable characters (C0, C1, ESC, bidi overrides) escaped
    as repr() escapes them, and backslashes doubled, so that a stored id can neither drive the
    terminal nor pass for another id. Printable text, Unicode included, is left as it is."""
    if text.isprintable() and "\\" not in text:
        return text
    return "".join(c if c.isprintable() and c != "\\" else repr(c)[1:-1] for c in text)


@contextmanager
def progress_bar(label: str, *, quiet: bool = False) -> Iterator[Callable[[int, int], None]]:
    """A `(done, total)` callback that draws a progress bar on stderr when it is a terminal,
    and does nothing otherwise (or with `quiet`, e.g. under --json): cron logs stay clean."""
    state: dict[str, Any] = {}

    def report(done: int, total: int) -> None:
        if quiet or not sys.stderr.isatty() or total <= 0:
            return
        if "bar" not in state:
            state["bar"] = typer.progressbar(length=total, label=label, file=sys.stderr)
            state["bar"].__enter__()
            state["done"] = 0
        state["bar"].length = total
        state["bar"].update(max(0, done - state["done"]))
        state["done"] = done

    try:
        yield report
    finally:
        if "bar" in state:
            state["bar"].__exit__(None, None, None)


def table(headers: Sequence[str], rows: Iterable[Sequence[Any]], *, right: Sequence[str] = (),
          header: bool = True) -> None:
    """Print `rows` under `headers` as a table, through rich: columns aligned by display
    width, cells never cut (on a terminal narrower than the table, a long id folds onto the
    next line). Off a terminal (a pipe, a file, a test) the text is plain whatever its width
    (`table_lines`), so scripts read stable columns. `right` names the columns aligned right
    (numbers)."""
    if not sys.stdout.isatty():
        lines = table_lines(headers, rows, right=right, header=header)
        if lines:
            typer.echo("\n".join(lines))
        return
    from rich.console import Console

    Console(markup=False, emoji=False, highlight=False).print(
        _grid(headers, rows, right=right, header=header, style="bold"))


def table_lines(headers: Sequence[str], rows: Iterable[Sequence[Any]], *,
                right: Sequence[str] = (), header: bool = True) -> list[str]:
    """The table `table` prints, as plain lines: no colour, no wrapping whatever the width,
    no trailing spaces; cells are text, never markup."""
    from rich.console import Console

    console = Console(file=io.StringIO(), width=1_000_000, color_system=None, markup=False,
                      emoji=False, highlight=False)
    console.print(_grid(headers, rows, right=right, header=header, style=""))
    return [line.rstrip() for line in console.file.getvalue().splitlines()]  # type: ignore[attr-defined]


def _grid(headers: Sequence[str], rows: Iterable[Sequence[Any]], *, right: Sequence[str],
          header: bool, style: str) -> Any:
    from rich.table import Table

    grid = Table(box=None, show_header=header, pad_edge=False, padding=(0, 1),
                 header_style=style)
    for name in headers:
        grid.add_column(name, justify="right" if name in right else "left", overflow="fold")
    for row in rows:
        grid.add_row(*(str(cell) for cell in row))
    return grid
