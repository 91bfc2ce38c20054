"""Transfers and moves: a thread's rows read out of one database and written into another
(copy_thread between databases, `d1saver rebalance`), staged under a hidden id and renamed,
compared before the old copy goes; and the registrations that bind moves and staged rows to
the application's deletes (migration 12).

Most statements here come in one shape per table: each family is built from TRANSFER_TABLES
when the module loads, each statement named for its table (TRANSFER_PAGE_CHECKPOINTS, ...).
"""

from __future__ import annotations

from d1saver.sql.maintenance import CLEAR_SCOPE, GC_CHUNKS, unpack_target_writes
from d1saver.sql.parts import IN_SCOPE, NOW, column_list, insert_values
from d1saver.sql.query import Query, name_queries, q

# --- transfers: a thread's rows read out of one database and written into another ----------
#
# Each table is read in keyset pages, in primary-key order, of at most :limit rows and about
# :budget bytes (a page always holds at least one row, so a 2 MB value still moves); rows are
# written back one statement each, every value a bound parameter. Columns: the table's columns
# but thread_id (keys first), then `available` (rows in the page before the byte cut: fewer
# than :limit means the table is done).

# table: (key columns after thread_id, in primary-key order; the other columns)
TRANSFER_TABLES: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    # First, in level order: rows and nodes are stored only over stored chunks (migration 7).
    "d1saver_chunks": (("level", "id"), ("data",)),
    "checkpoints": (("checkpoint_ns", "checkpoint_id"),
                    ("parent_checkpoint_id", "type", "checkpoint", "metadata", "channels",
                     "run_id", "ts")),
    "writes": (("checkpoint_ns", "checkpoint_id", "task_id", "idx"),
               ("task_path", "channel", "type", "value")),
    "chunks": (("checkpoint_ns", "checkpoint_id", "owner", "seq"), ("data",)),
    "tags": (("checkpoint_ns", "name"), ("checkpoint_id", "created_at")),
    # After checkpoints: inserting a checkpoint clears its row here (delta_unwritten_on_put).
    "delta_unwritten": (("checkpoint_ns", "checkpoint_id"), ("channels",)),
    "delta_frozen": (("checkpoint_ns", "checkpoint_id", "channel", "kind", "depth", "task_id",
                      "idx"),
                     ("src_checkpoint_id", "task_path", "type", "value", "metadata", "channels",
                      "parent")),
}


def transfer_page(table: str) -> str:
    """One page of a thread's rows of `table`. Parameters: :thread_id, the key of the previous
    page's last row (:after_<key column>, all NULL on the first page), :limit, :budget."""
    keys, rest = TRANSFER_TABLES[table]
    columns, order = column_list(keys + rest), column_list(keys)
    size = " + ".join(f"COALESCE(LENGTH({c}), 0)" for c in rest)
    return f"""
SELECT {columns}, available FROM (
    SELECT {columns}, SUM({size}) OVER (ORDER BY {order} ROWS UNBOUNDED PRECEDING)
               - ({size}) AS bytes_before,
           COUNT(*) OVER () AS available
    FROM (SELECT {columns} FROM {table}
          WHERE thread_id = :thread_id AND (:after_{keys[0]} IS NULL
              OR ({order}) > ({column_list(keys, ":after_")}))
          ORDER BY {order} LIMIT :limit)
)
WHERE bytes_before < :budget
ORDER BY {order}"""


TRANSFER_PAGE = {table: q(transfer_page(table), f"TRANSFER_PAGE_{table.upper()}")
                 for table in TRANSFER_TABLES}
TRANSFER_PAGE_COLUMNS = {table: (*keys, *rest, "available")
                         for table, (keys, rest) in TRANSFER_TABLES.items()}
# Params: thread_id, then the row's columns in TRANSFER_TABLES order. A row already there is
# replaced: the copy wins, as copy_thread within one database does.
TRANSFER_INSERT = {table: q(insert_values("REPLACE", table, ("thread_id", *keys, *rest)),
                            f"TRANSFER_INSERT_{table.upper()}")
                   for table, (keys, rest) in TRANSFER_TABLES.items()}

# Staged rows (:staged) become the thread (:thread_id) in one batch. An
# UPDATE fires no insert trigger, so the batch first does what the triggers of migrations 2 and
# 4 do for an insert: a checkpoint or write that replaces one of the thread's drops the old
# one's pieces, and a checkpoint its old delta_unwritten row and the frozen records it no
# longer matches (migration 9); the target's writes of a task the staged rows have writes of
# are taken per (task, idx) (maintenance.unpack_target_writes).
RENAME_DROP_CHECKPOINT_PIECES = q("""
DELETE FROM chunks WHERE thread_id = :thread_id AND owner IN ('', ':metadata') AND EXISTS (
    SELECT 1 FROM checkpoints AS s WHERE s.thread_id = :staged
        AND s.checkpoint_ns = chunks.checkpoint_ns AND s.checkpoint_id = chunks.checkpoint_id)""")
