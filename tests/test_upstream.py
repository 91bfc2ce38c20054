"""The defence against langgraph#8748 (d1saver/upstream.py): applied while LangGraph's barrier
and topic channels hand out live containers, and only then; no other channel does.

The graph-level effect, with the defence on and off: tests/reliability/test_differential.py
and test_concurrency.py's durability tests.
"""

from __future__ import annotations

import operator
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from langgraph.channels import (AnyValue, BaseChannel, BinaryOperatorAggregate, DeltaChannel,
                                EphemeralValue, LastValue, LastValueAfterFinish,
                                NamedBarrierValue, NamedBarrierValueAfterFinish, Topic,
                                UntrackedValue)
from langgraph.channels import __all__ as channel_names

from benchmarks.workload import append_batches
from d1saver import upstream

DEFENDED = ("NamedBarrierValue", "NamedBarrierValueAfterFinish", "Topic")
ROOT = Path(__file__).resolve().parent.parent


def test_applied_on_this_langgraph_to_the_three_channels() -> None:
    assert upstream.active() == DEFENDED
    assert upstream.unchecked() == ()
    for cls in (NamedBarrierValue, NamedBarrierValueAfterFinish, Topic):
        assert upstream.returns_live_container(cls)  # LangGraph's own method: still live


def test_disabled_gives_langgraph_its_own_methods_back() -> None:
    barrier = NamedBarrierValue(str, {"a", "b"})
    barrier.update(["a"])
    with upstream.disabled():
        assert upstream.active() == ()
        taken = barrier.checkpoint()
        barrier.update(["b"])
        assert taken == {"a", "b"}  # the defect
    assert upstream.active() == DEFENDED
    barrier.consume()
    barrier.update(["a"])
    taken = barrier.checkpoint()
    barrier.update(["b"])
    assert taken == {"a"}


def test_a_langgraph_that_copies_is_left_alone() -> None:
    """Decided by behaviour: channels whose checkpoint() already copies get no defence (a
    fresh interpreter, LangGraph's barrier fixed before d1saver is imported)."""
    fixed = (
        "from langgraph.channels import NamedBarrierValue\n"
        "NamedBarrierValue.checkpoint = lambda self: set(self.seen)\n"
        "import d1saver\n"
        "print(','.join(d1saver.upstream.active()))\n")
    out = subprocess.run([sys.executable, "-c", fixed], capture_output=True, text=True,
                         check=True, cwd=ROOT).stdout.strip()
    assert out == "NamedBarrierValueAfterFinish,Topic"

    class CopyingTopic(Topic):
        def checkpoint(self) -> list[Any]:
            return list(self.values)

    assert not upstream.returns_live_container(CopyingTopic)


IMPORTED_FIRST = """
import sys, asyncio
import d1saver
import d1saver.cli.commands
assert "langgraph.channels" not in sys.modules  # the command stays light
assert not d1saver.upstream._applied
from langgraph.checkpoint.memory import InMemorySaver
from d1saver.local import LocalD1, LocalD1Transport
from tests.reliability.test_concurrency import history_and_fork
saver = d1saver.D1Saver(account_id="a", database_id="d", api_token="t",
                        api_base_url="http://d1.local/client/v4",
                        transport=LocalD1Transport(LocalD1(), latency_ms=15))
got = asyncio.run(history_and_fork(saver, "async"))
assert got == asyncio.run(history_and_fork(InMemorySaver(), "async")), got
print(",".join(d1saver.upstream.active()))
"""


def test_applied_when_d1saver_is_imported_before_langgraph() -> None:
    """d1saver imported before any graph module: the defence is applied at the saver's first
    read of a thread, before LangGraph makes a checkpoint, and the fan's join is exact."""
    out = subprocess.run([sys.executable, "-c", IMPORTED_FIRST], capture_output=True,
                         text=True, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip() == ",".join(DEFENDED)


def _channels() -> dict[str, tuple[BaseChannel, list[Any], list[Any]]]:
    """Every channel LangGraph exports, with two updates whose values are containers."""
    return {
        "AnyValue": (AnyValue(list), [[1]], [[2]]),
        "BinaryOperatorAggregate": (BinaryOperatorAggregate(list, operator.add), [[1]], [[2]]),
        "DeltaChannel": (DeltaChannel(append_batches), [[1]], [[2]]),
        "EphemeralValue": (EphemeralValue(list), [[1]], [[2]]),
        "LastValue": (LastValue(list), [[1]], [[2]]),
        "LastValueAfterFinish": (LastValueAfterFinish(list), [[1]], [[2]]),
        "NamedBarrierValue": (NamedBarrierValue(str, {"a", "b", "c"}), ["a"], ["b"]),
        "NamedBarrierValueAfterFinish": (NamedBarrierValueAfterFinish(str, {"a", "b", "c"}),
                                         ["a"], ["b"]),
        "Topic": (Topic(list, accumulate=True), [[1]], [[2]]),
        "UntrackedValue": (UntrackedValue(list), [[1]], [[2]]),
    }


def _changes_after_taken(name: str) -> bool:
    channel, first, second = _channels()[name]
    channel.update(first)
    if isinstance(channel, (LastValueAfterFinish, NamedBarrierValueAfterFinish)):
        channel.finish()
    taken = channel.get() if isinstance(channel, DeltaChannel) else channel.checkpoint()
    before = repr(taken)
    channel.update(second)
    return repr(taken) != before


@pytest.mark.parametrize("name", sorted(set(channel_names) - {"BaseChannel"}))
def test_no_channel_hands_out_what_a_later_update_changes(name: str) -> None:
    """What create_checkpoint stores of each channel (checkpoint(), or get() for a
    DeltaChannel snapshot) stays as it was when taken, whatever the next update does. Without
    the defence, exactly the three defended channels fail this."""
    assert not _changes_after_taken(name)
    with upstream.disabled():
        assert _changes_after_taken(name) == (name in DEFENDED)
