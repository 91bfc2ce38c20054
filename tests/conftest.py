"""Shared fixtures: a fresh database per test, on the in-process local D1 or on the real engine."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Any

import pytest

from d1saver import D1Saver, TraceEvent
from d1saver.local import LocalD1, LocalD1Transport, make_server
from tests.servers import serving

# tests.data.v0_1_0_fixture: the `v010` fixture (the database d1saver 0.1.0 wrote);
# tests.mutation.plugin: applies a mutant or maps tests for `./dev mutate` (idle otherwise).
pytest_plugins = ["tests.realengine", "tests.data.v0_1_0_fixture", "tests.mutation.plugin"]

LOCAL_BASE_URL = "http://d1.local/client/v4"


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
class Backend:
    """Makes savers on one database of one engine, and counts every HTTP attempt they make."""

    name: str
    base_url: str
    api_token: str
    account_id: str
    database_id: str
    transport: Any = None
    engine: LocalD1 | None = None
    events: list[TraceEvent] = field(default_factory=list)

    def saver(self, **kwargs: Any) -> D1Saver:
        kwargs.setdefault("tracer", self.events.append)
        kwargs.setdefault("transport", self.transport)
        return D1Saver(account_id=self.account_id, database_id=self.database_id,
                       api_token=self.api_token, api_base_url=self.base_url, **kwargs)

    @property
    def requests(self) -> int:
        return len(self.events)

    def count(self, fn: Callable[[], Any]) -> tuple[Any, int]:
        """Run fn and return (its result, HTTP attempts it made)."""
        before = len(self.events)
        out = fn()
        return out, len(self.events) - before


def local_backend() -> Backend:
    engine = LocalD1()
    return Backend("local", LOCAL_BASE_URL, "test-token", "acc", f"db-{uuid.uuid4().hex[:8]}",
                   transport=LocalD1Transport(engine), engine=engine)


@pytest.fixture
def local() -> Iterator[Backend]:
    """A fresh in-memory local D1, reached in-process through its httpx transport."""
    b = local_backend()
    yield b
    assert b.engine is not None
    b.engine.close()


@pytest.fixture(params=["local", pytest.param("wrangler", marks=pytest.mark.realengine)])
def backend(request: pytest.FixtureRequest) -> Iterator[Backend]:
    """Each test twice: on the local D1, and on Wrangler's real D1 engine (workerd)."""
    if request.param == "local":
        b = local_backend()
        yield b
        assert b.engine is not None
        b.engine.close()
        return
    real = request.getfixturevalue("wrangler_d1")
    yield Backend("wrangler", real.base_url, real.api_token, real.account_id, real.database_id)


@pytest.fixture
def serve() -> Iterator[Callable[..., str]]:
    """Local D1 servers over real HTTP: `serve(**make_server options)` starts one on a free
    loopback port and gives its API base URL; every one started stops when the test ends."""
    with ExitStack() as servers:
        yield lambda **options: servers.enter_context(
            serving(make_server("127.0.0.1", 0, None, **options)))
