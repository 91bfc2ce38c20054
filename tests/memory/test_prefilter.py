"""Search by meaning with the prefilter (d1saver/memory/codes.py): the page equals the exact
scan's (index exact=True) and InMemoryStore's, on clustered and on uniform random vectors, for
each distance, with filters, offsets, several databases and vectors stored without a code; and
it costs two requests and a fraction of the exact scan's bytes."""

from __future__ import annotations

import math
import random
from typing import Any

import pytest
from langgraph.store.base import PutOp
from langgraph.store.memory import InMemoryStore

from d1saver import Statement
from d1saver.memory import codes as _codes
from d1saver.memory import plan as _plan
from d1saver.memory import encoding as _encoding
from tests.memory.conftest import Memory

DIMS = 48
N = _plan.WHOLE_MAX + 300  # past the whole-read threshold: codes, then candidates


def _unit(v: list[float]) -> list[float]:
    n = math.sqrt(sum(x * x for x in v)) or 1.0
    return [x / n for x in v]


def dataset(kind: str, n: int, seed: int) -> dict[str, list[float]]:
    """`n` vectors named "v<i>", and 20 queries "q<j>": uniform random unit vectors, or
    clustered (16 centres, spread 0.15)."""
    rng = random.Random(seed)
    out: dict[str, list[float]] = {}
    if kind == "uniform":
        for i in range(n):
            out[f"v{i}"] = _unit([rng.gauss(0, 1) for _ in range(DIMS)])
        for j in range(20):
            out[f"q{j}"] = _unit([rng.gauss(0, 1) for _ in range(DIMS)])
        return out
    centres = [_unit([rng.gauss(0, 1) for _ in range(DIMS)]) for _ in range(16)]
    for name, count in (("v", n), ("q", 20)):
        for i in range(count):
            c = centres[rng.randrange(16)]
            out[f"{name}{i}"] = _unit([x + rng.gauss(0, 0.15) for x in c])
    return out


class Lookup:
    """Embeddings that look each text up (a text is a vector's name)."""

    def __init__(self, vectors: dict[str, list[float]]) -> None:
        self.vectors = vectors

    def __call__(self, texts: list[str]) -> list[list[float]]:
        return [self.vectors[t] for t in texts]


def _fill(stores: list[Any], vectors: dict[str, list[float]], n: int) -> None:
    ops = [PutOp(("docs", f"part{i % 3}"), f"k{i}", {"text": f"v{i}", "group": i % 5,
                                                   "note": "x" * 200}) for i in range(n)]
    for store in stores:
        for start in range(0, n, 250):
            store.batch(ops[start: start + 250])


def _pages(store: Any, queries: list[str], **kwargs: Any) -> list[list[tuple[str, float]]]:
    return [[(i.key, i.score) for i in store.search(("docs",), query=q, **kwargs)]
            for q in queries]


def _same(got: list[list[tuple[str, float]]], want: list[list[tuple[str, float]]],
          tolerance: float = 1e-6) -> None:
    """Equal pages: keys in order, scores within `tolerance` (D1Store scores the float32 it
    stores, InMemoryStore float64: 1e-6; the exact scan and the prefilter score the same
    vectors: 1e-12)."""
    assert [[k for k, _ in p] for p in got] == [[k for k, _ in p] for p in want]
    for g, w in zip(got, want, strict=True):
        for (_, a), (_, b) in zip(g, w, strict=True):
            assert a == pytest.approx(b, abs=tolerance)


def recall(got: list[list[tuple[str, float]]], want: list[list[tuple[str, float]]]) -> float:
    hits = sum(len({k for k, _ in g} & {k for k, _ in w}) for g, w in zip(got, want, strict=True))
    return hits / max(1, sum(len(w) for w in want))


