"""OpenTelemetry (d1saver/http/telemetry.py): a CLIENT span per D1 request with the database
conventions' attributes and D1's meta, an INTERNAL span per public call and per command, the
db.client.operation.duration histogram, and never a value, a key or the token in any of it.

Each test gets fresh global providers with the SDK's in-memory exporter and metric reader;
the last tests run d1saver in subprocesses, with OpenTelemetry made unimportable.
"""

from __future__ import annotations

import asyncio
import base64
import gc
import json
import subprocess
import sys
import textwrap
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import pytest
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.conformance.test_utils import generate_checkpoint, generate_config
from opentelemetry import metrics, trace
from opentelemetry.metrics import _internal as metrics_internal
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode
from opentelemetry.util._once import Once
from typer.testing import CliRunner

from d1saver import D1Cache, D1Saver, D1Store, QueryError, RetryPolicy, ServerError, Statement
from d1saver.cli import app as d1saver_app
from d1saver.http import telemetry
from d1saver.local import FaultPlan, LocalD1, LocalD1Transport
from tests.conftest import LOCAL_BASE_URL

SENTINEL = "SENTINEL7c41"  # in values, ids, keys and the token: never in any attribute
TOKEN = f"tok-{SENTINEL}-0123456789"
FAST = RetryPolicy(backoff_initial=0.001, backoff_max=0.002)


@dataclass
class Telemetry:
    spans: InMemorySpanExporter
    reader: InMemoryMetricReader

    def finished(self) -> list[ReadableSpan]:
        return list(self.spans.get_finished_spans())

    def clients(self) -> list[ReadableSpan]:
        return [s for s in self.finished() if s.kind is SpanKind.CLIENT]

    def named(self, name: str) -> list[ReadableSpan]:
        return [s for s in self.finished() if s.name == name]

    def one(self, name: str) -> ReadableSpan:
        found = self.named(name)
        assert len(found) == 1, [s.name for s in self.finished()]
        return found[0]

    def children(self, parent: ReadableSpan) -> list[ReadableSpan]:
        return [s for s in self.finished()
                if s.parent is not None and s.parent.span_id == parent.context.span_id]

    def durations(self) -> list[Any]:
        """The data points of db.client.operation.duration."""
        data = self.reader.get_metrics_data()
        points: list[Any] = []
        for resource in data.resource_metrics if data else []:
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    if metric.name == "db.client.operation.duration":
                        assert metric.unit == "s"
                        points += list(metric.data.data_points)
        return points


def _reset_globals() -> None:
    """OpenTelemetry lets a process set its providers once; the tests set fresh ones each (as
    opentelemetry-test-utils does), and d1saver's cached proxies go with them."""
    trace._TRACER_PROVIDER_SET_ONCE = Once()
    trace._TRACER_PROVIDER = None
    trace._PROXY_TRACER_PROVIDER = trace.ProxyTracerProvider()
    metrics_internal._METER_PROVIDER_SET_ONCE = Once()
    metrics_internal._METER_PROVIDER = None
    metrics_internal._PROXY_METER_PROVIDER = metrics_internal._ProxyMeterProvider()
    telemetry._the_api = None


@pytest.fixture
def otel() -> Iterator[Telemetry]:
    _reset_globals()
    exporter, reader = InMemorySpanExporter(), InMemoryMetricReader()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    meter_provider = MeterProvider(metric_readers=[reader])
    trace.set_tracer_provider(tracer_provider)
    metrics.set_meter_provider(meter_provider)
    yield Telemetry(exporter, reader)
    tracer_provider.shutdown()
    meter_provider.shutdown()
    _reset_globals()


@pytest.fixture
def engine() -> Iterator[LocalD1]:
    e = LocalD1()
    yield e
    e.close()


def _kwargs(engine: LocalD1, **kwargs: Any) -> dict[str, Any]:
    kwargs.setdefault("database_id", "db-otel")
    kwargs.setdefault("transport", LocalD1Transport(engine))
    return dict(account_id="acc", api_token=TOKEN, api_base_url=LOCAL_BASE_URL, retry=FAST,
                **kwargs)


def saver_on(engine: LocalD1, **kwargs: Any) -> D1Saver:
    return D1Saver(**_kwargs(engine, **kwargs))


def ready(engine: LocalD1, otel: Telemetry, **kwargs: Any) -> D1Saver:
    """A saver with its schema set up, and no span recorded yet."""
    saver = saver_on(engine, **kwargs)
    saver.setup()
    otel.spans.clear()
    return saver


