"""The factories langgraph.json names (d1saver.agent_server), entered as the Agent Server enters
them: with no arguments, settings from the environment, against a local D1 over HTTP."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from d1saver import ConfigError, D1Saver, D1Store, QueryError, Statement
from d1saver import agent_server
from d1saver.local import LocalD1

pytestmark = pytest.mark.anyio


def settings(base_url: str, database_id: str = "agents") -> dict[str, str]:
    return {"D1_API_BASE_URL": base_url, "D1_DATABASE_ID": database_id,
            "CLOUDFLARE_ACCOUNT_ID": "local", "CLOUDFLARE_API_TOKEN": "local"}


@pytest.fixture
def engine() -> LocalD1:
    """A strict engine, as `d1saver serve` runs: it serves `agents` and nothing else."""
    engine = LocalD1(create=False)
    engine.create_database("agents")
    return engine


@pytest.fixture
def env(engine: LocalD1, serve: Callable[..., str], monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    values = settings(serve(engine=engine))
    for name, value in values.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv(agent_server.STORE_CONFIG_ENV, raising=False)
    monkeypatch.delenv("D1SAVER_ENCRYPTION_KEYS", raising=False)
    return values


def tables(engine: LocalD1) -> set[str]:
    """The tables of the `agents` database, read behind the saver's back."""
    body = json.dumps({"sql": "SELECT name FROM sqlite_master WHERE type = 'table'"}).encode()
    answer = engine.handle("POST", "/client/v4/accounts/local/d1/database/agents/query",
                           {"Authorization": "Bearer local"}, body)
    return {row["name"] for row in json.loads(answer.body)["result"][0]["results"]}


async def test_checkpointer_sets_up_before_it_yields_and_closes_after(env: dict[str, str],
                                                                      engine: LocalD1) -> None:
    assert "checkpoints" not in tables(engine)
    async with agent_server.checkpointer() as saver:
        assert isinstance(saver, D1Saver)
        assert saver.database_id == "agents"
        assert {"checkpoints", "writes", "d1saver_schema"} <= tables(engine)  # before any use
        requests = engine.stats.snapshot()["requests"]
        assert await saver.aget_tuple({"configurable": {"thread_id": "t"}}) is None
        assert engine.stats.snapshot()["requests"] == requests + 1  # no setup left to do
    assert saver.client._sync is None and not saver.client._async  # every client closed


async def test_checkpointer_stops_the_start_on_an_unknown_database(env: dict[str, str],
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """A typo in D1_DATABASE_ID stops the server's start with D1's not-found error naming it."""
    monkeypatch.setenv("D1_DATABASE_ID", "agentz")
    with pytest.raises(QueryError) as refused:
        async with agent_server.checkpointer():
            pytest.fail("yielded a saver on a database that does not exist")
    assert refused.value.code == 7404 and "agentz" in str(refused.value)


async def test_store_without_a_ttl_runs_no_sweeper(env: dict[str, str], engine: LocalD1) -> None:
    async with agent_server.store() as store:
        assert isinstance(store, D1Store) and store.ttl_config is None
        assert store._sweeper is None
        assert "store_items" in tables(engine)
        await store.aput(("users", "u1"), "prefs", {"color": "teal"})
        assert (await store.aget(("users", "u1"), "prefs")).value == {"color": "teal"}


async def test_store_runs_the_sweeper_while_a_ttl_is_configured(env: dict[str, str],
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """langgraph.json's store entry, as the server passes it on (LANGGRAPH_STORE): its ttl
    reaches D1Store, whose sweeper runs until the server stops (the server runs none for a
    custom store)."""
    ttl = {"default_ttl": 60, "refresh_on_read": True, "sweep_interval_minutes": 30}
    monkeypatch.setenv(agent_server.STORE_CONFIG_ENV,
                       json.dumps({"path": "d1saver.agent_server.store", "ttl": ttl}))
    async with agent_server.store() as store:
        assert store.ttl_config == ttl
        sweeper = store._sweeper
        assert sweeper is not None and sweeper.is_alive()
        await store.aput(("a",), "k", {"v": 1})
        (row,) = store._fleet.single().client.execute(
            [Statement("SELECT expires_at IS NOT NULL FROM store_items", [])])[0].rows
        assert row == [1]  # the default TTL applied
    assert not sweeper.is_alive() and store._sweeper is None


@pytest.mark.parametrize(("config", "expected"), [
    (None, {}),
    ("", {}),
    ('{"path": "d1saver.agent_server.store"}', {}),
    ('{"path": "x", "ttl": {"default_ttl": 5}, "index": {"dims": 3, "embed": "fake:e"}}',
     {"ttl": {"default_ttl": 5}, "index": {"dims": 3, "embed": "fake:e"}}),
])
def test_store_options(config: str | None, expected: dict[str, Any]) -> None:
    assert agent_server.store_options(config) == expected


@pytest.mark.parametrize("config", ["{not json", "[1]", '{"ttl": 5}'])
def test_store_options_refuse_what_is_not_langgraph_json(config: str) -> None:
    with pytest.raises(ConfigError):
        agent_server.store_options(config)


def test_the_factories_take_no_arguments() -> None:
    """The server calls its target with none."""
    import inspect

    for factory in (agent_server.checkpointer, agent_server.store):
        assert not inspect.signature(factory).parameters


def test_server_versions_keep_the_order_of_their_counters() -> None:
    """LangGraph compares versions as strings. The server writes `%032d.%016f`; d1saver writes
    `%010d` (schema v7 wrote `%010d.%06d`): unpadded, d1saver's 3 sorts above the server's 4."""
    d1saver_3, v7_3, server_4 = "0000000003", "0000000003.123456", f"{4:032}.0.8807733394514414"
    assert d1saver_3 > server_4  # the defect: a newer server version looks older
    padded = [agent_server.server_version(v) for v in (d1saver_3, v7_3, server_4)]
    assert padded[0] < padded[2] and padded[1] < padded[2]
    assert padded[2] == server_4  # the server's own are left alone
    assert padded[1] == f"{3:032}.123456"
    counters = ["0000000001", f"{2:032}.0.5", "0000000003", f"{4:032}.0.1", "0000000005"]
    assert sorted(counters, key=agent_server.server_version) == counters
    assert agent_server.server_version(7) == 7 and agent_server.server_version("x.1") == "x.1"


async def test_the_server_saver_reads_versions_in_the_servers_form(env: dict[str, str]) -> None:
    """What D1Saver stored is read back padded by the server's saver, and left as stored."""
    from langgraph.checkpoint.base import empty_checkpoint

    checkpoint = empty_checkpoint()
    checkpoint["channel_versions"] = {"a": "0000000002", "b": "0000000001"}
    checkpoint["versions_seen"] = {"node": {"a": "0000000001"}}
    config = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
    with D1Saver.from_env() as plain:
        plain.put(config, checkpoint, {"source": "input", "step": -1, "parents": {}}, {})
    async with agent_server.checkpointer() as saver:
        assert isinstance(saver, agent_server.AgentServerSaver)
        for tup in [await saver.aget_tuple(config), saver.get_tuple(config),
                    *[t async for t in saver.alist(config)], *saver.list(config)]:
            assert tup.checkpoint["channel_versions"] == {"a": f"{2:032}", "b": f"{1:032}"}
            assert tup.checkpoint["versions_seen"] == {"node": {"a": f"{1:032}"}}
    with D1Saver.from_env() as plain:
        assert plain.get_tuple(config).checkpoint["channel_versions"] == {"a": "0000000002", "b": "0000000001"}
