"""A thread's checkpoints drawn as branches, as `git log --graph` draws commits: rows newest
first, each in a lane; a checkpoint with two children (a fork: time travel, or two writers)
is where two lanes join. Pure: rows in, drawing instructions out."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

LANE = 16  # pixels between lanes
ROW = 44  # pixels per row: the rows of the page are this tall


def lanes(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """For each row (newest first; `checkpoint_id`, `parent_checkpoint_id`): its `lane`, the
    lines of its slice of the graph (`lines`: (x1, y1, x2, y2)), the node's centre (`x`), and
    whether it heads a branch (`head`: no child) or is a fork (`fork`: several children)."""
    present = {r["checkpoint_id"] for r in rows}
    active: list[str | None] = []  # lane i waits for the checkpoint id active[i]
    out: list[dict[str, Any]] = []
    mid = ROW // 2
    for row in rows:
        cid, parent = row["checkpoint_id"], row.get("parent_checkpoint_id")
        mine = [i for i, want in enumerate(active) if want == cid]
        if mine:
            lane = mine[0]
        elif None in active:
            lane = active.index(None)
        else:
            lane = len(active)
            active.append(None)
        before = list(active)
        for i in mine:
            active[i] = None
        active[lane] = parent if parent in present else None
        lines = [(_x(i), 0, _x(i), ROW) for i, want in enumerate(before)
                 if want is not None and i not in mine]  # lanes passing by
        lines += [(_x(i), 0, _x(lane), mid) for i in mine]  # children joining this checkpoint
        if active[lane] is not None:
            lines.append((_x(lane), mid, _x(lane), ROW))  # on to the parent
        while active and active[-1] is None:
            active.pop()
        out.append({"lane": lane, "x": _x(lane), "y": mid, "lines": lines,
                    "head": not mine, "fork": len(mine) > 1})
    width = max((max(r["x"] for r in out) + LANE // 2) if out else LANE, LANE)
    for r in out:
        r["width"] = width
    return out


def _x(lane: int) -> int:
    return LANE // 2 + lane * LANE


def chart(values: Sequence[int], *, width: int = 640, height: int = 200) -> dict[str, Any]:
    """The points of a line chart of `values` (a running total) in a width x height box, and
    the bars of each step's increase under it."""
    top = max(values) if values else 0
    n = len(values)
    step = width / max(n, 1)

    def y(v: int) -> float:
        return round(height - (v / top * height if top else 0), 1)

    points = " ".join(f"{round((i + 0.5) * step, 1)},{y(v)}" for i, v in enumerate(values))
    bars = [(round((i + 0.2) * step, 1), y(v - (values[i - 1] if i else 0)))
            for i, v in enumerate(values)]
    return {"points": points, "bars": bars, "width": width, "height": height, "top": top,
            "bar_width": max(round(step * 0.6, 1), 0.5)}
