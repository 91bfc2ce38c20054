"""Leases by name (d1saver/compaction/lease.py): a database may hold several, and each is
taken, named in a refusal and broken on its own."""

from __future__ import annotations

import re

import pytest

from d1saver import D1Error, LeaseHeldError, admin
from d1saver.compaction import lease
from tests.compaction import query
from tests.conftest import Backend


def test_a_lease_of_another_name_is_neither_named_nor_broken(local: Backend) -> None:
    """With another job's lease taken first, a refused run names the holder of the lease it
    asked for, and breaking the other lease leaves it held."""
    saver = local.saver()
    other = lease.acquire(saver, ttl=300, name="other-job")
    mine = lease.acquire(saver, ttl=300)
    with pytest.raises(LeaseHeldError, match=re.escape(f"({mine.holder}, ")):
        lease.acquire(saver, ttl=300)
    lease.break_lease(saver, "other-job")
    assert query(saver, "SELECT name, holder FROM leases") == [["compaction", mine.holder]]
    with pytest.raises(LeaseHeldError):
        lease.acquire(saver, ttl=300)
    assert lease.acquire(saver, ttl=300, name="other-job").holder != other.holder


def test_a_guard_checks_and_renews_the_lease_of_its_own_name(local: Backend) -> None:
    """One holder with leases of two names (admin statements take any holder): a guard of
    one renews that lease only, and once that lease is broken it fails its batch though
    the holder still holds the other."""
    saver = local.saver()
    saver.execute([admin.acquire_lease("a", "worker-1", 300),
                   admin.acquire_lease("b", "worker-1", 100)])
    saver.execute(admin.lease_guard("a", "worker-1", 1_000))
    left = dict(query(saver, "SELECT name, expires_at - CAST(strftime('%s', 'now') AS INTEGER)"
                             " FROM leases"))
    assert left["a"] > 900 and left["b"] <= 100
    saver.execute([admin.break_lease("a")])
    with pytest.raises(D1Error, match="lease_lost"):
        saver.execute(admin.lease_guard("a", "worker-1", 1_000))
