"""LangGraph's Agent Server (`langgraph dev`, from langgraph-cli[inmem]) on D1: the two factories
that langgraph.json names by dotted path.

    {"checkpointer": {"path": "d1saver.agent_server.checkpointer"},
     "store": {"path": "d1saver.agent_server.store"}}

The server imports each path (`module.attribute`, dots only: a `:` is read as a file path) and
calls it with no arguments, so each factory reads the usual settings from the environment
(`D1Saver.from_env`: CLOUDFLARE_ACCOUNT_ID, CLOUDFLARE_API_TOKEN, D1_DATABASE_ID,
D1_API_BASE_URL, D1SAVER_ENCRYPTION_KEYS; langgraph.json's `env` file is loaded first). Each
sets up the schema before the server takes requests (one request), so a wrong database id or
token stops the start with D1's error, and closes its clients when the server stops.
docs/guide/agent-server.md has the whole recipe.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator, Iterator, Mapping
from contextlib import asynccontextmanager
from typing import Any, cast

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import CheckpointTuple

from d1saver.core.errors import ConfigError
from d1saver.memory import D1Store
from d1saver.saver import D1Saver

__all__ = ["AgentServerSaver", "checkpointer", "server_version", "store"]

# Where the Agent Server puts langgraph.json's "store" entry (langgraph_api's cli.run_server).
STORE_CONFIG_ENV = "LANGGRAPH_STORE"


# The width of the counter in the Agent Server's channel versions ("%032d.%016f" of a random
# fraction, langgraph_api's adapter); d1saver's own are 10 digits (D1Saver.get_next_version).
SERVER_VERSION_DIGITS = 32


def server_version(version: Any) -> Any:
    """`version` with its counter zero-padded to the Agent Server's 32 digits.

    The server makes the next versions itself, in its own form, and LangGraph compares versions
    as strings: d1saver's `0000000003` sorts above the server's next `000...0004.0.53...`, so
    on a thread first written by D1Saver a new input through the server would trigger no node.
    Padded, the order of every version of a thread is its counters' order, whoever wrote it.
    """
    if isinstance(version, str):
        counter, dot, rest = version.partition(".")
        if counter.isdigit() and len(counter) < SERVER_VERSION_DIGITS:
            return f"{int(counter):0{SERVER_VERSION_DIGITS}d}{dot}{rest}"
    return version


def _server_versions(tup: CheckpointTuple) -> CheckpointTuple:
    checkpoint = tup.checkpoint
    versions = _padded(checkpoint.get("channel_versions") or {})
    seen = {node: _padded(channels) for node, channels in (checkpoint.get("versions_seen") or {}).items()}
    if versions == checkpoint.get("channel_versions") and seen == checkpoint.get("versions_seen"):
        return tup
    return tup._replace(checkpoint={**checkpoint, "channel_versions": versions, "versions_seen": seen})


def _padded(versions: Mapping[str, Any]) -> dict[str, Any]:
    return {channel: server_version(version) for channel, version in versions.items()}


class AgentServerSaver(D1Saver):
    """The `D1Saver` the Agent Server gets: checkpoints read back with their channel versions in
    the server's form (`server_version`), so the server continues threads that your own code
    started with D1Saver. Nothing stored is changed by reading."""

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        tup = super().get_tuple(config)
        return None if tup is None else _server_versions(tup)

    def list(self, config: RunnableConfig | None, *, filter: dict[str, Any] | None = None,
             before: RunnableConfig | None = None, limit: int | None = None
             ) -> Iterator[CheckpointTuple]:
        for tup in super().list(config, filter=filter, before=before, limit=limit):
            yield _server_versions(tup)

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        tup = await super().aget_tuple(config)
        return None if tup is None else _server_versions(tup)

    async def alist(self, config: RunnableConfig | None, *, filter: dict[str, Any] | None = None,
                    before: RunnableConfig | None = None, limit: int | None = None
                    ) -> AsyncIterator[CheckpointTuple]:
        async for tup in super().alist(config, filter=filter, before=before, limit=limit):
            yield _server_versions(tup)


@asynccontextmanager
async def checkpointer() -> AsyncIterator[AgentServerSaver]:
    """An `AgentServerSaver` from the environment, its schema set up, closed when the server
    stops."""
    saver = cast(AgentServerSaver, AgentServerSaver.from_env())  # from_env builds `cls`
    async with saver:
        await saver.asetup()
        yield saver


@asynccontextmanager
async def store() -> AsyncIterator[D1Store]:
    """A `D1Store` from the environment, with the `ttl` and `index` of langgraph.json's "store"
    entry. With a TTL configured it runs the store's sweeper (the server skips its own for a
    custom store) until the server stops."""
    options = store_options(os.environ.get(STORE_CONFIG_ENV))
    async with D1Store.from_env(**options) as memory:
        await memory.asetup()
        if memory.ttl_config:
            memory.start_ttl_sweeper()
        try:
            yield memory
        finally:
            # Joins the sweeper thread: off the event loop, which the server watches for blocking.
            await asyncio.to_thread(memory.stop_ttl_sweeper, 5)


def store_options(config: str | None) -> dict[str, Any]:
    """The D1Store options of langgraph.json's "store" entry (as the server passes it, JSON):
    its `ttl` and `index`, which the server hands to no custom store itself."""
    if not config:
        return {}
    try:
        entry = json.loads(config)
    except ValueError:
        raise ConfigError(f"{STORE_CONFIG_ENV} is not JSON: langgraph.json's \"store\" entry "
                          "is expected there") from None
    if not isinstance(entry, dict):
        raise ConfigError(f"{STORE_CONFIG_ENV} is not a JSON object (langgraph.json's \"store\")")
    options: dict[str, Any] = {}
    for key in ("ttl", "index"):
        value = entry.get(key)
        if value is None:
            continue
        if not isinstance(value, dict):
            raise ConfigError(f"langgraph.json's store.{key} must be an object, not {value!r}")
        options[key] = value
    return options
