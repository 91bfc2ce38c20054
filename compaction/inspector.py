"""The terminal inspector's library half: a checkpoint's state as JSON-ready data (`snapshot`)
and what changed between two checkpoints (`diff`). Built in d1saver.inspection, which the web
inspector (`d1saver ui`) shares, so `show --json` and `diff --json` have its API's shapes."""

from __future__ import annotations

from d1saver.inspection import BRANCH, INTERRUPT, diff, jsonable, next_tasks, snapshot

__all__ = ["BRANCH", "INTERRUPT", "diff", "jsonable", "next_tasks", "snapshot"]