@pytest.mark.parametrize("kind", ["clustered", "uniform"])
def test_prefilter_pages_equal_the_exact_scan_and_in_memory_store(memory: Memory, kind: str
                                                                    ) -> None:
    vectors = dataset(kind, N, seed=7)
    index = {"dims": DIMS, "embed": Lookup(vectors), "fields": ["text"]}
    fast = memory.store(index=index)
    exact = memory.store(index={**index, "exact": True})
    reference = InMemoryStore(index=index)  # type: ignore[arg-type]
    _fill([fast, reference], vectors, N)
    queries = [f"q{j}" for j in range(10)]
    # Codes, then candidates (2 requests), unless the filter's equalities keep at most
    # WHOLE_MAX items: then they are read whole (1; {"group": 2} keeps N / 5).
    for kwargs, requests in [({"limit": 10}, 2), ({"limit": 5, "offset": 7}, 2),
                             ({"limit": 10, "filter": {"group": {"$lt": 4}}}, 2),
                             ({"limit": 10, "filter": {"group": 2}}, 1),
                             ({"limit": 3, "filter": {"group": {"$gt": 2}}}, 2)]:
        got, events = memory.sent(lambda kw=kwargs: _pages(fast, queries, **kw))
        assert len(events) == requests * len(queries), kwargs
        want = _pages(reference, queries, **kwargs)
        assert recall(got, want) >= 0.99
        _same(got, want)
        scan = _pages(exact, queries, **kwargs)
        _same(scan, want)
        _same(got, scan, 1e-12)


@pytest.mark.parametrize("distance", ["cosine", "inner_product", "l2"])
def test_each_distance_as_the_exact_scan(memory: Memory, distance: str) -> None:
    vectors = dataset("uniform", N, seed=11)
    # Vectors not of unit length, so that the three distances rank differently.
    rng = random.Random(3)
    vectors = {k: [x * rng.uniform(0.2, 3) for x in v] for k, v in vectors.items()}
    index = {"dims": DIMS, "embed": Lookup(vectors), "fields": ["text"],
             "distance_type": distance}
    fast = memory.store(index=index)
    exact = memory.store(index={**index, "exact": True})
    _fill([fast], vectors, N)
    queries = [f"q{j}" for j in range(10)]
    _same(_pages(fast, queries, limit=10), _pages(exact, queries, limit=10), 1e-12)


def test_bytes_and_requests_against_the_exact_scan(memory: Memory) -> None:
    vectors = dataset("clustered", N, seed=5)
    index = {"dims": DIMS, "embed": Lookup(vectors), "fields": ["text"]}
    fast = memory.store(index=index)
    exact = memory.store(index={**index, "exact": True})
    _fill([fast], vectors, N)
    _, slow = memory.sent(lambda: exact.search(("docs",), query="q1", limit=10))
    _, quick = memory.sent(lambda: fast.search(("docs",), query="q1", limit=10))
    assert len(slow) == 1 and len(quick) == 2
    # The codes are a quarter of the vectors' bytes and carry no value.
    assert sum(e.bytes_received for e in quick) * 3 < sum(e.bytes_received for e in slow)


def test_small_scope_is_read_whole_in_one_request(memory: Memory) -> None:
    vectors = dataset("uniform", 50, seed=2)
    index = {"dims": DIMS, "embed": Lookup(vectors), "fields": ["text"]}
    fast = memory.store(index=index)
    reference = InMemoryStore(index=index)  # type: ignore[arg-type]
    _fill([fast, reference], vectors, 50)
    queries = [f"q{j}" for j in range(5)]
    got, events = memory.sent(lambda: _pages(fast, queries, limit=4, filter={"group": 1}))
    assert len(events) == len(queries)
    _same(got, _pages(reference, queries, limit=4, filter={"group": 1}))


