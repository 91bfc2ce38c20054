"""A lease in the database that keeps two compaction runs from overlapping.

Acquired with the database's clock, renewed by every compaction batch (which also fails if
the lease was lost), released at the end. A run killed outright leaves it to expire.
"""

from __future__ import annotations

import os
import socket
import uuid
from dataclasses import dataclass

from d1saver import D1Saver, LeaseHeldError, Statement, admin

LEASE_NAME = "compaction"
# The other jobs that share the lease, named in its holder ("cron": the gateway Worker's
# scheduled compaction, worker/compaction.js).
JOBS = ("rebalance", "rekey", "cron")


@dataclass(frozen=True)
class Lease:
    name: str
    holder: str
    ttl: int

    def guard_statements(self) -> list[Statement]:
        """Prefix for each batch: refuse to commit without the lease, and extend it."""
        return admin.lease_guard(self.name, self.holder, self.ttl)


def new_holder() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def acquire(saver: D1Saver, *, ttl: int, name: str = LEASE_NAME, job: str | None = None
            ) -> Lease:
    """Take the lease or raise LeaseHeldError naming its holder and when it expires.

    `job` names another maintenance job sharing the lease (JOBS: rebalance and rekey take the
    compaction lease so that no two overlap); its holder then reads "<job>:<host>:<pid>:...".
    """
    holder = new_holder() if job is None else f"{job}:{new_holder()}"
    (taken,) = saver.execute([admin.acquire_lease(name, holder, ttl)])
    if taken.rows:
        return Lease(name, holder, int(ttl))
    (held,) = saver.execute([admin.lease_holder(name)])
    row = held.dicts()[0] if held.rows else {"holder": "?", "seconds_left": "?"}
    who, left = row["holder"], row["seconds_left"]
    kind = next((j for j in JOBS if str(who).startswith(f"{j}:")), "compaction")
    raise LeaseHeldError(
        f"another {kind} run holds the lease ({who}, {left} s left); it expires on its "
        "own if that run died; or pass --break-lease if you are sure no run is active")


def release(saver: D1Saver, lease: Lease) -> None:
    saver.execute([admin.release_lease(lease.name, lease.holder)])


def break_lease(saver: D1Saver, name: str = LEASE_NAME) -> None:
    """Remove the lease whoever holds it (for an operator who knows no run is active)."""
    saver.execute([admin.break_lease(name)])
