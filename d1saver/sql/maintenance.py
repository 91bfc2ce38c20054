"""Maintenance within one database: idempotency records, tags, the collection and the check of
content-addressed chunks, and deleting and copying threads (delete_thread, copy_thread).

Retention (prune, delete_for_runs, compaction) is in d1saver/sql/compaction.py; copies and
moves between databases in d1saver/sql/transfers.py.
"""

from __future__ import annotations

from d1saver.sql.parts import (CHUNK_ID, NAMES_A_CHUNK, NOW, TABLE_COLUMNS, THREAD_IDS, column_list,
                               manifest_pieces, node_children, packed_writes, write_entries,
                               write_owner)
from d1saver.sql.query import Query, name_queries, q

# --- idempotency records ------------------------------------------------------------------
#
# A request whose response was lost is sent again, identical, and runs on the state its first
# try left. Every write is idempotent, but an answer drawn from what a statement changed is
# not: untag's retry finds no tag, a retried compaction batch nothing left to delete. Such a
# batch records its answer under an op id the client drew before sending (INSERT OR IGNORE:
# a retry keeps the first try's) and reads it back. Records live a day on the database's
# clock, far past any retry (RetryPolicy.max_elapsed is 60 s by default); the batches that
# record also forget the expired ones.
FORGET_OLD_OPS = q(f"DELETE FROM d1saver_ops WHERE created_at < {NOW} - 86400")
OP_RESULT_COLUMNS = ("result",)
OP_RESULT = q("SELECT result FROM d1saver_ops WHERE op_id = :op_id")

# --- tags ---------------------------------------------------------------------------------

# :checkpoint_id NULL tags the newest. Returns a row only if the
# checkpoint exists; a name already used in the namespace moves to this checkpoint.
TAG = q("""
INSERT INTO tags (thread_id, checkpoint_ns, checkpoint_id, name, created_at)
SELECT thread_id, checkpoint_ns, checkpoint_id, :name, strftime('%Y-%m-%dT%H:%M:%SZ', 'now')
FROM checkpoints WHERE thread_id = :thread_id AND checkpoint_ns = :checkpoint_ns
    AND checkpoint_id = COALESCE(:checkpoint_id, (SELECT MAX(checkpoint_id) FROM checkpoints
                                      WHERE thread_id = :thread_id
                                          AND checkpoint_ns = :checkpoint_ns))
ON CONFLICT (thread_id, checkpoint_ns, name) DO UPDATE SET
    checkpoint_id = excluded.checkpoint_id, created_at = excluded.created_at
RETURNING checkpoint_id""")
_THE_TAG = "thread_id = :thread_id AND checkpoint_ns = :checkpoint_ns AND name = :name"
UNTAG = q(f"DELETE FROM tags WHERE {_THE_TAG}")
# Sent before UNTAG in its batch: records under :op_id whether the tag exists (1 or 0).
RECORD_UNTAG = q(f"""
INSERT OR IGNORE INTO d1saver_ops (op_id, result, created_at)
SELECT :op_id, COUNT(*), {NOW}
FROM tags WHERE {_THE_TAG}""")
LIST_TAGS_COLUMNS = ("name", "checkpoint_id")
LIST_TAGS = q("""
SELECT name, checkpoint_id FROM tags WHERE thread_id = :thread_id
    AND checkpoint_ns = :checkpoint_ns
ORDER BY checkpoint_id DESC, name""")

# --- content-addressed chunks: garbage collection and the check --------------------------


def reached(threads: str) -> str:
    """The CTE `reached(thread_id, id)`: every chunk the rows of the threads `threads` selects
    reach (checkpoints, writes, packed writes, frozen values; nodes opened level by level)."""
    def listed(row: str, pieces: str) -> str:
        return f"""SELECT {row}.thread_id, {CHUNK_ID}
    FROM {pieces} AS j
    WHERE {row}.thread_id IN ({threads}) AND {NAMES_A_CHUNK}"""

    return f"""reached(thread_id, id) AS (
    {listed("c", f"checkpoints AS c, {manifest_pieces('c.checkpoint')}")}
    UNION
    {listed("w", f"writes AS w, {manifest_pieces('w.value')}")}
    UNION
    {listed("w", f"writes AS w, {packed_writes('w.value')} AS p, "
            f"{manifest_pieces('p.value->>3')}")}
    UNION
    {listed("f", f"delta_frozen AS f, {manifest_pieces('f.value')}")}
    UNION
    SELECT r.thread_id, {CHUNK_ID}
    FROM reached AS r CROSS JOIN d1saver_chunks AS n ON n.thread_id = r.thread_id AND n.id = r.id
        AND n.level > 0, {node_children("n.data")} AS j
)"""


