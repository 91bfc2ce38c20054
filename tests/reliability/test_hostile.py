"""Hostile input: every bad input ends in a clear typed error (a `d1saver.D1Error`, or the
KeyError-compatible `MissingConfigKeyError`) with the stored rows unchanged, or round-trips
exactly. Never a corrupted row, never SQL built from input.

Inputs tried (counted by `test_inputs_tried`, reported in docs/RELIABILITY.md): metadata filter
keys and values, thread ids, checkpoint ids, values the serializer cannot carry, metadata
values JSON cannot carry, configs missing keys, and server answers that are not D1's envelope.
"""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Callable, Iterator
from datetime import datetime
from decimal import Decimal
from typing import Annotated, Any

import httpx
import pytest
from langgraph.checkpoint.base import Checkpoint, empty_checkpoint
from langgraph.graph import END, START, StateGraph
from typing_extensions import TypedDict

from d1saver import (
    ConfigError,
    D1Error,
    D1Saver,
    MissingConfigKeyError,
    ResponseError,
    RetryPolicy,
    SerializationError,
    ServerError,
    Statement,
)
from d1saver.local import LocalD1Transport
from tests.conftest import Backend

TABLES = ("checkpoints", "writes", "chunks", "tags")


# --- helpers ------------------------------------------------------------------------------


def snapshot(saver: D1Saver) -> dict[str, list[str]]:
    """Every row of the saver's tables, as sorted JSON lines (the local D1: one database per test)."""
    results = saver.client.execute([Statement(f"SELECT * FROM {t}") for t in TABLES])
    return {t: sorted(json.dumps(r, ensure_ascii=False) for r in res.rows)
            for t, res in zip(TABLES, results)}


def cfg(thread_id: Any, checkpoint_id: Any = None, ns: str = "") -> dict:
    c: dict[str, Any] = {"thread_id": thread_id, "checkpoint_ns": ns}
    if checkpoint_id is not None:
        c["checkpoint_id"] = checkpoint_id
    return {"configurable": c}


def checkpoint(cid: Any = None, **values: Any) -> Checkpoint:
    ck = empty_checkpoint()
    if cid is not None:
        ck["id"] = cid
    ck["channel_values"] = dict(values)
    return ck


@pytest.fixture
def seeded(local: Backend) -> Iterator[D1Saver]:
    """A saver on a local D1 holding two threads, with writes and metadata, to be left intact."""
    saver = local.saver()
    for tid in ("keep-1", "keep-2"):
        c = saver.put(cfg(tid), checkpoint(v=tid), {"source": "input", "step": -1, "user": tid}, {})
        c = saver.put(c, checkpoint(v=tid + "!"), {"source": "loop", "step": 0, "user": tid}, {})
        saver.put_writes(c, [("v", "pending"), ("log", ["x"])], "task-1")
    yield saver
    saver.close()


def refused(saver: D1Saver, fn: Callable[[], Any], *errors: type[BaseException]) -> BaseException:
    """fn raises one of `errors` (a D1Error unless told otherwise) and leaves every row as it was."""
    before = snapshot(saver)
    with pytest.raises(errors or (D1Error,)) as info:
        fn()
    assert snapshot(saver) == before
    return info.value


# --- 1. metadata filter keys ------------------------------------------------------------------

BAD_FILTER_KEYS: list[Any] = [
    "a'b", "'", 'a"b', '"', "$", "$.source", "a$", "..", "a..b", ".a", "a.", ".",
    "a;DROP TABLE checkpoints;--", "source') OR 1=1 --", "source' OR '1'='1", "a b", " source",
    "source ", "\tsource", "a\nb", "ключ", "é", "日本", "😀", "", "a\x00b", "\x00",
    "a[0]", "a[#-1]", "*", "%", "a%", "a/b", "a\\b", "a,b", "a:b", "a(b)", "a=b", "a`b",
    "'" * 10_000, "a" * 5_000 + "'" + "a" * 5_000, 1, None, 1.5, ("a",), b"source",
]


