"""Every statement that evaluates a search filter in SQL gives the same verdict, and a sound one.

The plain search (SEARCH_ITEMS_FILTERED, and REFRESH_SEARCH_FILTERED before it), the search by
meaning read whole (RANK_ROWS), as codes (SEARCH_CODES) then candidates (CANDIDATE_ITEMS), and
the exact scan's vectors (SEARCH_VECTORS_FILTERED) each carry their own copy of the filter's
verdict (2 holds, 0 does not, 1 SQL cannot tell). The store trusts a 2 without reading the
value and drops a 0, so each copy must be sound against InMemoryStore's reading, and all of
them must agree: a row one path reads as "cannot tell" and another drops is a search whose
page depends on its path. Checked on a grid of stored values (numbers of every kind, strings,
null, lists, objects, a missing key, a value SQL cannot read) against every operator, with the
scope, what a read sees (an item that expires exactly now) and the whole-read threshold's
boundary, on the local D1, each filter in one request.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from typing import Any

import pytest
from langgraph.store.base import PutOp

from d1saver import Statement
from d1saver.memory import filters as _filters
from d1saver.memory import namespaces as _ns
from d1saver.memory import plan as _plan
from d1saver.memory.plan import scope_params
from d1saver.sql import memory as _sql
from d1saver.sql.query import q
from d1saver.storage import codec as _codec
from tests.memory.test_filter_verdicts import VALUES, filters
from tests.memory.subjects import D1Subject, local_subject

TTL_MINUTES = 10.0
# Beside the grid's {"n": value} items: a nested value, a value without "n", an empty one.
EXTRA: list[dict[str, Any]] = [{"n": {"y": 1, "z": [1, {"w": None}]}}, {"other": 1}, {}]

# Every row with its rowid and expiry (the test's own reading of the table).
_ROWS = q("SELECT rowid AS item, ns, key, expires_at FROM store_items")
# How many items in scope a read sees that the filter's plain equalities keep: the statements'
# own count, which decides between the whole read and codes.
_KEPT_COUNT = q(f"WITH {_sql._EQUALS} SELECT {_sql._SCOPE_COUNT} AS n")


class Grid:
    """One item per stored value, each in its own namespace under ("g",) (so the refresh of a
    page can be asked of each row alone), and the rows no search in ("g",) may return."""

    def __init__(self, d1: D1Subject) -> None:
        def fake(texts: list[str]) -> list[list[float]]:
            return [[1.0, float(len(t) % 7), 0.5] for t in texts]

        self.store = d1.store(index={"dims": 3, "embed": fake, "fields": ["$"]},
                              ttl={"default_ttl": TTL_MINUTES})
        self.clock = d1.clock
        self.values: dict[str, dict[str, Any]] = {}
        ops = []
        for i, value in enumerate([{"n": v} for v in VALUES] + EXTRA):
            ns = ("g", f"v{i:03d}")
            self.values[_ns.encode(ns)] = value
            ops.append(PutOp(ns, "k", value, ttl=TTL_MINUTES))
        # An item without a TTL, which no refresh changes.
        self.no_ttl = _ns.encode(("g", "nottl"))
        self.values[self.no_ttl] = {"n": 1}
        ops.append(PutOp(("g", "nottl"), "k", {"n": 1}))
        ops += [PutOp(("a",), "k", {"n": 1}),          # namespaces before and after
                PutOp(("h",), "k", {"n": 1}),
                PutOp(("gh",), "k", {"n": 1})]         # a sibling whose text extends "g"
        self.store.batch(ops)
        self.database = self.store._database(("g",))
        # A value SQL cannot read (stored compressed, as a large one is): 1 whatever the filter;
        # last in the page's order, so that it hides no row from the refresh of a page.
        opaque = ("g", "zopaque")
        self.values[_ns.encode(opaque)] = {"n": 1}
        text = _codec.encode(json.dumps({"n": 1}).encode())
        self.store._exchange(self.database, [Statement.bind(_sql.PUT_ITEMS, {
            "rows": json.dumps([[_ns.encode(opaque), "k", text, None, None]]),
            "now": self.clock()})])
        # An item that expires exactly when the grid reads (a read at its expiry does not see
        # it), put earlier than the rest.
        self.clock.advance(-60)
        self.store.put(("g", "expiring"), "k", {"n": 1}, ttl=TTL_MINUTES - 1)
        self.clock.advance(60)
        rows = self.store._exchange(self.database, [Statement.bind(_sql_rows(), {})])[0].dicts()
        self.rowid = {r["ns"]: r["item"] for r in rows}
        self.at = next(r["expires_at"] for r in rows if r["ns"] == _ns.encode(("g", "expiring")))

    def scope(self, prefix: tuple[str, ...], flt: dict[str, Any]) -> dict[str, Any]:
        return {**scope_params(prefix, self.at), "filter": _filters.compile_filter(flt)}


def _sql_rows() -> Any:
    return _ROWS


@pytest.fixture(scope="module")
def grid() -> Iterator[Grid]:
    d1 = local_subject("local")
    yield Grid(d1)
    d1.close()


def _verdicts(result: Any, name: str = "ns") -> dict[str, int]:
    return {row[name]: int(row["verdict"]) for row in result.dicts()}


def _chunks(items: list[Any], n: int) -> Iterator[list[Any]]:
    for at in range(0, len(items), n):
        yield items[at: at + n]


# The filters are checked in PARTS parts (every PARTS-th filter), so that no one test runs
# for long: ./dev mutate leaves out of its runs a test its map measured at over 30 s.
PARTS = 4


@pytest.mark.parametrize("part", range(PARTS))
def test_every_statement_gives_the_same_sound_verdict(grid: Grid, part: int) -> None:
    checked = decided = 0
    scoped = set(grid.values)
    by_item = {item: ns for ns, item in grid.rowid.items()}
    opaque = _ns.encode(("g", "zopaque"))
    everything = json.dumps(list(grid.rowid.values()))
    scopes = []
    for flt in list(filters())[part::PARTS]:
        _filters.check_filter(flt)
        scopes.append((flt, grid.scope(("g",), flt)))
    kept: list[int] = []
    for chunk in _chunks(scopes, 100):
        results = grid.store._exchange(grid.database,
                                       [Statement.bind(_KEPT_COUNT, s) for _, s in chunk])
        kept += [int(r.rows[0][0]) for r in results]
    for chunk in _chunks(list(zip(scopes, kept, strict=True)), 12):
        statements = []
        for (_, scope), n in chunk:
            statements += [
                Statement.bind(_sql.SEARCH_ITEMS_FILTERED, {**scope, "need": -1, "skip": 0}),
                Statement.bind(_sql.RANK_ROWS, {**scope, "whole": 10_000}),
                Statement.bind(_sql.SEARCH_CODES, {**scope, "whole": 0}),
                Statement.bind(_sql.CANDIDATE_ITEMS, {**scope, "items": everything}),
                Statement.bind(_sql.SEARCH_VECTORS_FILTERED, scope),
                # The whole-read threshold's boundary: exactly one of the two reads.
                Statement.bind(_sql.RANK_ROWS, {**scope, "whole": n}),
                Statement.bind(_sql.SEARCH_CODES, {**scope, "whole": n - 1}),
                Statement.bind(_sql.RANK_ROWS, {**scope, "whole": n - 1}),
                Statement.bind(_sql.SEARCH_CODES, {**scope, "whole": n})]
        results = grid.store._exchange(grid.database, statements)
        for at, ((flt, _), n) in enumerate(chunk):
            (counted, whole, codes, candidates, vectors, at_most, more, not_whole,
             not_codes) = results[9 * at: 9 * at + 9]
            sql = _verdicts(counted)
            assert set(sql) <= scoped, flt  # the scope, and what a read sees
            assert n >= len(sql), flt
            for ns, value in grid.values.items():
                want = _filters.matches(value, flt)
                verdict = sql.get(ns, 0)
                checked += 1
                decided += verdict != 1
                assert verdict != 2 or want, f"SQL says {value!r} matches {flt!r}"
                assert verdict != 0 or not want, f"SQL says {value!r} does not match {flt!r}"
            assert sql[opaque] == 1, flt
            assert _verdicts(whole) == sql, ("RANK_ROWS", flt)
            assert {by_item[r[0]]: int(r[1]) for r in codes.rows} == sql, ("SEARCH_CODES", flt)
            assert _verdicts(candidates) == sql, ("CANDIDATE_ITEMS", flt)
            assert {r["ns"] for r in vectors.dicts()} == set(sql) - {opaque}, flt
            assert _verdicts(at_most) == sql, ("RANK_ROWS at the threshold", flt)
            assert len(more.rows) == len(codes.rows), ("SEARCH_CODES past the threshold", flt)
            assert not not_whole.rows and not not_codes.rows, ("the threshold", flt)
    assert checked > 15_000 // PARTS
    assert decided > 0.75 * checked


def test_the_whole_read_threshold_counts_the_scope_itself_and_every_namespace(grid: Grid
                                                                            ) -> None:
    """The count that chooses between the whole read and codes takes the items of the prefix's
    own namespace, not only its descendants', and, for the empty prefix, of every namespace,
    as a read sees them (with `omit_expired` False, :live_at NULL, expired items too): at the
    threshold exactly one of RANK_ROWS and SEARCH_CODES returns rows."""
    # every live item: the grid's, and the three beside it (not the one expiring now, unless
    # the read sees expired items)
    for (prefix, flt, want), live_at in itertools.product(
            [((), None, len(grid.values) + 3), ((), {"n": 1}, None), (("a",), None, 1),
             (("a",), {"n": 1}, 1), (("g",), None, None)], (grid.at, None)):
        if want is not None and prefix == () and live_at is None:
            want += 1
        scope = {**scope_params(prefix, live_at), "filter": _filters.compile_filter(flt)}
        (count,) = grid.store._exchange(grid.database, [Statement.bind(_KEPT_COUNT, scope)])
        n = int(count.rows[0][0])
        assert n == want if want is not None else n > 1, (prefix, flt, live_at)
        whole, no_codes, not_whole, codes = grid.store._exchange(grid.database, [
            Statement.bind(_sql.RANK_ROWS, {**scope, "whole": n}),
            Statement.bind(_sql.SEARCH_CODES, {**scope, "whole": n}),
            Statement.bind(_sql.RANK_ROWS, {**scope, "whole": n - 1}),
            Statement.bind(_sql.SEARCH_CODES, {**scope, "whole": n - 1})])
        assert whole.rows and codes.rows, (prefix, flt, live_at)
        assert not no_codes.rows and not not_whole.rows, (prefix, flt, live_at)


@pytest.mark.parametrize("part", range(2))
def test_the_refresh_of_a_filtered_page_is_the_rows_sql_knows_match(grid: Grid, part: int
                                                                    ) -> None:
    """REFRESH_SEARCH_FILTERED, asked of each row alone (its namespace), starts the TTL again
    of exactly the rows whose verdict is 2, and of none past the page's end."""
    names = [ns for ns in grid.values if ns not in (_ns.encode(("g", "zopaque")), grid.no_ttl)]
    for n, flt in enumerate(filters()):
        # a sixth of the grid's filters (each is one request of a statement a row), in two
        # parts, as PARTS above
        if n % 6 or n // 6 % 2 != part:
            continue
        now = grid.at + 1000 + n
        statements = []
        for ns in names:
            scope = grid.scope(tuple(_ns.decode(ns)), flt)
            statements.append(Statement.bind(_sql.REFRESH_SEARCH_FILTERED, {
                **scope, "need": -1, "skip": 0, "now": now}))
        scope = grid.scope(("g",), flt)
        statements.append(Statement.bind(_sql.SEARCH_ITEMS_FILTERED,
                                         {**scope, "need": -1, "skip": 0}))
        statements.append(Statement.bind(_ROWS, {}))
        *_, counted, rows = grid.store._exchange(grid.database, statements)
        refreshed = {r["ns"] for r in rows.dicts()
                     if r["expires_at"] == now + TTL_MINUTES * 60}
        sure = {ns for ns, v in _verdicts(counted).items() if v == 2} - {grid.no_ttl}
        assert refreshed == sure, flt