def checkpoint(value: Any = "hello") -> Any:
    c = empty_checkpoint()
    c["channel_values"] = {"messages": value}
    c["channel_versions"] = {"messages": "0000000001"}
    return c


# Attributes every request span carries at its start and end, and their values here.
def assert_request(span: ReadableSpan, *, namespace: str = "db-otel") -> dict[str, Any]:
    a = dict(span.attributes or {})
    assert span.kind is SpanKind.CLIENT
    assert a["db.system.name"] == "cloudflare-d1"
    assert a["db.namespace"] == namespace
    assert a["server.address"] == "d1.local" and "server.port" not in a
    assert span.name == a["db.query.summary"]
    assert a["d1saver.attempts"] == len(span.events) >= 1
    assert a["http.request.body.size"] > 0 and a["http.response.body.size"] > 0
    return a


# --- requests and calls --------------------------------------------------------------------


def test_put_is_one_call_span_over_one_request_span(engine: LocalD1, otel: Telemetry) -> None:
    saver = ready(engine, otel)
    saver.put(generate_config("t1"), checkpoint(), {"source": "input", "step": -1}, {})
    put = otel.one("D1Saver.put")
    assert put.kind is SpanKind.INTERNAL and put.parent is None
    assert put.status.status_code is StatusCode.UNSET
    (request,) = otel.clients()
    assert request.parent is not None and request.parent.span_id == put.context.span_id
    a = assert_request(request)
    assert a["db.operation.name"] == "PUT" and a["db.query.summary"] == "PUT"
    assert "db.operation.batch.size" not in a  # one statement is not a batch
    assert a["db.response.status_code"] == "200" and "error.type" not in a
    # D1's meta, as Cloudflare's binding names it.
    assert a["cloudflare.d1.response.rows_written"] >= 1
    assert isinstance(a["cloudflare.d1.response.changed_db"], bool)
    assert a["cloudflare.d1.response.served_by_region"] == "local"
    assert a["cloudflare.d1.response.served_by_primary"] is True
    assert a["cloudflare.d1.response.sql_duration_ms"] >= 0
    assert a["cloudflare.d1.response.size_after"] > 0
    (event,) = request.events
    assert event.name == "d1saver.attempt"
    assert dict(event.attributes or {})["d1saver.attempt"] == 1
    assert dict(event.attributes or {})["db.response.status_code"] == "200"


def test_a_batch_names_its_statements_and_sums_their_meta(engine: LocalD1,
                                                          otel: Telemetry) -> None:
    """get_tuple's request: the page and its DeltaChannel walk in one batch; rows read summed
    over the statements, the summary naming each once."""
    saver = ready(engine, otel)
    config = saver.put(generate_config("t1"), checkpoint(), {"source": "input", "step": -1}, {})
    otel.spans.clear()
    assert saver.get_tuple(config) is not None
    get = otel.one("D1Saver.get_tuple")
    (request,) = otel.children(get)
    a = assert_request(request)
    assert a["db.operation.name"] == "BATCH"
    assert a["db.operation.batch.size"] == len(a["db.query.summary"].split()) == 2
    assert a["db.query.summary"] == "SELECT_PAGE_THREAD_NS SELECT_PAGE_DELTA_THREAD_NS"
    # rows_read is D1's per statement: the span holds their sum.
    meta = saver.client.execute([Statement("SELECT 1"), Statement("SELECT 2")])
    both = otel.clients()[-1]
    assert dict(both.attributes or {})["cloudflare.d1.response.rows_read"] == sum(
        r.meta["rows_read"] for r in meta)
    assert dict(both.attributes or {})["db.operation.name"] == "BATCH SELECT"


def test_same_statement_batch_and_list_indexes(otel: Telemetry) -> None:
    """describe(): a batch of one name is "BATCH <name>"; a list's statements (SCHEMA[3]) are
    named by the list; the summary stops at 255 characters between names."""
    assert telemetry.describe([Statement("x", name="SCHEMA[0]"),
                               Statement("y", name="SCHEMA[1]")]) == ("BATCH SCHEMA", "SCHEMA")
    assert telemetry.describe([Statement("  insert into t values (1)")]) == ("INSERT", "INSERT")
    assert telemetry.describe([Statement("(select 1)")]) == ("SQL", "SQL")
    many = [Statement("x", name=f"N{i:03}_{'X' * 20}") for i in range(20)]
    operation, summary = telemetry.describe(many)
    assert operation == "BATCH" and len(summary) == 9 * 25 + 8 and len(summary.split()) == 9
    assert summary.split() == [s.name for s in many][:len(summary.split())]


