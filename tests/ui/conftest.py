"""Fixtures of the inspector's tests: a local D1 over real HTTP (so the CLI, the inspector and a
browser all reach it by URL) holding the scenario (tests/ui/scenario.py), once per module; the
inspector over it, in-process (httpx's WSGI transport) or served on a loopback port."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest

from d1saver import D1Cache, D1Saver, D1Store, TraceEvent
from d1saver.local import make_server as make_local_d1
from d1saver.storage.crypto import Sealer
from d1saver.ui.app import Inspector
from d1saver.ui.server import make_server
from tests.servers import serving
from tests.ui.scenario import Scenario, populate

TOKEN = "ui-test-token-3f1c"


@dataclass
class World:
    """One database of a local D1 over HTTP, with what the scenario wrote to it."""

    base_url: str
    database_id: str
    scenario: Scenario
    events: list[TraceEvent] = field(default_factory=list)
    account_id: str = "acc"

    def where(self, **kwargs: Any) -> dict[str, Any]:
        return dict(account_id=self.account_id, database_id=self.database_id, api_token=TOKEN,
                    api_base_url=self.base_url, **kwargs)

    def reader(self, **kwargs: Any) -> D1Saver:
        """A saver as `d1saver ui` makes it: nothing set up, every request traced."""
        kwargs.setdefault("tracer", self.events.append)
        return D1Saver(**self.where(auto_setup=False, **kwargs))

    def env(self) -> dict[str, str]:
        return {"CLOUDFLARE_ACCOUNT_ID": self.account_id, "CLOUDFLARE_API_TOKEN": TOKEN,
                "D1_DATABASE_ID": self.database_id, "D1_API_BASE_URL": self.base_url}


def client_for(app: Inspector) -> httpx.Client:
    return httpx.Client(transport=httpx.WSGITransport(app=app), base_url="http://ui.test")


@pytest.fixture(scope="module")
def local_d1() -> Iterator[str]:
    with serving(make_local_d1("127.0.0.1", 0, None)) as url:
        yield url


@pytest.fixture(scope="module")
def world(local_d1: str) -> Iterator[World]:
    database = f"ui-{uuid.uuid4().hex[:8]}"
    with ExitStack() as stack:
        where = dict(account_id="acc", database_id=database, api_token=TOKEN, api_base_url=local_d1)
        saver = stack.enter_context(D1Saver(**where))
        store = stack.enter_context(D1Store(**where))
        cache = stack.enter_context(D1Cache(**where))
        scenario = populate(saver, store, cache, plain=12)
        yield World(local_d1, database, scenario)


@pytest.fixture(scope="module")
def inspector(world: World) -> Iterator[Inspector]:
    with world.reader() as reader:
        yield Inspector(reader, page_size=10)


@pytest.fixture(scope="module")
def client(inspector: Inspector) -> Iterator[httpx.Client]:
    with client_for(inspector) as c:
        yield c


@pytest.fixture(scope="module")
def served(inspector: Inspector) -> Iterator[str]:
    """The inspector on a loopback port: its origin (http://127.0.0.1:PORT)."""
    server = make_server("127.0.0.1", 0, inspector)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02},
                              daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def sealer_for(key: str) -> Sealer:
    return Sealer([key])