def test_the_refresh_of_a_filtered_page_stops_where_sql_cannot_tell(grid: Grid) -> None:
    """REFRESH_SEARCH_FILTERED over the whole grid, for every filter, starts the TTL again of
    the rows of the page [skip, need) that SQL knows match with no row it cannot tell before
    them, as SEARCH_ITEMS_FILTERED counts them (sure_before, unsure_upto), and writes no other
    row (an item without a TTL is not written)."""
    pages = [(-1, 0), (4, 1)]
    total = 0
    for chunk in _chunks(list(enumerate(filters())), 25):
        statements = []
        for n, flt in chunk:
            need, skip = pages[n % 2]
            scope = grid.scope(("g",), flt)
            statements += [
                Statement.bind(_sql.SEARCH_ITEMS_FILTERED, {**scope, "need": -1, "skip": 0}),
                Statement.bind(_sql.REFRESH_SEARCH_FILTERED, {
                    **scope, "need": need, "skip": skip, "now": grid.at + 5000 + n}),
                Statement.bind(_ROWS, {})]
        results = grid.store._exchange(grid.database, statements)
        for at, (n, flt) in enumerate(chunk):
            need, skip = pages[n % 2]
            counted, refresh, rows = results[3 * at: 3 * at + 3]
            want = {r["ns"] for r in counted.dicts() if r["verdict"] == 2
                    and r["unsure_upto"] == 0 and r["sure_before"] >= skip
                    and (need < 0 or r["sure_before"] < need)} - {grid.no_ttl}
            assert refresh.changes == len(want), (flt, need, skip)  # rows written
            refreshed = {r["ns"] for r in rows.dicts()
                         if r["expires_at"] == grid.at + 5000 + n + TTL_MINUTES * 60}
            assert refreshed == want, (flt, need, skip)
            total += len(want)
    assert total > 2000  # (2,485 on this grid)


