"""D1Store and D1Cache against InMemoryStore and InMemoryCache over random sequences of
operations, with the SQL prefilter on: every answer compared, after every step.

A sequence is drawn from a seed: a configuration (one or three databases, with or without
encryption keys, sync or async, omit_expired on or off, an index or none) and steps, each a
batch of puts, deletes, gets, searches (with and without a query, filters of every operator,
nested dicts, lists, numbers beyond 2^53, bools, null, strings that read as numbers) and
listings (prefix, suffix, wildcards, max_depth, limit, offset), odd labels and keys, TTLs under
a clock that moves. A failure names its seed: D1SAVER_DIFF_SEED=<seed> replays that one.

The reference is InMemoryStore for what it defines (which items a filter matches, which
namespaces a listing names, how a query ranks items), with the documented differences of
docs/STORE.md written into the reference model here, nowhere else:
- a comparison InMemoryStore cannot make (float() of None, "abc", a dict) is no match, where
  InMemoryStore fails the whole search (its _apply_operator is wrapped to say False);
- a search without a query pages newest first (updated_at, then namespace text, then key), as
  SqliteStore and PostgresStore order it; InMemoryStore keeps insertion order;
- TTLs (InMemoryStore has none): the model keeps each item's expiry, refreshes what a read
  returns, hides expired items (omit_expired unset/True) or keeps them until a sweep (False);
- a put replaces all of an item's vectors (InMemoryStore keeps those of fields not embedded
  again): the reference deletes an item before putting it again;
- ranked pages may order equal scores differently: compared score by score, ties as sets;
- InMemoryStore lists a namespace a get looked into though it holds nothing: the reference
  forgets empty namespaces.
"""

from __future__ import annotations

import asyncio
import math
import os
import random
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from langgraph.store.base import GetOp, ListNamespacesOp, MatchCondition, PutOp, SearchOp
from langgraph.store.memory import InMemoryStore

from d1saver import D1Cache, D1Store, InvalidInputError, TraceEvent
from d1saver.local import LocalD1, LocalD1Transport
from d1saver.memory import namespaces as _ns
from tests.memory.embeddings import TrigramEmbeddings
from tests.reliability.harness import soak_budget

BASE_URL = "http://d1.local/client/v4"
KEYS = [bytes([31]) * 32]
DIMS = 16

LABELS = ["a", "b", "users", "%", "_", "*", "é", "😀", "a b", "x'y", 'q"', "back\\slash", "ab",
          "A", "a:b", "[x]", "line\nbreak", "日本"]
ITEM_KEYS = ["k", "", "K", "a.b", "%", "_", "é", "😀", " k", "k ", "x" * 300, "'; --", "\\", '"',
             "k2", "k3"]
FIELDS = ["n", "s", "b", "u", "l", "text", "$x", "a.b", 'odd"key', "1x", "é", ""]
SUBFIELDS = ["n", "s", "y", "a.b", "é"]
SCALARS: list[Any] = [
    0, 1, -1, 2, 2.0, 2.5, -0.0, 0.1, 1e-300, 1e20, 10**20, 10**20 + 1, 2**53, 2**53 + 1, 2**63,
    -(2**63), 2**64, 10**30, 1.7976931348623157e308, 5e-324, True, False, None, "", "1", "2",
    "2.5", " 3 ", "inf", "nan", "1e3", "abc", "é", "1_000", "NaN", "-0", "a\x00b", "x" * 50,
    "[]", "{}", "[1]", '{"y":1}', "true", "null"]
OPERANDS: list[Any] = [*SCALARS, math.inf, -math.inf, math.nan, 2.0000000000000004, 0.30000000000000004]
TEXTS = ["coffee with milk", "tea in the evening", "lisbon is sunny", "coffee", "the dog Rex",
         "budget meeting", "green tea", ""]


# --- the reference ------------------------------------------------------------------------------
def _safe_apply(original: Callable[..., bool]) -> Callable[..., bool]:
    def apply(value: Any, operator: str, op_value: Any) -> bool:
        try:
            return original(value, operator, op_value)
        except (TypeError, ValueError, OverflowError):
            return False
    return apply


