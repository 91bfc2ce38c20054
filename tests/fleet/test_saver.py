"""D1Saver over four databases: conformance, where threads live, one request per per-thread
operation, operations across the fleet (merged lists, deletes, prunes, copies), failures
reported per database, and reads that fall back to a thread's previous home."""

from __future__ import annotations

import asyncio
import os
from collections import Counter
from typing import Any

import httpx
import pytest
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import CheckpointTuple, empty_checkpoint
from langgraph.checkpoint.conformance import checkpointer_test, validate

from d1saver import D1Saver, FleetError, QueryError, Statement
from d1saver.sql.catalogue import PUT
from tests.compaction import BIG, cfg, checkpoint_id
from tests.fleet.conftest import FleetBackend, unique


def chain(saver: D1Saver, thread_id: str, n: int, *, marker: str = "", ns: str = "",
          run_id: str | None = None, value: Any = None) -> list[RunnableConfig]:
    """n linked checkpoints with one write each; metadata carries `marker` (and `run_id`).
    `value`: every checkpoint's, or a function of its index (stored by content, the same
    value is stored once)."""
    parent, out = cfg(thread_id, ns), []
    for i in range(n):
        cp = empty_checkpoint()
        x = f"{thread_id}:{i}" if value is None else value(i) if callable(value) else value
        cp.update(id=checkpoint_id(i), ts="2026-11-01T00:00:00+00:00",
                  channel_values={"x": x},
                  channel_versions={"x": str(i + 1)})
        md: dict[str, Any] = {"source": "loop", "step": i, "parents": {}, "marker": marker}
        if run_id is not None:
            md["run_id"] = run_id
        parent = saver.put(parent, cp, md, {})
        saver.put_writes(parent, [("x", f"w{i}")], task_id=f"task-{i}")
        out.append(parent)
    return out


def key(t: CheckpointTuple) -> tuple[str, str, str]:
    c = t.config["configurable"]
    return (c["checkpoint_id"], c["thread_id"], c["checkpoint_ns"])


def view(t: CheckpointTuple) -> tuple[Any, ...]:
    """What a reader sees of a tuple, thread id aside."""
    c = t.config["configurable"]
    return (c["checkpoint_ns"], c["checkpoint_id"], t.checkpoint["channel_values"],
            {k: v for k, v in t.metadata.items()}, sorted(map(tuple, t.pending_writes or [])),
            (t.parent_config or {}).get("configurable", {}).get("checkpoint_id"))


def spread(saver: D1Saver, prefix: str, n: int) -> list[str]:
    """n thread ids covering every database of the saver."""
    ids = [f"{prefix}-{i}" for i in range(n)]
    extra = 0
    while set(saver.home(t) for t in ids) != set(saver.database_ids):
        ids.append(f"{prefix}-x{extra}")
        extra += 1
    return ids


# --- conformance and placement ----------------------------------------------------------------


@pytest.mark.anyio
async def test_conformance_81_of_81_over_four_databases(fleet: FleetBackend) -> None:
    @checkpointer_test(name=f"D1Saver x4 [{fleet.name}]")
    async def factory() -> Any:
        saver = fleet.saver()
        await saver.asetup()
        yield saver
        await saver.aclose()

    report = await validate(factory)
    failures = [f for r in report.results.values() for f in r.failures]
    assert not failures, "\n".join(failures)
    assert sum(r.tests_passed for r in report.results.values()) == 81
    # The suite's threads spread over the four databases, each in its home only.
    puts = {e.statements[0].params[0] for e in fleet.events
            if e.statements and e.statements[0].sql == PUT.sql}
    saver = fleet.saver()
    assert {saver.home(t) for t in puts} == set(fleet.database_ids)
    found = threads_by_database(fleet)
    for t in puts:
        assert [db for db, ids in found.items() if t in ids] in ([], [saver.home(t)]), t


def threads_by_database(fleet: FleetBackend) -> dict[str, set[str]]:
    out = {}
    for db in fleet.database_ids:
        with fleet.single(db) as s:
            (res,) = s.execute([Statement("SELECT DISTINCT thread_id FROM checkpoints")])
        out[db] = {r[0] for r in res.rows}
    return out


def test_each_thread_lives_in_exactly_its_home(fleet: FleetBackend) -> None:
    saver = fleet.saver()
    threads = spread(saver, unique(), 24)
    for t in threads:
        chain(saver, t, 2)
    for t in threads:
        assert fleet.holding(t) == [saver.home(t)]
        assert [key(x) for x in saver.list(cfg(t))] == [
            (checkpoint_id(1), t, ""), (checkpoint_id(0), t, "")]


# --- one request to one database per thread ---------------------------------------------------


