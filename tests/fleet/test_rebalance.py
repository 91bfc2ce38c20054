"""`d1saver rebalance`: after the database list changed, every thread moves to its home, whole,
verified, exactly once; a run killed anywhere loses nothing, readers see every thread whole
throughout, and a rerun finishes the job."""

from __future__ import annotations

import json
import os
import random
from collections import Counter
from collections.abc import Sequence
from typing import Any

import httpx
import pytest
from langgraph.checkpoint.base import empty_checkpoint

from d1saver.compaction import lease as leases
from d1saver.compaction import rebalance
from d1saver import ConfigError, D1Error, D1Saver, LeaseHeldError, QueryError, Statement, admin
from d1saver.sql.catalogue import SCHEMA_VERSION
from d1saver.fleet.routing import rendezvous
from tests.compaction import BIG, cfg, checkpoint_id, one_step_behind
from tests.fleet.conftest import FleetBackend, unique
from tests.fleet.test_saver import chain, key, view
from tests.saver import graphs


def build(saver: D1Saver, prefix: str, n: int, *, big_to: Sequence[str] = ()) -> list[str]:
    """n threads: chains in two namespaces, a tag on some; with `big_to` (the database list
    after the change) one more thread of values over 2 MB, that moves to a database outside
    the saver's and needs more than one batch to get there."""
    threads = [f"{prefix}-{i:02d}" for i in range(n)]
    for i, t in enumerate(threads):
        chain(saver, t, 3, marker=prefix)
        if i % 3 == 0:
            chain(saver, t, 2, ns="child:1", marker=prefix)
            saver.tag(cfg(t, "", checkpoint_id(1)), "approval")
    if big_to:
        name = next(f"{prefix}-big{i}" for i in range(1000)
                    if rendezvous(f"{prefix}-big{i}", big_to) not in saver.database_ids)
        chain(saver, name, 2, marker=prefix, value=lambda _: os.urandom(BIG))
        threads.append(name)
    return threads


def snapshot(saver: D1Saver, threads: list[str]) -> dict[str, Any]:
    """What readers see of each thread: every checkpoint (all namespaces) and its tags."""
    return {t: ([view(x) for x in saver.list({"configurable": {"thread_id": t}})],
                saver.tags(cfg(t))) for t in threads}


def staged(fleet: FleetBackend) -> list[str]:
    out = []
    for db in fleet.database_ids:
        with fleet.single(db) as s:
            for res in s.execute([admin.staged_threads(admin.MOVING_PREFIX),
                                  admin.staged_threads(admin.LEAVING_PREFIX)]):
                out += [r[0] for r in res.rows]
    return out


def assert_placed(fleet: FleetBackend, saver: D1Saver, threads: list[str],
                  expected: dict[str, Any]) -> None:
    """Every thread whole, and in exactly one database: its home."""
    assert snapshot(saver, threads) == expected
    for t in threads:
        assert fleet.holding(t) == [saver.home(t)], t
    assert staged(fleet) == []


def test_rebalance_from_two_databases_to_four(fleet: FleetBackend) -> None:
    two = fleet.saver(fleet.database_ids[:2])
    prefix = unique("rb")
    threads = build(two, prefix, 16, big_to=fleet.database_ids)
    expected = snapshot(two, threads)
    keys = sorted(key(x) for x in two.list(None, filter={"marker": prefix}))
    four = fleet.saver()
    misplaced = [t for t in threads if four.home(t) != two.home(t)]
    assert misplaced

    dry = rebalance(four, dry_run=True)
    planned = {m["thread_id"] for m in dry.moves}
    assert set(misplaced) <= planned
    assert snapshot(two, threads) == expected  # a dry run changes nothing
    assert all(fleet.holding(t) == [two.home(t)] for t in threads)

    summary = rebalance(four)
    moved = {m["thread_id"] for m in summary.moves if m["outcome"] == "moved"}
    assert set(misplaced) <= moved and not summary.errors
    assert summary.threads_moved == len(moved) == len(planned)
    assert summary.rows_copied > 0 and summary.bytes_copied > 2 * BIG
    assert sum(d["moved_in"] for d in summary.per_database.values()) == len(moved)
    assert_placed(fleet, four, threads, expected)
    # The merged list(None) sees every checkpoint once.
    assert sorted(key(x) for x in four.list(None, filter={"marker": prefix})) == keys

    again = rebalance(four)
    assert again.threads_misplaced == 0 and again.threads_moved == 0 and again.moves == []


