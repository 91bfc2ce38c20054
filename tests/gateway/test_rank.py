"""Search by meaning through the gateway Worker (worker/rank.js), under `wrangler dev`: the
Worker scores next to the data and sends back only the rows that can be in the page, in one
request; the page equals InMemoryStore's and the exact scan's for each distance and with
filters; D1Store finds the capability from the gateway's answers (tests/memory/test_prefilter.py: a server without it gets the REST path)."""

from __future__ import annotations

import random
import re
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
from langgraph.store.base import PutOp
from langgraph.store.memory import InMemoryStore

from d1saver.memory import plan as _plan
from d1saver.sql import memory as _sql
from tests.memory.conftest import Memory
from tests.memory.test_prefilter import DIMS, Lookup, _same, dataset
from tests.realengine import RealD1

pytestmark = pytest.mark.realengine

N = _plan.WHOLE_MAX + 100  # past the whole-read threshold (48 dimensions: WHOLE_MAX items)


@pytest.fixture
def real(wrangler_d1: RealD1) -> Memory:
    return Memory(wrangler_d1.base_url, wrangler_d1.api_token, wrangler_d1.account_id,
                  list(wrangler_d1.databases.values()))


def _fill(stores: list[Any], vectors: dict[str, list[float]], tag: str) -> None:
    ops = [PutOp((tag, f"part{i % 3}"), f"k{i}", {"text": f"v{i}", "group": i % 5,
                                                "note": "x" * 200}) for i in range(N)]
    for store in stores:
        for start in range(0, N, 200):
            store.batch(ops[start: start + 200])


def _search(store: Any, tag: str, queries: list[str], **kwargs: Any) -> list[list[tuple[str, float]]]:
    prefix = kwargs.pop("namespace", (tag,))
    return [[(i.key, i.score) for i in store.search(prefix, query=q, **kwargs)] for q in queries]


@pytest.mark.parametrize("distance", ["cosine", "inner_product", "l2"])
def test_the_gateway_ranks_next_to_the_data(real: Memory, distance: str) -> None:
    tag = f"rank-{uuid.uuid4().hex[:8]}"
    rng = random.Random(5)
    vectors = {k: [x * rng.uniform(0.5, 2) for x in v]
               for k, v in dataset("uniform", N, seed=13).items()}
    index = {"dims": DIMS, "embed": Lookup(vectors), "fields": ["text"], "distance_type": distance}
    store = real.store(index=index)
    exact = real.store(index={**index, "exact": True})
    _fill([store], vectors, tag)
    assert "rank" in store._databases()[0].client.features  # learnt from the puts' answers
    queries = [f"q{j}" for j in range(6)]
    for kwargs in [{"limit": 10}, {"limit": 4, "offset": 3}, {"limit": 10, "filter": {"group": 1}}]:
        got, events = real.sent(lambda kw=kwargs: _search(store, tag, queries, **kw))
        want, slow = real.sent(lambda kw=kwargs: _search(exact, tag, queries, **kw))
        assert len(events) == len(queries)  # one request each
        _same(got, want, 1e-12)
        # Only the rows that can be in the page come back (each carries its vector).
        assert sum(e.bytes_received for e in events) * 10 < sum(e.bytes_received for e in slow)
    if distance == "cosine":
        reference = InMemoryStore(index={**index, "embed": Lookup(vectors)})  # type: ignore[arg-type]
        _fill([reference], vectors, tag)
        _same(_search(store, tag, queries, limit=10), _search(reference, tag, queries, limit=10))


def test_the_mark_the_worker_reads_is_the_one_d1saver_sends() -> None:
    text = (Path(__file__).resolve().parents[2] / "worker" / "rank.js").read_text()
    mark = re.search(r"const MARK = /(.+)/;", text)
    assert mark is not None and re.fullmatch(mark.group(1), _sql.RANK_MARK.sql)


class _PlainD1(httpx.HTTPTransport):
    """The gateway as D1 itself: its capability header dropped."""

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = super().handle_request(request)
        del response.headers["d1saver-gateway"]
        return response


