"""D1Saver: a LangGraph checkpointer over Cloudflare D1's REST API, sync and async on one instance.

A thin shell: each method runs one operation (d1saver/ops/operations.py) with the sync or the async
driver. Every public method is one HTTP request (a `list` is one per page): the statements an
operation needs go together as one D1 batch, which D1 runs as one transaction. Writes are
upserts keyed by primary key, so a retry after a lost response stores nothing twice.

Over several databases (`database_ids=[...]`) each thread lives in one, its home
(d1saver/fleet/routing.py), and per-thread methods go there, still one request; what spans
threads runs on every database concurrently (d1saver/fleet/fleet.py).
"""

from __future__ import annotations

import copy
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping, Sequence
from types import TracebackType
from typing import Any, TypeVar

import httpx
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    DeltaChannelHistory,
)
from langgraph.checkpoint.serde.base import SerializerProtocol

from d1saver import upstream
from d1saver.http.client import D1Client
from d1saver.storage.crypto import Key, Sealer, keys_from_env
from d1saver.http.driver import Driver
from d1saver.core.errors import ConfigError, NotFoundError
from d1saver.fleet.fleet import DEFAULT_CONCURRENCY, Fleet
from d1saver.fleet.databases import Database, client_factory, database_lists, make_databases
from d1saver.ops.operations import Operations
from d1saver.core.protocol import Result, Statement, Tracer
from d1saver.ops.reseal import RekeyCounts, add_census, add_counts
from d1saver.http.retry import RetryPolicy
from d1saver.http import telemetry
from d1saver.fleet.routing import Route, Router
from d1saver.storage.serde import default_serde, trusted_serde
from d1saver.core.settings import DEFAULT_API_BASE_URL, load_settings
from d1saver.storage.values import Values

T = TypeVar("T")