@dataclass
class Model:
    """What the reference knows beyond InMemoryStore: times, TTLs and page order."""

    omit: bool
    created: dict[tuple[tuple[str, ...], str], float] = field(default_factory=dict)
    updated: dict[tuple[tuple[str, ...], str], float] = field(default_factory=dict)
    expires: dict[tuple[tuple[str, ...], str], float] = field(default_factory=dict)
    ttl: dict[tuple[tuple[str, ...], str], float] = field(default_factory=dict)

    def live(self, where: tuple[tuple[str, ...], str], now: float) -> bool:
        return not self.omit or where not in self.expires or self.expires[where] > now

    def order(self, where: tuple[tuple[str, ...], str]) -> tuple[float, str, str]:
        return (-self.updated[where], _ns.encode(where[0]), where[1])


@dataclass
class Counts:
    sequences: int = 0
    steps: int = 0
    ops: int = 0
    refused: int = 0
    ranked: int = 0
    filtered: int = 0


COUNTS = Counts()


class Run:
    """One sequence: D1Store and the reference side by side."""

    def __init__(self, seed: int) -> None:
        self.seed = seed
        self.rng = random.Random(seed)
        rng = self.rng
        self.databases = rng.choice([1, 3])
        self.keys = rng.random() < 0.35
        self.mode = rng.choice(["sync", "async"])
        self.omit = rng.random() < 0.7
        self.indexed = rng.random() < 0.5
        self.fields = rng.choice([None, ["text"], ["text", "s"]])
        self.now = 1_800_000_000.0
        self.events: list[TraceEvent] = []
        self.engine = LocalD1()
        ids = [f"diff-{uuid.uuid4().hex[:8]}" for _ in range(self.databases)]
        ttl: dict[str, Any] = {"refresh_on_read": True}
        if not self.omit or rng.random() < 0.5:
            ttl["omit_expired"] = self.omit
        index = None
        if self.indexed:
            index = {"dims": DIMS, "embed": TrigramEmbeddings(DIMS)}
            if self.fields is not None:
                index["fields"] = self.fields
        where: dict[str, Any] = ({"database_id": ids[0]} if len(ids) == 1
                                 else {"database_ids": ids})
        self.store = D1Store(account_id="acc", api_token="t", api_base_url=BASE_URL, **where,
                             transport=LocalD1Transport(self.engine), tracer=self.events.append,
                             clock=lambda: self.now, ttl=ttl,  # type: ignore[arg-type]
                             index=index,  # type: ignore[arg-type]
                             encryption_keys=KEYS if self.keys else None)
        ref_index = None if index is None else {**index, "embed": TrigramEmbeddings(DIMS)}
        self.ref = InMemoryStore(index=ref_index)  # type: ignore[arg-type]
        self.model = Model(self.omit)
        self.namespaces = [self._namespace() for _ in range(rng.choice([1, 2, 3, 5]))]
        self.hot = rng.sample(SCALARS, 6)

    def describe(self) -> str:
        return (f"seed {self.seed}: {self.databases} database(s), keys={self.keys}, "
                f"{self.mode}, omit_expired={self.omit}, index={self.indexed} "
                f"fields={self.fields}")

    # -- drawing ----------------------------------------------------------------------------
    def _namespace(self) -> tuple[str, ...]:
        rng = self.rng
        return tuple(rng.choice(LABELS) for _ in range(rng.randint(1, 3)))

    def _scalar(self) -> Any:
        """Mostly from the run's few hot values, so that items share values and filters hit."""
        rng = self.rng
        return rng.choice(self.hot) if rng.random() < 0.7 else rng.choice(SCALARS)

    def _value(self, depth: int = 0) -> Any:
        rng = self.rng
        r = rng.random()
        if depth < 2 and r < 0.15:
            return {rng.choice(SUBFIELDS): self._value(depth + 1)
                    for _ in range(rng.randint(0, 3))}
        if depth < 2 and r < 0.27:
            return [self._value(depth + 1) for _ in range(rng.randint(0, 3))]
        return self._scalar()

    def _item(self) -> dict[str, Any]:
        rng = self.rng
        fields = FIELDS if rng.random() < 0.2 else FIELDS[:5]
        out = {rng.choice(fields): self._value() for _ in range(rng.randint(0, 4))}
        if rng.random() < 0.6:
            out["text"] = rng.choice(TEXTS) + ("" if rng.random() < 0.5 else f" {rng.randint(0, 9)}")
        if rng.random() < 0.02:
            out["pad"] = "padding " * 300_000  # compressed: opaque to SQL
        return out

    def _stored(self, prefix: tuple[str, ...]) -> dict[str, Any] | None:
        items = [i for ns, items in self.ref._data.items() if ns[: len(prefix)] == prefix
                 for i in items.values()]
        return self.rng.choice(items).value if items else None

    def _condition(self, depth: int = 0) -> Any:
        """A condition drawn blind: often matches nothing."""
        rng = self.rng
        r = rng.random()
        if r < 0.3:
            return self._scalar()
        if r < 0.6:
            ops = rng.sample(["$eq", "$ne", "$gt", "$gte", "$lt", "$lte"], rng.randint(1, 2))
            return {op: (self._value(1) if op in ("$eq", "$ne") and rng.random() < 0.25
                         else rng.choice(OPERANDS)) for op in ops}
        if r < 0.75 and depth < 2:
            return {rng.choice(SUBFIELDS): self._condition(depth + 1)
                    for _ in range(rng.randint(0, 2))}
        if r < 0.85 and depth < 2:
            return [self._condition(depth + 1) for _ in range(rng.randint(0, 2))]
        return self._value()

    def _near(self, x: Any) -> Any:
        """A value equal to x in another type, or just beside it."""
        rng = self.rng
        if isinstance(x, bool):
            return rng.choice([x, int(x), float(x), not x])
        if isinstance(x, int):
            try:
                as_float = float(x)
            except OverflowError:
                as_float = x
            return rng.choice([x, as_float, x + 1, x - 1, str(x)])
        if isinstance(x, float):
            return rng.choice([x, math.nextafter(x, math.inf), math.nextafter(x, -math.inf),
                               int(x) if x.is_integer() and abs(x) < 1e300 else x, repr(x)])
        return x

    def _derived(self, x: Any, depth: int = 0) -> Any:
        """A condition drawn from a stored value: it matches that item, or only just not."""
        rng = self.rng
        r = rng.random()
        if isinstance(x, dict):
            if r < 0.4 and depth < 2:
                keys = rng.sample(sorted(x), rng.randint(0, len(x)))
                out = {k: self._derived(x[k], depth + 1) for k in keys}
                if rng.random() < 0.2:
                    out[rng.choice(SUBFIELDS)] = None
                return out
            other = dict(x)
            if other and rng.random() < 0.5:
                other.pop(rng.choice(sorted(other)))
            if rng.random() < 0.5:
                other[rng.choice(SUBFIELDS)] = rng.choice([None, self._scalar()])
            if r < 0.6:
                return {"$eq": x}
            if r < 0.7:
                return {"$ne": x}
            if r < 0.85:
                return {"$eq": other}
            return {"$ne": other}
        if isinstance(x, list):
            if r < 0.35 and depth < 2:
                return [self._derived(v, depth + 1) for v in x]
            if r < 0.6:
                return x
            if r < 0.8:
                return {"$eq": x if rng.random() < 0.8 else x[:-1]}
            return {"$ne": x}
        if r < 0.35:
            return self._near(x)
        if r < 0.55:
            return {rng.choice(["$eq", "$ne"]): self._near(x)}
        if r < 0.9:
            ops = rng.sample(["$gt", "$gte", "$lt", "$lte"], rng.randint(1, 2))
            return {op: (self._near(x) if rng.random() < 0.85
                         else rng.choice([math.inf, -math.inf, math.nan])) for op in ops}
        return None

    def _filter(self, prefix: tuple[str, ...]) -> dict[str, Any] | None:
        """None, a blind filter, or (mostly) one drawn from an item under the prefix."""
        rng = self.rng
        if rng.random() < 0.2:
            return None
        stored = self._stored(prefix)
        if stored is None or rng.random() < 0.2:
            return {rng.choice(FIELDS): self._condition() for _ in range(rng.randint(1, 2))}
        out: dict[str, Any] = {}
        for _ in range(1 if rng.random() < 0.75 else 2):
            name = rng.choice(sorted(stored) + FIELDS[:3]) if stored else rng.choice(FIELDS)
            out[name] = self._derived(stored.get(name))
        return out

    def _prefix(self) -> tuple[str, ...]:
        rng = self.rng
        if rng.random() < 0.25:
            return ()
        ns = rng.choice(self.namespaces)
        return ns[: rng.randint(1, len(ns))]

    def _ttl(self) -> float | None:
        r = self.rng.random()
        return None if r < 0.7 else self.rng.choice([0.5, 1, 2, 1e-3, 3.5, 10])

    def _op(self) -> Any:
        rng = self.rng
        r = rng.random()
        ns = rng.choice(self.namespaces)
        if r < 0.4:
            index: Any = rng.choice([None, None, False, ["text"], ["s", "text"]])
            return PutOp(ns, rng.choice(ITEM_KEYS), self._item(), index=index, ttl=self._ttl())
        if r < 0.45:
            return PutOp(ns, rng.choice(ITEM_KEYS), None)
        if r < 0.57:
            return GetOp(ns, rng.choice(ITEM_KEYS), refresh_ttl=rng.random() < 0.5)
        if r < 0.9:
            query = (rng.choice(TEXTS) if self.indexed and rng.random() < 0.5 else None)
            prefix = self._prefix()
            return SearchOp(prefix, self._filter(prefix), rng.choice([1, 2, 3, 5, 10, 100]),
                            rng.choice([0, 0, 1, 2, 5]), query, rng.random() < 0.5)
        conds = []
        if rng.random() < 0.5:
            path = list(self._prefix())
            if path and rng.random() < 0.3:
                path[rng.randrange(len(path))] = "*"
            conds.append(MatchCondition("prefix", tuple(path)))
        if rng.random() < 0.3:
            conds.append(MatchCondition("suffix", (rng.choice([*LABELS, "*"]),)))
        return ListNamespacesOp(tuple(conds) or None, rng.choice([None, 1, 2, 3]),
                                rng.randint(1, 8), rng.choice([0, 0, 1, 3]))

    def _bad_op(self) -> Any:
        rng = self.rng
        ns = rng.choice(self.namespaces)
        return rng.choice([
            PutOp(ns, "nul\x00key", {"v": 1}),
            PutOp(ns, "k", {"v": 1}, ttl=rng.choice([0, -1, math.inf, math.nan, True])),
            SearchOp(ns, {"n": {"$gt": 0, "x": 1}}),
            SearchOp(ns, {"n": {"$in": [1]}}),
            GetOp(ns, "nul\x00"),
        ])

    # -- the reference -----------------------------------------------------------------------
    def _expire(self) -> None:
        """Items the store no longer shows leave the reference (hidden at once, or swept)."""
        for where in list(self.model.updated):
            if not self.model.live(where, self.now):
                self._forget(where)

    def _forget(self, where: tuple[tuple[str, ...], str]) -> None:
        self.ref.batch([PutOp(where[0], where[1], None)])
        for table in (self.model.created, self.model.updated, self.model.expires, self.model.ttl):
            table.pop(where, None)
        for ns in [ns for ns, items in self.ref._data.items() if not items]:
            del self.ref._data[ns]

    def _reads(self, ops: list[Any]) -> list[Any]:
        """The answers the reference gives for one batch's reads (before its puts)."""
        self._expire()
        answers: list[Any] = []
        for op in ops:
            if isinstance(op, GetOp):
                known = (op.namespace, op.key) in self.model.updated
                item = self.ref.get(op.namespace, op.key) if known else None
                answers.append(None if item is None else ("item", op.namespace, op.key,
                                                          item.value))
            elif isinstance(op, SearchOp):
                answers.append(self._ref_search(op))
            elif isinstance(op, ListNamespacesOp):
                answers.append(self.ref.batch([op])[0])
            else:
                answers.append(None)
        return answers

    def _writes(self, ops: list[Any], got: list[Any]) -> None:
        """What one batch changes: the TTLs its reads refresh (the pages D1 returned, which
        the comparison found right), then its puts, the last of each key."""
        now = self.now
        for op, answer in zip(ops, got, strict=True):
            if isinstance(op, GetOp) and op.refresh_ttl and answer is not None:
                self._refresh((op.namespace, op.key), now)
            elif isinstance(op, SearchOp) and op.refresh_ttl:
                for item in answer:
                    self._refresh((item.namespace, item.key), now)
        last: dict[tuple[tuple[str, ...], str], PutOp] = {}
        for op in ops:
            if isinstance(op, PutOp):
                last.pop((op.namespace, op.key), None)
                last[(op.namespace, op.key)] = op
        for where, op in last.items():
            if op.value is None:
                self._forget(where)
                continue
            old = self.model.expires.get(where)
            fresh = where not in self.model.created or (old is not None and old <= now)
            self.ref.batch([PutOp(where[0], where[1], None)])  # vectors replaced, not merged
            self.ref.batch([op])
            if fresh:
                self.model.created[where] = now
            self.model.updated[where] = now
            self.model.expires.pop(where, None)
            self.model.ttl.pop(where, None)
            if op.ttl is not None:
                self.model.expires[where] = now + op.ttl * 60
                self.model.ttl[where] = op.ttl

    def _refresh(self, where: tuple[tuple[str, ...], str], now: float) -> None:
        if where in self.model.ttl and self.model.live(where, now):
            self.model.expires[where] = now + self.model.ttl[where] * 60

    def _ref_search(self, op: SearchOp) -> dict[str, Any]:
        everything = SearchOp(op.namespace_prefix, op.filter, 10**6, 0, op.query, False)
        found = self.ref.batch([everything])[0]
        if not op.query or not self.indexed:
            found.sort(key=lambda i: self.model.order((i.namespace, i.key)))
            page = found[op.offset: op.offset + op.limit]
            return {"ranked": False,
                    "items": [("item", i.namespace, i.key, i.value) for i in page]}
        scored = [(i.score, (i.namespace, i.key), i.value) for i in found if i.score is not None]
        scoreless = {(i.namespace, i.key) for i in found if i.score is None}
        kept = scored[op.offset: op.offset + op.limit]
        fill = min(len(scoreless), op.limit - len(kept))
        return {"ranked": True, "scored": scored, "scoreless": scoreless, "kept": kept,
                "fill": fill}

    # -- comparing -----------------------------------------------------------------------------
    def _compare(self, ops: list[Any], got: list[Any], want: list[Any]) -> None:
        for n, (op, g, w) in enumerate(zip(ops, got, want, strict=True)):
            where = f"{self.describe()}, op {n} {op!r}"
            if isinstance(op, GetOp):
                assert (None if g is None else ("item", g.namespace, g.key, g.value)) == w, where
                if g is not None:
                    self._times(g, where)
            elif isinstance(op, SearchOp):
                if w["ranked"]:
                    self._ranked(g, w, where)
                else:
                    assert [("item", i.namespace, i.key, i.value) for i in g] == w["items"], where
                for i in g:
                    self._times(i, where)
            elif isinstance(op, ListNamespacesOp):
                assert g == w, where
            else:
                assert g is None, where

    def _times(self, item: Any, where: str) -> None:
        key = (item.namespace, item.key)
        assert item.created_at.timestamp() == pytest.approx(self.model.created[key], abs=1e-5), where
        assert item.updated_at.timestamp() == pytest.approx(self.model.updated[key], abs=1e-5), where

    def _ranked(self, got: list[Any], want: dict[str, Any], where: str) -> None:
        COUNTS.ranked += 1
        scores = {w: s for s, w, _ in want["scored"]}
        values = {w: v for _, w, v in want["scored"]}
        scored = [i for i in got if i.score is not None]
        unscored = [i for i in got if i.score is None]
        assert got[: len(scored)] == scored, where  # scored items first
        assert len(scored) == len(want["kept"]), where
        assert len(unscored) == want["fill"], where
        tol = 1e-5
        for i, (s, _, _) in zip(scored, want["kept"], strict=True):
            w = (i.namespace, i.key)
            assert w in scores and math.isclose(i.score, scores[w], abs_tol=tol), where
            assert math.isclose(i.score, s, abs_tol=tol), where  # the same score at each place
            assert i.value == values[w], where
        if scored:
            top, bottom = scored[0].score, scored[-1].score
            inside = {w for w, s in scores.items() if bottom + tol < s < top - tol}
            assert inside <= {(i.namespace, i.key) for i in scored}, where
        assert len({(i.namespace, i.key) for i in got}) == len(got), where
        for i in unscored:
            assert (i.namespace, i.key) in want["scoreless"], where

    # -- running --------------------------------------------------------------------------------
    def step(self) -> None:
        rng = self.rng
        if rng.random() < 0.4:
            self.now += rng.choice([0.5, 1, 15, 30, 59.5, 60, 61, 90, 150])
        if not self.omit and rng.random() < 0.08:
            self._sweep()
            return
        if rng.random() < 0.05:
            self._refused()
            return
        if rng.random() < 0.25:  # a bulk put: namespaces with enough items for pages to matter
            ops = [PutOp(rng.choice(self.namespaces), rng.choice(ITEM_KEYS), self._item(),
                         ttl=self._ttl()) for _ in range(rng.randint(3, 8))]
        else:
            ops = [self._op() for _ in range(rng.choice([1, 1, 1, 2, 3, 4]))]
        want = self._reads(ops)
        got = self._call(ops)
        COUNTS.ops += len(ops)
        COUNTS.filtered += sum(1 for op in ops if isinstance(op, SearchOp) and op.filter)
        self._compare(ops, got, want)
        self._writes(ops, got)

    def _call(self, ops: list[Any]) -> list[Any]:
        if self.mode == "sync":
            return self.store.batch(ops)
        return self.loop.run_until_complete(self.store.abatch(ops))

    def _sweep(self) -> None:
        expired = [w for w, at in self.model.expires.items() if at <= self.now]
        swept = (self.store.sweep_ttl() if self.mode == "sync"
                 else self.loop.run_until_complete(self.store.asweep_ttl()))
        assert swept == len(expired), self.describe()
        for where in expired:
            self._forget(where)

    def _refused(self) -> None:
        ops = [self._op() for _ in range(self.rng.randint(0, 2))]
        ops = [op for op in ops if isinstance(op, PutOp)] + [self._bad_op()]
        self.rng.shuffle(ops)
        before = len(self.events)
        with pytest.raises(InvalidInputError):
            self._call(ops)
        assert len(self.events) == before, self.describe()
        COUNTS.refused += 1

    def check_everything(self) -> None:
        """The whole content, read without refreshing anything."""
        self._expire()
        op = SearchOp((), None, 10**6, 0, None, False)
        got = self._call([op])[0]
        want = sorted(((w[0], w[1]) for w in self.model.updated), key=self.model.order)
        assert [(i.namespace, i.key) for i in got] == want, self.describe()
        values = {(i.namespace, i.key): i.value for i in self.ref.search((), limit=10**6)}
        assert all(i.value == values[(i.namespace, i.key)] for i in got), self.describe()

    def run(self, steps: int) -> None:
        self.loop = asyncio.new_event_loop()
        try:
            for n in range(steps):
                self.step()
                COUNTS.steps += 1
                if n % 10 == 9:
                    self.check_everything()
            self.check_everything()
            COUNTS.sequences += 1
        finally:
            if self.mode == "async":
                self.loop.run_until_complete(self.store.aclose())
                self.loop.run_until_complete(self.loop.shutdown_asyncgens())
            self.store.close()
            self.loop.close()
            self.engine.close()


