"""The terminal inspector's library half: a checkpoint's state as JSON-ready data (`snapshot`)
and what changed between two checkpoints (`diff`), read through D1Saver's public API, so it
works with encryption keys and over many databases as the saver does."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from typing import Any

from d1saver import D1Saver, NotFoundError
from langgraph.checkpoint.base import CheckpointTuple

from compaction.fleet import history

INTERRUPT = "__interrupt__"
BRANCH = "branch:to:"


def jsonable(value: Any) -> Any:
    """`value` as JSON data: messages and models as their fields, anything else by repr."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, bytes):
        return {"bytes": len(value)}
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [jsonable(v) for v in value]
    dump = getattr(value, "model_dump", None)
    if callable(dump):  # pydantic models, LangChain messages
        try:
            return jsonable(dump())
        except Exception:  # noqa: BLE001 - a model that cannot dump itself is shown by repr
            pass
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return jsonable(dataclasses.asdict(value))
    return repr(value)


def _next_tasks(tup: CheckpointTuple) -> list[str]:
    """The nodes a graph would run next: their trigger channel holds a value they have not seen
    (LangGraph 1.x triggers a node through its `branch:to:NODE` channel)."""
    checkpoint = tup.checkpoint
    versions, seen = checkpoint.get("channel_versions", {}), checkpoint.get("versions_seen", {})
    values = checkpoint.get("channel_values", {})
    out = []
    for channel, version in versions.items():
        if channel.startswith(BRANCH) and channel in values:
            node = channel[len(BRANCH):]
            if version > seen.get(node, {}).get(channel, ""):
                out.append(node)
    return sorted(out)


def _tuple(saver: D1Saver, thread_id: str, checkpoint_id: str | None, ns: str) -> CheckpointTuple:
    conf: dict[str, Any] = {"thread_id": thread_id, "checkpoint_ns": ns}
    if checkpoint_id:
        conf["checkpoint_id"] = checkpoint_id
    tup = saver.get_tuple({"configurable": conf})
    if tup is None:
        what = f"checkpoint {checkpoint_id!r} of thread" if checkpoint_id else "thread"
        raise NotFoundError(f"{what} {thread_id!r} has no checkpoint (namespace {ns!r})")
    return tup


def snapshot(saver: D1Saver, thread_id: str, checkpoint_id: str | None = None, ns: str = "") -> dict[str, Any]:
    """One checkpoint (the newest by default) as data: channel values decoded, pending writes,
    next tasks, interrupts, metadata, tags and the stored bytes of its row."""
    tup = _tuple(saver, thread_id, checkpoint_id, ns)
    cid = tup.checkpoint["id"]
    conf = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": cid}}
    tags = sorted(name for name, at in saver.tags(conf).items() if at == cid)
    row = next((r for r in history(saver, thread_id, 10_000)
                if r["checkpoint_id"] == cid and r["checkpoint_ns"] == ns), {})
    writes = [{"task_id": w[0], "channel": w[1], "value": jsonable(w[2])} for w in tup.pending_writes or []]
    parent = (tup.parent_config or {}).get("configurable", {}).get("checkpoint_id")
    return {
        "thread_id": thread_id,
        "checkpoint_ns": ns,
        "checkpoint_id": cid,
        "parent_checkpoint_id": parent,
        "ts": tup.checkpoint.get("ts"),
        "metadata": jsonable(dict(tup.metadata or {})),
        "tags": tags,
        "next": _next_tasks(tup),
        "interrupts": [w["value"] for w in writes if w["channel"] == INTERRUPT],
        "channels": {k: jsonable(v) for k, v in sorted(tup.checkpoint.get("channel_values", {}).items())
                     if not k.startswith(BRANCH)},
        "pending_writes": writes,
        "bytes": row.get("bytes"),
        **({"database_id": row["database_id"]} if "database_id" in row else {}),
    }


def _key(item: Any) -> str:
    if isinstance(item, dict) and item.get("id"):
        return f"id:{item['id']}"
    return "json:" + json.dumps(item, sort_keys=True, default=str)


def diff(saver: D1Saver, thread_id: str, a: str, b: str, ns: str = "") -> dict[str, Any]:
    """Channel by channel, what checkpoint `b` holds that `a` did not: for lists (messages),
    the items added and removed (by message id where they have one); otherwise the values."""
    old, new = snapshot(saver, thread_id, a, ns), snapshot(saver, thread_id, b, ns)
    channels: dict[str, Any] = {}
    for name in sorted(set(old["channels"]) | set(new["channels"])):
        before, after = old["channels"].get(name), new["channels"].get(name)
        if before == after:
            continue
        if isinstance(before, list) or isinstance(after, list):
            before = before if isinstance(before, list) else [] if before is None else [before]
            after = after if isinstance(after, list) else [] if after is None else [after]
            keys_before, keys_after = {_key(i) for i in before}, {_key(i) for i in after}
            channels[name] = {"added": [i for i in after if _key(i) not in keys_before],
                              "removed": [i for i in before if _key(i) not in keys_after]}
        else:
            channels[name] = {"before": before, "after": after}
    return {"thread_id": thread_id, "checkpoint_ns": ns, "a": old["checkpoint_id"], "b": new["checkpoint_id"],
            "channels": channels,
            "metadata": {"before": old["metadata"], "after": new["metadata"]}
            if old["metadata"] != new["metadata"] else {}}
