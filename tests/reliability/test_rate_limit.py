"""Rate-limit awareness of the D1 client, against a mocked endpoint (respx) and a virtual clock.

The client's `time` and `asyncio` are swapped for a `VirtualClock`: every wait is recorded and
moves virtual time instead of sleeping, so the tests assert the waits themselves, never wall time.
"""

from __future__ import annotations

import asyncio
import email.utils
import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import respx

import d1saver.http.client
from d1saver import D1Saver, RateLimitError, RetryPolicy

BASE_URL = "https://api.example.test/client/v4"
RAW_PATH = "/accounts/acc/d1/database/db/raw"
CONFIG = {"configurable": {"thread_id": "thread-1", "checkpoint_ns": ""}}


# --- the virtual clock (also used by test_faults) -------------------------------------------


class VirtualClock:
    """The client's clock: sleeps are logged and advance virtual time; nothing really sleeps."""

    EPOCH = 1_700_000_000.0  # time.time() at virtual second 0

    def __init__(self) -> None:
        self.now = 0.0
        self.log: list[tuple[Any, ...]] = []  # ("sleep", seconds); tests add ("send", status)
        self._lock = threading.Lock()

    @property
    def sleeps(self) -> list[float]:
        return [e[1] for e in self.log if e[0] == "sleep"]

    def advance(self, seconds: float) -> None:
        with self._lock:
            self.now += seconds

    def install(self, monkeypatch: pytest.MonkeyPatch) -> VirtualClock:
        """Make d1saver's client read and sleep on this clock (its module only)."""
        monkeypatch.setattr(d1saver.http.client, "time", _TimeFace(self))
        monkeypatch.setattr(d1saver.http.client, "asyncio", _AsyncioFace(self))
        return self


class _TimeFace:
    """`time` as the client sees it: monotonic/time read the clock, sleep advances it."""

    def __init__(self, clock: VirtualClock) -> None:
        self._clock = clock

    def __getattr__(self, name: str) -> Any:
        return getattr(time, name)

    def monotonic(self) -> float:
        return 1000.0 + self._clock.now

    def time(self) -> float:
        return VirtualClock.EPOCH + self._clock.now

    def sleep(self, seconds: float) -> None:
        with self._clock._lock:
            self._clock.log.append(("sleep", seconds))
            self._clock.now += seconds


class _AsyncioFace:
    """`asyncio` as the client sees it: concurrent sleeps overlap, as real timers do."""

    def __init__(self, clock: VirtualClock) -> None:
        self._clock = clock

    def __getattr__(self, name: str) -> Any:
        return getattr(asyncio, name)

    async def sleep(self, seconds: float) -> None:
        clock = self._clock
        with clock._lock:
            clock.log.append(("sleep", seconds))
            wake = clock.now + seconds
        await asyncio.sleep(0)  # let other tasks run (and start their own sleeps) meanwhile
        with clock._lock:
            clock.now = max(clock.now, wake)


# --- the mocked endpoint ------------------------------------------------------------------


def ok(**headers: str) -> tuple[int, dict[str, str]]:
    """A 200 success envelope, with extra headers (X-RateLimit-*)."""
    return 200, {k.replace("_", "-"): v for k, v in headers.items()}


def rate_limited(retry_after: str) -> tuple[int, dict[str, str]]:
    return 429, {"Retry-After": retry_after}


class Script:
    """Answers requests in order from a list of (status, headers), logging each send."""

    def __init__(self, clock: VirtualClock, replies: list[tuple[int, dict[str, str]]]) -> None:
        self.clock, self.replies = clock, list(replies)

    def __call__(self, request: httpx.Request) -> httpx.Response:
        status, headers = self.replies.pop(0)
        self.clock.log.append(("send", status))
        if status != 200:
            body = {"success": False, "errors": [{"code": 971, "message": "rate limited"}],
                    "messages": [], "result": None}
            return httpx.Response(status, headers=headers, json=body)
        sent = json.loads(request.content)
        n = len(sent["batch"]) if "batch" in sent else 1
        entry = {"results": {"columns": [], "rows": []}, "success": True, "meta": {}}
        return httpx.Response(200, headers=headers, json={
            "success": True, "errors": [], "messages": [], "result": [entry] * n})


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> VirtualClock:
    return VirtualClock().install(monkeypatch)


@pytest.fixture
def api() -> Iterator[respx.MockRouter]:
    with respx.mock(base_url=BASE_URL, assert_all_called=False) as router:
        yield router


@pytest.fixture
def serve(api: respx.MockRouter, clock: VirtualClock):
    """serve([...replies]) routes the D1 endpoint to a Script of those replies."""
    def route(replies: list[tuple[int, dict[str, str]]]) -> Script:
        script = Script(clock, replies)
        api.post(RAW_PATH).mock(side_effect=script)
        return script
    return route


