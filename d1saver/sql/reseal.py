"""Sealed rows: copies and rekeying under encryption keys (d1saver/ops/reseal.py).

With encryption keys a value is bound to its row, so copy_thread and rekey rewrite values
rather than rows: they read rows raw, in keyset pages in primary key order, re-seal each
value in Python (never deserialized) and write it back, each write guarded by a fingerprint
of what was read.
"""

from __future__ import annotations

from d1saver.sql.parts import (FROZEN_OWNER, TABLE_COLUMNS, WRITE_COLUMNS, column_list,
                               insert_values, not_staged, stored_head, tree_walk, write_owner)
from d1saver.sql.query import Query, name_queries, q

# A value is read by its head (parts.stored_head: its text, or piece 0's when the row holds a
# chunk marker; the key id is there). Not under the newest key: its head is not among :heads,
# the JSON array of the 7-character heads the newest key's texts have ("e:~" and the base64
# group of the key id; "e:" and the base85 group of key id and codec before schema v15:
# d1saver/storage/crypto.py).
# Per table of sealed values: its alias, its value's head, and which of its rows hold a value.
SEALED = {
    "checkpoints": ("c", stored_head("c", "checkpoint", "''"), ""),
    "writes": ("w", stored_head("w", "value", write_owner("w")), "w.value IS NOT NULL"),
    "delta_frozen": ("f", stored_head("f", "value", FROZEN_OWNER),
                     "f.kind <> 'c' AND f.value IS NOT NULL"),
}


def _not_under_newest_key(table: str) -> str:
    """Whether a row of `table` holds a value not sealed under the newest key (every row when
    :heads is NULL)."""
    _, head, holds_value = SEALED[table]
    stale = f"substr(COALESCE({head}, ''), 1, 7) NOT IN (SELECT value FROM json_each(:heads))"
    return f"(:heads IS NULL OR {f'({holds_value} AND {stale})' if holds_value else stale})"


# A raw page: rows of `table` after the cursor (:after_<key column>; '' and -2^63 to start),
# :limit rows, in one thread (..._THREAD: :thread_id) or all (..._ALL); only those with a
# value not sealed under the newest key when :heads is given (a checkpoint's metadata is
# sealed with its checkpoint). With their pieces ('k'), and with :content = 1 the chunks their
# manifests reach ('h': `rekey --seal-plaintext` seals a value stored by content whole), per
# RAW_..._COLUMNS.
RAW_KEYS = {
    "checkpoints": ("thread_id", "checkpoint_ns", "checkpoint_id"),
    "writes": ("thread_id", "checkpoint_ns", "checkpoint_id", "task_id", "idx"),
    "delta_frozen": ("thread_id", "checkpoint_ns", "checkpoint_id", "channel", "kind", "depth",
                     "task_id", "idx"),
}


# The column of each table that holds its value (an "m:" manifest when stored by content).
VALUE_COLUMN = {"checkpoints": "checkpoint", "writes": "value", "delta_frozen": "value"}


def raw_page(table: str, every_thread: bool, rows: str) -> str:
    """The CTEs `page` of `table`'s rows and `refs` (the content-addressed chunks the page's
    values reach, only when :content is 1: sealing plaintext), then `rows` (which reads them)."""
    keys = RAW_KEYS[table]
    after = f"({column_list(keys)}) > ({column_list(keys, ':after_')})"
    scope = (f"{after}\n      AND {not_staged()}" if every_thread
             else f"thread_id = :thread_id AND {after}")
    return f"""
WITH RECURSIVE page AS (
    SELECT {column_list(TABLE_COLUMNS[table])}
    FROM {table} AS {SEALED[table][0]}
    WHERE {scope}
      AND {_not_under_newest_key(table)}
    ORDER BY {column_list(keys)}
    LIMIT :limit
),
vals(thread_id, v) AS (
    SELECT thread_id, {VALUE_COLUMN[table]} FROM page WHERE :content = 1
),
{tree_walk("refs", "vals")}
{rows}"""


def _content(columns: int, id_at: int, data_at: int) -> str:
    """The arm of a raw page that returns each chunk `refs` reached ('h'), in a row of
    `columns` columns: its id at `id_at`, its data at `data_at`, the thread second."""
    cols = ["'h'", "r.thread_id"] + ["NULL"] * (columns - 2)
    cols[id_at], cols[data_at] = "r.id", "k.data"
    return f"""
UNION ALL
SELECT {", ".join(cols)}
FROM refs AS r CROSS JOIN d1saver_chunks AS k USING (thread_id, id)"""


# The pieces of the page's rows, owned by `owner` (of `p`, the page).
def _pieces(owner: str) -> str:
    return f"""FROM page AS p JOIN chunks AS k ON k.thread_id = p.thread_id
    AND k.checkpoint_ns = p.checkpoint_ns AND k.checkpoint_id = p.checkpoint_id
    AND k.owner {owner}"""


