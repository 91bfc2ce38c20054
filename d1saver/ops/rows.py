"""The rows layer: pure decoders from D1 result rows to CheckpointTuples and delta histories.

No I/O and no serde of its own: values are loaded by the values layer given, each with the
binding of the row it came from (d1saver/storage/crypto.py), so with keys a value read from another
row than the one it was sealed for is refused. Each reader first checks that the result's columns are the ones its statement
names (d1saver/sql/catalogue.py), so a statement and its reader cannot drift apart silently.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar, cast

from langgraph.checkpoint.base import (
    CheckpointMetadata,
    CheckpointTuple,
    DeltaChannelHistory,
    PendingWrite,
    writes_sort_key,
)

from d1saver.sql import catalogue as _sql
from d1saver.storage.crypto import checkpoint_binder, write_binder
from d1saver.core.errors import D1Error, ResponseError
from d1saver.core.protocol import Result
from d1saver.storage.values import Chunks, Parts, Values

Key = tuple[str, str, str]  # thread_id, checkpoint_ns, checkpoint_id
T = TypeVar("T")


def read_rows(decode: Callable[..., T], *args: Any) -> T:
    """Run a row decoder; rows that are not the shape asked for are D1's fault, not ours."""
    try:
        return decode(*args)
    except D1Error:
        raise
    except (IndexError, KeyError, TypeError, ValueError) as exc:
        raise ResponseError(
            f"D1 returned rows d1saver cannot read ({type(exc).__name__}: {exc})") from exc


def check_columns(result: Result, expected: Sequence[str]) -> None:
    """Refuse a result whose columns are not `expected`, in order (rows are read by position)."""
    if result.rows and tuple(result.columns) != tuple(expected):
        raise ResponseError(
            f"D1 returned columns {result.columns} where d1saver expects {list(expected)}")




def chunks_of(row: Sequence[Any]) -> Iterator[tuple[str, str]]:
    """The (id, data) of each chunk an 'h' row holds: its value, ids and data joined by
    spaces (d1saver/sql/reads.py, chunk_rows)."""
    words = str(row[10]).split(" ")
    if len(words) % 2:
        raise ResponseError("D1 returned a row of chunks that is not pairs of id and data")
    return zip(words[::2], words[1::2])


def chunk_ids(result: Result, thread_id: str | None = None) -> dict[str, list[str]]:
    """The content-addressed chunk ids a read returned ('h' rows), per thread: in a page's
    rows the thread is column 1; DELTA_HISTORY's are of one thread, given."""
    out: dict[str, list[str]] = defaultdict(list)
    for row in result.rows:
        if row[0] == "h":
            out[row[1] if thread_id is None else thread_id] += [i for i, _ in chunks_of(row)]
    return out


def tuples_from_page(result: Result, values: Values) -> list[CheckpointTuple]:
    """CheckpointTuples from a page's 'c'/'w'/'k'/'h' rows (SELECT_PAGE_*), newest first."""
    check_columns(result, _sql.PAGE_COLUMNS)
    checkpoints: list[list[Any]] = []
    writes: dict[Key, list[list[Any]]] = defaultdict(list)
    parts: dict[Key, dict[str, list]] = defaultdict(lambda: defaultdict(list))
    chunks: dict[str, Chunks] = defaultdict(Chunks)
    for row in result.rows:
        kind, key = row[0], (row[1], row[2], row[3])
        if kind == "c":
            checkpoints.append(row)
        elif kind == "w":
            writes[key].append(row)
        elif kind == "k":  # ref: the owner, idx: the piece's seq, value: its text
            parts[key][row[4]].append((int(row[7]), row[10]))
        elif kind == "h":
            chunks[row[1]].update(chunks_of(row))
    checkpoints.sort(key=lambda r: (r[3], r[1], r[2]), reverse=True)
    out = []
    for _, thread_id, ns, cid, parent, md, _, _, channels, type_, blob in checkpoints:
        key = (thread_id, ns, cid)
        checkpoint, metadata = values.load_checkpoint(type_, blob, parts.get(key), md, channels,
                                                      checkpoint_binder(*key),
                                                      chunks.get(thread_id))
        out.append(CheckpointTuple(
            config={"configurable": {"thread_id": thread_id, "checkpoint_ns": ns,
                                     "checkpoint_id": cid}},
            checkpoint=checkpoint,
            metadata=cast(CheckpointMetadata, metadata),
            parent_config=({"configurable": {"thread_id": thread_id, "checkpoint_ns": ns,
                                             "checkpoint_id": parent}} if parent else None),
            pending_writes=pending_writes(writes.get(key, []), parts.get(key), values,
                                          chunks.get(thread_id)),
        ))
    return out


