"""d1saver: LangGraph checkpoints in Cloudflare D1, over D1's REST API."""

import warnings
from typing import Any
from importlib.metadata import PackageNotFoundError, version

try:  # the one version is pyproject.toml's; the installed metadata carries it
    __version__ = version("d1saver")
except PackageNotFoundError:  # pragma: no cover - a source tree that was never installed
    __version__ = "0+unknown"

from d1saver import admin, upstream
from d1saver.http.client import D1Client
from d1saver.core.protocol import Result, Statement, TraceEvent
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
from d1saver.ops.reseal import RekeyCounts
from d1saver.http.retry import RetryPolicy
from d1saver.core.settings import D1Settings, load_settings
from d1saver.memory import D1Cache, D1Store
from d1saver.saver import D1Saver

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
_DEPRECATED = {"TimeoutError": D1TimeoutError, "ConnectionError": D1ConnectionError}


def __getattr__(name: str) -> Any:
    """`d1saver.TimeoutError` and `d1saver.ConnectionError` still resolve (PEP 562), with a
    DeprecationWarning naming the class to use instead."""
    if name in _DEPRECATED:
        new = _DEPRECATED[name]
        warnings.warn(f"d1saver.{name} is deprecated and will be removed in the next release: "
                      f"use d1saver.{new.__name__} (a subclass of the built-in {name})",
                      DeprecationWarning, stacklevel=2)
        return new
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
