"""The web inspector (`d1saver ui`): threads, checkpoints, forks, interrupts, diffs, storage and
memory in a browser, read-only, served from this machine (d1saver/ui/app.py); the data comes
from d1saver.inspection, which the CLI's `--json` shares. Needs the `ui` extra (Jinja2)."""

from __future__ import annotations

from typing import Any

__all__ = ["Inspector", "make_server"]


def __getattr__(name: str) -> Any:
    if name == "Inspector":
        from d1saver.ui.app import Inspector

        return Inspector
    if name == "make_server":
        from d1saver.ui.server import make_server

        return make_server
    raise AttributeError(f"module 'd1saver.ui' has no attribute {name!r}")