@pytest.mark.parametrize(("flt", "want"), [({"n": 1}, ["k2", "k3"]), (None, ["k3", "k4"])])
def test_a_filtered_page_refreshes_the_ttl_of_its_own_items_only(
        flt: dict[str, Any] | None, want: list[str]) -> None:
    """The page [offset, offset + limit) of a search, filtered or not, has its TTL started
    again in the search's own request; the matches before and after it, the items the
    filter leaves out, and a newer item of a namespace after the prefix's, keep theirs."""
    d1 = local_subject("local")
    try:
        store = d1.store(ttl={"default_ttl": 1.0})
        ns = ("p",)
        for i in range(5):  # newest first: k4 .. k0
            store.put(ns, f"k{i}", {"n": 1})
            d1.clock.advance(1)
        store.put(ns, "other", {"n": 2})
        d1.clock.advance(1)
        store.put(("q",), "later", {"n": 1})  # newer than the page, out of the prefix
        d1.clock.advance(30)
        page, requests = d1.count(lambda: store.search(ns, filter=flt, limit=2, offset=1))
        assert sorted(it.key for it in page) == want
        assert requests == 1  # refreshed in SQL, beside the read
        d1.clock.advance(40)  # every TTL not started again has run out
        assert sorted(it.key for it in store.search(ns, limit=10, refresh_ttl=False)) == want
        assert store.search(("q",), refresh_ttl=False) == []
    finally:
        d1.close()


