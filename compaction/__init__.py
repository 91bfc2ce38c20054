"""Compaction of d1saver checkpoints: keep the latest N per thread plus the tagged ones; and the
other maintenance jobs (rebalance, rekey, the gateway's generated compaction).

Installed as `d1saver.compaction` (the repository keeps it in its top-level compaction/ folder;
pyproject.toml maps it). It is built on d1saver's public names and its maintenance API,
d1saver.admin, only (tests/test_layers.py checks it). The names below are imported on first use
(PEP 562), so that the command line's help does not load the jobs."""

from __future__ import annotations

import importlib
import sys
import types
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .fleet import FleetSummary, FleetThreadInfo, compact, history, list_threads
    from .job import Summary, ThreadInfo, thread_infos
    from .lease import Lease, acquire, break_lease, release
    from .rebalance import Move, RebalanceSummary, rebalance

_WHERE = {
    ".fleet": ("FleetSummary", "FleetThreadInfo", "compact", "history", "list_threads"),
    ".job": ("Summary", "ThreadInfo", "thread_infos"),
    ".lease": ("Lease", "acquire", "break_lease", "release"),
    ".rebalance": ("Move", "RebalanceSummary", "rebalance"),
}
_MODULE_OF = {name: module for module, names in _WHERE.items() for name in names}

__all__ = ["FleetSummary", "FleetThreadInfo", "Lease", "Move", "RebalanceSummary", "Summary",
           "ThreadInfo", "acquire", "break_lease", "compact", "history", "list_threads",
           "rebalance", "release", "thread_infos"]


class _Package(types.ModuleType):
    """`compaction.rebalance` is the function, as the eager package of 0.2.0 bound it, though
    a submodule has the same name: when the import system names the submodule on the package
    (after loading it), the function it holds takes the name instead."""

    def __setattr__(self, name: str, value: Any) -> None:
        if (name in _MODULE_OF and isinstance(value, types.ModuleType)
                and value.__name__ == f"{__name__}.{name}"):
            value = getattr(value, name)
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package


def __getattr__(name: str) -> Any:
    if name in _MODULE_OF:
        value = getattr(importlib.import_module(_MODULE_OF[name], __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
