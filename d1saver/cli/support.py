"""Public helpers for d1saver's command-line apps and the packages that plug commands into it
(`d1saver`, `python -m compaction`): usage errors on one line, and stored text made safe to
print on a terminal."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import typer
from typer.core import TyperGroup

from d1saver.http import telemetry

try:  # recent typer carries its own copy of click
    from typer._click.core import Context
    from typer._click.exceptions import UsageError
except ImportError:  # older typer runs on click
    from click import Context, UsageError  # type: ignore[no-redef,assignment,unused-ignore]

# Exit codes of every d1saver command (docs list them): 0 done, 1 a runtime or D1 error,
# 2 bad usage or configuration, 3 the maintenance lease is held, 4 not found.
EXIT_RUNTIME = 1
EXIT_USAGE = 2


def usage_error(message: str) -> typer.Exit:
    """Print `error: message` on one line and give the Exit (code 2) to raise."""
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(EXIT_USAGE)


class OneLineUsageErrors(TyperGroup):
    """A command group whose usage errors (an option out of range, a missing argument, a
    BadParameter raised by a command) print one `error:` line and exit 2, as the commands' own
    errors do, instead of Rich's framed panel: scripts and CI logs read one line."""

    def invoke(self, ctx: Context) -> Any:
        try:
            with telemetry.command(ctx):  # a span per command, with OpenTelemetry installed
                return super().invoke(ctx)
        except UsageError as exc:
            see = f" (see '{exc.ctx.command_path} --help')" if exc.ctx is not None else ""
            raise usage_error(" ".join(exc.format_message().split()) + see) from None


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
