"""Compaction of d1saver checkpoints: keep the latest N per thread plus the tagged ones."""

from compaction.fleet import FleetSummary, FleetThreadInfo, compact, history, list_threads
from compaction.job import Summary, ThreadInfo, thread_infos
from compaction.lease import Lease, acquire, break_lease, release
from compaction.rebalance import Move, RebalanceSummary, rebalance

__all__ = ["FleetSummary", "FleetThreadInfo", "Lease", "Move", "RebalanceSummary", "Summary",
           "ThreadInfo", "acquire", "break_lease", "compact", "history", "list_threads",
           "rebalance", "release", "thread_infos"]
