"""The reference the stateful test compares D1Saver with: InMemorySaver's semantics (writes
keyed and ordered as it keys and orders them, DeltaChannel histories walked as
BaseCheckpointSaver.get_delta_channel_history walks them) plus a small model of what it lacks:
tags, prune and compaction (keep N and the tagged, relink survivors to their nearest kept
ancestor, DeltaChannel histories unchanged), delete_for_runs and copy_thread.

A checkpoint that retention removed stays in the model as a ghost: invisible to list and
get_tuple, but still walked for DeltaChannel histories, which retention must keep exact.
What a ghost leaves is the kept checkpoints' state: delete_for_runs deletes no ghost (see
Model.delete_for_runs).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

from langgraph.checkpoint.base import WRITES_IDX_MAP, writes_sort_key


@dataclass
class Cp:
    checkpoint: dict[str, Any]
    metadata: dict[str, Any]
    parent: str | None
    visible: bool = True


@dataclass
class Thread:
    cps: dict[str, Cp] = field(default_factory=dict)
    writes: dict[str, dict[tuple[str, int], tuple[str, str, Any, str]]] = field(
        default_factory=dict)
    tags: dict[str, str] = field(default_factory=dict)

    def visible(self) -> list[str]:
        return sorted((c for c, cp in self.cps.items() if cp.visible), reverse=True)


class Model:
    def __init__(self) -> None:
        self.threads: dict[str, Thread] = {}

    def thread(self, t: str) -> Thread:
        return self.threads.setdefault(t, Thread())

    def exists(self, t: str) -> bool:
        return t in self.threads and bool(self.threads[t].visible())

    # --- writes ------------------------------------------------------------------------------

    def put(self, t: str, parent: str | None, cid: str, checkpoint: dict[str, Any],
            metadata: dict[str, Any]) -> None:
        self.thread(t).cps[cid] = Cp(copy.deepcopy(checkpoint), copy.deepcopy(metadata), parent)

    def put_writes(self, t: str, cid: str, writes: list[tuple[str, Any]], task_id: str,
                   task_path: str = "") -> None:
        stored = self.thread(t).writes.setdefault(cid, {})
        for idx, (ch, value) in enumerate(writes):
            key = (task_id, WRITES_IDX_MAP.get(ch, idx))
            if key[1] >= 0 and key in stored:
                continue
            stored[key] = (task_id, ch, copy.deepcopy(value), task_path)

    def tag(self, t: str, cid: str, name: str) -> None:
        self.thread(t).tags[name] = cid

    def untag(self, t: str, name: str) -> bool:
        return self.thread(t).tags.pop(name, None) is not None

    # --- deletes -----------------------------------------------------------------------------

    def delete_thread(self, t: str) -> None:
        self.threads.pop(t, None)

    def delete_for_runs(self, runs: set[str]) -> None:
        """Deletes the stored (visible) checkpoints of `runs` with their writes and tags.

        A ghost is left alone: retention removed it, and what it left is the frozen
        DeltaChannel history of the checkpoints kept after it, which is their state, as a
        snapshot in their channel_values would be (a later checkpoint's plain channel value
        holds earlier runs' messages too, and delete_for_runs never strips those). So a run
        deleted after a prune leaves the histories of the kept checkpoints as they were, and a
        deleted checkpoint takes its own frozen history with it: its children are relinked to
        its nearest stored ancestor, which is the parent the saver stores (retention relinked
        it past the ghosts), not to the ghosts it replayed from. Deleting a run that a live
        DeltaChannel replays from breaks that replay (BaseCheckpointSaver.delete_for_runs says
        so); after a prune there is nothing left to replay from but the frozen state."""
        for th in self.threads.values():
            gone = {c for c, cp in th.cps.items()
                    if cp.visible and cp.metadata.get("run_id") in runs}
            # The survivors are relinked past them, to their nearest stored ancestor.
            for cp in th.cps.values():
                if cp.parent in gone:
                    p = cp.parent
                    while p is not None and p in th.cps and (p in gone or not th.cps[p].visible):
                        p = th.cps[p].parent
                    cp.parent = p
            for c in gone:
                del th.cps[c]
                th.writes.pop(c, None)
            th.tags = {n: c for n, c in th.tags.items() if c not in gone}

    def retain(self, t: str, keep: int) -> None:
        """Keep the `keep` newest visible checkpoints and the tagged; the rest become ghosts
        and lose their pending writes (their DeltaChannel histories live on, frozen)."""
        th = self.threads.get(t)
        if th is None:
            return
        visible = th.visible()
        kept = set(visible[:keep]) | set(th.tags.values())
        for c in visible:
            if c not in kept:
                th.cps[c].visible = False

    def expired(self, t: str, cutoff: str) -> bool:
        """Whether compaction's max_age expires the thread: its newest checkpoint is older."""
        th = self.threads.get(t)
        stamps = [th.cps[c].checkpoint["ts"] for c in th.visible()] if th else []
        return bool(stamps) and max(stamps) < cutoff

    def copy_thread(self, src: str, dst: str) -> None:
        s = self.threads.get(src)
        if s is None or not s.cps:
            return
        d = self.thread(dst)
        for c, cp in s.cps.items():
            d.cps[c] = copy.deepcopy(cp)
        for c, ws in s.writes.items():
            d.writes.setdefault(c, {}).update(copy.deepcopy(ws))
        d.tags.update(s.tags)

    # --- reads -------------------------------------------------------------------------------

    def parent_of(self, th: Thread, cid: str) -> str | None:
        """The parent a reader sees: the nearest visible ancestor (survivors are relinked)."""
        p = th.cps[cid].parent
        while p is not None and p in th.cps and not th.cps[p].visible:
            p = th.cps[p].parent
        return p

    def pending(self, th: Thread, cid: str) -> list[tuple[str, str, Any]]:
        stored = th.writes.get(cid, {})
        keys = sorted(stored, key=lambda k: writes_sort_key(stored[k][3], *k))
        return [(stored[k][0], stored[k][1], stored[k][2]) for k in keys]

    def view(self, t: str, cid: str) -> tuple[Any, ...]:
        th = self.threads[t]
        cp = th.cps[cid]
        return (cid, self.parent_of(th, cid), cp.checkpoint["channel_values"], cp.metadata,
                self.pending(th, cid))

    def history(self, t: str, cid: str, channels: list[str]) -> dict[str, Any]:
        th = self.threads[t]
        collected: dict[str, list[tuple[str, str, Any]]] = {c: [] for c in channels}
        seeds: dict[str, Any] = {}
        remaining = set(channels)
        cursor = th.cps[cid].parent
        while cursor is not None and remaining and cursor in th.cps:
            cp = th.cps[cursor]
            for w in reversed(self.pending(th, cursor)):
                if w[1] in remaining:
                    collected[w[1]].append(w)
            for ch in list(remaining):
                if ch in cp.checkpoint["channel_values"]:
                    seeds[ch] = cp.checkpoint["channel_values"][ch]
                    remaining.discard(ch)
            cursor = cp.parent
        return {ch: {"writes": list(reversed(collected[ch])),
                     **({"seed": seeds[ch]} if ch in seeds else {})} for ch in channels}

    def observe(self, thread_ids: list[str], *, histories: bool = True,
                tags: bool = True) -> dict[str, Any]:
        from tests.reliability.harness import sought_of
        out: dict[str, Any] = {}
        for t in thread_ids:
            th = self.threads.get(t)
            visible = [] if th is None else th.visible()
            entry: dict[str, Any] = {"list": [self.view(t, c) for c in visible],
                                     "head": self.view(t, visible[0]) if visible else None}
            if histories:
                assert th is not None or not visible
                entry["delta"] = {}
                for c in visible:
                    assert th is not None
                    chans = sought_of(th.cps[c].checkpoint, th.cps[c].metadata)
                    if chans:
                        entry["delta"][c] = self.history(t, c, chans)
            if tags and visible:
                assert th is not None
                entry["tags"] = dict(th.tags)
            out[t] = entry
        return out