# Exact garbage collection of content-addressed chunks (migration 7), last in every batch that
# deletes rows of the threads in d1saver_scope: a chunk stays only if a remaining checkpoint or
# write of its thread reaches it. In the same batch as the deletions, so no chunk is ever
# referenced but missing, and none is left unreferenced. A put racing it either committed first
# (its chunks are reached) or finds a chunk gone and fails with chunk_missing, then sends its
# chunks again (d1saver/ops/operations.py).
GC_CHUNKS = q(f"""
WITH RECURSIVE {reached("SELECT thread_id FROM d1saver_scope")}
DELETE FROM d1saver_chunks WHERE thread_id IN (SELECT thread_id FROM d1saver_scope)
    AND (thread_id, id) NOT IN (SELECT thread_id, id FROM reached)""")

# The check (`d1saver check`, and the tests after every deleting operation): per thread
# (:thread_id, or every thread when NULL) that breaks the rule, the ids its rows reach that are not
# stored, and the chunks stored that no row reaches. No row: the chunk table is exact.
CHUNK_CHECK_COLUMNS = ("thread_id", "missing", "unreferenced")
CHUNK_CHECK = q(f"""
WITH RECURSIVE {reached('''SELECT thread_id FROM checkpoints WHERE :thread_id IS NULL
        OR thread_id = :thread_id
        UNION SELECT thread_id FROM writes WHERE :thread_id IS NULL OR thread_id = :thread_id''')},
scoped AS (
    SELECT thread_id FROM reached UNION
    SELECT thread_id FROM d1saver_chunks WHERE :thread_id IS NULL OR thread_id = :thread_id
),
counted AS (
    SELECT t.thread_id,
        (SELECT COUNT(*) FROM reached AS r WHERE r.thread_id = t.thread_id AND NOT EXISTS (
            SELECT 1 FROM d1saver_chunks AS k WHERE k.thread_id = r.thread_id
                AND k.id = r.id)) AS missing,
        (SELECT COUNT(*) FROM d1saver_chunks AS k WHERE k.thread_id = t.thread_id
            AND NOT EXISTS (SELECT 1 FROM reached AS r WHERE r.thread_id = k.thread_id
                AND r.id = k.id)) AS unreferenced
    FROM scoped AS t
)
SELECT thread_id, missing, unreferenced FROM counted
WHERE missing > 0 OR unreferenced > 0 ORDER BY thread_id""")

# --- deletes and copies -------------------------------------------------------------------

# :thread_ids: JSON array of thread ids (THREAD_IDS). Children first, checkpoints last; then a
# move of these threads in flight must not publish what it read before (migration 12).
_DELETE_THREAD_ROWS = [q(f"DELETE FROM {table} WHERE thread_id IN {THREAD_IDS}",
                         f"DELETE_THREADS_{name}")
                       for name, table in [("WRITES", "writes"),
                                           ("D1SAVER_CHUNKS", "d1saver_chunks"),
                                           ("CHUNKS", "chunks"), ("TAGS", "tags"),
                                           ("CHECKPOINTS", "checkpoints"),
                                           ("MOVES", "d1saver_moves")]]
# Rows staged to become these threads, or copied from them (a copy killed midway): their
# registration goes, and its delete trigger (d1saver_staged_removed) takes the rows
# (migration 12).
DELETE_THREADS_STAGED = q(f"""
DELETE FROM d1saver_staged
WHERE thread_id IN {THREAD_IDS}
   OR source_id IN {THREAD_IDS}
   OR staging_id IN {THREAD_IDS}""")
# Last: where copies of these threads are staged in other databases (columns
# STAGED_ELSEWHERE_COLUMNS), for delete_thread to remove them there too.
DELETE_THREADS_STAGED_ELSEWHERE = q(f"""
DELETE FROM d1saver_staged_elsewhere WHERE source_id IN {THREAD_IDS}
RETURNING database_id, staging_id""")
DELETE_THREADS = [*_DELETE_THREAD_ROWS, DELETE_THREADS_STAGED, DELETE_THREADS_STAGED_ELSEWHERE]
# delta_unwritten and delta_frozen rows go with their checkpoints (triggers)

# Writes are stored packed ("p:": one put_writes call's regular writes in one row, keyed by its
# first idx), so a copy cannot replace them by row key: for every task the source has writes
# of, at a checkpoint, the target's writes of that task become one row each but those whose
# idx the source has, which go (with their pieces), so that the source's rows then inserted
# give each (task, idx) once: the source's if it has it, else the target's (as a per-key copy
# of InMemorySaver's storage). In COPY_THREAD (:source, :target) and RENAME_THREAD.


