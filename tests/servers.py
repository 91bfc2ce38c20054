"""Local D1 servers over real HTTP for tests: served from a daemon thread, stopped afterwards.

The `serve` fixture (tests/conftest.py) is the usual way in; `serving` is for tests that build
their own server first (a shared engine, a fault plan, a wrapped handler).
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import ThreadingHTTPServer


@contextmanager
def serving(server: ThreadingHTTPServer) -> Iterator[str]:
    """Serve a bound server (`make_server(..., port=0)`) until the block ends; gives its API base URL."""
    # A short poll interval: shutdown() waits for the serving loop to notice, up to one interval.
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02},
                              name="local-d1", daemon=True)
    thread.start()
    host, port = server.server_address[:2]
    try:
        yield f"http://{host}:{port}/client/v4"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def closed_url() -> str:
    """An API base URL on a loopback port nothing listens on (connections are refused)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/client/v4"
