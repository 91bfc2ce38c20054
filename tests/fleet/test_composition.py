"""Maintenance across databases beside the application's operations (issue 20): a move loses
to a delete or a prune that runs beside it, staged rows are never read, listed as threads or
left behind unseen, and empty inputs do nothing."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from d1saver.compaction.fleet import leftovers as fleet_leftovers
from d1saver.compaction.job import compact
from d1saver.compaction.rebalance import rebalance
from d1saver.compaction.rekey import rekey
from d1saver import D1Saver, Statement, admin
from d1saver.fleet.routing import COPYING_PREFIX, LEAVING_PREFIX, MOVING_PREFIX, is_staging
from d1saver.ops import transfer
from d1saver.sql.transfers import TRANSFER_TABLES
from tests.compaction import BIG, cfg
from tests.fleet.conftest import FleetBackend, unique
from tests.fleet.test_saver import chain
from tests.support import Before

KEY, OLD = os.urandom(32), os.urandom(32)


def read(saver: D1Saver, thread_id: str) -> transfer.ThreadRows:
    """The thread's rows as the fleet layer reads them (admin.read_thread wraps this)."""
    return saver.driver.run(transfer.read_thread(saver.ops.execute, thread_id))


def stage_move(source: D1Saver, target: D1Saver, thread_id: str) -> None:
    """What a rebalance killed midway leaves: the thread's rows staged at its new home under
    MOVING_PREFIX (every batch but the renaming one sent), and its scratch copy in the old
    home under LEAVING_PREFIX (every comparison batch but the last)."""
    rows = read(source, thread_id)
    copies = transfer.copy_batches(rows, thread_id, staging_prefix=MOVING_PREFIX,
                                   max_statements=2)
    assert len(copies) > 2
    for batch in copies[:-1]:
        target.execute(batch)
    leaves = transfer.delete_if_unchanged(rows, staging_prefix=LEAVING_PREFIX,
                                          max_statements=30)
    assert len(leaves) > 1
    for batch in leaves[:-1]:
        source.execute(batch)


def two_homes(saver: D1Saver, prefix: str) -> str:
    """A thread of `saver` whose home is its first database."""
    return next(t for t in (f"{prefix}-{i}" for i in range(1000))
                if saver.home(t) == saver.database_ids[0])


# --- defect 10: empty inputs over several databases do nothing ----------------------------


def test_empty_inputs_over_several_databases_do_nothing(local4: FleetBackend) -> None:
    saver = local4.saver()
    calls: list[Any] = []
    _, requests = local4.requests(lambda: saver.prune([]))
    assert not requests
    assert saver.each_database(calls.append, database_ids=[]) == {} and not calls
    asyncio.run(saver.aprune([]))


# --- defect 11: list(None) never opens nor yields staged rows -----------------------------


@pytest.mark.parametrize("keys", [None, [KEY]], ids=["plain", "keyed"])
def test_list_none_skips_staged_rows_of_a_killed_move(local4: FleetBackend,
                                                      keys: list[bytes] | None) -> None:
    ids = local4.database_ids[:2]
    saver = local4.saver(ids, encryption_keys=keys)
    t = two_homes(saver, unique("stg"))
    chain(saver, t, 6, marker="m")
    expected = sorted(x.config["configurable"]["checkpoint_id"] for x in saver.list(None))
    with local4.single(ids[0]) as a, local4.single(ids[1]) as b:
        stage_move(a, b, t)
    # the fleet's merged list, and each database's own list(None)
    listed = list(saver.list(None))
    assert sorted(x.config["configurable"]["checkpoint_id"] for x in listed) == expected
    assert not any(is_staging(x.config["configurable"]["thread_id"]) for x in listed)
    for db in ids:
        one = saver.database(db)
        assert not any(is_staging(x.config["configurable"]["thread_id"])
                       for x in one.list(None))
    assert len(list(saver.list(None, limit=3))) == 3


# --- defect 12: rekey finishes beside staged rows -----------------------------------------