@pytest.mark.parametrize("key", BAD_FILTER_KEYS, ids=lambda k: repr(k)[:40])
def test_bad_filter_key_is_refused_before_sql(seeded: D1Saver, key: Any) -> None:
    requests = seeded.client.requests
    err = refused(seeded, lambda: list(seeded.list(None, filter={key: "input"})), ConfigError)
    assert "invalid metadata filter key" in str(err)
    refused(seeded, lambda: list(seeded.list(cfg("keep-1"), filter={"source": "input", key: 1})),
            ConfigError)
    assert seeded.client.requests == requests + 4  # only the snapshots: nothing was sent


@pytest.mark.anyio
async def test_bad_filter_key_is_refused_async(seeded: D1Saver) -> None:
    for key in ("a;DROP TABLE checkpoints;--", "a') OR 1=1 --", "$", ""):
        with pytest.raises(ConfigError):
            [t async for t in seeded.alist(None, filter={key: 1})]
    assert len(list(seeded.list(None))) == 4


ODD_BUT_VALID_KEYS = ["source", "user", "a-b", "a_b", "A9", "-", "_", "a.b.c", "a" * 10_000]


@pytest.mark.parametrize("key", ODD_BUT_VALID_KEYS, ids=lambda k: k[:20])
def test_valid_filter_keys_are_bound_as_data(local: Backend, key: str) -> None:
    saver = local.saver()
    md: dict[str, Any] = {"a": {"b": {"c": "deep"}}} if key == "a.b.c" else {key: "hit"}
    c = saver.put(cfg("t"), checkpoint(), {**md, "step": 0}, {})
    saver.put(c, checkpoint(), {"step": 1}, {})
    want = "deep" if key == "a.b.c" else "hit"
    found = list(saver.list(None, filter={key: want}))
    assert [t.config["configurable"]["checkpoint_id"] for t in found] == \
        [c["configurable"]["checkpoint_id"]]


HOSTILE_FILTER_VALUES: list[Any] = [
    "x' OR '1'='1", "'); DROP TABLE checkpoints;--", '"', "\\", "%", "_", "*", "\x00",
    "😀", "", " ", "a" * 100_000, ["input", "' OR 1=1"], {"$ne": None}, {"$gt": ""}, 0, -1,
    True, 1e308,
]


@pytest.mark.parametrize("value", HOSTILE_FILTER_VALUES, ids=lambda v: repr(v)[:30])
def test_hostile_filter_values_match_nothing_and_change_nothing(seeded: D1Saver, value: Any) -> None:
    before = snapshot(seeded)
    assert list(seeded.list(None, filter={"source": value})) == []
    assert list(seeded.list(None, filter={"user": value, "step": 0})) == []
    assert snapshot(seeded) == before


@pytest.mark.parametrize("value", [object(), b"input", {1, 2}, datetime(2020, 1, 1), Decimal(1)],
                         ids=lambda v: type(v).__name__)
def test_filter_value_json_cannot_carry_is_a_serialization_error(seeded: D1Saver, value: Any) -> None:
    refused(seeded, lambda: list(seeded.list(None, filter={"source": value})), SerializationError)


# --- 2. thread ids -----------------------------------------------------------------------------

HOSTILE_THREAD_IDS: list[str] = [
    "é", "日本語スレッド", "😀🔥", "👩‍👩‍👧‍👦", "\u202eevil", "\ufeffbom", "a\x00b", "\x00", "\x00" * 3,
    "x" * 10_000, "'; DROP TABLE checkpoints;--", "a') OR 1=1 --", "' OR '1'='1", '"', "\\",
    "%", "_", "*", "?1", "$.thread", "[]", "{}", "null", "NULL", "", " ", "\n\t\r", "../../etc/passwd",
    "<script>alert(1)</script>", "\x7f\x1b[31m",
]