def test_list_page_spans_are_children_of_the_list_call(engine: LocalD1,
                                                       otel: Telemetry) -> None:
    saver = ready(engine, otel, page_size=2)
    config = generate_config("t1")
    for step in range(5):
        config = saver.put(config, checkpoint(step), {"source": "loop", "step": step}, {})
    otel.spans.clear()
    assert len(list(saver.list(generate_config("t1")))) == 5
    listing = otel.one("D1Saver.list")
    pages = otel.children(listing)
    assert len(pages) == 3 and pages == otel.clients()  # 2 + 2 + 1
    for page in pages:
        assert_request(page)
    # A consumer that stops early closes the call: its span ends, not as a failure.
    otel.spans.clear()
    first = next(iter(saver.list(generate_config("t1"))))  # the rest dropped: closed
    assert first is not None
    gc.collect()
    early = otel.one("D1Saver.list")
    assert early.status.status_code is StatusCode.UNSET
    assert len(otel.children(early)) == 1


@pytest.mark.anyio
async def test_async_calls_have_their_spans(engine: LocalD1, otel: Telemetry) -> None:
    saver = saver_on(engine)
    await saver.asetup()
    otel.spans.clear()
    config = await saver.aput(generate_config("t1"), checkpoint(), {"source": "input",
                                                                     "step": -1}, {})
    await saver.aput_writes(config, [("messages", "hi")], "task-1")
    assert await saver.aget_tuple(config) is not None
    assert len([t async for t in saver.alist(generate_config("t1"))]) == 1
    for name in ("D1Saver.aput", "D1Saver.aput_writes", "D1Saver.aget_tuple", "D1Saver.alist"):
        call = otel.one(name)
        (request,) = otel.children(call)
        assert_request(request)


@pytest.mark.anyio
async def test_group_committed_writes_link_every_caller(engine: LocalD1,
                                                        otel: Telemetry) -> None:
    """Five concurrent put_writes: the first goes alone; the four queued behind it go in one
    request, a child of the first of them and linked to the other three."""
    saver = D1Saver(**_kwargs(engine, transport=LocalD1Transport(engine, latency_ms=30)))
    await saver.asetup()
    config = await saver.aput(generate_config("t"), generate_checkpoint(), {}, {})
    otel.spans.clear()
    await asyncio.gather(*(saver.aput_writes(config, [("ch", i)], f"task-{i}")
                           for i in range(5)))
    calls = otel.named("D1Saver.aput_writes")
    assert len(calls) == 5
    requests = otel.clients()
    assert len(requests) == 2
    alone, merged = sorted(requests, key=lambda s: len(s.links))
    assert not alone.links and "d1saver.group_commit.writes" not in (alone.attributes or {})
    a = assert_request(merged)
    assert a["d1saver.group_commit.writes"] == 4
    assert a["db.operation.batch.size"] == 4 * assert_request(alone).get(
        "db.operation.batch.size", 1)
    linked = {link.context.span_id for link in merged.links}
    callers = {c.context.span_id for c in calls}
    assert alone.parent is not None and merged.parent is not None
    assert len(linked) == 3 and merged.parent.span_id not in linked
    # Each call is the parent of the request that carried its write, or linked from it.
    assert linked | {alone.parent.span_id, merged.parent.span_id} == callers


def test_group_commit_threads_link_every_caller(engine: LocalD1, otel: Telemetry) -> None:
    """The same from threads (the sync path): a merged request is a child of one caller and
    links to the others."""
    saver = D1Saver(**_kwargs(engine, transport=LocalD1Transport(engine, latency_ms=30)))
    saver.setup()
    config = saver.put(generate_config("t"), generate_checkpoint(), {}, {})
    otel.spans.clear()
    with ThreadPoolExecutor(5) as pool:
        list(pool.map(lambda i: saver.put_writes(config, [("ch", i)], f"task-{i}"), range(5)))
    calls = {c.context.span_id for c in otel.named("D1Saver.put_writes")}
    merged = [s for s in otel.clients() if s.links]
    assert len(calls) == 5 and merged
    carried = set()
    for request in otel.clients():
        assert request.parent is not None and request.parent.span_id in calls
        carried |= {request.parent.span_id} | {link.context.span_id for link in request.links}
    for request in merged:
        writes = dict(request.attributes or {})["d1saver.group_commit.writes"]
        assert writes == len(request.links) + 1 > 1
    assert carried == calls