RAW_CHECKPOINTS_THREAD, RAW_CHECKPOINTS_ALL = (q(raw_page("checkpoints", every_thread, f"""
SELECT 'c' AS kind, thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id, type,
       checkpoint AS value, metadata, channels, run_id, ts, NULL AS owner, NULL AS seq
FROM page
UNION ALL
SELECT 'k', k.thread_id, k.checkpoint_ns, k.checkpoint_id, NULL, NULL, k.data, NULL, NULL, NULL,
       NULL, k.owner, k.seq
{_pieces("IN ('', ':metadata')")}{_content(13, 11, 6)}""")) for every_thread in (False, True))

RAW_WRITES_THREAD, RAW_WRITES_ALL = (q(raw_page("writes", every_thread, f"""
SELECT 'w' AS kind, thread_id, checkpoint_ns, checkpoint_id, task_id, task_path, idx, channel,
       type, value, NULL AS owner, NULL AS seq
FROM page
UNION ALL
SELECT 'k', k.thread_id, k.checkpoint_ns, k.checkpoint_id, NULL, NULL, NULL, NULL, NULL, k.data,
       k.owner, k.seq
{_pieces(f"= {write_owner('p')}")}{_content(12, 10, 9)}""")) for every_thread in (False, True))

# Frozen DeltaChannel rows (delta_frozen), for copy_thread and rekey under keys, which re-seal
# them: 's' and 'w' rows hold values. With their holders' frozen pieces ('k': owner in
# `channel`, seq in `depth`, data in `value`).
RAW_FROZEN_THREAD, RAW_FROZEN_ALL = (q(raw_page("delta_frozen", every_thread, f"""
SELECT 'f' AS kind, thread_id, checkpoint_ns, checkpoint_id, channel, kind AS fkind, depth,
       task_id, idx, src_checkpoint_id, task_path, type, value, metadata, channels, parent
FROM page
UNION ALL
SELECT 'k', k.thread_id, k.checkpoint_ns, k.checkpoint_id, k.owner, NULL, k.seq, NULL, NULL,
       NULL, NULL, NULL, k.data, NULL, NULL, NULL
FROM (SELECT DISTINCT thread_id, checkpoint_ns, checkpoint_id FROM page) AS h
JOIN chunks AS k ON k.thread_id = h.thread_id AND k.checkpoint_ns = h.checkpoint_ns
    AND k.checkpoint_id = h.checkpoint_id AND substr(k.owner, 1, 2) = 'f/'{_content(16, 4, 12)}"""))
    for every_thread in (False, True))
RAW_FROZEN_COLUMNS = ("kind", "thread_id", "checkpoint_ns", "checkpoint_id", "channel",
                      "fkind", "depth", "task_id", "idx", "src_checkpoint_id", "task_path",
                      "type", "value", "metadata", "channels", "parent")
INSERT_FROZEN = q(insert_values("REPLACE", "delta_frozen", TABLE_COLUMNS["delta_frozen"]))

# Columns of the raw pages: a row's own columns ('c' or 'w'), then its pieces' ('k': the piece
# text in `value`, with its owner and seq), then with :content the content-addressed chunks
# ('h': the chunk's id in `owner`, or in `channel` for frozen rows; its data in `value`).
RAW_CHECKPOINT_COLUMNS = ("kind", "thread_id", "checkpoint_ns", "checkpoint_id",
                          "parent_checkpoint_id", "type", "value", "metadata", "channels",
                          "run_id", "ts", "owner", "seq")
RAW_WRITE_COLUMNS = ("kind", "thread_id", "checkpoint_ns", "checkpoint_id", "task_id",
                     "task_path", "idx", "channel", "type", "value", "owner", "seq")

# Rekeying writes a value back only if its row still holds what was read: a guard per row,
# sent before its update in the same batch, trips d1saver_guard's CHECK ("head_moved": the row
# moved on) and rolls the batch back otherwise; the job then reads the page again. A text is
# compared by a fingerprint (length, first and last 40 characters: sealed texts start with a
# random nonce and end with a tag), its chunks by count, total length and piece 0's fingerprint.
AT_CHECKPOINT = """thread_id = :thread_id AND checkpoint_ns = :checkpoint_ns
        AND checkpoint_id = :checkpoint_id"""
WRITE_KEY = f"{AT_CHECKPOINT} AND task_id = :task_id AND idx = :idx"
FROZEN_KEY = f"""{AT_CHECKPOINT} AND channel = :channel
  AND kind = :kind AND depth = :depth AND task_id = :task_id AND idx = :idx"""


def _ends(text: str) -> str:
    return f"substr({text}, 1, 40) || substr({text}, -40)"


def fingerprint(text: str) -> str:
    return f"length({text}) || ':' || {_ends(text)}"


def pieces_fingerprint(owner: str) -> str:
    """The fingerprint of the pieces of the row at :thread_id, :checkpoint_ns, :checkpoint_id
    owned by `owner`."""
    return f"""(SELECT COUNT(*) || ':' || SUM(length(data)) || ':'
        || MAX(CASE WHEN seq = 0 THEN {_ends("data")} END)
    FROM chunks WHERE {AT_CHECKPOINT}
        AND owner = {owner})"""