def test_a_selective_equality_over_a_large_namespace_is_read_whole(memory: Memory) -> None:
    """The whole-read threshold counts the items the filter's plain equalities keep, not the
    namespace's: a search for one group of N items is one request, as exact as the scan."""
    vectors = dataset("clustered", N, seed=9)
    index = {"dims": DIMS, "embed": Lookup(vectors), "fields": ["text"]}
    fast = memory.store(index=index)
    reference = InMemoryStore(index=index)  # type: ignore[arg-type]
    _fill([fast, reference], vectors, N)
    queries = [f"q{j}" for j in range(5)]
    for flt, requests in [({"group": 3}, 1), ({"group": 3, "note": "x" * 200}, 1),
                          ({"group": {"$ne": 3}}, 2), ({"note": "x" * 200}, 2)]:
        got, events = memory.sent(lambda f=flt: _pages(fast, queries, limit=6, filter=f))
        assert len(events) == requests * len(queries), flt
        _same(got, _pages(reference, queries, limit=6, filter=flt))


@pytest.mark.parametrize("dims,fields,n,requests", [
    (256, 1, 1000, 1),   # 1,000 items of 256 dimensions: read whole (1.4 MB of vectors)
    (1536, 1, 200, 1),
    (1536, 1, 300, 2),   # 300 of 1,536: 2.5 MB whole, so codes, then candidates
    (256, 2, 800, 2),    # two fields an item: 800 items hold 1,600 vectors
])
def test_the_whole_read_is_bounded_by_items_and_by_the_vectors_bytes(
        memory: Memory, dims: int, fields: int, n: int, requests: int) -> None:
    """A scope of up to WHOLE_MAX items is read whole in one request, unless its vectors would
    take more than WHOLE_BYTES as read: larger embeddings go to codes sooner. Either way the
    page is InMemoryStore's."""
    rng = random.Random(dims + n)
    texts = [f"t{i}" for i in range(2 * n + 5)]
    vectors = {t: _unit([rng.gauss(0, 1) for _ in range(dims)]) for t in texts}
    names = ["a", "b"][:fields]
    index = {"dims": dims, "embed": Lookup(vectors), "fields": names}
    fast = memory.store(index=index)
    reference = InMemoryStore(index=index)  # type: ignore[arg-type]
    ops = [PutOp(("docs",), f"k{i}", {name: f"t{i + j * n}" for j, name in enumerate(names)})
           for i in range(n)]
    for store in (fast, reference):
        for start in range(0, n, 250):
            store.batch(ops[start: start + 250])
    assert (n <= _plan.whole_items(dims, fields)) == (requests == 1)
    queries = [f"t{2 * n + j}" for j in range(3)]
    got, events = memory.sent(lambda: _pages(fast, queries, limit=5))
    assert len(events) == requests * len(queries)
    _same(got, _pages(reference, queries, limit=5))


def test_whole_items_follow_the_vectors_size() -> None:
    assert _plan.whole_items(48, 1) == _plan.WHOLE_MAX == 1_000
    assert _plan.whole_items(256, 1) == 1_000           # 1,368 characters a vector
    assert _plan.whole_items(1536, 1) == 2_000_000 // 8_192 == 244
    assert _plan.whole_items(3072, 2) == 2_000_000 // (2 * 16_384) == 61
    assert _plan.whole_items(0, 0) == 1_000


def test_vectors_without_codes_and_several_databases(memory: Memory) -> None:
    vectors = dataset("clustered", N, seed=9)
    index = {"dims": DIMS, "embed": Lookup(vectors), "fields": ["text"]}
    fast = memory.store(index=index, database_ids=memory.database_ids[:2])
    reference = InMemoryStore(index=index)  # type: ignore[arg-type]
    _fill([fast, reference], vectors, N)
    # As an older d1saver writes them: no code (every such vector is a candidate).
    for node in fast._databases():
        fast._exchange(node, [Statement("UPDATE store_vectors SET code = NULL "
                                        "WHERE CAST(substr(key, 2) AS INTEGER) % 4 = 0")])
    queries = [f"q{j}" for j in range(10)]
    for kwargs in [{"limit": 10}, {"limit": 4, "offset": 3, "filter": {"group": 3}}]:
        _same(_pages(fast, queries, **kwargs), _pages(reference, queries, **kwargs))


