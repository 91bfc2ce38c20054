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
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from d1saver.core.errors import ConfigError
from d1saver.memory import D1Store
from d1saver.saver import D1Saver

__all__ = ["checkpointer", "store"]

# Where the Agent Server puts langgraph.json's "store" entry (langgraph_api's cli.run_server).
STORE_CONFIG_ENV = "LANGGRAPH_STORE"


@asynccontextmanager
async def checkpointer() -> AsyncIterator[D1Saver]:
    """A `D1Saver` from the environment, its schema set up, closed when the server stops."""
    async with D1Saver.from_env() as saver:
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
