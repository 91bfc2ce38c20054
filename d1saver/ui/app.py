"""The web inspector: a WSGI application over one D1Saver, read-only, server-rendered.

Every page has a JSON twin under /api (the same data, before rendering; where the CLI has a
`--json`, its shape, from d1saver.inspection): `/` is /api/threads, `/threads/T` is
/api/threads/T, and so on. Pages use no JavaScript; the only asset is one stylesheet served
from the package, so a page makes no request beyond this server.

Why WSGI on the standard library: the pages are a handful of GETs, the server runs on one
person's machine, and D1Saver's sync API is what they call. A WSGI callable runs under
wsgiref's server (`serve`) and, in-process, under httpx's WSGITransport (httpx is already a
dependency), so nothing but Jinja2 (autoescaping templates) is added.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from importlib import resources
from typing import Any
from urllib.parse import parse_qs, quote, unquote, urlencode

from jinja2 import Environment, PackageLoader, pass_context, select_autoescape

from d1saver import inspection
from d1saver.core.errors import D1Error, InvalidInputError, NotFoundError, StoredValueError
from d1saver.saver import D1Saver
from d1saver.storage.crypto import Sealer
from d1saver.ui import tree

STRING_MAX = 2_000  # characters of a string shown before "show all"
LIST_MAX = 100  # items of a list shown before "show all"
MESSAGE_TYPES = {"human", "ai", "tool", "system", "function", "chat", "remove",
                 "AIMessageChunk", "HumanMessageChunk", "ToolMessageChunk"}
# No request leaves the page: styles and images from this server only, no scripts at all.
CSP = ("default-src 'none'; style-src 'self'; img-src 'self' data:; form-action 'self'; "
       "base-uri 'none'; frame-ancestors 'none'")

Environ = dict[str, Any]
StartResponse = Callable[..., Any]


@dataclass
class View:
    """What a route found: `data` (the /api answer), the template that renders it with
    `context`, and headers for both."""

    template: str
    data: Any
    context: dict[str, Any] = field(default_factory=dict)
    headers: list[tuple[str, str]] = field(default_factory=list)


def segment(text: str) -> str:
    """A label or id as one path segment: '/' and '%' escaped twice, so that the server's
    one decoding of the path leaves them apart from the separators (see `_unsegment`)."""
    return quote(text.replace("%", "%25").replace("/", "%2F"), safe="")


def _unsegment(text: str) -> str:
    return unquote(text)


class Inspector:
    """The WSGI application. `saver` reads (give it `auto_setup=False`: nothing is created),
    `sealer` opens memory items sealed under the same keys; `page_size` threads a page."""

    def __init__(self, saver: D1Saver, *, sealer: Sealer | None = None, page_size: int = 50,
                 clock: Callable[[], float] = time.time) -> None:
        self.saver, self.sealer, self.page_size, self.clock = saver, sealer, page_size, clock
        self.env = Environment(loader=PackageLoader("d1saver.ui", "templates"),
                               autoescape=select_autoescape(default=True),
                               trim_blocks=True, lstrip_blocks=True)
        self.env.filters.update(seg=segment, size=_size, short=_short, tojson_pretty=_pretty)
        self.env.tests["conversation"] = _is_conversation
        self.env.globals.update(STRING_MAX=STRING_MAX, LIST_MAX=LIST_MAX, query=_query, more=_more)
        pages: list[tuple[str, Callable[..., View]]] = [
            (r"/(?:threads)?", self.threads_page),
            (r"/threads/(?P<thread>[^/]+)", self.thread_page),
            (r"/threads/(?P<thread>[^/]+)/checkpoints/(?P<checkpoint>[^/]+)",
             self.checkpoint_page),
            (r"/threads/(?P<thread>[^/]+)/diff", self.diff_page),
            (r"/storage", self.storage_page),
            (r"/storage/(?P<thread>[^/]+)", self.growth_page),
            (r"/store", self.store_page),
            (r"/store/(?P<labels>.+)", self.namespace_page),
        ]
        self.routes = [(re.compile(p), h) for p, h in pages]
        self._schema_ok: set[str] = set()

    # --- WSGI ---------------------------------------------------------------------------

    def __call__(self, environ: Environ, start_response: StartResponse) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "") or "/"
        if environ.get("REQUEST_METHOD", "GET") not in ("GET", "HEAD"):
            return _send(start_response, "405 Method Not Allowed", "text/plain",
                         b"read-only: GET only\n", [("Allow", "GET, HEAD")])
        if path.startswith("/static/"):
            return self._static(path[len("/static/"):], start_response)
        api = path == "/api" or path.startswith("/api/")
        route = (path[len("/api"):] or "/") if api else path
        args = {k: v[-1] for k, v in parse_qs(environ.get("QUERY_STRING", "")).items()}
        try:
            view = self._dispatch(route, args)
            status = "200 OK"
        except NotFoundError as exc:
            view, status = _error(404, str(exc)), "404 Not Found"
        except InvalidInputError as exc:
            view, status = _error(400, str(exc)), "400 Bad Request"
        except D1Error as exc:  # D1 refused or failed: say so, on the page
            view, status = _error(502, f"{type(exc).__name__}: {exc}"), "502 Bad Gateway"
        if api:
            body = json.dumps(view.data, ensure_ascii=False, indent=2, default=str).encode()
            return _send(start_response, status, "application/json", body, view.headers)
        html = self.env.get_template(view.template).render(
            data=view.data, schema=self._schema(), path=path, args=args,
            databases=inspection.databases(self.saver), **view.context)
        return _send(start_response, status, "text/html; charset=utf-8", html.encode(),
                     view.headers)

    def _dispatch(self, route: str, args: dict[str, str]) -> View:
        for pattern, handler in self.routes:
            m = pattern.fullmatch(route)
            if m:
                # `labels` holds several segments: the handler splits, then decodes each
                return handler(args, **{k: v if k == "labels" else _unsegment(v)
                                        for k, v in m.groupdict().items()})
        raise NotFoundError(f"no page at {route}")

    def _static(self, name: str, start_response: StartResponse) -> Iterable[bytes]:
        if name != "style.css":
            return _send(start_response, "404 Not Found", "text/plain", b"not found\n")
        body = (resources.files("d1saver.ui") / "static" / name).read_bytes()
        return _send(start_response, "200 OK", "text/css", body,
                     [("Cache-Control", "max-age=3600")])

    def _schema(self) -> dict[str, str]:
        """The problems of the databases' schemas ({database_id: text}); a database found
        current is not asked again."""
        problems: dict[str, str] = {}
        for db in inspection.databases(self.saver):
            if db in self._schema_ok:
                continue
            view = self.saver if not inspection.spans(self.saver) else self.saver.database(db)
            try:
                status = inspection.schema_status(view)
            except D1Error as exc:
                problems[db] = f"cannot read its schema: {type(exc).__name__}: {exc}"
                continue
            found = next(iter(status.values()))
            if found["problem"] is None:
                self._schema_ok.add(db)
            else:
                problems[db] = found["problem"]
        return problems

    # --- threads ------------------------------------------------------------------------

    def threads_page(self, args: dict[str, str]) -> View:
        sort = args.get("sort", "updated")
        text = args.get("q", "")
        page = inspection.threads(self.saver, text=text, sort=sort, limit=self._limit(args),
                                  after=args.get("after"))
        headers = [("X-Total-Count", str(page.total))]
        nxt = None
        if page.next is not None:
            nxt = "?" + urlencode({**args, "after": page.next})
            headers.append(("Link", f'<{nxt}>; rel="next"'))
        return View("threads.html", page.threads, {
            "total": page.total, "next": nxt, "sort": sort, "q": text,
            "sorts": inspection.SORTS, "first": "after" in args}, headers)

    def _limit(self, args: dict[str, str]) -> int:
        try:
            limit = int(args.get("limit", self.page_size))
        except ValueError:
            raise InvalidInputError(f"limit is a number, not {args.get('limit')!r}") from None
        if not 1 <= limit <= 1000:
            raise InvalidInputError(f"limit is from 1 to 1000, not {limit}")
        return limit

    def thread_page(self, args: dict[str, str], thread: str) -> View:
        rows = inspection.timeline(self.saver, thread)
        if not rows:
            raise NotFoundError(f"thread {thread!r} has no checkpoints")
        namespaces: dict[str, int] = {}
        for r in rows:
            namespaces[r["checkpoint_ns"]] = namespaces.get(r["checkpoint_ns"], 0) + 1
        ns = args.get("ns", "")
        shown = [r for r in rows if r["checkpoint_ns"] == ns]
        return View("thread.html", rows, {
            "thread": thread, "ns": ns, "namespaces": namespaces,
            "rows": list(zip(shown, tree.lanes(shown))), "row_height": tree.ROW,
            "sealed": next((r["sealed"] for r in rows if r["sealed"]), None)})

    def checkpoint_page(self, args: dict[str, str], thread: str, checkpoint: str) -> View:
        ns = args.get("ns", "")
        try:
            snap = inspection.snapshot(self.saver, thread, checkpoint, ns)
            return View("checkpoint.html", snap, {"thread": thread, "ns": ns,
                                                  "full": args.get("full") == "1"})
        except StoredValueError as exc:  # sealed under a key not given: say so, show the rest
            data = inspection.sealed(self.saver, thread, checkpoint, ns, exc)
            return View("sealed.html", data, {"thread": thread, "ns": ns})

    def diff_page(self, args: dict[str, str], thread: str) -> View:
        a, b = args.get("a"), args.get("b")
        if not a or not b:
            raise InvalidInputError("name two checkpoints: ?a=CHECKPOINT_ID&b=CHECKPOINT_ID")
        ns = args.get("ns", "")
        found = inspection.diff(self.saver, thread, a, b, ns)
        return View("diff.html", found, {"thread": thread, "ns": ns, "full": False})

    # --- storage ------------------------------------------------------------------------

    def storage_page(self, args: dict[str, str]) -> View:
        page = inspection.threads(self.saver, sort="bytes", limit=self._limit(args),
                                  after=args.get("after"), text=args.get("q", ""))
        top = max((t["bytes"] for t in page.threads), default=0)
        nxt = "?" + urlencode({**args, "after": page.next}) if page.next else None
        return View("storage.html", page.threads, {"top": top, "total": page.total,
                                                   "next": nxt})

    def growth_page(self, args: dict[str, str], thread: str) -> View:
        rows = inspection.growth(self.saver, thread)
        if not rows:
            raise NotFoundError(f"thread {thread!r} has no checkpoints")
        return View("growth.html", rows, {"thread": thread,
                                          "chart": tree.chart([r["total"] for r in rows])})

    # --- memory -------------------------------------------------------------------------

    def store_page(self, args: dict[str, str]) -> View:
        now = self.clock()
        data = {"namespaces": inspection.store_namespaces(self.saver, now=now, limit=500),
                "cache": inspection.cache_summary(self.saver, now=now),
                "runs": inspection.run_history(self.saver, 20)}
        return View("store.html", data)

    def namespace_page(self, args: dict[str, str], labels: str) -> View:
        namespace = tuple(_unsegment(label) for label in labels.split("/"))
        now = self.clock()
        try:
            offset = max(int(args.get("offset", 0)), 0)
        except ValueError:
            raise InvalidInputError(f"offset is a number, not {args.get('offset')!r}") from None
        items = inspection.store_items(self.saver, namespace, self.sealer, now=now,
                                       limit=self.page_size, offset=offset)
        under = [n for n in inspection.store_namespaces(self.saver, namespace, now=now, limit=500)
                 if tuple(n["namespace"]) != namespace]
        if not items and not under and not offset:
            raise NotFoundError(f"no live item in namespace {'/'.join(namespace)!r} or under it")
        more = len(items) == self.page_size
        return View("namespace.html", {"namespace": list(namespace), "namespaces": under,
                                       "items": items},
                    {"namespace": namespace, "offset": offset,
                     "next": offset + self.page_size if more else None,
                     "full": args.get("full") == "1"})


# --- helpers ------------------------------------------------------------------------------------

def _error(code: int, message: str) -> View:
    return View("error.html", {"error": message, "status": code}, {"code": code})


def _send(start_response: StartResponse, status: str, content_type: str, body: bytes,
          headers: list[tuple[str, str]] | None = None) -> Iterator[bytes]:
    start_response(status, [("Content-Type", content_type), ("Content-Length", str(len(body))),
                            ("Content-Security-Policy", CSP), ("X-Content-Type-Options", "nosniff"),
                            ("Referrer-Policy", "no-referrer"), *(headers or [])])
    yield body


def _size(n: Any) -> str:
    if n is None:
        return "-"
    value = float(n)
    for unit in ("B", "KB", "MB", "GB"):
        if value < 1000 or unit == "GB":
            return f"{int(value)} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1000
    return str(n)


def _short(value: Any, width: int = 80) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= width else text[: width - 1] + "…"


def _pretty(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, indent=2, default=str)


def _is_conversation(value: Any) -> bool:
    """A list of LangChain messages, as jsonable gives them: each a dict with a type and content."""
    return (isinstance(value, list) and bool(value)
            and all(isinstance(m, dict) and m.get("type") in MESSAGE_TYPES and "content" in m
                    for m in value))


def _query(**params: Any) -> str:
    """A query string of these parameters (empty ones left out), "" if none."""
    kept = {k: v for k, v in params.items() if v not in (None, "")}
    return "?" + urlencode(kept) if kept else ""


@pass_context
def _more(context: Any, **params: Any) -> str:
    """The current page's query string with these parameters changed."""
    return _query(**{**context.get("args", {}), **params})