def test_rekey_skips_staged_rows_and_finishes(local4: FleetBackend) -> None:
    ids = local4.database_ids[:2]
    old = local4.saver(ids, encryption_keys=[OLD])
    t = two_homes(old, unique("rk"))
    chain(old, t, 6)
    with local4.single(ids[0]) as a, local4.single(ids[1]) as b:
        stage_move(a, b, t)
    rotated = local4.saver(ids, encryption_keys=[KEY, OLD])
    summary = rekey(rotated)
    assert summary.rewritten == 12  # the thread's 6 checkpoints and 6 writes
    assert summary.staged_skipped > 0
    assert summary.after == {"checkpoints": {rotated.key_ids[0]: 6},
                             "writes": {rotated.key_ids[0]: 6},
                             admin.STAGED: {"skipped": summary.staged_skipped}}
    # the old key can go: the thread reads, and a rebalance re-run clears the staged rows
    dropped = local4.saver(ids, encryption_keys=[KEY])
    assert len(list(dropped.list(cfg(t)))) == 6


# --- defect 1: delete wins over a move ------------------------------------------------------


class Seen(httpx.BaseTransport):
    """Passes every request on, keeping the bodies of those `picks(path, body)` chooses."""

    def __init__(self, inner: Any, picks: Callable[[str, bytes], bool]) -> None:
        self.inner, self.picks = inner, picks
        self.bodies: list[bytes] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        body = request.read()
        if self.picks(request.url.path, body):
            self.bodies.append(body)
        return self.inner.handle_request(request)


def moving(fleet: FleetBackend, prefix: str) -> tuple[list[str], str]:
    """The first two databases (the old layout) and a thread that moves out of them."""
    ids = fleet.database_ids[:2]
    four = fleet.saver()
    four.setup()  # every database at the current schema: one request per step below
    t = next(t for t in (f"{prefix}-{i}" for i in range(1000)) if four.home(t) not in ids)
    return ids, t


def publishing(target: str, thread_id: str, staged: bool) -> Callable[[str, bytes], bool]:
    """Picks the move's batch that makes the thread appear at `target`: its one batch, or the
    renaming one after the staged batches."""
    marker = b"UPDATE OR REPLACE checkpoints" if staged else b"INSERT OR REPLACE INTO checkpoints"
    param = json.dumps(thread_id).encode()
    return lambda path, body: target in path and marker in body and param in body


def leftover_rows(fleet: FleetBackend, thread_id: str) -> list[str]:
    """The databases holding rows of the thread or of any staged id made from it."""
    out = []
    for db in fleet.database_ids:
        with fleet.single(db) as s:
            found = s.execute([admin.staged_threads(p)
                               for p in (MOVING_PREFIX, LEAVING_PREFIX, COPYING_PREFIX)])
        if any(r[0].endswith("\x1f" + thread_id) for res in found for r in res.rows):
            out.append(db)
    return fleet.holding(thread_id) + out


SIZES = {"small": None, "staged": lambda _: os.urandom(BIG)}


@pytest.mark.parametrize("size", list(SIZES))
def test_delete_during_a_move_is_not_undone(fleet: FleetBackend, size: str) -> None:
    """delete_thread (on the new layout, with the previous one) runs just before the move
    publishes its copy at the new home: the copy never lands, the thread stays deleted."""
    ids, t = moving(fleet, unique("del"))
    chain(fleet.saver(ids), t, 2 if size == "staged" else 5, value=SIZES[size])
    app = fleet.saver(previous_database_ids=ids)
    target = app.home(t)
    hook = Before(fleet.transport or httpx.HTTPTransport(),
                  publishing(target, t, size == "staged"), lambda: app.delete_thread(t))
    summary = rebalance(fleet.saver(transport=hook))
    assert hook.fired and not summary.errors
    assert app.get_tuple(cfg(t)) is None and list(app.list(cfg(t))) == []
    assert leftover_rows(fleet, t) == []


@pytest.mark.parametrize("nth", [0, 1])
def test_a_whole_move_between_the_requests_of_a_delete(fleet: FleetBackend, nth: int) -> None:
    """A rebalance runs whole before the first or the second request of delete_thread."""
    ids, t = moving(fleet, unique("btw"))
    chain(fleet.saver(ids), t, 5)
    inner = fleet.transport or httpx.HTTPTransport()
    mover = fleet.saver()
    hook = Before(inner, lambda path, body: b"DELETE FROM checkpoints WHERE thread_id IN" in body
                  and t.encode().hex().encode() in body, lambda: rebalance(mover), nth)
    app = fleet.saver(previous_database_ids=ids, transport=hook)
    app.delete_thread(t)
    assert hook.fired
    assert app.get_tuple(cfg(t)) is None and leftover_rows(fleet, t) == []


