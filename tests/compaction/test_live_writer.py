"""Compaction beside a live graph (defect 12): the nightly cron runs while agents write.

With durability="async" LangGraph sends a checkpoint's put and goes on running the step's
tasks; their put_writes can be stored while the put is still in flight, and with a
DeltaChannel those writes are the next checkpoint's messages. Compaction must leave them
alone. The graph's transport below makes that window certain rather than lucky: it holds the
put of every checkpoint that gets writes until all of them are stored, runs a compaction
(keep=1) of the thread from there, then lets the put go on. (Without group commit, so that
every write is a request of its own: a merged batch could carry a checkpoint's writes with
its put.) A second test runs the default saver, group commit on, with a compaction before
every put. Either way the thread must end as the same run on InMemorySaver ends.
"""

from __future__ import annotations

import asyncio
import functools
import json
import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from langgraph.checkpoint.memory import InMemorySaver

from d1saver.compaction import compact
from d1saver import D1Saver
from d1saver.sql import catalogue as _sql
from d1saver.local import LocalD1Transport
from tests.compaction import query, statements_of
from tests.conftest import Backend
from benchmarks.workload import build_graph, first_input

THREAD = "live"
CONFIG = {"configurable": {"thread_id": THREAD}}
INPUT = first_input()
TURNS = 4
UPSERT = _sql.PUT.sql
# Writes stored, a "p:" row counting the writes it packs (d1saver/sql/catalogue.py, migration 7).
LOGICAL_WRITES = ("SELECT COALESCE(SUM(CASE WHEN substr(value, 1, 2) = 'p:' THEN "
                  "json_array_length(substr(value, 3)) ELSE 1 END), 0) FROM writes "
                  "WHERE thread_id = ?1 AND checkpoint_id = ?2")
WAIT_LIMIT = 10.0  # seconds a held put waits for its writes: only so a broken run cannot hang


@functools.cache
def reference() -> tuple[dict[str, Any], dict[int, dict[str, Any]], dict[int, int]]:
    """The run on InMemorySaver: its result, the values and the pending writes per step."""
    saver = InMemorySaver()
    graph = agent_graph(saver)
    result = graph.invoke(INPUT, CONFIG, durability="async")
    history = list(graph.get_state_history(CONFIG))
    values = {s.metadata["step"]: s.values for s in history}
    writes = {s.metadata["step"]: len(saver.get_tuple(s.config).pending_writes) for s in history}
    return result, values, writes


def agent_graph(saver: Any) -> Any:
    """The shared agent with its messages in a DeltaChannel snapshotting every 3 updates, so
    that a lost pending write would change the state."""
    return build_graph(saver, variant="delta", turns=TURNS, snapshot_frequency=3)