class Killed(BaseException):
    """The process died: nothing after this point runs (not an Exception: nobody catches it)."""


class Killer(httpx.BaseTransport, httpx.AsyncBaseTransport):
    """Lets `budget` requests through, then fails every one, as if the process had died."""

    def __init__(self, inner: Any, budget: int) -> None:
        self.inner, self.budget = inner, budget

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        self.budget -= 1
        if self.budget < 0:
            raise Killed()
        return self.inner.handle_request(request)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.budget -= 1
        if self.budget < 0:
            raise Killed()
        return await self.inner.handle_async_request(request)


def test_killed_runs_lose_nothing_and_a_rerun_finishes(fleet: FleetBackend) -> None:
    two_ids = fleet.database_ids[:2]
    two = fleet.saver(two_ids)
    prefix = unique("kill")
    local = fleet.name == "local"
    threads = build(two, prefix, 24 if local else 12, big_to=fleet.database_ids)
    expected = snapshot(two, threads)
    keys = sorted(key(x) for x in two.list(None, filter={"marker": prefix}))
    rng = random.Random(prefix)
    inner = fleet.transport or httpx.HTTPTransport()
    reader = fleet.saver(previous_database_ids=two_ids)  # an application mid-move
    kills = 0
    while kills < 40:
        try:  # dies after a random number of requests, until one run gets to the end
            rebalance(fleet.saver(transport=Killer(inner, rng.randint(3, 20 if local else 15))),
                      break_lease=True, concurrency=4)
            break
        except Killed:
            kills += 1
        # Never lost, never half: each thread reads whole, and sits in its old or new home.
        assert snapshot(reader, threads) == expected
        for t in threads:
            assert set(fleet.holding(t)) <= {two.home(t), reader.home(t)} != set(), t
        # The merged list(None) yields every checkpoint once, staged rows never.
        assert sorted(key(x) for x in reader.list(None, filter={"marker": prefix})) == keys
    assert kills >= 3
    four = fleet.saver()
    summary = rebalance(four, break_lease=True)
    assert not summary.errors
    assert_placed(fleet, four, threads, expected)
    assert rebalance(four).threads_moved == 0


def test_readers_see_each_thread_once_while_it_sits_in_two_databases(
        local4: FleetBackend) -> None:
    """Killed after the copy and before the delete: list(None) still yields each checkpoint
    once, and a rerun only verifies and deletes."""
    two_ids = local4.database_ids[:2]
    two = local4.saver(two_ids)
    prefix = unique("dup")
    threads = build(two, prefix, 8)
    four = local4.saver()
    t = next(t for t in threads if four.home(t) != two.home(t))
    rows = read(local4.single(two.home(t)), t)
    with local4.single(four.home(t)) as target:
        for batch in admin.copy_batches(rows, t):
            target.execute(batch)
    assert sorted(local4.holding(t)) == sorted({two.home(t), four.home(t)})
    listed = [key(x) for x in four.list(None, filter={"marker": prefix})]
    assert len(listed) == len(set(listed)) == sum(
        len(v) for v, _ in snapshot(two, threads).values())
    summary = rebalance(four)
    outcomes = {m["thread_id"]: m["outcome"] for m in summary.moves}
    assert outcomes[t] == "found copied" and summary.threads_found_copied == 1
    assert local4.holding(t) == [four.home(t)]


def read(saver: D1Saver, thread_id: str) -> admin.ThreadRows:
    return admin.read_thread(saver, thread_id)


def test_a_thread_written_meanwhile_at_its_old_home_is_not_deleted(local4: FleetBackend) -> None:
    saver = local4.single(local4.database_ids[0])
    t = unique()
    chain(saver, t, 2)
    rows = read(saver, t)
    chain(saver, f"{t}", 3)  # a writer on the old layout adds a checkpoint after the read
    assert not leave(saver, rows)
    assert len(list(saver.list(cfg(t)))) == 3
    assert leave(saver, read(saver, t)) and saver.get_tuple(cfg(t)) is None


