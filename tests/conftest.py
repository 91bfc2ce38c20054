"""Shared fixtures: a fresh database per test, on the in-process local D1 or on the real engine."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Any

import pytest

from d1saver import D1Saver
from d1saver.local import make_server
from tests.servers import serving
from tests.support import (ENGINES, LOCAL_BASE_URL, Recorded, closing, fresh_ids, local_engine,
                           on_engine)

# tests.data.v0_1_0_fixture: the `v010` fixture (the database d1saver 0.1.0 wrote);
# tests.mutation.plugin: applies a mutant or maps tests for `./dev mutate` (idle otherwise).
pytest_plugins = ["tests.realengine", "tests.data.v0_1_0_fixture", "tests.mutation.plugin"]


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--soak", action="store_true", help="run the long soak variants")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("--soak"):
        return
    skip = pytest.mark.skip(reason="soak variant: run with --soak")
    for item in items:
        if "soak" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@dataclass
class Backend(Recorded):
    """Makes savers on one database of one engine, and counts every HTTP attempt they make."""

    name: str
    base_url: str
    api_token: str
    account_id: str
    database_id: str

    def saver(self, **kwargs: Any) -> D1Saver:
        return D1Saver(account_id=self.account_id, database_id=self.database_id,
                       api_token=self.api_token, api_base_url=self.base_url, **self.wired(kwargs))

    @property
    def requests(self) -> int:
        return len(self.events)

    def count(self, fn: Callable[[], Any]) -> tuple[Any, int]:
        """Run fn and return (its result, HTTP attempts it made)."""
        out, attempts = self.attempts(fn)
        return out, len(attempts)


def local_backend() -> Backend:
    (database_id,) = fresh_ids(1)
    return Backend("local", LOCAL_BASE_URL, "test-token", "acc", database_id, **local_engine())


@pytest.fixture
def local() -> Iterator[Backend]:
    """A fresh in-memory local D1, reached in-process through its httpx transport."""
    yield from closing(local_backend())


@pytest.fixture(params=ENGINES)
def backend(request: pytest.FixtureRequest) -> Iterator[Backend]:
    """Each test twice: on the local D1, and on Wrangler's real D1 engine (workerd)."""
    yield from on_engine(request, local_backend, lambda real: Backend(
        "wrangler", real.base_url, real.api_token, real.account_id, real.database_id))


@pytest.fixture
def serve() -> Iterator[Callable[..., str]]:
    """Local D1 servers over real HTTP: `serve(**make_server options)` starts one on a free
    loopback port and gives its API base URL; every one started stops when the test ends."""
    with ExitStack() as servers:
        yield lambda **options: servers.enter_context(
            serving(make_server("127.0.0.1", 0, None, **options)))
