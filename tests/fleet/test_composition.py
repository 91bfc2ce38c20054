"""Maintenance across databases beside the application's operations (issue 20): a move loses
to a delete or a prune that runs beside it, staged rows are never read, listed as threads or
left behind unseen, and empty inputs do nothing."""

from __future__ import annotations

import asyncio
import os
from typing import Any

import pytest

from compaction.rekey import rekey
from d1saver import D1Saver, Statement, admin
from d1saver.fleet.routing import LEAVING_PREFIX, MOVING_PREFIX, is_staging
from d1saver.ops import transfer
from tests.compaction import cfg
from tests.fleet.conftest import FleetBackend, unique
from tests.fleet.test_saver import chain

KEY, OLD = os.urandom(32), os.urandom(32)


def read(saver: D1Saver, thread_id: str) -> admin.ThreadRows:
    reader = admin.thread_reader(thread_id)
    while (stmts := reader.next_statements()) is not None:
        reader.consume(saver.execute(stmts))
    return reader.rows


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
