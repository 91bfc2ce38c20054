"""list(filter=...) matches metadata as InMemorySaver does, with Python's == (defect 6).

`query == metadata.get(key)`: objects equal whatever their key order, 1 == 1.0 == True,
0 == False, a string never equals a list it spells, None matches a missing key. Checked on
both engines against InMemorySaver itself, over every pair of a table of values.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from langgraph.checkpoint.conformance.test_utils import generate_checkpoint, generate_config
from langgraph.checkpoint.memory import InMemorySaver

from d1saver import Statement
from tests.conftest import Backend

MISSING = object()  # the metadata lacks the key

VALUES: list[Any] = [
    None, True, False, 0, 1, 1.0, -0.0, 2, 0.1 + 0.2, 0.3, 2**62, "1", "", "[1]", "true",
    "null", "a", "é", [1], [1.0], [True], [1, 2], [2, 1], [], {}, [None], [[]], [{}],
    {"a": 1, "b": 2}, {"b": 2, "a": 1}, {"a": 1}, {"a": 1.0, "b": 2.0},
    {"a": 1, "b": [1, {"c": None, "d": "x"}]}, {"b": [1.0, {"d": "x", "c": None}], "a": True},
    {"a": None}, {"a.b": 1}, {"a": {"b": 1}},
]


def _ids(saver: Any, thread: str, flt: dict[str, Any], **kw: Any) -> list[str]:
    return [t.config["configurable"]["checkpoint_id"]
            for t in saver.list(generate_config(thread), filter=flt, **kw)]


def _store(savers: list[Any], thread: str) -> None:
    """The same checkpoints in each saver: one per value, and one without the key."""
    for i, value in enumerate([*VALUES, MISSING]):
        metadata = {"i": i} if value is MISSING else {"i": i, "k": value}
        cp = generate_checkpoint()
        for saver in savers:
            saver.put(generate_config(thread), cp, metadata, {})


def test_filter_matches_like_inmemory_saver(backend: Backend) -> None:
    thread = f"flt-{uuid.uuid4().hex[:12]}"
    memory, saver = InMemorySaver(), backend.saver()
    _store([memory, saver], thread)
    mismatches = []
    for query in VALUES:
        want = _ids(memory, thread, {"k": query})
        got = _ids(saver, thread, {"k": query})
        if got != want:
            mismatches.append((query, len(want), len(got)))
    assert mismatches == []
    assert len(_ids(saver, thread, {"k": 1})) == 3  # True, 1 and 1.0
    assert len(_ids(saver, thread, {"k": None})) == 2  # null, and the checkpoint without "k"


def test_filter_examples(backend: Backend) -> None:
    """The cases of issue 10, spelled out."""
    saver = backend.saver()
    thread = f"flt-{uuid.uuid4().hex[:12]}"
    spelled = saver.put(generate_config(thread), generate_checkpoint(), {"k": "[1]"}, {})
    ordered = saver.put(generate_config(thread), generate_checkpoint(), {"k": {"x": 1, "y": 2}}, {})
    floats = saver.put(generate_config(thread), generate_checkpoint(), {"k": [1.0]}, {})
    cid = lambda c: c["configurable"]["checkpoint_id"]  # noqa: E731
    assert _ids(saver, thread, {"k": [1]}) == [cid(floats)]          # [1] == [1.0], not "[1]"
    assert _ids(saver, thread, {"k": {"y": 2, "x": 1}}) == [cid(ordered)]  # key order ignored
    assert _ids(saver, thread, {"k": "[1]"}) == [cid(spelled)]
    assert _ids(saver, thread, {"k": [True]}) == [cid(floats)]  # True == 1 == 1.0


def test_filter_keeps_limit_exact_in_one_request_per_page(local: Backend) -> None:
    """The match is decided in SQL: a limited list takes one request and decodes no extra row."""
    saver = local.saver(page_size=3)
    thread = f"flt-{uuid.uuid4().hex[:12]}"
    for i in range(10):
        saver.put(generate_config(thread), generate_checkpoint(), {"k": {"a": i % 2, "b": 1}}, {})
    before = local.requests
    assert len(_ids(saver, thread, {"k": {"b": 1, "a": 1}}, limit=3)) == 3
    assert local.requests - before == 1
    before = local.requests
    assert len(_ids(saver, thread, {"k": {"b": 1, "a": 1.0}})) == 5
    assert local.requests - before == 2  # pages of 3: 3 + 2


def test_oversized_metadata_filter_pages_on_past_rows_sql_cannot_decide(local: Backend) -> None:
    """Keys of metadata too big for its row are checked in Python: a page whose rows all fail
    that check moves on to the next, and the limit still counts matches only."""
    saver = local.saver()
    thread = f"flt-{uuid.uuid4().hex[:12]}"
    want = {"text": "w" * 20_000}
    match = saver.put(generate_config(thread), generate_checkpoint(),
                      {"big": "b" * 2_100_000, "medium": want}, {})
    saver.put(generate_config(thread), generate_checkpoint(),
              {"big": "b" * 2_100_000, "medium": {"text": "x" * 20_000}}, {})
    assert _ids(saver, thread, {"medium": want}, limit=1) == [match["configurable"]["checkpoint_id"]]


def test_filter_value_is_compared_not_interpreted(backend: Backend) -> None:
    """A filter value that is JSON text, a path or SQL is a string like any other."""
    saver = backend.saver()
    thread = f"flt-{uuid.uuid4().hex[:12]}"
    saver.put(generate_config(thread), generate_checkpoint(), {"k": [1], "p": {"q": 1}}, {})
    for value in ("[1]", "$.p", "{\"q\": 1}", "1) OR (1=1"):
        assert _ids(saver, thread, {"k": value}) == []
    (res,) = saver.execute([Statement("SELECT COUNT(*) FROM checkpoints WHERE thread_id = ?1",
                                      (thread,))])
    assert res.rows == [[1]]


@pytest.mark.parametrize("query,hit", [({"a.b": 1}, True), ({"a": {"b": 1}}, True),
                                      ({"a.c": None}, True), ({"a.b.c": None}, True),
                                      ({"a.b": 1.0}, True), ({"a.b": "1"}, False)])
def test_dotted_key_reaches_into_nested_objects(local: Backend, query: dict, hit: bool) -> None:
    """d1saver's one extension: 'a.b' is the path a -> b (InMemorySaver reads a key 'a.b')."""
    saver = local.saver()
    thread = f"flt-{uuid.uuid4().hex[:12]}"
    saver.put(generate_config(thread), generate_checkpoint(), {"a": {"b": 1}}, {})
    assert len(_ids(saver, thread, query)) == (1 if hit else 0)
