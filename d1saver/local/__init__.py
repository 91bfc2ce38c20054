"""A local D1: Cloudflare D1's REST API over SQLite, as an httpx transport or an HTTP server."""

from __future__ import annotations

from typing import Any

from .engine import LocalD1
from .envelope import LocalResponse
from .faults import DroppedConnection, Fault, FaultPlan
from .stats import EngineStats
from .transport import LocalD1Transport

__all__ = [
    "DroppedConnection",
    "EngineStats",
    "Fault",
    "FaultPlan",
    "LocalD1",
    "LocalD1Transport",
    "LocalResponse",
    "make_server",
    "serve",
]


def __getattr__(name: str) -> Any:
    # Imported lazily so that `python -m d1saver.local.server` does not import its own module twice.
    if name in ("make_server", "serve"):
        from . import server

        return getattr(server, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