RENAME_DROP_WRITE_PIECES = q("""
DELETE FROM chunks WHERE thread_id = :thread_id AND EXISTS (
    SELECT 1 FROM writes AS s WHERE s.thread_id = :staged
        AND s.checkpoint_ns = chunks.checkpoint_ns
        AND s.checkpoint_id = chunks.checkpoint_id
            AND chunks.owner = s.task_id || '/' || s.idx)""")
RENAME_DROP_UNWRITTEN = q("""
DELETE FROM delta_unwritten WHERE thread_id = :thread_id AND EXISTS (
    SELECT 1 FROM checkpoints AS s WHERE s.thread_id = :staged
        AND s.checkpoint_ns = delta_unwritten.checkpoint_ns
        AND s.checkpoint_id = delta_unwritten.checkpoint_id)""")
RENAME_DROP_FROZEN = q("""
DELETE FROM delta_frozen WHERE thread_id = :thread_id AND EXISTS (
    SELECT 1 FROM checkpoints AS s WHERE s.thread_id = :staged
        AND s.checkpoint_ns = delta_frozen.checkpoint_ns
        AND s.checkpoint_id = delta_frozen.checkpoint_id
        AND s.parent_checkpoint_id IS NOT delta_frozen.parent)""")
_RENAME_UNPACK = [q(text, f"RENAME_UNPACK_{part}") for text, part in zip(
    unpack_target_writes(":staged", ":thread_id"), ("PIECES", "PACKS", "DROP"))]
_RENAME_ROWS = [q(f"UPDATE OR REPLACE {table} SET thread_id = :thread_id WHERE thread_id = :staged",
                  f"RENAME_{table.upper()}")
                for table in TRANSFER_TABLES]
RENAME_THREAD = [RENAME_DROP_CHECKPOINT_PIECES, RENAME_DROP_WRITE_PIECES, RENAME_DROP_UNWRITTEN,
                 RENAME_DROP_FROZEN, *_RENAME_UNPACK, *_RENAME_ROWS]
# After rows written into thread :thread_id (a copy between databases, RENAME_THREAD
# included): those they replaced may have left chunks no row reaches.
SCOPE_THREAD = q("INSERT INTO d1saver_scope (thread_id) VALUES (:thread_id)")
COLLECT_THREAD = [CLEAR_SCOPE, SCOPE_THREAD, GC_CHUNKS, CLEAR_SCOPE]

# Deleting a moved thread from its old database, only if that database still holds exactly
# the rows that were copied. Row counts alone miss a same-key replacement (a special write
# replaced, a tag moved, a checkpoint rewritten by a retried put), and SQLite on D1 has no hash
# function, so the rows as read are written back into the old database under a scratch thread
# id (_routing.LEAVING_PREFIX + thread_id; in several batches when large) and one last batch
# compares them there with the thread, row by row and column by column, and deletes.
#
# :thread_id, its :scratch_id, and per table the row count read (:count_<table>).
# The scope gets the thread only if both hold that many rows in every table.
LEAVE_SCOPE = q("""
INSERT INTO d1saver_scope (thread_id) SELECT :thread_id WHERE """ + "\n    AND ".join(
    f"(SELECT COUNT(*) FROM {table} WHERE thread_id = :thread_id) = :count_{table}\n"
    f"    AND (SELECT COUNT(*) FROM {table} WHERE thread_id = :scratch_id) = :count_{table}"
    for table in TRANSFER_TABLES))


def leave_unless_same(table: str) -> str:
    """Empties the scope if the rows of `table` of :thread_id and :scratch_id differ at all."""
    keys, rest = TRANSFER_TABLES[table]
    same = " AND ".join(f"b.{c} IS a.{c}" for c in keys + rest)
    return f"""
DELETE FROM d1saver_scope WHERE EXISTS (SELECT 1 FROM {table} AS a
    WHERE a.thread_id = :thread_id AND NOT EXISTS (SELECT 1 FROM {table} AS b
    WHERE b.thread_id = :scratch_id AND {same}))
    OR EXISTS (SELECT 1 FROM {table} AS a WHERE a.thread_id = :scratch_id
        AND NOT EXISTS (SELECT 1 FROM {table} AS b WHERE b.thread_id = :thread_id
        AND {same}))"""


LEAVE_UNLESS_SAME = {table: q(leave_unless_same(table), f"LEAVE_UNLESS_SAME_{table.upper()}")
                     for table in TRANSFER_TABLES}
LEAVING_COLUMNS = ("moved",)
LEAVING = q("SELECT COUNT(*) AS moved FROM d1saver_scope")
# No parameters: the thread in the scope goes (its checkpoints last). Then DROP_THREAD: the
# thread's rows in every transfer table (the scratch copy, before and after).
LEAVE = [q(f"DELETE FROM {table} WHERE {IN_SCOPE}", f"LEAVE_{table.upper()}")
         for table in reversed(TRANSFER_TABLES)]