def test_a_failed_request_names_its_error(engine: LocalD1, otel: Telemetry) -> None:
    saver = ready(engine, otel)
    with pytest.raises(QueryError):
        saver.execute([Statement("SELECT no_such_function(1)")])
    call = otel.one("D1Saver.execute")
    assert call.status.status_code is StatusCode.ERROR
    assert dict(call.attributes or {})["error.type"] == "QueryError"
    (request,) = otel.children(call)
    a = dict(request.attributes or {})
    assert a["error.type"] == "QueryError" and a["db.response.status_code"] == "400"
    assert a["db.operation.name"] == "SELECT"
    assert request.status.status_code is StatusCode.ERROR
    assert request.status.description == "QueryError"  # the class, never the message
    assert not any(k.startswith("cloudflare.d1.response.") for k in a)
    assert a["d1saver.attempts"] == 1  # an SQL error is not retried


def test_a_retried_request_is_one_span_with_an_event_per_attempt(engine: LocalD1,
                                                                 otel: Telemetry) -> None:
    """A 5xx, then success: one request span, two attempt events, status of the last."""
    def heal(event: Any) -> None:
        engine.faults = None  # the first attempt fails; the retry goes through

    saver = ready(engine, otel, tracer=heal)
    engine.faults = FaultPlan(rate_5xx=1.0)
    saver.put(generate_config("t1"), checkpoint(), {"source": "input", "step": -1}, {})
    (request,) = otel.clients()
    a = assert_request(request)
    assert a["d1saver.attempts"] == 2 and "error.type" not in a
    assert a["db.response.status_code"] == "200"
    first, second = (dict(e.attributes or {}) for e in request.events)
    assert first["d1saver.attempt"] == 1 and first["error.type"] == "ServerError"
    assert first["db.response.status_code"] in ("500", "503")
    assert second["d1saver.attempt"] == 2 and "error.type" not in second
    assert request.status.status_code is StatusCode.UNSET


def test_retries_run_out(engine: LocalD1, otel: Telemetry) -> None:
    saver = ready(engine, otel)
    engine.faults = FaultPlan(rate_5xx=1.0)
    with pytest.raises(ServerError):
        saver.put(generate_config("t1"), checkpoint(), {"source": "input", "step": -1}, {})
    (request,) = otel.clients()
    a = dict(request.attributes or {})
    assert a["error.type"] == "ServerError" and a["d1saver.attempts"] == FAST.max_attempts
    assert len(request.events) == FAST.max_attempts
    assert otel.one("D1Saver.put").status.status_code is StatusCode.ERROR


def test_an_abandoned_request_ends_cancelled(engine: LocalD1, otel: Telemetry) -> None:
    """A request whose operation is dropped mid-flight (a cancelled task, Ctrl-C) still ends."""
    saver = ready(engine, otel)
    exchange = saver.client.exchange([Statement("SELECT 1")])
    next(exchange)  # the Send of the first attempt
    exchange.close()
    (request,) = otel.clients()
    assert dict(request.attributes or {})["error.type"] == "cancelled"


