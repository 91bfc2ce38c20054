"""Interleavings (issue 20): two operations stepped against one local engine in every order of
their requests (tests/interleave.py), or a seeded sample where there are too many, for each
pair among a live graph's puts (sync and async durability), delete_thread, prune,
copy_thread, compaction, rekey and rebalance; the invariants checked after each:

- delete wins: what delete_thread, prune or compaction deleted (checkpoints acknowledged
  before it began, other than the newest and the tagged for retention) is not readable;
- no hidden leftovers: no staged rows, `check` clean;
- every thread readable, and a surviving checkpoint's DeltaChannel history unchanged.
"""

from __future__ import annotations

import itertools
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest

from d1saver.compaction import fleet as compaction_fleet
from d1saver.compaction.rebalance import rebalance
from d1saver.compaction.rekey import rekey
from d1saver import D1Saver, FleetError, LeaseHeldError
from tests import interleave
from tests.reliability import harness
from tests.reliability.harness import DATABASES, K1, K2, World, cfg, new_id

OLD = DATABASES[:1]
NEW = DATABASES[:2]
# Threads whose home moves from dba to dbb when the layout grows: rebalance moves them.
A, B, C = harness.MOVER_A, harness.MOVER_B, harness.STAYER_C
COUNTS: dict[str, int] = {"interleavings": 0, "pairs": 0, "exhaustive": 0}


@dataclass
class Race:
    """One schedule's world: the savers' layout, what the actors saw, for the checks."""

    world: World
    moving: bool  # the layout grows from OLD to NEW during the run (rebalance is an actor)
    before: dict[str, Any] = field(default_factory=dict)
    acked: dict[str, int] = field(default_factory=dict)  # checkpoint id -> requests done then
    starts: dict[str, int] = field(default_factory=dict)  # deleter name -> its first request
    done: set[str] = field(default_factory=set)  # deleters that completed (not refused)
    clock: Callable[[], int] = lambda: 0

    def saver(self, transport: Any = None, **kwargs: Any) -> D1Saver:
        # One request at a time per actor: the schedule, not a thread pool, orders them.
        kwargs.setdefault("fleet_concurrency", 1)
        if self.moving:
            return self.world.saver(NEW, previous=OLD, keys=[K2, K1], transport=transport,
                                    **kwargs)
        return self.world.saver(OLD, keys=[K2, K1], transport=transport, **kwargs)


def _setup(world: World) -> None:
    s = world.saver(OLD, keys=[K1])
    for t, delta, start in ((A, True, 0), (B, False, 100)):
        parent = None
        for i in range(4):
            k = start + i
            values: dict[str, Any] = {"x": f"v{k}"}
            if delta and i % 3 == 0:
                values["messages"] = [f"seed {k}"]
            if i == 3:
                values["long"] = [f"message {k}.{j} " + "lorem ipsum " * 15 for j in range(10)]
            cp, md = harness.make_checkpoint(new_id(k), i, values, delta=delta)
            conf = s.put(cfg(t, parent), cp, md, {})
            s.put_writes(conf, [("messages", [f"m{k}"])], f"task-{k}")
            parent = conf["configurable"]["checkpoint_id"]
        s.tag(cfg(t, new_id(start + 1)), "approved")


# --- the actors -------------------------------------------------------------------------------


def _puts(race: Race, transport: Any, *, durability: str) -> None:
    """A live graph's next two steps on A: sync stores each checkpoint, then its writes;
    async sends a step's writes before the checkpoint they belong to is stored."""
    saver = race.saver(transport)
    parent = new_id(3)
    for k in (10, 11):
        cp, md = harness.make_checkpoint(new_id(k), k, {"x": f"v{k}"}, delta=True)
        writes = [("messages", [f"m{k}"])]
        if durability == "async":
            saver.put_writes(cfg(A, new_id(k)), writes, f"task-{k}")
        saver.put(cfg(A, parent), cp, md, {})
        race.acked[new_id(k)] = race.clock()
        if durability == "sync":
            saver.put_writes(cfg(A, new_id(k)), writes, f"task-{k}")
        parent = new_id(k)


