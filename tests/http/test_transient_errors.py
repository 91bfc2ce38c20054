"""D1 errors Cloudflare documents as transient are retried; real SQL errors are not (defect 3).

D1's REST API answers both kinds alike (4xx, code 7500). The transient messages are those of
the "List of D1_ERRORs" whose recommended action is to retry
(https://developers.cloudflare.com/d1/observability/debug-d1/#error-list).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import httpx
import pytest
import respx
from langgraph.checkpoint.conformance.test_utils import generate_checkpoint, generate_config
from typer.testing import CliRunner

from d1saver import D1Saver, QueryError, RetryPolicy, Statement, TransientQueryError
from d1saver.cli import app
from d1saver.local import FaultPlan, LocalD1, LocalD1Transport
from d1saver.local.faults import TRANSIENT_MESSAGES
from tests.conftest import LOCAL_BASE_URL
from tests.http.test_http_contract import (
    BASE_URL,
    CONFIG,
    MAX_ATTEMPTS,
    RAW_PATH,
    echo_ok,
    failure,
    make_saver,
)

TRANSIENT = [f"D1_ERROR: {m}" for m in TRANSIENT_MESSAGES] + [
    "D1_ERROR: D1 DB is overloaded. Requests queued for too long.",
    "D1_ERROR: D1 DB is overloaded. Too many requests queued.",
    "D1_ERROR: Can't read from request stream because client disconnected.",
]
SQL_ERRORS = [
    "D1_ERROR: no such table: checkpoints: SQLITE_ERROR",
    "D1_ERROR: UNIQUE constraint failed: tags.name: SQLITE_CONSTRAINT",
    "D1_ERROR: CHECK constraint failed: head_moved IS NULL: SQLITE_CONSTRAINT",
    'D1_ERROR: near "SELEC": syntax error at offset 0: SQLITE_ERROR',
    # Too big to ever succeed: Cloudflare's list asks for smaller queries, not a retry.
    "D1_ERROR: D1 DB storage operation exceeded timeout which caused object to be reset.",
]


@pytest.fixture
def api() -> Iterator[respx.MockRouter]:
    with respx.mock(base_url=BASE_URL, assert_all_called=False) as router:
        yield router


@pytest.mark.parametrize("message", TRANSIENT)
@pytest.mark.parametrize("status", [400, 503])
def test_transient_d1_error_is_retried_then_succeeds(api: respx.MockRouter, message: str,
                                                     status: int) -> None:
    """Two transient failures, then success: the read returns, after three requests."""
    route = api.post(RAW_PATH).mock(side_effect=[
        httpx.Response(status, json=failure(7500, message)),
        httpx.Response(status, json=failure(7500, message)),
        echo_ok])
    assert make_saver().get_tuple(CONFIG) is None
    assert len(route.calls) == 3


@pytest.mark.parametrize("message", TRANSIENT)
def test_transient_d1_error_past_the_budget_is_a_transient_query_error(
        api: respx.MockRouter, message: str) -> None:
    """Every try transient: TransientQueryError (still a QueryError) after max_attempts."""
    route = api.post(RAW_PATH).mock(return_value=httpx.Response(400, json=failure(7500, message)))
    with pytest.raises(TransientQueryError) as info:
        make_saver().get_tuple(CONFIG)
    assert isinstance(info.value, QueryError) and RetryPolicy.retryable(info.value)
    assert (info.value.status, info.value.code) == (400, 7500)
    assert len(route.calls) == MAX_ATTEMPTS


@pytest.mark.parametrize("message", SQL_ERRORS)
def test_sql_error_is_not_retried(api: respx.MockRouter, message: str) -> None:
    """An SQL error stays a plain QueryError, sent once."""
    route = api.post(RAW_PATH).mock(return_value=httpx.Response(400, json=failure(7500, message)))
    with pytest.raises(QueryError) as info:
        make_saver().get_tuple(CONFIG)
    assert type(info.value) is QueryError
    assert len(route.calls) == 1


# Writes stored, a "p:" row counting the writes it packs (migration 7).
WRITES_STORED = ("SELECT COALESCE(SUM(CASE WHEN substr(value, 1, 2) = 'p:' THEN "
                 "json_array_length(substr(value, 3)) ELSE 1 END), 0) AS n FROM writes")


def test_transient_failure_of_one_statement_in_a_200_is_retried(api: respx.MockRouter) -> None:
    """A result entry that failed with a transient error (HTTP 200) is retried too."""
    entry = {"success": False, "error": "D1_ERROR: Network connection lost.", "results": None}
    route = api.post(RAW_PATH).mock(side_effect=[
        httpx.Response(200, json={"success": True, "errors": [], "messages": [],
                                  "result": [entry, entry]}),
        echo_ok])
    assert make_saver().get_tuple(CONFIG) is None
    assert len(route.calls) == 2


@pytest.mark.anyio
async def test_async_retries_a_transient_d1_error(api: respx.MockRouter) -> None:
    route = api.post(RAW_PATH).mock(side_effect=[
        httpx.Response(400, json=failure(7500, "D1_ERROR: Network connection lost.")),
        echo_ok])
    assert await make_saver().aget_tuple(CONFIG) is None
    assert len(route.calls) == 2


# --- against the local D1's injected transient errors ----------------------------------------


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_writes_survive_transient_errors_and_store_nothing_twice(mode: str) -> None:
    """Half the requests meet a transient error (half of those after committing): every put
    and put_writes returns, each row is stored once, and each fault cost one retry."""
    engine = LocalD1()
    events: list = []
    saver = D1Saver(account_id="a", database_id="d", api_token="t", api_base_url=LOCAL_BASE_URL,
                    transport=LocalD1Transport(engine), tracer=events.append,
                    retry=RetryPolicy(max_attempts=20, backoff_initial=0.0001, backoff_max=0.0002))
    saver.setup()
    plan = engine.faults = FaultPlan(seed=11, rate_transient=0.5)
    before = len(events)
    for i in range(20):
        config = generate_config(f"t-{i}")
        checkpoint = generate_checkpoint()
        if mode == "sync":
            saved = saver.put(config, checkpoint, {}, {})
            saver.put_writes(saved, [("a", 1), ("b", 2)], "task")
        else:
            saved = asyncio.run(saver.aput(config, checkpoint, {}, {}))
            asyncio.run(saver.aput_writes(saved, [("a", 1), ("b", 2)], "task"))
    engine.faults = None
    injected = plan.counts["transient"]
    assert injected > 5
    assert len(events) - before == 40 + injected
    assert sum(isinstance(e.error, TransientQueryError) for e in events) == injected
    rows = saver.client.execute([Statement("SELECT COUNT(*) AS n FROM checkpoints"),
                                 Statement(WRITES_STORED)])
    assert [r.rows[0][0] for r in rows] == [20, 40]
    assert sum(isinstance(e.error, QueryError) and not isinstance(e.error, TransientQueryError)
               for e in events) == 0



def test_serve_injects_transient_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    """`d1saver serve --fault-transient RATE` hands the server a plan with that rate."""
    served: dict = {}

    class Bound:  # a server bound, that serves nothing and returns at once
        server_address = ("127.0.0.1", 1)
        engine = LocalD1()

        def serve_forever(self) -> None:
            pass

        def server_close(self) -> None:
            pass

        def __enter__(self) -> "Bound":  # as socketserver.BaseServer: exit closes it
            return self

        def __exit__(self, *exc: object) -> None:
            self.server_close()

    import d1saver.local.server

    monkeypatch.setattr(d1saver.local.server, "make_server",
                        lambda *args, **kwargs: served.update(kwargs) or Bound())
    result = CliRunner().invoke(app, ["serve", "--fault-transient", "0.3", "--seed", "4"])
    assert result.exit_code == 0, result.output
    assert (served["faults"].rate_transient, served["faults"].seed) == (0.3, 4)