@pytest.mark.parametrize("thread_id", HOSTILE_THREAD_IDS, ids=lambda t: repr(t)[:30])
def test_hostile_thread_id_round_trips(backend: Backend, thread_id: str) -> None:
    saver = backend.saver()
    # Unique per run (the real engine shares one database): the hostile part leads.
    tid = thread_id + f"::{uuid.uuid4().hex}" if backend.name != "local" else thread_id
    c = saver.put(cfg(tid), checkpoint(v=tid), {"source": "input", "step": -1, "tid": tid}, {})
    assert c["configurable"]["thread_id"] == tid
    saver.put_writes(c, [("v", tid)], "task-1")
    got = saver.get_tuple(cfg(tid))
    assert got is not None
    assert got.config["configurable"]["thread_id"] == tid
    assert got.checkpoint["channel_values"] == {"v": tid}
    # LangGraph strips NUL from metadata strings (get_serializable_checkpoint_metadata).
    assert got.metadata["tid"] == tid.replace("\x00", "")
    assert got.pending_writes == [("task-1", "v", tid)]
    listed = list(saver.list(cfg(tid)))
    assert [t.config["configurable"]["thread_id"] for t in listed] == [tid]
    assert [t.config["configurable"]["thread_id"] for t in
            saver.list(None, filter={"tid": tid.replace("\x00", "")})] == [tid]
    # Its prefix, or a LIKE/glob reading of it, is another thread.
    if tid:
        assert saver.get_tuple(cfg(tid[:-1])) is None or tid[:-1] == ""
    if "\x00" not in tid:  # NUL: see test_delete_thread_with_nul_deletes_only_that_thread
        saver.delete_thread(tid)
        assert saver.get_tuple(cfg(tid)) is None
    saver.close()


NUL_IDS = [t for t in HOSTILE_THREAD_IDS if "\x00" in t]


@pytest.mark.parametrize("thread_id", NUL_IDS, ids=repr)
def test_delete_thread_with_nul_deletes_only_that_thread(backend: Backend, thread_id: str,
                                                         request: pytest.FixtureRequest) -> None:
    saver = backend.saver()
    # Unique per run; the victim is the id cut at its first NUL (what json_each yields).
    prefix = uuid.uuid4().hex
    tid, victim = prefix + thread_id, prefix + thread_id.split("\x00")[0]
    saver.put(cfg(tid), checkpoint(v="nul"), {}, {})
    saver.put(cfg(victim), checkpoint(v="victim"), {}, {})
    saver.delete_thread(tid)
    assert saver.get_tuple(cfg(victim)) is not None, "deleted another thread"
    assert saver.get_tuple(cfg(tid)) is None, "the thread itself is still there"


def test_prune_with_nul_thread_id_touches_only_that_thread(
        backend: Backend, request: pytest.FixtureRequest) -> None:
    saver = backend.saver()
    prefix = uuid.uuid4().hex
    tid, victim = prefix + "a\x00b", prefix + "a"
    for t in (victim, tid):
        c = saver.put(cfg(t), checkpoint(v=1), {}, {})
        saver.put(c, checkpoint(v=2), {}, {})
    saver.prune([tid])
    assert len(list(saver.list(cfg(victim)))) == 2, "pruned another thread"
    assert len(list(saver.list(cfg(tid)))) == 1


def test_deleting_hostile_thread_ids_deletes_only_them(seeded: D1Saver) -> None:
    keep = snapshot(seeded)
    ids = [t for t in HOSTILE_THREAD_IDS if "\x00" not in t]  # NUL: see test_delete_thread_with_nul_*
    for tid in ids:
        seeded.put(cfg(tid), checkpoint(v=1), {}, {})
    for tid in ids:
        seeded.delete_thread(tid)
    assert snapshot(seeded) == keep