def test_the_rest_path_on_the_real_engine(real: Memory) -> None:
    """The prefilter's statements (codes, then candidates; a small scope whole) on workerd."""
    tag = f"rest-{uuid.uuid4().hex[:8]}"
    vectors = dataset("uniform", N, seed=17)
    index = {"dims": DIMS, "embed": Lookup(vectors), "fields": ["text"]}
    store = real.store(index=index, transport=_PlainD1())
    exact = real.store(index={**index, "exact": True}, transport=_PlainD1())
    _fill([store], vectors, tag)
    assert store._databases()[0].client.features == frozenset()
    queries = [f"q{j}" for j in range(4)]
    # A scope whose filter's equalities keep at most WHOLE_MAX items is read whole (1).
    for kwargs, requests in [({"limit": 10}, 2), ({"limit": 5, "filter": {"group": {"$lte": 4}}}, 2),
                             ({"limit": 5, "offset": 2, "filter": {"note": "x" * 200}}, 2),
                             ({"limit": 5, "offset": 2, "filter": {"group": 1}}, 1),
                             ({"limit": 5, "filter": {"group": 1}, "namespace": (tag, "part1")}, 1)]:
        got, events = real.sent(lambda kw=kwargs: _search(store, tag, queries, **kw))
        assert len(events) == requests * len(queries)
        _same(got, _search(exact, tag, queries, **kwargs), 1e-12)


def test_the_gateway_with_codes_missing_and_items_without_vectors(real: Memory) -> None:
    """Vectors written without a code (as 0.2 writes them) are always candidates in the
    Worker too; items without vectors fill a short page there as in the exact scan."""
    from d1saver import Statement

    tag = f"gaps-{uuid.uuid4().hex[:8]}"
    vectors = dataset("clustered", N, seed=23)
    index = {"dims": DIMS, "embed": Lookup(vectors), "fields": ["text"]}
    store = real.store(index=index)
    exact = real.store(index={**index, "exact": True})
    ops = [PutOp((tag,), f"k{i}", {"text": f"v{i}", "group": i % 50},
                 index=None if i % 7 else False) for i in range(N)]
    for start in range(0, N, 200):
        store.batch(ops[start: start + 200])
    store._exchange(store._databases()[0], [Statement(
        "UPDATE store_vectors SET code = NULL WHERE ns = ?1 AND CAST(substr(key, 2) AS INTEGER) % 4 = 0",
        (f'["{tag}"]',))])
    queries = ["q1", "q2", "q3"]
    for kwargs in [{"limit": 10}, {"limit": 20, "filter": {"group": 7}}, {"limit": 5, "offset": 4}]:
        got, events = real.sent(lambda kw=kwargs: _search(store, tag, queries, **kw))
        assert len(events) == len(queries)
        _same(got, _search(exact, tag, queries, **kwargs), 1e-12)


def test_a_batch_that_searches_and_puts_sees_the_state_before_its_puts(real: Memory) -> None:
    from langgraph.store.base import SearchOp

    tag = f"mixed-{uuid.uuid4().hex[:8]}"
    vectors = dataset("uniform", N, seed=29)
    index = {"dims": DIMS, "embed": Lookup(vectors), "fields": ["text"]}
    store = real.store(index=index)
    reference = InMemoryStore(index=index)  # type: ignore[arg-type]
    _fill([store, reference], vectors, tag)
    top = reference.search((tag,), query="q1", limit=1)[0].key
    # The batch's put moves the best item far away; its search still sees it as it was.
    ops = [SearchOp((tag,), None, 10, 0, "q1"),
           PutOp((tag, f"part{int(top[1:]) % 3}"), top, {"text": "q2", "group": 99})]
    got = store.batch(ops)[0]
    want = reference.batch(ops)[0]
    assert [(i.key, i.value) for i in got] == [(i.key, i.value) for i in want]  # type: ignore[union-attr]
    assert got[0].key == top and got[0].value["group"] != 99  # type: ignore[index]
