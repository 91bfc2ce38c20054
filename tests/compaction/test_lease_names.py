"""Leases by name (d1saver/compaction/lease.py): a database may hold several, and each is
taken, named in a refusal and broken on its own."""

from __future__ import annotations

import re

import pytest

from d1saver import LeaseHeldError
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
