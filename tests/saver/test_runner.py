"""One runner: every operation runs on one loop (sync or async), and a put's stack from
D1Saver.put down to the transport never goes back up through a second loop (issue 27)."""

from __future__ import annotations

import ast
import asyncio
import inspect
import subprocess
import sys
import textwrap
from pathlib import Path

import httpx
import pytest
from langgraph.checkpoint.conformance.test_utils import generate_checkpoint

from d1saver import D1Saver
from d1saver.http import telemetry
from d1saver.local import LocalD1, LocalD1Transport
from tests.conftest import LOCAL_BASE_URL

# d1saver's frames from the application's call to the HTTP send: put, the fleet's `on`, the
# runner's `run` and its loop, the client's `send` (0.2.0: 16, with the client's loop entered
# twice); with opentelemetry-api installed, one more above put: the public call's span
# (d1saver/http/telemetry.py), which must look up whether a provider is set on every call.
# Group commit and the request's CLIENT span are generators on the runner's stack: no frame.
MAX_FRAMES = 5
SPAN_FRAMES = 1 if telemetry.enabled else 0
LOOPS = {("runner.py", "drive"), ("runner.py", "adrive")}


class Spy(httpx.BaseTransport, httpx.AsyncBaseTransport):
    """The local D1's transport, noting d1saver's frames on the stack of each request."""

    def __init__(self) -> None:
        self.inner = LocalD1Transport(LocalD1())
        self.stacks: list[list[tuple[str, str]]] = []

    def _note(self) -> None:
        frames = [(f.filename, f.function) for f in inspect.stack()]
        self.stacks.append([(path.rsplit("/", 1)[-1], name) for path, name in reversed(frames)
                            if "/d1saver/" in path])

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        self._note()
        return self.inner.handle_request(request)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self._note()
        return await self.inner.handle_async_request(request)


@pytest.fixture
def spied() -> tuple[D1Saver, Spy]:
    spy = Spy()
    saver = D1Saver(account_id="a", database_id="d", api_token="t", api_base_url=LOCAL_BASE_URL,
                    transport=spy)
    saver.setup()
    spy.stacks.clear()
    return saver, spy


CONFIG = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}


def test_a_put_reaches_the_transport_without_a_bounce(spied: tuple[D1Saver, Spy]) -> None:
    saver, spy = spied
    saver.put(CONFIG, generate_checkpoint(), {}, {})
    [frames] = spy.stacks  # every d1saver frame, from the application's call down
    assert frames[SPAN_FRAMES] == ("saver.py", "put"), frames
    assert [f for f in frames if f in LOOPS] == [("runner.py", "drive")]  # one loop, entered once
    assert frames[-1] == ("client.py", "send")
    assert len(frames) <= MAX_FRAMES + SPAN_FRAMES, frames


def test_without_opentelemetry_a_put_has_no_frame_of_it() -> None:
    """Without opentelemetry-api no method is wrapped: the put's stack is the five frames."""
    code = textwrap.dedent(f"""
        import sys
        sys.modules["opentelemetry"] = None  # as if it were not installed
        from langgraph.checkpoint.conformance.test_utils import generate_checkpoint
        from d1saver import D1Saver
        from tests.saver.test_runner import CONFIG, Spy
        spy = Spy()
        saver = D1Saver(account_id="a", database_id="d", api_token="t",
                        api_base_url={LOCAL_BASE_URL!r}, transport=spy)
        saver.setup()
        spy.stacks.clear()
        saver.put(CONFIG, generate_checkpoint(), {{}}, {{}})
        [frames] = spy.stacks
        assert "opentelemetry.trace" not in sys.modules
        print(frames)
        """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, cwd=Path(__file__).parents[2])
    assert done.returncode == 0, done.stderr
    frames = ast.literal_eval(done.stdout.strip())
    assert frames[0] == ("saver.py", "put") and frames[-1] == ("client.py", "send"), frames
    assert len(frames) <= MAX_FRAMES, frames


def test_every_sync_call_runs_on_one_loop(spied: tuple[D1Saver, Spy]) -> None:
    saver, spy = spied
    saved = saver.put(CONFIG, generate_checkpoint(), {}, {})
    saver.put_writes(saved, [("ch", 1)], "task")
    saver.get_tuple(CONFIG)
    list(saver.list(CONFIG))
    saver.get_delta_channel_history(config=saved, channels=["messages"])
    saver.delete_thread("t")
    assert spy.stacks
    for stack in spy.stacks:
        assert [f for f in stack if f in LOOPS] == [("runner.py", "drive")], stack


@pytest.mark.anyio
async def test_every_async_call_runs_on_one_loop(spied: tuple[D1Saver, Spy]) -> None:
    """Async: one loop per task (a commit runs in a task of its own, so that a cancelled
    caller neither loses its write nor cuts short a batch carrying others')."""
    saver, spy = spied
    saved = await saver.aput(CONFIG, generate_checkpoint(), {}, {})
    await asyncio.gather(*(saver.aput_writes(saved, [("ch", i)], f"task-{i}") for i in range(3)))
    await saver.aget_tuple(CONFIG)
    _ = [t async for t in saver.alist(CONFIG)]
    await saver.adelete_thread("t")
    assert spy.stacks
    for stack in spy.stacks:
        assert [f for f in stack if f in LOOPS] == [("runner.py", "adrive")], stack