@pytest.mark.parametrize("flt", [None, {"n": 1}])
def test_a_page_of_items_put_at_once_refreshes_the_items_it_returns(
        flt: dict[str, Any] | None) -> None:
    """Items put in one batch share their updated_at: a page of them is cut in (namespace,
    key) order, as SqliteStore orders ties, of the prefix's namespaces only, and the TTLs
    started again are those of the items the page returns."""
    d1 = local_subject("local")
    try:
        store = d1.store(ttl={"default_ttl": 1.0})
        store.batch([PutOp(ns, key, {"n": 1}, ttl=1.0)
                     for ns, key in ((("p", "a"), "k2"), (("p", "b"), "k1"), (("p", "a"), "k1"),
                                     (("o",), "k1"))])  # before the prefix, out of it
        d1.clock.advance(30)
        page = store.search(("p",), filter=flt, limit=1)
        assert [(it.namespace, it.key) for it in page] == [(("p", "a"), "k1")]
        d1.clock.advance(40)  # every TTL not started again has run out
        assert [(it.namespace, it.key) for it in store.search(("p",), refresh_ttl=False)] == [
            (("p", "a"), "k1")]
    finally:
        d1.close()


def test_a_sweep_deletes_what_expires_by_now_with_its_vectors_only() -> None:
    """sweep_ttl deletes the items that expire at the store's now or before (SqliteStore's
    `expires_at <= now`), and their vectors; the vectors of the items still live stay."""
    d1 = local_subject("local")
    try:
        def embed(texts: list[str]) -> list[list[float]]:
            return [[1.0, float(len(t)), 0.0] for t in texts]

        store = d1.store(index={"dims": 3, "embed": embed, "fields": ["text"]})
        ns = ("s",)
        store.put(ns, "gone", {"text": "a"}, ttl=1.0)
        store.put(ns, "kept", {"text": "bb"}, ttl=2.0)
        store.put(ns, "always", {"text": "ccc"})
        d1.clock.advance(60)  # "gone" expires exactly now
        assert store.sweep_ttl() == 1
        hits = store.search(ns, query="a", refresh_ttl=False)
        assert {h.key: h.score is not None for h in hits} == {"kept": True, "always": True}
        (left,) = store._exchange(store._database(ns), [Statement.bind(
            q("SELECT key FROM store_vectors ORDER BY key"), {})])
        assert [r[0] for r in left.rows] == ["always", "kept"]
    finally:
        d1.close()