def leave(saver: D1Saver, rows: admin.ThreadRows) -> bool:
    """Send the delete_if_unchanged batches; whether the thread was deleted."""
    batches = admin.delete_if_unchanged(rows)
    assert len(batches) == 1  # a small thread: one request, as before
    results: list[Any] = []
    for batch in batches:
        results = saver.execute(batch)
    return admin.moved_away(results)


def test_rebalance_waits_for_no_compaction(local4: FleetBackend) -> None:
    two = local4.saver(local4.database_ids[:2])
    threads = build(two, unique("lease"), 6)
    four = local4.saver()
    busy = local4.database_ids[3]
    held = leases.acquire(four.database(busy), ttl=300)
    with pytest.raises(LeaseHeldError, match=busy):
        rebalance(four)
    assert all(local4.holding(t) == [two.home(t)] for t in threads)
    for db in local4.database_ids[:3]:  # the leases it took are released
        assert four.database(db).execute([admin.lease_holder("compaction")])[0].rows == []
    leases.release(four.database(busy), held)
    assert not rebalance(four).errors


class FailingLease(httpx.BaseTransport):
    """Fails (as D1 fails a query) the lease's acquisition in one database."""

    def __init__(self, inner: Any, database_id: str) -> None:
        self.inner, self.database_id = inner, database_id

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if self.database_id in request.url.path and b"INSERT INTO leases" in request.read():
            return httpx.Response(400, json={"success": False, "messages": [], "result": [],
                                             "errors": [{"code": 7500, "message": "D1_ERROR"}]})
        return self.inner.handle_request(request)


def test_leases_taken_are_released_when_another_cannot_be_asked(local4: FleetBackend) -> None:
    four = local4.saver()
    failing = local4.saver(transport=FailingLease(local4.transport, local4.database_ids[3]))
    with pytest.raises(QueryError):
        rebalance(failing)
    for db in local4.database_ids:
        assert four.database(db).execute([admin.lease_holder("compaction")])[0].rows == []
    assert not rebalance(four).errors


def test_a_route_decides_where_threads_move(local4: FleetBackend) -> None:
    a, b, c, d = local4.database_ids
    plain = local4.saver([a, b])
    threads = build(plain, "tenant1/" + unique(), 4) + build(
        plain, "tenant2/" + unique(), 4)
    expected = snapshot(plain, threads)
    routed = local4.saver(route=lambda t: c if t.startswith("tenant1/") else d)
    rebalance(routed)
    assert snapshot(routed, threads) == expected
    assert all(local4.holding(t) == [c if t.startswith("tenant1/") else d] for t in threads)


def test_rebalance_command_drains_a_removed_database(local4: FleetBackend) -> None:
    from tests.fleet.test_cli import cli, serve_fleet

    everyone = local4.saver()
    threads = build(everyone, unique("drain"), 12)
    expected = snapshot(everyone, threads)
    removed = Counter(everyone.home(t) for t in threads).most_common(1)[0][0]
    kept = [db for db in local4.database_ids if db != removed]
    with serve_fleet(local4) as env:
        env["D1_DATABASE_ID"] = ",".join(kept)
        dry = cli(env, "rebalance", "--previous-database-id", removed, "--dry-run")
        assert dry.exit_code == 0 and "dry run" in dry.stdout
        result = cli(env, "rebalance", "--previous-database-id", removed, "--json")
        assert result.exit_code == 0, result.output
        summary = json.loads(result.stdout)
    three = local4.saver(kept)
    assert summary["per_database"][removed]["moved_out"] == sum(
        everyone.home(t) == removed for t in threads)
    assert snapshot(three, threads) == expected
    assert all(local4.holding(t) == [three.home(t)] for t in threads)


