"""D1Saver: a LangGraph checkpointer over Cloudflare D1's REST API, sync and async on one instance.

Every public method is one HTTP request (a `list` is one per page): the statements an operation
needs go together as one D1 batch, which D1 runs as one transaction. Writes are upserts keyed
by primary key, so a retry after a lost response stores nothing twice.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from types import TracebackType
from typing import Any

import httpx
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    DeltaChannelHistory,
    get_checkpoint_id,
)
from langgraph.checkpoint.serde.base import SerializerProtocol
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

from d1saver import _sql
from d1saver._base import D1SaverBase, DeltaCache, thread_id_of, validate_filter
from d1saver._client import D1Client, Result, Statement, Tracer
from d1saver._errors import NotFoundError
from d1saver._retry import RetryPolicy
from d1saver._settings import DEFAULT_API_BASE_URL, load_settings


class _ListPlan:
    """The pages of one `list` call: the next page's statement and the cursor it leaves."""

    def __init__(self, saver: D1Saver, config: RunnableConfig | None,
                 filter: dict[str, Any] | None, before: RunnableConfig | None,
                 limit: int | None) -> None:
        conf = (config or {}).get("configurable") or {}
        self.saver = saver
        self.thread_id = thread_id_of(config) if config is not None else None
        ns = conf.get("checkpoint_ns")
        self.ns = None if ns is None else str(ns)
        self.checkpoint_id = conf.get("checkpoint_id")
        self.before = get_checkpoint_id(before) if before else None
        self.filter_json = validate_filter(filter)
        self.remaining = limit
        self.cursor: tuple[str, str, str] | None = None
        self.done = limit is not None and limit <= 0

    def next_statement(self) -> Statement | None:
        if self.done:
            return None
        size = self.saver.page_size
        if self.remaining is not None:
            size = min(size, self.remaining)
        self.size = size
        # One row more than the page: if it comes, there is a next page; if not, no request
        # is wasted on an empty one.
        return self.saver.page_statement(
            thread_id=self.thread_id, ns=self.ns, checkpoint_id=self.checkpoint_id,
            before=self.before, filter_json=self.filter_json, cursor=self.cursor, size=size + 1)

    def consume(self, tuples: list[CheckpointTuple]) -> list[CheckpointTuple]:
        more = len(tuples) > self.size
        tuples = tuples[: self.size]
        if self.remaining is not None:
            self.remaining -= len(tuples)
        if not more or self.remaining == 0:
            self.done = True
        else:
            last = tuples[-1].config["configurable"]
            self.cursor = (last["checkpoint_id"], last["thread_id"], last["checkpoint_ns"])
        return tuples


