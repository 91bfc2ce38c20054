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
defence turns itself off once LangGraph is fixed. `d1saver/__init__.py` applies it at import;
it then holds for every graph in the process, whatever its saver. docs/RELIABILITY.md
("LangGraph's default durability") says why and what it costs.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from langgraph.channels import BaseChannel, NamedBarrierValue, NamedBarrierValueAfterFinish, Topic

# LangGraph's own checkpoint(), and a copy of what it returns, per channel class.
_Copy = Callable[[Any], Any]
_CHANNELS: dict[type[BaseChannel], _Copy] = {
    Topic: lambda values: list(values) if isinstance(values, list) else values,
    NamedBarrierValue: lambda seen: set(seen) if isinstance(seen, set) else seen,
    NamedBarrierValueAfterFinish: lambda pair: (
        (set(pair[0]), *pair[1:]) if isinstance(pair, tuple) and isinstance(pair[0], set)
        else pair),
}
_ORIGINAL: dict[type[BaseChannel], Callable[[Any], Any]] = {
    cls: cls.checkpoint for cls in _CHANNELS}
_patched: set[type[BaseChannel]] = set()
_unchecked: set[type[BaseChannel]] = set()  # a probe that failed: left alone
_lock = threading.Lock()


def _probe(cls: type[BaseChannel]) -> BaseChannel:
    """A channel of `cls` holding one update, to be updated again."""
    if issubclass(cls, Topic):
        channel: BaseChannel = cls(str, accumulate=True)
    else:
        channel = cls(str, {"a", "b"})  # type: ignore[arg-type]
    channel.update(["a"])
    return channel


def returns_live_container(cls: type[BaseChannel]) -> bool:
    """Whether LangGraph's own `cls.checkpoint()` returns what a later update changes: take a
    checkpoint, update the channel, and see whether the checkpoint taken before changed."""
    channel = _probe(cls)
    taken = _ORIGINAL.get(cls, cls.checkpoint)(channel)
    before = repr(taken)
    channel.update(["b"])
    return repr(taken) != before


def _copying(cls: type[BaseChannel]) -> Callable[[Any], Any]:
    original, copy = _ORIGINAL[cls], _CHANNELS[cls]

    @functools.wraps(original)
    def checkpoint(self: Any) -> Any:
        return copy(original(self))

    return checkpoint


def _install(cls: type[BaseChannel], checkpoint: Callable[[Any], Any]) -> None:
    cls.checkpoint = checkpoint  # type: ignore[method-assign,assignment]


def apply() -> tuple[str, ...]:
    """Make each channel's checkpoint() return a copy if LangGraph's returns a live container;
    leave the others alone. Idempotent. Returns the names of the channels it covers."""
    with _lock:
        for cls in _CHANNELS:
            if cls in _patched:
                continue
            try:
                live = returns_live_container(cls)
            except Exception:  # a LangGraph whose channels this probe cannot make
                _unchecked.add(cls)
                continue
            if live:
                _install(cls, _copying(cls))
                _patched.add(cls)
    return active()


def active() -> tuple[str, ...]:
    """The channel classes whose checkpoint() d1saver makes return a copy (empty once
    LangGraph copies, or while `disabled`)."""
    return tuple(sorted(cls.__name__ for cls in _patched))


def unchecked() -> tuple[str, ...]:
    """Channel classes the probe could not make (a LangGraph that changed them): left as
    LangGraph has them. Empty on every LangGraph d1saver is tested with."""
    return tuple(sorted(cls.__name__ for cls in _unchecked))


@contextmanager
def disabled() -> Iterator[None]:
    """LangGraph's own checkpoint() back for the block: for tests that show the defect."""
    with _lock:
        covered = set(_patched)
        for cls in covered:
            _install(cls, _ORIGINAL[cls])
        _patched.clear()
    try:
        yield
    finally:
        with _lock:
            for cls in covered:
                _install(cls, _copying(cls))
            _patched.update(covered)


__all__ = ["active", "apply", "disabled", "returns_live_container", "unchecked"]
