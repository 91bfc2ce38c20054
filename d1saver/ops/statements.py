"""Statements built from LangGraph's arguments: configs, checkpoints, writes, filters and ids.

Pure functions over the SQL catalogue (d1saver/sql/catalogue.py) and the values layer: they validate
their input with typed errors and bind everything as parameters. No I/O.
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass
from collections.abc import Container, Iterable, Mapping, Sequence
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    Checkpoint,
    CheckpointMetadata,
    get_checkpoint_id,
    get_serializable_checkpoint_metadata,
)

from d1saver.sql import catalogue as _sql
from d1saver.storage.crypto import checkpoint_binder, write_binder
from d1saver.core.errors import (ConfigError, MissingConfigKeyError, ResponseError,
                                  SerializationError)
from d1saver.core.protocol import ChunkRow, Param, Result, Statement
from d1saver.storage.manifest import Chunk
from d1saver.storage.values import (METADATA_OWNER, ROW_MAX, Serialized, StoredValue, Values,
                                    utf8_size)

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
    """The metadata filter as the page statement's parameter, keys validated: one
    [path, doc] pair per key, doc holding the wanted value at path (the page statements'
    metadata filter, _sql.SELECT_PAGE_*_FILTERED)."""
    if not filter:
        return None
    entries = []
    for key, value in filter.items():
        if not isinstance(key, str) or not _FILTER_KEY.match(key):
            raise ConfigError(
                f"invalid metadata filter key {key!r}: use letters, digits, '_' and '-', "
                "with '.' between the parts of a nested key"
            )
        doc = value
        for part in reversed(key.split(".")):
            doc = {part: doc}
        try:
            entries.append(["$." + key, json.dumps(doc, ensure_ascii=False,
                                                   separators=(",", ":"), allow_nan=False)])
        except (TypeError, ValueError) as exc:
            raise SerializationError(f"metadata filter values must be JSON: {exc}") from None
    return json.dumps(entries, ensure_ascii=False, separators=(",", ":"))


def metadata_matches(metadata: Mapping[str, Any], filter: Mapping[str, Any] | None) -> bool:
    """InMemorySaver's test, `query == metadata.get(key)`, a dotted key read as a path. The
    page statement decides the same in SQL; this settles the rows it cannot (chunked metadata)."""
    for key, query in (filter or {}).items():
        found: Any = metadata
        for part in key.split("."):
            found = found.get(part) if isinstance(found, Mapping) else None
        if not query == found:
            return False
    return True


def id_list(ids: Iterable[Any]) -> str:
    """Ids as the JSON parameter the list statements read: hex of their UTF-8, so that no id
    is cut short by a JSON decoder that stops at "\\u0000" (SQLite 3.40's does)."""
    try:
        return json.dumps([str(i).encode("utf-8").hex() for i in ids])
    except UnicodeEncodeError as exc:
        raise SerializationError(f"an id is not valid Unicode ({exc.reason})") from None


def part_statements(thread_id: str, ns: str, cid: str, owner: str,
                     parts: list[str] | None) -> list[Statement]:
    """The parts of an upserted value (checkpoint, metadata, special write), replacing its
    owner's; sent after its row (none for a value that fits its row)."""
    if parts is None:
        return []
    key = {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": cid, "owner": owner}
    return [Statement.bind(_sql.DELETE_CHUNKS_OF, key),
            *(Statement.bind(_sql.INSERT_CHUNK, {**key, "seq": seq, "data": part})
              for seq, part in enumerate(parts))]


def _write_part_statements(thread_id: str, ns: str, cid: str, task_id: str, idx: int,
                            value: StoredValue) -> list[Statement]:
    """The parts of a regular (insert-or-ignore) write: stored only with its own row."""
    owner = f"{task_id}/{idx}"
    return [Statement.bind(_sql.INSERT_WRITE_CHUNK, {
                "thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": cid,
                "owner": owner, "seq": seq, "data": part, "task_id": task_id, "idx": idx,
                "value": value.text})
            for seq, part in enumerate(value.parts or [])]


def unwritten_statements(thread_id: str, ns: str, cid: str,
                         unwritten: Sequence[str]) -> list[Statement]:
    """The DeltaChannels the checkpoint declares but has never written, for the SQL walks to
    leave alone (none: no statement, the common case)."""
    if not unwritten:
        return []
    return [Statement.bind(_sql.PUT_UNWRITTEN, {
        "thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": cid,
        "channels": json.dumps(list(unwritten), ensure_ascii=False)})]


def new_chunks_params(thread_id: str, chunks: Iterable[Chunk]) -> tuple[list[ChunkRow],
                                                                         list[Statement]]:
    """New chunks as the rows of the put views' :chunks parameter (children before nodes), or,
    past what one parameter carries, as INSERT_CHUNKS statements to send first."""
    rows: list[ChunkRow] = [(c.id, c.level, c.data) for c in chunks]
    # 40 characters a row bound its JSON beyond the data (an id is 25, and neither holds a
    # character JSON escapes).
    if sum(len(row[2]) + 40 for row in rows) <= _WRITES_PARAM_MAX:
        return rows, []
    stmts: list[Statement] = []
    batch: list[ChunkRow] = []
    size = 0
    for row in rows:
        if batch and size + len(row[2]) > _WRITES_PARAM_MAX:
            stmts.append(Statement.bind(_sql.INSERT_CHUNKS, {"thread_id": thread_id},
                                        chunks=batch))
            batch, size = [], 0
        batch.append(row)
        size += len(row[2]) + 40
    stmts.append(Statement.bind(_sql.INSERT_CHUNKS, {"thread_id": thread_id}, chunks=batch))
    return [], stmts


@dataclass(frozen=True)
class PutInput:
    """One put's arguments, read whole when the put is entered: the ids, the metadata as JSON
    (and a copy parsed back from it), the checkpoint serialized. The statements are built from
    it, again if the batch is resent with every chunk; nothing LangGraph may still change is
    read after it is made (docs/RELIABILITY.md, "LangGraph's default durability")."""

    thread_id: str
    ns: str
    cid: str
    parent_id: str | None
    metadata: dict[str, Any]
    channels: str  # the row's `channels` column: the names of the channel values, as JSON
    unwritten: tuple[str, ...]  # DeltaChannels declared, never written (unwritten_statements)
    run_id: str | None
    ts: str | None
    checkpoint: Serialized

    @property
    def next_config(self) -> RunnableConfig:
        """The config the put returns: its checkpoint's."""
        return {"configurable": {"thread_id": self.thread_id, "checkpoint_ns": self.ns,
                                 "checkpoint_id": self.cid}}


def put_input(values: Values, config: RunnableConfig, checkpoint: Checkpoint,
              metadata: CheckpointMetadata) -> PutInput:
    """A put's arguments as PutInput: serialized now, before anything is sent."""
    thread_id = thread_id_of(config)  # first: a config without one is a typed error
    md = get_serializable_checkpoint_metadata(config, metadata)
    try:
        md_copy = json.loads(json.dumps(md, ensure_ascii=False, allow_nan=False))
    except (TypeError, ValueError) as exc:
        raise SerializationError(f"checkpoint metadata must be JSON: {exc}") from None
    counters = md_copy.get("counters_since_delta_snapshot") or {}
    versions = checkpoint.get("channel_versions") or {}
    parent_id = config["configurable"].get("checkpoint_id")
    run_id = md_copy.get("run_id")
    ts = checkpoint.get("ts")
    return PutInput(
        thread_id=thread_id, ns=ns_of(config), cid=str(checkpoint["id"]),
        parent_id=None if parent_id is None else str(parent_id), metadata=md_copy,
        channels=json.dumps(sorted(checkpoint["channel_values"]), ensure_ascii=False),
        unwritten=tuple(sorted(str(ch) for ch in counters if ch not in versions)),
        run_id=None if run_id is None else str(run_id), ts=None if ts is None else str(ts),
        checkpoint=values.serialize(checkpoint))


def put_statements(values: Values, put: PutInput, *, guard_head: bool,
                   held: Container[str] | None = None
                   ) -> tuple[list[Statement], RunnableConfig, set[str]]:
    """The statements of one `put`, the config it returns, and the chunk ids its row reaches.

    With `held` (the chunk ids the thread is known to hold) the value is stored by content:
    an "m:" manifest, with only the chunks not held sent along (d1saver/storage/manifest.py). The
    row's columns add up to at most ROW_MAX: a value stored whole moves to parts when it, or
    the row, is too big, and the metadata too when it still does not fit (d1saver/storage/values.py).
    """
    thread_id, ns, cid = put.thread_id, put.ns, put.cid
    fixed = sum(utf8_size(str(p)) for p in (thread_id, ns, cid, put.parent_id, put.channels,
                                            put.run_id, put.ts) if p is not None)
    value, stored_md = values.dump_checkpoint(put.checkpoint, put.metadata, put.channels,
                                              checkpoint_binder(thread_id, ns, cid), fixed,
                                              held=held)
    key: dict[str, Param] = {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": cid,
                             "parent_checkpoint_id": put.parent_id}
    stmts: list[Statement] = []
    if guard_head:
        stmts.append(Statement.bind(_sql.GUARD_HEAD, key))
    chunks, first = new_chunks_params(thread_id, value.new_chunks)
    stmts += first
    stmts.append(Statement.bind(_sql.PUT, {
        **key, "type": _type(value.type), "checkpoint": value.text,
        "metadata": stored_md.text, "channels": put.channels, "run_id": put.run_id,
        "ts": put.ts}, chunks=chunks))
    stmts += unwritten_statements(thread_id, ns, cid, put.unwritten)
    stmts += part_statements(thread_id, ns, cid, "", value.parts)
    stmts += part_statements(thread_id, ns, cid, METADATA_OWNER, stored_md.parts)
    return stmts, put.next_config, set(value.reached)


@dataclass(frozen=True)
class WritesInput:
    """One put_writes' arguments, read whole when it is entered (see PutInput): the ids and
    each write's channel and serialized value."""

    thread_id: str
    ns: str
    cid: str
    task_id: str
    task_path: str
    writes: tuple[tuple[str, Serialized], ...]


def writes_input(values: Values, config: RunnableConfig, writes: Sequence[tuple[str, Any]],
                 task_id: str, task_path: str) -> WritesInput:
    """A put_writes' arguments as WritesInput: serialized now, before anything is sent."""
    return WritesInput(thread_id_of(config), ns_of(config), checkpoint_id_of(config),
                       str(task_id), str(task_path),
                       tuple((str(channel), values.serialize(obj)) for channel, obj in writes))


def put_writes_statements(values: Values, put: WritesInput,
                          held: Container[str] | None = None,
                          whole: Container[str] = frozenset()
                          ) -> tuple[list[Statement], set[str]]:
    """The statements of one `put_writes`, as InMemorySaver stores them, and the chunk ids its
    rows reach: special writes (WRITES_IDX_MAP) upserted, the latest winning; regular ones
    inserted or ignored, the first winning. Rows go as JSON parameters of one PUT_WRITES
    statement (more only past 1.5 MB), with the new chunks of values stored by content (see
    `put_statements`); parts of values stored whole follow. Writes to channels in `whole`
    (DeltaChannels: d1saver/ops/held.py) are stored whole."""
    thread_id, ns, cid, task_id, task_path = (put.thread_id, put.ns, put.cid, put.task_id,
                                              put.task_path)
    fixed = sum(utf8_size(p) for p in (thread_id, ns, cid, task_id, task_path)) + 16
    batches: dict[bool, list[list[list[Any]]]] = {True: [[]], False: [[]]}  # special -> rows
    sizes = {True: 0, False: 0}
    part_stmts: list[Statement] = []
    new: dict[str, Chunk] = {}
    reached: set[str] = set()

    for idx, (channel, obj) in enumerate(put.writes):
        special = channel in WRITES_IDX_MAP
        widx = WRITES_IDX_MAP.get(channel, idx)
        value = values.dump_serialized(obj, write_binder(thread_id, ns, cid, task_id, task_path, widx,
                                              channel),
                            room=ROW_MAX - fixed - utf8_size(channel),
                            held=None if channel in whole else held)
        for chunk in value.new_chunks:
            new.setdefault(chunk.id, chunk)
        reached |= value.reached
        if batches[special][-1] and sizes[special] + len(value.text) > _WRITES_PARAM_MAX:
            batches[special].append([])
            sizes[special] = 0
        batches[special][-1].append([widx, channel, value.type, value.text])
        sizes[special] += len(value.text) + len(channel) + 32
        if special:
            part_stmts += part_statements(thread_id, ns, cid, f"{task_id}/{widx}",
                                            value.parts)
        else:
            part_stmts += _write_part_statements(thread_id, ns, cid, task_id, widx, value)
    chunks, stmts = new_chunks_params(thread_id, new.values())
    task: dict[str, Param] = {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": cid,
                              "task_id": task_id, "task_path": task_path}
    special_rows = [b for b in batches[True] if b]
    regular_rows = [b for b in batches[False] if b]
    if values.sealer is not None or part_stmts:
        # One row per write, not packed: with keys a write is sealed for its own row (task,
        # idx, channel), as rekeying reads them; a value in parts ("c:") is owned by its row.
        if chunks:
            stmts = [Statement.bind(_sql.INSERT_CHUNKS, {"thread_id": thread_id}, chunks=chunks)]
        for special, query in ((True, _sql.INSERT_WRITES_REPLACE),
                               (False, _sql.INSERT_WRITES_IGNORE)):
            stmts += [Statement.bind(query, {**task, "writes": _rows_json(rows)})
                      for rows in (special_rows if special else regular_rows)]
        return stmts + part_stmts, reached
    for n in range(max(len(special_rows), len(regular_rows))):
        stmts.append(Statement.bind(_sql.PUT_WRITES, {
            **task,
            "special": (_rows_json(_short_types(special_rows[n]))
                        if n < len(special_rows) else None),
            "regular": (_rows_json(_short_types(regular_rows[n]))
                        if n < len(regular_rows) else None)},
            chunks=chunks if n == 0 else ()))
    return (stmts + part_stmts if special_rows or regular_rows else []), reached


def _type(type_: str) -> str | None:
    """A value's type as the put views take it: NULL for "msgpack" (see _sql.PUT)."""
    return None if type_ == "msgpack" else type_


def _short_types(rows: list[list[Any]]) -> list[list[Any]]:
    """Write rows [idx, channel, type, value] with the type as the put views take it."""
    return [[idx, channel, _type(type_), text] for idx, channel, type_, text in rows]


def _rows_json(rows: list[list[Any]]) -> str:
    return json.dumps(rows, ensure_ascii=False, separators=(",", ":"))


def page_statement(*, thread_id: str | None, ns: str | None, checkpoint_id: str | None,
                   before: str | None, filter_json: str | None, cursor: Cursor | None,
                   size: int) -> Statement:
    """One page of checkpoints with their writes and chunks, in the narrowest scope: every
    thread (list(None)), every namespace of one thread, or one namespace; the metadata
    filter's text is sent only with a filter."""
    filtered = filter_json is not None
    c = cursor or (None, None, None)
    params: dict[str, Param] = {"checkpoint_id": checkpoint_id, "before": before,
                                "after_checkpoint_id": c[0], "limit": size}
    if thread_id is None:
        query = _sql.SELECT_PAGE_ALL_FILTERED if filtered else _sql.SELECT_PAGE_ALL
    elif ns is None:
        query = _sql.SELECT_PAGE_THREAD_FILTERED if filtered else _sql.SELECT_PAGE_THREAD
        params["thread_id"] = thread_id
    else:
        query = _sql.SELECT_PAGE_THREAD_NS_FILTERED if filtered else _sql.SELECT_PAGE_THREAD_NS
        params.update(thread_id=thread_id, checkpoint_ns=ns)
    if ns is None:  # the cursor's other columns: its row's thread and namespace
        params.update(after_thread_id=c[1], after_checkpoint_ns=c[2])
    if filtered:
        params["filter"] = filter_json
    return Statement.bind(query, params)


def delta_statement(page: Statement) -> Statement:
    """The DeltaChannel prefetch that rides with a page statement (same parameters)."""
    return Statement.bind(_sql.PAGE_DELTA_OF[page.name], page.named())


def delta_history_statement(config: RunnableConfig, channels: Sequence[str]) -> Statement:
    return Statement.bind(_sql.DELTA_HISTORY, {
        "thread_id": thread_id_of(config), "checkpoint_ns": ns_of(config),
        "checkpoint_id": get_checkpoint_id(config),
        "channels": json.dumps(list(channels), ensure_ascii=False)})


def delete_threads_statements(thread_ids: Sequence[str]) -> list[Statement]:
    return Statement.bind_each(_sql.DELETE_THREADS, {"thread_ids": id_list(thread_ids)})


def staged_elsewhere(result: Result) -> list[tuple[str, str]]:
    """(database id, staging id) of each copy staged elsewhere: the result of the last
    statement of delete_threads_statements."""
    if result.rows and tuple(result.columns) != _sql.STAGED_ELSEWHERE_COLUMNS:
        raise ResponseError(f"D1 returned columns {result.columns} where d1saver expects "
                            f"{list(_sql.STAGED_ELSEWHERE_COLUMNS)}")
    return [(str(db), str(staging)) for db, staging in result.rows]


def delete_for_runs_statements(run_ids: Sequence[str]) -> list[Statement]:
    stmts = _sql.retention_batch([_sql.SCOPE_RUNS, _sql.PLAN_KEEP_OTHER_RUNS])
    # Which threads a move in flight read the runs from is unknown here: every move into this
    # database is voided (it reads its source again: docs/RELIABILITY.md, "delete wins").
    return [*Statement.bind_each(stmts, {"run_ids": id_list(run_ids)}),
            Statement.bind(_sql.CLEAR_MOVES)]


def copy_thread_statements(source: str, target: str) -> list[Statement]:
    return Statement.bind_each(_sql.COPY_THREAD, {"source": str(source), "target": str(target)})


def collect_statements(thread_id: str) -> list[Statement]:
    """Collect the chunks of one thread that no row reaches (GC_CHUNKS, as compaction does),
    and its mark of migration 14 with them: it then holds no unreferenced chunk."""
    return Statement.bind_each([_sql.CLEAR_SCOPE, _sql.SCOPE_THREAD, _sql.GC_CHUNKS,
                                _sql.GC_DONE, _sql.CLEAR_SCOPE], {"thread_id": str(thread_id)})


def retention_statements(thread_ids: Sequence[str], keep: int, *, summarize: bool = False,
                         delete: bool = True, op_id: str | None = None) -> list[Statement]:
    """One retention batch over `thread_ids`: what PLAN_KEEP keeps (the `keep` newest of the
    root and of the subgraphs it reaches, tags); freeze the DeltaChannel histories of kept
    checkpoints whose ancestors go; relink; delete the rest.
    A summary of a batch that deletes is recorded under `op_id` (drawn if None)."""
    stmts = _sql.retention_batch([_sql.SCOPE_THREADS, _sql.PLAN_KEEP],
                                 summarize=summarize, delete=delete, freeze=True)
    pool: dict[str, Param] = {"thread_ids": id_list(thread_ids), "keep": int(keep)}
    if summarize and delete:  # a summary is recorded under the batch's op id
        pool["op_id"] = new_op_id() if op_id is None else str(op_id)
    return Statement.bind_each(stmts, pool)


def new_op_id() -> str:
    """An id for a batch whose answer is recorded (d1saver_ops). Drawn once, before the first
    try: the client re-sends a request identical, so every retry carries the same id."""
    return uuid.uuid4().hex


def untag_statements(config: RunnableConfig, name: str, op_id: str) -> list[Statement]:
    """Untag as one batch that answers "did the tag exist?" from a record, not from the
    delete's change count, which a retry after a lost response would see as 0."""
    return Statement.bind_each(
        [_sql.FORGET_OLD_OPS, _sql.RECORD_UNTAG, _sql.UNTAG, _sql.OP_RESULT],
        {"thread_id": thread_id_of(config), "checkpoint_ns": ns_of(config), "name": str(name),
         "op_id": op_id})


def read_schema() -> Statement:
    """The versions the database records (goes first in an instance's first request)."""
    return Statement.bind(_sql.READ_SCHEMA)


def setup_statements() -> list[Statement]:
    """schema.sql and the stored versions, in one batch: creates a fresh database whole,
    changes nothing on one at this version, and fails (schema_outdated, schema_too_new) on a
    database it must not touch."""
    return [*(Statement.bind(s) for s in _sql.SCHEMA), read_schema()]


def migration_statements(version: int) -> list[Statement]:
    """The step to `version` (2 or later), in one batch: claim the version (the batch fails if
    it is recorded already), the step's statements, and the oldest code it still serves."""
    if not 2 <= version <= len(_sql.MIGRATIONS):
        raise ValueError(f"no migration to version {version}")
    return [Statement.bind(_sql.CLAIM_VERSION, {"version": version}),
            *(Statement.bind(s) for s in _sql.migration(version)),
            Statement.bind(_sql.SET_MIN_READER,
                           {"version": version, "min_reader": _sql.min_reader(version)})]
