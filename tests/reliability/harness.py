"""What the reliability harnesses share (issue 20): a world of local databases, checkpoints
built as LangGraph builds them, everything a reader observes of a thread, the invariants
every operation keeps, and transports that kill a command at a chosen request.

KNOWN_DEFECTS names the patterns of issue 20's listed defects that the random runs avoid
until their fixes land; each has a strict-xfail regression test (tests/reliability/
test_known_defects.py), so emptying the set is the last step of merging the fixes.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import CheckpointTuple, empty_checkpoint

from d1saver import D1Saver, Statement
from d1saver.local import LocalD1, LocalD1Transport

BASE_URL = "http://d1.local/client/v4"
K1, K2 = bytes([21]) * 32, bytes([22]) * 32
DATABASES = ("dba", "dbb", "dbc", "dbd")
STAGING = "\x1fd1saver"

# Issue 20's defects the random runs still step around (the lead empties this after merging
# the fixes; each one's regression test is strict-xfail until then):
#   "copy_onto_existing": copy_thread onto a thread that already holds rows (defects 2, 6, 9)
#   "rekey_seal_plaintext": rekey --seal-plaintext over rows stored by content (defect 4)
#   "rekey_chunked_write": rekey of a write stored in pieces (defect 7)
#   "prune_empty_fleet": prune([]) over several databases (defect 10)
#   "list_while_staged": list(None) while staged rows exist (defects 11, 12)
#   "delete_during_move": delete_thread/prune racing a rebalance (defect 1)
#   "copy_killed": a killed copy between databases leaves staged rows (defect 5)
KNOWN_DEFECTS: set[str] = set()


def known(name: str) -> bool:
    """True while the pattern `name` is a known, unfixed defect: random runs avoid it."""
    return name in KNOWN_DEFECTS


def soak_budget(request: Any, ci: int, soak: int) -> int:
    """The number of cases to run: `ci` in the normal run, `soak` with --soak (or
    D1SAVER_SOAK=N, which sets it to N)."""
    env = os.environ.get("D1SAVER_SOAK")
    if env:
        return int(env)
    return soak if request.config.getoption("--soak") else ci


# --- a world of local databases ------------------------------------------------------------


@dataclass
class World:
    """One local D1 engine holding up to four databases; savers over any of them."""

    engine: LocalD1 = field(default_factory=LocalD1)
    transport: Any = None

    def __post_init__(self) -> None:
        if self.transport is None:
            self.transport = LocalD1Transport(self.engine)

    def saver(self, ids: Sequence[str] = DATABASES[:1], *, keys: Sequence[bytes] | None = None,
              previous: Sequence[str] | None = None, transport: Any = None,
              **kwargs: Any) -> D1Saver:
        kwargs.setdefault("group_commit", False)
        where: dict[str, Any] = ({"database_id": ids[0]} if len(ids) == 1 and previous is None
                                 else {"database_ids": list(ids)})
        if previous is not None:
            where["previous_database_ids"] = list(previous)
        return D1Saver(account_id="acc", api_token="test-token", api_base_url=BASE_URL,
                       transport=transport or self.transport,
                       encryption_keys=None if keys is None else list(keys), **where, **kwargs)

    def raw(self, database_id: str) -> D1Saver:
        """A plain saver on one database, to read its tables with SQL."""
        return self.saver([database_id])

    def sql(self, database_id: str, sql: str, *params: Any) -> list[list[Any]]:
        with self.raw(database_id) as s:
            (result,) = s.client.execute([Statement(sql, params)])
        return result.rows

    def thread_tables(self, database_id: str) -> list[str]:
        """The tables keyed by thread (read once per database: the schema does not change)."""
        cache = self.__dict__.setdefault("_tables", {})
        if database_id not in cache:
            tables = [r[0] for r in self.sql(database_id,
                      "SELECT name FROM sqlite_master WHERE type = 'table'")]
            if "checkpoints" not in tables:
                return []
            cache[database_id] = [
                t for t in tables if any(c[1] == "thread_id" for c in self.sql(
                    database_id, f"PRAGMA table_info({t})"))]
        return cache[database_id]

    def threads_in(self, database_id: str) -> dict[str, set[str]]:
        """{table: thread ids} of every table keyed by thread in one database (one request)."""
        tables = self.thread_tables(database_id)
        if not tables:
            return {}
        union = " UNION ALL ".join(f"SELECT DISTINCT '{t}', thread_id FROM {t}" for t in tables)
        out: dict[str, set[str]] = {t: set() for t in tables}
        for table, thread in self.sql(database_id, union):
            out[table].add(thread)
        return out

    def holding(self, thread_id: str, databases: Sequence[str] = DATABASES) -> list[str]:
        return [db for db in databases
                if any(thread_id in ids for ids in self.threads_in(db).values())]

    def placement(self, databases: Sequence[str] = DATABASES) -> dict[str, list[str]]:
        """{thread id: the databases holding any row of it}."""
        out: dict[str, list[str]] = {}
        for db in databases:
            for t in set().union(*self.threads_in(db).values() or [set()]):
                out.setdefault(t, []).append(db)
        return out

    def engine_databases(self) -> list[str]:
        """The databases of DATABASES that exist in the engine (set up by some saver)."""
        return [db for db in DATABASES if self.thread_tables(db)]

    def staged(self, databases: Sequence[str] = DATABASES) -> list[tuple[str, str, str]]:
        """(database, table, thread id) of every row kept under a staging id."""
        return sorted((db, table, t) for db in databases
                      for table, ids in self.threads_in(db).items()
                      for t in ids if t.startswith(STAGING))

    def close(self) -> None:
        self.engine.close()


# --- checkpoints as LangGraph builds them ----------------------------------------------------


def cfg(thread_id: str, checkpoint_id: str | None = None) -> RunnableConfig:
    conf: dict[str, Any] = {"thread_id": thread_id, "checkpoint_ns": ""}
    if checkpoint_id is not None:
        conf["checkpoint_id"] = checkpoint_id
    return {"configurable": conf}


def new_id(n: int) -> str:
    """Checkpoint ids that sort by n, shaped like LangGraph's uuid6 ids."""
    return f"1f000000-0000-6000-8000-{n:012d}"