def test_nul_and_its_prefix_are_different_threads(local: Backend) -> None:
    saver = local.saver()
    saver.put(cfg("a\x00b"), checkpoint(v="nul"), {}, {})
    saver.put(cfg("a"), checkpoint(v="a"), {}, {})
    assert saver.get_tuple(cfg("a\x00b")).checkpoint["channel_values"] == {"v": "nul"}
    assert saver.get_tuple(cfg("a")).checkpoint["channel_values"] == {"v": "a"}


def test_non_string_thread_id_is_stored_as_its_string(local: Backend) -> None:
    saver = local.saver()
    c = saver.put(cfg(42), checkpoint(v=1), {}, {})
    assert c["configurable"]["thread_id"] == "42"
    assert saver.get_tuple(cfg("42")) is not None


def test_thread_id_none_is_missing(local: Backend) -> None:
    saver = local.saver()
    saver.setup()
    refused(saver, lambda: saver.put(cfg(None), checkpoint(), {}, {}), MissingConfigKeyError)


@pytest.mark.parametrize("where", ["thread_id", "metadata", "filter"])
def test_lone_surrogate_is_a_typed_error(local: Backend, where: str) -> None:
    saver = local.saver()
    saver.put(cfg("t"), checkpoint(), {}, {})
    op = {"thread_id": lambda: saver.put(cfg("a\ud800"), checkpoint(), {}, {}),
          "metadata": lambda: saver.put(cfg("t"), checkpoint(), {"k": "\ud800"}, {}),
          "filter": lambda: list(saver.list(None, filter={"k": "\ud800"}))}[where]
    refused(saver, op, D1Error)


def test_lone_surrogate_is_never_stored(local: Backend) -> None:
    """Nothing is sent and nothing stored; the caller gets a typed SerializationError."""
    saver = local.saver()
    saver.put(cfg("t"), checkpoint(), {}, {})
    refused(saver, lambda: saver.put(cfg("a\ud800"), checkpoint(), {}, {}), D1Error)
    # In a channel value the serializer replaces it (ormsgpack OPT_REPLACE_SURROGATES).
    c = saver.put(cfg("s"), checkpoint(v="a\ud800"), {}, {})
    assert saver.get_tuple(c).checkpoint["channel_values"] == {"v": "a?"}


# --- 3. checkpoint ids -------------------------------------------------------------------------

ODD_CHECKPOINT_IDS: list[str] = [
    "'; DROP TABLE checkpoints;--", "a') OR 1=1 --", "a\x00b", "😀", "日本", "x" * 10_000,
    "../../etc", " ", "%", "*", "0", "-1", "zzzzzzzz", "NULL", "1f000000-0000-6000-8000-00000000000'",
]


@pytest.mark.parametrize("cid", ODD_CHECKPOINT_IDS, ids=lambda c: repr(c)[:30])
def test_odd_checkpoint_id_round_trips(backend: Backend, cid: str) -> None:
    saver = backend.saver()
    tid = f"cid-{uuid.uuid4().hex}"
    c = saver.put(cfg(tid), checkpoint(cid, v=1), {"step": 0}, {})
    assert c["configurable"]["checkpoint_id"] == cid
    saver.put_writes(c, [("v", 2)], "task-1")
    for conf in (c, cfg(tid)):  # by id, and as the head
        got = saver.get_tuple(conf)
        assert got is not None
        assert got.config["configurable"]["checkpoint_id"] == cid
        assert got.checkpoint["id"] == cid
        assert got.pending_writes == [("task-1", "v", 2)]
    child = saver.put(c, checkpoint(cid + "~", v=3), {"step": 1}, {})
    assert saver.get_tuple(child).parent_config["configurable"]["checkpoint_id"] == cid
    assert [t.config["configurable"]["checkpoint_id"] for t in saver.list(cfg(tid), before=child)] == [cid]
    saver.close()


