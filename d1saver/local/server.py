"""Serve a `LocalD1` over real HTTP, so any D1 REST client (or another process) can use it.

Run it with `d1saver serve` or `python -m d1saver.local.server --data-dir .d1`: both serve only
the databases they are told to (`--database NAME`, default `local`) and print the settings that
point a saver at them.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from contextlib import suppress
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from collections.abc import Callable, Sequence
from typing import Any

from .defaults import DEFAULT_DATABASE, DEFAULT_PORT
from .engine import LocalD1
from .faults import DroppedConnection, FaultPlan

__all__ = ["DEFAULT_DATABASE", "DEFAULT_PORT", "LocalD1Server", "client_settings", "make_server", "serve"]

TOKEN_ENV = "LOCAL_D1_API_TOKEN"
# The local D1 checks no account id; any valid one will do.
LOCAL_ACCOUNT_ID = "local"


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
    # (Nagle vs delayed ACK), a stall D1 does not have.
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
    databases: Sequence[str] = (),
) -> LocalD1Server:
    """A bound, not yet serving server; use port 0 for a free port and read `server.server_address`.

    Pass `engine` to share an existing engine (then data_dir, api_token and faults must be left unset).
    `databases` are created (or opened) before it serves; with create=False they, and those
    already in `data_dir`, are the only ones it answers for (D1's 404, code 7404, otherwise).
    """
    if engine is not None and (data_dir is not None or api_token is not None or faults is not None):
        raise ValueError("pass either engine or data_dir/api_token/faults, not both")
    owns = engine is None
    if engine is None:
        engine = LocalD1(data_dir, api_token=api_token, faults=faults, create=create, on_create=on_create)
    try:
        server = LocalD1Server((host, port), engine, latency_ms=latency_ms, verbose=verbose, owns_engine=owns)
    except BaseException:
        if owns:
            engine.close()
        raise
    try:  # after binding: a server that cannot start creates nothing
        for database_id in databases:
            engine.create_database(database_id)
    except BaseException:
        server.server_close()
        raise
    return server


def client_settings(server: LocalD1Server, database_id: str, *, token_required: bool) -> str:
    """The shell line that points `D1Saver.from_env()` (and every d1saver command) at
    `database_id` on `server`; without a token to require, any token works, so a dummy one is
    given (a required one is never printed)."""
    address, port = server.server_address[:2]
    host = address.decode() if isinstance(address, bytes) else str(address)
    if host in ("0.0.0.0", ""):
        host = "127.0.0.1"
    elif host == "::":
        host = "::1"
    shown = f"[{host}]" if ":" in host else host
    token = "<the-token-given-to-serve>" if token_required else "local"
    return (f"export D1_API_BASE_URL=http://{shown}:{port}/client/v4 D1_DATABASE_ID={database_id} "
            f"CLOUDFLARE_ACCOUNT_ID={LOCAL_ACCOUNT_ID} CLOUDFLARE_API_TOKEN={token}")


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
    with server, suppress(KeyboardInterrupt):  # Ctrl-C stops it; the socket is closed
        if ready is not None:
            ready.set()
        server.serve_forever()


def main(argv: list[str] | None = None) -> None:
    """Command line: serve a local D1 over HTTP (the token, if any, comes from $LOCAL_D1_API_TOKEN)."""
    parser = argparse.ArgumentParser(description="A local D1 speaking D1's REST API, backed by SQLite.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT)
    parser.add_argument("--data-dir", default=None, help="keep databases here (default: in memory)")
    parser.add_argument("--database", action="append", default=None,
                        help=f"a database to serve, repeatable (default: {DEFAULT_DATABASE})")
    parser.add_argument("--create", action="store_true",
                        help="also create a database for any other id on its first request")
    parser.add_argument("--latency-ms", type=float, default=0.0, help="added to every request")
    parser.add_argument("--verbose", action="store_true", help="log request lines")
    args = parser.parse_args(argv)
    token = os.environ.get(TOKEN_ENV) or None
    databases = args.database or [DEFAULT_DATABASE]
    server = make_server(args.host, args.port, args.data_dir, latency_ms=args.latency_ms,
                         api_token=token, verbose=args.verbose, create=args.create,
                         databases=databases)
    print(f"local D1 serving {', '.join(server.engine.database_ids())}; point your code at it with:\n"
          f"  {client_settings(server, databases[0], token_required=token is not None)}",
          file=sys.stderr)
    with server, suppress(KeyboardInterrupt):
        server.serve_forever()


if __name__ == "__main__":
    main()
