"""The exception tree of d1saver: everything raised on purpose derives from `D1Error`.

    D1Error
    ├── ConfigError                 a setting or a config key is missing or wrong
    │   ├── MissingConfigKeyError   (also a KeyError, as other savers raise)
│   └── SchemaNotReadyError     a read-only use met a database without d1saver's schema, or
│                               with an older one: it neither creates nor migrates it
    ├── D1APIError                  D1 answered, and the answer is a failure
    │   ├── AuthenticationError     401/403, Cloudflare code 10000
    │   ├── RateLimitError          429; carries retry_after
    │   ├── QueryError              the SQL failed (4xx with code 7500 and friends)
    │   │   └── TransientQueryError D1 failed for a reason it documents as transient: retried
    │   ├── ServerError             5xx
    │   └── ResponseError           not D1's envelope (HTML, truncated JSON, success: false on 200)
    ├── TransportError              no answer at all
    │   ├── D1TimeoutError          a connect, write or read timed out (also a TimeoutError)
    │   └── D1ConnectionError       the connection failed or dropped (also a ConnectionError)
    ├── SerializationError          a value the serializer or JSON cannot carry
    ├── StoredValueError            a stored value cannot be read back (refused type, codec)
    │   └── IntegrityError          a value failed authentication under the encryption keys
    │       ├── UnknownKeyError     sealed under a key the saver does not hold
    │       └── PlaintextValueError a plaintext row where keys require a sealed one
    ├── InvalidInputError           the store or cache refused its input (namespace, filter,
    │   │                           vector, value); nothing was sent, nothing changed
    │   └── ValueTooLargeError      a value that no D1 row can hold
    ├── CheckpointConflictError     the opt-in head guard refused a put
    ├── NotFoundError               tagging a checkpoint that does not exist
    ├── LeaseHeldError              another compaction run holds the lease
    ├── VerificationError           a thread copied between databases did not read back identical
    └── FleetError                  an operation over many databases failed in some of them;
                                    carries {database_id: error} and the others' results

No message ever contains the API token: errors are built from D1's JSON envelope and from
the request URL, which holds account and database ids only. No message contains an
encryption key either: key errors name the key's position, integrity errors the stored row.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


class D1Error(Exception):
    """Base class of every error d1saver raises on purpose."""


class ConfigError(D1Error, ValueError):
    """A setting or a config key is missing or invalid."""


class MissingConfigKeyError(ConfigError, KeyError):
    """A RunnableConfig lacks a required `configurable` key (a KeyError, as other savers raise)."""

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0]) if self.args else ""


class SchemaNotReadyError(ConfigError):
    """A read-only use (`read_only = True`: the CLI's listing and inspecting commands) met a
    database without d1saver's schema (`version` 0: nothing was ever stored there) or with an
    older one; it neither creates nor migrates a schema, so nothing was written."""

    def __init__(self, message: str, *, version: int = 0) -> None:
        super().__init__(message)
        self.version = version


class D1APIError(D1Error):
    """D1's REST API answered with a failure."""

    def __init__(self, message: str, *, status: int | None = None, code: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.code = code

    def __str__(self) -> str:
        parts = [f"HTTP {self.status}" if self.status is not None else None,
                 f"code {self.code}" if self.code is not None else None]
        prefix = ", ".join(p for p in parts if p)
        return f"{self.message} ({prefix})" if prefix else self.message


class AuthenticationError(D1APIError):
    """The API token was refused: check CLOUDFLARE_API_TOKEN and its D1 edit permission."""


class RateLimitError(D1APIError):
    """Cloudflare's API budget (1200 requests per 5 minutes per user) is spent."""

    def __init__(self, message: str, *, status: int | None = 429, code: int | None = None,
                 retry_after: float | None = None) -> None:
        super().__init__(message, status=status, code=code)
        self.retry_after = retry_after


class QueryError(D1APIError):
    """D1 refused or failed the SQL; the whole request was rolled back."""


class TransientQueryError(QueryError):
    """D1 failed the request for a reason Cloudflare documents as transient ("Network
    connection lost", "... storage caused object to be reset", "D1 DB is overloaded"): not
    the SQL's fault, so the retry policy retries it as it does a 5xx."""


class ServerError(D1APIError):
    """D1 or Cloudflare's API failed on its side (5xx)."""


class ResponseError(D1APIError):
    """The answer was not D1's JSON envelope, or it said success: false with a 2xx status."""


class TransportError(D1Error):
    """The request got no answer: connection refused, dropped, or timed out."""


class D1ConnectionError(TransportError, ConnectionError):
    """The connection failed or was dropped before an answer arrived (also the built-in
    ConnectionError, so `except ConnectionError` catches it whatever is imported)."""


class D1TimeoutError(TransportError, TimeoutError):
    """A connect, write or read timed out (also the built-in TimeoutError)."""


class SerializationError(D1Error, TypeError):
    """A value cannot be serialized (by the serde, or as JSON metadata)."""


class StoredValueError(D1Error, ValueError):
    """A stored value cannot be read back: a type outside the serializer's allowlist, an
    unknown codec (written by a newer d1saver), or damaged data."""


class IntegrityError(StoredValueError):
    """A stored value failed authentication: altered, truncated, or moved or copied from
    another thread, checkpoint or write slot. Nothing of it is returned."""

    def __init__(self, message: str, *, thread_id: str | None = None,
                 checkpoint_ns: str | None = None, checkpoint_id: str | None = None) -> None:
        super().__init__(message)
        self.thread_id = thread_id
        self.checkpoint_ns = checkpoint_ns
        self.checkpoint_id = checkpoint_id


class UnknownKeyError(IntegrityError):
    """A value sealed under a key the saver does not hold (dropped too early after a rotation,
    or written by someone else's key): add that key to the saver's keys."""


class PlaintextValueError(IntegrityError):
    """A plaintext value where the saver's keys require a sealed one: planted by someone
    without the key, or written before keys were set (`d1saver rekey` seals such rows)."""


class InvalidInputError(D1Error, ValueError):
    """D1Store or D1Cache refused an argument (an invalid namespace, an unknown filter
    operator, a NaN vector, an embedding whose dims differ from the index): raised before
    anything is sent, so nothing changed."""


class ValueTooLargeError(InvalidInputError):
    """A stored item or cache entry that no D1 row can hold, even compressed (D1 refuses
    rows over 2,000,000 bytes): nothing was sent."""


class CheckpointConflictError(D1Error):
    """`put` refused: the checkpoint's parent is no longer the thread's head (opt-in guard)."""


class NotFoundError(D1Error, LookupError):
    """The named checkpoint (or tag) does not exist."""


class LeaseHeldError(D1Error):
    """Another compaction run holds the lease; try later or wait for it to expire."""


class VerificationError(D1Error):
    """A thread copied to another database did not read back identical to its source (row
    counts or digest differ); its source was left as it was."""


class FleetError(D1Error):
    """An operation spanning several databases failed in some of them.

    `errors` maps each failed database id to its error (a D1Error); `results` maps each
    database that succeeded to its result, so one database's failure hides nothing else.
    """

    def __init__(self, operation: str, errors: Mapping[str, D1Error],
                 results: Mapping[str, Any]) -> None:
        self.operation = operation
        self.errors = dict(errors)
        self.results = dict(results)
        total = len(self.errors) + len(self.results)
        detail = "; ".join(f"{db}: {type(exc).__name__}: {exc}" for db, exc in self.errors.items())
        super().__init__(f"{operation} failed in {len(self.errors)} of {total} databases "
                         f"({detail})")