def test_empty_checkpoint_id_is_stored_but_writes_to_it_are_refused(local: Backend) -> None:
    saver = local.saver()
    c = saver.put(cfg("t"), checkpoint("", v=1), {}, {})
    assert saver.get_tuple(cfg("t")).checkpoint["id"] == ""
    err = refused(saver, lambda: saver.put_writes(c, [("v", 1)], "task"), MissingConfigKeyError)
    assert isinstance(err, KeyError)


def test_non_string_checkpoint_id_round_trips_as_its_string(
        backend: Backend, request: pytest.FixtureRequest) -> None:
    saver = backend.saver()
    tid = f"int-{uuid.uuid4().hex}"
    saver.put(cfg(tid), checkpoint(5, v=1), {}, {})
    assert saver.get_tuple(cfg(tid)).config["configurable"]["checkpoint_id"] in (5, "5")


# --- 4. values the serializer cannot carry ------------------------------------------------------


def _generator() -> Iterator[int]:
    yield 1


UNSERIALIZABLE: dict[str, Callable[[], Any]] = {
    "object": object,
    "lambda": lambda: (lambda x: x),
    "generator": _generator,
    "lock": threading.Lock,
    "event": threading.Event,
    "file": lambda: open(__file__),  # closed by the GC, never written
    "nested-object": lambda: {"ok": [1, 2, {"deep": object()}]},
    "module": lambda: json,
    "class-instance": lambda: type("Custom", (), {})(),
}


@pytest.mark.parametrize("kind", list(UNSERIALIZABLE))
def test_unserializable_channel_value_is_a_serialization_error(seeded: D1Saver, kind: str) -> None:
    value = UNSERIALIZABLE[kind]()
    head = seeded.get_tuple(cfg("keep-1")).config
    err = refused(seeded, lambda: seeded.put(head, checkpoint(ok=1, bad=value), {}, {}),
                  SerializationError)
    assert isinstance(err, D1Error) and isinstance(err, TypeError)
    assert "cannot serialize" in str(err)


@pytest.mark.parametrize("kind", list(UNSERIALIZABLE))
def test_unserializable_write_stores_none_of_the_writes(seeded: D1Saver, kind: str) -> None:
    value = UNSERIALIZABLE[kind]()
    head = seeded.get_tuple(cfg("keep-1")).config
    refused(seeded, lambda: seeded.put_writes(head, [("fine", 1), ("bad", value), ("after", 2)],
                                              "task-9"), SerializationError)


@pytest.mark.anyio
async def test_unserializable_value_async(seeded: D1Saver) -> None:
    head = seeded.get_tuple(cfg("keep-1")).config
    before = snapshot(seeded)
    with pytest.raises(SerializationError):
        await seeded.aput(head, checkpoint(bad=object()), {}, {})
    with pytest.raises(SerializationError):
        await seeded.aput_writes(head, [("bad", lambda: 1)], "task-9")
    assert snapshot(seeded) == before


def _last(a: Any, b: Any) -> Any:
    return b


class AnyState(TypedDict):
    v: Annotated[Any, _last]


def test_graph_node_returning_an_unserializable_value(local: Backend) -> None:
    """A LangGraph node that puts an object() in state: the run fails with SerializationError."""
    g = StateGraph(AnyState)
    g.add_node("bad", lambda s: {"v": object()})
    g.add_edge(START, "bad")
    g.add_edge("bad", END)
    saver = local.saver()
    graph = g.compile(checkpointer=saver)
    with pytest.raises(SerializationError):
        graph.invoke({"v": 1}, {"configurable": {"thread_id": "g"}})
    # What was stored is what LangGraph had put before the failure, all of it readable.
    stored = list(saver.list(cfg("g")))
    assert stored and all(t.checkpoint["channel_values"].get("v") in (None, 1) for t in stored)


# --- 5. metadata JSON cannot carry ------------------------------------------------------------

