"""Counters of what crossed the local D1's API, for tests and benchmarks that assert counts."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field, fields

__all__ = ["EngineStats"]


@dataclass
class EngineStats:
    """Counters of what crossed the engine's API; safe to read and update from many threads.

    `statements` counts every statement attempted; `rows_written` counts only committed requests.
    """

    requests: int = 0
    bytes_received: int = 0
    bytes_sent: int = 0
    rows_written: int = 0
    statements: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False,
                                  compare=False)

    def add(self, **deltas: int) -> None:
        """Add the given deltas, e.g. `add(requests=1, bytes_received=120)`."""
        with self._lock:
            for name, delta in deltas.items():
                setattr(self, name, getattr(self, name) + delta)

    def reset(self) -> None:
        """Set every counter back to zero."""
        with self._lock:
            for f in fields(self):
                if not f.name.startswith("_"):
                    setattr(self, f.name, 0)

    def snapshot(self) -> dict[str, int]:
        """The counters as a plain dict, read consistently."""
        with self._lock:
            return {f.name: getattr(self, f.name) for f in fields(self) if not f.name.startswith("_")}