class D1Saver(D1SaverBase):
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
    ) -> None:
        # Strict by default: a row naming a type outside LangGraph's allowlist of safe types
        # is not constructed (anyone who can write the database could otherwise run code in
        # every reader). langgraph-checkpoint 4.3's own default is permissive.
        super().__init__(serde=serde or JsonPlusSerializer(allowed_msgpack_modules=None))
        kwargs: dict[str, Any] = {}
        if timeout is not None:
            kwargs["timeout"] = timeout
        self.client = D1Client(
            account_id=account_id, database_id=database_id, api_token=api_token,
            api_base_url=api_base_url, retry=retry, transport=transport,
            async_transport=async_transport, tracer=tracer, group_commit=group_commit,
            group_commit_window=group_commit_window, **kwargs)
        self.account_id = account_id
        self.database_id = database_id
        self.guard_head = guard_head
        self.page_size = max(1, int(page_size))
        self.auto_setup = auto_setup
        self.is_setup = False
        self._delta_cache = DeltaCache()

    @classmethod
    def from_env(cls, **kwargs: Any) -> D1Saver:
        """Build from CLOUDFLARE_ACCOUNT_ID, CLOUDFLARE_API_TOKEN, D1_DATABASE_ID, D1_API_BASE_URL."""
        settings = load_settings()
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
        """Create the schema (schema.sql) if missing; idempotent, one request."""
        self.client.drive(self._op_setup_once())

    async def asetup(self) -> None:
        await self.client.adrive(self._op_setup_once())

    def execute(self, statements: Sequence[Statement]) -> list[Result]:
        """Run d1saver's own named statements in one request (schema created if missing).

        For the compaction job and the CLI, which send statements of d1saver._sql.
        """
        return self.client.drive(self._exchange(statements))

    # --- BaseCheckpointSaver, sync --------------------------------------------------------

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return self.client.drive(self._op_get_tuple(config))

    def list(self, config: RunnableConfig | None, *, filter: dict[str, Any] | None = None,
             before: RunnableConfig | None = None, limit: int | None = None
             ) -> Iterator[CheckpointTuple]:
        plan = _ListPlan(self, config, filter, before, limit)
        while (stmt := plan.next_statement()) is not None:
            yield from plan.consume(self.client.drive(self._op_page(stmt)))

    def put(self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata,
            new_versions: ChannelVersions) -> RunnableConfig:
        return self.client.drive(self._op_put(config, checkpoint, metadata))

    def put_writes(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]],
                   task_id: str, task_path: str = "") -> None:
        self.client.drive(self._op_put_writes(config, writes, task_id, task_path))

    def delete_thread(self, thread_id: str) -> None:
        self.client.drive(self._op_delete_thread(thread_id))

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        self.client.drive(self._op_delete_for_runs(run_ids))

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        self.client.drive(self._op_copy_thread(source_thread_id, target_thread_id))

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """Keep the newest checkpoint per namespace ("keep_latest") or none ("delete").

        keep_latest also keeps tagged checkpoints and the ancestors that the kept ones'
        DeltaChannels replay from, and relinks parents, like the compaction job (same SQL).
        """
        self.client.drive(self._op_prune(thread_ids, strategy))

    def get_delta_channel_history(self, *, config: RunnableConfig, channels: Sequence[str]
                                  ) -> Mapping[str, DeltaChannelHistory]:
        return self.client.drive(self._op_delta_history(config, channels))

    # --- BaseCheckpointSaver, async -------------------------------------------------------

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return await self.client.adrive(self._op_get_tuple(config))

    async def alist(self, config: RunnableConfig | None, *, filter: dict[str, Any] | None = None,
                    before: RunnableConfig | None = None, limit: int | None = None
                    ) -> AsyncIterator[CheckpointTuple]:
        plan = _ListPlan(self, config, filter, before, limit)
        while (stmt := plan.next_statement()) is not None:
            for tup in plan.consume(await self.client.adrive(self._op_page(stmt))):
                yield tup

    async def aput(self, config: RunnableConfig, checkpoint: Checkpoint,
                   metadata: CheckpointMetadata, new_versions: ChannelVersions) -> RunnableConfig:
        return await self.client.adrive(self._op_put(config, checkpoint, metadata))

    async def aput_writes(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]],
                          task_id: str, task_path: str = "") -> None:
        await self.client.adrive(self._op_put_writes(config, writes, task_id, task_path))

    async def adelete_thread(self, thread_id: str) -> None:
        await self.client.adrive(self._op_delete_thread(thread_id))

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        await self.client.adrive(self._op_delete_for_runs(run_ids))

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        await self.client.adrive(self._op_copy_thread(source_thread_id, target_thread_id))

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        await self.client.adrive(self._op_prune(thread_ids, strategy))

    async def aget_delta_channel_history(self, *, config: RunnableConfig,
                                         channels: Sequence[str]
                                         ) -> Mapping[str, DeltaChannelHistory]:
        return await self.client.adrive(self._op_delta_history(config, channels))

    # --- tags: checkpoints that retention never deletes ------------------------------------

    def tag(self, config: RunnableConfig, name: str) -> None:
        """Name a checkpoint (moving the name if the thread had it elsewhere); compaction keeps it."""
        self.client.drive(self._op_tag(config, name))

    async def atag(self, config: RunnableConfig, name: str) -> None:
        await self.client.adrive(self._op_tag(config, name))

    def untag(self, config: RunnableConfig, name: str) -> bool:
        """Remove a tag; returns whether it existed."""
        return self.client.drive(self._op_untag(config, name))

    async def auntag(self, config: RunnableConfig, name: str) -> bool:
        return await self.client.adrive(self._op_untag(config, name))

    def tags(self, config: RunnableConfig) -> dict[str, str]:
        """A thread's tags in the config's namespace: {name: checkpoint_id}."""
        return self.client.drive(self._op_tags(config))

    async def atags(self, config: RunnableConfig) -> dict[str, str]:
        return await self.client.adrive(self._op_tags(config))

    def _op_tag(self, config: RunnableConfig, name: str):
        thread_id = thread_id_of(config)
        ns = str(config["configurable"].get("checkpoint_ns", ""))
        cid = get_checkpoint_id(config)
        (result,) = yield from self._exchange(
            [Statement(_sql.TAG, (thread_id, ns, cid, str(name)))])
        if not result.rows:
            raise NotFoundError(
                f"no checkpoint {cid!r} in thread {thread_id!r} (namespace {ns!r}) to tag")

    def _op_untag(self, config: RunnableConfig, name: str):
        thread_id = thread_id_of(config)
        ns = str(config["configurable"].get("checkpoint_ns", ""))
        (result,) = yield from self._exchange([Statement(_sql.UNTAG, (thread_id, ns, str(name)))])
        return result.changes > 0

    def _op_tags(self, config: RunnableConfig):
        thread_id = thread_id_of(config)
        ns = str(config["configurable"].get("checkpoint_ns", ""))
        (result,) = yield from self._exchange([Statement(_sql.LIST_TAGS, (thread_id, ns))])
        return {row[0]: row[1] for row in result.rows}


__all__ = ["D1Saver"]
