"""The vocabulary every layer shares, as pure data: statements, results, actions, trace events.

No I/O; of the rest of d1saver it names only the error type, in annotations. Operations are
generators that yield actions (`Send`, `Sleep`, `Commit`, `Once`) and receive replies; the
runner (d1saver/http/runner.py) performs every action, `Send` and `Sleep` through the
client's two primitives and `Commit` (group commit) and `Once` (setup) through a database's
driver, as h11 leaves the sockets to its caller.

It is the one convention for every multi-step operation: an operation that needs more than
one database (a copy between two, a merged list) is a generator too, over exchanges it is
given or of steps at databases (the runner's `Run` and `Each`), and what it hands its caller
page by page it yields as `Emit`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Container, Generator, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias, TypeVar, Union

if TYPE_CHECKING:  # types only: this module imports nothing at run time
    import httpx

    from d1saver.core.errors import D1Error

Param = Union[str, int, float, None]
T = TypeVar("T")
# A content-addressed chunk row (d1saver_chunks, per thread): its id, level and data.
ChunkRow = tuple[str, int, str]


class NamedSQL(Protocol):
    """A catalogue statement (d1saver/sql/query.py: Query): its text as sent, and the names of
    its parameters in position order (params[i] binds ?{i+1})."""

    @property
    def sql(self) -> str: ...

    @property
    def params(self) -> tuple[str, ...]: ...

    @property
    def name(self) -> str: ...


@dataclass(frozen=True)
class Statement:
    """One SQL statement and its positional parameters; `name` and `names` (the parameters'
    names) when it was bound from a named catalogue statement."""

    sql: str
    params: Sequence[Param] = ()
    name: str = field(default="", compare=False)
    names: tuple[str, ...] = field(default=(), compare=False)
    # The chunk rows its :chunks parameter carries (bound by `bind(..., chunks=)`), of the
    # thread its :thread_id names: a batch sends each row once (`without_chunks`).
    chunks: tuple[ChunkRow, ...] = field(default=(), compare=False, repr=False)

    def __post_init__(self) -> None:
        if not isinstance(self.sql, str):
            raise TypeError("Statement takes SQL text: bind a named statement with "
                            "Statement.bind(query, {name: value, ...})")

    @classmethod
    def bind(cls, query: NamedSQL, params: Mapping[str, Param] | None = None, *,
             chunks: Sequence[ChunkRow] | None = None) -> Statement:
        """`query` with its parameters given by name: every name bound, none extra. With
        `chunks`, its :chunks parameter is those rows (chunks_param)."""
        given = {} if params is None else params
        if chunks is not None:
            given = {**given, "chunks": chunks_param(chunks)}
        missing = [n for n in query.params if n not in given]
        extra = [k for k in given if k not in query.params]
        if missing or extra:
            raise TypeError(f"{query.name or 'statement'}: parameters missing {missing}, "
                            f"unknown {extra}")
        return cls(query.sql, tuple(given[n] for n in query.params), query.name, query.params,
                   tuple(chunks or ()))

    @classmethod
    def bind_each(cls, queries: Iterable[NamedSQL], pool: Mapping[str, Param]
                  ) -> list[Statement]:
        """A batch: each query bound to the names it takes of `pool`; every name a query
        takes is in `pool`, and every name in `pool` is taken by some query."""
        queries = list(queries)
        used = {n for query in queries for n in query.params}
        unused = [k for k in pool if k not in used]
        if unused:
            raise TypeError(f"parameters {unused} are taken by no statement of the batch")
        return [cls.bind(query, {n: pool[n] for n in query.params if n in pool})
                for query in queries]

    def named(self) -> dict[str, Param]:
        """The parameters by name (a statement bound from a named one)."""
        return dict(zip(self.names, self.params))

    def without_chunks(self, sent: Container[str]) -> Statement:
        """The statement with the chunk rows whose ids are in `sent` left out of its :chunks
        parameter (an earlier statement of its batch stores them): the same statement, bound
        again over fewer rows."""
        kept = tuple(row for row in self.chunks if row[0] not in sent)
        if len(kept) == len(self.chunks):
            return self
        named = {**self.named(), "chunks": chunks_param(kept)}
        return replace(self, params=tuple(named[n] for n in self.names), chunks=kept)


# JSON as d1saver sends it (a request's body, a list parameter): compact, non-ASCII kept.
# One encoder, made once: json.dumps with arguments makes a new one a call.
compact_json: Callable[[Any], str] = json.JSONEncoder(ensure_ascii=False,
                                                      separators=(",", ":")).encode


def chunks_param(rows: Sequence[ChunkRow]) -> str | None:
    """Chunk rows as the :chunks parameter takes them: JSON [[id, level, data], ...], children
    before nodes; NULL for none (json_each(NULL) is empty)."""
    return json.dumps(rows, separators=(",", ":")) if rows else None


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


# When a commit may leave (Commit.timing; d1saver/http/group_commit.py).
NOW = "now"  # at once, taking whatever waits along: a put, a read that must see the writes
SOON = "soon"  # at once if nothing is in flight, else with what arrives within the window
HELD = "held"  # with the database's next batch (the step's put): a write nobody waits on first


@dataclass(frozen=True)
class Commit:
    """Statements that may share a batch with other callers' (group commit); `timing` is when
    they may leave: NOW, SOON (the default) or HELD. `step` names a LangGraph step by the
    checkpoint it builds on, (thread, namespace, checkpoint id): a put's (its parent), or the
    one a HELD write is pending on, which leaves with that put, and at once if it has left.
    `known`, asked when its batch is made, names the chunks its thread is known to hold by
    then (stored since the statements were built): their rows are left out too. `stored` is
    called once its statements have committed, before any caller wakes: the chunks its rows
    reach are then known held, for the next batch to leave out."""

    statements: Sequence[Statement]
    timing: str = SOON
    step: tuple[str, str, str] | None = None
    known: Callable[[], Container[str]] | None = None
    stored: Callable[[], None] | None = None


@dataclass(frozen=True)
class Once:
    """Run an operation at most once per driver (schema setup), however many callers ask."""

    key: str
    op: Callable[[], Generator[Any, Any, None]]


@dataclass(frozen=True)
class Expect:
    """A held write of LangGraph's `step` is on its way (its statements being built): the
    step's put waits a moment for it to join the queue, so that it rides along."""

    step: tuple[str, str, str]


Action = Union[Send, Sleep, Commit, Once, Expect]
# An operation: yields actions, is sent their replies, returns a T.
Op: TypeAlias = Generator[Action, Any, T]
# Statements sent in one request, as an operation: what an operation over a database is given.
Exchange: TypeAlias = Callable[[Sequence[Statement]], Generator[Any, Any, "list[Result]"]]


@dataclass(frozen=True)
class Emit:
    """Hand `items` to the caller of an operation that yields as it goes (a list), then go on
    when the caller asks for more; the reply is None."""

    items: Sequence[Any]


__all__ = ["HELD", "NOW", "SOON", "Action", "ChunkRow", "Commit", "Emit", "Exchange", "Expect", "NamedSQL", "Once", "Op",
           "Param", "Result", "Send", "Sleep", "Statement", "TraceEvent", "Tracer", "chunks_param"]