def test_prune_during_a_move_is_not_undone(fleet: FleetBackend) -> None:
    """prune keeps the newest checkpoint just before the move publishes a copy read before:
    one checkpoint after the rebalance too."""
    ids, t = moving(fleet, unique("prn"))
    chain(fleet.saver(ids), t, 6)
    app = fleet.saver(previous_database_ids=ids)
    hook = Before(fleet.transport or httpx.HTTPTransport(), publishing(app.home(t), t, False),
                  lambda: app.prune([t]))
    summary = rebalance(fleet.saver(transport=hook))
    assert hook.fired and not summary.errors
    assert len(list(app.list(cfg(t)))) == 1
    assert fleet.holding(t) == [app.home(t)]


def test_prune_of_another_thread_during_a_move_lets_the_move_publish(fleet: FleetBackend
                                                                   ) -> None:
    """A prune of another thread, in the database the thread moves into, just before the
    move publishes voids the moves of its own threads only: this one lands, whole, at its
    first attempt (the move is registered once)."""
    ids, t = moving(fleet, unique("prx"))
    app = fleet.saver(previous_database_ids=ids)
    other = next(o for o in (f"{t}-o{i}" for i in range(1000)) if app.home(o) == app.home(t))
    chain(fleet.saver(ids), t, 4)
    chain(fleet.saver(), other, 4)  # already home: it does not move
    hook = Before(fleet.transport or httpx.HTTPTransport(), publishing(app.home(t), t, False),
                  lambda: app.prune([other]))
    registered = Seen(hook, lambda path, body: b"INTO d1saver_moves" in body
                      and json.dumps(t).encode() in body)
    summary = rebalance(fleet.saver(transport=registered))
    assert hook.fired and not summary.errors
    assert len(registered.bodies) == 1
    assert fleet.holding(t) == [app.home(t)] and len(list(app.list(cfg(t)))) == 4
    assert len(list(app.list(cfg(other)))) == 1


@pytest.mark.parametrize("nth", [0, 1])
def test_a_whole_move_between_the_requests_of_a_prune(local4: FleetBackend, nth: int) -> None:
    ids, t = moving(local4, unique("prb"))
    chain(local4.saver(ids), t, 6)
    mover = local4.saver()
    hook = Before(local4.transport, lambda path, body: b"d1saver_keep" in body
                  and t.encode().hex().encode() in body, lambda: rebalance(mover), nth)
    app = local4.saver(previous_database_ids=ids, transport=hook)
    app.prune([t])
    assert hook.fired
    assert len(list(app.list(cfg(t)))) == 1
    rebalance(mover)
    assert len(list(local4.saver().list(cfg(t)))) == 1 and local4.holding(t) == [app.home(t)]


@pytest.mark.parametrize("when", ["move between", "during the move"])
def test_delete_for_runs_beside_a_move_is_not_undone(fleet: FleetBackend, when: str) -> None:
    """Runs are not routed: delete_for_runs goes to every database. With the databases asked
    one at a time, new homes first, a whole move runs after it reached the thread's new home
    (nothing there yet) and before its old one; or it runs whole just before the move
    publishes. Its second round (while migrating) voids the move or deletes what landed."""
    ids, t = moving(fleet, unique("run"))
    run = unique("run")
    chain(fleet.saver(ids), t, 4, run_id=run)
    app = fleet.saver(previous_database_ids=ids)
    old = fleet.saver(ids).home(t)
    inner = fleet.transport or httpx.HTTPTransport()
    if when == "move between":
        hook = Before(inner, lambda path, body: old in path and run.encode().hex().encode()
                      in body, lambda: rebalance(fleet.saver()))
        runner = fleet.saver(list(reversed(fleet.database_ids)), previous_database_ids=ids,
                             transport=hook, fleet_concurrency=1)
        runner.delete_for_runs([run])
    else:
        hook = Before(inner, publishing(app.home(t), t, False),
                      lambda: app.delete_for_runs([run]))
        assert not rebalance(fleet.saver(transport=hook)).errors
    assert hook.fired
    assert app.get_tuple(cfg(t)) is None and leftover_rows(fleet, t) == []


# --- defect 5: a copy between databases killed midway leaves nothing hidden -----------------


