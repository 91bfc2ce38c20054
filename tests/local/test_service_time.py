"""The local D1's service time (LocalD1(service_time_ms=...)): each statement holds its database
that long, so one database serves one request at a time while others go on, as D1 does.
Checked by what the engine asks to sleep and what runs meanwhile, never by a clock."""

from __future__ import annotations

import threading
from typing import Any

import httpx
import pytest

from d1saver.local import LocalD1, LocalD1Transport
from d1saver.local import engine as engine_module

BASE = "http://d1.local/client/v4/accounts/acc/d1/database"
AUTH = {"Authorization": "Bearer t"}


def batch(client: httpx.Client, db: str, n: int) -> httpx.Response:
    return client.post(f"{BASE}/{db}/query", headers=AUTH,
                       json={"batch": [{"sql": "SELECT 1 AS one"}] * n})


def test_each_statement_holds_its_database(monkeypatch: pytest.MonkeyPatch) -> None:
    engine = LocalD1(service_time_ms=4)
    slept: list[tuple[float, bool]] = []
    monkeypatch.setattr(engine_module.time, "sleep", lambda s: slept.append(
        (s, engine._registry.get("a").lock.locked())))
    with httpx.Client(transport=LocalD1Transport(engine)) as client:
        assert batch(client, "a", 3).status_code == 200
    assert slept == [(pytest.approx(0.012), True)]  # 3 statements x 4 ms, the lock held


def test_other_databases_are_served_meanwhile(monkeypatch: pytest.MonkeyPatch) -> None:
    engine = LocalD1(service_time_ms=1)
    b_done, a_waited = threading.Event(), []
    real_sleep = engine_module.time.sleep

    def sleep(seconds: float) -> None:
        if threading.current_thread() is first:  # "a" stays in service until "b" is answered
            a_waited.append(b_done.wait(10))
        real_sleep(0)

    monkeypatch.setattr(engine_module.time, "sleep", sleep)
    transport = LocalD1Transport(engine)
    results: dict[str, Any] = {}

    def call(db: str) -> None:
        with httpx.Client(transport=transport) as client:
            results[db] = batch(client, db, 1).status_code
        if db == "b":
            b_done.set()

    first = threading.Thread(target=call, args=("a",))
    first.start()
    while not engine._registry.get("a").lock.locked():
        pass
    call("b")
    first.join(10)
    assert results == {"a": 200, "b": 200} and a_waited == [True]