@pytest.fixture
def safe_reference(monkeypatch: pytest.MonkeyPatch) -> None:
    import langgraph.store.memory as memory

    monkeypatch.setattr(memory, "_apply_operator", _safe_apply(memory._apply_operator))
    monkeypatch.setattr(memory.InMemoryStore, "_insertinmem_store", _insert_each_text)


def _insert_each_text(self: Any, to_embed: dict[str, list[tuple[tuple[str, ...], str, str]]],
                      embeddings: list[list[float]]) -> None:
    """InMemoryStore embeds each distinct text once but then pairs the embeddings with every
    path, so an item whose two indexed paths hold the same text raises ValueError ("Number of
    embeddings (1) does not match number of indices (2)"): the reference gives each path its
    text's embedding, as it means to (D1Store stores one vector per path)."""
    for (_text, paths), embedding in zip(to_embed.items(), embeddings, strict=True):
        for ns, key, path in paths:
            self._vectors[ns][key][path] = embedding


def _seeds(request: pytest.FixtureRequest, ci: int, soak: int) -> list[int]:
    one = os.environ.get("D1SAVER_DIFF_SEED")
    if one:
        return [int(one)]
    n = soak_budget(request, ci=ci, soak=soak)
    ci_run = not (request.config.getoption("--soak") or os.environ.get("D1SAVER_SOAK"))
    base = 0 if ci_run else random.SystemRandom().randrange(10**9)
    return [base + i for i in range(n)]


