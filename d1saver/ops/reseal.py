"""Sealed rows rewritten without being decoded: copy_thread and rekeying under encryption keys,
for checkpoints, writes and frozen DeltaChannel rows alike.

With keys every value is bound to its row (d1saver/storage/crypto.py), so a copy cannot be made in
SQL and a key rotation cannot be finished by SQL either. Both read rows raw, in keyset pages
in primary-key order (d1saver/sql/catalogue.py, RAW_*), open each value under the binding of the row it
was read from and seal it under the newest key, bound to the row it is written to: the
target thread's for a copy, the same row for a rekey. Nothing is deserialized, so no stored
type is ever constructed. No I/O: result rows in, statements out; `copy_sealed` walks the
pages over the exchanges it is given (the fleet's, one per database).
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Callable, Generator, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from d1saver.sql import catalogue as _sql
from d1saver.storage.crypto import (
    checkpoint_binder,
    refuse_plaintext,
    write_binder,
)
from d1saver.core.protocol import Exchange, Param, Result, Statement
from d1saver.storage.manifest import is_manifest
from d1saver.ops.rows import check_columns, read_rows
from d1saver.storage.values import METADATA_OWNER, Values

CheckpointCursor = tuple[str, str, str]  # thread_id, checkpoint_ns, checkpoint_id
WriteCursor = tuple[str, str, str, str, int]  # ... and task_id, idx
# The content-addressed chunks (id -> data) a page read with `content` returned, per thread.
Content = dict[str, dict[str, str]]


@dataclass
class RawCheckpoint:
    """A checkpoint row as stored, with the parts of its chunked value."""

    key: CheckpointCursor
    parent: str | None
    type: str | None
    checkpoint: str
    metadata: str
    channels: str
    run_id: str | None
    ts: str | None
    parts: dict[str, list[tuple[int, str]]] = field(default_factory=dict)  # by owner
    content: dict[str, str] = field(default_factory=dict)  # its thread's chunks read, by id


@dataclass
class RawWrite:
    """A write row as stored, with the parts of its chunked value."""

    key: CheckpointCursor
    task_id: str
    task_path: str
    idx: int
    channel: str
    type: str | None
    value: str | None
    parts: list[tuple[int, str]] = field(default_factory=list)
    content: dict[str, str] = field(default_factory=dict)  # its thread's chunks read, by id

    @property
    def owner(self) -> str:
        return f"{self.task_id}/{self.idx}"

    @property
    def cursor(self) -> WriteCursor:
        return (*self.key, self.task_id, self.idx)


@dataclass
class RekeyCounts:
    """What rekeying one table did: rows re-sealed under the newest key, plaintext rows left
    as they are (without `seal_plaintext`), pages read, and requests sent."""

    rewritten: int = 0
    plaintext: int = 0
    pages: int = 0
    requests: int = 0
    tail: Result | None = field(default=None, repr=False)  # the last result of the last batch


# --- reads ------------------------------------------------------------------------------------


def checkpoints_statement(thread_id: str | None, after: CheckpointCursor | None, size: int,
                          heads: list[str] | None, *, content: bool = False) -> Statement:
    """A page of checkpoint rows after `after`: of one thread or all; with `heads` (the newest
    key's, `Sealer.fresh_heads`), only rows holding a value not sealed under it; with
    `content`, the chunks their values stored by content reach too (to seal them whole)."""
    after = after or (thread_id or "", "", "")
    params: dict[str, Param] = {
        "after_thread_id": after[0], "after_checkpoint_ns": after[1],
        "after_checkpoint_id": after[2], "limit": int(size), "heads": _heads(heads),
        "content": int(content)}
    if thread_id is None:
        return Statement.bind(_sql.RAW_CHECKPOINTS_ALL, params)
    return Statement.bind(_sql.RAW_CHECKPOINTS_THREAD, {**params, "thread_id": thread_id})


def writes_statement(thread_id: str | None, after: WriteCursor | None, size: int,
                     heads: list[str] | None, *, content: bool = False) -> Statement:
    """A page of write rows after `after`, as `checkpoints_statement`."""
    after = after or (thread_id or "", "", "", "", IDX_MIN)
    params: dict[str, Param] = {
        "after_thread_id": after[0], "after_checkpoint_ns": after[1],
        "after_checkpoint_id": after[2], "after_task_id": after[3], "after_idx": after[4],
        "limit": int(size), "heads": _heads(heads), "content": int(content)}
    if thread_id is None:
        return Statement.bind(_sql.RAW_WRITES_ALL, params)
    return Statement.bind(_sql.RAW_WRITES_THREAD, {**params, "thread_id": thread_id})


def _heads(heads: list[str] | None) -> str | None:
    return None if heads is None else json.dumps(heads)


def raw_checkpoints(result: Result) -> list[RawCheckpoint]:
    check_columns(result, _sql.RAW_CHECKPOINT_COLUMNS)
    rows: dict[CheckpointCursor, RawCheckpoint] = {}
    parts: dict[CheckpointCursor, dict[str, list[tuple[int, str]]]] = defaultdict(
        lambda: defaultdict(list))
    content: Content = defaultdict(dict)
    for kind, t, ns, cid, parent, type_, value, md, chans, run_id, ts, owner, seq \
            in result.rows:
        if kind == "c":
            rows[(t, ns, cid)] = RawCheckpoint((t, ns, cid), parent, type_, value, md, chans,
                                               run_id, ts, content=content[t])
        elif kind == "k":
            parts[(t, ns, cid)][owner].append((int(seq), value))
        elif kind == "h":
            content[t][owner] = value
    for key, found in parts.items():
        if key in rows:
            rows[key].parts = {owner: sorted(p) for owner, p in found.items()}
    return sorted(rows.values(), key=lambda r: r.key)


def raw_writes(result: Result) -> list[RawWrite]:
    check_columns(result, _sql.RAW_WRITE_COLUMNS)
    rows: dict[tuple[Any, ...], RawWrite] = {}
    parts: dict[tuple[Any, ...], list[tuple[int, str]]] = defaultdict(list)
    content: Content = defaultdict(dict)
    for kind, t, ns, cid, task_id, task_path, idx, channel, type_, value, owner, seq \
            in result.rows:
        if kind == "w":
            write = RawWrite((t, ns, cid), task_id, task_path, int(idx), channel, type_, value,
                             content=content[t])
            rows[(t, ns, cid, write.owner)] = write
        elif kind == "k":
            parts[(t, ns, cid, owner)].append((int(seq), value))
        elif kind == "h":
            content[t][owner] = value
    for key, found in parts.items():
        if key in rows:
            rows[key].parts = sorted(found)
    return sorted(rows.values(), key=lambda w: w.cursor)


# --- re-sealing -------------------------------------------------------------------------------


Sealed = tuple[str, list[str] | None]  # a row's text and its parts (None: inline)


def reseal_checkpoint(values: Values, row: RawCheckpoint, thread_id: str, *, plaintext: bool
                      ) -> tuple[Sealed, str] | None:
    """The row's value (with its metadata sealed in) and metadata column, sealed for
    `thread_id` (None: plaintext left as it is)."""
    return values.reseal_checkpoint(row.type, row.checkpoint, row.parts, row.metadata,
                                    row.channels, checkpoint_binder(*row.key),
                                    checkpoint_binder(thread_id, *row.key[1:]),
                                    plaintext=plaintext, chunks=row.content)


def reseal_write(values: Values, row: RawWrite, thread_id: str, *, plaintext: bool
                 ) -> Sealed | None:
    _, ns, checkpoint_id = row.key
    bind = (row.task_id, row.task_path, row.idx, row.channel)
    return values.reseal(row.value, {row.owner: row.parts}, row.owner,
                         write_binder(row.key[0], ns, checkpoint_id, *bind)(row.type),
                         write_binder(thread_id, ns, checkpoint_id, *bind)(row.type),
                         plaintext=plaintext, chunks=row.content)


# --- copies -----------------------------------------------------------------------------------


def copy_checkpoints(values: Values, rows: list[RawCheckpoint], target: str) -> list[Statement]:
    """Statements that write `rows` into thread `target`, re-sealed for it (a plaintext row is
    refused: a copy never launders what a read would refuse)."""
    stmts: list[Statement] = []
    for row in rows:
        sealed = reseal_checkpoint(values, row, target, plaintext=False)
        if sealed is None:
            raise refuse_plaintext(checkpoint_binder(*row.key)(row.type, None))
        (text, parts), metadata = sealed
        key = (target, *row.key[1:])
        stmts.append(Statement.bind(_sql.UPSERT_CHECKPOINT, {
            **key_params(key), "parent_checkpoint_id": row.parent, "type": row.type,
            "checkpoint": text, "metadata": metadata, "channels": row.channels,
            "run_id": row.run_id, "ts": row.ts}))
        # The row replaced takes its pieces with it (the insert trigger checkpoints_own_chunks,
        # migration 2); a re-sealed row keeps its metadata in the value, never in pieces.
        stmts += parts_statements(key, "", parts, replace_old=True)
    return stmts


def copy_writes(values: Values, rows: list[RawWrite], target: str) -> list[Statement]:
    """Statements that write `rows` into thread `target`, re-sealed for it; rows already on
    the target are replaced, as copy_thread does without keys."""
    stmts: list[Statement] = []
    for row in rows:
        sealed = reseal_write(values, row, target, plaintext=False)
        if sealed is None:
            raise refuse_plaintext(write_binder(*row.key, row.task_id, row.task_path, row.idx,
                                                row.channel)(row.type))
        text, parts = sealed
        key = (target, *row.key[1:])
        stmts.append(Statement.bind(_sql.INSERT_WRITES_REPLACE, {
            **key_params(key), "task_id": row.task_id, "task_path": row.task_path,
            "writes": json.dumps([[row.idx, row.channel, row.type, text]], ensure_ascii=False)}))
        stmts += parts_statements(key, row.owner, parts, replace_old=True)
    return stmts


# --- frozen DeltaChannel rows (delta_frozen) ---------------------------------------------------
# Each frozen value is bound to the row it was stored at (its thread, src_checkpoint_id, task,
# idx, channel: d1saver/sql/catalogue.py, FREEZE), so a copy to another thread opens it under
# the source row's binding and seals it under the target's, as for checkpoints and writes.

IDX_MIN = -(2**63)  # below every idx (special writes have negative ones)


FrozenCursor = tuple[str, str, str, str, str, int, str, int]  # thread_id ... idx


@dataclass
class RawFrozen:
    """A delta_frozen row as stored (d1saver/sql/catalogue.py, FREEZE), with its holder's parts of
    frozen values (owner 'f/<src_checkpoint_id>/<owner>')."""

    key: CheckpointCursor  # the holder
    channel: str
    kind: str
    depth: int
    task_id: str
    idx: int
    src: str
    task_path: str
    type: str | None
    value: str | None
    metadata: str | None
    channels: str | None
    parent: str | None = None  # the holder's parent the record is bound to (migration 9)
    parts: dict[str, list[tuple[int, str]]] = field(default_factory=dict)
    content: dict[str, str] = field(default_factory=dict)  # its thread's chunks read, by id

    @property
    def cursor(self) -> FrozenCursor:
        return (*self.key, self.channel, self.kind, self.depth, self.task_id, self.idx)

    @property
    def owner(self) -> str:
        """The owner of its value's parts where it was stored ('' for a seed's checkpoint)."""
        return "" if self.kind == "s" else f"{self.task_id}/{self.idx}"

    @property
    def part_owner(self) -> str:
        """The owner of its value's parts at the holder."""
        return f"f/{self.src}/{self.owner}"

    def parts_of(self, owner: str) -> list[tuple[int, str]]:
        return self.parts.get(f"f/{self.src}/{owner}", [])


