"""A local D1: Cloudflare D1's REST API over SQLite, as an httpx transport or an HTTP server.

The names below are imported on first use (PEP 562): the command line reads the server's
defaults (.defaults) without loading the engine or httpx.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .engine import LocalD1
    from .envelope import LocalResponse
    from .faults import DroppedConnection, Fault, FaultPlan
    from .server import make_server, serve
    from .stats import EngineStats
    from .transport import LocalD1Transport

from .defaults import DEFAULT_DATABASE, DEFAULT_PORT

_MODULE_OF = {"LocalD1": "engine", "LocalResponse": "envelope", "DroppedConnection": "faults",
              "Fault": "faults", "FaultPlan": "faults", "EngineStats": "stats",
              "LocalD1Transport": "transport", "make_server": "server", "serve": "server"}

__all__ = [
    "DEFAULT_DATABASE",
    "DEFAULT_PORT",
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
    if name in _MODULE_OF:
        value = getattr(importlib.import_module(f"{__name__}.{_MODULE_OF[name]}"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
