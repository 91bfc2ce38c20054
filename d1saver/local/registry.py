"""The local D1's databases by id: opened on first use, in memory or as one SQLite file each."""

from __future__ import annotations

import threading
from pathlib import Path

from .database import Database

__all__ = ["Registry"]


class Registry:
    """One `Database` per database id, kept open until `close()`; safe to use from many threads.

    A file is `<data_dir>/<database_id>.sqlite`."""

    def __init__(self, data_dir: Path | None) -> None:
        self.data_dir = data_dir
        if data_dir is not None:
            data_dir.mkdir(parents=True, exist_ok=True)
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
                target = str(self.data_dir / f"{database_id}.sqlite") if self.data_dir else ":memory:"
                database = self._databases[database_id] = Database(target)
            return database

    def close(self) -> None:
        """Close every database connection; no database can be opened afterwards."""
        with self._lock:
            self._closed = True
            databases, self._databases = list(self._databases.values()), {}
        for database in databases:
            database.close()