BAD_METADATA: dict[str, dict] = {
    "object": {"x": object()},
    "bytes": {"x": b"raw"},
    "datetime": {"x": datetime(2020, 1, 1)},
    "set": {"x": {1, 2}},
    "tuple-key": {("a", "b"): 1},
    "decimal": {"x": Decimal("1.5")},
    "nested-object": {"x": [{"y": object()}]},
    "lambda": {"x": lambda: 1},
}


@pytest.mark.parametrize("kind", list(BAD_METADATA))
def test_metadata_json_cannot_carry_is_a_serialization_error(seeded: D1Saver, kind: str) -> None:
    head = seeded.get_tuple(cfg("keep-1")).config
    err = refused(seeded, lambda: seeded.put(head, checkpoint(v=1), BAD_METADATA[kind], {}),
                  SerializationError)
    assert "metadata must be JSON" in str(err)


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")], ids=str)
def test_non_finite_metadata_is_refused(seeded: D1Saver, value: float) -> None:
    head = seeded.get_tuple(cfg("keep-1")).config
    refused(seeded, lambda: seeded.put(head, checkpoint(v=1), {"score": value}, {}),
            SerializationError)


# --- 6. configs missing keys -------------------------------------------------------------------

MISSING_CONFIGS: list[Any] = [
    {}, {"configurable": {}}, {"configurable": None}, {"configurable": "thread"},
    {"configurable": {"checkpoint_ns": ""}}, {"configurable": {"checkpoint_id": "x"}},
    {"thread_id": "t"}, {"metadata": {"thread_id": "t"}},
]


@pytest.mark.parametrize("config", MISSING_CONFIGS, ids=repr)
def test_config_without_thread_id(seeded: D1Saver, config: Any) -> None:
    for op in (lambda: seeded.put(config, checkpoint(), {}, {}),
               lambda: seeded.get_tuple(config),
               lambda: seeded.put_writes(config, [("v", 1)], "task"),
               lambda: list(seeded.list(config))):
        err = refused(seeded, op, MissingConfigKeyError)
        assert isinstance(err, KeyError) and isinstance(err, ConfigError)
        assert "thread_id" in str(err) or "checkpoint_id" in str(err)


@pytest.mark.parametrize("config", [
    {"configurable": {"thread_id": "keep-1"}},
    {"configurable": {"thread_id": "keep-1", "checkpoint_ns": ""}},
    {"configurable": {"thread_id": "keep-1", "checkpoint_id": None}},
    {"configurable": {"thread_id": "keep-1", "checkpoint_id": ""}},
], ids=repr)
def test_put_writes_without_checkpoint_id(seeded: D1Saver, config: dict) -> None:
    err = refused(seeded, lambda: seeded.put_writes(config, [("v", 1)], "task"),
                  MissingConfigKeyError)
    assert "checkpoint_id" in str(err) and isinstance(err, KeyError)
    with pytest.raises(KeyError):  # as other savers raise: callers catching KeyError still work
        seeded.put_writes(config, [("v", 1)], "task")


@pytest.mark.anyio
async def test_missing_keys_async(seeded: D1Saver) -> None:
    with pytest.raises(MissingConfigKeyError):
        await seeded.aput({}, checkpoint(), {}, {})
    with pytest.raises(MissingConfigKeyError):
        await seeded.aget_tuple({"configurable": {}})
    with pytest.raises(MissingConfigKeyError):
        await seeded.aput_writes({"configurable": {"thread_id": "keep-1"}}, [("v", 1)], "t")


# --- 7. server answers that are not D1's envelope ----------------------------------------------

