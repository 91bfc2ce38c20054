"""Search by meaning: vectors stored in D1 (float32, base64), scored exactly by cosine in this
process, ranked as InMemoryStore ranks them, in one request; bad vectors refused unsent."""

from __future__ import annotations

from typing import Any

import pytest
from langgraph.store.base import PutOp, SearchOp
from langgraph.store.memory import InMemoryStore

from d1saver import InvalidInputError
from d1saver.memory import encoding as _encoding
from tests.memory.conftest import Memory
from tests.memory.embeddings import TrigramEmbeddings, embed_text

DOCS = [
    ("a", {"text": "the user likes dark roast coffee", "kind": "pref"}),
    ("b", {"text": "the user lives in Lisbon", "kind": "fact"}),
    ("c", {"text": "coffee with oat milk, no sugar", "kind": "pref"}),
    ("d", {"text": "meeting on Tuesday about the budget", "kind": "event"}),
    ("e", {"text": "prefers tea in the evening", "kind": "pref", "extra": "Lisbon coffee"}),
    ("f", {"title": "no text field here", "kind": "fact"}),
]


def _pair(memory: Memory, **index: Any) -> tuple[Any, InMemoryStore]:
    config = {"dims": 64, "embed": TrigramEmbeddings(), **index}
    return memory.store(index=config), InMemoryStore(index={**config, "embed": TrigramEmbeddings()})


@pytest.mark.parametrize("fields", [None, ["text"], ["text", "extra"], ["$"]])
def test_ranked_as_in_memory_store(memory: Memory, fields: Any) -> None:
    index = {} if fields is None else {"fields": fields}
    store, reference = _pair(memory, **index)
    for key, value in DOCS:
        store.put(("u", "mem"), key, value)
        reference.put(("u", "mem"), key, value)
    for query in ["coffee", "where does the user live", "budget meeting", "tea"]:
        for kwargs in [{}, {"limit": 2}, {"limit": 2, "offset": 1}, {"filter": {"kind": "pref"}},
                       {"limit": 10}]:
            got = store.search(("u",), query=query, **kwargs)
            want = reference.search(("u",), query=query, **kwargs)
            assert [i.key for i in got] == [i.key for i in want], (query, kwargs)
            for g, w in zip(got, want, strict=True):
                if w.score is None:
                    assert g.score is None
                else:
                    assert g.score == pytest.approx(w.score, abs=1e-6)


def test_per_item_index_false_and_field_lists(memory: Memory) -> None:
    store, reference = _pair(memory, fields=["text"])
    for s in (store, reference):
        s.put(("n",), "plain", {"text": "coffee coffee"}, index=False)
        s.put(("n",), "title", {"text": "unrelated", "title": "coffee"}, index=["title"])
        s.put(("n",), "both", {"text": "coffee beans"})
    got = store.search(("n",), query="coffee")
    want = reference.search(("n",), query="coffee")
    assert [(i.key, i.score is None) for i in got] == [(i.key, i.score is None) for i in want]
    assert got[-1].key == "plain" and got[-1].score is None


def test_put_again_replaces_vectors_and_delete_drops_them(memory: Memory) -> None:
    store, _ = _pair(memory)
    store.put(("r",), "k", {"text": "coffee"})
    store.put(("r",), "other", {"text": "budget"})
    assert store.search(("r",), query="coffee")[0].key == "k"
    store.put(("r",), "k", {"text": "budget meeting"})
    assert store.search(("r",), query="budget meeting")[0].key == "k"
    store.delete(("r",), "k")
    (rows,) = store._exchange(store._databases()[0], [_stmt("SELECT COUNT(*) AS n FROM store_vectors")])
    assert rows.rows == [[1]]


def _stmt(sql: str) -> Any:
    from d1saver import Statement
    return Statement(sql)


