"""The `d1saver` command. `app` and `main` live in d1saver.cli.commands, imported on first use,
so that `d1saver.cli.support`, which every command module imports, loads without an import
cycle and without the commands."""

from __future__ import annotations

from typing import Any


def __getattr__(name: str) -> Any:
    if name in ("app", "main"):
        from d1saver.cli import commands

        return getattr(commands, name)
    raise AttributeError(f"module 'd1saver.cli' has no attribute {name!r}")
