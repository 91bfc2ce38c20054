"""Two instances with cached beliefs (issue 20): what one instance believes (the chunks each
thread holds, ops/held.py; DeltaChannel histories, ops/delta_cache.py; writes waiting in group
commit) made stale by another instance's maintenance. The stale instance must never write a
reference to a chunk that is gone, nor serve a stale read: after its next operation, what it
reads equals what a fresh instance reads, and `check` is clean."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import pytest

from d1saver.compaction import fleet as compaction_fleet
from d1saver.compaction.rekey import rekey
from d1saver import D1Saver
from tests.reliability import harness
from tests.reliability.harness import K1, K2, World, cfg, new_id

LONG = [f"message {j} " + "lorem ipsum " * 15 for j in range(12)]


def _thread(saver: D1Saver, t: str, start: int) -> str:
    """A DeltaChannel thread of 5 checkpoints holding a long message list (stored by content)
    and writes; returns its head's id."""
    parent = None
    for i in range(5):
        k = start + i
        values: dict[str, Any] = {"x": f"v{k}", "long": LONG[: 8 + i]}
        if i % 3 == 0:
            values["messages"] = [f"seed {k}", *LONG[:9]]
        cp, md = harness.make_checkpoint(new_id(k), i, values, delta=True)
        conf = saver.put(cfg(t, parent), cp, md, {})
        saver.put_writes(conf, [("messages", [LONG[i]])], f"task-{k}")
        parent = conf["configurable"]["checkpoint_id"]
    saver.tag(cfg(t, new_id(start + 1)), "approved")
    assert parent is not None
    return parent


MAINTENANCE: dict[str, Callable[[D1Saver], Any]] = {
    "delete_thread": lambda s: s.delete_thread("t"),
    "prune": lambda s: s.prune(["t"]),
    "prune_delete": lambda s: s.prune(["t"], strategy="delete"),
    "compaction": lambda s: compaction_fleet.compact(s, keep=1),
    "delete_for_runs": lambda s: s.delete_for_runs(["run-1"]),
    "copy_onto": lambda s: s.copy_thread("u", "t"),
}


def _follow_put(stale: D1Saver, head: str | None) -> None:
    """The stale instance's next step: a checkpoint sharing content with the old ones."""
    cp, md = harness.make_checkpoint(new_id(50), 5, {"x": "v50", "long": LONG}, delta=True)
    conf = stale.put(cfg("t", head), cp, md, {})
    stale.put_writes(conf, [("messages", [LONG[5]]), ("long", LONG)], "task-50")


FOLLOW = ("put", "read")


@pytest.mark.parametrize(("maintenance", "follow", "keyed"),
                         list(itertools.product(MAINTENANCE, FOLLOW, (False, True))))
def test_stale_instance(maintenance: str, follow: str, keyed: bool) -> None:
    world = World()
    keys = [K1] if keyed else None
    try:
        stale = world.saver(keys=keys, group_commit=True)
        head = _thread(stale, "t", 0)
        _thread(stale, "u", 100)
        # The stale instance reads: it learns the chunks held and caches histories.
        before = harness.observe(stale, ["t"])
        other = world.saver(keys=keys)
        MAINTENANCE[maintenance](other)
        if follow == "put":
            _follow_put(stale, head)
        fresh = world.saver(keys=keys)
        assert harness.observe(stale, ["t", "u"]) == harness.observe(fresh, ["t", "u"])
        assert compaction_fleet.check_chunks(fresh) == []
        assert before is not None
    finally:
        world.close()


def test_stale_instance_after_key_rotation() -> None:
    """An instance still on the old key, whose beliefs predate a rotation (rekey re-sealed
    every row), writes its next step over chunks it believes held: the rotated key set reads
    the thread whole, as a fresh instance, and `check` is clean."""
    world = World()
    try:
        stale = world.saver(keys=[K1], group_commit=True)
        head = _thread(stale, "t", 0)
        harness.observe(stale, ["t"])
        rekey(world.saver(keys=[K2, K1]), batch_rows=4)
        _follow_put(stale, head)
        fresh = world.saver(keys=[K2, K1])
        seen = harness.observe(fresh, ["t"])
        assert seen["t"]["head"][0] == new_id(50)
        assert harness.observe(world.saver(keys=[K1, K2]), ["t"]) == seen
        assert compaction_fleet.check_chunks(fresh) == []
    finally:
        world.close()