DROP_THREAD = [q(f"DELETE FROM {table} WHERE thread_id = :thread_id",
                 f"DROP_THREAD_{table.upper()}")
               for table in reversed(TRANSFER_TABLES)]

# Thread ids in [:low, :high) in any table (staged rows left by a killed copy, by their prefix).
# D1 refuses a compound SELECT of more than 5 terms (probed on Wrangler's engine): nested.
def _in_range(table: str) -> str:
    return f"SELECT thread_id FROM {table} WHERE thread_id >= :low AND thread_id < :high"


_THREADS_IN_RANGE = f"""
{_in_range("checkpoints")}
UNION {_in_range("writes")}
UNION {_in_range("chunks")}
UNION {_in_range("tags")}
UNION SELECT thread_id FROM (
    {_in_range("d1saver_chunks")}
    UNION {_in_range("delta_unwritten")}
    UNION {_in_range("delta_frozen")})"""
THREADS_IN_RANGE = q(f"""{_THREADS_IN_RANGE}
ORDER BY thread_id""")

# --- moves and staged rows bound to the application's deletes (migration 12) --------------
#
# :thread_id the thread, :move_id the move's id. A move registers the thread at its new home
# before it reads the old home; its publishing batch starts with CHECK_MOVE (fails
# "move_voided" if a delete or a prune dropped the registration since) and ends with END_MOVE.
_THE_MOVE = "thread_id = :thread_id AND move_id = :move_id"
BEGIN_MOVE = q(f"""
INSERT OR REPLACE INTO d1saver_moves (thread_id, move_id, created_at)
VALUES (:thread_id, :move_id, {NOW})""")
CHECK_MOVE = q(f"""
INSERT INTO d1saver_move_guards (move_voided)
SELECT 1 WHERE NOT EXISTS (SELECT 1 FROM d1saver_moves WHERE {_THE_MOVE})""")
END_MOVE = q(f"DELETE FROM d1saver_moves WHERE {_THE_MOVE}")
CLEAR_MOVES = q("DELETE FROM d1saver_moves")
MOVES_REGISTERED_COLUMNS = ("moves",)
MOVES_REGISTERED = q("SELECT COUNT(*) AS moves FROM d1saver_moves")

# Staged rows: :staging_id, the thread they become (:thread_id), the thread they come from
# (:source_id), :seconds until a cleanup may remove them. Every staging batch (re)registers
# them, which pushes the expiry on; the renaming batch checks (STAGING_HELD) and drops the
# registration.
_EXPIRES = f"{NOW} + CAST(:seconds AS INTEGER)"
STAGE = q(f"""
INSERT INTO d1saver_staged (staging_id, thread_id, source_id, created_at, expires_at)
VALUES (:staging_id, :thread_id, :source_id, {NOW}, {_EXPIRES})
ON CONFLICT (staging_id) DO UPDATE SET thread_id = excluded.thread_id,
    source_id = excluded.source_id, expires_at = excluded.expires_at""")
STAGING_HELD = q("""
INSERT INTO d1saver_move_guards (staging_lost)
SELECT 1 WHERE NOT EXISTS (SELECT 1 FROM d1saver_staged WHERE staging_id = :staging_id)""")
UNSTAGE = q("DELETE FROM d1saver_staged WHERE staging_id = :staging_id")
# In the source's database, while a copy of it is staged in another (:source_id, that
# database's id :database_id, :staging_id, :seconds): DELETE_THREADS' last statement returns
# and drops these, and delete_thread removes the staged rows there too.
STAGE_ELSEWHERE = q(f"""
INSERT OR REPLACE INTO d1saver_staged_elsewhere (source_id, database_id, staging_id, expires_at)
VALUES (:source_id, :database_id, :staging_id, {_EXPIRES})""")
UNSTAGE_ELSEWHERE = q("""
DELETE FROM d1saver_staged_elsewhere
WHERE source_id = :source_id AND database_id = :database_id AND staging_id = :staging_id""")
STAGED_ELSEWHERE_COLUMNS = ("database_id", "staging_id")
# Every staged thread id in [:low, :high) with its registration: target and source (NULL if
# unregistered: staged before migration 12), expired (1 if unregistered or past its expiry:
# then no copy is writing it any more, and any cleanup may remove it).
LEFTOVERS_COLUMNS = ("thread_id", "target", "source", "expired")
LEFTOVERS = q(f"""
SELECT t.thread_id, s.thread_id AS target, s.source_id AS source,
    CASE WHEN s.staging_id IS NULL
        OR s.expires_at < {NOW} THEN 1 ELSE 0 END AS expired
FROM (SELECT thread_id FROM ({_THREADS_IN_RANGE}
)) AS t
LEFT JOIN d1saver_staged AS s ON s.staging_id = t.thread_id
ORDER BY t.thread_id""")

# Every statement of this module (and the statements of d1saver/sql/maintenance.py its
# batches send: CLEAR_SCOPE, GC_CHUNKS), in definition order.
STATEMENTS: list[Query] = name_queries(globals())