class HoldPuts(httpx.BaseTransport, httpx.AsyncBaseTransport):
    """The graph's way to the local D1: the put of a checkpoint whose step is a key of
    `writes_per_step` waits until that many of its writes are stored, then `meanwhile()`
    runs, then the put goes on. `held` lists (step, writes stored when `meanwhile` ran)."""

    def __init__(self, inner: LocalD1Transport, writes_per_step: dict[int, int],
                 stored: Callable[[str], int], meanwhile: Callable[[], Any]) -> None:
        self.inner, self.writes_per_step = inner, writes_per_step
        self.stored, self.meanwhile = stored, meanwhile
        self.held: list[tuple[int, int]] = []

    def _put_to_hold(self, request: httpx.Request) -> tuple[str, int] | None:
        for item in statements_of(request):
            if item["sql"] == UPSERT:
                checkpoint_id, step = item["params"][2], json.loads(item["params"][6])["step"]
                return (checkpoint_id, step) if step in self.writes_per_step else None
        return None

    def _ready(self, checkpoint_id: str, step: int) -> bool:
        return self.stored(checkpoint_id) >= self.writes_per_step[step]

    def _run_meanwhile(self, checkpoint_id: str, step: int) -> None:
        self.held.append((step, self.stored(checkpoint_id)))
        self.meanwhile()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        put = self._put_to_hold(request)
        if put is not None:
            deadline = time.monotonic() + WAIT_LIMIT
            while not self._ready(*put) and time.monotonic() < deadline:
                time.sleep(0.005)
            self._run_meanwhile(*put)
        return self.inner.handle_request(request)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        put = self._put_to_hold(request)
        if put is not None:
            deadline = time.monotonic() + WAIT_LIMIT
            while (not await asyncio.to_thread(self._ready, *put)
                   and time.monotonic() < deadline):
                await asyncio.sleep(0.005)
            await asyncio.to_thread(self._run_meanwhile, *put)
        return await self.inner.handle_async_request(request)


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_compaction_beside_an_async_durability_graph_loses_nothing(local: Backend,
                                                                   mode: str) -> None:
    """A DeltaChannel agent with durability="async" and compaction(keep=1) racing it at every
    put: the stored thread ends with the reference run's state, at the head and at every
    checkpoint compaction kept, with the same pending writes."""
    result, values, writes = reference()
    compactor = local.saver()
    compactor.setup()
    runs: list[int] = []

    def stored(checkpoint_id: str) -> int:
        return query(compactor, LOGICAL_WRITES, THREAD, checkpoint_id)[0][0]

    def meanwhile() -> None:
        runs.append(compact(compactor, keep=1, threads=[THREAD]).checkpoints_deleted)

    with_writes = {step: n for step, n in writes.items() if n}
    hold = HoldPuts(local.transport, with_writes, stored, meanwhile)
    saver = D1Saver(account_id=local.account_id, database_id=local.database_id,
                    api_token=local.api_token, api_base_url=local.base_url, transport=hold,
                    group_commit=False)

    got = run_graph(saver, mode)

    # Every put that had writes was held until all of them were stored, and compaction ran.
    assert hold.held == sorted(with_writes.items())
    assert sum(runs) > 0  # and it deleted checkpoints while the graph ran
    assert got == result
    assert_thread_as_reference(saver)


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_compaction_before_every_put_with_group_commit(local: Backend, mode: str) -> None:
    """The default saver (group commit on): a compaction(keep=1) before each put is sent; the
    stored thread ends as the reference run's."""
    result, values, writes = reference()
    compactor = local.saver()
    compactor.setup()
    runs: list[int] = []

    def meanwhile() -> None:
        runs.append(compact(compactor, keep=1, threads=[THREAD]).checkpoints_deleted)

    every_put = dict.fromkeys(writes, 0)  # hold every put, for no write
    hold = HoldPuts(local.transport, every_put, lambda checkpoint_id: 0, meanwhile)
    saver = D1Saver(account_id=local.account_id, database_id=local.database_id,
                    api_token=local.api_token, api_base_url=local.base_url, transport=hold)

    got = run_graph(saver, mode)

    assert [step for step, _ in hold.held] == sorted(writes)
    assert sum(runs) > 0
    assert got == result
    assert_thread_as_reference(saver)


def run_graph(saver: D1Saver, mode: str) -> dict[str, Any]:
    graph = agent_graph(saver)
    if mode == "sync":
        return graph.invoke(INPUT, CONFIG, durability="async")
    return asyncio.run(graph.ainvoke(INPUT, CONFIG, durability="async"))


def assert_thread_as_reference(saver: D1Saver) -> None:
    """The head's state is the reference run's last, and so is every checkpoint compaction
    kept (values and pending writes)."""
    _, values, writes = reference()
    graph = agent_graph(saver)
    assert graph.get_state(CONFIG).values == values[max(values)]
    survivors = list(graph.get_state_history(CONFIG))
    assert len(survivors) < len(values)
    for snapshot in survivors:
        step = snapshot.metadata["step"]
        assert snapshot.values == values[step], f"step {step}"
        assert len(saver.get_tuple(snapshot.config).pending_writes) == writes[step], f"step {step}"
