"""Serve the inspector over HTTP with the standard library: wsgiref's server, one thread per
request (a browser opens a few connections at once), bound before anything is printed."""

from __future__ import annotations

from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server as _make


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _Quiet(WSGIRequestHandler):
    """No access log on stderr (`verbose` turns it back on)."""

    verbose = False

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base's name
        if self.verbose:
            super().log_message(format, *args)


def make_server(host: str, port: int, app: Any, *, verbose: bool = False) -> WSGIServer:
    """A server bound to host:port (0: a free port) running `app`; call serve_forever()."""
    handler = type("_Handler", (_Quiet,), {"verbose": verbose})
    return _make(host, port, app, server_class=_Server, handler_class=handler)
