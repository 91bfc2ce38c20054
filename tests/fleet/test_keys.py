"""Encryption keys over several databases: every database's rows sealed and authenticated,
list(None) merged from sealed pages, copies between databases re-sealed for the target, a
derived saver (with_allowlist) keeping the keys, and the key census and rekey on every database."""

from __future__ import annotations

import os
from typing import Any

import pytest

from benchmarks.workload import build_graph, first_input
from d1saver import D1Saver, FleetError, IntegrityError, Statement
from tests.fleet.conftest import FleetBackend, unique
from tests.fleet.test_saver import chain, spread, view

KEY, OLD = os.urandom(32), os.urandom(32)


def keyed(fleet: FleetBackend, keys: list[bytes] | None = None, **kw: Any) -> D1Saver:
    return fleet.saver(fleet.database_ids[:2], encryption_keys=keys or [KEY], **kw)


def stored(fleet: FleetBackend, db: str, thread_id: str) -> list[list[Any]]:
    with fleet.single(db) as s:
        (res,) = s.client.execute([Statement(
            "SELECT checkpoint_id, checkpoint FROM checkpoints WHERE thread_id = ?1 "
            "ORDER BY checkpoint_id", (thread_id,))])
        return res.rows


def tamper(fleet: FleetBackend, db: str, thread_id: str, checkpoint_id: str) -> None:
    """One character of a stored checkpoint changed, as someone with write access would."""
    with fleet.single(db) as s:
        ((text,),) = s.client.execute([Statement(
            "SELECT checkpoint FROM checkpoints WHERE thread_id = ?1 AND checkpoint_id = ?2",
            (thread_id, checkpoint_id))])[0].rows
        at = len(text) // 2
        s.client.execute([Statement(
            "UPDATE checkpoints SET checkpoint = ?3 WHERE thread_id = ?1 AND checkpoint_id = ?2",
            (thread_id, checkpoint_id, text[:at] + ("A" if text[at] != "A" else "B")
             + text[at + 1:]))])


def test_two_databases_with_keys_put_get_list_and_refuse_tampering(fleet: FleetBackend) -> None:
    with keyed(fleet) as saver:
        threads = spread(saver, unique("k"), 2)
        configs = {t: chain(saver, t, 2) for t in threads}
        for t, cfgs in configs.items():
            tup = saver.get_tuple(cfgs[-1])
            assert tup is not None and tup.checkpoint["channel_values"] == {"x": f"{t}:1"}
            assert tup.pending_writes and tup.pending_writes[0][2] == "w1"
            # sealed where it lives: no plaintext of the value in its row
            rows = stored(fleet, saver.home(t), t)
            assert len(rows) == 2 and all(r[1].startswith("e:") for r in rows)
        # list(None) reads every thread of every database: on the real engine those are shared
        # with other tests' unkeyed (plaintext) rows, which a keyed saver rightly refuses.
        whole = fleet.name == "local"
        if whole:
            listed = [x for x in saver.list(None)
                      if x.config["configurable"]["thread_id"] in threads]
            assert sorted(map(repr, map(view, listed))) == sorted(
                repr(view(saver.get_tuple(c))) for cfgs in configs.values() for c in cfgs)
        assert {saver.home(t) for t in threads} == set(saver.database_ids)
        tampered: set[str] = set()
        for t, cfgs in configs.items():
            cid = cfgs[-1]["configurable"]["checkpoint_id"]
            tamper(fleet, saver.home(t), t, cid)
            tampered.add(saver.home(t))
            with pytest.raises(IntegrityError):
                saver.get_tuple(cfgs[-1])
            if whole:
                with pytest.raises(FleetError) as failed:  # across databases: per database
                    list(saver.list(None))
                assert set(failed.value.errors) == tampered
                assert all(isinstance(e, IntegrityError) for e in failed.value.errors.values())


