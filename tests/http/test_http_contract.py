"""The HTTP contract with D1's REST API, against a mocked endpoint (respx): no D1 needed."""

from __future__ import annotations

import inspect
import json
import os
import socket
import threading
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
import respx
from langgraph.checkpoint.base import CheckpointTuple, empty_checkpoint

import d1saver
from tests.servers import closed_url
from d1saver import (
    ConfigError,
    AuthenticationError,
    D1ConnectionError,
    D1Error,
    D1Saver,
    QueryError,
    RateLimitError,
    ResponseError,
    RetryPolicy,
    ServerError,
    D1TimeoutError,
    TransportError,
)
from d1saver.storage import codec as _codec
from d1saver.core import errors as _errors

SENTINEL = "tok-SENTINEL-5f3a9c1e"
BASE_URL = "https://api.example.test/client/v4"
RAW_PATH = "/accounts/acc/d1/database/db/raw"
FAST_RETRY = RetryPolicy(backoff_initial=0.001, backoff_max=0.002)
MAX_ATTEMPTS = FAST_RETRY.max_attempts
THREAD = "thread-1"
CONFIG = {"configurable": {"thread_id": THREAD, "checkpoint_ns": ""}}


# --- helpers --------------------------------------------------------------------------------


def make_saver(**kwargs: Any) -> D1Saver:
    kwargs.setdefault("retry", FAST_RETRY)
    return D1Saver(account_id="acc", database_id="db", api_token=SENTINEL,
                   api_base_url=BASE_URL, auto_setup=False, **kwargs)


def raw(columns: list[str] | None = None, rows: list[list[Any]] | None = None) -> dict:
    """One statement's entry in a /raw success envelope."""
    return {"results": {"columns": columns or [], "rows": rows or []}, "success": True,
            "meta": {"changes": 0, "duration": 0.1, "rows_read": 0, "rows_written": 0}}


def envelope(*results: dict) -> dict:
    return {"success": True, "errors": [], "messages": [], "result": list(results)}


def failure(code: int, message: str) -> dict:
    return {"success": False, "errors": [{"code": code, "message": message}], "messages": [],
            "result": []}


def statements_in(request: httpx.Request) -> int:
    body = json.loads(request.content)
    return len(body["batch"]) if "batch" in body else 1


def echo_ok(request: httpx.Request) -> httpx.Response:
    """A success envelope with one empty result per statement sent."""
    return httpx.Response(200, json=envelope(*[raw() for _ in range(statements_in(request))]))


def sent_body(route: respx.Route, index: int = -1) -> dict:
    return json.loads(route.calls[index].request.content)


@pytest.fixture
def api() -> Iterator[respx.MockRouter]:
    with respx.mock(base_url=BASE_URL, assert_all_called=False) as router:
        yield router


@pytest.fixture
def raw_route(api: respx.MockRouter) -> respx.Route:
    """The /raw route, answering every request with an empty success by default."""
    return api.post(RAW_PATH).mock(side_effect=echo_ok)


# Page rows, as SELECT_PAGE_* returns them: 11 named columns, tagged 'c', 'w' or 'k'.
PAGE_COLUMNS = ["kind", "thread_id", "checkpoint_ns", "checkpoint_id", "ref", "metadata",
                "task_path", "idx", "channels", "type", "value"]


def stored(saver: D1Saver, obj: Any) -> tuple[str, str]:
    """(type, text) as the saver stores a value."""
    type_, data = saver.serde.dumps_typed(obj)
    return type_, _codec.encode(data)


def checkpoint_row(saver: D1Saver, cp: dict, parent: str | None, metadata: dict) -> list[Any]:
    type_, text = stored(saver, cp)
    return ["c", THREAD, "", cp["id"], parent, json.dumps(metadata), None, None, None, type_, text]


def write_row(saver: D1Saver, cid: str, task_id: str, task_path: str, idx: int, channel: str,
              value: Any) -> list[Any]:
    type_, text = stored(saver, value)
    return ["w", THREAD, "", cid, task_id, None, task_path, idx, channel, type_, text]


