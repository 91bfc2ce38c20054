"""The vocabulary every layer shares, as pure data: statements, results, actions, trace events.

No I/O; of the rest of d1saver it names only the error type, in annotations. Operations are
generators that yield actions (`Send`, `Sleep`, `Commit`, `Once`) and receive replies; the
client performs `Send` and `Sleep`, the driver layer performs `Commit` (group commit) and
`Once` (setup), as h11 leaves the sockets to its caller.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeAlias, TypeVar, Union

if TYPE_CHECKING:  # types only: this module imports nothing at run time
    import httpx

    from d1saver.core.errors import D1Error

Param = Union[str, int, float, None]
T = TypeVar("T")


@dataclass(frozen=True)
class Statement:
    """One SQL statement and its positional parameters."""

    sql: str
    params: Sequence[Param] = ()


@dataclass
class Result:
    """The rows and meta of one statement, as D1's /raw endpoint returns them."""

    columns: list[str]
    rows: list[list[Any]]
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def changes(self) -> int:
        return int(self.meta.get("changes") or 0)

    def dicts(self) -> list[dict[str, Any]]:
        return [dict(zip(self.columns, row)) for row in self.rows]


@dataclass(frozen=True)
class TraceEvent:
    """One HTTP attempt, for tracers: what was sent and what came of it. Never the token."""

    statements: tuple[Statement, ...]
    attempt: int
    status: int | None
    error: D1Error | None
    seconds: float
    bytes_sent: int
    bytes_received: int
    database_id: str | None = None  # which database the request went to (a saver may span many)


Tracer = Callable[[TraceEvent], None]


@dataclass(frozen=True)
class Send:
    """Send one HTTP request (an httpx.Request); the reply is its httpx.Response."""

    request: httpx.Request


@dataclass(frozen=True)
class Sleep:
    """Wait this many seconds before going on."""

    seconds: float


@dataclass(frozen=True)
class Commit:
    """Write statements that may share a batch with other callers' (group commit)."""

    statements: Sequence[Statement]


@dataclass(frozen=True)
class Once:
    """Run an operation at most once per driver (schema setup), however many callers ask."""

    key: str
    op: Callable[[], Generator[Any, Any, None]]


Action = Union[Send, Sleep, Commit, Once]
# An operation: yields actions, is sent their replies, returns a T.
Op: TypeAlias = Generator[Action, Any, T]

__all__ = ["Action", "Commit", "Once", "Op", "Param", "Result", "Send", "Sleep", "Statement",
           "TraceEvent", "Tracer"]