@pytest.mark.anyio
async def test_telemetry_that_fails_never_fails_a_call(engine: LocalD1, otel: Telemetry,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """A bug in the telemetry (here: every span's start, and group commit's links) costs the
    spans, never the call: the writes are stored and read back."""
    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("telemetry bug")

    saver = D1Saver(**_kwargs(engine, transport=LocalD1Transport(engine, latency_ms=20)))
    await saver.asetup()
    config = await saver.aput(generate_config("t"), generate_checkpoint(), {}, {})
    monkeypatch.setattr(telemetry, "describe", broken)
    monkeypatch.setattr(trace, "Link", broken)
    otel.spans.clear()
    await asyncio.gather(*(saver.aput_writes(config, [("ch", i)], f"task-{i}")
                           for i in range(4)))
    tup = await saver.aget_tuple(config)
    assert tup is not None and sorted(w[2] for w in tup.pending_writes or []) == [0, 1, 2, 3]
    assert len(otel.named("D1Saver.aput_writes")) == 4 and otel.clients() == []
    monkeypatch.setattr(telemetry._Open, "__init__", broken)
    otel.spans.clear()
    assert await saver.aget_tuple(config) is not None and saver.get_tuple(config) is not None
    assert len(list(saver.list(config))) == 1 and otel.finished() == []


def test_fan_out_requests_are_children_of_the_call(otel: Telemetry) -> None:
    """Over several databases, list(None) asks each from a thread pool: every request is a
    child of the list call."""
    engine = LocalD1()
    try:
        saver = saver_on(engine, database_id=None, database_ids=["db-a", "db-b", "db-c"])
        saver.setup()
        for i in range(6):
            saver.put(generate_config(f"t{i}"), checkpoint(i), {"source": "input", "step": i},
                      {})
        otel.spans.clear()
        assert len(list(saver.list(None))) == 6
        listing = otel.one("D1Saver.list")
        requests = otel.clients()
        assert {dict(r.attributes or {})["db.namespace"] for r in requests} == {
            "db-a", "db-b", "db-c"}
        assert all(r.parent is not None and r.parent.span_id == listing.context.span_id
                   for r in requests)
    finally:
        engine.close()


def test_duration_metric(engine: LocalD1, otel: Telemetry) -> None:
    saver = saver_on(engine)
    config = saver.put(generate_config("t1"), checkpoint(), {"source": "input", "step": -1}, {})
    saver.get_tuple(config)
    with pytest.raises(QueryError):
        saver.execute([Statement("SELECT no_such_function(1)")])
    points = otel.durations()
    by_summary = {dict(p.attributes)["db.query.summary"]: p for p in points}
    assert sum(p.count for p in points) == len(otel.clients())  # one per request
    put = dict(by_summary["PUT"].attributes)
    assert put == {"db.system.name": "cloudflare-d1", "db.namespace": "db-otel",
                   "db.operation.name": "PUT", "db.query.summary": "PUT",
                   "server.address": "d1.local", "db.response.status_code": "200"}
    failed = dict(by_summary["SELECT"].attributes)
    assert failed["error.type"] == "QueryError" and failed["db.response.status_code"] == "400"
    assert list(by_summary["PUT"].explicit_bounds) == list(telemetry.DURATION_BUCKETS)


def test_store_and_cache_calls(engine: LocalD1, otel: Telemetry) -> None:
    store = D1Store(**_kwargs(engine))
    cache: D1Cache[Any] = D1Cache(**_kwargs(engine))
    store.setup()
    otel.spans.clear()
    store.put(("users", "u1"), "k1", {"text": "hello"})
    assert store.get(("users", "u1"), "k1") is not None
    assert store.search(("users",), query=None)
    cache.set({(("n",), "k"): ("v", None)})
    assert cache.get([(("n",), "k")])
    for name in ("D1Store.put", "D1Store.get", "D1Store.search", "D1Cache.set", "D1Cache.get"):
        call = otel.one(name)  # LangGraph's helpers go through batch: one span, the helper's
        assert call.kind is SpanKind.INTERNAL
        assert otel.children(call) and all(c.kind is SpanKind.CLIENT
                                           for c in otel.children(call))
    assert not otel.named("D1Store.batch")
    store.batch([])  # called directly, batch has its own
    assert otel.one("D1Store.batch")


@pytest.mark.anyio
async def test_async_store_and_cache_calls(engine: LocalD1, otel: Telemetry) -> None:
    store = D1Store(**_kwargs(engine))
    cache: D1Cache[Any] = D1Cache(**_kwargs(engine))
    await store.aput(("users", "u1"), "k1", {"text": "hello"})
    assert await store.aget(("users", "u1"), "k1") is not None
    await cache.aset({(("n",), "k"): ("v", None)})
    assert await cache.aget([(("n",), "k")])
    for name in ("D1Store.aput", "D1Store.aget", "D1Cache.aset", "D1Cache.aget"):
        assert all(c.kind is SpanKind.CLIENT for c in otel.children(otel.one(name)))


@pytest.mark.anyio
async def test_gathered_calls_each_have_their_span(engine: LocalD1, otel: Telemetry) -> None:
    """The async calls of one tick share one request (d1saver/memory/coalesce.py): each call
    still has its INTERNAL span, and the shared request is the child of one of them."""
    store = D1Store(**_kwargs(engine))
    cache: D1Cache[Any] = D1Cache(**_kwargs(engine))
    await store.asetup()
    await cache.asetup()
    otel.spans.clear()
    await asyncio.gather(*(store.aput(("users", "u1"), f"k{i}", {"i": i}) for i in range(5)))
    await asyncio.gather(*(cache.aset({(("n",), f"k{i}"): (i, None)}) for i in range(5)))
    for name in ("D1Store.aput", "D1Cache.aset"):
        calls = otel.named(name)
        assert len(calls) == 5 and all(c.kind is SpanKind.INTERNAL for c in calls)
        requests = [r for c in calls for r in otel.children(c)]
        assert len(requests) == 1 and requests[0].kind is SpanKind.CLIENT


def test_a_maintenance_command_is_one_span(serve: Callable[..., str], otel: Telemetry) -> None:
    base_url = serve()
    env = {"CLOUDFLARE_ACCOUNT_ID": "acc", "CLOUDFLARE_API_TOKEN": TOKEN,
           "D1_DATABASE_ID": f"db-{uuid.uuid4().hex[:8]}", "D1_API_BASE_URL": base_url}
    with D1Saver(account_id="acc", database_id=env["D1_DATABASE_ID"], api_token=TOKEN,
                 api_base_url=base_url) as saver:
        config = generate_config("t1")
        for step in range(3):
            config = saver.put(config, checkpoint(step), {"source": "loop", "step": step}, {})
    otel.spans.clear()
    result = CliRunner().invoke(d1saver_app, ["compact", "--keep", "1", "--all"], env=env)
    assert result.exit_code == 0, result.output
    command = otel.one("d1saver compact")
    assert command.kind is SpanKind.INTERNAL and command.parent is None
    assert dict(command.attributes or {}).get("process.exit.code", 0) == 0
    # Everything the command did is under it: its calls, and their requests.
    spans = otel.finished()
    assert len(spans) > 2 and all(s.context.trace_id == command.context.trace_id for s in spans)
    assert otel.clients() and all(
        s.parent is not None for s in spans if s is not command)
    # A command that fails (exit 4: no such thread) is marked with its exit code.
    otel.spans.clear()
    result = CliRunner().invoke(d1saver_app, ["untag", "no-such-thread", "x"], env=env)
    assert result.exit_code == 4
    (failed,) = [s for s in otel.finished() if s.parent is None]
    assert failed.name == "d1saver untag" and failed.status.status_code is StatusCode.ERROR
    assert dict(failed.attributes or {})["process.exit.code"] == 4
    assert dict(failed.attributes or {})["error.type"] == "4"
    # A command of a group: the group's name and the command's, one span.
    otel.spans.clear()
    result = CliRunner().invoke(d1saver_app, ["store", "ls", "users"], env=env)
    assert result.exit_code == 0, result.output
    (listed,) = [s for s in otel.finished() if s.parent is None]
    assert listed.name == "d1saver store ls" and otel.one("D1Store.search")


def test_serving_commands_have_no_span(otel: Telemetry) -> None:
    """`d1saver serve` and `d1saver ui` run until stopped: a span of theirs would hold hours of
    unrelated calls, so they have none (their calls are traces of their own)."""
    command = telemetry.command(type("Ctx", (), {"_protected_args": ["ui"], "parent": None,
                                                 "info_name": "d1saver",
                                                 "invoked_subcommand": "ui"})())
    with command:
        pass
    assert otel.finished() == []
    result = CliRunner().invoke(d1saver_app, ["serve", "--port", "not-a-port"])
    assert result.exit_code == 2 and otel.finished() == []


def test_nothing_recorded_holds_a_value_a_key_or_the_token(engine: LocalD1,
                                                           otel: Telemetry) -> None:
    """The sentinel goes into values, metadata, thread ids, writes, store namespaces, keys and
    values, cache keys, an encryption key and the token; then every span's name, attributes,
    events, links and status, and every metric attribute, are searched for it (and for the
    key's base64)."""
    key = (SENTINEL.encode() * 3)[:32]
    secrets = [SENTINEL, base64.b64encode(key).decode(), key.hex()]
    saver = saver_on(engine, encryption_keys=[key])
    thread = f"thread-{SENTINEL}"
    config = saver.put(generate_config(thread), checkpoint(f"value {SENTINEL}"),
                       {"source": "input", "step": -1, "note": SENTINEL}, {})
    saver.put_writes(config, [("messages", SENTINEL)], f"task-{SENTINEL}")
    saver.get_tuple(config)
    list(saver.list(generate_config(thread), filter={"note": SENTINEL}))
    saver.tag(config, f"tag-{SENTINEL}")
    with pytest.raises(QueryError):  # an error whose message quotes the SQL
        saver.execute([Statement(f"SELECT no_such_{SENTINEL}(1)")])
    store = D1Store(**_kwargs(engine, encryption_keys=[key]))
    store.put((f"ns-{SENTINEL}",), f"key-{SENTINEL}", {"text": SENTINEL})
    store.get((f"ns-{SENTINEL}",), f"key-{SENTINEL}")
    store.search((f"ns-{SENTINEL}",), filter={"text": SENTINEL})
    cache: D1Cache[Any] = D1Cache(**_kwargs(engine))
    cache.set({((f"ns-{SENTINEL}",), f"key-{SENTINEL}"): (SENTINEL, None)})
    cache.get([((f"ns-{SENTINEL}",), f"key-{SENTINEL}")])
    spans = otel.finished()
    assert len(spans) > 15 and otel.durations()
    recorded: list[Any] = []
    for span in spans:
        recorded += [span.name, span.status.description, dict(span.attributes or {})]
        recorded += [(e.name, dict(e.attributes or {})) for e in span.events]
        recorded += [dict(link.attributes or {}) for link in span.links]
        recorded.append(dict(span.resource.attributes))
    recorded += [dict(p.attributes) for p in otel.durations()]
    text = json.dumps(recorded, default=str)
    assert "D1Saver.put" in text and "cloudflare.d1.response.rows_read" in text
    for secret in secrets:
        assert secret not in text


def test_no_provider_no_span_until_one_is_set(engine: LocalD1) -> None:
    """With the API and no provider (no SDK), calls make no span; a provider the application
    sets later gets the spans of the calls after it."""
    _reset_globals()
    try:
        saver = saver_on(engine)
        config = saver.put(generate_config("t1"), checkpoint(), {"source": "input",
                                                                 "step": -1}, {})
        assert telemetry._api().on() is False
        exporter = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        trace.set_tracer_provider(provider)
        assert saver.get_tuple(config) is not None
        assert [s.name for s in exporter.get_finished_spans()] == [
            "SELECT_PAGE_THREAD_NS SELECT_PAGE_DELTA_THREAD_NS", "D1Saver.get_tuple"]
        provider.shutdown()
    finally:
        _reset_globals()


# --- without OpenTelemetry -----------------------------------------------------------------


def _run(code: str) -> str:
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_without_opentelemetry_d1saver_works_and_imports_none_of_it() -> None:
    out = _run(f"""
        import sys
        sys.modules["opentelemetry"] = None  # as if it were not installed
        from langgraph.checkpoint.base import empty_checkpoint
        from d1saver import D1Saver, D1Store
        from d1saver.http import telemetry
        from d1saver.local import LocalD1, LocalD1Transport
        engine = LocalD1()
        saver = D1Saver(account_id="a", database_id="d", api_token="t",
                        api_base_url={LOCAL_BASE_URL!r}, transport=LocalD1Transport(engine))
        config = {{"configurable": {{"thread_id": "t1", "checkpoint_ns": ""}}}}
        config = saver.put(config, empty_checkpoint(), {{}}, {{}})
        assert saver.get_tuple(config) is not None and len(list(saver.list(config))) == 1
        store = D1Store(account_id="a", database_id="d", api_token="t",
                        api_base_url={LOCAL_BASE_URL!r}, transport=LocalD1Transport(engine))
        store.put(("n",), "k", {{"v": 1}})
        assert store.get(("n",), "k").value == {{"v": 1}}
        assert telemetry.enabled is False
        assert not hasattr(D1Saver.put, "__wrapped__") and not hasattr(D1Store.put, "__wrapped__")
        loaded = sorted(m for m, v in sys.modules.items()
                        if m.startswith("opentelemetry") and v is not None)
        print(loaded)
    """)
    assert out.strip() == "[]"


def test_importing_d1saver_does_not_import_opentelemetry() -> None:
    """Installed, OpenTelemetry is imported with the first span, not with d1saver."""
    out = _run("""
        import sys
        import d1saver
        from d1saver.http import telemetry
        assert telemetry.enabled
        print("opentelemetry.trace" in sys.modules, telemetry._the_api is None)
    """)
    assert out.split() == ["False", "True"]
