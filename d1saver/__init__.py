"""d1saver: LangGraph checkpoints in Cloudflare D1, over D1's REST API.

The names below are imported on first use (PEP 562), so that `import d1saver` and the
`d1saver` command start without loading LangGraph, httpx and pydantic until a name that
needs them is used (`d1saver --version` loads none of them).
"""

from __future__ import annotations

import importlib
import importlib.util
import warnings
from typing import TYPE_CHECKING, Any

from d1saver import upstream  # the standard library alone: cheap to import now (see below)

if TYPE_CHECKING:
    from d1saver import admin
    from d1saver.core.errors import (
        AuthenticationError,
        CheckpointConflictError,
        ConfigError,
        D1APIError,
        D1ConnectionError,
        D1Error,
        D1TimeoutError,
        FleetError,
        IntegrityError,
        InvalidInputError,
        LeaseHeldError,
        MissingConfigKeyError,
        NotFoundError,
        PlaintextValueError,
        QueryError,
        RateLimitError,
        ResponseError,
        SchemaNotReadyError,
        SerializationError,
        ServerError,
        StoredValueError,
        TransientQueryError,
        TransportError,
        UnknownKeyError,
        ValueTooLargeError,
        VerificationError,
    )
    from d1saver.core.protocol import Result, Statement, TraceEvent
    from d1saver.core.settings import D1Settings, load_settings
    from d1saver.http.client import D1Client
    from d1saver.http.retry import RetryPolicy
    from d1saver.memory import D1Cache, D1Store
    from d1saver.ops.reseal import RekeyCounts
    from d1saver.saver import D1Saver

    __version__: str

# Where each public name lives: the module imported when the name is first used.
_WHERE = {
    "d1saver.core.errors": (
        "AuthenticationError", "CheckpointConflictError", "ConfigError", "D1APIError",
        "D1ConnectionError", "D1Error", "D1TimeoutError", "FleetError", "IntegrityError",
        "InvalidInputError", "LeaseHeldError", "MissingConfigKeyError", "NotFoundError",
        "PlaintextValueError", "QueryError", "RateLimitError", "ResponseError",
        "SchemaNotReadyError", "SerializationError", "ServerError", "StoredValueError",
        "TransientQueryError", "TransportError", "UnknownKeyError", "ValueTooLargeError",
        "VerificationError"),
    "d1saver.core.protocol": ("Result", "Statement", "TraceEvent"),
    "d1saver.core.settings": ("D1Settings", "load_settings"),
    "d1saver.http.client": ("D1Client",),
    "d1saver.http.retry": ("RetryPolicy",),
    "d1saver.memory": ("D1Cache", "D1Store"),
    "d1saver.ops.reseal": ("RekeyCounts",),
    "d1saver.saver": ("D1Saver",),
}
_MODULE_OF = {name: module for module, names in _WHERE.items() for name in names}
_SUBMODULES = ("admin", "upstream")

# langgraph#8748: while the installed LangGraph's barrier and topic channels hand out their live
# containers, they hand out copies (d1saver/upstream.py; docs/RELIABILITY.md). Now if LangGraph's
# graph modules are loaded, else at the saver's first read of a thread.
upstream.ensure()

__all__ = [
    "__version__",
    "admin",
    "upstream",
    "AuthenticationError",
    "CheckpointConflictError",
    "ConfigError",
    "D1APIError",
    "D1Cache",
    "D1Client",
    "D1ConnectionError",
    "D1Error",
    "D1Saver",
    "D1Settings",
    "D1Store",
    "D1TimeoutError",
    "FleetError",
    "IntegrityError",
    "InvalidInputError",
    "LeaseHeldError",
    "MissingConfigKeyError",
    "NotFoundError",
    "PlaintextValueError",
    "QueryError",
    "RateLimitError",
    "RekeyCounts",
    "ResponseError",
    "SchemaNotReadyError",
    "Result",
    "RetryPolicy",
    "SerializationError",
    "ServerError",
    "Statement",
    "StoredValueError",
    "TraceEvent",
    "TransientQueryError",
    "TransportError",
    "UnknownKeyError",
    "ValueTooLargeError",
    "VerificationError",
    "load_settings",
]

# Names of 0.1.0 that shadowed the built-in exceptions: importable for one more release.
_DEPRECATED = {"TimeoutError": "D1TimeoutError", "ConnectionError": "D1ConnectionError"}


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:  # the one version is pyproject.toml's; the installed metadata carries it
        return version("d1saver")
    except PackageNotFoundError:  # pragma: no cover - a source tree that was never installed
        return "0+unknown"


def __getattr__(name: str) -> Any:
    """A public name, imported on first use and then kept as a plain attribute (PEP 562).
    `d1saver.TimeoutError` and `d1saver.ConnectionError` still resolve, with a
    DeprecationWarning naming the class to use instead."""
    if name in _MODULE_OF:
        value = getattr(importlib.import_module(_MODULE_OF[name]), name)
    elif name in _SUBMODULES or (not name.startswith("__")
                                 and importlib.util.find_spec(f"{__name__}.{name}") is not None):
        # d1saver.admin, and any other submodule (d1saver.memory, ...), which the eager
        # `import d1saver` of 0.2.0 left reachable as attributes
        value = importlib.import_module(f"{__name__}.{name}")
    elif name == "__version__":
        value = _version()
    elif name in _DEPRECATED:
        new = _DEPRECATED[name]
        warnings.warn(f"d1saver.{name} is deprecated and will be removed in the next release: "
                      f"use d1saver.{new} (a subclass of the built-in {name})",
                      DeprecationWarning, stacklevel=2)
        return __getattr__(new)
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