def unpack_target_writes(source: str, target: str) -> list[str]:
    """The three statements above, for the threads of the parameters `source` and `target`:
    the target's pieces of writes the source has, its packs unpacked, its rows replaced."""
    has_task = f"""EXISTS (SELECT 1 FROM writes AS s WHERE s.thread_id = {source}
      AND s.checkpoint_ns = t.checkpoint_ns AND s.checkpoint_id = t.checkpoint_id
      AND s.task_id = t.task_id)"""

    def has_write(idx: str) -> str:
        return f"""EXISTS (SELECT 1 FROM writes AS s CROSS JOIN {write_entries("s", "s.idx")} AS q
      WHERE s.thread_id = {source} AND s.checkpoint_ns = t.checkpoint_ns
        AND s.checkpoint_id = t.checkpoint_id AND s.task_id = t.task_id
        AND q.value->>0 = {idx})"""

    return [f"""
DELETE FROM chunks WHERE thread_id = {target} AND EXISTS (
    SELECT 1 FROM writes AS t WHERE t.thread_id = {target}
        AND t.checkpoint_ns = chunks.checkpoint_ns
        AND t.checkpoint_id = chunks.checkpoint_id AND chunks.owner = {write_owner("t")}
        AND {has_write("t.idx")})""", f"""
INSERT OR REPLACE INTO writes ({column_list(TABLE_COLUMNS["writes"])})
SELECT t.thread_id, t.checkpoint_ns, t.checkpoint_id, t.task_id, t.task_path, e.value->>0,
       e.value->>1, COALESCE(e.value->>2, 'msgpack'), e.value->>3
FROM writes AS t CROSS JOIN json_each(substr(t.value, 3)) AS e
WHERE t.thread_id = {target} AND substr(t.value, 1, 2) = 'p:'
  AND {has_task}
  AND NOT {has_write("e.value->>0")}""", f"""
DELETE FROM writes AS t WHERE t.thread_id = {target}
  AND {has_task}
  AND (substr(t.value, 1, 2) = 'p:'
       OR {has_write("t.idx")})"""]


UNPACK_TARGET_PIECES, UNPACK_TARGET_PACKS, UNPACK_TARGET_DROP = map(
    q, unpack_target_writes(":source", ":target"))
UNPACK_TARGET_WRITES = [UNPACK_TARGET_PIECES, UNPACK_TARGET_PACKS, UNPACK_TARGET_DROP]


def copy_rows(table: str, verb: str = "REPLACE", order: str = "") -> str:
    """A thread's rows of `table` (:source) copied to another (:target)."""
    columns = TABLE_COLUMNS[table]
    return (f"INSERT OR {verb} INTO {table} ({column_list(columns)})\n"
            f"SELECT :target, {column_list(columns[1:])}\n"
            f"FROM {table} WHERE thread_id = :source{order}")


# :source thread, :target thread. Rows already on the target are replaced (writes per (task,
# idx): UNPACK_TARGET_WRITES). Chunks in level order, checkpoints in id order, parents before
# children (delta_frozen_bound, migration 9, looks a parent up). Frozen histories (their
# pieces came with the chunks) with the parent each is bound to (migration 9), without keys
# only: with keys a value is bound to its thread (d1saver/ops/reseal.py).
COPY_D1SAVER_CHUNKS = q(copy_rows("d1saver_chunks", "IGNORE", " ORDER BY level"))
COPY_CHECKPOINTS = q(copy_rows("checkpoints", order=" ORDER BY checkpoint_ns, checkpoint_id"))
COPY_WRITES, COPY_CHUNKS, COPY_TAGS, COPY_DELTA_UNWRITTEN, COPY_DELTA_FROZEN = (
    q(copy_rows(table)) for table in ("writes", "chunks", "tags", "delta_unwritten",
                                      "delta_frozen"))
CLEAR_SCOPE = q("DELETE FROM d1saver_scope")
SCOPE_TARGET = q("INSERT INTO d1saver_scope (thread_id) VALUES (:target)")
COPY_THREAD = [COPY_D1SAVER_CHUNKS, COPY_CHECKPOINTS, *UNPACK_TARGET_WRITES, COPY_WRITES,
               COPY_CHUNKS, COPY_TAGS, COPY_DELTA_UNWRITTEN, COPY_DELTA_FROZEN, CLEAR_SCOPE,
               SCOPE_TARGET, GC_CHUNKS, CLEAR_SCOPE]

# Every statement of this module, named by its identifier, in definition order.
STATEMENTS: list[Query] = name_queries(globals())