OK_PAGE = {"results": {"columns": ["kind"], "rows": []}, "success": True, "meta": {}}
HOSTILE_RESPONSES: dict[str, tuple[int, str, bytes, type[D1Error]]] = {
    "text": (200, "text/plain", b"hello", ResponseError),
    "html": (200, "text/html", b"<html><body><h1>Welcome to nginx!</h1></body></html>", ResponseError),
    "html-404": (404, "text/html", b"<html>Not Found</html>", ResponseError),
    "html-502": (502, "text/html", b"<html>Bad gateway</html>", ServerError),
    "truncated": (200, "application/json",
                  b'{"success":true,"errors":[],"result":[{"results":{"columns":["kind"],"ro', ResponseError),
    "empty": (200, "application/json", b"", ResponseError),
    "binary": (200, "application/octet-stream", b"\xff\xfe\x00\x01\x80", ResponseError),
    "json-null": (200, "application/json", b"null", ResponseError),
    "json-array": (200, "application/json", b"[]", ResponseError),
    "json-string": (200, "application/json", b'"success"', ResponseError),
    "success-false": (200, "application/json",
                      json.dumps({"success": False, "errors": [{"code": 7500, "message": "nope"}],
                                  "result": None}).encode(), ResponseError),
    "success-false-bare": (200, "application/json", b'{"success":false}', ResponseError),
    "success-string": (200, "application/json", b'{"success":"true","result":[]}', ResponseError),
    "success-missing": (200, "application/json", json.dumps({"result": [OK_PAGE, OK_PAGE]}).encode(),
                        ResponseError),
    "result-null": (200, "application/json", b'{"success":true,"result":null}', ResponseError),
    "result-short": (200, "application/json", b'{"success":true,"result":[]}', ResponseError),
    "result-long": (200, "application/json",
                    json.dumps({"success": True, "result": [OK_PAGE] * 3}).encode(), ResponseError),
    "result-entry-not-object": (200, "application/json", b'{"success":true,"result":[1,2]}',
                                ResponseError),
    "results-wrong-type": (200, "application/json",
                           json.dumps({"success": True, "result": [{"results": "rows"}] * 2}).encode(),
                           ResponseError),
}


def mock_saver(status: int, ctype: str, body: bytes, **kwargs: Any) -> tuple[D1Saver, list]:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(status, headers={"content-type": ctype}, content=body)

    saver = D1Saver(account_id="acc", database_id="db", api_token="tok",
                    api_base_url="http://d1.invalid/client/v4", transport=httpx.MockTransport(handler),
                    retry=RetryPolicy.none(), auto_setup=False, **kwargs)
    return saver, seen


@pytest.mark.parametrize("case", list(HOSTILE_RESPONSES))
def test_server_answer_not_d1s_envelope(case: str) -> None:
    status, ctype, body, error = HOSTILE_RESPONSES[case]
    saver, seen = mock_saver(status, ctype, body)
    ops: dict[str, Callable[[], Any]] = {
        "get_tuple": lambda: saver.get_tuple(cfg("t")),
        "list": lambda: list(saver.list(cfg("t"))),
        "put": lambda: saver.put(cfg("t"), checkpoint(v=1), {}, {}),
        "put_writes": lambda: saver.put_writes(cfg("t", "c1"), [("v", 1)], "task"),
        "delete_thread": lambda: saver.delete_thread("t"),
    }
    for name, op in ops.items():
        with pytest.raises(error) as info:
            op()
        assert isinstance(info.value, D1Error), name
        assert info.value.status == status
        assert len(str(info.value)) < 300  # a summary, never the whole body echoed back
    assert len(seen) == len(ops)  # RetryPolicy.none(): one attempt each


@pytest.mark.anyio
@pytest.mark.parametrize("case", ["html", "truncated", "success-false", "binary"])
async def test_server_answer_not_d1s_envelope_async(case: str) -> None:
    status, ctype, body, error = HOSTILE_RESPONSES[case]
    saver, _ = mock_saver(status, ctype, body)
    with pytest.raises(error):
        await saver.aget_tuple(cfg("t"))
    with pytest.raises(error):
        await saver.aput(cfg("t"), checkpoint(v=1), {}, {})


