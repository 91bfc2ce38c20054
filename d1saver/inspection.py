"""Inspection as JSON-ready data, read through D1Saver's public API and read-only statements:
what `d1saver threads/history/show/diff --json` print and what the web inspector's `/api/...`
returns, built once here for both (so their shapes cannot drift apart).

Nothing here writes: give it a saver made with `auto_setup=False` and a database without
d1saver's schema is reported by `schema_status`, never set up.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, TypeVar

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import CheckpointTuple

from d1saver import admin
from d1saver.admin import databases, each_reading, spans
from d1saver.core.errors import (FleetError, InvalidInputError, NotFoundError, QueryError,
                                  SchemaNotReadyError, StoredValueError)
from d1saver.core.protocol import Statement
from d1saver.memory import namespaces as _ns
from d1saver.memory.encoding import load_item
from d1saver.saver import D1Saver
from d1saver.sql import inspection as _sql
from d1saver.storage.crypto import Sealer, key_id_of_text
from d1saver.storage.values import METADATA_KEY

T = TypeVar("T")
INTERRUPT = "__interrupt__"
BRANCH = "branch:to:"
SORTS = ("updated", "bytes", "checkpoints", "id")


# --- databases ---------------------------------------------------------------------------------
# databases, spans, each_reading: d1saver.admin's, which compaction shares.

def each(saver: D1Saver, fn: Callable[[D1Saver], T], operation: str) -> dict[str, T]:
    """fn on every database ({database_id: result}): the saver itself if it has one."""
    if not spans(saver):
        return {str(saver.database_id): fn(saver)}
    try:
        return saver.each_database(fn, operation=operation, database_ids=databases(saver))
    except FleetError as exc:  # a read-only saver: a database without the schema reads as empty
        if not exc.results or not all(isinstance(e, SchemaNotReadyError) and e.version == 0
                                      for e in exc.errors.values()):
            raise
        return dict(exc.results)


def schema_status(saver: D1Saver) -> dict[str, dict[str, Any]]:
    """Each database's d1saver schema, read without setting it up or migrating it:
    {database_id: {"version": n or None, "problem": text or None}}."""
    def read(db: D1Saver) -> dict[str, Any]:
        try:
            (result,) = db.client.execute([admin.read_schema()])
        except QueryError as exc:
            if "no such table" not in str(exc):
                raise
            return {"version": None, "problem": "no d1saver schema (nothing was ever stored "
                    "here, or not by d1saver): the inspector does not create it"}
        version = admin.schema_version(result)
        problem = None
        if version < admin.SCHEMA_VERSION:
            problem = (f"schema v{version}, older than this d1saver's v{admin.SCHEMA_VERSION}: "
                       "a d1saver that writes migrates it on first use; the inspector does not")
        return {"version": version, "problem": problem}

    return each(saver, read, "schema")


# --- values as JSON ----------------------------------------------------------------------------

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


def next_tasks(tup: CheckpointTuple) -> list[str]:
    """The nodes a graph would run next: their trigger channel holds a value they have not seen
    (LangGraph 1.x triggers a node through its `branch:to:NODE` channel)."""
    checkpoint = tup.checkpoint
    versions, seen = checkpoint.get("channel_versions", {}), checkpoint.get("versions_seen", {})
    values = checkpoint.get("channel_values", {})
    out = []
    for channel, version in versions.items():
        if channel.startswith(BRANCH) and channel in values:
            node = channel[len(BRANCH):]
            last: Any = seen.get(node, {}).get(channel, "")
            if version > last:
                out.append(node)
    return sorted(out)


def _writes(tup: CheckpointTuple) -> list[dict[str, Any]]:
    return [{"task_id": w[0], "channel": w[1], "value": jsonable(w[2])}
            for w in tup.pending_writes or []]


# --- threads -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class ThreadsPage:
    """One page of threads (`threads`): rows as `d1saver threads --json` prints them, how many
    threads match, and the cursor of the next page (None: this is the last)."""

    threads: list[dict[str, Any]]
    total: int
    next: str | None


def _cursor(text: str | None) -> tuple[str, str, str] | None:
    if text is None or text == "":
        return None
    try:
        found = json.loads(text)
    except ValueError:
        found = None
    if not (isinstance(found, list) and len(found) == 3 and all(isinstance(x, str) for x in found)):
        raise InvalidInputError(f"not a page cursor: {text!r}")
    return found[0], found[1], found[2]


def threads(saver: D1Saver, *, text: str = "", sort: str = "updated", limit: int = 50,
            after: str | None = None) -> ThreadsPage:
    """A page of threads across databases, in SQL: those whose id holds `text` (ASCII case
    folded), by `sort` (SORTS: newest update, most bytes, most checkpoints, or id), `limit`
    of them after the cursor `after` (a previous page's `next`). One request per database;
    each row also says whether the thread waits on an interrupt. Over several databases each
    row names its database_id (a thread mid-move may show in two)."""
    if sort not in SORTS:
        raise InvalidInputError(f"sort by one of {', '.join(SORTS)}, not {sort!r}")
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise InvalidInputError(f"a page holds at least 1 thread, not {limit!r}")
    cursor = _cursor(after)
    fleet = spans(saver)

    def read(db: D1Saver) -> list[dict[str, Any]]:
        params: dict[str, Any] = {"text": text, "sort": sort, "limit": limit + 1,
                                  "key": None, "after": None, "inclusive": 0}
        if cursor is not None:
            here = str(db.database_id) if fleet else ""
            params.update(key=cursor[0], after=cursor[1], inclusive=int(here > cursor[2]))
        return admin.query(db, Statement.bind(_sql.THREADS_LIST, params), _sql.THREADS_LIST_COLUMNS)

    found = each(saver, read, "threads")
    total = sum(int(rows[0]["total"]) if rows else 0 for rows in found.values())
    rows = [{**row, **({"database_id": db} if fleet else {})}
            for db, part in found.items() for row in part if row["thread_id"] is not None]
    rows.sort(key=lambda r: (r["thread_id"], r.get("database_id", "")))
    rows.sort(key=lambda r: r["sort_key"], reverse=True)
    page, more = rows[:limit], len(rows) > limit
    last = page[-1] if page else None
    return ThreadsPage(
        threads=[_thread(r) for r in page], total=total,
        next=json.dumps([last["sort_key"], last["thread_id"], last.get("database_id", "")])
        if more and last is not None else None)


def _thread(row: dict[str, Any]) -> dict[str, Any]:
    out = {"thread_id": str(row["thread_id"]), "checkpoints": int(row["checkpoints"]),
           "namespaces": int(row["namespaces"]), "updated": row["updated"],
           "bytes": int(row["bytes"] or 0), "waiting": bool(row["waiting"])}
    if "database_id" in row:
        out["database_id"] = row["database_id"]
    return out


def history(saver: D1Saver, thread_id: str, limit: int) -> list[dict[str, Any]]:
    """A thread's newest checkpoints (admin.thread_history): over several databases, from every
    one that holds some (each row names its database_id), newest first."""
    return admin.thread_history(saver, thread_id, limit)


def run_history(saver: D1Saver, limit: int) -> list[dict[str, Any]]:
    """The newest scheduled compaction runs (admin.compaction_runs: one record per run and
    database, which each database keeps), from every database, newest first."""
    if not spans(saver):
        return admin.query(saver, admin.compaction_runs(limit))
    found = each_reading(saver, lambda db: admin.query(db, admin.compaction_runs(limit)),
                         "history")
    rows = [row for part in found.values() for row in part]
    rows.sort(key=lambda r: (r["run_id"], r["database_id"]))
    rows.sort(key=lambda r: r["started_at"], reverse=True)
    return rows[:limit]


def timeline(saver: D1Saver, thread_id: str, limit: int = 500) -> list[dict[str, Any]]:
    """A thread's checkpoints newest first as `history` gives them, each with its interrupts
    (their values), next tasks and whether its values could be read (`sealed`: the reason
    they could not, e.g. sealed under a key not given). Two requests for up to page_size
    checkpoints (history, then `list`, which decodes them)."""
    rows = history(saver, thread_id, limit)
    decoded: dict[tuple[str, str], CheckpointTuple] = {}
    problem = None
    try:
        for tup in saver.list({"configurable": {"thread_id": thread_id}}, limit=limit):
            conf = tup.config["configurable"]
            decoded[(conf.get("checkpoint_ns", ""), conf["checkpoint_id"])] = tup
    except StoredValueError as exc:  # sealed without its key, or unreadable: say so per row
        problem = _unreadable(exc)
    for row in rows:
        found = decoded.get((row["checkpoint_ns"], row["checkpoint_id"]))
        writes = _writes(found) if found is not None else []
        row["interrupts"] = [w["value"] for w in writes if w["channel"] == INTERRUPT]
        row["next"] = next_tasks(found) if found is not None else []
        row["sealed"] = None if found is not None else problem
    return rows


def _unreadable(exc: StoredValueError) -> str:
    return f"{type(exc).__name__}: {exc}"


# --- one checkpoint ----------------------------------------------------------------------------

# LangGraph's checkpoint ids are 36 characters (uuid6): a text that long is an id, not a prefix.
FULL_ID = 36
PREFIX_MATCHES = 20  # the most matches an ambiguous prefix lists


def _missing(thread_id: str, checkpoint_id: str | None, ns: str) -> NotFoundError:
    where = f" in namespace {ns!r}" if ns else ""
    if checkpoint_id:
        return NotFoundError(f"thread {thread_id!r} has no checkpoint {checkpoint_id!r}{where}")
    return NotFoundError(f"thread {thread_id!r} has no checkpoint{where}")


def _tuple(saver: D1Saver, thread_id: str, checkpoint_id: str | None, ns: str) -> CheckpointTuple:
    conf: dict[str, Any] = {"thread_id": thread_id, "checkpoint_ns": ns}
    if checkpoint_id:
        conf["checkpoint_id"] = checkpoint_id
    try:
        tup = saver.get_tuple({"configurable": conf})
    except SchemaNotReadyError as exc:
        # Over several databases, the thread's home without d1saver's schema holds no thread
        # (as `each_reading` reads it): not found, as D1Store and D1Cache read it.
        if exc.version or not spans(saver):
            raise
        tup = None
    if tup is None:
        raise _missing(thread_id, checkpoint_id, ns)
    return tup


def checkpoint_ids(saver: D1Saver, thread_id: str, prefix: str, ns: str = "", *,
                   limit: int = PREFIX_MATCHES + 1) -> list[str]:
    """The ids of a thread's checkpoints in namespace `ns` that start with `prefix`, in id
    order, at most `limit`: one request per database (a thread mid-move may be in two)."""
    if not prefix:
        raise InvalidInputError("a checkpoint id (or the start of one) is not empty")
    nxt = ord(prefix[-1]) + 1
    nxt = 0xE000 if 0xD800 <= nxt <= 0xDFFF else nxt  # skip the surrogates, which UTF-8 lacks
    if nxt > 0x10FFFF:  # nothing sorts after U+10FFFF: read as a whole id
        return [prefix]
    statement = Statement.bind(_sql.CHECKPOINT_IDS, {
        "thread_id": thread_id, "checkpoint_ns": ns, "prefix": prefix,
        "upper": prefix[:-1] + chr(nxt), "limit": int(limit)})
    found = each(saver, lambda db: admin.query(db, statement, _sql.CHECKPOINT_IDS_COLUMNS), "ids")
    return sorted({row["checkpoint_id"] for rows in found.values() for row in rows})[:limit]


def resolve_checkpoint(saver: D1Saver, thread_id: str, text: str, ns: str = "") -> str:
    """The id of the checkpoint `text` names: the id itself when it is whole (36 characters,
    no request), else the one id of the thread's namespace `ns` it starts, or that equals it.
    NotFoundError when none does; InvalidInputError listing the matches when several do."""
    if len(text) >= FULL_ID:
        return text
    found = checkpoint_ids(saver, thread_id, text, ns)
    if text in found or len(found) == 1:
        return text if text in found else found[0]
    if not found:
        raise _missing(thread_id, text, ns)
    more = len(found) > PREFIX_MATCHES
    listed = ", ".join(found[:PREFIX_MATCHES]) + (", ..." if more else "")
    raise InvalidInputError(
        f"{text!r} starts {'more than ' + str(PREFIX_MATCHES) if more else len(found)} "
        f"checkpoint ids of thread {thread_id!r}: {listed}; give more of the id")


def snapshot(saver: D1Saver, thread_id: str, checkpoint_id: str | None = None, ns: str = "") -> dict[str, Any]:
    """One checkpoint (the newest by default) as data: channel values decoded, pending writes,
    next tasks, interrupts, metadata, tags and the stored bytes of its row."""
    tup = _tuple(saver, thread_id, checkpoint_id, ns)
    cid = tup.checkpoint["id"]
    conf: RunnableConfig = {
        "configurable": {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": cid}}
    tags = sorted(name for name, at in saver.tags(conf).items() if at == cid)
    row = next((r for r in history(saver, thread_id, 10_000)
                if r["checkpoint_id"] == cid and r["checkpoint_ns"] == ns), {})
    writes = _writes(tup)
    parent = (tup.parent_config or {}).get("configurable", {}).get("checkpoint_id")
    return {
        "thread_id": thread_id,
        "checkpoint_ns": ns,
        "checkpoint_id": cid,
        "parent_checkpoint_id": parent,
        "ts": tup.checkpoint.get("ts"),
        "metadata": jsonable(dict(tup.metadata or {})),
        "tags": tags,
        "next": next_tasks(tup),
        "interrupts": [w["value"] for w in writes if w["channel"] == INTERRUPT],
        "channels": {k: jsonable(v) for k, v in sorted(tup.checkpoint.get("channel_values", {}).items())
                     if not k.startswith(BRANCH)},
        "pending_writes": writes,
        "bytes": row.get("bytes"),
        **({"database_id": row["database_id"]} if "database_id" in row else {}),
    }


def _heads(saver: D1Saver, thread_id: str, checkpoint_id: str, ns: str) -> list[dict[str, Any]]:
    statement = Statement.bind(_sql.CHECKPOINT_HEAD, {
        "thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": checkpoint_id})

    def read(db: D1Saver) -> list[dict[str, Any]]:
        return admin.query(db, statement, _sql.CHECKPOINT_HEAD_COLUMNS)

    return [row for rows in each(saver, read, "sealed_key").values() for row in rows]


def sealed_key(saver: D1Saver, thread_id: str, checkpoint_id: str, ns: str = "") -> str | None:
    """The id (hex) of the key a checkpoint's value is sealed under, None if it is not sealed
    (or not found): read from its stored text, nothing opened."""
    heads = [row["head"] for row in _heads(saver, thread_id, checkpoint_id, ns)]
    return next((key for key in map(key_id_of_text, heads) if key is not None), None)


def sealed(saver: D1Saver, thread_id: str, checkpoint_id: str | None, ns: str,
           problem: StoredValueError) -> dict[str, Any]:
    """What can be shown of a checkpoint whose values could not be opened (`problem`: sealed
    under a key not given, say): its history row (step, source, ts, parent, pending writes,
    stored bytes, tags), the metadata keys leave in clear, the id of the key its value is
    sealed under (`key_id`) and why it could not be opened (`sealed`). The newest checkpoint
    of `ns` when `checkpoint_id` is None. NotFoundError if there is no such checkpoint."""
    row = next((r for r in history(saver, thread_id, 10_000) if r["checkpoint_ns"] == ns
                and checkpoint_id in (None, r["checkpoint_id"])), None)
    if row is None:
        raise _missing(thread_id, checkpoint_id, ns)
    heads = _heads(saver, thread_id, row["checkpoint_id"], ns)
    keys = [key for key in (key_id_of_text(h["head"]) for h in heads) if key is not None]
    try:
        clear = json.loads(heads[0]["metadata"]) if heads and heads[0]["metadata"] else {}
    except ValueError:
        clear = {}
    metadata = {k: v for k, v in clear.items() if k != METADATA_KEY} \
        if isinstance(clear, dict) else {}
    return {**row, "thread_id": thread_id, "metadata": metadata,
            "key_id": keys[0] if keys else None, "sealed": _unreadable(problem)}


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


# --- storage -----------------------------------------------------------------------------------

def growth(saver: D1Saver, thread_id: str, limit: int = 5_000) -> list[dict[str, Any]]:
    """A thread's storage checkpoint by checkpoint, oldest first: each row's bytes (its row,
    writes, parts, frozen histories, the chunks it first reached: `added`) and the running
    `total`. Over several databases, from the database that holds the most of it."""
    statement = Statement.bind(_sql.GROWTH, {"thread_id": thread_id, "limit": int(limit)})
    found = each(saver, lambda db: admin.query(db, statement, _sql.GROWTH_COLUMNS), "growth")
    rows = max(found.values(), key=len)
    total = 0
    for row in rows:
        row["added"] = sum(int(row[c] or 0) for c in _sql.GROWTH_COLUMNS if c.endswith("_bytes"))
        total += row["added"]
        row["total"] = total
    return rows


# --- memory: D1Store's namespaces and items, D1Cache's figures ---------------------------------

def _when(seconds: Any) -> str | None:
    return None if seconds is None else datetime.fromtimestamp(
        float(seconds), timezone.utc).isoformat()


def store_namespaces(saver: D1Saver, prefix: Sequence[str] = (), *, limit: int = 100,
                     offset: int = 0, now: float | None = None) -> list[dict[str, Any]]:
    """The namespaces under `prefix` holding live items, with their item count, stored bytes,
    last update and next expiry, from every database; in namespace order."""
    exact, low, high = _ns.scope(prefix)
    statement = Statement.bind(_sql.STORE_NAMESPACES, {
        "exact": exact, "low": low, "high": high, "now": time.time() if now is None else now,
        "limit": int(limit) + int(offset), "offset": 0})
    found = each(saver, lambda db: admin.query(db, statement, _sql.STORE_NAMESPACES_COLUMNS), "store")
    merged: dict[str, dict[str, Any]] = {}
    for rows in found.values():
        for row in rows:
            seen = merged.setdefault(row["ns"], {"items": 0, "bytes": 0, "updated_at": None,
                                                 "next_expiry": None})
            seen["items"] += int(row["items"])
            seen["bytes"] += int(row["bytes"] or 0)
            for k, pick in (("updated_at", max), ("next_expiry", min)):
                values = [v for v in (seen[k], row[k]) if v is not None]
                seen[k] = pick(values) if values else None
    return [{"namespace": list(_ns.decode(ns)), "items": f["items"], "bytes": f["bytes"],
             "updated_at": _when(f["updated_at"]), "next_expiry": _when(f["next_expiry"])}
            for ns, f in sorted(merged.items())][offset:offset + limit]


def store_items(saver: D1Saver, namespace: Sequence[str], sealer: Sealer | None, *,
                limit: int = 50, offset: int = 0, now: float | None = None) -> list[dict[str, Any]]:
    """The live items of exactly `namespace`, newest first, as `d1saver store ls --json`
    prints them, with their TTL (`ttl_minutes`, `expires_at`); a value that cannot be opened
    (sealed under a key not given) is None with the reason in `sealed`. No TTL is refreshed."""
    _ns.check_labels(namespace)
    ns = _ns.encode(namespace)
    statement = Statement.bind(_sql.STORE_ITEMS, {
        "ns": ns, "now": time.time() if now is None else now,
        "limit": int(limit) + int(offset), "offset": 0})
    found = each(saver, lambda db: admin.query(db, statement, _sql.STORE_ITEMS_COLUMNS), "store")
    rows = [row for part in found.values() for row in part]
    rows.sort(key=lambda r: r["key"])
    rows.sort(key=lambda r: r["updated_at"], reverse=True)
    out = []
    for row in rows[offset:offset + limit]:
        try:
            value, problem = load_item(row["value"], ns, row["key"], sealer), None
        except StoredValueError as exc:
            value, problem = None, _unreadable(exc)
        out.append({"namespace": list(namespace), "key": row["key"], "value": value,
                    "created_at": _when(row["created_at"]), "updated_at": _when(row["updated_at"]),
                    "ttl_minutes": row["ttl_minutes"], "expires_at": _when(row["expires_at"]),
                    "bytes": len(row["value"]), "sealed": problem})
    return out


def cache_summary(saver: D1Saver, *, limit: int = 200, now: float | None = None
                  ) -> list[dict[str, Any]]:
    """D1Cache's entries per namespace (every database's added up): entries, stored bytes,
    how many have expired (the next sweep deletes them) and the next expiry."""
    statement = Statement.bind(_sql.CACHE_SUMMARY, {
        "now": time.time() if now is None else now, "limit": int(limit)})
    found = each(saver, lambda db: admin.query(db, statement, _sql.CACHE_SUMMARY_COLUMNS), "cache")
    merged: dict[str, dict[str, Any]] = {}
    for rows in found.values():
        for row in rows:
            seen = merged.setdefault(row["ns"], {"entries": 0, "bytes": 0, "expired": 0,
                                                 "next_expiry": None})
            for k in ("entries", "bytes", "expired"):
                seen[k] += int(row[k] or 0)
            values = [v for v in (seen["next_expiry"], row["next_expiry"]) if v is not None]
            seen["next_expiry"] = min(values) if values else None
    return [{"namespace": _cache_ns(ns), **{k: v for k, v in f.items() if k != "next_expiry"},
             "next_expiry": _when(f["next_expiry"])} for ns, f in sorted(merged.items())]


def _cache_ns(text: str) -> list[str] | str:
    try:
        return list(_ns.decode(text))
    except (ValueError, TypeError):
        return text


__all__ = ["FULL_ID", "INTERRUPT", "SORTS", "ThreadsPage", "cache_summary", "checkpoint_ids",
           "databases", "diff", "each", "growth", "history", "jsonable", "next_tasks",
           "resolve_checkpoint", "run_history", "schema_status", "sealed", "sealed_key",
           "snapshot", "spans", "store_items", "store_namespaces", "threads", "timeline"]
