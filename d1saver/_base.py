"""Everything D1Saver does, without I/O: statements to send and how to read their results.

Each operation is a generator that sends statements with `yield from self._exchange(...)` and
returns its answer; `D1Saver` runs it with the client's sync or async driver. So the logic of
every method exists once, and sync and async differ only in how bytes move.
"""

from __future__ import annotations

import json
import random
import re
import threading
import time
from collections import OrderedDict, defaultdict
from collections.abc import Generator, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    DeltaChannelHistory,
    PendingWrite,
    get_checkpoint_id,
    get_serializable_checkpoint_metadata,
    writes_sort_key,
)
from langgraph.checkpoint.serde.base import SerializerProtocol

from d1saver import _codec, _sql
from d1saver._client import Commit, D1Client, Once, Param, Result, Statement
from d1saver._errors import (
    CheckpointConflictError,
    ConfigError,
    D1Error,
    MissingConfigKeyError,
    NotFoundError,
    QueryError,
    ResponseError,
    SerializationError,
    StoredValueError,
)

Op = Generator[Any, Any, Any]

# Metadata filter keys become JSON paths ('$.' || key), bound as data; a dotted key reaches
# into nested objects. Anything else is refused before it reaches SQL.
_FILTER_KEY = re.compile(r"^[A-Za-z0-9_\-]+(\.[A-Za-z0-9_\-]+)*$")
# A write list is one JSON parameter; D1 caps a bound string at 2 MB.
_WRITES_PARAM_MAX = 1_500_000


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


def read_rows(decode: Any, *args: Any) -> Any:
    """Run a row decoder; rows that are not the shape asked for are D1's fault, not ours."""
    try:
        return decode(*args)
    except D1Error:
        raise
    except (IndexError, KeyError, TypeError, ValueError) as exc:
        raise ResponseError(
            f"D1 returned rows d1saver cannot read ({type(exc).__name__}: {exc})") from exc


@dataclass
class _Value:
    """A serialized value ready to store: the row's text, plus pieces when over 2 MB."""

    type: str
    text: str
    pieces: list[str] | None


class DeltaCache:
    """Histories prefetched with a page, until LangGraph asks for them (once, soon).

    Bounded in entries and age; an entry is removed when used, so it is never served stale
    after a later prune or write.
    """

    def __init__(self, max_entries: int = 512, ttl: float = 30.0) -> None:
        self._items: OrderedDict[tuple, tuple[float, dict[str, DeltaChannelHistory]]] = OrderedDict()
        self._lock = threading.Lock()
        self.max_entries, self.ttl = max_entries, ttl
        self.hits = 0

    def put(self, key: tuple, histories: dict[str, DeltaChannelHistory]) -> None:
        with self._lock:
            self._items[key] = (time.monotonic(), histories)
            self._items.move_to_end(key)
            while len(self._items) > self.max_entries:
                self._items.popitem(last=False)

    def take(self, key: tuple, channels: Sequence[str]) -> dict[str, DeltaChannelHistory] | None:
        with self._lock:
            item = self._items.pop(key, None)
        if item is None or time.monotonic() - item[0] > self.ttl:
            return None
        stored, histories = item
        if not all(ch in histories for ch in channels):
            return None
        self.hits += 1
        return {ch: histories[ch] for ch in channels}


