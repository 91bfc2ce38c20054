"""The local D1's databases by id: opened on first use, in memory or as one SQLite file each.

A file is `<data_dir>/<database_id>.sqlite`. The id is validated again here and the path checked
to stay directly inside the data directory, so no request can name a file elsewhere.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from pathlib import Path

from d1saver.core.errors import ConfigError
from d1saver.core.ids import validate_database_id

from .database import Database

__all__ = ["Registry", "UnknownDatabase", "database_file"]

log = logging.getLogger("d1saver.local")


class UnknownDatabase(LookupError):
    """A database id the registry does not hold and may not create."""


def database_file(root: Path, database_id: str) -> Path:
    """The file of `database_id` directly inside `root` (an absolute, resolved directory).

    Raises ConfigError for an invalid id, or for one whose path would leave `root`."""
    name = f"{validate_database_id(database_id)}.sqlite"
    path = root / name
    if Path(os.path.normpath(path)) != path or path.parent != root or path.name != name:
        raise ConfigError(f"database id {database_id!r} names a file outside {str(root)!r}")
    return path


class Registry:
    """One `Database` per database id, kept open until `close()`; safe to use from many threads."""

    def __init__(self, data_dir: Path | None, *, create: bool = True,
                 on_create: Callable[[str, str], None] | None = None) -> None:
        self._create = create
        self._on_create = on_create
        self._root: Path | None = None
        if data_dir is not None:
            data_dir.mkdir(parents=True, exist_ok=True)
            self._root = data_dir.resolve()
        self._databases: dict[str, Database] = {}
        self._lock = threading.Lock()
        self._closed = False

    def get(self, database_id: str) -> Database:
        """The database named `database_id`, opened (and its file created) on first use."""
        with self._lock:
            if self._closed:
                raise RuntimeError("LocalD1 is closed")
            database = self._databases.get(database_id)
            if database is None:
                validate_database_id(database_id)  # in memory too: one rule for every id
                target = ":memory:" if self._root is None else str(database_file(self._root, database_id))
                fresh = target == ":memory:" or not Path(target).exists()
                if fresh and not self._create:
                    raise UnknownDatabase(database_id)
                database = self._databases[database_id] = Database(target)
                if fresh:  # a typo in an id makes a new, empty database: say so
                    where = "in memory" if target == ":memory:" else target
                    log.info("local D1: created database %s (%s)", database_id, where)
                    if self._on_create is not None:
                        self._on_create(database_id, where)
            return database

    def create(self, database_id: str) -> None:
        """Create (or open) `database_id` even when the registry refuses unknown ids."""
        create, self._create = self._create, True
        try:
            self.get(database_id)
        finally:
            self._create = create

    def known(self) -> list[str]:
        """The ids of the databases this registry holds: those opened, and those whose file is in
        the data directory."""
        with self._lock:
            ids = set(self._databases)
        if self._root is not None:
            ids.update(p.stem for p in self._root.glob("*.sqlite"))
        return sorted(ids)

    def close(self) -> None:
        """Close every database connection; no database can be opened afterwards."""
        with self._lock:
            self._closed = True
            databases, self._databases = list(self._databases.values()), {}
        for database in databases:
            database.close()