def test_copy_between_databases_with_keys_is_sealed_for_the_target(fleet: FleetBackend) -> None:
    with keyed(fleet, page_size=1) as saver:  # page_size 1: several re-sealed pages
        source = spread(saver, unique("src"), 1)[0]
        target = next(t for i in range(100) if saver.home(t := f"{source}-to-{i}")
                      != saver.home(source))
        cfgs = chain(saver, source, 3)
        saver.tag(cfgs[0], "first")
        saver.copy_thread(source, target)
        got = [view(x) for x in saver.list({"configurable": {"thread_id": target}})]
        assert got == [view(x) for x in saver.list({"configurable": {"thread_id": source}})]
        assert len(got) == 3 and saver.tags({"configurable": {"thread_id": target,
                                                             "checkpoint_ns": ""}}) == {
            "first": cfgs[0]["configurable"]["checkpoint_id"]}
        assert len(stored(fleet, saver.home(target), target)) == 3
        # the copy is bound to the target: altered, it is refused there, the source unharmed
        tamper(fleet, saver.home(target), target, cfgs[-1]["configurable"]["checkpoint_id"])
        with pytest.raises(IntegrityError):
            saver.get_tuple({"configurable": {"thread_id": target, "checkpoint_ns": ""}})
        assert saver.get_tuple(cfgs[-1]) is not None


def test_a_derived_saver_keeps_the_keys_on_every_database(fleet: FleetBackend) -> None:
    with keyed(fleet) as saver:
        threads = spread(saver, unique("d"), 2)
        configs = {t: chain(saver, t, 1) for t in threads}
        derived = saver.with_allowlist([])
        assert derived.key_ids == saver.key_ids
        for cfgs in configs.values():
            assert view(derived.get_tuple(cfgs[-1])) == view(saver.get_tuple(cfgs[-1]))


def test_census_and_rekey_run_on_every_database(fleet: FleetBackend) -> None:
    with keyed(fleet, [OLD]) as old:
        threads = spread(old, unique("r"), 2)
        for t in threads:
            chain(old, t, 1)
    with keyed(fleet, [KEY, OLD]) as saver:
        before = saver.key_census()
        old_id, new_id = saver.key_ids[1], saver.key_ids[0]
        assert before["checkpoints"].get(old_id, 0) >= 2
        counts = saver.rekey("checkpoints")
        assert counts.rewritten == before["checkpoints"][old_id]
        after = saver.key_census()
        assert old_id not in after["checkpoints"]
        assert after["checkpoints"][new_id] >= before["checkpoints"][old_id]


def test_the_rekey_job_runs_on_every_database(fleet: FleetBackend) -> None:
    from d1saver.compaction.rekey import rekey
    with keyed(fleet, [OLD]) as old:
        for t in spread(old, unique("j"), 2):
            chain(old, t, 1)
    with keyed(fleet, [KEY, OLD]) as saver:
        old_id = saver.key_ids[1]
        before = saver.key_census()
        summary = rekey(saver)
        assert summary.before == before and summary.after == saver.key_census()
        assert summary.rewritten == sum(per.get(old_id, 0) for per in before.values()) > 0
        assert sum(t["rewritten"] for t in summary.tables.values()) == summary.rewritten
        assert all(old_id not in per for per in summary.after.values())


@pytest.mark.parametrize("sealed", [False, True])
def test_copy_between_databases_carries_frozen_delta_histories(fleet: FleetBackend,
                                                                sealed: bool) -> None:
    """A DeltaChannel thread pruned to its head (its history frozen) and copied to another
    database reads the same there: the frozen rows travel (re-sealed for the target, with
    keys)."""
    keys = {"encryption_keys": [KEY]} if sealed else {}
    with fleet.saver(fleet.database_ids[:2], page_size=7, **keys) as saver:
        source = spread(saver, unique("dsrc"), 1)[0]
        target = next(t for i in range(100) if saver.home(t := f"{source}-to-{i}")
                      != saver.home(source))
        graph = build_graph(saver, variant="delta", turns=3, snapshot_frequency=50)
        config: Any = {"configurable": {"thread_id": source}}
        graph.invoke(first_input(), config)
        saver.prune([source])
        assert len(list(saver.list(config))) == 1
        saver.copy_thread(source, target)
        copied: Any = {"configurable": {"thread_id": target}}
        assert graph.get_state(copied).values == graph.get_state(config).values