def make_saver(**retry: Any) -> D1Saver:
    return D1Saver(account_id="acc", database_id="db", api_token="tok", api_base_url=BASE_URL,
                   auto_setup=False, retry=RetryPolicy(**retry))


def get_tuple(saver: D1Saver, mode: str, config: dict = CONFIG) -> Any:
    if mode == "sync":
        return saver.get_tuple(config)
    return asyncio.run(saver.aget_tuple(config))


MODES = pytest.mark.parametrize("mode", ["sync", "async"])


# --- tests --------------------------------------------------------------------------------


@MODES
def test_retry_after_is_waited_then_retried(serve, clock: VirtualClock, mode: str) -> None:
    """A 429 with Retry-After: 2 is waited out (2 s, once) and the request sent again."""
    serve([rate_limited("2"), ok()])
    assert get_tuple(make_saver(), mode) is None
    assert clock.log == [("send", 429), ("sleep", 2.0), ("send", 200)]


@MODES
def test_retry_after_beyond_max_raises_at_once_and_blocks_the_client(
        serve, clock: VirtualClock, mode: str) -> None:
    """Retry-After over max_retry_after raises at once; the next call raises without sending."""
    serve([rate_limited("120"), ok()])
    saver = make_saver(max_retry_after=60)
    with pytest.raises(RateLimitError) as first:
        get_tuple(saver, mode)
    assert (first.value.status, first.value.retry_after) == (429, 120.0)
    with pytest.raises(RateLimitError) as second:
        get_tuple(saver, mode)
    assert (second.value.status, second.value.retry_after) == (None, 120.0)
    assert clock.log == [("send", 429)]  # no wait, and no second request
    clock.advance(120)
    assert get_tuple(saver, mode) is None  # the block is over: sent again
    assert clock.log == [("send", 429), ("send", 200)]


@MODES
@pytest.mark.parametrize("reset", ["3", str(int(VirtualClock.EPOCH) + 3)],
                         ids=["seconds", "unix-time"])
def test_spent_budget_on_200_delays_the_next_request(serve, clock: VirtualClock, mode: str,
                                                     reset: str) -> None:
    """X-RateLimit-Remaining: 0 with Reset 3 on a 200 makes the next request wait 3 s, then go."""
    serve([ok(X_RateLimit_Remaining="0", X_RateLimit_Reset=reset), ok()])
    saver = make_saver()
    get_tuple(saver, mode)
    assert clock.log == [("send", 200)]
    get_tuple(saver, mode)
    assert clock.log == [("send", 200), ("sleep", 3.0), ("send", 200)]


def test_remaining_budget_does_not_delay(serve, clock: VirtualClock) -> None:
    """X-RateLimit-Remaining above 0 delays nothing, whatever the Reset."""
    serve([ok(X_RateLimit_Remaining="5", X_RateLimit_Reset="3"), ok()])
    saver = make_saver()
    get_tuple(saver, "sync")
    get_tuple(saver, "sync")
    assert clock.log == [("send", 200), ("send", 200)]


@pytest.mark.parametrize("setter", ["429", "remaining-0"])
def test_concurrent_async_callers_wait_out_a_block(serve, clock: VirtualClock,
                                                   setter: str) -> None:
    """During a block, every concurrent async caller waits until it ends; none sends early."""
    n = 8
    first = (rate_limited("2") if setter == "429"
             else ok(X_RateLimit_Remaining="0", X_RateLimit_Reset="2"))
    serve([first] + [ok()] * n)
    saver = make_saver(max_attempts=1)  # the 429 itself is not retried: it only sets the block

    async def main() -> None:
        try:
            await saver.aget_tuple(CONFIG)
        except RateLimitError:
            assert setter == "429"
        configs = [{"configurable": {"thread_id": f"t-{i}"}} for i in range(n)]
        await asyncio.gather(*(saver.aget_tuple(c) for c in configs))

    asyncio.run(main())
    assert clock.log[0] == ("send", first[0])
    assert clock.log[1:n + 1] == [("sleep", 2.0)] * n  # all waited before any of them sent
    assert clock.log[n + 1:] == [("send", 200)] * n
    assert saver.client.requests == 1 + n


@MODES
@pytest.mark.parametrize("offset, wait", [(7, 7.0), (-30, 0.0)], ids=["future", "past"])
def test_http_date_retry_after(serve, clock: VirtualClock, mode: str, offset: int,
                               wait: float) -> None:
    """Retry-After as an HTTP date is waited until that date (a past date: not at all)."""
    when = email.utils.formatdate(VirtualClock.EPOCH + offset, usegmt=True)
    serve([rate_limited(when), ok()])
    assert get_tuple(make_saver(), mode) is None
    assert clock.log == [("send", 429), ("sleep", wait), ("send", 200)]