def test_items_without_vectors_fill_a_short_page(memory: Memory) -> None:
    vectors = dataset("uniform", N, seed=4)
    index = {"dims": DIMS, "embed": Lookup(vectors), "fields": ["text"]}
    fast = memory.store(index=index)
    reference = InMemoryStore(index=index)  # type: ignore[arg-type]
    ops = [PutOp(("docs",), f"k{i}", {"text": f"v{i}", "group": i % 50},
                 index=None if i % 50 == 0 else False) for i in range(N)]
    for store in (fast, reference):
        store.batch(ops)
    for kwargs in [{"limit": 30, "filter": {"group": 0}}, {"limit": 10}]:
        _same(_pages(fast, ["q1", "q2"], **kwargs), _pages(reference, ["q1", "q2"], **kwargs))


@pytest.mark.parametrize("distance", ["cosine", "inner_product", "l2"])
def test_bounds_hold_the_exact_scores(distance: str) -> None:
    rng = random.Random(1)
    for dims in (1, 7, 256):
        vecs = [[rng.gauss(0, 1) * rng.choice([1e-3, 1, 50]) for _ in range(dims)]
                for _ in range(200)] + [[0.0] * dims]
        stored = [_encoding.unpack_vector(_encoding.pack_vector(v)) for v in vecs]
        query = [rng.gauss(0, 1) for _ in range(dims)]
        exact = _encoding.similarity(query, stored, distance)
        found = _codes.bounds(query, [_codes.encode(v) for v in stored], distance)
        for score, b in zip(exact, found, strict=True):
            assert b is not None and b[0] <= score <= b[1]
    assert _codes.bounds([1.0], ["", None], "cosine") == [None, None]


def test_a_server_that_claims_rank_but_does_not_still_answers_exactly(memory: Memory) -> None:
    """The local D1 runs RANK_MARK as plain SQL: the codes come back, and the prefilter goes
    on with its second request."""
    vectors = dataset("clustered", N, seed=3)
    index = {"dims": DIMS, "embed": Lookup(vectors), "fields": ["text"]}
    store = memory.store(index=index)
    reference = InMemoryStore(index=index)  # type: ignore[arg-type]
    _fill([store, reference], vectors, N)
    node = store._databases()[0]
    assert node.client.features == frozenset()
    node.client.features = frozenset({"rank"})  # as if the header had said so
    got, events = memory.sent(lambda: _pages(store, ["q1"], limit=10))
    assert len(events) == 2
    _same(got, _pages(reference, ["q1"], limit=10))


def test_async_search_takes_the_same_two_requests(memory: Memory) -> None:
    import asyncio

    vectors = dataset("uniform", N, seed=31)
    index = {"dims": DIMS, "embed": Lookup(vectors), "fields": ["text"]}
    store = memory.store(index=index)
    reference = InMemoryStore(index=index)  # type: ignore[arg-type]
    _fill([store, reference], vectors, N)

    async def pages() -> list[list[tuple[str, float]]]:
        found = await asyncio.gather(*(store.asearch(("docs",), query=q, limit=10,
                                                     filter={"group": {"$lt": 3}})
                                       for q in ("q1", "q2")))
        return [[(i.key, i.score) for i in page] for page in found]  # type: ignore[misc]

    got, events = memory.sent(lambda: asyncio.run(pages()))
    assert len(events) == 2  # gathered: one request of codes, one of candidates, for both
    _same(got, _pages(reference, ["q1", "q2"], limit=10, filter={"group": {"$lt": 3}}))