class D1Saver(BaseCheckpointSaver[str]):
    """A LangGraph checkpointer that keeps checkpoints in Cloudflare D1, over its REST API.

    Keyword-only. `transport` injects an httpx transport (both sync and async if it implements
    both, as `d1saver.local.LocalD1Transport` does); `tracer` sees every HTTP attempt;
    `retry` bounds retries; `guard_head=True` refuses a `put` whose parent is no longer the
    thread's newest checkpoint (`CheckpointConflictError`), catching accidental forks when
    two writers resume one thread. `page_size` is how many checkpoints one `list` request
    reads. `group_commit` sends writes that arrive together in one batch: a step's put_writes
    ride with its put (one request per super-step), and writes that arrive while one is in
    flight leave together after a window of `group_commit_window` seconds (10 ms; see
    d1saver/http/group_commit.py). The schema is created on first use (one extra request, once) unless
    `auto_setup=False`; `setup()` does it explicitly.

    Many databases: `database_ids=[...]` instead of `database_id` (give exactly one of them).
    Each thread lives in one database, by rendezvous hashing of its thread_id, or by
    `route(thread_id) -> database_id` if given; each database has its own client, group
    commit and setup. Operations across threads (`list(None)`, `delete_for_runs`, `prune`,
    `setup`) run on every database, at most `fleet_concurrency` at once, and raise
    `FleetError` naming each database that failed. While `d1saver rebalance` moves threads
    after the list changed, `previous_database_ids` (the list before) lets a read that finds
    nothing at a thread's home look at its previous home: one more request, only on a miss.

    `encryption_keys` (newest first; each 32 bytes, as bytes or base64 text) seal every stored
    value with AES-256-GCM bound to its row: a value altered, moved or planted is refused with
    `IntegrityError`, and any type is constructed from the rows that pass (no allowlist).
    New values use the newest key; values under the others stay readable (`d1saver rekey`).
    """

    def __init__(
        self,
        *,
        account_id: str,
        database_id: str | None = None,
        database_ids: Sequence[str] | None = None,
        api_token: str,
        api_base_url: str = DEFAULT_API_BASE_URL,
        serde: SerializerProtocol | None = None,
        timeout: httpx.Timeout | float | None = None,
        retry: RetryPolicy | None = None,
        transport: httpx.BaseTransport | httpx.AsyncBaseTransport | None = None,
        async_transport: httpx.AsyncBaseTransport | None = None,
        tracer: Tracer | None = None,
        guard_head: bool = False,
        page_size: int = 100,
        auto_setup: bool = True,
        group_commit: bool = True,
        group_commit_window: float | None = None,
        route: Route | None = None,
        previous_database_ids: Sequence[str] | None = None,
        fleet_concurrency: int = DEFAULT_CONCURRENCY,
        encryption_keys: Sequence[Key] | Key | None = None,
    ) -> None:
        # Compatible by default, exactly as LangGraph's own savers (d1saver/storage/serde.py): every
        # type that round-trips through SqliteSaver round-trips here, and
        # LANGGRAPH_STRICT_MSGPACK is honoured as LangGraph honours it. With keys only a key
        # holder can write a row that is read at all, so any type may be constructed.
        sealer = None if encryption_keys is None else Sealer(encryption_keys)
        serde = serde or default_serde()
        super().__init__(serde=serde if sealer is None else trusted_serde(serde))
        ids, previous = database_lists(database_id, database_ids, previous_database_ids)
        new_client = client_factory(
            account_id=account_id, api_token=api_token, api_base_url=api_base_url, retry=retry,
            transport=transport, async_transport=async_transport, tracer=tracer, timeout=timeout)
        databases = make_databases(
            [*ids, *(previous or [])], new_client, Values(self.serde, sealer),
            guard_head=guard_head, auto_setup=auto_setup, group_commit=group_commit,
            group_commit_window=group_commit_window)
        self._fleet = Fleet(databases, Router(ids, route),
                            None if previous is None else Router(previous), fleet_concurrency)
        self.account_id = account_id
        self.database_id = ids[0] if len(ids) == 1 else None
        if isinstance(page_size, bool) or not isinstance(page_size, int) or page_size < 1:
            raise ConfigError(f"page_size must be a whole number of checkpoints >= 1, not {page_size!r}")
        self.page_size = page_size

    @property
    def serde(self) -> SerializerProtocol:
        return self._serde

    @serde.setter
    def serde(self, value: SerializerProtocol) -> None:
        # BaseCheckpointSaver sets it in __init__, and with_allowlist() on a shallow copy:
        # the copy gets operations (and a DeltaChannel cache) of its own over the new serde.
        # With keys no allowlist narrows it: every row read is authenticated.
        fleet = self.__dict__.get("_fleet")
        sealer = None if fleet is None else fleet.sealer
        self._serde = value if sealer is None else trusted_serde(value)
        if fleet is not None:
            self._fleet = fleet.with_values(Values(self._serde, sealer))

    @property
    def guard_head(self) -> bool:
        return self._first.ops.guard_head

    @guard_head.setter
    def guard_head(self, value: bool) -> None:
        self._fleet.set_ops("guard_head", value)

    @property
    def auto_setup(self) -> bool:
        return self._first.ops.auto_setup

    @auto_setup.setter
    def auto_setup(self, value: bool) -> None:
        self._fleet.set_ops("auto_setup", value)

    @property
    def read_only(self) -> bool:
        """True: this instance never creates nor migrates a schema; a database without
        d1saver's schema, or with an older one, raises SchemaNotReadyError (the CLI's listing
        and inspecting commands set it)."""
        return self._first.ops.read_only

    @read_only.setter
    def read_only(self, value: bool) -> None:
        self._fleet.set_ops("read_only", bool(value))

    @property
    def is_setup(self) -> bool:
        """Whether this instance has set the schema up (or found it set up), in every database."""
        return all(database.ops.is_setup for database in self._fleet.databases.values())

    @is_setup.setter
    def is_setup(self, value: bool) -> None:
        self._fleet.set_ops("is_setup", value)

    # --- databases --------------------------------------------------------------------------

    @property
    def database_ids(self) -> tuple[str, ...]:
        """The databases threads live in (one for a single-database saver)."""
        return self._fleet.database_ids

    @property
    def previous_database_ids(self) -> tuple[str, ...] | None:
        """The database list before the last change, while threads move (see rebalance)."""
        previous = self._fleet.previous
        return None if previous is None else previous.database_ids

    def home(self, thread_id: str) -> str:
        """The id of the database `thread_id` lives in."""
        return self._fleet.router.home(str(thread_id))

    def database(self, database_id: str) -> D1Saver:
        """This saver restricted to one of its databases (current or previous): same client,
        driver and setup, as a single-database saver (for maintenance: compaction, rebalance)."""
        view = copy.copy(self)
        view._fleet = self._fleet.view(database_id)
        view.database_id = database_id
        return view

    def each_database(self, fn: Callable[[D1Saver], T], *, operation: str = "each_database",
                      database_ids: Sequence[str] | None = None) -> dict[str, T]:
        """fn(saver.database(id)) for every database (or those named), concurrently, at most
        `fleet_concurrency` at once: {database_id: result}. Over several databases, failures
        raise FleetError with each failed database's error and the others' results."""
        return self._fleet.each(lambda db: fn(self.database(db.database_id)), operation,
                                database_ids)

    @property
    def _first(self) -> Database:
        return next(iter(self._fleet.databases.values()))

    @property
    def client(self) -> D1Client:
        """The client of a single-database saver (see `database()` for one of several)."""
        return self._fleet.single().client

    @property
    def driver(self) -> Driver:
        return self._fleet.single().driver

    @property
    def ops(self) -> Operations:
        return self._fleet.single().ops

    @property
    def key_ids(self) -> list[str]:
        """The ids (hex) of the encryption keys held, newest first; empty without keys."""
        return [] if (sealer := self._fleet.sealer) is None else sealer.key_ids

    @classmethod
    def from_env(cls, *, account_id: str | None = None, database_id: str | None = None,
                 api_base_url: str | None = None, api_token: str | None = None,
                 **kwargs: Any) -> D1Saver:
        """Build from CLOUDFLARE_ACCOUNT_ID, CLOUDFLARE_API_TOKEN, D1_DATABASE_ID (one id, or
        several separated by commas), D1_API_BASE_URL and D1SAVER_ENCRYPTION_KEYS
        (comma-separated base64, newest first); arguments that are not None override them
        (CLI flags do)."""
        settings = load_settings(account_id=account_id, database_id=database_id,
                                 api_base_url=api_base_url, api_token=api_token)
        if kwargs.get("encryption_keys") is None:
            kwargs["encryption_keys"] = keys_from_env()
        ids = settings.database_ids
        where = {"database_id": ids[0]} if len(ids) == 1 else {"database_ids": ids}
        return cls(account_id=settings.account_id, **where,
                   api_token=settings.api_token.get_secret_value(),
                   api_base_url=settings.api_base_url, **kwargs)

    def __repr__(self) -> str:
        if not self._fleet.spans:
            return (f"D1Saver(account_id={self.account_id!r}, database_id={self.database_id!r}, "
                    f"url={self.client.url!r})")
        return (f"D1Saver(account_id={self.account_id!r}, "
                f"database_ids={list(self.database_ids)!r}, url={self._first.client.url!r})")

    # --- lifecycle ------------------------------------------------------------------------

    def __enter__(self) -> D1Saver:
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    async def __aenter__(self) -> D1Saver:
        return self

    async def __aexit__(self, et: type[BaseException] | None, ev: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.aclose()

    def close(self) -> None:
        for database in self._fleet.databases.values():
            database.client.close()

    async def aclose(self) -> None:
        for database in self._fleet.databases.values():
            await database.client.aclose()

    def setup(self) -> None:
        """Create the schema (schema.sql) if missing and apply the migrations the database
        lacks; idempotent, one request each, in every database."""
        self._fleet.each(lambda db: db.run(lambda ops: ops.setup_once()), "setup")

    async def asetup(self) -> None:
        await self._fleet.aeach(lambda db: db.arun(lambda ops: ops.setup_once()), "setup")

    def execute(self, statements: Sequence[Statement]) -> list[Result]:
        """Run d1saver's own named statements in one request (schema created if missing).

        For maintenance tools (compaction, the CLI), which send the statements of
        d1saver.admin. One database only: over several, use `database(id).execute`.
        """
        return self._fleet.single().run(lambda ops: ops.execute(statements))

    # --- BaseCheckpointSaver, sync --------------------------------------------------------

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        upstream.ensure()  # a run reads its thread first: langgraph#8748, d1saver/upstream.py
        return self._fleet.on(config, lambda ops: ops.get_tuple(config), _none)

    def list(self, config: RunnableConfig | None, *, filter: dict[str, Any] | None = None,
             before: RunnableConfig | None = None, limit: int | None = None
             ) -> Iterator[CheckpointTuple]:
        yield from self._fleet.list(config, filter, before, limit, self.page_size)

    def put(self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata,
            new_versions: ChannelVersions) -> RunnableConfig:
        return self._fleet.on(config, lambda ops: ops.put(config, checkpoint, metadata))

    def put_writes(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]],
                   task_id: str, task_path: str = "") -> None:
        self._fleet.on(config, lambda ops: ops.put_writes(config, writes, task_id, task_path))

    def delete_thread(self, thread_id: str) -> None:
        """One request to the thread's home (and, while migrating, one to its previous home
        before it: a move in flight then never brings the thread back)."""
        self._fleet.delete_thread(str(thread_id))

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        """In every database (runs are not routed): one request each; while migrating
        (`previous_database_ids`), a second round once the first is done, which voids any
        move that read the runs before the first reached its source (delete wins)."""
        for _ in range(self._fleet.rounds):
            self._fleet.each(lambda db: db.run(lambda ops: ops.delete_for_runs(run_ids)),
                             "delete_for_runs")

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """One request within one database (with keys, pages re-sealed: _ops.py); else copied
        between databases in bounded batches, re-sealed with keys (d1saver/fleet/fleet.py)."""
        self._fleet.copy_thread(str(source_thread_id), str(target_thread_id), self.page_size)

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """Keep the newest checkpoint ("keep_latest") or none ("delete").

        keep_latest keeps the newest checkpoint of the root namespace and of each subgraph
        namespace a kept checkpoint reaches, tagged checkpoints and the ancestors that the kept
        ones' DeltaChannels replay from, and relinks parents, like the compaction job (same SQL).
        One request per database holding some of the threads (while migrating, the previous
        homes' requests first, then the homes', so that a move in flight loses: delete wins).
        """
        for groups in self._fleet.group(thread_ids):
            self._fleet.each(_pruning(groups, strategy), "prune", list(groups))

    def get_delta_channel_history(self, *, config: RunnableConfig, channels: Sequence[str]
                                  ) -> Mapping[str, DeltaChannelHistory]:
        return self._fleet.on(config, lambda ops: ops.delta_history(config, channels), _no_history)

    # --- BaseCheckpointSaver, async -------------------------------------------------------

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        upstream.ensure()
        return await self._fleet.aon(config, lambda ops: ops.get_tuple(config), _none)

    async def alist(self, config: RunnableConfig | None, *, filter: dict[str, Any] | None = None,
                    before: RunnableConfig | None = None, limit: int | None = None
                    ) -> AsyncIterator[CheckpointTuple]:
        async for tup in self._fleet.alist(config, filter, before, limit, self.page_size):
            yield tup

    async def aput(self, config: RunnableConfig, checkpoint: Checkpoint,
                   metadata: CheckpointMetadata, new_versions: ChannelVersions) -> RunnableConfig:
        return await self._fleet.aon(config, lambda ops: ops.put(config, checkpoint, metadata))

    async def aput_writes(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]],
                          task_id: str, task_path: str = "") -> None:
        await self._fleet.aon(config, lambda ops: ops.put_writes(config, writes, task_id, task_path))

    async def adelete_thread(self, thread_id: str) -> None:
        await self._fleet.adelete_thread(str(thread_id))

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        for _ in range(self._fleet.rounds):
            await self._fleet.aeach(lambda db: db.arun(
                lambda ops: ops.delete_for_runs(run_ids)), "delete_for_runs")

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        await self._fleet.acopy_thread(str(source_thread_id), str(target_thread_id),
                                       self.page_size)

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        for groups in self._fleet.group(thread_ids):
            await self._fleet.aeach(_apruning(groups, strategy), "prune", list(groups))

    async def aget_delta_channel_history(self, *, config: RunnableConfig,
                                         channels: Sequence[str]
                                         ) -> Mapping[str, DeltaChannelHistory]:
        return await self._fleet.aon(config, lambda ops: ops.delta_history(config, channels),
                               _no_history)

    # --- tags: checkpoints that retention never deletes ------------------------------------

    def tag(self, config: RunnableConfig, name: str) -> None:
        """Name a checkpoint (moving the name if the thread had it elsewhere); compaction keeps it."""
        self._fleet.on(config, lambda ops: ops.tag(config, name), missing=NotFoundError)

    async def atag(self, config: RunnableConfig, name: str) -> None:
        await self._fleet.aon(config, lambda ops: ops.tag(config, name), missing=NotFoundError)

    def untag(self, config: RunnableConfig, name: str) -> bool:
        """Remove a tag; returns whether it existed."""
        return self._fleet.on(config, lambda ops: ops.untag(config, name), _false)

    async def auntag(self, config: RunnableConfig, name: str) -> bool:
        return await self._fleet.aon(config, lambda ops: ops.untag(config, name), _false)

    def tags(self, config: RunnableConfig) -> dict[str, str]:
        """A thread's tags in the config's namespace: {name: checkpoint_id}."""
        return self._fleet.on(config, lambda ops: ops.tags(config), _false)

    async def atags(self, config: RunnableConfig) -> dict[str, str]:
        return await self._fleet.aon(config, lambda ops: ops.tags(config), _false)

    # --- encryption keys: maintenance (`d1saver rekey`) -------------------------------------

    def key_census(self) -> dict[str, dict[str, int]]:
        """Stored values per table ("checkpoints" with their metadata, "writes") and key id
        ("plaintext": under none), summed over the databases: one request each."""
        return add_census(self._fleet.each(lambda db: db.run(lambda ops: ops.key_census()),
                                           "key_census").values())

    def rekey(self, table: str, *, page_size: int = 100, seal_plaintext: bool = False,
              guard: Sequence[Statement] = (),
              progress: Callable[[RekeyCounts], None] | None = None) -> RekeyCounts:
        """Re-seal under the newest key every value of `table` ("checkpoints", with their
        metadata, "writes", or "delta_frozen": frozen DeltaChannel histories) under another
        key (and with `seal_plaintext` under none), in keyset pages of `page_size` rows, one
        atomic batch each led by `guard` (a lease check): resumable. Over several databases, on each (same `guard`: prefer `database(id)`)."""
        return add_counts(self._fleet.each(lambda db: db.run(lambda ops: ops.rekey(
            table, page_size=page_size, plaintext=seal_plaintext, guard=guard,
            progress=progress)), "rekey"))

    # --- versions -------------------------------------------------------------------------

    def get_next_version(self, current: str | None, channel: None) -> str:
        """Monotonic string versions: the counter zero-padded to 10 digits. SqliteSaver adds a
        random fraction so two forks never store channel blobs under one version; d1saver keeps
        values in the checkpoint, so it needs none (each costs ~3 compressed bytes a version,
        and every checkpoint carries one per channel and per node seen). A version of this form
        sorts above any earlier one (schema v7's "0000000005.123456", SqliteSaver's 32 digits)
        with a lower counter, so their threads keep increasing.
        """
        if current is None:
            current_v = 0
        elif isinstance(current, int):
            current_v = current
        else:
            current_v = int(current.split(".")[0])
        return f"{current_v + 1:010}"