def rekey_guard(row: str, pieces: str) -> str:
    """Trips d1saver_guard's CHECK unless the row `row` selects exists and its pieces match
    `pieces` (conditions on pieces_fingerprint)."""
    return f"""
INSERT INTO d1saver_guard (head_moved)
SELECT 1 WHERE NOT EXISTS (
    SELECT 1 FROM {row})
    OR {pieces}"""


# The checkpoint's key, the fingerprints of its checkpoint and metadata and of their pieces.
REKEY_GUARD_CHECKPOINT = q(rekey_guard(
    f"""checkpoints WHERE {AT_CHECKPOINT}
        AND {fingerprint("checkpoint")} IS :checkpoint_fp
        AND {fingerprint("metadata")} IS :metadata_fp""",
    f"""{pieces_fingerprint("''")} IS NOT :checkpoint_pieces_fp
    OR {pieces_fingerprint("':metadata'")} IS NOT :metadata_pieces_fp"""))
# The write's key, the fingerprint of its value and of its pieces. The owner is built with
# CAST: D1 binds numbers as REAL, so :idx alone would read '0.0'.
REKEY_GUARD_WRITE = q(rekey_guard(
    f"writes WHERE {WRITE_KEY} AND {fingerprint('value')} IS :value_fp",
    f"""{pieces_fingerprint(":task_id || '/' || CAST(:idx AS INTEGER)")} IS NOT :pieces_fp"""))
# The frozen row's key (thread_id .. idx), the fingerprint of its value and of its pieces
# (held by the holder, :owner their owner).
REKEY_GUARD_FROZEN = q(rekey_guard(
    f"delta_frozen WHERE {FROZEN_KEY} AND {fingerprint('value')} IS :value_fp",
    f"{pieces_fingerprint(':owner')} IS NOT :pieces_fp"))
REKEY_FROZEN = q(f"""
UPDATE delta_frozen SET value = :value, metadata = :metadata
WHERE {FROZEN_KEY}""")
REKEY_CHECKPOINT = q(f"""
UPDATE checkpoints SET checkpoint = :checkpoint, metadata = :metadata
WHERE {AT_CHECKPOINT}""")
# A plaintext pack (migration 7) sealed as one row per write: the pack goes, its writes come.
REKEY_DROP_WRITE = q(f"DELETE FROM writes\nWHERE {WRITE_KEY}")
REKEY_ADD_WRITE = q(insert_values("IGNORE", "writes", WRITE_COLUMNS))
REKEY_WRITE = q(f"UPDATE writes SET value = :value\nWHERE {WRITE_KEY}")

# Stored values per table and key: rows (tbl, head, row_count), head being the first 7
# characters of sealed texts (d1saver/storage/crypto.py: key_id_of_text) and NULL for plaintext.
# Staged rows are left out.
_KEY_OF_V = "CASE WHEN substr(v, 1, 2) = 'e:' THEN substr(v, 1, 7) END"


def _census(table: str) -> str:
    alias, head, holds_value = SEALED[table]
    return f"""FROM (SELECT {head} AS v
    FROM {table} AS {alias}
    WHERE {holds_value + " AND " if holds_value else ""}{not_staged(f"{alias}.thread_id")})
GROUP BY {_KEY_OF_V}"""


KEY_CENSUS = q(f"""
SELECT 'checkpoints' AS tbl, {_KEY_OF_V} AS head, COUNT(*) AS row_count
{_census("checkpoints")}
UNION ALL
SELECT 'writes', {_KEY_OF_V}, COUNT(*)
{_census("writes")}
UNION ALL
SELECT 'delta_frozen', {_KEY_OF_V}, COUNT(*)
{_census("delta_frozen")}""")
KEY_CENSUS_COLUMNS = ("tbl", "head", "row_count")
# Rows of staged threads (a copy or a move killed midway) that hold values: the census and
# rekey leave them out. They are never read: a rerun stages its rows afresh, from the source.
STAGED_VALUES_COLUMNS = ("row_count",)
STAGED_VALUES = q("""
SELECT (SELECT COUNT(*) FROM checkpoints WHERE thread_id >= char(31) || 'd1saver-'
            AND thread_id < char(31) || 'd1saver.')
     + (SELECT COUNT(*) FROM writes WHERE thread_id >= char(31) || 'd1saver-'
            AND thread_id < char(31) || 'd1saver.' AND value IS NOT NULL)
     + (SELECT COUNT(*) FROM delta_frozen WHERE thread_id >= char(31) || 'd1saver-'
            AND thread_id < char(31) || 'd1saver.' AND kind <> 'c' AND value IS NOT NULL)
       AS row_count""")

# Every statement of this module, named by its identifier, in definition order.
STATEMENTS: list[Query] = name_queries(globals())
