"""`d1saver ui`: the web inspector on a local port, over the databases the other commands
reach (CLOUDFLARE_ACCOUNT_ID, CLOUDFLARE_API_TOKEN, D1_DATABASE_ID, several separated by commas,
D1_API_BASE_URL for the gateway or a local D1, D1SAVER_ENCRYPTION_KEYS). Read-only: its saver
never sets up or migrates a schema (a database without it is reported on the page)."""

from __future__ import annotations

import errno
import socket
from contextlib import suppress

import typer

from d1saver.cli.support import Connection, connection_options, usage_error
from d1saver.core.errors import ConfigError

DEFAULT_PORT = 8790


@connection_options
def ui(
    host: str = typer.Option("127.0.0.1", help="Address to bind (keep it on loopback: the pages show your data)."),
    port: int = typer.Option(DEFAULT_PORT, min=0, max=65535, help="Port to listen on; 0 picks a free one."),
    page_size: int = typer.Option(50, "--page-size", min=1, max=1000, help="Threads per page."),
    verbose: bool = typer.Option(False, "--verbose", help="Log each request line."),
    *,
    conn: Connection,
) -> None:
    """Serve the web inspector (threads, checkpoints, diffs, storage, memory) on http://HOST:PORT."""
    try:
        from d1saver.ui.app import Inspector
        from d1saver.ui.server import make_server
    except ModuleNotFoundError as exc:
        if exc.name is None or exc.name.split(".")[0] not in ("jinja2", "markupsafe"):
            raise
        raise usage_error("the web inspector needs Jinja2: pip install 'd1saver[ui]'") from None
    from d1saver import D1Saver
    from d1saver.storage.crypto import Sealer, keys_from_env

    try:
        keys = keys_from_env()
        saver = D1Saver.from_env(**conn.settings(), encryption_keys=keys, auto_setup=False)
    except ConfigError as exc:
        raise usage_error(str(exc)) from None
    app = Inspector(saver, sealer=None if keys is None else Sealer(keys), page_size=page_size)
    try:  # bind first: nothing is printed for a server that cannot start
        server = make_server(host, port, app, verbose=verbose)
    except OSError as exc:
        saver.close()
        if exc.errno == errno.EADDRINUSE:
            raise usage_error(f"port {port} on {host} is in use: choose another with --port") from None
        if exc.errno == errno.EADDRNOTAVAIL or isinstance(exc, socket.gaierror):
            raise usage_error(f"cannot bind to {host}: give a local address with --host") from None
        raise
    typer.echo(f"d1saver ui on http://{host}:{server.server_address[1]}/ "
               f"({len(saver.database_ids)} database{'s' if len(saver.database_ids) != 1 else ''}, "
               f"read-only); Ctrl-C stops it")
    try:
        with server, suppress(KeyboardInterrupt):  # Ctrl-C stops it; the socket is closed
            server.serve_forever()
    finally:
        saver.close()
