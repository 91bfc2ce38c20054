"""d1saver: LangGraph checkpoints in Cloudflare D1, over D1's REST API."""

from importlib.metadata import PackageNotFoundError, version

try:  # the one version is pyproject.toml's; the installed metadata carries it
    __version__ = version("d1saver")
except PackageNotFoundError:  # pragma: no cover - a source tree that was never installed
    __version__ = "0+unknown"

from d1saver import admin
from d1saver.http.client import D1Client
from d1saver.core.protocol import Result, Statement, TraceEvent
from d1saver.core.errors import (
    AuthenticationError,
    CheckpointConflictError,
    ConfigError,
    ConnectionError,
    D1APIError,
    D1Error,
    FleetError,
    IntegrityError,
    LeaseHeldError,
    MissingConfigKeyError,
    NotFoundError,
    PlaintextValueError,
    QueryError,
    RateLimitError,
    ResponseError,
    SerializationError,
    ServerError,
    StoredValueError,
    TimeoutError,
    TransientQueryError,
    TransportError,
    UnknownKeyError,
    VerificationError,
)
from d1saver.ops.reseal import RekeyCounts
from d1saver.http.retry import RetryPolicy
from d1saver.core.settings import D1Settings, load_settings
from d1saver.saver import D1Saver

__all__ = [
    "__version__",
    "admin",
    "AuthenticationError",
    "CheckpointConflictError",
    "ConfigError",
    "ConnectionError",
    "D1APIError",
    "D1Client",
    "D1Error",
    "D1Saver",
    "D1Settings",
    "FleetError",
    "IntegrityError",
    "LeaseHeldError",
    "MissingConfigKeyError",
    "NotFoundError",
    "PlaintextValueError",
    "QueryError",
    "RateLimitError",
    "RekeyCounts",
    "ResponseError",
    "Result",
    "RetryPolicy",
    "SerializationError",
    "ServerError",
    "Statement",
    "StoredValueError",
    "TimeoutError",
    "TraceEvent",
    "TransientQueryError",
    "TransportError",
    "UnknownKeyError",
    "VerificationError",
    "load_settings",
]