def test_gathered_search_beside_a_put_scans_exactly(memory: Memory) -> None:
    """A tick whose request also writes ranks by the exact scan, in that one request (a
    second request would see the tick's later puts), and answers as the calls in order do."""
    import asyncio

    vectors = dataset("uniform", N, seed=37)
    index = {"dims": DIMS, "embed": Lookup(vectors), "fields": ["text"]}
    store = memory.store(index=index)
    reference = InMemoryStore(index=index)  # type: ignore[arg-type]
    _fill([store, reference], vectors, N)
    best = _pages(reference, ["q3"], limit=10)[0]

    async def run(s: Any) -> list[list[tuple[str, float]]]:
        first, _, second = await asyncio.gather(
            s.asearch(("docs",), query="q3", limit=10),
            s.adelete(("docs", f"part{int(best[0][0][1:]) % 3}"), best[0][0]),
            s.asearch(("docs",), query="q3", limit=10))
        return [[(i.key, i.score) for i in page] for page in (first, second)]

    got, events = memory.sent(lambda: asyncio.run(run(store)))
    assert len(events) == 1
    want = asyncio.run(run(reference))
    assert want[0] != want[1]  # the delete is seen by the second search only
    _same(got, want)


def test_search_while_migrating_reads_the_home_copy(memory: Memory) -> None:
    """While migrating an item can be in its previous home and its home (a move caught
    midway) with other vectors: the search ranks the home's copy, as the exact scan does,
    though the previous home's stale codes would rank higher."""
    ids = memory.database_ids
    vectors = dataset("uniform", N, seed=41)
    vectors.update({f"n{i}": [-x for x in vectors[f"v{i}"]] for i in range(N)})
    index = {"dims": DIMS, "embed": Lookup(vectors), "fields": ["text"]}
    moving = memory.store(ids[:2], previous_database_ids=ids[:1], index=index)
    label = next(f"docs{n}" for n in range(100) if moving.home((f"docs{n}",)) == ids[1])
    old = memory.store(ids[:1], index=index)
    new = memory.store(ids[1:2], index=index)
    reference = InMemoryStore(index=index)  # type: ignore[arg-type]
    for s in (old, reference):
        for start in range(0, N, 250):
            s.batch([PutOp((label,), f"k{i}", {"text": f"v{i}"})
                     for i in range(start, min(N, start + 250))])
    for s in (new, reference):  # copied home with other vectors: the stale ones rank higher
        s.batch([PutOp((label,), f"k{i}", {"text": f"n{i}"}) for i in range(0, N, 4)])
    queries = [f"q{j}" for j in range(8)]

    def pages(s: Any) -> list[list[tuple[str, float]]]:
        return [[(i.key, i.score) for i in s.search((label,), query=q, limit=10)]
                for q in queries]

    _same(pages(moving), pages(reference))


def _awkward_vectors() -> list[list[float]]:
    """Vectors whose codes take every branch: zero, tiny subnormals (whose step rounds to 0 in
    float32), the largest float32s, halves that round to even, mixed magnitudes."""
    rng = random.Random(7)
    out: list[list[float]] = []
    for dims in (1, 3, 7, 48, 256):
        out.append([0.0] * dims)
        out.append([1e-44] + [0.0] * (dims - 1))
        out.append([3.4e38 * rng.choice([-1, 1]) for _ in range(dims)])
        out.append([127.0] + [k + 0.5 for k in range(-63, 63)][:dims - 1])
        for _ in range(40):
            out.append([rng.gauss(0, 1) * rng.choice([1e-30, 1e-3, 1, 50, 1e30])
                        for _ in range(dims)])
    return out


