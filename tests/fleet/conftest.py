"""A fleet of four databases per test: on the in-process local D1 (fresh ids each test), and on
the real engine (a gateway of its own, started once for these tests, so that whole-fleet
operations such as `compact --all` and `rebalance` touch no other test's data)."""

from __future__ import annotations

import secrets
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pytest

from d1saver import D1Saver, Statement
from tests.realengine import RealD1, gateway
from tests.support import (ENGINES, LOCAL_BASE_URL, Recorded, closing, fresh_ids, local_engine,
                           on_engine)

TABLES = ("checkpoints", "writes", "chunks", "tags")


@dataclass
class FleetBackend(Recorded):
    """Four databases of one engine; savers over any of them; every HTTP attempt recorded."""

    name: str
    base_url: str
    api_token: str
    account_id: str
    database_ids: list[str]

    def saver(self, database_ids: Sequence[str] | None = None, **kwargs: Any) -> D1Saver:
        return D1Saver(account_id=self.account_id, api_token=self.api_token,
                       database_ids=list(database_ids or self.database_ids),
                       api_base_url=self.base_url, **self.wired(kwargs))

    def single(self, database_id: str) -> D1Saver:
        """A plain one-database saver, to look inside one database."""
        return D1Saver(account_id=self.account_id, api_token=self.api_token,
                       database_id=database_id, api_base_url=self.base_url,
                       transport=self.transport)

    def requests(self, fn: Callable[[], Any]) -> tuple[Any, Counter[str]]:
        """Run fn; return its result and the HTTP attempts it made, per database id."""
        out, attempts = self.attempts(fn)
        return out, Counter(str(e.database_id) for e in attempts)

    def holding(self, thread_id: str) -> list[str]:
        """The databases that hold any row of the thread (in any table)."""
        out = []
        for db in self.database_ids:
            with self.single(db) as s:
                rows = s.execute([Statement(f"SELECT COUNT(*) AS n FROM {t} WHERE thread_id = ?1",
                                            (thread_id,)) for t in TABLES])
            if any(r.rows[0][0] for r in rows):
                out.append(db)
        return out


def local_fleet(**engine_kwargs: Any) -> FleetBackend:
    return FleetBackend("local", LOCAL_BASE_URL, "test-token", "acc", fresh_ids(4),
                        **local_engine(**engine_kwargs))


@pytest.fixture(scope="session")
def fleet_gateway() -> Iterator[RealD1]:
    """The gateway on fresh databases, for the fleet tests only."""
    with gateway({"API_TOKEN": secrets.token_urlsafe(24)}) as real:
        yield real


@pytest.fixture(params=ENGINES)
def fleet(request: pytest.FixtureRequest) -> Iterator[FleetBackend]:
    """Each test on four local databases and on the real engine's four."""
    yield from on_engine(request, local_fleet, lambda real: FleetBackend(
        "wrangler", real.base_url, real.api_token, real.account_id, list(real.databases.values())),
        real_fixture="fleet_gateway")


@pytest.fixture
def local4() -> Iterator[FleetBackend]:
    yield from closing(local_fleet())


def unique(prefix: str = "t") -> str:
    """A prefix no other test uses (the real engine's databases are shared by these tests)."""
    return f"{prefix}-{uuid.uuid4().hex[:10]}"