def key_params(key: tuple[Any, ...]) -> dict[str, Param]:
    """A checkpoint's key (thread_id, checkpoint_ns, checkpoint_id) as named parameters."""
    thread_id, ns, cid = key
    return {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": cid}


# A delta_frozen row's primary key, in order (RawFrozen.cursor).
FROZEN_KEY = ("thread_id", "checkpoint_ns", "checkpoint_id", "channel", "kind", "depth",
              "task_id", "idx")


def frozen_key_params(cursor: tuple[Any, ...]) -> dict[str, Param]:
    """A delta_frozen row's key as named parameters."""
    return dict(zip(FROZEN_KEY, cursor, strict=True))


def frozen_statement(thread_id: str | None, after: FrozenCursor | None, size: int,
                     heads: list[str] | None = None, *, content: bool = False) -> Statement:
    """A page of frozen DeltaChannel rows after `after`, as `checkpoints_statement`."""
    cursor = after or (thread_id or "", "", "", "", "", -1, "", IDX_MIN)
    params: dict[str, Param] = {
        **{f"after_{k}": v for k, v in frozen_key_params(cursor).items()},
        "limit": int(size), "heads": None if heads is None else json.dumps(heads),
        "content": int(content)}
    if thread_id is None:
        return Statement.bind(_sql.RAW_FROZEN_ALL, params)
    return Statement.bind(_sql.RAW_FROZEN_THREAD, {**params, "thread_id": thread_id})


def raw_frozen(result: Result) -> list[RawFrozen]:
    check_columns(result, _sql.RAW_FROZEN_COLUMNS)
    rows: list[RawFrozen] = []
    parts: dict[CheckpointCursor, dict[str, list[tuple[int, str]]]] = defaultdict(
        lambda: defaultdict(list))
    content: Content = defaultdict(dict)
    for kind, t, ns, cid, ch, fkind, depth, task, idx, src, path, type_, value, md, chans, \
            parent in result.rows:
        if kind == "f":
            rows.append(RawFrozen((t, ns, cid), ch, fkind, int(depth), task, int(idx), src,
                                  path, type_, value, md, chans, parent, content=content[t]))
        elif kind == "k":
            parts[(t, ns, cid)][ch].append((int(depth), value))
        elif kind == "h":
            content[t][ch] = value
    for row in rows:
        row.parts = {owner: sorted(p) for owner, p in parts.get(row.key, {}).items()}
    return sorted(rows, key=lambda r: r.cursor)


def parts_statements(key: CheckpointCursor, owner: str, parts: list[str] | None,
                      replace_old: bool) -> list[Statement]:
    """The chunk rows of a re-sealed value, replacing its owner's (when it had or has some).
    Rows an UPDATE rewrites fire no trigger, so the old parts are deleted here."""
    if parts is None and not replace_old:
        return []
    of = {**key_params(key), "owner": owner}
    stmts = [Statement.bind(_sql.DELETE_CHUNKS_OF, of)]
    return stmts + [Statement.bind(_sql.INSERT_CHUNK, {**of, "seq": seq, "data": part})
                    for seq, part in enumerate(parts or [])]


Resealed = tuple[str | None, str | None, list[str] | None]  # value, metadata, parts


def reseal_frozen(values: Values, row: RawFrozen, thread_id: str, *, plaintext: bool
                  ) -> Resealed | None:
    """The row's value (and a seed's metadata column) opened under the binding of the row it
    was stored at, and sealed for that row in `thread_id`; None for plaintext left as it is
    (a 'c' row holds no value: returned as it is)."""
    ns, src = row.key[1], row.src
    if row.kind == "s":
        sealed = values.reseal_checkpoint(
            row.type, row.value or "", {"": row.parts_of(""),
                                        METADATA_OWNER: row.parts_of(METADATA_OWNER)},
            row.metadata or "{}", row.channels, checkpoint_binder(row.key[0], ns, src),
            checkpoint_binder(thread_id, ns, src), plaintext=plaintext, chunks=row.content)
        return None if sealed is None else (sealed[0][0], sealed[1], sealed[0][1])
    if row.kind == "w":
        bind = (row.task_id, row.task_path, row.idx, row.channel)
        out = values.reseal(row.value, {row.owner: row.parts_of(row.owner)}, row.owner,
                            write_binder(row.key[0], ns, src, *bind)(row.type),
                            write_binder(thread_id, ns, src, *bind)(row.type),
                            plaintext=plaintext, chunks=row.content)
        return None if out is None else (out[0], row.metadata, out[1])
    return row.value, row.metadata, None


def refuse(row: RawFrozen) -> Exception:
    """The error for a frozen value found in plaintext where keys are set."""
    if row.kind == "s":
        return refuse_plaintext(checkpoint_binder(row.key[0], row.key[1], row.src)(row.type,
                                                                                    None))
    return refuse_plaintext(write_binder(row.key[0], row.key[1], row.src, row.task_id,
                                         row.task_path, row.idx, row.channel)(row.type))


def copy_frozen(values: Values, rows: list[RawFrozen], target: str) -> list[Statement]:
    """Statements that write frozen rows into thread `target`, each value re-sealed from the
    binding of the row it was stored at in the source to that row's in the target."""
    stmts: list[Statement] = []
    for row in rows:
        sealed = reseal_frozen(values, row, target, plaintext=False)
        if sealed is None:
            raise refuse(row)
        text, metadata, parts = sealed
        key = (target, *row.key[1:])
        stmts.append(Statement.bind(_sql.INSERT_FROZEN, {
            **key_params(key), "channel": row.channel, "kind": row.kind, "depth": row.depth,
            "task_id": row.task_id, "idx": row.idx, "src_checkpoint_id": row.src,
            "task_path": row.task_path, "type": row.type, "value": text, "metadata": metadata,
            "channels": row.channels, "parent": row.parent}))
        if row.kind != "c":
            stmts += parts_statements(key, row.part_owner, parts, replace_old=True)
    return stmts


def copy_sealed(read: Exchange, write: Exchange, values: Values, source: str, target: str,
                page_size: int) -> Generator[Any, Any, int]:
    """A keyed thread copied into another database: pages of raw rows read through `read`
    (the source's database) and, re-sealed for the target, written through `write` (the
    target's), checkpoints first, then writes, then frozen rows; each write one atomic batch.
    Returns the rows copied."""
    size, copied = max(1, int(page_size)), 0
    pages: list[tuple[Callable[[Any], Statement], Callable[[Result], list[Any]],
                      Callable[[Any], Any], Callable[[Values, Any, str], list[Statement]]]] = [
        (lambda c: checkpoints_statement(source, c, size, None), raw_checkpoints,
         lambda row: row.key, copy_checkpoints),
        (lambda c: writes_statement(source, c, size, None), raw_writes,
         lambda row: row.cursor, copy_writes),
        (lambda c: frozen_statement(source, c, size), raw_frozen,
         lambda row: row.cursor, copy_frozen)]
    for statement, parse, cursor_of, copy in pages:
        cursor = None
        while True:
            (result,) = yield from read([statement(cursor)])
            rows = read_rows(parse, result)
            copied += len(rows)
            if stmts := copy(values, rows, target):
                yield from write(stmts)
            if len(rows) < size:
                break
            cursor = cursor_of(rows[-1])
    return copied


# --- rekeying ---------------------------------------------------------------------------------

def add_census(censuses: Iterable[Mapping[str, Mapping[str, int]]]) -> dict[str, dict[str, int]]:
    """Figures of several databases added up, table by table and name by name: key censuses
    ({table: {key id: values}}) or per-table counts ({table: {"rewritten": n, ...}})."""
    total: dict[str, dict[str, int]] = {}
    for census in censuses:
        for table, per_key in census.items():
            into = total.setdefault(table, {})
            for kid, n in per_key.items():
                into[kid] = into.get(kid, 0) + n
    return total


def add_counts(counts: Mapping[str, RekeyCounts]) -> RekeyCounts:
    """Rekey counts of several databases added up."""
    return RekeyCounts(*(sum(getattr(c, f) for c in counts.values())
                         for f in ("rewritten", "plaintext", "pages", "requests")))


def fingerprint(text: str | None) -> str | None:
    """The REKEY_GUARD_* statements' fingerprint of a text, in Python: length, first and last
    40 characters."""
    return None if text is None else f"{len(text)}:{text[:40]}{text[-40:]}"


def parts_fingerprint(parts: list[tuple[int, str]]) -> str | None:
    """The REKEY_GUARD_* statements' fingerprint of a value's parts, in Python: count, total
    length, part 0's ends."""
    first = dict(parts).get(0)
    if not parts or first is None:
        return None
    return f"{len(parts)}:{sum(len(p) for _, p in parts)}:{first[:40]}{first[-40:]}"


def collect_content(rows: Iterable[tuple[str, str | None]]) -> list[Statement]:
    """Last in a page's batch that sealed values stored by content (rows of (thread, the
    value as read)): the chunks no row of those threads reaches any more go (GC_CHUNKS), so
    that at every request boundary each chunk is reached and each one reached is stored."""
    threads = sorted({t for t, text in rows if _by_content(text)})
    if not threads:
        return []
    return [*(Statement.bind(_sql.SCOPE_TARGET, {"target": t}) for t in threads),
            Statement.bind(_sql.GC_CHUNKS), Statement.bind(_sql.CLEAR_SCOPE)]


def _by_content(text: str | None) -> bool:
    """Whether a stored value is an "m:" manifest, or a pack holding one."""
    if text is not None and text.startswith("p:"):
        return any(is_manifest(value) for _, _, _, value in json.loads(text[2:]))
    return is_manifest(text)


def rekey_checkpoints(values: Values, rows: list[RawCheckpoint], counts: RekeyCounts, *,
                      plaintext: bool) -> list[Statement]:
    """Statements that re-seal `rows` in place, each guarded to apply only to what was read;
    with `plaintext` a value stored by content is sealed whole (its chunks collected)."""

    def rewrite(row: RawCheckpoint, sealed: tuple[Sealed, str]) -> list[Statement]:
        (text, parts), metadata = sealed
        return [
            Statement.bind(_sql.REKEY_GUARD_CHECKPOINT, {
                **key_params(row.key), "checkpoint_fp": fingerprint(row.checkpoint),
                "metadata_fp": fingerprint(row.metadata),
                "checkpoint_pieces_fp": parts_fingerprint(row.parts.get("", [])),
                "metadata_pieces_fp": parts_fingerprint(row.parts.get(METADATA_OWNER, []))}),
            Statement.bind(_sql.REKEY_CHECKPOINT, {**key_params(row.key), "checkpoint": text,
                                                   "metadata": metadata}),
            *parts_statements(row.key, "", parts, replace_old="" in row.parts),
            # a row sealed from plaintext keeps its metadata in the value, not in chunks
            *parts_statements(row.key, METADATA_OWNER, None, replace_old=METADATA_OWNER in row.parts),
        ]

    stmts = _rekey(rows, counts, lambda row: reseal_checkpoint(
        values, row, row.key[0], plaintext=plaintext), rewrite)
    return stmts + (collect_content((r.key[0], r.checkpoint) for r in rows) if plaintext else [])


def _packed(row: RawWrite) -> list[RawWrite] | None:
    """The writes a "p:" row packs (one put_writes call's, written without keys), or None."""
    if not (row.value or "").startswith("p:"):
        return None
    return [RawWrite(row.key, row.task_id, row.task_path, int(idx), channel, type_ or "msgpack",
                     text, content=row.content)
            for idx, channel, type_, text in json.loads(str(row.value)[2:])]


def _unpack_sealed(values: Values, row: RawWrite, writes: list[RawWrite], counts: RekeyCounts
                   ) -> list[Statement]:
    """A plaintext pack sealed as one row per write (a sealed write is bound to its own row,
    a write stored by content sealed whole), guarded like any rewrite."""
    write = {**key_params(row.key), "task_id": row.task_id, "idx": row.idx}
    stmts = [Statement.bind(_sql.REKEY_GUARD_WRITE, {
                 **write, "value_fp": fingerprint(row.value),
                 "pieces_fp": parts_fingerprint([])}),
             Statement.bind(_sql.REKEY_DROP_WRITE, write)]
    for w in writes:
        sealed = reseal_write(values, w, w.key[0], plaintext=True)
        assert sealed is not None  # plaintext=True seals every plaintext value
        text, parts = sealed
        stmts.append(Statement.bind(_sql.REKEY_ADD_WRITE, {
            **key_params(w.key), "task_id": w.task_id, "task_path": w.task_path, "idx": w.idx,
            "channel": w.channel, "type": w.type, "value": text}))
        stmts += parts_statements(w.key, w.owner, parts, replace_old=False)
        counts.rewritten += 1
    return stmts


def rekey_writes(values: Values, rows: list[RawWrite], counts: RekeyCounts, *,
                 plaintext: bool) -> list[Statement]:
    """Statements that re-seal `rows` in place, each guarded to apply only to what was read.
    A plaintext pack ("p:") becomes one sealed row per write (with `plaintext`) or is left;
    with `plaintext` a value stored by content is sealed whole (its chunks collected)."""
    stmts: list[Statement] = []
    whole: list[RawWrite] = []
    for row in rows:
        writes = _packed(row)
        if writes is None:
            whole.append(row)
        elif plaintext:
            stmts += _unpack_sealed(values, row, writes, counts)
        else:
            counts.plaintext += 1  # one row left, as the census counts it
    stmts += _rekey_whole(values, whole, counts, plaintext=plaintext)
    return stmts + (collect_content((r.key[0], r.value) for r in rows) if plaintext else [])


def _rekey_whole(values: Values, rows: list[RawWrite], counts: RekeyCounts, *,
                 plaintext: bool) -> list[Statement]:

    def rewrite(row: RawWrite, sealed: Sealed) -> list[Statement]:
        text, parts = sealed
        write = {**key_params(row.key), "task_id": row.task_id, "idx": row.idx}
        return [
            Statement.bind(_sql.REKEY_GUARD_WRITE, {
                **write, "value_fp": fingerprint(row.value),
                "pieces_fp": parts_fingerprint(row.parts)}),
            Statement.bind(_sql.REKEY_WRITE, {**write, "value": text}),
            *parts_statements(row.key, row.owner, parts, replace_old=bool(row.parts)),
        ]

    return _rekey(rows, counts, lambda row: reseal_write(
        values, row, row.key[0], plaintext=plaintext), rewrite)


def rekey_frozen(values: Values, rows: list[RawFrozen], counts: RekeyCounts, *,
                 plaintext: bool) -> list[Statement]:
    """Statements that re-seal frozen DeltaChannel rows in place, each guarded to apply only
    to what was read; their parts lie with the holder. With `plaintext` a value stored by
    content is sealed whole (its chunks collected)."""

    def rewrite(row: RawFrozen, sealed: tuple[str | None, str | None, list[str] | None]
                ) -> list[Statement]:
        text, metadata, parts = sealed
        old_pieces = row.parts.get(row.part_owner, [])
        return [
            Statement.bind(_sql.REKEY_GUARD_FROZEN, {
                **frozen_key_params(row.cursor), "value_fp": fingerprint(row.value),
                "pieces_fp": parts_fingerprint(old_pieces), "owner": row.part_owner}),
            Statement.bind(_sql.REKEY_FROZEN, {**frozen_key_params(row.cursor), "value": text,
                                               "metadata": metadata}),
            *parts_statements(row.key, row.part_owner, parts, replace_old=bool(old_pieces)),
        ]

    stmts = _rekey([r for r in rows if r.kind != "c"], counts,
                   lambda row: reseal_frozen(values, row, row.key[0], plaintext=plaintext),
                   rewrite)
    return stmts + (collect_content((r.key[0], r.value) for r in rows if r.kind != "c")
                    if plaintext else [])


# Per table: its page read, row parser, keyset cursor and page rewrite (Operations.rekey).
REKEY_PLANS: dict[str, tuple[Callable[..., Statement], Callable[[Result], list[Any]],
                             Callable[[Any], Any], Callable[..., list[Statement]]]] = {
    "checkpoints": (checkpoints_statement, raw_checkpoints, lambda r: r.key, rekey_checkpoints),
    "writes": (writes_statement, raw_writes, lambda r: r.cursor, rekey_writes),
    "delta_frozen": (frozen_statement, raw_frozen, lambda r: r.cursor, rekey_frozen),
}
REKEY_TABLES = tuple(REKEY_PLANS)

Row = TypeVar("Row")
Out = TypeVar("Out")


def _rekey(rows: list[Row], counts: RekeyCounts, reseal: Callable[[Row], Out | None],
           rewrite: Callable[[Row, Out], list[Statement]]) -> list[Statement]:
    """Each row re-sealed and rewritten, counted; a plaintext row left (reseal gives None)."""
    stmts: list[Statement] = []
    for row in rows:
        sealed = reseal(row)
        if sealed is None:
            counts.plaintext += 1
            continue
        stmts += rewrite(row, sealed)
        counts.rewritten += 1
    return stmts


def census(result: Result, key_id_of: Callable[[str | None], str | None],
           staged: Result | None = None) -> dict[str, dict[str, int]]:
    """{table: {key id or "plaintext": stored values}} from KEY_CENSUS; with STAGED_VALUES'
    result, {"staged": {"skipped": values}} too if staged rows hold any (rekey skips them)."""
    check_columns(result, _sql.KEY_CENSUS_COLUMNS)
    out: dict[str, dict[str, int]] = {"checkpoints": {}, "writes": {}}  # and delta_frozen
    for table, head, n in result.rows:
        kid = key_id_of(head) or "plaintext"
        per = out.setdefault(table, {})
        per[kid] = per.get(kid, 0) + int(n)
    if staged is not None:
        check_columns(staged, _sql.STAGED_VALUES_COLUMNS)
        if staged.rows and int(staged.rows[0][0]):
            out[STAGED] = {"skipped": int(staged.rows[0][0])}
    return out


# The census entry of staged rows' values (not a table: rekey leaves them as they are).
STAGED = "staged"


__all__ = ["STAGED", "CheckpointCursor", "FROZEN_KEY", "FrozenCursor", "IDX_MIN", "REKEY_PLANS",
           "REKEY_TABLES", "RawCheckpoint", "RawFrozen", "RawWrite", "RekeyCounts", "Resealed",
           "WriteCursor", "census", "checkpoints_statement", "collect_content", "copy_checkpoints",
           "copy_frozen", "copy_sealed", "copy_writes", "frozen_key_params", "frozen_statement",
           "key_params", "parts_statements", "raw_checkpoints", "raw_frozen", "raw_writes",
           "refuse", "rekey_checkpoints", "rekey_frozen", "rekey_writes", "reseal_frozen",
           "writes_statement"]