def make_checkpoint(cid: str, step: int, values: dict[str, Any], *, delta: bool,
                    ts: str | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """A checkpoint and its metadata: `values` as channel_values; with `delta`, "messages" is
    a DeltaChannel: listed in counters_since_delta_snapshot when the checkpoint holds no
    value of it (LangGraph replays it from the ancestors' writes)."""
    cp = empty_checkpoint()
    versions = {ch: f"{step + 1:010}" for ch in values}
    if delta:
        versions["messages"] = f"{step + 1:010}"
    cp.update(id=cid, channel_values=dict(values), channel_versions=versions)
    if ts is not None:
        cp["ts"] = ts
    md: dict[str, Any] = {"source": "loop", "step": step, "parents": {},
                          "run_id": f"run-{step % 3}"}
    if delta and "messages" not in values:
        md["counters_since_delta_snapshot"] = {"messages": [step % 3, step]}
    return cp, md


def sought(tup: CheckpointTuple) -> list[str]:
    """The DeltaChannels LangGraph would replay for this checkpoint."""
    return sought_of(tup.checkpoint, tup.metadata)


def sought_of(checkpoint: Any, metadata: Any) -> list[str]:
    counters = metadata.get("counters_since_delta_snapshot") or {}
    return sorted(ch for ch in counters if ch not in checkpoint["channel_values"]
                  and ch in checkpoint["channel_versions"])


# --- what a reader observes ---------------------------------------------------------------


def view(tup: CheckpointTuple) -> tuple[Any, ...]:
    parent = (tup.parent_config or {}).get("configurable", {}).get("checkpoint_id")
    return (tup.config["configurable"]["checkpoint_id"], parent,
            tup.checkpoint["channel_values"], dict(tup.metadata),
            [tuple(w) for w in tup.pending_writes or []])


def observe(saver: Any, thread_ids: Sequence[str], *, histories: bool = True,
            tags: bool = True) -> dict[str, Any]:
    """Everything a reader sees of each thread: every checkpoint (values, metadata, parent,
    pending writes), the head, the DeltaChannel histories LangGraph would ask for, tags."""
    out: dict[str, Any] = {}
    for t in thread_ids:
        tuples = list(saver.list(cfg(t)))
        head = saver.get_tuple(cfg(t))
        entry: dict[str, Any] = {"list": [view(x) for x in tuples],
                                 "head": None if head is None else view(head)}
        if histories:
            entry["delta"] = {x.config["configurable"]["checkpoint_id"]:
                              _plain(saver.get_delta_channel_history(
                                  config=cfg(t, x.config["configurable"]["checkpoint_id"]),
                                  channels=sought(x)))
                              for x in tuples if sought(x)}
        if tags and tuples:
            entry["tags"] = dict(saver.tags(cfg(t)))
        out[t] = entry
    return out


def _plain(histories: Any) -> dict[str, Any]:
    return {ch: {"writes": [tuple(w) for w in h["writes"]], **({"seed": h["seed"]}
                                                               if "seed" in h else {})}
            for ch, h in histories.items()}


def first_difference(actual: Any, expected: Any, path: str = "") -> str | None:
    """Where two observations first differ, readably (None if equal)."""
    if actual == expected:
        return None
    if isinstance(actual, dict) and isinstance(expected, dict):
        for k in sorted(set(actual) | set(expected), key=str):
            if k not in actual or k not in expected:
                return f"{path}/{k}: only in {'actual' if k in actual else 'expected'}"
            found = first_difference(actual[k], expected[k], f"{path}/{k}")
            if found:
                return found
    if (isinstance(actual, (list, tuple)) and isinstance(expected, (list, tuple))
            and len(actual) == len(expected)):
        for i, (a, e) in enumerate(zip(actual, expected, strict=True)):
            found = first_difference(a, e, f"{path}[{i}]")
            if found:
                return found
    return f"{path}: {str(actual)[:600]} != {str(expected)[:600]}"


def assert_same(actual: Any, expected: Any, what: str = "") -> None:
    diff = first_difference(actual, expected)
    assert diff is None, f"{what} {diff}"


def readable(saver: Any, thread_ids: Sequence[str]) -> None:
    """Every thread reads (no error), whole."""
    for t in thread_ids:
        for tup in saver.list(cfg(t)):
            if sought(tup):
                saver.get_delta_channel_history(config=tup.config, channels=sought(tup))


# --- kills -------------------------------------------------------------------------------


class Killed(BaseException):
    """The process died: nothing after this point runs (not an Exception: nobody catches it)."""


class KillAt(httpx.BaseTransport, httpx.AsyncBaseTransport):
    """Counts requests; at request number `at` (0-based) the process dies, either before the
    request reaches the database (`after=False`) or after it ran there, its answer lost."""

    def __init__(self, inner: Any, at: int | None, *, after: bool = False) -> None:
        self.inner, self.at, self.after = inner, at, after
        self.count = 0
        self.fired = False

    def _tick(self) -> bool:
        n = self.count
        self.count += 1
        if self.fired:
            raise Killed()
        if self.at is not None and n == self.at:
            self.fired = True
            if not self.after:
                raise Killed()
            return True
        return False

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        lose = self._tick()
        response = self.inner.handle_request(request)
        if lose:
            response.read()
            raise Killed()
        return response

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        lose = self._tick()
        response = await self.inner.handle_async_request(request)
        if lose:
            await response.aread()
            raise Killed()
        return response


def kill_points(count: int) -> Iterator[tuple[int, bool]]:
    """Every kill point of a command that makes `count` requests: before and after each."""
    for at in range(count):
        yield at, False
        yield at, True


def named(prefix: str, databases: Sequence[str], home: str) -> str:
    """The first thread id `prefix<i>` whose home among `databases` is `home`."""
    from d1saver.fleet.routing import rendezvous
    return next(f"{prefix}{i}" for i in range(1000)
                if rendezvous(f"{prefix}{i}", list(databases)) == home)


# Threads that move from the first database to the second when the layout grows to two.
MOVER_A = named("a", DATABASES[:2], DATABASES[1])
MOVER_B = named("b", DATABASES[:2], DATABASES[1])
STAYER_C = named("c", DATABASES[:2], DATABASES[0])


def unique(prefix: str = "t") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"
