"""Frozen DeltaChannel rows (delta_frozen) re-sealed under keys: for copy_thread and rekey.

Each frozen value is bound to the row it was stored at (its thread, src_checkpoint_id, task,
idx, channel: d1saver/sql/catalogue.py, FREEZE), so a copy to another thread opens it under the source
row's binding and seals it under the target's, as d1saver/ops/reseal.py does for checkpoints and
writes. Pure: result rows in, statements out.
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from d1saver.sql import catalogue as _sql
from d1saver.storage.crypto import checkpoint_binder, refuse_plaintext, write_binder
from d1saver.core.protocol import Param, Result, Statement
from d1saver.ops.rows import check_columns
from d1saver.storage.values import METADATA_OWNER, Values

CheckpointCursor = tuple[str, str, str]  # thread_id, checkpoint_ns, checkpoint_id
IDX_MIN = -(2**63)  # below every idx (special writes have negative ones)


FrozenCursor = tuple[str, str, str, str, str, int, str, int]  # thread_id ... idx


@dataclass
class RawFrozen:
    """A delta_frozen row as stored (d1saver/sql/catalogue.py, FREEZE), with its holder's pieces of
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
    pieces: dict[str, list[tuple[int, str]]] = field(default_factory=dict)

    @property
    def cursor(self) -> FrozenCursor:
        return (*self.key, self.channel, self.kind, self.depth, self.task_id, self.idx)

    @property
    def owner(self) -> str:
        """The owner of its value's pieces where it was stored ('' for a seed's checkpoint)."""
        return "" if self.kind == "s" else f"{self.task_id}/{self.idx}"

    @property
    def piece_owner(self) -> str:
        """The owner of its value's pieces at the holder."""
        return f"f/{self.src}/{self.owner}"

    def pieces_of(self, owner: str) -> list[tuple[int, str]]:
        return self.pieces.get(f"f/{self.src}/{owner}", [])


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
                     heads: list[str] | None = None) -> Statement:
    """A page of frozen DeltaChannel rows after `after`: of one thread or all; with `heads`
    (the newest key's), only rows holding a value not sealed under it."""
    cursor = after or (thread_id or "", "", "", "", "", -1, "", IDX_MIN)
    params: dict[str, Param] = {
        **{f"after_{k}": v for k, v in frozen_key_params(cursor).items()},
        "limit": int(size), "heads": None if heads is None else json.dumps(heads)}
    if thread_id is None:
        return Statement.bind(_sql.RAW_FROZEN_ALL, params)
    return Statement.bind(_sql.RAW_FROZEN_THREAD, {**params, "thread_id": thread_id})


def raw_frozen(result: Result) -> list[RawFrozen]:
    check_columns(result, _sql.RAW_FROZEN_COLUMNS)
    rows: list[RawFrozen] = []
    pieces: dict[CheckpointCursor, dict[str, list[tuple[int, str]]]] = defaultdict(
        lambda: defaultdict(list))
    for kind, t, ns, cid, ch, fkind, depth, task, idx, src, path, type_, value, md, chans \
            in result.rows:
        if kind == "f":
            rows.append(RawFrozen((t, ns, cid), ch, fkind, int(depth), task, int(idx), src,
                                  path, type_, value, md, chans))
        elif kind == "k":
            pieces[(t, ns, cid)][ch].append((int(depth), value))
    for row in rows:
        row.pieces = {owner: sorted(p) for owner, p in pieces.get(row.key, {}).items()}
    return sorted(rows, key=lambda r: r.cursor)


def pieces_statements(key: CheckpointCursor, owner: str, pieces: list[str] | None,
                      replace_old: bool) -> list[Statement]:
    """The chunk rows of a re-sealed value, replacing its owner's (when it had or has some).
    Rows an UPDATE rewrites fire no trigger, so the old pieces are deleted here."""
    if pieces is None and not replace_old:
        return []
    of = {**key_params(key), "owner": owner}
    stmts = [Statement.bind(_sql.DELETE_CHUNKS_OF, of)]
    return stmts + [Statement.bind(_sql.INSERT_CHUNK, {**of, "seq": seq, "data": piece})
                    for seq, piece in enumerate(pieces or [])]


Resealed = tuple[str | None, str | None, list[str] | None]  # value, metadata, pieces


def reseal_frozen(values: Values, row: RawFrozen, thread_id: str, *, plaintext: bool
                  ) -> Resealed | None:
    """The row's value (and a seed's metadata column) opened under the binding of the row it
    was stored at, and sealed for that row in `thread_id`; None for plaintext left as it is
    (a 'c' row holds no value: returned as it is)."""
    ns, src = row.key[1], row.src
    if row.kind == "s":
        sealed = values.reseal_checkpoint(
            row.type, row.value or "", {"": row.pieces_of(""),
                                        METADATA_OWNER: row.pieces_of(METADATA_OWNER)},
            row.metadata or "{}", row.channels, checkpoint_binder(row.key[0], ns, src),
            checkpoint_binder(thread_id, ns, src), plaintext=plaintext)
        return None if sealed is None else (sealed[0][0], sealed[1], sealed[0][1])
    if row.kind == "w":
        bind = (row.task_id, row.task_path, row.idx, row.channel)
        out = values.reseal(row.value, {row.owner: row.pieces_of(row.owner)}, row.owner,
                            write_binder(row.key[0], ns, src, *bind)(row.type),
                            write_binder(thread_id, ns, src, *bind)(row.type),
                            plaintext=plaintext)
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
        text, metadata, pieces = sealed
        key = (target, *row.key[1:])
        stmts.append(Statement.bind(_sql.INSERT_FROZEN, {
            **key_params(key), "channel": row.channel, "kind": row.kind, "depth": row.depth,
            "task_id": row.task_id, "idx": row.idx, "src_checkpoint_id": row.src,
            "task_path": row.task_path, "type": row.type, "value": text, "metadata": metadata,
            "channels": row.channels}))
        if row.kind != "c":
            stmts += pieces_statements(key, row.piece_owner, pieces, replace_old=True)
    return stmts


__all__ = ["FROZEN_KEY", "IDX_MIN", "FrozenCursor", "RawFrozen", "Resealed", "copy_frozen",
           "frozen_key_params", "frozen_statement", "key_params", "pieces_statements", "raw_frozen", "refuse", "reseal_frozen"]
