"""D1Store and D1Cache over the local D1 (a fresh engine per test), with every HTTP attempt
recorded, and a clock the test moves (TTLs without sleeping)."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest

from d1saver import D1Store, TraceEvent
from d1saver.local import LocalD1, LocalD1Transport
from tests.conftest import LOCAL_BASE_URL


@dataclass
class Clock:
    """Unix seconds that move only when told."""

    now: float = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@dataclass
class Memory:
    """Stores and caches over one engine; `requests(fn)` counts the HTTP attempts fn makes."""

    base_url: str
    api_token: str
    account_id: str
    database_ids: list[str]
    transport: Any = None
    engine: LocalD1 | None = None
    clock: Clock = field(default_factory=Clock)
    events: list[TraceEvent] = field(default_factory=list)

    def _kwargs(self, kwargs: dict[str, Any], database_ids: Sequence[str] | None) -> dict[str, Any]:
        ids = list(database_ids or self.database_ids[:1])
        kwargs.setdefault("tracer", self.events.append)
        kwargs.setdefault("transport", self.transport)
        kwargs.setdefault("clock", self.clock)
        where: dict[str, Any] = {"database_id": ids[0]} if len(ids) == 1 else {"database_ids": ids}
        return {"account_id": self.account_id, "api_token": self.api_token,
                "api_base_url": self.base_url, **where, **kwargs}

    def store(self, database_ids: Sequence[str] | None = None, **kwargs: Any) -> D1Store:
        return D1Store(**self._kwargs(kwargs, database_ids))

    def cache(self, database_ids: Sequence[str] | None = None, **kwargs: Any) -> Any:
        from d1saver import D1Cache
        return D1Cache(**self._kwargs(kwargs, database_ids))

    def requests(self, fn: Callable[[], Any]) -> tuple[Any, int]:
        before = len(self.events)
        out = fn()
        return out, len(self.events) - before

    def sent(self, fn: Callable[[], Any]) -> tuple[Any, list[TraceEvent]]:
        before = len(self.events)
        out = fn()
        return out, self.events[before:]


@pytest.fixture
def memory() -> Iterator[Memory]:
    engine = LocalD1()
    ids = [f"db-{uuid.uuid4().hex[:8]}" for _ in range(4)]
    yield Memory(LOCAL_BASE_URL, "test-token", "acc", ids, transport=LocalD1Transport(engine),
                 engine=engine)
    engine.close()
