"""Which database a thread lives in: rendezvous hashing of its thread_id over the database ids.

Rendezvous (highest random weight) hashing gives each (thread, database) pair a weight from a
hash of both and puts the thread where its weight is highest. Adding a database moves only the
threads the new one wins, about 1/N of them, and none between two old databases; removing one
moves only its own threads. The hash is hashlib's BLAKE2b, so every process, on every machine
and Python version, agrees (Python's hash() is salted per process). A user-supplied `route`
replaces the hash (per-tenant databases); `d1saver rebalance` then moves the threads whose
current database differs from route(thread_id).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Sequence

from d1saver.core.errors import ConfigError

__all__ = ["COPYING_PREFIX", "LEAVING_PREFIX", "MEMORY_MOVE_PREFIX", "MOVING_PREFIX",
           "STAGING_PREFIX", "Route",
           "Router", "is_staging", "rendezvous"]

Route = Callable[[str], str]

# Rows being copied between databases wait under a staging thread id, invisible to reads of
# the thread, until one atomic batch renames them (d1saver/ops/transfer.py). The control
# character keeps these ids apart from any thread id an application uses.
_STAGING = STAGING_PREFIX = "\x1fd1saver-"
MOVING_PREFIX = _STAGING + "moving\x1f"    # d1saver rebalance
COPYING_PREFIX = _STAGING + "copying\x1f"  # copy_thread between databases
# A moved thread's rows as copied, written back into its old database to compare with it
# there before deleting it (d1saver rebalance; _transfer.delete_if_unchanged).
LEAVING_PREFIX = _STAGING + "leaving\x1f"
# A move of D1Store items or D1Cache entries registers under this prefix and its move id in
# d1saver_moves at its target: bookkeeping, never a thread id, and outside the staging range
# (no row is staged under it; the next rebalance clears a killed move's registration).
MEMORY_MOVE_PREFIX = "\x1fmemory-move\x1f"


def is_staging(thread_id: str) -> bool:
    """True for the thread id of rows still being copied (never an application's thread)."""
    return thread_id.startswith(_STAGING)


def _weight(thread_id: str, database_id: str) -> bytes:
    # Database ids cannot hold NUL (d1saver/core/ids.py), so the pair is encoded unambiguously.
    key = f"{database_id}\x00{thread_id}".encode("utf-8", "surrogatepass")
    return hashlib.blake2b(key, digest_size=8).digest()


def rendezvous(thread_id: str, database_ids: Iterable[str]) -> str:
    """The database among `database_ids` where `thread_id` lives under rendezvous hashing."""
    return max(database_ids, key=lambda db: (_weight(thread_id, db), db))


class Router:
    """Maps thread ids to their home database: `route(thread_id)` if given, else rendezvous."""

    def __init__(self, database_ids: Sequence[str], route: Route | None = None) -> None:
        if not database_ids:
            raise ConfigError("no database ids: give at least one (D1_DATABASE_ID)")
        if len(set(database_ids)) != len(database_ids):
            raise ConfigError(f"database ids repeat: {list(database_ids)}")
        self.database_ids = tuple(database_ids)
        self._known = frozenset(database_ids)
        self.route = route

    def home(self, thread_id: str) -> str:
        """The database `thread_id` lives in; a route answering another id is a ConfigError."""
        if self.route is not None:
            database_id = self.route(thread_id)
            if database_id not in self._known:
                raise ConfigError(
                    f"route({thread_id!r}) returned {database_id!r}, which is not one of the "
                    f"saver's database ids {list(self.database_ids)}")
            return database_id
        if len(self.database_ids) == 1:
            return self.database_ids[0]
        return rendezvous(thread_id, self.database_ids)