def test_store_against_in_memory_store(request: pytest.FixtureRequest,
                                       safe_reference: None) -> None:
    before = Counts(**vars(COUNTS))
    steps = 40
    for seed in _seeds(request, ci=16, soak=600):
        Run(seed).run(steps)
    print(f"\ndifferential store: {COUNTS.sequences - before.sequences} sequences, "
          f"{COUNTS.steps - before.steps} steps, {COUNTS.ops - before.ops} operations "
          f"({COUNTS.filtered - before.filtered} filtered searches, "
          f"{COUNTS.ranked - before.ranked} ranked, {COUNTS.refused - before.refused} refused "
          f"batches), 0 discrepancies")


# --- the cache ------------------------------------------------------------------------------
CACHE_LABELS = [*LABELS, "__pregel_ns_writes", "__main__.double", "a.b", "", "."]
CACHE_VALUES: list[Any] = [1, "x", None, {"a": [1, 2.5, None]}, [True, False], 2**60,
                           {"nested": {"é": "😀"}}, b"bytes", "q\"\\", 2.0]


class FakeDatetime:
    """langgraph.cache.memory's `datetime` module, on the run's clock."""

    def __init__(self, run: CacheRun) -> None:
        import datetime as real

        self.timedelta, self.timezone, self._real, self._run = (real.timedelta, real.timezone,
                                                                 real, run)
        outer = self

        class _DT(real.datetime):
            @classmethod
            def now(cls, tz: Any = None) -> Any:
                return real.datetime.fromtimestamp(outer._run.now, real.timezone.utc)

        self.datetime = _DT


