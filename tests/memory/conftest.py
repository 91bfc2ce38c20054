"""D1Store and D1Cache over the local D1 (a fresh engine per test), with every HTTP attempt
recorded, and a clock the test moves (TTLs without sleeping)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest

from d1saver import D1Store, TraceEvent
from tests.support import LOCAL_BASE_URL, Clock, Recorded, closing, fresh_ids, local_engine


@dataclass
class Memory(Recorded):
    """Stores and caches over one engine; `requests(fn)` counts the HTTP attempts fn makes."""

    base_url: str
    api_token: str
    account_id: str
    database_ids: list[str]
    clock: Clock = field(default_factory=Clock)

    def _kwargs(self, kwargs: dict[str, Any], database_ids: Sequence[str] | None) -> dict[str, Any]:
        ids = list(database_ids or self.database_ids[:1])
        kwargs.setdefault("clock", self.clock)
        where: dict[str, Any] = {"database_id": ids[0]} if len(ids) == 1 else {"database_ids": ids}
        return {"account_id": self.account_id, "api_token": self.api_token,
                "api_base_url": self.base_url, **where, **self.wired(kwargs)}

    def store(self, database_ids: Sequence[str] | None = None, **kwargs: Any) -> D1Store:
        return D1Store(**self._kwargs(kwargs, database_ids))

    def cache(self, database_ids: Sequence[str] | None = None, **kwargs: Any) -> Any:
        from d1saver import D1Cache
        return D1Cache(**self._kwargs(kwargs, database_ids))

    def requests(self, fn: Callable[[], Any]) -> tuple[Any, int]:
        out, attempts = self.attempts(fn)
        return out, len(attempts)

    def sent(self, fn: Callable[[], Any]) -> tuple[Any, list[TraceEvent]]:
        return self.attempts(fn)


@pytest.fixture
def memory() -> Iterator[Memory]:
    yield from closing(Memory(LOCAL_BASE_URL, "test-token", "acc", fresh_ids(4), **local_engine()))
