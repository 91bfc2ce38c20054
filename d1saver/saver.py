"""D1Saver: a LangGraph checkpointer over Cloudflare D1's REST API, sync and async on one instance.

A thin shell: each method runs one operation (d1saver/_ops.py) with the sync or the async
driver. Every public method is one HTTP request (a `list` is one per page): the statements an
operation needs go together as one D1 batch, which D1 runs as one transaction. Writes are
upserts keyed by primary key, so a retry after a lost response stores nothing twice.
"""

from __future__ import annotations

import random
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from types import TracebackType
from typing import Any

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

from d1saver._client import D1Client
from d1saver._crypto import Key, Sealer, keys_from_env
from d1saver._driver import Driver
from d1saver._ops import ListPlan, Operations
from d1saver._protocol import Result, Statement, Tracer
from d1saver._reseal import RekeyCounts
from d1saver._retry import RetryPolicy
from d1saver._serde import default_serde, trusted_serde
from d1saver._settings import DEFAULT_API_BASE_URL, load_settings
from d1saver._values import Values


class D1Saver(BaseCheckpointSaver[str]):
    """A LangGraph checkpointer that keeps checkpoints in Cloudflare D1, over its REST API.

    Keyword-only. `transport` injects an httpx transport (both sync and async if it implements
    both, as `d1saver.local.LocalD1Transport` does); `tracer` sees every HTTP attempt;
    `retry` bounds retries; `guard_head=True` refuses a `put` whose parent is no longer the
    thread's newest checkpoint (`CheckpointConflictError`), catching accidental forks when
    two writers resume one thread. `page_size` is how many checkpoints one `list` request
    reads. `group_commit` sends writes that arrive while one is in flight together, in
    one batch, after a window of `group_commit_window` seconds (10 ms; see
    d1saver/_group_commit.py). The schema is created on first use (one extra request, once) unless
    `auto_setup=False`; `setup()` does it explicitly.

    `encryption_keys` (newest first; each 32 bytes, as bytes or base64 text) seal every stored
    value with AES-256-GCM bound to its row: a value altered, moved or planted is refused with
    `IntegrityError`, and any type is constructed from the rows that pass (no allowlist).
    New values use the newest key; values under the others stay readable (`d1saver rekey`).
    """

    def __init__(
        self,
        *,
        account_id: str,
        database_id: str,
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
        encryption_keys: Sequence[Key] | Key | None = None,
    ) -> None:
        # Compatible by default, exactly as LangGraph's own savers (d1saver/_serde.py): every
        # type that round-trips through SqliteSaver round-trips here, and
        # LANGGRAPH_STRICT_MSGPACK is honoured as LangGraph honours it. With keys only a key
        # holder can write a row that is read at all, so any type may be constructed.
        sealer = None if encryption_keys is None else Sealer(encryption_keys)
        serde = serde or default_serde()
        super().__init__(serde=serde if sealer is None else trusted_serde(serde))
        kwargs: dict[str, Any] = {}
        if timeout is not None:
            kwargs["timeout"] = timeout
        self.client = D1Client(
            account_id=account_id, database_id=database_id, api_token=api_token,
            api_base_url=api_base_url, retry=retry, transport=transport,
            async_transport=async_transport, tracer=tracer, **kwargs)
        self.driver = Driver(self.client, group_commit=group_commit,
                             group_commit_window=group_commit_window)
        self.ops = Operations(Values(self.serde, sealer), self.client.exchange,
                              guard_head=guard_head, auto_setup=auto_setup)
        self.account_id = account_id
        self.database_id = database_id
        self.page_size = max(1, int(page_size))

    @property  # type: ignore[override]
    def serde(self) -> SerializerProtocol:
        return self._serde

    @serde.setter
    def serde(self, value: SerializerProtocol) -> None:
        # BaseCheckpointSaver sets it in __init__, and with_allowlist() on a shallow copy:
        # the copy gets operations of its own over the new serde (cache and driver shared).
        # With keys no allowlist narrows it: every row read is authenticated.
        ops = self.__dict__.get("ops")
        sealer = None if ops is None else ops.values.sealer
        self._serde = value if sealer is None else trusted_serde(value)
        if ops is not None:
            self.ops = ops.with_values(Values(self._serde, sealer))

    @property
    def guard_head(self) -> bool:
        return self.ops.guard_head

    @guard_head.setter
    def guard_head(self, value: bool) -> None:
        self.ops.guard_head = value

    @property
    def auto_setup(self) -> bool:
        return self.ops.auto_setup

    @auto_setup.setter
    def auto_setup(self, value: bool) -> None:
        self.ops.auto_setup = value

    @property
    def is_setup(self) -> bool:
        """Whether this instance has set the schema up (or found it set up)."""
        return self.ops.is_setup

    @is_setup.setter
    def is_setup(self, value: bool) -> None:
        self.ops.is_setup = value

    @property
    def key_ids(self) -> list[str]:
        """The ids (hex) of the encryption keys held, newest first; empty without keys."""
        sealer = self.ops.values.sealer
        return [] if sealer is None else sealer.key_ids

    @classmethod
    def from_env(cls, *, account_id: str | None = None, database_id: str | None = None,
                 api_base_url: str | None = None, **kwargs: Any) -> D1Saver:
        """Build from CLOUDFLARE_ACCOUNT_ID, CLOUDFLARE_API_TOKEN, D1_DATABASE_ID,
        D1_API_BASE_URL and D1SAVER_ENCRYPTION_KEYS (comma-separated base64, newest first);
        arguments that are not None override them (CLI flags do)."""
        settings = load_settings(account_id=account_id, database_id=database_id,
                                 api_base_url=api_base_url)
        if kwargs.get("encryption_keys") is None:
            kwargs["encryption_keys"] = keys_from_env()
        return cls(account_id=settings.account_id, database_id=settings.database_id,
                   api_token=settings.api_token.get_secret_value(),
                   api_base_url=settings.api_base_url, **kwargs)

    def __repr__(self) -> str:
        return (f"D1Saver(account_id={self.account_id!r}, database_id={self.database_id!r}, "
                f"url={self.client.url!r})")

    # --- lifecycle ------------------------------------------------------------------------

    def __enter__(self) -> D1Saver:
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.client.close()

    async def __aenter__(self) -> D1Saver:
        return self

    async def __aexit__(self, et: type[BaseException] | None, ev: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.client.aclose()

    def close(self) -> None:
        self.client.close()

    async def aclose(self) -> None:
        await self.client.aclose()

    def setup(self) -> None:
        """Create the schema (schema.sql) if missing and apply the migrations the database
        lacks; idempotent, one request each."""
        self.driver.run(self.ops.setup_once())

    async def asetup(self) -> None:
        await self.driver.arun(self.ops.setup_once())

    def execute(self, statements: Sequence[Statement]) -> list[Result]:
        """Run d1saver's own named statements in one request (schema created if missing).

        For maintenance tools (compaction, the CLI), which send the statements of
        d1saver.admin.
        """
        return self.driver.run(self.ops.execute(statements))

    # --- BaseCheckpointSaver, sync --------------------------------------------------------

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return self.driver.run(self.ops.get_tuple(config))

    def list(self, config: RunnableConfig | None, *, filter: dict[str, Any] | None = None,
             before: RunnableConfig | None = None, limit: int | None = None
             ) -> Iterator[CheckpointTuple]:
        plan = ListPlan(config, filter, before, limit, self.page_size,
                        sealed=bool(self.key_ids))
        while (stmt := plan.next_statement()) is not None:
            yield from plan.consume(self.driver.run(self.ops.page(stmt)))

    def put(self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata,
            new_versions: ChannelVersions) -> RunnableConfig:
        return self.driver.run(self.ops.put(config, checkpoint, metadata))

    def put_writes(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]],
                   task_id: str, task_path: str = "") -> None:
        self.driver.run(self.ops.put_writes(config, writes, task_id, task_path))

    def delete_thread(self, thread_id: str) -> None:
        self.driver.run(self.ops.delete_thread(thread_id))

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        self.driver.run(self.ops.delete_for_runs(run_ids))

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """One request without keys; with keys, pages re-sealed for the target (_ops.py)."""
        self.driver.run(self.ops.copy_thread(source_thread_id, target_thread_id,
                                             self.page_size))

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """Keep the newest checkpoint ("keep_latest") or none ("delete").

        keep_latest keeps the newest checkpoint of the root namespace and of each subgraph
        namespace a kept checkpoint reaches, tagged checkpoints and the ancestors that the kept
        ones' DeltaChannels replay from, and relinks parents, like the compaction job (same SQL).
        """
        self.driver.run(self.ops.prune(thread_ids, strategy))

    def get_delta_channel_history(self, *, config: RunnableConfig, channels: Sequence[str]
                                  ) -> Mapping[str, DeltaChannelHistory]:
        return self.driver.run(self.ops.delta_history(config, channels))

    # --- BaseCheckpointSaver, async -------------------------------------------------------

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return await self.driver.arun(self.ops.get_tuple(config))

    async def alist(self, config: RunnableConfig | None, *, filter: dict[str, Any] | None = None,
                    before: RunnableConfig | None = None, limit: int | None = None
                    ) -> AsyncIterator[CheckpointTuple]:
        plan = ListPlan(config, filter, before, limit, self.page_size,
                        sealed=bool(self.key_ids))
        while (stmt := plan.next_statement()) is not None:
            for tup in plan.consume(await self.driver.arun(self.ops.page(stmt))):
                yield tup

    async def aput(self, config: RunnableConfig, checkpoint: Checkpoint,
                   metadata: CheckpointMetadata, new_versions: ChannelVersions) -> RunnableConfig:
        return await self.driver.arun(self.ops.put(config, checkpoint, metadata))

    async def aput_writes(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]],
                          task_id: str, task_path: str = "") -> None:
        await self.driver.arun(self.ops.put_writes(config, writes, task_id, task_path))

    async def adelete_thread(self, thread_id: str) -> None:
        await self.driver.arun(self.ops.delete_thread(thread_id))

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        await self.driver.arun(self.ops.delete_for_runs(run_ids))

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        await self.driver.arun(self.ops.copy_thread(source_thread_id, target_thread_id,
                                                    self.page_size))

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        await self.driver.arun(self.ops.prune(thread_ids, strategy))

    async def aget_delta_channel_history(self, *, config: RunnableConfig,
                                         channels: Sequence[str]
                                         ) -> Mapping[str, DeltaChannelHistory]:
        return await self.driver.arun(self.ops.delta_history(config, channels))

    # --- tags: checkpoints that retention never deletes ------------------------------------

    def tag(self, config: RunnableConfig, name: str) -> None:
        """Name a checkpoint (moving the name if the thread had it elsewhere); compaction keeps it."""
        self.driver.run(self.ops.tag(config, name))

    async def atag(self, config: RunnableConfig, name: str) -> None:
        await self.driver.arun(self.ops.tag(config, name))

    def untag(self, config: RunnableConfig, name: str) -> bool:
        """Remove a tag; returns whether it existed."""
        return self.driver.run(self.ops.untag(config, name))

    async def auntag(self, config: RunnableConfig, name: str) -> bool:
        return await self.driver.arun(self.ops.untag(config, name))

    def tags(self, config: RunnableConfig) -> dict[str, str]:
        """A thread's tags in the config's namespace: {name: checkpoint_id}."""
        return self.driver.run(self.ops.tags(config))

    async def atags(self, config: RunnableConfig) -> dict[str, str]:
        return await self.driver.arun(self.ops.tags(config))

    # --- encryption keys: maintenance (`d1saver rekey`) -------------------------------------

    def key_census(self) -> dict[str, dict[str, int]]:
        """Stored values per table ("checkpoints", their metadata sealed with them, and
        "writes") and key id, values under no key counted as "plaintext". One request."""
        return self.driver.run(self.ops.key_census())

    def rekey(self, table: str, *, page_size: int = 100, seal_plaintext: bool = False,
              guard: Sequence[Statement] = (),
              progress: Callable[[RekeyCounts], None] | None = None) -> RekeyCounts:
        """Re-seal under the newest key every value of `table` ("checkpoints", with their
        metadata, or "writes") that another key sealed, and with `seal_plaintext` those
        written before keys were set. Keyset pages of `page_size` rows, one atomic batch each
        (led by `guard`, e.g. a lease check), about one request per page: a run stopped
        midway is continued by the next. Needs the keys the rows were sealed under."""
        return self.driver.run(self.ops.rekey(table, page_size=page_size,
                                              plaintext=seal_plaintext, guard=guard,
                                              progress=progress))

    # --- versions -------------------------------------------------------------------------

    def get_next_version(self, current: str | None, channel: None) -> str:
        """Monotonic string versions, shorter than SqliteSaver's (17 characters, not 51).

        Every checkpoint carries a version per channel and per node seen, so their length is a
        large part of what each `put` sends. The counter is zero-padded to 10 digits; a version
        of this form still sorts above any 32-digit one (SqliteSaver's form) with the same or a
        lower counter, so threads written in that form keep increasing.
        """
        if current is None:
            current_v = 0
        elif isinstance(current, int):
            current_v = current
        else:
            current_v = int(current.split(".")[0])
        return f"{current_v + 1:010}.{random.randrange(1_000_000):06}"


__all__ = ["D1Saver"]
