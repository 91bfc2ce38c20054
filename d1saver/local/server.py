"""Serve a `LocalD1` over real HTTP, so any D1 REST client (or another process) can use it.

Run it with `d1saver serve` or `python -m d1saver.local.server --data-dir .d1`.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from collections.abc import Callable
from typing import Any

from .engine import LocalD1
from .faults import DroppedConnection, FaultPlan

__all__ = ["LocalD1Server", "make_server", "serve"]

TOKEN_ENV = "LOCAL_D1_API_TOKEN"
# Not 8787, Wrangler's default, so that `wrangler dev` can run beside the local D1.
DEFAULT_PORT = 8799


class LocalD1Server(ThreadingHTTPServer):
    """A threading HTTP server in front of one `LocalD1`."""

    daemon_threads = True

    def __init__(
        self, address: tuple[str, int], engine: LocalD1, *, latency_ms: float, verbose: bool, owns_engine: bool
    ) -> None:
        self.engine = engine
        self.latency_s = latency_ms / 1000
        self.verbose = verbose
        self._owns_engine = owns_engine
        super().__init__(address, _Handler)

    def server_close(self) -> None:
        super().server_close()
        if self._owns_engine:
            self.engine.close()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # TCP_NODELAY: without it a keep-alive client waits ~40 ms per request on loopback
    # (Nagle vs delayed ACK), a stall D1 does not have. Measured: 44 ms -> 0.7 ms per request.
    disable_nagle_algorithm = True
    server: LocalD1Server

    def _answer(self) -> None:
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            self.send_error(400, "bad Content-Length")
            return
        body = self.rfile.read(length) if length > 0 else b""
        if self.server.latency_s:
            time.sleep(self.server.latency_s)
        try:
            answer = self.server.engine.handle(self.command, self.path, dict(self.headers.items()), body)
        except DroppedConnection:
            self.close_connection = True  # close the socket without writing a response
            return
        self.send_response(answer.status)
        for name, value in answer.headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(answer.body)))
        self.end_headers()
        self.wfile.write(answer.body)

    do_POST = do_GET = do_PUT = do_PATCH = do_DELETE = _answer

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - stdlib signature
        if self.server.verbose:  # the request line and status only; never headers
            super().log_message(format, *args)


def make_server(
    host: str = "127.0.0.1",
    port: int = DEFAULT_PORT,
    data_dir: str | os.PathLike[str] | None = None,
    *,
    latency_ms: float = 0.0,
    api_token: str | None = None,
    faults: FaultPlan | None = None,
    engine: LocalD1 | None = None,
    verbose: bool = False,
    create: bool = True,
    on_create: Callable[[str, str], None] | None = None,
) -> LocalD1Server:
    """A bound, not yet serving server; use port 0 for a free port and read `server.server_address`.

    Pass `engine` to share an existing engine (then data_dir, api_token and faults must be left unset).
    """
    if engine is not None and (data_dir is not None or api_token is not None or faults is not None):
        raise ValueError("pass either engine or data_dir/api_token/faults, not both")
    owns = engine is None
    if engine is None:
        engine = LocalD1(data_dir, api_token=api_token, faults=faults, create=create, on_create=on_create)
    return LocalD1Server((host, port), engine, latency_ms=latency_ms, verbose=verbose, owns_engine=owns)


def serve(
    host: str = "127.0.0.1",
    port: int = DEFAULT_PORT,
    data_dir: str | os.PathLike[str] | None = None,
    *,
    ready: threading.Event | None = None,
    **options: Any,
) -> None:
    """Serve until interrupted; `ready` is set once the socket is bound."""
    server = make_server(host, port, data_dir, **options)  # make_server's keyword options
    try:
        if ready is not None:
            ready.set()
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


def main(argv: list[str] | None = None) -> None:
    """Command line: serve a local D1 over HTTP (the token, if any, comes from $LOCAL_D1_API_TOKEN)."""
    parser = argparse.ArgumentParser(description="A local D1 speaking D1's REST API, backed by SQLite.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT)
    parser.add_argument("--data-dir", default=None, help="keep databases here (default: in memory)")
    parser.add_argument("--latency-ms", type=float, default=0.0, help="added to every request")
    parser.add_argument("--verbose", action="store_true", help="log request lines")
    args = parser.parse_args(argv)
    print(f"local D1 on http://{args.host}:{args.port}/client/v4/accounts/<account>/d1/database/<id>/query",
          file=sys.stderr)  # fmt: skip
    serve(
        args.host, args.port, args.data_dir,
        latency_ms=args.latency_ms, api_token=os.environ.get(TOKEN_ENV) or None, verbose=args.verbose,
    )  # fmt: skip


if __name__ == "__main__":
    main()
