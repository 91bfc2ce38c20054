"""Compaction commands, mounted on `d1saver` (placeholder until the compaction job lands)."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Add the compaction commands to a Typer app."""