class CacheRun:
    def __init__(self, seed: int) -> None:
        from langgraph.cache.memory import InMemoryCache

        self.seed = seed
        self.rng = random.Random(seed)
        self.now = 1_800_000_000.0
        self.mode = self.rng.choice(["sync", "async"])
        self.databases = self.rng.choice([1, 3])
        self.keys = self.rng.random() < 0.35
        self.events: list[TraceEvent] = []
        self.engine = LocalD1()
        ids = [f"diffc-{uuid.uuid4().hex[:8]}" for _ in range(self.databases)]
        where: dict[str, Any] = ({"database_id": ids[0]} if len(ids) == 1
                                 else {"database_ids": ids})
        self.cache: D1Cache[Any] = D1Cache(
            account_id="acc", api_token="t", api_base_url=BASE_URL, **where,
            transport=LocalD1Transport(self.engine), tracer=self.events.append,
            clock=lambda: self.now, encryption_keys=KEYS if self.keys else None)
        self.ref: Any = InMemoryCache()
        self.namespaces = [tuple(self.rng.choice(CACHE_LABELS) for _ in range(self.rng.randint(0, 3)))
                           for _ in range(5)]

    def describe(self) -> str:
        return f"cache seed {self.seed}: {self.databases} database(s), keys={self.keys}, {self.mode}"

    def _key(self) -> tuple[tuple[str, ...], str]:
        return (self.rng.choice(self.namespaces), self.rng.choice(ITEM_KEYS))

    def _call(self, name: str, *args: Any) -> Any:
        if self.mode == "sync":
            return getattr(self.cache, name)(*args)
        return self.loop.run_until_complete(getattr(self.cache, "a" + name)(*args))

    def step(self) -> None:
        rng = self.rng
        if rng.random() < 0.4:
            self.now += rng.choice([0.5, 1, 2, 5, 30])
        r = rng.random()
        if r < 0.45:
            pairs = {self._key(): (rng.choice(CACHE_VALUES), rng.choice([None, 1, 2, 5, 0.5, 60]))
                     for _ in range(rng.randint(1, 4))}
            self.ref.set(pairs)
            self._call("set", pairs)
        elif r < 0.85:
            keys = list(dict.fromkeys(self._key() for _ in range(rng.randint(0, 5))))
            want = self.ref.get(keys)
            got = self._call("get", keys)
            assert got == want, f"{self.describe()}: get {keys!r}"
        elif r < 0.95:
            spaces = list(dict.fromkeys(rng.choice(self.namespaces)
                                        for _ in range(rng.randint(0, 2))))
            self.ref.clear(spaces)
            self._call("clear", spaces)
        else:
            before = len(self.events)
            bad = rng.choice([{(rng.choice(self.namespaces), "k\x00"): (1, None)},
                              {self._key(): (1, rng.choice([0, -1, math.inf, True]))}])
            with pytest.raises(InvalidInputError):
                self._call("set", bad)
            assert len(self.events) == before
        COUNTS.ops += 1

    def run(self, steps: int) -> None:
        self.loop = asyncio.new_event_loop()
        try:
            for _ in range(steps):
                self.step()
                COUNTS.steps += 1
            everything = list(dict.fromkeys((ns, k) for ns in self.namespaces for k in ITEM_KEYS))
            assert self._call("get", everything) == self.ref.get(everything), self.describe()
            COUNTS.sequences += 1
        finally:
            if self.mode == "async":
                self.loop.run_until_complete(self.cache.aclose())
                self.loop.run_until_complete(self.loop.shutdown_asyncgens())
            self.cache.close()
            self.loop.close()
            self.engine.close()


def test_cache_against_in_memory_cache(request: pytest.FixtureRequest,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    import langgraph.cache.memory as memory

    before = Counts(**vars(COUNTS))
    for seed in _seeds(request, ci=10, soak=400):
        run = CacheRun(seed)
        monkeypatch.setattr(memory, "datetime", FakeDatetime(run))
        run.run(40)
    print(f"\ndifferential cache: {COUNTS.sequences - before.sequences} sequences, "
          f"{COUNTS.steps - before.steps} steps, {COUNTS.ops - before.ops} operations, "
          f"0 discrepancies")


def test_the_reference_model_can_fail(safe_reference: None) -> None:
    """The comparison is not vacuous: a store that drops the last item of every filtered page
    is caught (the kind of bug issue 30 found)."""

    class ShortPages(D1Store):
        def batch(self, ops: Any) -> list[Any]:
            ops = list(ops)
            out = super().batch(ops)
            return [r[:-1] if isinstance(op, SearchOp) and op.filter and r else r
                    for op, r in zip(ops, out, strict=True)]

    caught = 0
    for seed in range(12):
        run = Run(seed)
        run.mode = "sync"
        run.store.__class__ = ShortPages
        try:
            run.run(40)
        except AssertionError:
            caught += 1
    assert caught > 0
