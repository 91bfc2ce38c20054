"""Secrets: a sentinel API token never appears in error text, logs, reprs, settings or CLI output.

Error text is checked whole: str, repr, and the formatted traceback with its cause chain (what a
user pastes into an issue). Logs are captured at DEBUG for every logger, httpx and httpcore
included, over real HTTP to a local D1 server.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import traceback
import uuid
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from langgraph.checkpoint.base import empty_checkpoint
from typer.testing import CliRunner

from d1saver import (
    AuthenticationError,
    ConfigError,
    D1ConnectionError,
    D1Error,
    D1Saver,
    D1Settings,
    QueryError,
    RateLimitError,
    ResponseError,
    RetryPolicy,
    ServerError,
    Statement,
    D1TimeoutError,
    load_settings,
)
from d1saver.cli import app as d1saver_app
from d1saver.local import FaultPlan, LocalD1, LocalD1Transport
from tests.servers import closed_url

TOKEN = f"sentinel-TOKEN-{uuid.uuid4().hex}"
LOCAL_URL = "http://d1.local/client/v4"
CFG = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}


# --- helpers ------------------------------------------------------------------------------


def full_text(exc: BaseException) -> str:
    """Everything an error shows: str, repr, args, and the traceback with causes and contexts."""
    parts = [str(exc), repr(exc), repr(exc.args),
             "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))]
    for attr in ("message", "status", "code", "retry_after"):
        parts.append(repr(getattr(exc, attr, None)))
    return "\n".join(parts)


# Any 12 characters of the token count as a leak: tools truncate long values ("...cdef'").
WINDOWS = [TOKEN[i:i + 12] for i in range(len(TOKEN) - 11)]


def assert_clean(text: str) -> None:
    assert TOKEN not in text
    leaked = [w for w in WINDOWS if w in text]
    assert not leaked, f"a fragment of the token appears: {leaked[0]!r}"


def raised(fn: Callable[[], Any], error: type[BaseException] = D1Error) -> BaseException:
    with pytest.raises(error) as info:
        fn()
    assert_clean(full_text(info.value))
    return info.value


def local_saver(engine: LocalD1, **kwargs: Any) -> D1Saver:
    kwargs.setdefault("retry", RetryPolicy.none())
    return D1Saver(account_id="acc", database_id=f"db-{uuid.uuid4().hex[:8]}", api_token=TOKEN,
                   api_base_url=LOCAL_URL, transport=LocalD1Transport(engine), **kwargs)


def mock_saver(handler: Callable[[httpx.Request], httpx.Response]) -> D1Saver:
    return D1Saver(account_id="acc", database_id="db", api_token=TOKEN, api_base_url=LOCAL_URL,
                   transport=httpx.MockTransport(handler), retry=RetryPolicy.none())


def every_operation(saver: D1Saver) -> list[Callable[[], Any]]:
    return [lambda: saver.setup(), lambda: saver.get_tuple(CFG), lambda: list(saver.list(CFG)),
            lambda: saver.put(CFG, empty_checkpoint(), {}, {}),
            lambda: saver.put_writes({"configurable": {**CFG["configurable"], "checkpoint_id": "c"}},
                                     [("v", 1)], "task"),
            lambda: saver.delete_thread("t")]


# --- error paths ------------------------------------------------------------------------------


def test_wrong_token_authentication_error() -> None:
    engine = LocalD1(api_token="right")
    saver = local_saver(engine)
    for op in every_operation(saver):
        err = raised(op, AuthenticationError)
        assert err.status == 401 and "CLOUDFLARE_API_TOKEN" in str(err)


@pytest.mark.anyio
async def test_wrong_token_authentication_error_async() -> None:
    saver = local_saver(LocalD1(api_token="right"))
    with pytest.raises(AuthenticationError) as info:
        await saver.aget_tuple(CFG)
    assert_clean(full_text(info.value))
    with pytest.raises(AuthenticationError) as info:
        await saver.aput(CFG, empty_checkpoint(), {}, {})
    assert_clean(full_text(info.value))


@pytest.mark.parametrize("retry", [RetryPolicy.none(), RetryPolicy(max_attempts=2, backoff_initial=0.01)],
                         ids=["no-retry", "retried"])
def test_connection_refused(retry: RetryPolicy) -> None:
    saver = D1Saver(account_id="acc", database_id="db", api_token=TOKEN,
                    api_base_url=closed_url(), retry=retry)
    for op in every_operation(saver)[1:]:
        raised(op, D1ConnectionError)


@pytest.mark.anyio
async def test_connection_refused_async() -> None:
    saver = D1Saver(account_id="acc", database_id="db", api_token=TOKEN,
                    api_base_url=closed_url(), retry=RetryPolicy.none())
    with pytest.raises(D1ConnectionError) as info:
        await saver.aget_tuple(CFG)
    assert_clean(full_text(info.value))


def test_sql_error() -> None:
    saver = local_saver(LocalD1())
    raised(lambda: saver.client.execute([Statement("SELECT * FROM no_such_table")]), QueryError)
    raised(lambda: saver.client.execute([Statement("SELEC 1")]), QueryError)
    raised(lambda: saver.client.execute([Statement("SELECT ?1", (1, 2))]), QueryError)


@pytest.mark.parametrize("fault,error", [
    (dict(rate_429=1.0, retry_after_s=0.0), RateLimitError),
    (dict(rate_5xx=1.0), ServerError),
    (dict(rate_drop=1.0), D1ConnectionError),
    (dict(rate_lost_response=1.0), D1ConnectionError),
], ids=["429", "5xx", "dropped", "lost-response"])
def test_injected_faults(fault: dict, error: type[D1Error]) -> None:
    saver = local_saver(LocalD1(faults=FaultPlan(seed=1, **fault)))
    for op in every_operation(saver)[1:]:
        raised(op, error)


def test_rate_limit_lockout_pause_error() -> None:
    """The client-side 'budget spent' refusal (no request sent) is clean too."""
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(429, headers={"Retry-After": "3600"}, json={"success": False})

    saver = mock_saver(handler)
    raised(lambda: saver.get_tuple(CFG), RateLimitError)
    raised(lambda: saver.get_tuple(CFG), RateLimitError)  # refused before sending


def test_timeout_and_non_envelope_answers() -> None:
    def timeout(request: httpx.Request) -> httpx.Response:
        raise httpx.ReadTimeout("read timed out", request=request)

    raised(lambda: mock_saver(timeout).get_tuple(CFG), D1TimeoutError)
    html = mock_saver(lambda r: httpx.Response(200, text="<html>hi</html>",
                                               headers={"content-type": "text/html"}))
    raised(lambda: html.get_tuple(CFG), ResponseError)


def test_token_that_cannot_go_in_a_header_is_refused_without_echo() -> None:
    for bad in (TOKEN + "\n" + TOKEN, TOKEN + "\x00", TOKEN + "é", "\t" + TOKEN + " x\x7f"):
        err = raised(lambda bad=bad: D1Saver(account_id="a", database_id="d", api_token=bad,
                                     api_base_url=LOCAL_URL), ConfigError)
        assert "CLOUDFLARE_API_TOKEN" in str(err)


def test_invalid_url_error_names_the_url_not_the_token() -> None:
    err = raised(lambda: D1Saver(account_id="a", database_id="d", api_token=TOKEN,
                                 api_base_url="http://[::1"), ConfigError)
    assert "D1_API_BASE_URL" in str(err)


def test_transport_error_message_is_redacted() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError(f"proxy refused {request.headers['Authorization']}", request=request)

    with pytest.raises(D1ConnectionError) as info:
        mock_saver(handler).get_tuple(CFG)
    assert_clean(str(info.value) + repr(info.value))
    assert "[redacted]" in str(info.value)


def test_transport_error_traceback_is_redacted() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError(f"proxy refused {request.headers['Authorization']}", request=request)

    raised(lambda: mock_saver(handler).get_tuple(CFG), D1ConnectionError)


@pytest.mark.parametrize("status,error", [(401, AuthenticationError), (400, QueryError),
                                          (500, ServerError)], ids=["401", "400", "500"])
def test_echoed_token_in_an_error_envelope_is_redacted(status: int, error: type[D1Error]) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(status, json={"success": False, "errors": [
            {"code": 10000 if status == 401 else 7500,
             "message": f"rejected header {request.headers['Authorization']}"}]})

    raised(lambda: mock_saver(handler).get_tuple(CFG), error)


# --- logs ---------------------------------------------------------------------------------------


def test_nothing_logs_the_token(caplog: pytest.LogCaptureFixture,
                                serve: Callable[..., str]) -> None:
    from langgraph.graph import END, START, StateGraph
    from typing_extensions import TypedDict

    caplog.set_level(logging.DEBUG)
    for name in ("httpx", "httpcore", "d1saver", "langgraph", "compaction", "urllib3", "asyncio"):
        caplog.set_level(logging.DEBUG, logger=name)

    class S(TypedDict):
        n: int

    g = StateGraph(S)
    g.add_node("inc", lambda s: {"n": s["n"] + 1})
    g.add_edge(START, "inc")
    g.add_edge("inc", END)

    url = serve(api_token=TOKEN)
    saver = D1Saver(account_id="acc", database_id="db", api_token=TOKEN, api_base_url=url,
                    retry=RetryPolicy(max_attempts=2, backoff_initial=0.01))
    graph = g.compile(checkpointer=saver)
    conf = {"configurable": {"thread_id": "logged"}}
    assert graph.invoke({"n": 0}, conf) == {"n": 1}
    list(graph.get_state_history(conf))
    saver.tag(saver.get_tuple(conf).config, "v1")
    saver.prune(["logged"])
    saver.delete_thread("logged")
    saver.close()
    # wrong token, over the same server
    wrong = D1Saver(account_id="acc", database_id="db", api_token="wrong-" + TOKEN[::-1],
                    api_base_url=url, retry=RetryPolicy.none())
    with pytest.raises(AuthenticationError):
        wrong.get_tuple(conf)
    refused = D1Saver(account_id="acc", database_id="db", api_token=TOKEN,
                      api_base_url=closed_url(),
                      retry=RetryPolicy(max_attempts=2, backoff_initial=0.01))
    with pytest.raises(D1ConnectionError):
        refused.get_tuple(conf)
    # The capture worked: httpx and httpcore logged at DEBUG.
    loggers = {r.name.split(".")[0] for r in caplog.records}
    assert {"httpx", "httpcore"} <= loggers, loggers
    assert_clean(caplog.text)
    for record in caplog.records:
        assert_clean(repr(record.args) + repr(record.msg) + repr(record.__dict__))


@pytest.mark.anyio
async def test_nothing_logs_the_token_async(caplog: pytest.LogCaptureFixture,
                                            serve: Callable[..., str]) -> None:
    caplog.set_level(logging.DEBUG)
    for name in ("httpx", "httpcore"):
        caplog.set_level(logging.DEBUG, logger=name)
    url = serve(api_token=TOKEN)
    saver = D1Saver(account_id="acc", database_id="db", api_token=TOKEN, api_base_url=url)
    c = await saver.aput(CFG, empty_checkpoint(), {}, {})
    await saver.aput_writes(c, [("v", 1)], "task")
    assert await saver.aget_tuple(CFG) is not None
    await saver.aclose()
    assert any(r.name.startswith("httpcore") for r in caplog.records)
    assert_clean(caplog.text)


def test_tracer_events_do_not_carry_the_token() -> None:
    events: list = []
    saver = local_saver(LocalD1(api_token="right"), tracer=events.append)
    with pytest.raises(AuthenticationError):
        saver.get_tuple(CFG)
    ok = local_saver(LocalD1(), tracer=events.append)
    ok.put(CFG, empty_checkpoint(), {}, {})
    assert len(events) >= 2
    assert_clean(repr(events))


# --- reprs and settings ---------------------------------------------------------------------


def test_reprs() -> None:
    saver = local_saver(LocalD1())
    saver.put(CFG, empty_checkpoint(), {}, {})
    for text in (repr(saver), str(saver), repr(saver.client), str(saver.client),
                 repr(vars(saver)), repr(saver.client.retry), f"{saver!r} {saver.client!s}"):
        assert_clean(text)
    assert "D1Saver(" in repr(saver) and "D1Client(" in repr(saver.client)


def test_a_command_s_connection_repr_leaves_the_token_out() -> None:
    """What a command is handed from --api-token (shown in a traceback's locals)."""
    from d1saver.cli.support import Connection

    conn = Connection(account_id="acc", api_token=TOKEN)
    assert conn.settings()["api_token"] == TOKEN
    assert "acc" in repr(conn)
    assert_clean(repr(conn) + str(conn))


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CLOUDFLARE_ACCOUNT_ID", "acc")
    monkeypatch.setenv("CLOUDFLARE_API_TOKEN", TOKEN)
    monkeypatch.setenv("D1_DATABASE_ID", "db")
    monkeypatch.setenv("D1_API_BASE_URL", LOCAL_URL)


def test_settings_from_env(env: None) -> None:
    settings = load_settings()
    assert settings.api_token.get_secret_value() == TOKEN  # it did load the token
    for text in (repr(settings), str(settings), f"{settings}", repr(settings.model_dump()),
                 settings.model_dump_json(), repr(settings.api_token), str(settings.api_token),
                 repr(D1Settings()), str(D1Settings())):
        assert_clean(text)
    saver = D1Saver.from_env(transport=LocalD1Transport(LocalD1()))
    assert_clean(repr(saver) + repr(saver.client) + repr(vars(saver)))


def test_settings_error_names_the_variable_not_the_token(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CLOUDFLARE_API_TOKEN", TOKEN)
    monkeypatch.delenv("CLOUDFLARE_ACCOUNT_ID", raising=False)
    monkeypatch.delenv("D1_DATABASE_ID", raising=False)
    err = raised(load_settings, ConfigError)
    assert "CLOUDFLARE_ACCOUNT_ID" in str(err) and "D1_DATABASE_ID" in str(err)
    raised(lambda: D1Saver.from_env(), ConfigError)


def test_d1settings_validation_error_hides_the_token(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CLOUDFLARE_API_TOKEN", TOKEN)
    monkeypatch.delenv("CLOUDFLARE_ACCOUNT_ID", raising=False)
    monkeypatch.delenv("D1_DATABASE_ID", raising=False)
    raised(lambda: D1Settings(), Exception)


# --- CLI ----------------------------------------------------------------------------------------

runner = CliRunner()
CLI_COMMANDS = [["threads"], ["threads", "--json"], ["history", "t"], ["history", "t", "--json"],
                ["compact", "--keep", "1", "--all"], ["compact", "--keep", "1", "--all", "--dry-run"],
                ["tag", "t", "c", "v1"], ["untag", "t", "v1"]]


def cli_env(url: str) -> dict[str, str]:
    return {"CLOUDFLARE_ACCOUNT_ID": "acc", "CLOUDFLARE_API_TOKEN": TOKEN,
            "D1_DATABASE_ID": f"db-{uuid.uuid4().hex[:8]}", "D1_API_BASE_URL": url,
            "LOCAL_D1_API_TOKEN": TOKEN}


def cli_output(args: list[str], env: dict[str, str]) -> tuple[int, str]:
    result = runner.invoke(d1saver_app, args, env=env)
    text = result.output
    try:
        text += result.stderr
    except ValueError:  # stderr mixed into output
        pass
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        text += full_text(result.exception)
    return result.exit_code, text


@pytest.mark.parametrize("args", CLI_COMMANDS, ids=" ".join)
def test_cli_wrong_token(args: list[str], serve: Callable[..., str]) -> None:
    code, text = cli_output(args, cli_env(serve(api_token="right")))
    assert code == 1, text
    assert "error:" in text and "CLOUDFLARE_API_TOKEN" in text
    assert_clean(text)


@pytest.mark.parametrize("args", CLI_COMMANDS, ids=" ".join)
def test_cli_bad_server_url(args: list[str]) -> None:
    code, text = cli_output(args, cli_env(closed_url()))
    assert code == 1, text
    assert "error:" in text
    assert_clean(text)


@pytest.mark.parametrize("url", ["http://[::1", "not a url", "ftp://127.0.0.1:1/x"])
def test_cli_malformed_server_url(url: str) -> None:
    code, text = cli_output(["threads"], cli_env(url))
    assert code != 0
    assert_clean(text)


def test_cli_success_and_help(tmp_path: Any, serve: Callable[..., str]) -> None:
    env = cli_env(serve(api_token=TOKEN))
    for args in CLI_COMMANDS + [["--help"], ["serve", "--help"], ["compact", "--help"]]:
        code, text = cli_output(args, env)
        assert_clean(text)


def test_cli_crash_traceback_with_locals(tmp_path: Any) -> None:
    """A real process, so Typer's pretty traceback (with local variables) is printed: an argv
    that is not UTF-8 becomes a lone surrogate, which the request cannot encode (see
    test_hostile.test_lone_surrogate_is_a_typed_error). The traceback must not show the token."""
    env = {**os.environ, **cli_env(closed_url()), "COLUMNS": "200", "PYTHONPATH": os.getcwd()}
    bad_arg = b"\xff".decode("utf-8", "surrogateescape")
    proc = subprocess.run([sys.executable, "-m", "d1saver.cli", "history", bad_arg], env=env,
                          capture_output=True, timeout=120)
    text = (proc.stdout + proc.stderr).decode("utf-8", "replace")
    assert proc.returncode != 0
    assert_clean(text)
