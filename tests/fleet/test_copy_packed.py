"""copy_thread between databases of packed writes (issue 20, defect 6): per (task, idx), as a
per-key copy of InMemorySaver's storage, with and without keys, small and staged."""

from __future__ import annotations

import pytest
from langgraph.checkpoint.memory import InMemorySaver

from d1saver import Statement
from tests.compaction import new_thread
from tests.fleet.conftest import FleetBackend
from tests.saver.test_format_bindings import K1, memory_copy, packed_writes, sorted_writes


@pytest.mark.parametrize("keys", [None, [K1]], ids=["plain", "keyed"])
def test_copy_thread_of_packed_writes_between_databases(fleet: FleetBackend, keys: list | None
                                                        ) -> None:
    saver, memory = fleet.saver(encryption_keys=keys), InMemorySaver()
    source = new_thread()
    target = next(f"{source}-to-{i}" for i in range(1000)
                  if saver.home(f"{source}-to-{i}") != saver.home(source))
    packed_writes(saver, source, target)
    packed_writes(memory, source, target)
    memory_copy(memory, source, target)
    saver.copy_thread(source, target)
    assert sorted_writes(saver, target) == sorted_writes(memory, target)
    assert sorted_writes(saver, source) == sorted_writes(memory, source)
    if keys is None:  # the target's packs of tasks the source lacks there stay one row each
        (res,) = fleet.single(saver.home(target)).execute([Statement(
            "SELECT task_id, COUNT(*) FROM writes WHERE thread_id = ?1 AND checkpoint_ns = ''"
            " AND task_id IN ('t4', 't5') GROUP BY task_id", [target])])
        assert res.rows == [["t4", 1], ["t5", 1]]
    for thread in (source, target):  # the real engine's databases are shared with later tests
        saver.delete_thread(thread)
