"""Compaction of d1saver checkpoints: keep the latest N per thread plus the tagged ones."""

from compaction.job import Summary, ThreadInfo, compact, list_threads, thread_infos
from compaction.lease import Lease, acquire, break_lease, release

__all__ = ["Lease", "Summary", "ThreadInfo", "acquire", "break_lease", "compact", "list_threads",
           "release", "thread_infos"]