@pytest.mark.parametrize("case", ["html", "truncated", "success-false", "empty"])
def test_garbled_answer_leaves_stored_rows_intact(local: Backend, case: str) -> None:
    """A proxy that runs each request on the local D1 and then garbles the answer: reads fail
    with ResponseError and change nothing; a put whose answer is garbled fails the same way,
    and what it committed is whole (a retry of it is a harmless upsert)."""
    status, ctype, body, error = HOSTILE_RESPONSES[case]
    inner = LocalD1Transport(local.engine)
    garble = {"on": False}

    def handler(request: httpx.Request) -> httpx.Response:
        answer = inner.handle_request(request)
        if not garble["on"]:
            return answer
        return httpx.Response(status, headers={"content-type": ctype}, content=body)

    saver = D1Saver(account_id=local.account_id, database_id=local.database_id,
                    api_token=local.api_token, api_base_url=local.base_url,
                    transport=httpx.MockTransport(handler), retry=RetryPolicy.none())
    c = saver.put(cfg("t"), checkpoint(v=1), {"step": 0}, {})
    saver.put_writes(c, [("v", 1)], "task")
    before = snapshot(saver)
    garble["on"] = True
    for op in (lambda: saver.get_tuple(cfg("t")), lambda: list(saver.list(None)),
               lambda: list(saver.list(cfg("t"), filter={"step": 0}))):
        with pytest.raises(error):
            op()
    with pytest.raises(error):
        saver.put(c, checkpoint(v=2), {"step": 1}, {})
    garble["on"] = False
    after = snapshot(saver)
    assert set(before["checkpoints"]) <= set(after["checkpoints"])
    assert after["writes"] == before["writes"]
    assert [t.checkpoint["channel_values"] for t in saver.list(cfg("t"))] == [{"v": 2}, {"v": 1}]
    saver.put(c, saver.get_tuple(cfg("t")).checkpoint, {"step": 1}, {})  # the retry
    assert snapshot(saver) == after


MALFORMED_ROWS = {
    "rows-not-a-list": {"columns": ["kind"], "rows": "notalist"},
    "rows-too-short": {"columns": ["kind"], "rows": [["c"]]},
    "rows-are-objects": {"columns": ["kind"], "rows": [{"kind": "c"}]},
}


@pytest.mark.parametrize("case", list(MALFORMED_ROWS))
def test_malformed_rows_are_a_response_error(case: str) -> None:
    page = {"results": MALFORMED_ROWS[case], "success": True, "meta": {}}
    body = json.dumps({"success": True, "errors": [], "result": [page, OK_PAGE]}).encode()
    saver, _ = mock_saver(200, "application/json", body)
    with pytest.raises(ResponseError):
        saver.get_tuple(cfg("t"))


# --- the count --------------------------------------------------------------------------------


def inputs_tried() -> dict[str, int]:
    return {
        "filter keys refused": len(BAD_FILTER_KEYS),
        "filter keys odd but valid": len(ODD_BUT_VALID_KEYS),
        "filter values": len(HOSTILE_FILTER_VALUES) + 5,
        "thread ids": len(HOSTILE_THREAD_IDS) + 3,  # + NUL prefix, int, None
        "lone surrogates": 3 + 1,
        "checkpoint ids": len(ODD_CHECKPOINT_IDS) + 2,  # + "", int
        "unserializable values": len(UNSERIALIZABLE) + 2 + 1,  # + async, graph node
        "metadata values": len(BAD_METADATA) + 3,  # + NaN, inf, -inf
        "configs": len(MISSING_CONFIGS) + 4,
        "server answers": len(HOSTILE_RESPONSES) + len(MALFORMED_ROWS),
    }


def test_inputs_tried() -> None:
    counts = inputs_tried()
    print("hostile inputs tried:", counts, "total", sum(counts.values()))
    assert sum(counts.values()) >= 150