def test_search_by_meaning_is_one_request_and_embeds_once(memory: Memory) -> None:
    embeddings = TrigramEmbeddings()
    store = memory.store(index={"dims": 64, "embed": embeddings})
    store.setup()
    ops = [PutOp(("v",), f"k{i}", {"text": f"note number {i} about coffee"}) for i in range(200)]
    _, n = memory.requests(lambda: store.batch(ops))
    assert n == 1 and embeddings.calls == 1
    results, events = memory.sent(lambda: store.batch(
        [SearchOp(("v",), None, 5, 0, "coffee note 7"), SearchOp(("v",), None, 3, 0, "number 12")]))
    assert len(events) == 1
    reference = InMemoryStore(index={"dims": 64, "embed": TrigramEmbeddings()})
    reference.batch(ops)
    want = reference.batch([SearchOp(("v",), None, 5, 0, "coffee note 7"),
                            SearchOp(("v",), None, 3, 0, "number 12")])
    assert [[i.key for i in r] for r in results] == [[i.key for i in r] for r in want]


def test_vectors_are_float32_base64() -> None:
    vector = embed_text("hello", 64)
    text = _encoding.pack_vector(vector)
    assert len(text) == 344  # 64 dims x 4 bytes, base64
    assert _encoding.unpack_vector(text) == pytest.approx(vector, abs=1e-7)


class _Bad(TrigramEmbeddings):
    def __init__(self, make: Any) -> None:
        super().__init__()
        self.make = make

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [self.make(t) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return self.make(text)


@pytest.mark.parametrize("make", [
    lambda t: [float("nan")] * 64, lambda t: [1.0] * 63, lambda t: [float("inf")] + [0.0] * 63,
    lambda t: ["x"] * 64,
], ids=["nan", "dims", "inf", "not-numbers"])
def test_bad_vectors_are_refused_and_nothing_changes(memory: Memory, make: Any) -> None:
    store = memory.store(index={"dims": 64, "embed": _Bad(make)})
    store.setup()
    with pytest.raises(InvalidInputError):
        memory.requests(lambda: store.put(("b",), "k", {"text": "hello"}))
    with pytest.raises(InvalidInputError):
        store.search(("b",), query="hello")
    plain = memory.store()
    assert plain.get(("b",), "k") is None


@pytest.mark.anyio
async def test_async_search_by_meaning(memory: Memory) -> None:
    store = memory.store(index={"dims": 64, "embed": TrigramEmbeddings()})
    for key, value in DOCS:
        await store.aput(("u",), key, value)
    found = await store.asearch(("u",), query="coffee")
    assert found[0].key in {"a", "c"} and found[0].score is not None


def test_an_embedding_function_is_accepted(memory: Memory) -> None:
    def embed(texts: list[str]) -> list[list[float]]:
        return [embed_text(t) for t in texts]

    store = memory.store(index={"dims": 64, "embed": embed})
    reference = InMemoryStore(index={"dims": 64, "embed": embed})
    for s in (store, reference):
        s.put(("f",), "k", {"text": "coffee"})
        s.put(("f",), "j", {"text": "tea"})
    got, want = store.search(("f",), query="coffee"), reference.search(("f",), query="coffee")
    assert [(i.key, pytest.approx(i.score, abs=1e-6)) for i in got] == \
        [(i.key, i.score) for i in want]


@pytest.mark.parametrize("distance", ["cosine", "inner_product", "l2"])
def test_distance_types_score_as_postgres_store(memory: Memory, distance: str) -> None:
    """PostgresStore's distance_type (LangGraph's test_scores): cosine similarity, the inner
    product, the negated Euclidean distance; SqliteStore's name for fields (text_fields)."""
    import math

    embed = TrigramEmbeddings()
    store = memory.store(index={"dims": 64, "embed": embed, "text_fields": ["key0"],
                                "distance_type": distance})
    store.put(("test",), "doc", {"key0": "aaa", "other": "zzz"})
    for query in ["aaa", "bbb", "abcd", "poisson"]:
        (found,) = store.search((), query=query)
        a, b = embed_text("aaa"), embed_text(query)
        dot = sum(x * y for x, y in zip(a, b, strict=True))
        want = {"cosine": dot / (math.hypot(*a) * math.hypot(*b)), "inner_product": dot,
                "l2": -math.dist(a, b)}[distance]
        assert found.score == pytest.approx(want, abs=1e-5), query


def test_unknown_distance_type_is_a_config_error(memory: Memory) -> None:
    from d1saver import ConfigError

    with pytest.raises(ConfigError):
        memory.store(index={"dims": 64, "embed": TrigramEmbeddings(), "distance_type": "hamming"})