def test_per_thread_operations_are_one_request_to_the_home(fleet: FleetBackend) -> None:
    saver = fleet.saver()
    saver.setup()
    t = unique()
    home = saver.home(t)

    def one(fn: Any) -> Any:
        out, by_db = fleet.requests(fn)
        assert by_db == Counter({home: 1}), by_db
        return out

    cp = empty_checkpoint()
    cp.update(id=checkpoint_id(0), channel_values={"x": 1}, channel_versions={"x": "1"})
    first = one(lambda: saver.put(cfg(t), cp, {"step": 0}, {}))
    one(lambda: saver.put_writes(first, [("x", 2)], task_id="task"))
    assert one(lambda: saver.get_tuple(cfg(t))).pending_writes == [("task", "x", 2)]
    assert len(one(lambda: list(saver.list(cfg(t))))) == 1
    one(lambda: saver.get_delta_channel_history(config=first, channels=["x"]))
    one(lambda: saver.tag(first, "keep"))
    assert one(lambda: saver.tags(cfg(t))) == {"keep": checkpoint_id(0)}
    assert one(lambda: saver.untag(cfg(t), "keep")) is True
    one(lambda: saver.prune([t]))
    target = next(f"{t}-copy-{i}" for i in range(1000) if saver.home(f"{t}-copy-{i}") == home)
    one(lambda: saver.copy_thread(t, target))
    one(lambda: saver.delete_thread(t))
    assert saver.get_tuple(cfg(t)) is None and saver.get_tuple(cfg(target)) is not None


# --- across the fleet ---------------------------------------------------------------------------


def test_list_none_merges_the_databases_in_order_with_exact_limit_and_before(
        fleet: FleetBackend) -> None:
    saver = fleet.saver(page_size=3)
    marker = unique("m")
    threads = spread(saver, marker, 8)
    for t in threads:
        chain(saver, t, 3, marker=marker)
    f = {"marker": marker}
    expected = sorted(((checkpoint_id(i), t, "") for t in threads for i in range(3)),
                      reverse=True)
    assert [key(x) for x in saver.list(None, filter=f)] == expected
    for limit in (1, 2, 5, len(expected), len(expected) + 3):
        assert [key(x) for x in saver.list(None, filter=f, limit=limit)] == expected[:limit]
    before = cfg(threads[0], "", expected[4][0])
    assert [key(x) for x in saver.list(None, filter=f, before=before)] == [
        k for k in expected if k[0] < expected[4][0]]
    # Lazily: a limit of 2 reads one page of 2 (+1 to see if more follow) in each database.
    _, by_db = fleet.requests(lambda: list(saver.list(None, filter=f, limit=2)))
    assert by_db == Counter({db: 1 for db in fleet.database_ids})

    async def alist(**kw: Any) -> list[tuple[str, str, str]]:
        return [key(x) async for x in saver.alist(None, filter=f, **kw)]

    assert asyncio.run(alist()) == expected
    assert asyncio.run(alist(limit=7)) == expected[:7]


def test_delete_for_runs_and_prune_span_the_fleet(fleet: FleetBackend) -> None:
    saver = fleet.saver()
    saver.setup()
    run = unique("run")
    doomed = spread(saver, unique(), 8)
    kept = spread(saver, unique(), 8)
    for t in doomed:
        chain(saver, t, 2, run_id=run)
    for t in kept:
        chain(saver, t, 3)
    _, by_db = fleet.requests(lambda: saver.delete_for_runs([run]))
    assert by_db == Counter({db: 1 for db in fleet.database_ids})
    assert all(saver.get_tuple(cfg(t)) is None for t in doomed)
    _, by_db = fleet.requests(lambda: saver.prune(kept))
    assert by_db == Counter({saver.home(t): 1 for t in kept})  # one request per database
    assert all(len(list(saver.list(cfg(t)))) == 1 for t in kept)


@pytest.mark.parametrize("size", ["small", "staged"])
def test_copy_thread_between_databases(fleet: FleetBackend, size: str) -> None:
    saver = fleet.saver()
    saver.setup()
    source = unique()
    target = next(f"{source}-to-{i}" for i in range(1000)
                  if saver.home(f"{source}-to-{i}") != saver.home(source))
    if size == "small":
        chain(saver, source, 3)
        chain(saver, source, 2, ns="child:1")
    else:  # over one write batch: staged under another id, then renamed at once
        chain(saver, source, 3, value=lambda _: os.urandom(BIG))  # chunked, incompressible
    saver.tag(cfg(source, "", checkpoint_id(1)), "approval")
    _, by_db = fleet.requests(lambda: saver.copy_thread(source, target))
    assert set(by_db) == {saver.home(source), saver.home(target)}
    if size == "small":
        assert by_db == Counter({saver.home(source): 1, saver.home(target): 1})
    else:
        assert by_db[saver.home(target)] >= 3  # batches of staged rows, then the rename
    assert [view(x) for x in saver.list(cfg(target))] == [view(x) for x in saver.list(cfg(source))]
    assert saver.tags(cfg(target)) == {"approval": checkpoint_id(1)}
    assert fleet.holding(target) == [saver.home(target)]
    assert fleet.holding(source) == [saver.home(source)]


def test_setup_creates_the_schema_in_every_database(local4: FleetBackend) -> None:
    saver = local4.saver()
    _, by_db = local4.requests(saver.setup)
    assert by_db == Counter({db: 1 for db in local4.database_ids})
    assert saver.is_setup


# --- failures are reported per database ---------------------------------------------------------