def _pruning(groups: Mapping[str, Sequence[str]], strategy: str
             ) -> Callable[[Database], None]:
    """prune of each database's threads in `groups`, run on that database."""
    return lambda db: db.run(lambda ops: ops.prune(groups[db.database_id], strategy))


def _apruning(groups: Mapping[str, Sequence[str]], strategy: str
              ) -> Callable[[Database], Awaitable[None]]:
    return lambda db: db.arun(lambda ops: ops.prune(groups[db.database_id], strategy))


def _config(thread_id: str) -> RunnableConfig:
    return {"configurable": {"thread_id": thread_id}}


def _none(result: Any) -> bool:
    return result is None


def _false(result: Any) -> bool:
    return not result


def _no_history(histories: Mapping[str, DeltaChannelHistory]) -> bool:
    return all(not h["writes"] and "seed" not in h for h in histories.values())



# An INTERNAL span per public call, when OpenTelemetry is installed (d1saver/http/telemetry.py).
telemetry.instrument(D1Saver, [
    "setup", "asetup", "execute", "get_tuple", "aget_tuple", "list", "alist", "put", "aput",
    "put_writes", "aput_writes", "get_delta_channel_history", "aget_delta_channel_history",
    "delete_thread", "adelete_thread", "delete_for_runs", "adelete_for_runs", "copy_thread",
    "acopy_thread", "prune", "aprune", "tag", "atag", "untag", "auntag", "tags", "atags",
    "key_census", "rekey"])


__all__ = ["D1Saver"]
