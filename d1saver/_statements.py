"""Statements built from LangGraph's arguments: configs, checkpoints, writes, filters and ids.

Pure functions over the SQL catalogue (d1saver/_sql.py) and the values layer: they validate
their input with typed errors and bind everything as parameters. No I/O.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    Checkpoint,
    CheckpointMetadata,
    get_checkpoint_id,
    get_serializable_checkpoint_metadata,
)

from d1saver import _sql
from d1saver._crypto import checkpoint_binder, metadata_binder, write_binder
from d1saver._errors import ConfigError, MissingConfigKeyError, SerializationError
from d1saver._protocol import Param, Statement
from d1saver._values import StoredValue, Values

# Metadata filter keys become JSON paths ('$.' || key), bound as data; a dotted key reaches
# into nested objects. Anything else is refused before it reaches SQL.
_FILTER_KEY = re.compile(r"^[A-Za-z0-9_\-]+(\.[A-Za-z0-9_\-]+)*$")
# A write list is one JSON parameter; D1 caps a bound string at 2 MB.
_WRITES_PARAM_MAX = 1_500_000

Cursor = tuple[str, str, str]  # checkpoint_id, thread_id, checkpoint_ns of a page's last row


def thread_id_of(config: RunnableConfig) -> str:
    try:
        value = config["configurable"]["thread_id"]
        if value is None:
            raise KeyError("thread_id")
        return str(value)
    except (KeyError, TypeError):
        raise MissingConfigKeyError(
            "config['configurable']['thread_id'] is required: pass "
            "{'configurable': {'thread_id': ...}} (checkpointers key every state by thread_id)"
        ) from None


def ns_of(config: RunnableConfig) -> str:
    return str(config["configurable"].get("checkpoint_ns", ""))


def checkpoint_id_of(config: RunnableConfig) -> str:
    cid = get_checkpoint_id(config) if isinstance(config.get("configurable"), dict) else None
    if not cid:
        raise MissingConfigKeyError(
            "config['configurable']['checkpoint_id'] is required: writes belong to a "
            "checkpoint, pass the config returned by put()"
        )
    return str(cid)


def validate_filter(filter: Mapping[str, Any] | None) -> str | None:
    """The metadata filter as the JSON object the page statement reads, keys validated."""
    if not filter:
        return None
    for key in filter:
        if not isinstance(key, str) or not _FILTER_KEY.match(key):
            raise ConfigError(
                f"invalid metadata filter key {key!r}: use letters, digits, '_' and '-', "
                "with '.' between the parts of a nested key"
            )
    try:
        return json.dumps(dict(filter), ensure_ascii=False, separators=(",", ":"),
                          allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise SerializationError(f"metadata filter values must be JSON: {exc}") from None


def id_list(ids: Iterable[Any]) -> str:
    """Ids as the JSON parameter the list statements read: hex of their UTF-8, so that no id
    is cut short by a JSON decoder that stops at "\\u0000" (SQLite 3.40's does)."""
    try:
        return json.dumps([str(i).encode("utf-8").hex() for i in ids])
    except UnicodeEncodeError as exc:
        raise SerializationError(f"an id is not valid Unicode ({exc.reason})") from None


def chunk_statements(thread_id: str, ns: str, cid: str, owner: str, value: StoredValue,
                     replace: bool = True) -> list[Statement]:
    """The pieces of a value over 2 MB, as rows of `chunks` (none for a value that fits)."""
    if value.pieces is None:
        return []
    stmts = [Statement(_sql.DELETE_CHUNKS_OF, (thread_id, ns, cid, owner))] if replace else []
    sql = _sql.INSERT_CHUNK if replace else _sql.INSERT_CHUNK_IGNORE
    stmts += [Statement(sql, (thread_id, ns, cid, owner, seq, piece))
              for seq, piece in enumerate(value.pieces)]
    return stmts


def put_statements(values: Values, config: RunnableConfig, checkpoint: Checkpoint,
                   metadata: CheckpointMetadata, *, guard_head: bool
                   ) -> tuple[list[Statement], RunnableConfig]:
    """The statements of one `put`, and the config it returns."""
    thread_id = thread_id_of(config)
    ns = ns_of(config)
    parent_id = config["configurable"].get("checkpoint_id")
    cid = str(checkpoint["id"])
    md = get_serializable_checkpoint_metadata(config, metadata)
    value = values.dump(checkpoint, checkpoint_binder(thread_id, ns, cid))
    channels = json.dumps(sorted(checkpoint["channel_values"]), ensure_ascii=False)
    md_json = values.dump_metadata(md, channels, metadata_binder(thread_id, ns, cid))
    run_id = md.get("run_id")
    parent_id = None if parent_id is None else str(parent_id)
    params: list[Param] = [thread_id, ns, str(checkpoint["id"]), parent_id, value.type,
                           value.text, md_json, channels,
                           None if run_id is None else str(run_id), checkpoint.get("ts")]
    stmts: list[Statement] = []
    if guard_head:
        stmts.append(Statement(_sql.GUARD_HEAD, params[:4]))
    stmts.append(Statement(_sql.UPSERT_CHECKPOINT, params))
    stmts += chunk_statements(thread_id, ns, str(checkpoint["id"]), "", value)
    next_config: RunnableConfig = {"configurable": {
        "thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": str(checkpoint["id"])}}
    return stmts, next_config


def put_writes_statements(values: Values, config: RunnableConfig,
                          writes: Sequence[tuple[str, Any]], task_id: str,
                          task_path: str) -> list[Statement]:
    """The statements of one `put_writes`: the task's writes as JSON parameters."""
    thread_id = thread_id_of(config)
    ns = ns_of(config)
    cid = checkpoint_id_of(config)
    replace = all(channel in WRITES_IDX_MAP for channel, _ in writes)
    sql = _sql.INSERT_WRITES_REPLACE if replace else _sql.INSERT_WRITES_IGNORE
    stmts: list[Statement] = []
    rows: list[list[Any]] = []
    size = 0

    def flush() -> None:
        nonlocal rows, size
        if rows:
            stmts.append(Statement(sql, (thread_id, ns, cid, str(task_id), task_path,
                                         json.dumps(rows, ensure_ascii=False))))
        rows, size = [], 0

    for idx, (channel, obj) in enumerate(writes):
        widx = WRITES_IDX_MAP.get(channel, idx)
        value = values.dump(obj, write_binder(thread_id, ns, cid, str(task_id), task_path, widx,
                                              channel))
        if size + len(value.text) > _WRITES_PARAM_MAX:
            flush()
        rows.append([widx, channel, value.type, value.text])
        size += len(value.text) + len(channel) + 32
        stmts += chunk_statements(thread_id, ns, cid, f"{task_id}/{widx}", value,
                                  replace=replace)
    flush()
    return stmts


def page_statement(*, thread_id: str | None, ns: str | None, checkpoint_id: str | None,
                   before: str | None, filter_json: str | None, cursor: Cursor | None,
                   size: int) -> Statement:
    """One page of checkpoints with their writes and chunks, in the narrowest scope."""
    if thread_id is None:
        sql = _sql.SELECT_PAGE_ALL
    elif ns is None:
        sql = _sql.SELECT_PAGE_THREAD
    else:
        sql = _sql.SELECT_PAGE_THREAD_NS
    c = cursor or (None, None, None)
    return Statement(sql, (thread_id, ns, checkpoint_id, before, filter_json, *c, size))


def delta_statement(page: Statement) -> Statement:
    """The DeltaChannel prefetch that rides with a page statement (same parameters)."""
    sql = {_sql.SELECT_PAGE_THREAD_NS: _sql.SELECT_PAGE_DELTA_THREAD_NS,
           _sql.SELECT_PAGE_THREAD: _sql.SELECT_PAGE_DELTA_THREAD,
           _sql.SELECT_PAGE_ALL: _sql.SELECT_PAGE_DELTA_ALL}[page.sql]
    return Statement(sql, page.params)


def delta_history_statement(config: RunnableConfig, channels: Sequence[str]) -> Statement:
    return Statement(_sql.DELTA_HISTORY, (
        thread_id_of(config), ns_of(config), get_checkpoint_id(config),
        json.dumps(list(channels), ensure_ascii=False)))


def delete_threads_statements(thread_ids: Sequence[str]) -> list[Statement]:
    ids = id_list(thread_ids)
    return [Statement(s, (ids,)) for s in _sql.DELETE_THREADS]


def delete_for_runs_statements(run_ids: Sequence[str]) -> list[Statement]:
    ids = id_list(run_ids)
    stmts = _sql.retention_batch([_sql.SCOPE_RUNS, _sql.PLAN_KEEP_OTHER_RUNS])
    return [Statement(s, (ids,) if "?1" in s else ()) for s in stmts]


def copy_thread_statements(source: str, target: str) -> list[Statement]:
    params = (str(source), str(target))
    return [Statement(s, params) for s in _sql.COPY_THREAD]


def retention_statements(thread_ids: Sequence[str], keep: int, *, summarize: bool = False,
                         delete: bool = True) -> list[Statement]:
    """One retention batch over `thread_ids`: keep the `keep` newest per namespace, every
    tagged checkpoint, and the ancestors their DeltaChannels replay from; relink; delete."""
    ids = id_list(thread_ids)
    bound = []
    for s in _sql.retention_batch([_sql.SCOPE_THREADS, _sql.PLAN_KEEP],
                                  summarize=summarize, delete=delete):
        if s == _sql.SCOPE_THREADS:
            bound.append(Statement(s, (ids,)))
        elif s == _sql.PLAN_KEEP:
            bound.append(Statement(s, (int(keep),)))
        else:
            bound.append(Statement(s))
    return bound


def setup_statements() -> list[Statement]:
    """Schema version 1 (idempotent) and the stored version, in one batch."""
    return [*(Statement(s) for s in _sql.MIGRATIONS[0]), Statement(_sql.SELECT_SCHEMA_VERSION)]


def migration_statements(version: int) -> list[Statement]:
    """The statements that take a database to `version`, recording it, in one batch."""
    return [*(Statement(s) for s in _sql.MIGRATIONS[version - 1]),
            Statement(_sql.RECORD_SCHEMA_VERSION, (version,))]