class Killed(Exception):
    pass


class KillBefore(httpx.BaseTransport):
    """The process dies just before the first request `picks(path, body)`: it never arrives."""

    def __init__(self, inner: Any, picks: Callable[[str, bytes], bool]) -> None:
        self.inner, self.picks = inner, picks

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if self.picks(request.url.path, request.read()):
            raise Killed()
        return self.inner.handle_request(request)


def staged_anywhere(fleet: FleetBackend) -> list[str]:
    out = []
    for db in fleet.database_ids:
        with fleet.single(db) as s:
            found = s.execute([admin.staged_threads(p)
                               for p in (MOVING_PREFIX, LEAVING_PREFIX, COPYING_PREFIX)])
        out += [r[0] for res in found for r in res.rows]
    return out


def staged_tables(fleet: FleetBackend, staging_id: str) -> set[str]:
    """The tables holding rows under `staging_id`, in any database."""
    out = set()
    for db in fleet.database_ids:
        with fleet.single(db) as s:
            found = s.execute([Statement(f"SELECT COUNT(*) FROM {table} WHERE thread_id = ?",
                                         [staging_id]) for table in TRANSFER_TABLES])
        out |= {table for table, res in zip(TRANSFER_TABLES, found) if res.rows[0][0]}
    return out


# Where a copy (or a move) over one batch dies, by the first request it never sends, and the
# tables its staged rows are then in: after every staged batch (just before the renaming
# one), or after the batches of blobs alone (d1saver_chunks go first: rows are stored only
# over stored chunks), before the first that stages a checkpoint row.
KILLS: dict[str, tuple[bytes, set[str]]] = {
    "before the rename": (b"UPDATE OR REPLACE checkpoints",
                          {"d1saver_chunks", "checkpoints", "writes"}),
    "after the blobs": (b"INSERT OR REPLACE INTO checkpoints", {"d1saver_chunks"}),
}


def killed_copy(fleet: FleetBackend, prefix: str, dies: str = "before the rename"
                ) -> tuple[D1Saver, str, str]:
    """A thread over one batch copied to a thread of another database, killed at `dies`
    (KILLS): its staged rows sit in the target's database."""
    saver = fleet.saver(fleet.database_ids[:2])
    saver.setup()
    source = two_homes(saver, prefix)
    target = next(t for t in (f"{prefix}-copy{i}" for i in range(1000))
                  if saver.home(t) != saver.home(source))
    chain(saver, source, 2, value=lambda _: os.urandom(BIG))
    marker, tables = KILLS[dies]
    killer = fleet.saver(fleet.database_ids[:2], transport=KillBefore(
        fleet.transport or httpx.HTTPTransport(), lambda path, body: marker in body))
    with pytest.raises(Killed):
        killer.copy_thread(source, target)
    assert staged_anywhere(fleet) == [COPYING_PREFIX + target]
    assert staged_tables(fleet, COPYING_PREFIX + target) == tables
    return saver, source, target


def expire(fleet: FleetBackend) -> None:
    """Time passes: every staged copy's registration is past its expiry."""
    for db in fleet.database_ids:
        with fleet.single(db) as s:
            s.execute([Statement("UPDATE d1saver_staged SET expires_at = 0")])


CLEANUPS: dict[str, Callable[[FleetBackend, D1Saver, str, str], Any]] = {
    "copy re-run": lambda f, s, src, dst: s.copy_thread(src, dst),
    "delete_thread of the target": lambda f, s, src, dst: s.delete_thread(dst),
    "delete_thread of the source": lambda f, s, src, dst: s.delete_thread(src),
    "rebalance, once expired": lambda f, s, src, dst: (expire(f), rebalance(s)),
    "compaction, once expired": lambda f, s, src, dst: (
        expire(f), [compact(s.database(db), keep=5) for db in s.database_ids]),
}