def test_codes_with_numpy_equal_the_pure_python_codes_bit_for_bit(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """encode_packed reads a put's vectors at once with numpy; without numpy each is encoded
    in pure Python: the stored codes are the same bytes either way."""
    pytest.importorskip("numpy")
    vectors = _awkward_vectors()
    by_dims: dict[int, list[str]] = {}
    for v in vectors:
        by_dims.setdefault(len(v), []).append(_encoding.pack_vector(v))
    fast = {d: _codes.encode_packed(p) for d, p in by_dims.items()}
    monkeypatch.setattr(_codes, "_np", lambda: None)
    pure = {d: _codes.encode_packed(p) for d, p in by_dims.items()}
    assert fast == pure
    one_by_one = {d: [_codes.encode(_encoding.unpack_vector(x)) for x in p]
                  for d, p in by_dims.items()}
    assert pure == one_by_one
    assert sum(len(c) for c in fast.values()) == len(vectors)


def test_a_vector_of_tiny_subnormals_gets_a_code_whose_bounds_hold() -> None:
    """Its step, max|x| / 127, rounds to 0 in float32: the least float32 stands for it (it
    divided by zero before)."""
    stored = _encoding.unpack_vector(_encoding.pack_vector([1e-44, -3e-45, 0.0]))
    code = _codes.encode(stored)
    query = [1.0, 2.0, 3.0]
    for distance in ("cosine", "inner_product", "l2"):
        (lo, hi), = _codes.bounds(query, [code], distance)  # type: ignore[misc]
        exact = _encoding.similarity(query, [stored], distance)[0]
        assert lo <= exact <= hi


def test_vectors_packed_at_once_equal_those_packed_one_by_one(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """pack_vectors reads a put's vectors with numpy; without it, or for a batch it cannot
    read as numbers, each is checked and packed alone: the same texts, the same errors."""
    np = pytest.importorskip("numpy")
    rng = random.Random(3)
    batches: list[list[Any]] = [
        [[rng.gauss(0, 1) * rng.choice([1e-40, 1e-3, 1, 1e30]) for _ in range(8)]
         for _ in range(30)],
        [[1, 2, 3, True, 0, -7, 2**40, 5]],
        [np.arange(8, dtype=np.float32) / 3, [0.1] * 8],
        [[3.4028235e38] * 8, [-3.4028234663852886e38] * 8],
    ]
    bad: list[list[Any]] = [[[1.0] * 7], [[math.nan] * 8], [[math.inf] + [0.0] * 7],
                            [["1.5"] * 8], [[1e39] * 8], [[10**400] + [0] * 7]]
    names = [f"v{i}" for i in range(40)]

    def both(vectors: list[Any]) -> tuple[Any, Any]:
        out = []
        for fast in (True, False):
            if not fast:
                monkeypatch.setattr(_encoding, "_numpy", lambda: None)
            try:
                out.append(_encoding.pack_vectors(vectors, 8, names[: len(vectors)]))
            except Exception as exc:  # noqa: BLE001 - the error is what is compared
                out.append((type(exc), str(exc)))
            monkeypatch.undo()
        return out[0], out[1]

    for vectors in batches + bad:
        fast, slow = both(vectors)
        assert fast == slow, vectors
    assert all(isinstance(both(v)[0], list) for v in batches)
    assert all(isinstance(both(v)[0], tuple) for v in bad[:3])


def test_vectors_unpacked_at_once_score_as_those_unpacked_one_by_one(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A ranked search unpacks its vectors at once with numpy (one matrix); without numpy, or
    for vectors of different lengths, one by one: the same values, so the same scores bit for
    bit, for every distance."""
    pytest.importorskip("numpy")
    rng = random.Random(5)
    same = [_encoding.pack_vector([rng.gauss(0, 1) * rng.choice([1e-3, 1, 50])
                                   for _ in range(48)]) for _ in range(30)]
    same.append(_encoding.pack_vector([0.0] * 48))
    mixed = same[:3] + [_encoding.pack_vector([0.5, -1.0, 2.0])]
    query = [rng.gauss(0, 1) for _ in range(48)]
    assert isinstance(_encoding.unpack_vectors(mixed), list)
    assert not isinstance(_encoding.unpack_vectors(same), list)
    assert _encoding.unpack_vectors([_encoding.pack_vector([])] * 2) == [[], []]
    for packed in (same, mixed[:3], []):
        one_by_one = [_encoding.unpack_vector(p) for p in packed]
        at_once = _encoding.unpack_vectors(packed)
        monkeypatch.setattr(_encoding, "_numpy", lambda: None)
        pure = _encoding.unpack_vectors(packed)
        monkeypatch.undo()
        assert pure == one_by_one
        for distance in ("cosine", "inner_product", "l2"):
            want = _encoding.similarity(query, one_by_one, distance)
            assert _encoding.similarity(query, at_once, distance) == want
            assert _encoding.similarity(query, pure, distance) == want
