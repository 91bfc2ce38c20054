"""Sealed rows rewritten without being decoded: copy_thread and rekeying under encryption keys.

With keys every value is bound to its row (d1saver/storage/crypto.py), so a copy cannot be made in
SQL and a key rotation cannot be finished by SQL either. Both read rows raw, in keyset pages
in primary-key order (d1saver/sql/catalogue.py, RAW_*), open each value under the binding of the row it
was read from and seal it under the newest key, bound to the row it is written to: the
target thread's for a copy, the same row for a rekey. Nothing is deserialized, so no stored
type is ever constructed. Pure: result rows in, statements out.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from d1saver.sql import catalogue as _sql
from d1saver.storage.crypto import (
    checkpoint_binder,
    refuse_plaintext,
    write_binder,
)
from d1saver.core.protocol import Param, Result, Statement
from d1saver.ops.reseal_frozen import (
    IDX_MIN,
    RawFrozen,
    copy_frozen,
    frozen_key_params,
    frozen_statement,
    key_params,
    pieces_statements,
    raw_frozen,
    reseal_frozen,
)
from d1saver.storage.manifest import is_manifest
from d1saver.ops.rows import check_columns, read_rows
from d1saver.storage.values import METADATA_OWNER, Values

CheckpointCursor = tuple[str, str, str]  # thread_id, checkpoint_ns, checkpoint_id
WriteCursor = tuple[str, str, str, str, int]  # ... and task_id, idx


@dataclass
class RawCheckpoint:
    """A checkpoint row as stored, with the pieces of its chunked value."""

    key: CheckpointCursor
    parent: str | None
    type: str | None
    checkpoint: str
    metadata: str
    channels: str
    run_id: str | None
    ts: str | None
    pieces: dict[str, list[tuple[int, str]]] = field(default_factory=dict)  # by owner


@dataclass
class RawWrite:
    """A write row as stored, with the pieces of its chunked value."""

    key: CheckpointCursor
    task_id: str
    task_path: str
    idx: int
    channel: str
    type: str | None
    value: str | None
    pieces: list[tuple[int, str]] = field(default_factory=list)

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
                          heads: list[str] | None) -> Statement:
    """A page of checkpoint rows after `after`: of one thread or all; with `heads` (the newest
    key's, `Sealer.fresh_heads`), only rows holding a value not sealed under it."""
    after = after or (thread_id or "", "", "")
    params: dict[str, Param] = {
        "after_thread_id": after[0], "after_checkpoint_ns": after[1],
        "after_checkpoint_id": after[2], "limit": int(size), "heads": _heads(heads)}
    if thread_id is None:
        return Statement.bind(_sql.RAW_CHECKPOINTS_ALL, params)
    return Statement.bind(_sql.RAW_CHECKPOINTS_THREAD, {**params, "thread_id": thread_id})


def writes_statement(thread_id: str | None, after: WriteCursor | None, size: int,
                     heads: list[str] | None) -> Statement:
    """A page of write rows after `after`, as `checkpoints_statement`."""
    after = after or (thread_id or "", "", "", "", IDX_MIN)
    params: dict[str, Param] = {
        "after_thread_id": after[0], "after_checkpoint_ns": after[1],
        "after_checkpoint_id": after[2], "after_task_id": after[3], "after_idx": after[4],
        "limit": int(size), "heads": _heads(heads)}
    if thread_id is None:
        return Statement.bind(_sql.RAW_WRITES_ALL, params)
    return Statement.bind(_sql.RAW_WRITES_THREAD, {**params, "thread_id": thread_id})


def _heads(heads: list[str] | None) -> str | None:
    return None if heads is None else json.dumps(heads)


def raw_checkpoints(result: Result) -> list[RawCheckpoint]:
    check_columns(result, _sql.RAW_COLUMNS)
    rows: dict[CheckpointCursor, RawCheckpoint] = {}
    pieces: dict[CheckpointCursor, dict[str, list[tuple[int, str]]]] = defaultdict(
        lambda: defaultdict(list))
    for kind, t, ns, cid, f1, f2, f3, f4, f5, f6, f7 in result.rows:
        if kind == "c":
            rows[(t, ns, cid)] = RawCheckpoint((t, ns, cid), f1, f2, f3, f4, f5, f6, f7)
        elif kind == "k":
            pieces[(t, ns, cid)][f1].append((int(f2), f3))
    for key, found in pieces.items():
        if key in rows:
            rows[key].pieces = {owner: sorted(p) for owner, p in found.items()}
    return sorted(rows.values(), key=lambda r: r.key)


def raw_writes(result: Result) -> list[RawWrite]:
    check_columns(result, _sql.RAW_COLUMNS)
    rows: dict[tuple[Any, ...], RawWrite] = {}
    pieces: dict[tuple[Any, ...], list[tuple[int, str]]] = defaultdict(list)
    for kind, t, ns, cid, f1, f2, f3, f4, f5, f6, _ in result.rows:
        if kind == "w":
            write = RawWrite((t, ns, cid), f1, f2, int(f3), f4, f5, f6)
            rows[(t, ns, cid, write.owner)] = write
        elif kind == "k":
            pieces[(t, ns, cid, f1)].append((int(f2), f3))
    for key, found in pieces.items():
        if key in rows:
            rows[key].pieces = sorted(found)
    return sorted(rows.values(), key=lambda w: w.cursor)


# --- re-sealing -------------------------------------------------------------------------------


Sealed = tuple[str, list[str] | None]  # a row's text and its pieces (None: inline)


def reseal_checkpoint(values: Values, row: RawCheckpoint, thread_id: str, *, plaintext: bool
                      ) -> tuple[Sealed, str] | None:
    """The row's value (with its metadata sealed in) and metadata column, sealed for
    `thread_id` (None: plaintext left as it is)."""
    return values.reseal_checkpoint(row.type, row.checkpoint, row.pieces, row.metadata,
                                    row.channels, checkpoint_binder(*row.key),
                                    checkpoint_binder(thread_id, *row.key[1:]),
                                    plaintext=plaintext)


def reseal_write(values: Values, row: RawWrite, thread_id: str, *, plaintext: bool
                 ) -> Sealed | None:
    bind = (row.task_id, row.task_path, row.idx, row.channel)
    return values.reseal(row.value, {row.owner: row.pieces}, row.owner,
                         write_binder(*row.key, *bind)(row.type),
                         write_binder(thread_id, *row.key[1:], *bind)(row.type),
                         plaintext=plaintext)


# --- copies -----------------------------------------------------------------------------------


def copy_checkpoints(values: Values, rows: list[RawCheckpoint], target: str) -> list[Statement]:
    """Statements that write `rows` into thread `target`, re-sealed for it (a plaintext row is
    refused: a copy never launders what a read would refuse)."""
    stmts: list[Statement] = []
    for row in rows:
        sealed = reseal_checkpoint(values, row, target, plaintext=False)
        if sealed is None:
            raise refuse_plaintext(checkpoint_binder(*row.key)(row.type, None))
        (text, pieces), metadata = sealed
        key = (target, *row.key[1:])
        stmts.append(Statement.bind(_sql.UPSERT_CHECKPOINT, {
            **key_params(key), "parent_checkpoint_id": row.parent, "type": row.type,
            "checkpoint": text, "metadata": metadata, "channels": row.channels,
            "run_id": row.run_id, "ts": row.ts}))
        stmts += pieces_statements(key, "", pieces, replace_old=True)
        stmts += pieces_statements(key, METADATA_OWNER, None, replace_old=True)
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
        text, pieces = sealed
        key = (target, *row.key[1:])
        stmts.append(Statement.bind(_sql.INSERT_WRITES_REPLACE, {
            **key_params(key), "task_id": row.task_id, "task_path": row.task_path,
            "writes": json.dumps([[row.idx, row.channel, row.type, text]], ensure_ascii=False)}))
        stmts += pieces_statements(key, row.owner, pieces, replace_old=True)
    return stmts


_NEXT_TABLE = {"checkpoints": "writes", "writes": "delta_frozen", "delta_frozen": None}


class SealedCopy:
    """A keyed thread copied into another database: pages of raw rows read from the source's
    database (`next_read`) and, re-sealed for the target, written into the target's (the
    statements `consume` returns), checkpoints first, then writes, then frozen rows. No I/O: the fleet runs
    each read and write with its database's driver; each write is one atomic batch."""

    def __init__(self, values: Values, source: str, target: str, page_size: int) -> None:
        self.values, self.source, self.target = values, source, target
        self.size = max(1, int(page_size))
        self.table: str | None = "checkpoints"
        self.cursor: Any = None
        self.copied = 0  # rows of both tables

    def next_read(self) -> Statement | None:
        if self.table is None:
            return None
        if self.table == "delta_frozen":
            return frozen_statement(self.source, self.cursor, self.size)
        make = checkpoints_statement if self.table == "checkpoints" else writes_statement
        return make(self.source, self.cursor, self.size, None)

    def consume(self, result: Result) -> list[Statement]:
        """The statements writing the page just read; moves on to the next page or table."""
        stmts: list[Statement]
        if self.table == "checkpoints":
            rows: list[Any] = read_rows(raw_checkpoints, result)
            stmts, last = copy_checkpoints(self.values, rows, self.target), rows and rows[-1].key
        elif self.table == "writes":
            rows = read_rows(raw_writes, result)
            stmts, last = copy_writes(self.values, rows, self.target), rows and rows[-1].cursor
        else:
            rows = read_rows(raw_frozen, result)
            stmts, last = copy_frozen(self.values, rows, self.target), rows and rows[-1].cursor
        self.copied += len(rows)
        if len(rows) < self.size:
            self.table, self.cursor = _NEXT_TABLE[self.table], None
        else:
            self.cursor = last
        return stmts


# --- rekeying ---------------------------------------------------------------------------------

def add_census(parts: Iterable[Mapping[str, Mapping[str, int]]]) -> dict[str, dict[str, int]]:
    """Figures of several databases added up, table by table and name by name: key censuses
    ({table: {key id: values}}) or per-table counts ({table: {"rewritten": n, ...}})."""
    total: dict[str, dict[str, int]] = {}
    for census in parts:
        for table, per_key in census.items():
            into = total.setdefault(table, {})
            for kid, n in per_key.items():
                into[kid] = into.get(kid, 0) + n
    return total


def add_counts(parts: Mapping[str, RekeyCounts]) -> RekeyCounts:
    """Rekey counts of several databases added up."""
    return RekeyCounts(*(sum(getattr(c, f) for c in parts.values())
                         for f in ("rewritten", "plaintext", "pages", "requests")))


def fingerprint(text: str | None) -> str | None:
    """The REKEY_GUARD_* statements' fingerprint of a text, in Python: length, first and last
    40 characters."""
    return None if text is None else f"{len(text)}:{text[:40]}{text[-40:]}"


def pieces_fingerprint(pieces: list[tuple[int, str]]) -> str | None:
    """The REKEY_GUARD_* statements' fingerprint of a value's pieces, in Python: count, total
    length, piece 0's ends."""
    first = dict(pieces).get(0)
    if not pieces or first is None:
        return None
    return f"{len(pieces)}:{sum(len(p) for _, p in pieces)}:{first[:40]}{first[-40:]}"


def rekey_checkpoints(values: Values, rows: list[RawCheckpoint], counts: RekeyCounts, *,
                      plaintext: bool) -> list[Statement]:
    """Statements that re-seal `rows` in place, each guarded to apply only to what was read."""

    def rewrite(row: RawCheckpoint, sealed: tuple[Sealed, str]) -> list[Statement]:
        (text, pieces), metadata = sealed
        return [
            Statement.bind(_sql.REKEY_GUARD_CHECKPOINT, {
                **key_params(row.key), "checkpoint_fp": fingerprint(row.checkpoint),
                "metadata_fp": fingerprint(row.metadata),
                "checkpoint_pieces_fp": pieces_fingerprint(row.pieces.get("", [])),
                "metadata_pieces_fp": pieces_fingerprint(row.pieces.get(METADATA_OWNER, []))}),
            Statement.bind(_sql.REKEY_CHECKPOINT, {**key_params(row.key), "checkpoint": text,
                                                   "metadata": metadata}),
            *pieces_statements(row.key, "", pieces, replace_old="" in row.pieces),
            # a row sealed from plaintext keeps its metadata in the value, not in chunks
            *pieces_statements(row.key, METADATA_OWNER, None, replace_old=METADATA_OWNER in row.pieces),
        ]

    return _rekey(rows, counts, lambda row: reseal_checkpoint(
        values, row, row.key[0], plaintext=plaintext), rewrite)


def _packed(row: RawWrite) -> list[RawWrite] | None:
    """The writes a "p:" row packs (one put_writes call's, written without keys), or None."""
    if not (row.value or "").startswith("p:"):
        return None
    return [RawWrite(row.key, row.task_id, row.task_path, int(idx), channel, type_ or "msgpack",
                     text) for idx, channel, type_, text in json.loads(str(row.value)[2:])]


def _unpack_sealed(values: Values, row: RawWrite, writes: list[RawWrite], counts: RekeyCounts
                   ) -> list[Statement]:
    """A plaintext pack sealed as one row per write (a sealed write is bound to its own row),
    guarded like any rewrite; left as it is if a write in it is stored by content (its chunks
    would have to be read: docs/STORAGE_DESIGN.md)."""
    if any(is_manifest(w.value) for w in writes):
        counts.plaintext += len(writes)
        return []
    write = {**key_params(row.key), "task_id": row.task_id, "idx": row.idx}
    stmts = [Statement.bind(_sql.REKEY_GUARD_WRITE, {
                 **write, "value_fp": fingerprint(row.value),
                 "pieces_fp": pieces_fingerprint([])}),
             Statement.bind(_sql.REKEY_DROP_WRITE, write)]
    for w in writes:
        sealed = reseal_write(values, w, w.key[0], plaintext=True)
        assert sealed is not None  # plaintext=True seals every plaintext value
        text, pieces = sealed
        stmts.append(Statement.bind(_sql.REKEY_ADD_WRITE, {
            **key_params(w.key), "task_id": w.task_id, "task_path": w.task_path, "idx": w.idx,
            "channel": w.channel, "type": w.type, "value": text}))
        stmts += pieces_statements(w.key, w.owner, pieces, replace_old=False)
        counts.rewritten += 1
    return stmts


def rekey_writes(values: Values, rows: list[RawWrite], counts: RekeyCounts, *,
                 plaintext: bool) -> list[Statement]:
    """Statements that re-seal `rows` in place, each guarded to apply only to what was read.
    A plaintext pack ("p:") becomes one sealed row per write (with `plaintext`) or is left."""
    stmts: list[Statement] = []
    whole: list[RawWrite] = []
    for row in rows:
        writes = _packed(row)
        if writes is None:
            whole.append(row)
        elif plaintext:
            stmts += _unpack_sealed(values, row, writes, counts)
        else:
            counts.plaintext += len(writes)
    return stmts + _rekey_whole(values, whole, counts, plaintext=plaintext)


def _rekey_whole(values: Values, rows: list[RawWrite], counts: RekeyCounts, *,
                 plaintext: bool) -> list[Statement]:

    def rewrite(row: RawWrite, sealed: Sealed) -> list[Statement]:
        text, pieces = sealed
        write = {**key_params(row.key), "task_id": row.task_id, "idx": row.idx}
        return [
            Statement.bind(_sql.REKEY_GUARD_WRITE, {
                **write, "value_fp": fingerprint(row.value),
                "pieces_fp": pieces_fingerprint(row.pieces)}),
            Statement.bind(_sql.REKEY_WRITE, {**write, "value": text}),
            *pieces_statements(row.key, row.owner, pieces, replace_old=bool(row.pieces)),
        ]

    return _rekey(rows, counts, lambda row: reseal_write(values, row, row.key[0],
                                                         plaintext=plaintext), rewrite)


def rekey_frozen(values: Values, rows: list[RawFrozen], counts: RekeyCounts, *,
                 plaintext: bool) -> list[Statement]:
    """Statements that re-seal frozen DeltaChannel rows in place, each guarded to apply only
    to what was read; their pieces lie with the holder."""

    def rewrite(row: RawFrozen, sealed: tuple[str | None, str | None, list[str] | None]
                ) -> list[Statement]:
        text, metadata, pieces = sealed
        old_pieces = row.pieces.get(row.piece_owner, [])
        return [
            Statement.bind(_sql.REKEY_GUARD_FROZEN, {
                **frozen_key_params(row.cursor), "value_fp": fingerprint(row.value),
                "pieces_fp": pieces_fingerprint(old_pieces), "owner": row.piece_owner}),
            Statement.bind(_sql.REKEY_FROZEN, {**frozen_key_params(row.cursor), "value": text,
                                               "metadata": metadata}),
            *pieces_statements(row.key, row.piece_owner, pieces, replace_old=bool(old_pieces)),
        ]

    return _rekey([r for r in rows if r.kind != "c"], counts,
                  lambda row: reseal_frozen(values, row, row.key[0], plaintext=plaintext),
                  rewrite)


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


def census(result: Result, key_id_of: Callable[[str | None], str | None]
           ) -> dict[str, dict[str, int]]:
    """{table: {key id or "plaintext": stored values}} from KEY_CENSUS."""
    check_columns(result, _sql.KEY_CENSUS_COLUMNS)
    out: dict[str, dict[str, int]] = {"checkpoints": {}, "writes": {}}  # and delta_frozen
    for table, head, n in result.rows:
        kid = key_id_of(head) or "plaintext"
        per = out.setdefault(table, {})
        per[kid] = per.get(kid, 0) + int(n)
    return out


__all__ = ["CheckpointCursor", "RawCheckpoint", "RawWrite", "RekeyCounts", "WriteCursor",
           "census", "checkpoints_statement", "copy_checkpoints", "copy_frozen", "copy_writes",
           "frozen_statement", "raw_checkpoints", "raw_frozen", "raw_writes",
           "REKEY_PLANS", "REKEY_TABLES", "rekey_checkpoints", "rekey_frozen", "rekey_writes",
           "writes_statement"]
