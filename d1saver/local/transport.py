"""An httpx transport that sends D1 REST calls to an in-process `LocalD1` instead of the network."""

from __future__ import annotations

import functools
import time

import anyio
import anyio.to_thread
import httpx

from .engine import LocalD1
from .envelope import LocalResponse
from .faults import DroppedConnection

__all__ = ["LocalD1Transport"]


class LocalD1Transport(httpx.BaseTransport, httpx.AsyncBaseTransport):
    """Serve httpx requests (sync or async) from a `LocalD1`, with an optional simulated round trip.

    `latency_ms` is added once per request. Async requests run the engine in a worker thread, so
    concurrent requests overlap their latency as real network calls would. Closing the transport
    leaves the engine open: it may outlive the client.
    """

    def __init__(self, engine: LocalD1 | None = None, *, latency_ms: float = 0.0) -> None:
        self.engine = engine if engine is not None else LocalD1()
        self.latency_s = latency_ms / 1000

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        body = request.read()
        if self.latency_s:
            time.sleep(self.latency_s)
        try:
            answer = self.engine.handle(request.method, request.url.path, request.headers, body)
        except DroppedConnection:
            raise httpx.ReadError("connection dropped", request=request) from None
        return _to_httpx(answer)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        body = await request.aread()
        if self.latency_s:
            await anyio.sleep(self.latency_s)
        call = functools.partial(self.engine.handle, request.method, request.url.path, request.headers, body)
        try:
            answer = await anyio.to_thread.run_sync(call)
        except DroppedConnection:
            raise httpx.ReadError("connection dropped", request=request) from None
        return _to_httpx(answer)


def _to_httpx(answer: LocalResponse) -> httpx.Response:
    return httpx.Response(answer.status, headers=answer.headers, content=answer.body)