class Refusing(httpx.BaseTransport, httpx.AsyncBaseTransport):
    """Answers every request to one database with D1's SQL error; passes the others on."""

    def __init__(self, inner: Any, database_id: str) -> None:
        self.inner, self.database_id = inner, database_id

    def _refuse(self, request: httpx.Request) -> httpx.Response | None:
        if f"/database/{self.database_id}/" not in request.url.path:
            return None
        return httpx.Response(400, json={"success": False, "errors": [
            {"code": 7500, "message": "D1_ERROR: disk I/O error: SQLITE_IOERR"}],
            "messages": [], "result": None})

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        return self._refuse(request) or self.inner.handle_request(request)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        return self._refuse(request) or await self.inner.handle_async_request(request)


def test_a_failing_database_is_named_and_hides_nothing_else(local4: FleetBackend) -> None:
    good = local4.saver()
    threads = spread(good, unique(), 8)
    for t in threads:
        chain(good, t, 2, marker="m")
    bad_db = local4.database_ids[2]
    saver = local4.saver(transport=Refusing(local4.transport, bad_db))
    with pytest.raises(FleetError) as info:
        saver.delete_for_runs(["nothing"])
    assert set(info.value.errors) == {bad_db} and bad_db in str(info.value)
    assert isinstance(info.value.errors[bad_db], QueryError)
    assert set(info.value.results) == set(local4.database_ids) - {bad_db}
    with pytest.raises(FleetError) as info:
        list(saver.list(None, filter={"marker": "m"}))
    assert set(info.value.errors) == {bad_db}
    assert {t.config["configurable"]["thread_id"] for page in info.value.results.values()
            for t in page} == {t for t in threads if good.home(t) != bad_db}
    with pytest.raises(FleetError) as info:
        asyncio.run(saver.aprune(threads))
    assert set(info.value.errors) == {bad_db}
    # Per-thread operations elsewhere are unaffected.
    ok = next(t for t in threads if good.home(t) != bad_db)
    assert saver.get_tuple(cfg(ok)) is not None


# --- reads while threads move: the previous home on a miss --------------------------------------


def test_a_read_that_misses_at_the_new_home_looks_at_the_previous_one(
        fleet: FleetBackend) -> None:
    two = fleet.database_ids[:2]
    old = fleet.saver(two)
    new = fleet.saver(previous_database_ids=two)
    new.setup()
    threads = spread(new, unique(), 12)
    for t in threads:
        chain(old, t, 2)
    moved = [t for t in threads if new.home(t) != old.home(t)]
    stayed = [t for t in threads if new.home(t) == old.home(t)]
    assert moved and stayed
    for t in moved:
        tup, by_db = fleet.requests(lambda t=t: new.get_tuple(cfg(t)))
        assert view(tup) == view(old.get_tuple(cfg(t)))
        assert by_db == Counter({new.home(t): 1, old.home(t): 1})  # a miss, then the old home
        assert [view(x) for x in new.list(cfg(t))] == [view(x) for x in old.list(cfg(t))]
        assert new.get_delta_channel_history(config=cfg(t), channels=["x"]) == \
            old.get_delta_channel_history(config=cfg(t), channels=["x"])
        assert fleet.saver().get_tuple(cfg(t)) is None  # without previous_database_ids: not found
    for t in stayed:
        _, by_db = fleet.requests(lambda t=t: new.get_tuple(cfg(t)))
        assert by_db == Counter({new.home(t): 1})
    t = moved[0]
    new.delete_thread(t)  # both homes, so that a later rebalance cannot bring it back
    assert fleet.holding(t) == []


def test_views_of_one_database(local4: FleetBackend) -> None:
    saver = local4.saver()
    threads = spread(saver, unique(), 8)
    for t in threads:
        chain(saver, t, 1)
    got = saver.each_database(lambda db: sorted(
        r[0] for r in db.execute([Statement("SELECT thread_id FROM checkpoints")])[0].rows))
    assert got == {db: sorted(t for t in threads if saver.home(t) == db)
                   for db in local4.database_ids}


def test_a_copy_onto_a_compacted_thread_in_another_database_keeps_its_records(
        local4: FleetBackend) -> None:
    """The target, homed in another database, holds a compacted history of its own (frozen
    records at a checkpoint the source does not have): a copy onto it keeps those records,
    so the target's own checkpoint reads as before, beside the source's."""
    from d1saver.compaction import compact
    from tests.compaction.test_reseed import blob_graph

    saver = local4.saver()
    saver.setup()
    source = unique()
    target = next(f"{source}-to-{i}" for i in range(1000)
                  if saver.home(f"{source}-to-{i}") != saver.home(source))
    graph = blob_graph(saver, "blob")
    graph.invoke({"messages": ["hi"], "n": 0}, cfg(target))
    compact(saver, keep=1, threads=[target])
    own = graph.get_state(cfg(target))
    graph.invoke({"messages": ["other"], "n": 0}, cfg(source))
    saver.copy_thread(source, target)
    assert graph.get_state(own.config).values == own.values
    assert graph.get_state(cfg(target)).values == graph.get_state(cfg(source)).values