def test_rebalance_command_reads_previous_ids_as_it_reads_d1_database_id(
        local4: FleetBackend) -> None:
    """--previous-database-id "c, d" is two ids, as D1_DATABASE_ID="a, b" is."""
    from tests.fleet.test_cli import cli, serve_fleet

    a, b, c, d = local4.database_ids
    with serve_fleet(local4) as env:
        env["D1_DATABASE_ID"] = f"{a}, {b}"
        result = cli(env, "rebalance", "--previous-database-id", f"{c}, {d}", "--dry-run",
                     "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["databases"] == [a, b, c, d]


def test_delta_channel_threads_move_whole(fleet: FleetBackend) -> None:
    """A thread with a DeltaChannel never written (rows in delta_unwritten) moves with them,
    and its state and history read back as before."""
    two_ids = fleet.database_ids[:2]
    two, four = fleet.saver(two_ids), fleet.saver()
    tid = next(t for t in (unique("chat") for _ in range(1000)) if four.home(t) not in two_ids)
    config = {"configurable": {"thread_id": tid}}
    graph = graphs.chat_graph(two, Counter())
    for turn in range(5):
        graph.invoke({"messages": [f"user{turn}"]}, config)
    state = graph.get_state(config).values
    history = [s.values for s in graph.get_state_history(config)]
    unwritten = unwritten_rows(fleet, two.home(tid), tid)
    assert unwritten > 0
    rebalance(four)
    moved = graphs.chat_graph(four, Counter())
    assert moved.get_state(config).values == state
    assert [s.values for s in moved.get_state_history(config)] == history
    assert fleet.holding(tid) == [four.home(tid)]
    assert unwritten_rows(fleet, four.home(tid), tid) == unwritten
    assert unwritten_rows(fleet, two.home(tid), tid) == 0


def unwritten_rows(fleet: FleetBackend, database_id: str, thread_id: str) -> int:
    with fleet.single(database_id) as s:
        (res,) = s.execute([Statement(
            "SELECT COUNT(*) AS n FROM delta_unwritten WHERE thread_id = ?1", (thread_id,))])
    return int(res.rows[0][0])


class ChangeBeforeDelete(httpx.BaseTransport):
    """Runs `change` (a writer still on the old layout) just before the request that deletes
    `thread_id` from `database_id` after its copy: between the copy and the delete."""

    def __init__(self, inner: Any, database_id: str, thread_id: str,
                 change: Any) -> None:
        self.inner, self.database_id, self.change = inner, database_id, change
        self.param = json.dumps(thread_id).encode()
        self.changed = 0

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        body = request.read()
        if (not self.changed and self.database_id in request.url.path
                and b"d1saver_scope" in body and self.param in body):
            self.change()
            self.changed += 1
        return self.inner.handle_request(request)


def _rewrite_checkpoint(saver: D1Saver, t: str) -> None:
    """A retried put of the newest checkpoint with other content: INSERT OR REPLACE."""
    cp = empty_checkpoint()
    cp.update(id=checkpoint_id(2), ts="2026-11-01T00:00:00+00:00",
              channel_values={"x": "rewritten"}, channel_versions={"x": "3"})
    saver.put(cfg(t, "", checkpoint_id(1)), cp, {"source": "loop", "step": 2, "parents": {}},
              {})


SAME_KEY_CHANGES = {
    # A tag moved to another checkpoint (ON CONFLICT DO UPDATE: the same row, even its rowid).
    "tag moved": lambda s, t: s.tag(cfg(t, "", checkpoint_id(2)), "approval"),
    # A special write replaced by another (INSERT OR REPLACE).
    "special write replaced": lambda s, t: s.put_writes(
        cfg(t, "", checkpoint_id(2)), [("__error__", "second error")], task_id="task-e"),
    "checkpoint rewritten": _rewrite_checkpoint,
}


@pytest.mark.parametrize("change", list(SAME_KEY_CHANGES))
def test_a_same_key_change_between_copy_and_delete_is_not_lost(fleet: FleetBackend,
                                                               change: str) -> None:
    """A writer on the old layout replaces a row (same key, so same row counts) after the
    thread was copied: the old database keeps the thread, and the move that follows carries
    the change to its home."""
    two_ids = fleet.database_ids[:2]
    two, four = fleet.saver(two_ids), fleet.saver()
    t = next(t for t in (unique("same") for _ in range(1000)) if four.home(t) not in two_ids)
    chain(two, t, 3)
    two.tag(cfg(t, "", checkpoint_id(1)), "approval")
    two.put_writes(cfg(t, "", checkpoint_id(2)), [("__error__", "first error")], task_id="task-e")
    source = fleet.single(two.home(t))
    before = snapshot(source, [t])
    seen: dict[str, Any] = {}

    def writer() -> None:
        SAME_KEY_CHANGES[change](source, t)
        seen.update(snapshot(source, [t]))

    hook = ChangeBeforeDelete(fleet.transport or httpx.HTTPTransport(), two.home(t), t, writer)
    summary = rebalance(fleet.saver(transport=hook))
    assert hook.changed == 1 and not summary.errors
    assert seen != before
    # Nothing lost: readers see the change, and the thread sits at its home alone.
    assert snapshot(four, [t]) == seen
    assert fleet.holding(t) == [four.home(t)]
    outcomes = [m["outcome"] for m in summary.moves if m["thread_id"] == t]
    assert outcomes == ["moved"]


def schema_versions(fleet: FleetBackend, database_id: str) -> list[int]:
    """The versions a database records, read raw (no setup); [] when it has no schema."""
    with fleet.single(database_id) as s:
        (tables,) = s.client.execute([Statement(
            "SELECT COUNT(*) AS n FROM sqlite_master WHERE name = 'd1saver_schema'")])
        if not tables.rows[0][0]:
            return []
        (res,) = s.client.execute([Statement("SELECT version FROM d1saver_schema ORDER BY 1")])
    return [row[0] for row in res.rows]


def test_a_dry_run_migrates_nothing(local4: FleetBackend) -> None:
    """A dry run refuses, by name, a database whose schema is older than this d1saver's
    instead of migrating it, and leaves new, empty databases without any table."""
    a, b, c, d = local4.database_ids
    with local4.saver([a], auto_setup=False) as s:  # a database an older release set up
        one_step_behind(s)
    local4.single(b).setup()
    two = local4.saver([a, b], auto_setup=False)
    # Names of which one at least has its home in c or d once they join (else, 1 time in 64,
    # nothing would move there and the test would fail).
    prefix = next(p for p in (unique("dry") for _ in range(1000))
                  if any(rendezvous(f"{p}-{i:02d}", local4.database_ids) in (c, d)
                         for i in range(6)))
    build(two, prefix, 6)
    with pytest.raises(ConfigError, match=rf"{a} \(v{SCHEMA_VERSION - 1}\).*without --dry-run"):
        rebalance(local4.saver(), dry_run=True)
    assert schema_versions(local4, a) == list(range(1, SCHEMA_VERSION))
    assert schema_versions(local4, c) == schema_versions(local4, d) == []
    local4.single(a).setup()
    dry, requests = local4.requests(lambda: rebalance(local4.saver(), dry_run=True))
    assert dry.moves and {m["target"] for m in dry.moves} & {c, d}
    assert dry.per_database[c]["threads"] == dry.per_database[d]["threads"] == 0
    assert schema_versions(local4, c) == schema_versions(local4, d) == []  # still no table
    assert requests[c] == requests[d] == 1  # the schema read: nothing else is asked of them


class FailingRelease(httpx.BaseTransport):
    """Fails (as D1 fails a query) the thread scan in one database and the lease's release in
    another."""

    def __init__(self, inner: Any, scan: str, release: str) -> None:
        self.inner, self.scan, self.release = inner, scan, release

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        body = request.read()
        if ((self.scan in request.url.path and b"GROUP BY c.thread_id ORDER BY c.thread_id LIMIT" in body)
                or (self.release in request.url.path and b"DELETE FROM leases" in body)):
            return httpx.Response(400, json={"success": False, "messages": [], "result": [],
                                             "errors": [{"code": 7500, "message": "D1_ERROR"}]})
        return self.inner.handle_request(request)


def test_every_lease_is_released_and_the_first_error_kept(local4: FleetBackend) -> None:
    """A failed release neither stops the others nor hides the error that ended the run (it is
    added to it as a note; that lease expires by itself)."""
    a, b, c, d = local4.database_ids
    failing = local4.saver(transport=FailingRelease(local4.transport, scan=d, release=a))
    with pytest.raises(D1Error) as raised:
        rebalance(failing)
    assert "rebalance scan" in str(raised.value) and d in str(raised.value)
    assert any(a in note and "not released" in note for note in raised.value.__notes__)
    four = local4.saver()
    for db in (b, c, d):
        assert four.database(db).execute([admin.lease_holder("compaction")])[0].rows == []
    assert four.database(a).execute([admin.lease_holder("compaction")])[0].rows != []