class D1SaverBase(BaseCheckpointSaver[str]):
    """The saver's logic: statements, decoding, and the operations as generators."""

    _delta_cache: DeltaCache

    client: D1Client
    guard_head: bool
    page_size: int
    auto_setup: bool
    is_setup: bool

    # --- values -------------------------------------------------------------------------

    def _dump(self, obj: Any) -> _Value:
        try:
            type_, data = self.serde.dumps_typed(obj)
        except Exception as exc:  # the serde's own errors vary by type
            raise SerializationError(
                f"cannot serialize {type(obj).__name__}: {type(exc).__name__}: {exc}"
            ) from exc
        text = _codec.encode(data)
        pieces = _codec.split(text)
        if pieces is not None:
            text = _codec.chunk_marker(len(pieces))
        return _Value(type_, text, pieces)

    def _load(self, type_: str | None, text: str | None, pieces: Mapping[str, list] | None,
              owner: str) -> Any:
        if text is None:
            return None
        if _codec.is_chunked(text):
            parts = sorted((pieces or {}).get(owner, []))
            expected = int(text.split(":", 1)[1])
            if len(parts) != expected:
                raise ResponseError(f"value stored in {expected} chunks, {len(parts)} found")
            text = "".join(p for _, p in parts)
        try:
            return self.serde.loads_typed((cast(str, type_), _codec.decode(text)))
        except D1Error:
            raise
        except Exception as exc:  # the serde's and codec's refusals vary by kind
            raise StoredValueError(
                f"a stored value cannot be read ({type(exc).__name__}: {exc})") from exc

    @staticmethod
    def _chunk_statements(thread_id: str, ns: str, cid: str, owner: str, value: _Value,
                          verb_replace: bool = True) -> list[Statement]:
        if value.pieces is None:
            return []
        stmts = [Statement(_sql.DELETE_CHUNKS_OF, (thread_id, ns, cid, owner))] if verb_replace else []
        sql = _sql.INSERT_CHUNK if verb_replace else _sql.INSERT_CHUNK_IGNORE
        stmts += [Statement(sql, (thread_id, ns, cid, owner, seq, piece))
                  for seq, piece in enumerate(value.pieces)]
        return stmts

    # --- statements -----------------------------------------------------------------------

    def put_statements(self, config: RunnableConfig, checkpoint: Checkpoint,
                       metadata: CheckpointMetadata) -> tuple[list[Statement], RunnableConfig]:
        thread_id = thread_id_of(config)
        ns = str(config["configurable"].get("checkpoint_ns", ""))
        parent_id = config["configurable"].get("checkpoint_id")
        md = get_serializable_checkpoint_metadata(config, metadata)
        try:
            md_json = json.dumps(md, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise SerializationError(f"checkpoint metadata must be JSON: {exc}") from None
        value = self._dump(checkpoint)
        channels = json.dumps(sorted(checkpoint["channel_values"]), ensure_ascii=False)
        run_id = md.get("run_id")
        parent_id = None if parent_id is None else str(parent_id)
        params: list[Param] = [thread_id, ns, str(checkpoint["id"]), parent_id, value.type,
                               value.text, md_json, channels,
                               None if run_id is None else str(run_id), checkpoint.get("ts")]
        stmts: list[Statement] = []
        if self.guard_head:
            stmts.append(Statement(_sql.GUARD_HEAD, params[:4]))
        stmts.append(Statement(_sql.UPSERT_CHECKPOINT, params))
        stmts += self._chunk_statements(thread_id, ns, str(checkpoint["id"]), "", value)
        next_config: RunnableConfig = {"configurable": {
            "thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": str(checkpoint["id"])}}
        return stmts, next_config

    def put_writes_statements(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]],
                              task_id: str, task_path: str) -> list[Statement]:
        thread_id = thread_id_of(config)
        ns = str(config["configurable"].get("checkpoint_ns", ""))
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
            value = self._dump(obj)
            widx = WRITES_IDX_MAP.get(channel, idx)
            if size + len(value.text) > _WRITES_PARAM_MAX:
                flush()
            rows.append([widx, channel, value.type, value.text])
            size += len(value.text) + len(channel) + 32
            stmts += self._chunk_statements(thread_id, ns, cid, f"{task_id}/{widx}", value,
                                            verb_replace=replace)
        flush()
        # Chunk rows must not precede the write rows they belong to in a failed batch; order
        # within one atomic batch does not matter otherwise.
        return stmts

    @staticmethod
    def page_statement(*, thread_id: str | None, ns: str | None, checkpoint_id: str | None,
                       before: str | None, filter_json: str | None,
                       cursor: tuple[str, str, str] | None, size: int) -> Statement:
        if thread_id is None:
            sql = _sql.SELECT_PAGE_ALL
        elif ns is None:
            sql = _sql.SELECT_PAGE_THREAD
        else:
            sql = _sql.SELECT_PAGE_THREAD_NS
        c = cursor or (None, None, None)
        return Statement(sql, (thread_id, ns, checkpoint_id, before, filter_json, *c, size))

    @staticmethod
    def delta_statement(page: Statement) -> Statement:
        """The DeltaChannel prefetch that rides with a page statement (same parameters)."""
        sql = {_sql.SELECT_PAGE_THREAD_NS: _sql.SELECT_PAGE_DELTA_THREAD_NS,
               _sql.SELECT_PAGE_THREAD: _sql.SELECT_PAGE_DELTA_THREAD,
               _sql.SELECT_PAGE_ALL: _sql.SELECT_PAGE_DELTA_ALL}[page.sql]
        return Statement(sql, page.params)

    # --- decoding -------------------------------------------------------------------------

    def tuples_from_page(self, result: Result) -> list[CheckpointTuple]:
        """CheckpointTuples from a page's 'c'/'w'/'k' rows, newest first."""
        checkpoints: list[list[Any]] = []
        writes: dict[tuple, list[list[Any]]] = defaultdict(list)
        pieces: dict[tuple, dict[str, list]] = defaultdict(lambda: defaultdict(list))
        for row in result.rows:
            kind, key = row[0], (row[1], row[2], row[3])
            if kind == "c":
                checkpoints.append(row)
            elif kind == "w":
                writes[key].append(row)
            elif kind == "k":
                pieces[key][row[4]].append((row[5], row[6]))
        checkpoints.sort(key=lambda r: (r[3], r[1], r[2]), reverse=True)
        out = []
        for _, thread_id, ns, cid, parent, type_, blob, md, *_ in checkpoints:
            key = (thread_id, ns, cid)
            out.append(CheckpointTuple(
                config={"configurable": {"thread_id": thread_id, "checkpoint_ns": ns,
                                         "checkpoint_id": cid}},
                checkpoint=self._load(type_, blob, pieces.get(key), ""),
                metadata=cast(CheckpointMetadata, json.loads(md) if md else {}),
                parent_config=({"configurable": {"thread_id": thread_id, "checkpoint_ns": ns,
                                                 "checkpoint_id": parent}} if parent else None),
                pending_writes=self._pending_writes(writes.get(key, []), pieces.get(key)),
            ))
        return out

    def _pending_writes(self, rows: Iterable[list[Any]],
                        pieces: Mapping[str, list] | None) -> list[PendingWrite]:
        # row: kind, thread, ns, cid, task_id, task_path, idx, channel, type, value
        ordered = sorted(rows, key=lambda r: writes_sort_key(r[5] or "", r[4], int(r[6])))
        return [(r[4], r[7], self._load(r[8], r[9], pieces, f"{r[4]}/{int(r[6])}"))
                for r in ordered]

    def prefetch_deltas(self, result: Result, tuples: Sequence[CheckpointTuple]) -> None:
        """Build each tuple's DeltaChannel histories from a page's walk rows, and cache them.

        A tuple whose walk leaves the fetched rows (a missing ancestor) is not cached; its
        get_delta_channel_history then asks D1 as usual.
        """
        parents: dict[tuple, str | None] = {}
        channels: dict[tuple, set[str]] = {}
        blobs: dict[tuple, tuple[str, str]] = {}
        writes: dict[tuple, list[list[Any]]] = defaultdict(list)
        pieces: dict[tuple, dict[str, list]] = defaultdict(lambda: defaultdict(list))
        for row in result.rows:
            kind, key = row[0], (row[1], row[2], row[3])
            if kind == "a":
                parents[key] = row[4]
                channels[key] = set(json.loads(row[5]))
                if row[7] is not None:
                    blobs[key] = (row[6], row[7])
            elif kind == "w":
                writes[key].append(row)
            elif kind == "k":
                pieces[key][row[4]].append((row[5], row[6]))
        decoded: dict[tuple, dict[str, Any]] = {}
        loaded: dict[tuple, list[PendingWrite]] = {}

        def values_at(key: tuple) -> dict[str, Any]:
            if key not in decoded:
                type_, blob = blobs[key]
                decoded[key] = self._load(type_, blob, pieces.get(key), "")["channel_values"]
            return decoded[key]

        def writes_at(key: tuple) -> list[PendingWrite]:
            if key not in loaded:
                loaded[key] = self._pending_writes(writes.get(key, []), pieces.get(key))
            return loaded[key]

        for tup in tuples:
            conf = tup.config["configurable"]
            counters = (tup.metadata or {}).get("counters_since_delta_snapshot") or {}
            sought = [ch for ch in counters if ch not in tup.checkpoint["channel_values"]]
            if not sought:
                continue
            thread_id, ns = conf["thread_id"], conf["checkpoint_ns"]
            parent = (tup.parent_config or {}).get("configurable", {}).get("checkpoint_id")
            histories: dict[str, DeltaChannelHistory] = {}
            complete = True
            for ch in sought:
                collected: list[PendingWrite] = []
                entry: DeltaChannelHistory = {"writes": collected}
                seen: set[str] = set()
                cur = parent
                while cur is not None and cur not in seen:
                    key = (thread_id, ns, cur)
                    if key not in parents:
                        complete = False
                        break
                    seen.add(cur)
                    collected.extend(w for w in reversed(writes_at(key)) if w[1] == ch)
                    if ch in channels[key]:
                        entry["seed"] = values_at(key)[ch]
                        break
                    cur = parents[key]
                collected.reverse()
                histories[ch] = entry
            if complete:
                self._delta_cache.put((thread_id, ns, conf["checkpoint_id"]), histories)

    def delta_history(self, result: Result, channels: Sequence[str]
                      ) -> dict[str, DeltaChannelHistory]:
        """Per-channel writes (oldest first) and seeds from DELTA_HISTORY's rows."""
        ancestors: dict[int, list[Any]] = {}
        writes: dict[int, list[list[Any]]] = defaultdict(list)
        pieces: dict[str, dict[str, list]] = defaultdict(lambda: defaultdict(list))
        for row in result.rows:
            kind, depth = row[0], int(row[1])
            if kind == "a":
                ancestors[depth] = row
            elif kind == "w":
                writes[depth].append(row)
            elif kind == "k":
                pieces[row[2]][row[3]].append((row[4], row[5]))
        collected: dict[str, list[PendingWrite]] = {ch: [] for ch in channels}
        seeds: dict[str, Any] = {}
        seen: set[str] = set()
        path: list[int] = []
        for depth in sorted(ancestors):  # nearest first; stop if a corrupt chain loops
            cid = ancestors[depth][2]
            if cid in seen:
                break
            seen.add(cid)
            path.append(depth)
        for depth in path:
            _, _, cid, sought_json, type_, blob, *_ = ancestors[depth]
            sought = set(json.loads(sought_json))
            if blob is not None:
                values = self._load(type_, blob, pieces.get(cid), "")["channel_values"]
                for ch in sought:
                    if ch in values and ch not in seeds:
                        seeds[ch] = values[ch]
        for depth in reversed(path):
            cid = ancestors[depth][2]
            # row: kind, depth, cid, task_id, task_path, idx, channel, type, value
            for r in sorted(writes.get(depth, []),
                            key=lambda r: writes_sort_key(r[4] or "", r[3], int(r[5]))):
                if r[6] in collected:
                    collected[r[6]].append(
                        (r[3], r[6], self._load(r[7], r[8], pieces.get(cid), f"{r[3]}/{int(r[5])}")))
        out: dict[str, DeltaChannelHistory] = {}
        for ch in channels:
            entry: DeltaChannelHistory = {"writes": collected[ch]}
            if ch in seeds:
                entry["seed"] = seeds[ch]
            out[ch] = entry
        return out

    # --- operations -----------------------------------------------------------------------

    def _exchange(self, statements: Sequence[Statement]) -> Op:
        """Send statements in one request (with retries)."""
        return (yield from self._set_up_if_missing(lambda: self.client.exchange(statements)))

    def _commit(self, statements: Sequence[Statement]) -> Op:
        """Like _exchange, for writes that may ride in one batch with concurrent writes."""
        return (yield from self._set_up_if_missing(lambda: self._one(Commit(statements))))

    @staticmethod
    def _one(action: Any) -> Op:
        return (yield action)

    def _set_up_if_missing(self, send: Any) -> Op:
        """Run `send()`; on a fresh database, create the schema once (per client) and resend."""
        try:
            return (yield from send())
        except QueryError as exc:
            if not self.auto_setup or "no such table" not in str(exc):
                raise
        yield Once("setup", self._op_setup)
        return (yield from send())

    def _op_setup_once(self) -> Op:
        yield Once("setup", self._op_setup)

    def _op_setup(self) -> Op:
        stmts = [Statement(s) for s in _sql.MIGRATIONS[0]]
        results = yield from self.client.exchange([*stmts, Statement(_sql.SELECT_SCHEMA_VERSION)])
        current = int(results[-1].rows[0][0])
        if current > _sql.SCHEMA_VERSION:
            raise ConfigError(
                f"the database has d1saver schema v{current}, newer than this d1saver's "
                f"v{_sql.SCHEMA_VERSION}: upgrade d1saver")
        for version in range(max(current, 1) + 1, _sql.SCHEMA_VERSION + 1):
            yield from self.client.exchange(
                [*(Statement(s) for s in _sql.MIGRATIONS[version - 1]),
                 Statement(_sql.RECORD_SCHEMA_VERSION, (version,))])
        self.is_setup = True

    def _op_get_tuple(self, config: RunnableConfig) -> Op:
        thread_id = thread_id_of(config)
        cid = get_checkpoint_id(config)
        stmt = self.page_statement(
            thread_id=thread_id, ns=str(config["configurable"].get("checkpoint_ns", "")),
            checkpoint_id=cid, before=None, filter_json=None, cursor=None, size=1)
        result, deltas = yield from self._exchange([stmt, self.delta_statement(stmt)])
        tuples = read_rows(self.tuples_from_page, result)
        read_rows(self.prefetch_deltas, deltas, tuples)
        if not tuples:
            return None
        if cid:  # as other savers do: a config naming the checkpoint comes back as given
            return tuples[0]._replace(config=config)
        return tuples[0]

    def _op_page(self, stmt: Statement) -> Op:
        result, deltas = yield from self._exchange([stmt, self.delta_statement(stmt)])
        tuples = read_rows(self.tuples_from_page, result)
        read_rows(self.prefetch_deltas, deltas, tuples)
        return tuples

    def _op_put(self, config: RunnableConfig, checkpoint: Checkpoint,
                metadata: CheckpointMetadata) -> Op:
        stmts, next_config = self.put_statements(config, checkpoint, metadata)
        try:
            yield from self._commit(stmts)
        except QueryError as exc:
            if self.guard_head and "head_moved" in str(exc):
                raise CheckpointConflictError(
                    f"thread {next_config['configurable']['thread_id']!r} moved on: the parent "
                    f"{config['configurable'].get('checkpoint_id')!r} is no longer its newest "
                    "checkpoint (another writer resumed it); reload the state and retry"
                ) from exc
            raise
        return next_config

    def _op_put_writes(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]],
                       task_id: str, task_path: str) -> Op:
        stmts = self.put_writes_statements(config, writes, task_id, task_path)
        if stmts:
            yield from self._commit(stmts)

    def _op_delete_thread(self, thread_id: str) -> Op:
        ids = id_list([thread_id])
        yield from self._exchange([Statement(s, (ids,)) for s in _sql.DELETE_THREADS])

    def _op_delete_for_runs(self, run_ids: Sequence[str]) -> Op:
        if not run_ids:
            return
        ids = id_list(run_ids)
        stmts = _sql.retention_batch([_sql.SCOPE_RUNS, _sql.PLAN_KEEP_OTHER_RUNS])
        yield from self._exchange([Statement(s, (ids,) if "?1" in s else ()) for s in stmts])

    def _op_copy_thread(self, source: str, target: str) -> Op:
        params = (str(source), str(target))
        yield from self._exchange([Statement(s, params) for s in _sql.COPY_THREAD])

    @staticmethod
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

    def _op_prune(self, thread_ids: Sequence[str], strategy: str) -> Op:
        if not thread_ids:
            return
        if strategy == "delete":
            ids = id_list(thread_ids)
            yield from self._exchange([Statement(s, (ids,)) for s in _sql.DELETE_THREADS])
        elif strategy == "keep_latest":
            yield from self._exchange(self.retention_statements(thread_ids, 1))
        else:
            raise ConfigError(f"unknown prune strategy {strategy!r}: use 'keep_latest' or 'delete'")

    def _op_delta_history(self, config: RunnableConfig, channels: Sequence[str]) -> Op:
        if not channels:
            return {}
        channels = list(channels)
        cid = get_checkpoint_id(config)
        if cid:
            key = (thread_id_of(config), str(config["configurable"].get("checkpoint_ns", "")), str(cid))
            hit = self._delta_cache.take(key, channels)
            if hit is not None:
                return hit
        stmt = Statement(_sql.DELTA_HISTORY, (
            thread_id_of(config), str(config["configurable"].get("checkpoint_ns", "")),
            get_checkpoint_id(config), json.dumps(channels, ensure_ascii=False)))
        (result,) = yield from self._exchange([stmt])
        return read_rows(self.delta_history, result, channels)

    # --- versions -------------------------------------------------------------------------

    def get_next_version(self, current: str | None, channel: None) -> str:
        """Monotonic string versions, shorter than SqliteSaver's (17 characters, not 51).

        Every checkpoint carries a version per channel and per node seen, so their length is a
        large part of what each `put` sends. The counter is zero-padded to 10 digits; a version
        of this form still sorts above any 32-digit one (SqliteSaver's form) with the same or a
        lower counter, so threads written in that form keep increasing.
        """
        if current is None:
            current_v = 0
        elif isinstance(current, int):
            current_v = current
        else:
            current_v = int(current.split(".")[0])
        return f"{current_v + 1:010}.{random.randrange(1_000_000):06}"


__all__ = ["D1SaverBase", "NotFoundError", "ChannelVersions"]
