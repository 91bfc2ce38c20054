"""Random sequences of every public operation on D1Saver and on a reference model
(tests/reliability/model.py), every observable result compared after each step (issue 20).

Hypothesis's rule-based state machine draws the sequences and shrinks a failure to a
shortest one. The CI budget is small and derandomized (the same sequences every run);
`./dev soak` runs many more (`--soak`, or D1SAVER_SOAK=N examples).
"""

from __future__ import annotations

import os
import random
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from d1saver.compaction import fleet as compaction_fleet
from d1saver.compaction.rebalance import rebalance
from d1saver.compaction.rekey import rekey
from d1saver import D1Cache, D1Saver, D1Store, admin
from tests.reliability import harness
from tests.reliability.harness import DATABASES, K1, K2, World, cfg, new_id
from tests.reliability.model import Model

THREADS = ("t0", "t1", "t2", "t3")
DELTA_THREADS = {"t2", "t3"}  # "messages" is a DeltaChannel there
OLD_THREAD = "t3"  # its checkpoints are dated long ago: compaction's max_age expires it
LONG_AGO = "2020-01-01T00:00:00+00:00"
LAYOUTS = (DATABASES[:1], DATABASES[:2], DATABASES[1:4], DATABASES[:3])
COUNTS: dict[str, int] = {"sequences": 0, "steps": 0, "writes": 0}
MEMORY_USERS = ("u0", "u1", "u2", "u3")
NODE = ("__pregel_ns_writes", "node")


def value_of(kind: str, n: int) -> Any:
    """A channel value: small, long (a message list stored by content), or over 2 MB."""
    if kind == "small":
        return f"v{n}"
    if kind == "long":
        return [f"message {n}.{i} " + "lorem ipsum " * 15 for i in range(12)]
    return random.Random(n).randbytes(2_100_000)


class SaverMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.world = World()
        self.model = Model()
        self.n = 0
        self.steps: dict[str, int] = {}
        self.keys: list[bytes] | None = None
        self.layout: tuple[str, ...] = DATABASES[:1]
        self.saver: D1Saver = self.world.saver(self.layout)
        self.big = 0  # values over 2 MB written so far (kept rare: they are slow)
        self.allow_big = False
        # Memory (issue 30): D1Store items and D1Cache entries, as InMemoryStore would hold them.
        self.items: dict[tuple[tuple[str, ...], str], Any] = {}
        self.entries: dict[tuple[tuple[str, ...], str], Any] = {}
        COUNTS["sequences"] += 1

    @initialize(layout=st.sampled_from(range(len(LAYOUTS))), keyed=st.booleans(),
                big=st.integers(0, 9))
    def start(self, layout: int, keyed: bool, big: int = 1) -> None:
        self.allow_big = big == 0  # one sequence in ten writes a value over 2 MB, once
        self.layout = LAYOUTS[layout]
        self.keys = [K1] if keyed else None
        self.saver = self._saver()

    def _saver(self, **kwargs: Any) -> D1Saver:
        return self.world.saver(self.layout, keys=self.keys, **kwargs)

    def _memory(self, cls: Any, layout: tuple[str, ...] | None = None,
                previous: tuple[str, ...] | None = None) -> Any:
        ids = list(layout or self.layout)
        return cls(account_id="acc", api_token="test-token", api_base_url=harness.BASE_URL,
                   transport=self.world.transport, database_ids=ids,
                   previous_database_ids=None if previous is None else list(previous),
                   encryption_keys=None if self.keys is None else list(self.keys))

    def teardown(self) -> None:
        self.world.close()

    def _next(self) -> int:
        self.n += 1
        COUNTS["writes"] += 1
        return self.n

    # --- writes ------------------------------------------------------------------------------

    @rule(t=st.sampled_from(THREADS), kind=st.sampled_from(["small", "small", "long", "big"]),
          fork=st.integers(0, 5))
    def put(self, t: str, kind: str, fork: int) -> None:
        if kind == "big" and (self.big >= 1 or not self.allow_big):
            kind = "long"
        self.big += kind == "big"
        n = self._next()
        visible = self.model.threads[t].visible() if self.model.exists(t) else []
        parent = None
        if visible:
            parent = visible[min(fork - 3, len(visible) - 1)] if fork > 3 else visible[0]
        step = self.steps[t] = self.steps.get(t, -1) + 1
        values: dict[str, Any] = {"x": value_of(kind, n)}
        delta = t in DELTA_THREADS
        if delta and step % 3 == 0:
            values["messages"] = [f"seed {n}", *([value_of("long", n)] if kind == "long" else [])]
        cp, md = harness.make_checkpoint(new_id(n), step, values, delta=delta,
                                         ts=LONG_AGO if t == OLD_THREAD else None)
        self.saver.put(cfg(t, parent), cp, md, {})
        self.model.put(t, parent, new_id(n), cp, md)

    # Rules are drawn evenly: two more ways to put make a conversation grow between the
    # maintenance steps, as a live graph's does.
    @rule(t=st.sampled_from(THREADS), kind=st.sampled_from(["small", "long"]))
    def put_next(self, t: str, kind: str) -> None:
        self.put(t, kind, 0)

    @rule(t=st.sampled_from(THREADS))
    def put_small(self, t: str) -> None:
        self.put(t, "small", 0)

    @precondition(lambda self: any(self.model.exists(t) for t in THREADS))
    @rule(data=st.data(), kind=st.sampled_from(["small", "small", "long"]),
          count=st.integers(1, 3), path=st.sampled_from(["", "~a", "~b"]))
    def put_writes(self, data: st.DataObject, kind: str, count: int, path: str) -> None:
        t = data.draw(st.sampled_from([t for t in THREADS if self.model.exists(t)]))
        visible = self.model.threads[t].visible()
        cid = visible[data.draw(st.integers(0, min(1, len(visible) - 1)))]
        n = self._next()
        task = data.draw(st.sampled_from([f"task-{n}", "task-a"]))
        writes = [("messages", [value_of(kind, n * 10 + i)]) for i in range(count)]
        self.saver.put_writes(cfg(t, cid), writes, task, path)
        self.model.put_writes(t, cid, writes, task, path)

    @precondition(lambda self: any(self.model.exists(t) for t in THREADS))
    @rule(data=st.data(), name=st.sampled_from(["approved", "release"]))
    def tag(self, data: st.DataObject, name: str) -> None:
        t = data.draw(st.sampled_from([t for t in THREADS if self.model.exists(t)]))
        cid = data.draw(st.sampled_from(self.model.threads[t].visible()))
        self.saver.tag(cfg(t, cid), name)
        self.model.tag(t, cid, name)

    @rule(t=st.sampled_from(THREADS), name=st.sampled_from(["approved", "release"]))
    def untag(self, t: str, name: str) -> None:
        if not self.model.exists(t):
            return
        assert self.saver.untag(cfg(t), name) == self.model.untag(t, name)

    # --- memory: store items and cache entries ---------------------------------------------

    @rule(user=st.sampled_from(MEMORY_USERS), key=st.sampled_from(["a", "b"]),
          gone=st.booleans())
    def memory_write(self, user: str, key: str, gone: bool) -> None:
        with self._memory(D1Store) as store:
            self._memory_write(store, user, key, gone)

    def _memory_write(self, store: Any, user: str, key: str, gone: bool) -> None:
        where = ((user, "m"), key)
        if gone:
            store.delete(*where)
            self.items.pop(where, None)
        else:
            value = {"n": self._next()}
            store.put(*where, value)
            self.items[where] = value

    @rule(key=st.sampled_from([f"k{i}" for i in range(4)]), clear=st.booleans())
    def cache_write(self, key: str, clear: bool) -> None:
        with self._memory(D1Cache) as cache:
            if clear:
                cache.clear([NODE])
                self.entries.clear()
            else:
                value = self._next()
                cache.set({(NODE, key): (value, None)})
                self.entries[(NODE, key)] = value

    # --- deletes, retention, copies ------------------------------------------------------

    @rule(t=st.sampled_from(THREADS))
    def delete_thread(self, t: str) -> None:
        self.saver.delete_thread(t)
        self.model.delete_thread(t)

    @rule(runs=st.sets(st.sampled_from(["run-0", "run-1", "run-2", "run-x"]), max_size=2))
    def delete_for_runs(self, runs: set[str]) -> None:
        self.saver.delete_for_runs(sorted(runs))
        self.model.delete_for_runs(runs)

    @rule(threads=st.lists(st.sampled_from(THREADS), max_size=3, unique=True),
          strategy=st.sampled_from(["keep_latest", "keep_latest", "delete"]))
    def prune(self, threads: list[str], strategy: str) -> None:
        self.saver.prune(threads, strategy=strategy)
        for t in threads:
            if strategy == "delete":
                self.model.delete_thread(t)
            else:
                self.model.retain(t, 1)

    @rule(src=st.sampled_from(THREADS), dst=st.sampled_from(THREADS))
    def copy_thread(self, src: str, dst: str) -> None:
        self.saver.copy_thread(src, dst)
        self.model.copy_thread(src, dst)

    @rule(keep=st.integers(1, 3),
          threads=st.none() | st.lists(st.sampled_from(THREADS), min_size=1, unique=True),
          max_age=st.booleans())
    def compact(self, keep: int, threads: list[str] | None, max_age: bool) -> None:
        cutoff = (datetime.now(timezone.utc) - timedelta(days=365)).isoformat()
        expired = {t for t in THREADS if max_age and self.model.expired(t, cutoff)}
        compaction_fleet.compact(self.saver, keep=keep, threads=threads,
                                 max_age=timedelta(days=365) if max_age else None)
        for t in (threads if threads is not None else list(self.model.threads)):
            if t in expired:
                self.model.retain(t, 0)
            else:
                self.model.retain(t, keep)

    # --- keys and layouts ------------------------------------------------------------------

    @precondition(lambda self: self.keys is not None)
    @rule()
    def rotate_keys(self) -> None:
        assert self.keys is not None
        self.keys = [K2 if self.keys[0] == K1 else K1, self.keys[0]]
        self.saver = self._saver()
        summary = rekey(self.saver)
        assert summary.plaintext_left == 0
        # Every value is now under the newest key: the old one can go.
        self.keys = self.keys[:1]
        self.saver = self._saver()

    @precondition(lambda self: self.keys is None)
    @rule()
    def seal_plaintext(self) -> None:
        self.keys = [K1]
        self.saver = self._saver()
        rekey(self.saver, seal_plaintext=True)

    @rule(layout=st.sampled_from(range(len(LAYOUTS))), user=st.sampled_from(MEMORY_USERS),
          gone=st.booleans())
    def rebalance(self, layout: int, user: str, gone: bool) -> None:
        previous = self.layout
        self.layout = LAYOUTS[layout]
        if set(previous) != set(self.layout):
            # Before the move: memory in view and written through the new layout, previous
            # homes included; then the move, which loses and resurrects nothing.
            with self._memory(D1Store, previous=previous) as store, \
                    self._memory(D1Cache, previous=previous) as cache:
                self._same_memory(store, cache)
                self._memory_write(store, user, "a", gone)
                self._same_memory(store, cache)
            moving = self._saver(previous=previous)
            summary = rebalance(moving)
            assert not summary.errors, summary.errors
            assert summary.memory_changed == 0
        self.saver = self._saver()

    # --- what must hold after every step ---------------------------------------------------

    @invariant()
    def same_as_model(self) -> None:
        COUNTS["steps"] += 1  # once after each step (and once at the start)
        threads = list(THREADS)
        harness.assert_same(harness.observe(self.saver, threads), self.model.observe(threads),
                            "D1Saver vs model:")

    @invariant()
    def memory_same_as_model(self) -> None:
        with self._memory(D1Store) as store, self._memory(D1Cache) as cache:
            self._same_memory(store, cache)
        # Each item and entry in one database, its home.
        layout = admin.memory_layout(self.layout)
        for db in self.world.engine_databases():
            for table in admin.MEMORY_TABLES:
                for ns, key in self.world.sql(db, f"SELECT ns, key FROM {table}"):
                    row = admin.MemoryKey(table, ns, key)
                    assert admin.memory_home(layout, row) == db, (table, ns, key, db)

    def _same_memory(self, store: Any, cache: Any) -> None:
        found = {(tuple(i.namespace), i.key): i.value for i in store.search((), limit=1000)}
        assert found == self.items, "D1Store vs model"
        for user in MEMORY_USERS:
            assert {(tuple(i.namespace), i.key): i.value for i in store.search((user,))} == {
                k: v for k, v in self.items.items() if k[0][0] == user}
            for key in ("a", "b"):
                got = store.get((user, "m"), key)
                assert (None if got is None else got.value) == self.items.get(((user, "m"), key))
        keys = [(NODE, f"k{i}") for i in range(4)]
        assert cache.get(keys) == self.entries, "D1Cache vs model"

    @invariant()
    def no_hidden_leftovers(self) -> None:
        assert self.world.staged() == []
        assert compaction_fleet.check_chunks(self.saver) == []

    @invariant()
    def each_thread_in_one_database(self) -> None:
        if len(self.layout) > 1:
            placement = self.world.placement()
            for t in THREADS:
                assert placement.get(t, []) in ([], [self.saver.home(t)]), t