def page_response(rows: list[list[Any]]) -> httpx.Response:
    """A page read's answer: the page, then its DeltaChannel prefetch (empty here)."""
    return httpx.Response(200, json=envelope(raw(PAGE_COLUMNS, rows), raw()))


# --- request shape --------------------------------------------------------------------------


def test_request_is_post_to_raw_endpoint(raw_route: respx.Route) -> None:
    """A call POSTs to .../accounts/acc/d1/database/db/raw."""
    make_saver().get_tuple(CONFIG)
    request = raw_route.calls.last.request
    assert (request.method, str(request.url)) == ("POST", BASE_URL + RAW_PATH)


def test_clients_share_one_tls_context(raw_route: respx.Route,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """New savers (sync and async) load the CA bundle once per process, not once each: a
    fresh instance's first request spent about 20 ms of CPU on it (benchmarks/RESULTS.md,
    "Client CPU")."""
    import asyncio
    import ssl

    from d1saver.http import client as _client

    made: list[ssl.SSLContext] = []
    real = ssl.create_default_context

    def counted(*args: Any, **kwargs: Any) -> ssl.SSLContext:
        made.append(real(*args, **kwargs))
        return made[-1]

    monkeypatch.setattr(ssl, "create_default_context", counted)
    _client._tls.cache_clear()
    savers = [make_saver() for _ in range(3)]
    for saver in savers:
        saver.get_tuple(CONFIG)
    asyncio.run(make_saver().aget_tuple(CONFIG))
    assert len(made) == 1 and raw_route.call_count == 4
    for saver in savers:
        saver.close()


def test_cookies_are_neither_kept_nor_sent(api: respx.MockRouter) -> None:
    """A Set-Cookie from the API (Cloudflare's edge may send one) is not kept, and no request
    carries a Cookie header, sync or async: the token alone authenticates."""
    import asyncio

    def with_cookie(request: httpx.Request) -> httpx.Response:
        response = echo_ok(request)
        response.headers["Set-Cookie"] = "__cf_bm=abc; Path=/; HttpOnly"
        return response

    route = api.post(RAW_PATH).mock(side_effect=with_cookie)
    saver = make_saver()
    saver.get_tuple(CONFIG)
    saver.get_tuple(CONFIG)
    asyncio.run(saver.aget_tuple(CONFIG))
    asyncio.run(saver.aget_tuple(CONFIG))
    assert route.call_count == 4
    assert all("cookie" not in call.request.headers for call in route.calls)
    client = saver._fleet.databases["db"].client
    assert not list(client._sync_client().cookies.jar)
    saver.close()


def test_request_carries_bearer_token(raw_route: respx.Route) -> None:
    """The token goes in Authorization: Bearer <token>."""
    make_saver().get_tuple(CONFIG)
    assert raw_route.calls.last.request.headers["Authorization"] == f"Bearer {SENTINEL}"


def test_request_is_json(raw_route: respx.Route) -> None:
    """The body is declared as application/json."""
    make_saver().get_tuple(CONFIG)
    assert raw_route.calls.last.request.headers["Content-Type"] == "application/json"


def test_one_statement_is_sent_as_sql_and_params(raw_route: respx.Route) -> None:
    """A single statement goes as {"sql", "params"}."""
    make_saver().tags(CONFIG)
    body = sent_body(raw_route)
    assert (set(body), body["params"][:2]) == ({"sql", "params"}, [THREAD, ""])


def test_plain_put_is_one_statement(raw_route: respx.Route) -> None:
    """put of a small checkpoint sends one {"sql", "params"} statement."""
    make_saver().put(CONFIG, empty_checkpoint(), {}, {})
    assert set(sent_body(raw_route)) == {"sql", "params"}


def test_put_of_chunked_value_is_one_batch(raw_route: respx.Route) -> None:
    """put of a value over 2 MB sends {"batch": [...]} (row, chunk delete, chunks) in one request."""
    cp = empty_checkpoint()
    cp["channel_values"] = {"blob": os.urandom(2_500_000)}
    make_saver().put(CONFIG, cp, {}, {})
    body = sent_body(raw_route)
    assert (len(raw_route.calls), set(body), len(body["batch"])) == (1, {"batch"}, 1 + 1 + 2)


def test_delete_thread_is_one_batch(raw_route: respx.Route) -> None:
    """delete_thread sends its 8 statements (writes, pieces, content chunks, tags,
    checkpoints; a move in flight, staged copies here, and where copies are staged elsewhere)
    as one batch."""
    make_saver().delete_thread(THREAD)
    batch = sent_body(raw_route)["batch"]
    assert [set(item) for item in batch] == [{"sql", "params"}] * 8
    assert any("d1saver_chunks" in item["sql"] for item in batch)


def test_batch_params_are_json_scalars(raw_route: respx.Route) -> None:
    """Every bound parameter is a string, a number or null, as D1's schema expects."""
    make_saver().put(CONFIG, empty_checkpoint(), {"step": 1, "source": "loop"}, {})
    params = sent_body(raw_route)["params"]
    assert all(p is None or isinstance(p, (str, int, float)) for p in params)


# --- envelope parsing into CheckpointTuple --------------------------------------------------


@pytest.fixture
def stored_thread() -> dict[str, Any]:
    """A checkpoint, its parent id, metadata and two writes, as a page would return them."""
    parent = empty_checkpoint()
    cp = empty_checkpoint()
    cp["channel_values"] = {"messages": ["hello", {"role": "ai"}]}
    return {"cp": cp, "parent_id": parent["id"], "metadata": {"source": "loop", "step": 3}}


def page_rows(saver: D1Saver, s: dict[str, Any]) -> list[list[Any]]:
    cid = s["cp"]["id"]
    return [
        write_row(saver, cid, "task-b", "~x", 0, "messages", "second"),
        checkpoint_row(saver, s["cp"], s["parent_id"], s["metadata"]),
        write_row(saver, cid, "task-a", "~x", 0, "messages", "first"),
    ]


def test_get_tuple_parses_checkpoint(raw_route: respx.Route, stored_thread: dict) -> None:
    """A 'c' row becomes the tuple's checkpoint, metadata and parent_config."""
    saver = make_saver()
    raw_route.side_effect = None
    raw_route.return_value = page_response(page_rows(saver, stored_thread))
    tup = saver.get_tuple(CONFIG)
    assert tup == CheckpointTuple(
        config={"configurable": {"thread_id": THREAD, "checkpoint_ns": "",
                                 "checkpoint_id": stored_thread["cp"]["id"]}},
        checkpoint=stored_thread["cp"],
        metadata=stored_thread["metadata"],
        parent_config={"configurable": {"thread_id": THREAD, "checkpoint_ns": "",
                                        "checkpoint_id": stored_thread["parent_id"]}},
        pending_writes=[("task-a", "messages", "first"), ("task-b", "messages", "second")],
    )


def test_page_with_columns_in_another_order_is_refused(raw_route: respx.Route,
                                                       stored_thread: dict) -> None:
    """Rows are read by position: a page whose columns are not the statement's named ones,
    in order (a reordered SELECT, or /query's collapsed names), is a ResponseError, never a
    misread checkpoint."""
    saver = make_saver()
    rows = page_rows(saver, stored_thread)
    swapped = [PAGE_COLUMNS[:4] + [PAGE_COLUMNS[5], PAGE_COLUMNS[4]] + PAGE_COLUMNS[6:]]
    for columns in (*swapped, [c if c in PAGE_COLUMNS[:4] else "NULL" for c in PAGE_COLUMNS]):
        raw_route.side_effect = None
        raw_route.return_value = httpx.Response(200, json=envelope(raw(columns, rows), raw()))
        with pytest.raises(ResponseError, match="columns"):
            saver.get_tuple(CONFIG)


def test_query_shaped_rows_are_refused(raw_route: respx.Route) -> None:
    """/query's rows-as-objects are not accepted: duplicate column names would collapse."""
    saver = make_saver()
    raw_route.side_effect = None
    raw_route.return_value = httpx.Response(200, json=envelope(
        {"results": [{"kind": "c"}], "success": True, "meta": {}}, raw()))
    with pytest.raises(ResponseError, match="raw"):
        saver.get_tuple(CONFIG)


def test_get_tuple_joins_chunked_value(raw_route: respx.Route) -> None:
    """'k' rows are joined back into the checkpoint value the 'c' row marks as chunked."""
    saver = make_saver()
    cp = empty_checkpoint()
    cp["channel_values"] = {"blob": b"xyz" * 1000}
    type_, text = stored(saver, cp)
    pieces = [text[i:i + 100] for i in range(0, len(text), 100)]
    rows = [["c", THREAD, "", cp["id"], None, "{}", None, None, None, type_,
             _codec.chunk_marker(len(pieces))]]
    rows += [["k", THREAD, "", cp["id"], "", None, None, seq, None, None, piece]
             for seq, piece in reversed(list(enumerate(pieces)))]
    raw_route.side_effect = None
    raw_route.return_value = page_response(rows)
    assert saver.get_tuple(CONFIG).checkpoint == cp


def test_get_tuple_by_id_returns_config_as_given(raw_route: respx.Route,
                                                 stored_thread: dict) -> None:
    """get_tuple with a checkpoint_id hands back the caller's config."""
    saver = make_saver()
    raw_route.side_effect = None
    raw_route.return_value = page_response(page_rows(saver, stored_thread))
    config = {"configurable": {"thread_id": THREAD, "checkpoint_ns": "",
                               "checkpoint_id": stored_thread["cp"]["id"]}}
    assert saver.get_tuple(config).config is config


def test_get_tuple_of_empty_page_is_none(raw_route: respx.Route) -> None:
    """A page without rows means no checkpoint."""
    raw_route.side_effect = None
    raw_route.return_value = page_response([])
    assert make_saver().get_tuple(CONFIG) is None


# --- error mapping --------------------------------------------------------------------------

HTML = "<html><body><h1>502 Bad Gateway</h1></body></html>"
NO_SUCH_TABLE = "D1_ERROR: no such table: checkpoints: SQLITE_ERROR"


# name -> (side effect factory, expected error, expected HTTP attempts)
ERROR_CASES: dict[str, tuple[Callable[[], Any], type[D1Error], int]] = {
    "401-auth": (lambda: httpx.Response(401, json=failure(10000, "Authentication error")),
                 AuthenticationError, 1),
    "429-long-retry-after": (
        lambda: httpx.Response(429, headers={"Retry-After": "3600"},
                               json=failure(971, "Please wait and consider throttling")),
        RateLimitError, 1),
    "500-json": (lambda: httpx.Response(500, json=failure(7500, "Internal error")),
                 ServerError, MAX_ATTEMPTS),
    "503-html": (lambda: httpx.Response(503, text=HTML, headers={"Content-Type": "text/html"}),
                 ServerError, MAX_ATTEMPTS),
    "400-sql": (lambda: httpx.Response(400, json=failure(7500, NO_SUCH_TABLE)), QueryError, 1),
    "connect-error": (lambda: httpx.ConnectError, D1ConnectionError, MAX_ATTEMPTS),
    "read-timeout": (lambda: httpx.ReadTimeout, D1TimeoutError, MAX_ATTEMPTS),
    "200-html": (lambda: httpx.Response(200, text=HTML, headers={"Content-Type": "text/html"}),
                 ResponseError, 1),
    "200-truncated-json": (
        lambda: httpx.Response(200, content=json.dumps(envelope(raw()))[:40].encode(),
                               headers={"Content-Type": "application/json"}),
        ResponseError, 1),
    "200-success-false": (lambda: httpx.Response(200, json=failure(7500, "nope")),
                          ResponseError, 1),
    "200-result-count-mismatch": (lambda: httpx.Response(200, json=envelope(raw(), raw(), raw())),
                                  ResponseError, 1),
}


@pytest.fixture(params=list(ERROR_CASES))
def failing(request: pytest.FixtureRequest, api: respx.MockRouter
            ) -> tuple[respx.Route, type[D1Error], int, D1Error]:
    """Runs get_tuple against one failure; gives (route, expected type, attempts, raised)."""
    effect, expected, attempts = ERROR_CASES[request.param]
    made = effect()
    route = api.post(RAW_PATH)
    if isinstance(made, httpx.Response):
        route.mock(return_value=made)
    else:
        route.mock(side_effect=made)
    with pytest.raises(D1Error) as info:
        make_saver().get_tuple(CONFIG)
    return route, expected, attempts, info.value


def test_error_maps_to_its_class(failing) -> None:
    """Each failure surfaces as its class in d1saver's error tree."""
    _, expected, _, raised = failing
    assert type(raised) is expected


def test_error_is_retried_only_when_retryable(failing) -> None:
    """429-within-bound, 5xx and transport failures are retried up to max_attempts; others not."""
    route, _, attempts, _ = failing
    assert len(route.calls) == attempts


def test_error_never_shows_the_token(failing) -> None:
    """Neither str() nor repr() of the error contains the API token."""
    raised = failing[3]
    assert SENTINEL not in str(raised) + repr(raised)


def test_saver_repr_never_shows_the_token() -> None:
    """repr(saver) and repr(saver.client) leave the token out."""
    saver = make_saver()
    assert SENTINEL not in repr(saver) + repr(saver.client)


def test_rate_limit_error_carries_retry_after(api: respx.MockRouter) -> None:
    """A 429 whose Retry-After exceeds max_retry_after raises at once with .retry_after set."""
    api.post(RAW_PATH).mock(return_value=httpx.Response(
        429, headers={"Retry-After": "3600"}, json=failure(971, "rate limited")))
    with pytest.raises(RateLimitError) as info:
        make_saver().get_tuple(CONFIG)
    assert info.value.retry_after == 3600


def test_rate_limit_with_retry_after_zero_is_retried(api: respx.MockRouter) -> None:
    """429 with Retry-After: 0, then success: two calls and a result."""
    route = api.post(RAW_PATH).mock(side_effect=[
        httpx.Response(429, headers={"Retry-After": "0"}, json=failure(971, "rate limited")),
        page_response([]),
    ])
    assert (make_saver().get_tuple(CONFIG), len(route.calls)) == (None, 2)


def test_server_error_then_success_is_retried(api: respx.MockRouter) -> None:
    """A 503 followed by a success returns the success after two calls."""
    route = api.post(RAW_PATH).mock(side_effect=[httpx.Response(503, text=HTML),
                                                 page_response([])])
    assert (make_saver().get_tuple(CONFIG), len(route.calls)) == (None, 2)


def test_retries_resend_the_same_body(api: respx.MockRouter) -> None:
    """Every retry sends byte-for-byte the same request body."""
    route = api.post(RAW_PATH).mock(side_effect=[httpx.Response(500, text="x"),
                                                 httpx.Response(500, text="x"), echo_ok])
    make_saver().put(CONFIG, empty_checkpoint(), {}, {})
    assert len({call.request.content for call in route.calls}) == 1


def test_connect_error_is_the_cause(api: respx.MockRouter) -> None:
    """A D1ConnectionError (a TransportError) keeps httpx's error as __cause__."""
    api.post(RAW_PATH).mock(side_effect=httpx.ConnectError)
    with pytest.raises(D1ConnectionError) as info:
        make_saver().get_tuple(CONFIG)
    assert isinstance(info.value, TransportError)
    assert isinstance(info.value.__cause__, httpx.ConnectError)


def test_read_timeout_is_the_cause(api: respx.MockRouter) -> None:
    """A D1TimeoutError keeps httpx's ReadTimeout as __cause__."""
    api.post(RAW_PATH).mock(side_effect=httpx.ReadTimeout)
    with pytest.raises(D1TimeoutError) as info:
        make_saver().get_tuple(CONFIG)
    assert isinstance(info.value.__cause__, httpx.ReadTimeout)


def test_no_such_table_is_not_retried_without_auto_setup(api: respx.MockRouter) -> None:
    """With auto_setup=False a missing table is a QueryError after exactly one call."""
    route = api.post(RAW_PATH).mock(
        return_value=httpx.Response(400, json=failure(7500, NO_SUCH_TABLE)))
    with pytest.raises(QueryError, match="no such table"):
        make_saver().get_tuple(CONFIG)
    assert len(route.calls) == 1


def test_query_error_keeps_status_and_code(api: respx.MockRouter) -> None:
    """A QueryError exposes D1's HTTP status and error code."""
    api.post(RAW_PATH).mock(return_value=httpx.Response(400, json=failure(7500, NO_SUCH_TABLE)))
    with pytest.raises(QueryError) as info:
        make_saver().get_tuple(CONFIG)
    assert (info.value.status, info.value.code) == (400, 7500)


def test_failed_put_raises(api: respx.MockRouter) -> None:
    """A put that D1 refuses raises; nothing is swallowed."""
    api.post(RAW_PATH).mock(return_value=httpx.Response(400, json=failure(7500, "D1_ERROR: x")))
    with pytest.raises(QueryError):
        make_saver().put(CONFIG, empty_checkpoint(), {}, {})


def test_failed_put_writes_raises(api: respx.MockRouter) -> None:
    """A put_writes that D1 refuses raises; nothing is swallowed."""
    api.post(RAW_PATH).mock(return_value=httpx.Response(500, json=failure(7500, "boom")))
    config = {"configurable": {"thread_id": THREAD, "checkpoint_ns": "", "checkpoint_id": "1"}}
    with pytest.raises(ServerError):
        make_saver().put_writes(config, [("messages", "hi")], task_id="t")


def _closing_server() -> tuple[socket.socket, int]:
    """A loopback TCP server that reads a request and hangs up, so httpx really sends headers."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)

    def serve() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            with conn:
                conn.recv(65536)

    threading.Thread(target=serve, daemon=True).start()
    return server, server.getsockname()[1]


def test_token_with_newline_never_leaks_into_errors() -> None:
    """A token httpx cannot send (trailing newline) fails without echoing the token."""
    server, port = _closing_server()
    saver = D1Saver(account_id="acc", database_id="db", api_token=SENTINEL + "\n",
                    api_base_url=f"http://127.0.0.1:{port}/client/v4", auto_setup=False,
                    retry=RetryPolicy.none())
    try:
        with pytest.raises(D1Error) as info:
            saver.get_tuple(CONFIG)
    finally:
        saver.close()
        server.close()
    assert SENTINEL not in str(info.value) + repr(info.value)


def test_token_with_a_control_character_is_refused_at_construction() -> None:
    """A token that cannot go in a header is a ConfigError that does not echo it."""
    with pytest.raises(ConfigError) as info:
        D1Saver(account_id="acc", database_id="db", api_token=SENTINEL + "\x00x",
                api_base_url="https://api.example.test/client/v4")
    assert SENTINEL not in str(info.value) + repr(info.value)


NOT_HTTP_URLS = ["", "  ", "client/v4", "/client/v4", "api.cloudflare.com/client/v4",
                 "ftp://api.example.test/client/v4", "file:///client/v4", "http://", "https:///v4"]


@pytest.mark.parametrize("url", NOT_HTTP_URLS)
def test_base_url_must_be_absolute_http_at_construction(url: str) -> None:
    """An empty, relative or non-http(s) API base URL is a ConfigError naming D1_API_BASE_URL
    when the saver is made, before any request (it was retried as a connection error)."""
    with respx.mock(assert_all_called=False) as api:
        route = api.route()
        with pytest.raises(ConfigError) as info:
            D1Saver(account_id="acc", database_id="db", api_token=SENTINEL, api_base_url=url)
    assert "D1_API_BASE_URL" in str(info.value)
    assert route.call_count == 0


@pytest.mark.parametrize("url", NOT_HTTP_URLS)
def test_settings_refuse_a_base_url_that_is_not_http(url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """load_settings() refuses D1_API_BASE_URL="" (or relative, or not http) with a ConfigError."""
    monkeypatch.setenv("D1_API_BASE_URL", url)
    with pytest.raises(ConfigError) as info:
        d1saver.load_settings(account_id="acc", database_id="db", api_token=SENTINEL)
    assert "D1_API_BASE_URL" in str(info.value) and SENTINEL not in str(info.value)


# --- async ----------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_async_rate_limit_is_retried(api: respx.MockRouter) -> None:
    """aget_tuple retries a 429 with Retry-After: 0 and succeeds on the second call."""
    route = api.post(RAW_PATH).mock(side_effect=[
        httpx.Response(429, headers={"Retry-After": "0"}, json=failure(971, "rate limited")),
        page_response([]),
    ])
    saver = make_saver()
    assert (await saver.aget_tuple(CONFIG), len(route.calls)) == (None, 2)
    await saver.aclose()


@pytest.mark.anyio
async def test_async_sql_error_is_not_retried(api: respx.MockRouter) -> None:
    """aget_tuple raises QueryError on a 400 after exactly one call."""
    route = api.post(RAW_PATH).mock(
        return_value=httpx.Response(400, json=failure(7500, NO_SUCH_TABLE)))
    saver = make_saver()
    with pytest.raises(QueryError):
        await saver.aget_tuple(CONFIG)
    assert len(route.calls) == 1
    await saver.aclose()


@pytest.mark.anyio
async def test_async_server_errors_exhaust_attempts(api: respx.MockRouter) -> None:
    """aput retries a persistent 503 max_attempts times, then raises ServerError."""
    route = api.post(RAW_PATH).mock(return_value=httpx.Response(503, text=HTML))
    saver = make_saver()
    with pytest.raises(ServerError):
        await saver.aput(CONFIG, empty_checkpoint(), {}, {})
    assert len(route.calls) == MAX_ATTEMPTS
    await saver.aclose()


@pytest.mark.anyio
async def test_async_failed_put_writes_raises(api: respx.MockRouter) -> None:
    """A refused aput_writes raises; nothing is swallowed."""
    api.post(RAW_PATH).mock(return_value=httpx.Response(401, json=failure(10000, "bad token")))
    config = {"configurable": {"thread_id": THREAD, "checkpoint_ns": "", "checkpoint_id": "1"}}
    saver = make_saver()
    with pytest.raises(AuthenticationError):
        await saver.aput_writes(config, [("messages", "hi")], task_id="t")
    await saver.aclose()


# --- the public error tree ------------------------------------------------------------------


def test_every_exported_exception_is_a_d1error() -> None:
    """Each exception class in d1saver.__all__ derives from D1Error."""
    exported = [getattr(d1saver, name) for name in d1saver.__all__]
    errors = [obj for obj in exported if inspect.isclass(obj) and issubclass(obj, Exception)]
    assert errors and all(issubclass(cls, D1Error) for cls in errors)


def test_all_exports_every_public_name_of_errors_module() -> None:
    """d1saver.__all__ lists every public name defined in d1saver/core/errors.py."""
    defined = {name for name, obj in vars(_errors).items()
               if not name.startswith("_") and getattr(obj, "__module__", None) == _errors.__name__}
    assert defined and defined <= set(d1saver.__all__)


def test_transport_error_has_no_implicit_context() -> None:
    """A mapped transport failure is thrown into the operation outside any handler: called
    from inside an `except` block, it does not drag that exception (or httpx's text, which
    may quote the URL or a header) along as __context__."""
    saver = D1Saver(account_id="acc", database_id="db", api_token="t" * 40,
                    api_base_url=closed_url(), retry=RetryPolicy.none(), auto_setup=False)
    try:
        raise RuntimeError("the caller's own failure")
    except RuntimeError:
        with pytest.raises(d1saver.D1ConnectionError) as caught:
            saver.get_tuple(CONFIG)
    assert caught.value.__context__ is None