def unpacked(rows: Iterable[list[Any]]) -> list[list[Any]]:
    """Write rows with every "p:" row (one put_writes call's regular writes, migration 7) in
    its writes: a write row ends with idx, channel, type, value in every read's layout; a
    type null in a pack is "msgpack" (d1saver/sql/catalogue.py, PUT)."""
    out: list[list[Any]] = []
    for row in rows:
        value = row[-1]
        if isinstance(value, str) and value.startswith("p:"):
            out += [[*row[:-4], idx, channel, "msgpack" if type_ is None else type_, text]
                    for idx, channel, type_, text in json.loads(value[2:])]
        else:
            out.append(row)
    return out


def pending_writes(rows: Iterable[list[Any]], parts: Parts | None,
                   values: Values, chunks: Chunks | None = None) -> list[PendingWrite]:
    """A checkpoint's writes in LangGraph's order, from page 'w' rows."""
    # row: kind, thread_id, ns, cid, task_id (ref), metadata, task_path, idx, channel, type, value
    ordered = sorted(unpacked(rows), key=lambda r: writes_sort_key(r[6] or "", r[4], int(r[7])))
    return [(task_id, channel, values.load(type_, value, parts, f"{task_id}/{int(idx)}",
                                           write_binder(t, ns, cid, task_id, task_path,
                                                        int(idx), channel), chunks))
            for _, t, ns, cid, task_id, _, task_path, idx, channel, type_, value in ordered]


@dataclass
class Frozen:
    """A holder's frozen DeltaChannel history for one channel (delta_frozen): the seed's row
    and the writes, each as stored, with the identity of the row it was stored at."""

    seed: list[Any] | None
    writes: list[list[Any]]
    ends: bool = True  # False: a 'c' row, the history goes on at the holder's parent


def frozen_records(rows: Iterable[list[Any]]) -> dict[tuple[str, str], Frozen]:
    """{(holder checkpoint_id, channel): Frozen} from frozen rows given as [holder,
    identity JSON, type, value, channels, metadata] (DELTA_HISTORY and the page walk)."""
    out: dict[tuple[str, str], Frozen] = {}
    seen: set[tuple[str, str]] = set()
    for row in rows:
        if (row[0], row[1]) in seen:  # a page walk sends a holder that is also an ancestor twice
            continue
        seen.add((row[0], row[1]))
        ident = json.loads(row[1])  # kind, src, task_id, task_path, idx, channel, depth
        rec = out.setdefault((row[0], ident[5]), Frozen(None, []))
        item = [ident, *row[2:6]]
        if ident[0] == "s":
            rec.seed = item
        elif ident[0] == "c":
            rec.ends = False
        else:
            rec.writes.append(item)
    return out


def load_frozen(rec: Frozen, thread_id: str, ns: str, holder_parts: Parts | None,
                values: Values, chunks: Chunks | None = None) -> DeltaChannelHistory:
    """What get_delta_channel_history returned for the holder before its ancestors went.

    Each value opens with the binding of the row it was stored at; its parts, if any, lie
    with the holder under owner 'f/<checkpoint_id>/<owner>'."""
    def parts_of(src: str) -> Parts:
        prefix = f"f/{src}/"
        return {o[len(prefix):]: v for o, v in (holder_parts or {}).items()
                if o.startswith(prefix)}

    ordered = sorted(rec.writes, key=lambda w: (-int(w[0][6]), writes_sort_key(
        w[0][3] or "", w[0][2], int(w[0][4]))))
    writes: list[PendingWrite] = []
    for (_, src, task_id, task_path, idx, ch, _), type_, value, _, _ in ordered:
        bind = write_binder(thread_id, ns, src, task_id, task_path, int(idx), ch)
        writes.append((task_id, ch, values.load(type_, value, parts_of(src),
                                                f"{task_id}/{int(idx)}", bind, chunks)))
    entry: DeltaChannelHistory = {"writes": writes}
    if rec.seed is not None:
        (_, src, _, _, _, ch, _), type_, blob, chans, md = rec.seed
        held = values.load_checkpoint(type_, blob, parts_of(src), md, chans,
                                      checkpoint_binder(thread_id, ns, src), chunks)[0]
        entry["seed"] = held["channel_values"][ch]
    return entry