def test_stateful(request: pytest.FixtureRequest) -> None:
    examples = harness.soak_budget(request, ci=12, soak=400)
    ci = not (request.config.getoption("--soak") or os.environ.get("D1SAVER_SOAK"))
    runner = SaverMachine.TestCase
    # CI: the same sequences every run (derandomized, no example database); a soak draws
    # new ones each time.
    runner.settings = settings(max_examples=examples, stateful_step_count=25,
                               deadline=None, derandomize=ci, database=None,
                               suppress_health_check=list(HealthCheck), print_blob=True)
    before = dict(COUNTS)
    runner().runTest()
    print(f"\nstateful: {COUNTS['sequences'] - before['sequences']} sequences, "
          f"{COUNTS['steps'] - before['steps']} steps checked, "
          f"{COUNTS['writes'] - before['writes']} of them writes")


# The soak's shrunk sequences, replayed step by step (each failed before the model's fix).
RUN_DELETED_AFTER_PRUNE = {
    # The seed of t2's head's history was frozen from a run-0 checkpoint that prune removed:
    # delete_for_runs(run-0) finds no checkpoint of run-0 and leaves the head's state.
    "frozen seed of a deleted run": [
        ("put", ("t2", "long", 3)), ("put", ("t2", "long", 0)),
        ("prune", (["t0", "t1", "t2"], "keep_latest")),
        ("delete_for_runs", ({"run-0", "run-2"},))],
    # The kept head (run-1) holds the frozen history; its child replays through it. Deleting
    # run-1 deletes the head and its frozen history: the child is relinked to the head's
    # stored parent (none), not to the ghosts the head replayed from.
    "holder of a frozen history deleted": [
        ("put", ("t2", "small", 3)), ("put", ("t2", "small", 0)),
        ("prune", (["t2"], "keep_latest")), ("put", ("t2", "small", 0)),
        ("delete_for_runs", ({"run-1"},))],
}


@pytest.mark.parametrize("keyed", [False, True])
@pytest.mark.parametrize("case", sorted(RUN_DELETED_AFTER_PRUNE))
def test_runs_deleted_after_a_prune(case: str, keyed: bool) -> None:
    """delete_for_runs after a prune: D1Saver and the model agree after every step."""
    machine = SaverMachine()
    try:
        machine.start(layout=0, keyed=keyed, big=1)
        machine.same_as_model()
        for rule_name, args in RUN_DELETED_AFTER_PRUNE[case]:
            getattr(machine, rule_name)(*args)
            machine.same_as_model()
            machine.no_hidden_leftovers()
    finally:
        machine.teardown()
