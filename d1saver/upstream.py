"""A defence against a LangGraph defect, applied only while the installed LangGraph has it.

langgraph#8748: `Topic.checkpoint()`, `NamedBarrierValue.checkpoint()` and
`NamedBarrierValueAfterFinish.checkpoint()` return the channel's live list or set. Under
durability "async" (LangGraph's default) the loop hands `put` a checkpoint whose values are
those containers (`copy_checkpoint` copies the dict, not its values), and calls put N only once
put N-1 has returned; meanwhile the next super-step adds to them in place (`seen.add`,
`values.extend`). A saver whose put takes a round trip then stores a join's barrier as it was a
step later: the join shows as due too early, and a fork or resume from that checkpoint never
runs it. Nothing a saver does inside `put` can undo that: the value has changed before put is
called.

The defence makes those methods return a copy, as the proposed upstream fix does (a set of a
few node names, or a list of references, per checkpoint). Whether to apply it is decided by
behaviour, not by version: each channel is made, its checkpoint taken, the channel updated,
and the checkpoint looked at again. A LangGraph that already copies is left alone, so the
defence turns itself off once LangGraph is fixed. It holds for every graph of the process,
whatever its saver. docs/RELIABILITY.md ("LangGraph's default durability") says why and what
it costs.

When: `ensure()` runs at d1saver's import and at each read of a thread by the saver
(LangGraph reads the thread before a run makes any checkpoint); it applies the defence once
LangGraph's channels are loaded, which any graph has done. So the order of imports does not
matter, and what never builds a graph (the `d1saver` command) never loads LangGraph's graph
modules for it.
"""

from __future__ import annotations

import functools
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

_Method = Callable[[Any], Any]

_original: dict[type[Any], _Method] = {}  # LangGraph's own checkpoint(), per defended class
_patched: set[type[Any]] = set()
_unchecked: set[type[Any]] = set()  # a probe that failed: left as LangGraph has it
_applied = False
_lock = threading.Lock()


def _copies() -> dict[type[Any], _Method]:
    """The channels the defect concerns, each with a copy of what its checkpoint() returns."""
    from langgraph.channels import NamedBarrierValue, NamedBarrierValueAfterFinish, Topic

    return {
        Topic: lambda values: list(values) if isinstance(values, list) else values,
        NamedBarrierValue: lambda seen: set(seen) if isinstance(seen, set) else seen,
        NamedBarrierValueAfterFinish: lambda pair: (
            (set(pair[0]), *pair[1:]) if isinstance(pair, tuple) and isinstance(pair[0], set)
            else pair),
    }


def _probe(cls: type[Any]) -> Any:
    """A channel of `cls` holding one update, to be updated again."""
    from langgraph.channels import Topic

    channel = cls(str, accumulate=True) if issubclass(cls, Topic) else cls(str, {"a", "b"})
    channel.update(["a"])
    return channel


def returns_live_container(cls: type[Any]) -> bool:
    """Whether LangGraph's own `cls.checkpoint()` returns what a later update changes: take a
    checkpoint, update the channel, and see whether the checkpoint taken before changed."""
    channel = _probe(cls)
    taken = _original.get(cls, cls.checkpoint)(channel)
    before = repr(taken)
    channel.update(["b"])
    return repr(taken) != before


def _copying(cls: type[Any], copy: _Method) -> _Method:
    original = _original[cls]

    @functools.wraps(original)
    def checkpoint(self: Any) -> Any:
        return copy(original(self))

    return checkpoint


def apply() -> tuple[str, ...]:
    """Make each channel's checkpoint() return a copy if LangGraph's returns a live container;
    leave the others alone. Idempotent. Returns the names of the channels it covers."""
    global _applied
    with _lock:
        if not _applied:
            for cls, copy in _copies().items():
                _original[cls] = cls.checkpoint
                try:
                    live = returns_live_container(cls)
                except Exception:  # a LangGraph whose channels this probe cannot make
                    _unchecked.add(cls)
                    continue
                if live:
                    cls.checkpoint = _copying(cls, copy)
                    _patched.add(cls)
            _applied = True
    return active()


def ensure() -> None:
    """Apply the defence if LangGraph's channels are loaded and it was not applied yet (a
    dictionary look-up otherwise)."""
    if not _applied and "langgraph.channels" in sys.modules:
        apply()


def active() -> tuple[str, ...]:
    """The channel classes whose checkpoint() d1saver makes return a copy: empty when
    LangGraph copies already, while `disabled`, or before any graph module is loaded."""
    ensure()
    return tuple(sorted(cls.__name__ for cls in _patched))


def unchecked() -> tuple[str, ...]:
    """Channel classes the probe could not make (a LangGraph that changed them): left as
    LangGraph has them. Empty on every LangGraph d1saver is tested with."""
    ensure()
    return tuple(sorted(cls.__name__ for cls in _unchecked))


@contextmanager
def disabled() -> Iterator[None]:
    """LangGraph's own checkpoint() back for the block: for tests that show the defect."""
    ensure()
    with _lock:
        covered = set(_patched)
        for cls in covered:
            cls.checkpoint = _original[cls]
        _patched.clear()
    try:
        yield
    finally:
        with _lock:
            copies = _copies()
            for cls in covered:
                cls.checkpoint = _copying(cls, copies[cls])
            _patched.update(covered)


__all__ = ["active", "apply", "disabled", "ensure", "returns_live_container", "unchecked"]