def histories_from_walk(result: Result, tuples: Sequence[CheckpointTuple], values: Values,
                        page: Result | None = None) -> dict[Key, dict[str, DeltaChannelHistory]]:
    """Each tuple's DeltaChannel histories from a page's walk rows (SELECT_PAGE_DELTA_*), with
    the content-addressed chunks the `page` statement returned (the walk leaves those out).

    A tuple whose walk leaves the fetched rows (a missing ancestor) is left out; its
    get_delta_channel_history then asks D1 as usual.
    """
    check_columns(result, _sql.PAGE_COLUMNS)
    parents: dict[Key, str | None] = {}
    channels: dict[Key, set[str]] = {}
    blobs: dict[Key, tuple[str, str, str, str]] = {}  # type, value, metadata, channels
    writes: dict[Key, list[list[Any]]] = defaultdict(list)
    parts: dict[Key, dict[str, list]] = defaultdict(lambda: defaultdict(list))
    frozen_rows: dict[tuple[str, str], list[list[Any]]] = defaultdict(list)
    seen_parts: set[tuple[Key, str, int]] = set()
    chunks: dict[str, Chunks] = defaultdict(Chunks)
    for row in page.rows if page is not None else ():
        if row[0] == "h":
            chunks[row[1]].update(chunks_of(row))
    for row in result.rows:
        kind, key = row[0], (row[1], row[2], row[3])
        _, _, _, _, ref, md, _, idx, chans, type_, value = row
        if kind == "a":
            parents[key] = ref
            channels[key] = set(json.loads(chans))
            if value is not None:
                blobs[key] = (type_, value, md, chans)
        elif kind == "w":
            writes[key].append(row)
        elif kind == "k" and (key, ref, int(idx)) not in seen_parts:  # sent twice: see
            seen_parts.add((key, ref, int(idx)))                       # frozen_records
            parts[key][ref].append((int(idx), value))
        elif kind == "h":
            chunks[row[1]].update(chunks_of(row))
        elif kind == "f":
            frozen_rows[(row[1], row[2])].append([row[3], ref, type_, value, chans, md])
    frozen: dict[Key, dict[str, Frozen]] = defaultdict(dict)
    for (thread_id, ns), rows in frozen_rows.items():
        for (cid, ch), rec in frozen_records(rows).items():
            frozen[(thread_id, ns, cid)][ch] = rec
    decoded: dict[Key, dict[str, Any]] = {}
    loaded: dict[Key, list[PendingWrite]] = {}

    def values_at(key: Key) -> dict[str, Any]:
        if key not in decoded:
            type_, blob, md, chans = blobs[key]
            decoded[key] = values.load_checkpoint(type_, blob, parts.get(key), md, chans,
                                                  checkpoint_binder(*key),
                                                  chunks.get(key[0]))[0]["channel_values"]
        return decoded[key]

    def writes_at(key: Key) -> list[PendingWrite]:
        if key not in loaded:
            loaded[key] = pending_writes(writes.get(key, []), parts.get(key), values,
                                         chunks.get(key[0]))
        return loaded[key]

    def take(key: Key, ch: str, entry: DeltaChannelHistory) -> bool:
        """Add the record `key` holds of `ch` to `entry`, if any; True if it ends the history."""
        rec = frozen.get(key, {}).get(ch)
        if rec is None:
            return False
        old = load_frozen(rec, key[0], key[1], parts.get(key), values, chunks.get(key[0]))
        entry["writes"].extend(reversed(old["writes"]))
        if "seed" in old:
            entry["seed"] = old["seed"]
        return rec.ends

    out: dict[Key, dict[str, DeltaChannelHistory]] = {}
    for tup in tuples:
        conf = tup.config["configurable"]
        counters = (tup.metadata or {}).get("counters_since_delta_snapshot") or {}
        # As LangGraph: a channel never written (not in channel_versions) is not replayed.
        sought = [ch for ch in counters if ch not in tup.checkpoint["channel_values"]
                  and ch in tup.checkpoint.get("channel_versions", {})]
        if not sought:
            continue
        thread_id, ns = conf["thread_id"], conf["checkpoint_ns"]
        parent = (tup.parent_config or {}).get("configurable", {}).get("checkpoint_id")
        histories: dict[str, DeltaChannelHistory] = {}
        complete = True
        for ch in sought:
            collected: list[PendingWrite] = []  # newest first until reversed
            entry: DeltaChannelHistory = {"writes": collected}
            seen: set[str] = set()
            cur = None if take((thread_id, ns, conf["checkpoint_id"]), ch, entry) else parent
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
                if take(key, ch, entry):
                    break
                cur = parents[key]
            collected.reverse()
            histories[ch] = entry
        if complete:
            out[(thread_id, ns, conf["checkpoint_id"])] = histories
    return out