def _deleting(name: str, race: Race, transport: Any, fn: Callable[[D1Saver], Any]) -> None:
    race.starts[name] = race.clock()
    if fn(race.saver(transport)) is not False:
        race.done.add(name)


def _maintenance(fn: Callable[[], Any]) -> bool:
    """False if refused: compaction, rekey and rebalance take turns (one lease)."""
    try:
        fn()
    except LeaseHeldError:
        return False
    except FleetError as exc:
        if not all(isinstance(e, LeaseHeldError) for e in exc.errors.values()):
            raise
        return False
    return True


ACTORS: dict[str, Callable[[Race, Any], Any]] = {
    "puts_sync": lambda r, tr: _puts(r, tr, durability="sync"),
    "puts_async": lambda r, tr: _puts(r, tr, durability="async"),
    "delete_thread": lambda r, tr: _deleting("delete", r, tr, lambda s: s.delete_thread(A)),
    "prune": lambda r, tr: _deleting("prune", r, tr, lambda s: s.prune([A])),
    "copy_thread": lambda r, tr: r.saver(tr).copy_thread(A, C),
    "compaction": lambda r, tr: _deleting("compact", r, tr, lambda s: _maintenance(
        lambda: compaction_fleet.compact(s, keep=1))),
    "rekey": lambda r, tr: _maintenance(lambda: rekey(r.saver(tr), batch_rows=3)),
    "rebalance": lambda r, tr: _maintenance(lambda: rebalance(
        r.world.saver(NEW, previous=OLD, keys=[K2, K1], transport=tr, fleet_concurrency=1),
        concurrency=1)),
}
PAIRS = [p for p in itertools.combinations(ACTORS, 2) if set(p) != {"puts_sync", "puts_async"}]


# --- the checks -------------------------------------------------------------------------------


def _check(race: Race, pair: Sequence[str], run: interleave.Run) -> None:
    for name, err in zip(pair, run.errors, strict=True):
        assert err is None, (pair, name, run.order, repr(err))
    world = race.world
    reader = race.saver()
    if race.moving:
        list(reader.list(None))  # a merged list works during and after a move
    threads = [A, B, C]
    seen = harness.observe(reader, threads)
    ids = {t: {v[0] for v in seen[t]["list"]} for t in threads}
    tagged = {new_id(1)}
    # Delete wins: what a delete removed never reads again.
    if "delete" in race.done:
        gone = {new_id(k) for k in range(4)} | {
            c for c, at in race.acked.items() if at <= race.starts["delete"]}
        assert not ids[A] & gone, (pair, run.order, ids[A] & gone)
    for name in ("prune", "compact"):
        if name in race.done:
            existed = sorted({new_id(k) for k in range(4)} | {
                c for c, at in race.acked.items() if at <= race.starts[name]})
            gone = set(existed[:-1]) - tagged
            assert not ids[A] & gone, (pair, name, run.order, ids[A] & gone)
    # Every thread readable; a surviving checkpoint's DeltaChannel history never changes.
    for t in threads:
        for cid, hist in seen[t].get("delta", {}).items():
            if cid in race.before[t].get("delta", {}):
                assert hist == race.before[t]["delta"][cid], (pair, run.order, t, cid)
    # Nothing acknowledged is lost unless deleted.
    if not race.starts:
        for cid in race.acked:
            assert cid in ids[A], (pair, run.order, cid)
    if "copy_thread" in pair and ids[C]:
        assert ids[C] <= ids[A] | {new_id(k) for k in range(4)} | set(race.acked)
    # No hidden leftovers.
    assert world.staged() == [], (pair, run.order)
    everywhere = race.saver() if not race.moving else world.saver(
        NEW, previous=OLD, keys=[K2, K1])
    assert compaction_fleet.check_chunks(everywhere) == [], (pair, run.order)