def test_listing_reads_each_namespace_once_while_it_is_live() -> None:
    """LIST_NAMESPACES returns a namespace once however many items it holds (the store names
    each once anyway: this is the bytes of the answer), only those under the listing's
    prefix (the store checks the prefix again), and none whose items expire now."""
    d1 = local_subject("local")
    try:
        store = d1.store()
        store.batch([PutOp(("a",), f"k{i}", {"i": i}) for i in range(3)]
                    + [PutOp(("a", "b"), "k", {})])
        (result,) = store._exchange(store._database(("a",)), [
            Statement.bind(_sql.LIST_NAMESPACES, scope_params((), None))])
        assert sorted(r[0] for r in result.rows) == ['["a","b"]', '["a"]']
        store.put(("b",), "k", {}, ttl=1.0)
        store.put(("c",), "k", {}, ttl=2.0)
        store.put(("0",), "k", {})  # sorts before ("a",)
        (result,) = store._exchange(store._database(("a",)), [
            Statement.bind(_sql.LIST_NAMESPACES, scope_params(("a",), None))])
        assert sorted(r[0] for r in result.rows) == ['["a","b"]', '["a"]']  # the prefix's only
        d1.clock.advance(60)  # ("b",) expires exactly now: a listing no longer sees it
        assert store.list_namespaces() == [("0",), ("a",), ("a", "b"), ("c",)]
        assert store.list_namespaces(prefix=("a",), max_depth=1) == [("a",)]
    finally:
        d1.close()


@pytest.mark.parametrize("path", ["whole", "codes", "exact"])
def test_expired_items_stay_visible_until_swept_when_reads_keep_them(
        path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """With `omit_expired` False every read path sees an expired item until a sweep deletes
    it: the plain search, filtered or not, the search by meaning read whole, as codes then
    candidates, or as the exact scan, with a filter or without, in a namespace and in every
    namespace (the empty prefix), in a namespace whose every item expired, and the listing; a
    filtered read that refreshes starts its TTL again."""
    monkeypatch.setattr(_plan, "WHOLE_MAX", 0 if path == "codes" else _plan.WHOLE_MAX)
    d1 = local_subject("local")
    try:
        def embed(texts: list[str]) -> list[list[float]]:
            return [[1.0, float(len(t)), 0.0] for t in texts]

        store = d1.store(index={"dims": 3, "embed": embed, "fields": ["text"],
                                "exact": path == "exact"},
                         ttl={"default_ttl": 1.0, "omit_expired": False})
        store.put(("e",), "old", {"text": "a", "n": 1})
        store.put(("e",), "kept", {"text": "bb", "n": 1}, ttl=None)
        store.put(("f",), "old", {"text": "a", "n": 1})
        d1.clock.advance(120)
        for query in (None, "a"):
            for flt in (None, {"n": 1}, {"n": {"$gte": 1}}):
                found = store.search(("e",), query=query, filter=flt, refresh_ttl=False)
                assert sorted(it.key for it in found) == ["kept", "old"], (query, flt)
                found = store.search((), query=query, filter=flt, refresh_ttl=False)
                assert sorted((it.namespace, it.key) for it in found) == [
                    (("e",), "kept"), (("e",), "old"), (("f",), "old")], (query, flt)
                found = store.search(("f",), query=query, filter=flt, refresh_ttl=False)
                assert [it.key for it in found] == ["old"], (query, flt)  # all expired
        _, requests = d1.count(lambda: store.search(("e",), query="a", refresh_ttl=False))
        assert requests == (2 if path == "codes" else 1)  # codes, then candidates
        assert store.list_namespaces() == [("e",), ("f",)]
        # A read that refreshes starts an expired item's TTL again (docs/STORE.md).
        assert [it.key for it in store.search(("f",), filter={"n": 1})] == ["old"]
        assert store.sweep_ttl() == 1
        assert [it.key for it in store.search(("e",), query="a", filter={"n": 1})] == ["kept"]
        assert store.list_namespaces() == [("e",), ("f",)]
    finally:
        d1.close()