def delta_history(result: Result, thread_id: str, ns: str, channels: Sequence[str],
                  values: Values) -> dict[str, DeltaChannelHistory]:
    """Per-channel writes (oldest first) and seeds from DELTA_HISTORY's rows (of one thread
    and namespace)."""
    check_columns(result, _sql.DELTA_HISTORY_COLUMNS)
    ancestors: dict[int, list[Any]] = {}
    writes: dict[int, list[list[Any]]] = defaultdict(list)
    parts: dict[str, dict[str, list]] = defaultdict(lambda: defaultdict(list))
    frozen_rows: dict[int, list[list[Any]]] = defaultdict(list)
    chunks = Chunks()
    for row in result.rows:
        kind, _, cid, ref, _, md, _, idx, chans, type_, value = row
        if kind == "h":
            chunks.update(chunks_of(row))
            continue
        depth = int(row[1])
        if kind == "a":
            ancestors[depth] = row
        elif kind == "w":
            writes[depth].append(row)
        elif kind == "k":
            parts[cid][ref].append((int(idx), value))
        elif kind == "f":
            frozen_rows[depth].append([cid, ref, type_, value, chans, md])
    collected: dict[str, list[PendingWrite]] = {ch: [] for ch in channels}  # newest first
    seeds: dict[str, Any] = {}
    seen: set[str] = set()
    path: list[int] = []
    for depth in sorted(ancestors):  # nearest first; stop if a corrupt chain loops
        cid = ancestors[depth][2]
        if cid in seen:
            break
        seen.add(cid)
        path.append(depth)

    def take(depth: int) -> None:
        """Add the frozen records met at `depth` (0: the target's own) to the histories."""
        for (holder, ch), rec in frozen_records(frozen_rows.get(depth, [])).items():
            if ch in collected and ch not in seeds:
                old = load_frozen(rec, thread_id, ns, parts.get(holder), values, chunks)
                collected[ch].extend(reversed(old["writes"]))
                if "seed" in old:
                    seeds[ch] = old["seed"]

    take(0)
    for depth in path:
        _, _, cid, _, sought_json, md, _, _, chans, type_, blob = ancestors[depth]
        sought = set(json.loads(sought_json))
        # row: kind, depth, cid, task_id (ref), sought, metadata, task_path, idx, channel, type,
        # value; a packed row holds channels no longer sought here too (beyond their seed)
        for _, _, _, task_id, _, _, task_path, idx, channel, w_type, w_value in sorted(
                unpacked(writes.get(depth, [])), reverse=True,
                key=lambda r: writes_sort_key(r[6] or "", r[3], int(r[7]))):
            if channel in collected and channel in sought:
                bind = write_binder(thread_id, ns, cid, task_id, task_path, int(idx), channel)
                collected[channel].append((task_id, channel, values.load(
                    w_type, w_value, parts.get(cid), f"{task_id}/{int(idx)}", bind, chunks)))
        if blob is not None:
            held = values.load_checkpoint(type_, blob, parts.get(cid), md, chans,
                                          checkpoint_binder(thread_id, ns, cid), chunks
                                          )[0]["channel_values"]
            for ch in sought:
                if ch in held and ch not in seeds:
                    seeds[ch] = held[ch]
        take(depth)
    for writes_of in collected.values():
        writes_of.reverse()
    out: dict[str, DeltaChannelHistory] = {}
    for ch in channels:
        entry: DeltaChannelHistory = {"writes": collected[ch]}
        if ch in seeds:
            entry["seed"] = seeds[ch]
        out[ch] = entry
    return out


@dataclass(frozen=True)
class SchemaInfo:
    """What a database's d1saver_schema says: its newest version, and the oldest schema
    version whose d1saver can use it."""

    version: int
    min_reader: int


def schema_info(result: Result) -> SchemaInfo:
    """SchemaInfo from READ_SCHEMA's rows, by column name: rows of version 1 have no
    min_reader (1), and rows of later versions may hold columns this code does not know."""
    if "version" not in result.columns and result.rows:
        raise ResponseError(f"d1saver_schema has columns {result.columns}, no version")
    rows = result.dicts()
    return SchemaInfo(version=max((int(r["version"]) for r in rows), default=0),
                      min_reader=max((int(r.get("min_reader") or 1) for r in rows), default=1))


def tags_from(result: Result) -> dict[str, str]:
    """{name: checkpoint_id} from LIST_TAGS."""
    check_columns(result, _sql.LIST_TAGS_COLUMNS)
    return {row[0]: row[1] for row in result.rows}


def op_count(result: Result) -> int:
    """The count an idempotency record holds (OP_RESULT of RECORD_UNTAG's record)."""
    check_columns(result, _sql.OP_RESULT_COLUMNS)
    if len(result.rows) != 1:
        raise ResponseError(f"the batch's record came back as {len(result.rows)} rows, not 1")
    return int(result.rows[0][0])


__all__ = ["Chunks", "Frozen", "SchemaInfo", "check_columns", "chunk_ids", "delta_history",
           "frozen_records", "histories_from_walk", "load_frozen", "op_count", "pending_writes",
           "read_rows", "schema_info", "tags_from", "tuples_from_page", "unpacked"]