def _maker(pair: Sequence[str]) -> Callable[[], tuple[list[interleave.Actor], Any, Any]]:
    def make() -> tuple[list[interleave.Actor], Any, Any]:
        world = World()
        _setup(world)
        race = Race(world, moving="rebalance" in pair)
        race.before = harness.observe(race.saver(), [A, B, C])
        counter = _Clock(world.transport)
        race.clock = counter.value

        def check(run: interleave.Run) -> None:
            try:
                _check(race, pair, run)
            finally:
                world.close()

        return ([(lambda tr, name=name: ACTORS[name](race, tr)) for name in pair],
                counter, check)

    return make


class _Clock:
    """The shared transport under the gates: counts the requests that have run."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.n = inner, 0

    def value(self) -> int:
        return self.n

    def handle_request(self, request: Any) -> Any:
        response = self.inner.handle_request(request)
        self.n += 1
        return response


@pytest.mark.parametrize("pair", PAIRS, ids=["+".join(p) for p in PAIRS])
def test_interleavings(pair: tuple[str, str], request: pytest.FixtureRequest) -> None:
    budget = harness.soak_budget(request, ci=4, soak=300)
    runs, exhaustive = interleave.schedules(_maker(pair), budget, seed=zlib.crc32("+".join(pair).encode()))
    COUNTS["interleavings"] += runs
    COUNTS["pairs"] += 1
    COUNTS["exhaustive"] += exhaustive
    print(f"\ninterleavings: {'+'.join(pair)}: {runs} "
          f"({'every order' if exhaustive else 'sampled'})")


# --- memory (issue 30, fact 5): D1Store and D1Cache while rebalance moves them -----------------

# Users whose home moves from dba to dbb when the layout grows (rebalance moves their items).
U = harness.named("user-", NEW, NEW[1])
STAY = harness.named("stay-", NEW, NEW[0])
NODE = ("__pregel_ns_writes", "node")
OLD_VALUE, NEW_VALUE = {"v": "old"}, {"v": "new"}


@dataclass
class MemoryRace:
    world: World
    results: dict[str, Any] = field(default_factory=dict)

    def store(self, transport: Any = None, **kwargs: Any) -> Any:
        from d1saver import D1Store
        return D1Store(**self._where(transport), **kwargs)

    def cache(self, transport: Any = None) -> Any:
        from d1saver import D1Cache
        return D1Cache(**self._where(transport))

    def _where(self, transport: Any) -> dict[str, Any]:
        return dict(account_id="acc", api_token="test-token", api_base_url=harness.BASE_URL,
                    transport=transport or self.world.transport, database_ids=list(NEW),
                    previous_database_ids=list(OLD), fleet_concurrency=1,
                    encryption_keys=[K2, K1])


def _memory_setup(world: World) -> None:
    from d1saver import D1Cache, D1Store
    kw = dict(account_id="acc", api_token="test-token", api_base_url=harness.BASE_URL,
              transport=world.transport, database_id=OLD[0], encryption_keys=[K1])
    with D1Store(**kw) as store, D1Cache(**kw) as cache:
        for u in (U, STAY):
            store.put((u, "m"), "k", OLD_VALUE)
            store.put((u, "m"), "other", {"v": "other"})
        cache.set({(NODE, f"k{i}"): ("old", None) for i in range(4)})


MEMORY_ACTORS: dict[str, Callable[[MemoryRace, Any], Any]] = {
    "memory_put": lambda r, tr: r.results.__setitem__("put", r.store(tr).put((U, "m"), "k",
                                                                            NEW_VALUE)),
    "memory_delete": lambda r, tr: r.results.__setitem__("delete", r.store(tr).delete(
        (U, "m"), "k")),
    "memory_read": lambda r, tr: r.results.__setitem__("read", (
        r.store(tr).get((U, "m"), "k"), [i.key for i in r.store(tr).search((U,))])),
    "cache_set": lambda r, tr: r.results.__setitem__("cache_set", r.cache(tr).set(
        {(NODE, "k0"): ("new", None)})),
    "cache_clear": lambda r, tr: r.results.__setitem__("cache_clear", r.cache(tr).clear([NODE])),
    "rebalance": lambda r, tr: _maintenance(lambda: rebalance(
        r.world.saver(NEW, previous=OLD, keys=[K2, K1], transport=tr, fleet_concurrency=1),
        concurrency=1)),
    "rekey": lambda r, tr: _maintenance(lambda: rekey(
        r.world.saver(NEW, previous=OLD, keys=[K2, K1], transport=tr, fleet_concurrency=1),
        batch_rows=1)),
}
MEMORY_PAIRS = [("rebalance", "memory_put"), ("rebalance", "memory_delete"),
                ("rebalance", "memory_read"), ("rebalance", "cache_set"),
                ("rebalance", "cache_clear"), ("rekey", "memory_put"),
                ("memory_put", "memory_delete")]


def _memory_copies(world: World, table: str) -> dict[tuple[str, str], int]:
    out: dict[tuple[str, str], int] = {}
    for db in NEW:
        for ns, key in world.sql(db, f"SELECT ns, key FROM {table}"):
            out[(ns, key)] = out.get((ns, key), 0) + 1
    return out


def _memory_check(race: MemoryRace, pair: Sequence[str], run: interleave.Run) -> None:
    for name, err in zip(pair, run.errors, strict=True):
        assert err is None, (pair, name, run.order, repr(err))
    store, cache = race.store(), race.cache()
    got = store.get((U, "m"), "k")
    value = None if got is None else got.value
    if "memory_delete" in pair and "memory_put" not in pair:
        assert value is None, (pair, run.order)  # delete wins: no move brings it back
    elif "memory_put" in pair and "memory_delete" not in pair:
        assert value == NEW_VALUE, (pair, run.order)  # no move overwrites it
    elif "memory_delete" not in pair:
        assert value == OLD_VALUE, (pair, run.order)
    else:  # a put and a delete: the later one's outcome, whole
        assert value in (None, NEW_VALUE), (pair, run.order)
    if "memory_read" in pair:
        found, keys = race.results["read"]
        assert found is not None and found.value == OLD_VALUE, (pair, run.order)  # never missed
        assert sorted(keys) == ["k", "other"], (pair, run.order)
    assert store.get((STAY, "m"), "k").value == OLD_VALUE
    assert sorted(i.key for i in store.search((U,))) == (
        ["other"] if value is None else ["k", "other"]), (pair, run.order)
    entries = cache.get([(NODE, f"k{i}") for i in range(4)])
    if "cache_clear" in pair:
        assert entries == {}, (pair, run.order)
    else:
        want = {(NODE, f"k{i}"): "old" for i in range(4)}
        if "cache_set" in pair:
            want[(NODE, "k0")] = "new"
        assert entries == want, (pair, run.order)
    # Never a second copy once every actor is done.
    for table in ("store_items", "cache_entries"):
        assert max(_memory_copies(race.world, table).values() or [1]) == 1, (pair, run.order)


def _memory_maker(pair: Sequence[str]) -> Callable[[], tuple[list[interleave.Actor], Any, Any]]:
    def make() -> tuple[list[interleave.Actor], Any, Any]:
        world = World()
        _memory_setup(world)
        race = MemoryRace(world)

        def check(run: interleave.Run) -> None:
            try:
                _memory_check(race, pair, run)
            finally:
                world.close()

        return ([(lambda tr, name=name: MEMORY_ACTORS[name](race, tr)) for name in pair],
                _Clock(world.transport), check)

    return make


@pytest.mark.parametrize("pair", MEMORY_PAIRS, ids=["+".join(p) for p in MEMORY_PAIRS])
def test_memory_interleavings(pair: tuple[str, str], request: pytest.FixtureRequest) -> None:
    budget = harness.soak_budget(request, ci=6, soak=300)
    runs, exhaustive = interleave.schedules(_memory_maker(pair), budget,
                                            seed=zlib.crc32("+".join(pair).encode()))
    COUNTS["interleavings"] += runs
    COUNTS["pairs"] += 1
    COUNTS["exhaustive"] += exhaustive
    print(f"\ninterleavings: {'+'.join(pair)}: {runs} "
          f"({'every order' if exhaustive else 'sampled'})")