@pytest.mark.parametrize("dies", list(KILLS))
@pytest.mark.parametrize("cleanup", list(CLEANUPS))
def test_a_killed_copy_is_listed_and_every_cleanup_removes_it(fleet: FleetBackend,
                                                              cleanup: str, dies: str) -> None:
    saver, source, target = killed_copy(fleet, unique("cpy"), dies)
    # listed, with what it is: `d1saver threads` and `check` show it
    (found,) = [x for x in fleet_leftovers(saver) if x.target == target]
    assert (found.kind, found.source, found.expired) == ("copying", source, False)
    assert saver.get_tuple(cfg(target)) is None
    CLEANUPS[cleanup](fleet, saver, source, target)
    assert staged_anywhere(fleet) == [] and not [
        x for x in fleet_leftovers(saver) if target in (x.target, x.thread_id)]
    if cleanup == "copy re-run":
        assert len(list(saver.list(cfg(target)))) == 2
    if cleanup == "delete_thread of the source":
        assert saver.get_tuple(cfg(source)) is None


def test_a_move_killed_after_its_blobs_is_listed_and_a_rerun_finishes(
        fleet: FleetBackend) -> None:
    """A rebalance killed after a move staged the thread's blobs alone at its new home (no
    checkpoint row yet): the staged id is listed as a move's leftover, there, and the next
    rebalance removes it and moves the thread whole."""
    ids, t = moving(fleet, unique("mvb"))
    chain(fleet.saver(ids), t, 2, value=lambda _: os.urandom(BIG))
    app = fleet.saver(previous_database_ids=ids)
    before, home = list(app.list(cfg(t))), app.home(t)
    marker, tables = KILLS["after the blobs"]
    staged = MOVING_PREFIX + t
    param = json.dumps(staged)[1:-1].encode()  # as the request's JSON body spells it
    killer = fleet.saver(transport=KillBefore(
        fleet.transport or httpx.HTTPTransport(),
        lambda path, body: home in path and marker in body and param in body))
    with pytest.raises(Killed):
        rebalance(killer, concurrency=1)
    assert staged_tables(fleet, staged) == tables
    (found,) = [x for x in fleet_leftovers(app) if x.thread_id == staged]
    assert (found.kind, found.source, found.target, found.database_id) == ("moving", t, t, home)
    assert not rebalance(fleet.saver(), break_lease=True).errors
    assert staged not in staged_anywhere(fleet) and staged_tables(fleet, staged) == set()
    assert fleet.holding(t) == [home] and list(app.list(cfg(t))) == before


def test_rebalance_and_compaction_leave_a_copy_in_progress_alone(local4: FleetBackend) -> None:
    saver, source, target = killed_copy(local4, unique("cpz"))
    rebalance(saver)
    for db in saver.database_ids:
        compact(saver.database(db), keep=5)
    assert staged_anywhere(local4) == [COPYING_PREFIX + target]  # not expired: a copy may run
    saver.copy_thread(source, target)
    assert staged_anywhere(local4) == []


@pytest.mark.parametrize("dies", list(KILLS))
def test_threads_and_check_list_a_killed_copy(local4: FleetBackend, dies: str) -> None:
    """`d1saver threads` and `d1saver check` list the staged rows as a leftover, with what
    they are (blobs alone too: no thread listing shows those); check fails once they expired,
    and passes once a cleanup removed them."""
    from tests.fleet.test_cli import cli, serve_fleet

    saver, source, target = killed_copy(local4, unique("cli"), dies)
    with serve_fleet(local4) as env:
        listed = cli(env, "threads")
        assert listed.exit_code == 0
        assert f"copying {source} -> {target}; in progress" in listed.output
        assert cli(env, "check").exit_code == 0
        expire(local4)
        checked = cli(env, "check")
        assert checked.exit_code == 1 and "leftover: staged rows" in checked.output
        assert "expired" in checked.output
        assert cli(env, "rebalance").exit_code == 0
        assert cli(env, "check").exit_code == 0 and "leftover" not in cli(env, "threads").output


def test_a_second_copy_of_the_source_leaves_the_killed_ones_cleanup(local4: FleetBackend) -> None:
    """A killed copy's staged rows sit in the target's database, and the source's names them.
    Another copy of the same source into that database, finished, drops its own mention
    only: delete_thread of the source still removes the killed copy's staged rows."""
    saver, source, target = killed_copy(local4, unique("cp2"))
    second = next(t for t in (f"{target}-again{i}" for i in range(1000))
                  if saver.home(t) == saver.home(target))
    saver.copy_thread(source, second)
    assert len(list(saver.list(cfg(second)))) == 2
    assert staged_anywhere(local4) == [COPYING_PREFIX + target]
    saver.delete_thread(source)
    assert staged_anywhere(local4) == []
