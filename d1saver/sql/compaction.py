"""Compaction's SQL: the retention batch (prune, delete_for_runs and the compaction job send
it), the thread listing a compaction pass pages through, the lease that keeps two runs from
overlapping, the gateway Worker's run records and cursor, and the storage figures the
maintenance commands show.

The retention statements share named parts: `kept` (what d1saver_keep holds), `not_in_flight`
(a row whose checkpoint is not a put still in flight), and the DeltaChannel walk's parts of
d1saver/sql/parts.py.
"""

from __future__ import annotations

from d1saver.sql.maintenance import CLEAR_SCOPE, FORGET_OLD_OPS, GC_CHUNKS
from d1saver.sql.parts import IN_SCOPE, NOW, THREAD_IDS, sought, write_entries
from d1saver.sql.query import Query, name_queries, q

# --- retention: shared by prune(), delete_for_runs() and the compaction job --------------
#
# One batch: fill d1saver_scope with the threads concerned and d1saver_keep with what must
# survive in them, relink survivors whose parent goes, delete the rest, empty the scratch
# tables. D1 runs a batch as one transaction, so nobody ever sees a half-pruned thread.

CLEAR_KEEP = q("DELETE FROM d1saver_keep")
CLEAR_RELINK = q("DELETE FROM d1saver_relink")
CLEAR_SCRATCH = [CLEAR_SCOPE, CLEAR_KEEP, CLEAR_RELINK]

SCOPE_THREADS = q("""
INSERT OR IGNORE INTO d1saver_scope (thread_id) SELECT CAST(unhex(value) AS TEXT)
    FROM json_each(:thread_ids)""")
SCOPE_RUNS = q("""
INSERT OR IGNORE INTO d1saver_scope (thread_id)
SELECT DISTINCT thread_id FROM checkpoints WHERE run_id IN (SELECT CAST(unhex(value) AS TEXT)
    FROM json_each(:run_ids))""")


# A subgraph's namespace is its parent's, then '|' unless the parent is the root, then
# '<node>:<task_id>' of the parent's task that called it; a task that calls a subgraph again
# adds '|<n>'. `peel` drops those numeric segments; `head` is s up to and including its last
# '|' (rtrim drops from the right every character but '|'), '' if none. `owners` maps every
# subgraph namespace in scope whose parent namespace exists to that parent and the task.
# These CTEs are PLAN_KEEP's (they read its `ranked`).
#
# :keep = N. PLAN_KEEP keeps, in the threads in scope:
# - in every namespace that is not a subgraph's (the root's), the N newest checkpoints;
# - every tagged checkpoint;
# - the max(N, 1) newest checkpoints of every subgraph namespace that a kept checkpoint of its
#   parent reaches: the checkpoint holds a write of the task that opened it (a finished or
#   interrupted subgraph, which get_state(subgraphs=True) shows and a resume continues), or
#   is its parent's newest and the subgraph was written after it (one still running).
# A subgraph namespace no kept checkpoint reaches goes with the checkpoints that reached it.
# The ancestors a kept checkpoint's DeltaChannels replay from are not kept: FREEZE records its
# history first. CROSS JOIN holds the join order: left to choose, SQLite scanned a thread's
# checkpoints for every kept row. N = 0 keeps only tagged checkpoints (and what they need).
PLAN_KEEP = q("""
INSERT OR IGNORE INTO d1saver_keep (thread_id, checkpoint_ns, checkpoint_id)
WITH RECURSIVE
ranked AS (
    SELECT c.thread_id, c.checkpoint_ns, c.checkpoint_id, c.parent_checkpoint_id,
           ROW_NUMBER() OVER (PARTITION BY c.thread_id, c.checkpoint_ns
                              ORDER BY c.checkpoint_id DESC) AS rn
    FROM checkpoints AS c
    WHERE c.thread_id IN (SELECT thread_id FROM d1saver_scope)
),
spaces AS (
    SELECT thread_id, checkpoint_ns, checkpoint_id AS newest FROM ranked WHERE rn = 1
),
peel(thread_id, checkpoint_ns, s, head) AS (
    SELECT thread_id, checkpoint_ns, checkpoint_ns,
           rtrim(checkpoint_ns, replace(checkpoint_ns, '|', ''))
    FROM spaces
    UNION ALL
    SELECT thread_id, checkpoint_ns, substr(head, 1, length(head) - 1),
           rtrim(substr(head, 1, length(head) - 1),
                 replace(substr(head, 1, length(head) - 1), '|', ''))
    FROM peel
    WHERE head <> '' AND length(s) > length(head)
      AND rtrim(substr(s, length(head) + 1), '0123456789') = ''
),
owners AS (
    SELECT f.thread_id, f.checkpoint_ns, p.checkpoint_ns AS parent_ns,
           p.newest AS parent_newest, c.newest AS newest,
           substr(f.s, length(f.head) + instr(substr(f.s, length(f.head) + 1), ':') + 1)
               AS task_id
    FROM peel AS f
    JOIN spaces AS p ON p.thread_id = f.thread_id
        AND p.checkpoint_ns = substr(f.head, 1, max(length(f.head) - 1, 0))
    JOIN spaces AS c ON c.thread_id = f.thread_id AND c.checkpoint_ns = f.checkpoint_ns
    WHERE f.checkpoint_ns <> '' AND instr(substr(f.s, length(f.head) + 1), ':') > 1
),
keep(thread_id, checkpoint_ns, checkpoint_id) AS (
    SELECT r.thread_id, r.checkpoint_ns, r.checkpoint_id
    FROM ranked AS r
    WHERE (r.rn <= :keep AND NOT EXISTS (
            SELECT 1 FROM owners AS o WHERE o.thread_id = r.thread_id
                AND o.checkpoint_ns = r.checkpoint_ns))
       OR EXISTS (
            SELECT 1 FROM tags AS g WHERE g.thread_id = r.thread_id
                AND g.checkpoint_ns = r.checkpoint_ns AND g.checkpoint_id = r.checkpoint_id)
    UNION
    SELECT r.thread_id, r.checkpoint_ns, r.checkpoint_id
    FROM keep AS k
    CROSS JOIN owners AS o ON o.thread_id = k.thread_id AND o.parent_ns = k.checkpoint_ns
    CROSS JOIN ranked AS r ON r.thread_id = o.thread_id AND r.checkpoint_ns = o.checkpoint_ns
        AND r.rn <= max(:keep, 1)
    WHERE EXISTS (
            SELECT 1 FROM writes AS w WHERE w.thread_id = k.thread_id
                AND w.checkpoint_ns = k.checkpoint_ns AND w.checkpoint_id = k.checkpoint_id
                AND w.task_id = o.task_id)
       OR (k.checkpoint_id = o.parent_newest AND o.newest > k.checkpoint_id)
)
SELECT thread_id, checkpoint_ns, checkpoint_id FROM keep""")

# :run_ids: JSON array of run ids. Keeps every checkpoint in scope that no listed run made.
PLAN_KEEP_OTHER_RUNS = q("""
INSERT OR IGNORE INTO d1saver_keep (thread_id, checkpoint_ns, checkpoint_id)
SELECT thread_id, checkpoint_ns, checkpoint_id FROM checkpoints
WHERE thread_id IN (SELECT thread_id FROM d1saver_scope)
  AND (run_id IS NULL OR run_id NOT IN (SELECT CAST(unhex(value) AS TEXT)
      FROM json_each(:run_ids)))""")


def kept(row: str, checkpoint_id: str, alias: str = "k") -> str:
    """Whether d1saver_keep holds checkpoint `checkpoint_id` of `row`'s namespace."""
    return f"""EXISTS (SELECT 1 FROM d1saver_keep AS {alias}
        WHERE {alias}.thread_id = {row}.thread_id AND {alias}.checkpoint_ns = {row}.checkpoint_ns
        AND {alias}.checkpoint_id = {checkpoint_id})"""


def continues_at(c: str, channel: str) -> str:
    """The depth of checkpoint `c`'s 'c' row for `channel` (NULL: none, or no record)."""
    return f"""(SELECT MAX(f.depth) FROM delta_frozen AS f WHERE f.thread_id = {c}.thread_id
    AND f.checkpoint_ns = {c}.checkpoint_ns AND f.checkpoint_id = {c}.checkpoint_id
    AND f.channel = {channel} AND f.kind = 'c')"""


def ends(c: str, channel: str) -> str:
    """Whether checkpoint `c` holds a record of `channel` that ends its history (no 'c' row)."""
    return f"""(EXISTS (SELECT 1 FROM delta_frozen AS f WHERE f.thread_id = {c}.thread_id
    AND f.checkpoint_ns = {c}.checkpoint_ns AND f.checkpoint_id = {c}.checkpoint_id
    AND f.channel = {channel}) AND {continues_at(c, channel)} IS NULL)"""


# DeltaChannel histories frozen before their ancestors go (docs/STORAGE_DESIGN.md). A kept
# checkpoint whose parent is not kept gets, per channel it replays and holds no
# ending record of, what get_delta_channel_history's walk finds between it and the nearest
# kept ancestor: each ancestor's writes of the channel ('w'), and, where the walk ends before
# a kept one, the seed's whole checkpoint row ('s') or the copy of the record it ended at (its
# depths plus where it was met). A walk that reaches a kept ancestor leaves a 'c' row instead:
# the record holds only the newer part of the history, and readers go on from the holder's
# parent, which PLAN_RELINK makes that ancestor; walks through kept checkpoints change nothing,
# so every deleted write is copied once, not once per kept descendant. A walk at a parent id
# with no checkpoint row ends there, as the readers' (and InMemorySaver's) do: writes stored
# under it are not history. A holder whose record continues ('c') and whose parent goes again
# walks on from the 'c' row's depth (continues_at; a record that ends: ends). Values are
# copied verbatim with the identity of the rows they were stored at: nothing is decoded, so
# it works for any state and with keys. (The saver cannot compute the channel's value: its
# reducer is graph code. So it records the history, not a snapshot.) A walk row is (origin,
# channel, depth, cur: the checkpoint at that depth, steps taken, bound: the namespace's
# checkpoints, more steps than a walk without a loop can take, so a corrupt parent loop ends).
# A write row is read as [idx, channel, type, value] entries (parts.write_entries: a "p:" row
# packs one put_writes call's writes, type null: "msgpack").
FREEZE = q(f"""
INSERT OR IGNORE INTO delta_frozen (thread_id, checkpoint_ns, checkpoint_id, channel, kind,
    depth, task_id, idx, src_checkpoint_id, task_path, type, value, metadata, channels)
WITH RECURSIVE
walk(thread_id, checkpoint_ns, origin, channel, depth, cur, steps, bound) AS (
    SELECT c.thread_id, c.checkpoint_ns, c.checkpoint_id, s.value,
           COALESCE({continues_at("c", "s.value")}, 1), c.parent_checkpoint_id, 1,
           (SELECT COUNT(*) FROM checkpoints AS n WHERE n.thread_id = c.thread_id
                AND n.checkpoint_ns = c.checkpoint_ns)
    FROM d1saver_keep AS k CROSS JOIN checkpoints AS c ON c.thread_id = k.thread_id
        AND c.checkpoint_ns = k.checkpoint_ns AND c.checkpoint_id = k.checkpoint_id
    CROSS JOIN json_each({sought("c")}) AS s
    WHERE c.parent_checkpoint_id IS NOT NULL
      AND NOT {kept("c", "c.parent_checkpoint_id")}
      AND NOT {ends("c", "s.value")}
    UNION ALL
    SELECT w.thread_id, w.checkpoint_ns, w.origin, w.channel,
           w.depth + COALESCE({continues_at("p", "w.channel")}, 1),
           p.parent_checkpoint_id, w.steps + 1, w.bound
    FROM walk AS w CROSS JOIN checkpoints AS p ON p.thread_id = w.thread_id
        AND p.checkpoint_ns = w.checkpoint_ns AND p.checkpoint_id = w.cur
    WHERE p.parent_checkpoint_id IS NOT NULL AND w.steps < w.bound
      AND NOT {kept("p", "p.checkpoint_id")}
      AND w.channel NOT IN (SELECT value FROM json_each(p.channels))
      AND NOT {ends("p", "w.channel")}
)
SELECT w.thread_id, w.checkpoint_ns, w.origin, w.channel, 'w', w.depth, x.task_id,
       e.value->>0, w.cur, x.task_path, COALESCE(e.value->>2, 'msgpack'), e.value->>3, NULL, NULL
FROM walk AS w CROSS JOIN writes AS x ON x.thread_id = w.thread_id
    AND x.checkpoint_ns = w.checkpoint_ns AND x.checkpoint_id = w.cur
CROSS JOIN {write_entries("x", "x.idx, x.channel, x.type, x.value")} AS e
WHERE e.value->>1 = w.channel AND NOT {kept("w", "w.cur")}
  AND EXISTS (SELECT 1 FROM checkpoints AS n WHERE n.thread_id = w.thread_id
              AND n.checkpoint_ns = w.checkpoint_ns AND n.checkpoint_id = w.cur)
UNION ALL
SELECT w.thread_id, w.checkpoint_ns, w.origin, w.channel, 's', w.depth, '', 0, w.cur, '',
       p.type, p.checkpoint, p.metadata, p.channels
FROM walk AS w CROSS JOIN checkpoints AS p ON p.thread_id = w.thread_id
    AND p.checkpoint_ns = w.checkpoint_ns AND p.checkpoint_id = w.cur
WHERE NOT {kept("w", "w.cur")}
  AND w.channel IN (SELECT value FROM json_each(p.channels))
UNION ALL
SELECT w.thread_id, w.checkpoint_ns, w.origin, w.channel, f.kind, w.depth + f.depth, f.task_id,
       f.idx, f.src_checkpoint_id, f.task_path, f.type, f.value, f.metadata, f.channels
FROM walk AS w CROSS JOIN delta_frozen AS f ON f.thread_id = w.thread_id
    AND f.checkpoint_ns = w.checkpoint_ns AND f.checkpoint_id = w.cur AND f.channel = w.channel
WHERE NOT {kept("w", "w.cur")} AND f.kind <> 'c'
UNION ALL
SELECT w.thread_id, w.checkpoint_ns, w.origin, w.channel, 'c', w.depth, '', 0, w.cur, '', NULL,
       NULL, NULL, NULL
FROM walk AS w WHERE {kept("w", "w.cur")}""")

# After FREEZE: a 'c' row that a record's newer rows now lie beyond (its holder's walk went on
# from there) goes.
FREEZE_DONE = q(f"""
DELETE FROM delta_frozen AS c WHERE c.kind = 'c' AND c.{IN_SCOPE} AND EXISTS (
    SELECT 1 FROM delta_frozen AS f WHERE f.thread_id = c.thread_id
        AND f.checkpoint_ns = c.checkpoint_ns AND f.checkpoint_id = c.checkpoint_id
        AND f.channel = c.channel AND f.depth >= c.depth AND NOT (f.kind = 'c'
            AND f.depth = c.depth))""")

# The pieces of frozen values stored over several rows ("c:<n>": values over D1's row limit),
# copied to their holder as owner 'f/<src_checkpoint_id>/<owner>': from the row they were
# stored with, or from the holder of the record they were copied from. For the threads in
# scope; a piece already there is left alone.
FREEZE_PIECES = q(f"""
INSERT OR IGNORE INTO chunks (thread_id, checkpoint_ns, checkpoint_id, owner, seq, data)
SELECT f.thread_id, f.checkpoint_ns, f.checkpoint_id,
       'f/' || f.src_checkpoint_id || '/' || k.owner, k.seq, k.data
FROM delta_frozen AS f CROSS JOIN chunks AS k ON k.thread_id = f.thread_id
    AND k.checkpoint_ns = f.checkpoint_ns AND k.checkpoint_id = f.src_checkpoint_id
    AND (k.owner = CASE f.kind WHEN 'w' THEN f.task_id || '/' || f.idx END OR (f.kind = 's'
        AND k.owner IN ('', ':metadata')))
WHERE f.{IN_SCOPE}
UNION ALL
SELECT f.thread_id, f.checkpoint_ns, f.checkpoint_id, k.owner, k.seq, k.data
FROM delta_frozen AS f CROSS JOIN chunks AS k ON k.thread_id = f.thread_id
    AND k.checkpoint_ns = f.checkpoint_ns AND k.checkpoint_id <> f.checkpoint_id
    AND (k.owner = 'f/' || f.src_checkpoint_id || '/' || CASE f.kind WHEN 'w'
        THEN f.task_id || '/' || f.idx END
         OR (f.kind = 's' AND k.owner IN ('f/' || f.src_checkpoint_id || '/',
                                          'f/' || f.src_checkpoint_id || '/:metadata')))
WHERE f.{IN_SCOPE}""")


# For every kept checkpoint whose parent is not kept, walk up to the nearest kept ancestor
# (or none) and record it, so that no parent_config ever names a deleted checkpoint. A walk
# row is (origin, checkpoint reached, whether it is kept); UNION ends a parent loop. CROSS JOIN
# starts from the kept rows: left to choose, SQLite scanned every checkpoint of the database.
PLAN_RELINK = q(f"""
INSERT OR REPLACE INTO d1saver_relink (thread_id, checkpoint_ns, checkpoint_id, new_parent)
WITH RECURSIVE
walk(thread_id, checkpoint_ns, origin, cur, kept) AS (
    SELECT c.thread_id, c.checkpoint_ns, c.checkpoint_id, c.parent_checkpoint_id, 0
    FROM d1saver_keep AS k CROSS JOIN checkpoints AS c ON c.thread_id = k.thread_id
        AND c.checkpoint_ns = k.checkpoint_ns AND c.checkpoint_id = k.checkpoint_id
    WHERE c.parent_checkpoint_id IS NOT NULL
      AND NOT {kept("c", "c.parent_checkpoint_id", alias="k2")}
    UNION
    SELECT w.thread_id, w.checkpoint_ns, w.origin, p.parent_checkpoint_id,
           {kept("w", "p.parent_checkpoint_id")}
    FROM walk AS w JOIN checkpoints AS p ON p.thread_id = w.thread_id
        AND p.checkpoint_ns = w.checkpoint_ns AND p.checkpoint_id = w.cur
    WHERE w.kept = 0
)
SELECT thread_id, checkpoint_ns, origin AS checkpoint_id,
       MAX(CASE WHEN kept THEN cur END) AS new_parent
FROM walk GROUP BY thread_id, checkpoint_ns, origin""")


def relinked(table: str, column: str) -> str:
    """`column` of `table`'s rows that d1saver_relink names set to their new parent."""
    return f"""
UPDATE {table} SET {column} = r.new_parent
FROM d1saver_relink AS r
WHERE {table}.thread_id = r.thread_id AND {table}.checkpoint_ns = r.checkpoint_ns
  AND {table}.checkpoint_id = r.checkpoint_id"""


APPLY_RELINK = q(relinked("checkpoints", "parent_checkpoint_id"))
# After APPLY_RELINK: the frozen records of a relinked holder (FREEZE has just made them whole
# for its new parent) are bound to that parent (migration 9).
REBIND_FROZEN = q(relinked("delta_frozen", "parent"))


# A write (or a chunk) may be stored before its checkpoint: with durability="async" LangGraph
# sends a checkpoint's put and runs the step's tasks at once, and their put_writes can land
# while the put is in flight (with a DeltaChannel they are the next step's messages). So a
# write or chunk is only ever deleted when its checkpoint id is at most its namespace's
# newest stored one: its checkpoint is stored (and goes only if not kept), or it is a true
# orphan, whose checkpoint will never be stored, because LangGraph sends the puts of one
# namespace one after another (each waits for the previous) and checkpoint ids are
# time-ordered (uuid6; LangGraph's "latest" relies on that too). Checkpoint ids, not a wall-
# clock horizon: no clock to trust, no column to add, and no put can outlast it. Per namespace,
# not per thread: parallel subgraphs' puts are not ordered among themselves. A namespace with
# no stored checkpoint keeps its writes (its first put may be in flight).


def not_in_flight(row: str) -> str:
    """Whether `row`'s checkpoint id is at most its namespace's newest stored one."""
    return f"""{row}.checkpoint_id <= (
    SELECT MAX(n.checkpoint_id) FROM checkpoints AS n
    WHERE n.thread_id = {row}.thread_id AND n.checkpoint_ns = {row}.checkpoint_ns)"""


# Deletes, in scope, what d1saver_keep does not hold, but for writes and chunks of checkpoints
# not stored yet. Children before checkpoints (the newest of a namespace is read before any
# checkpoint goes).
DELETE_UNKEPT = [
    q(f"""DELETE FROM {table} WHERE {IN_SCOPE}
    AND NOT {kept(table, f"{table}.checkpoint_id")}"""
      + (f"\n    AND {not_in_flight(table)}" if table in ("writes", "chunks") else ""),
      f"DELETE_UNKEPT_{table.upper()}")
    for table in ("writes", "chunks", "tags", "checkpoints")]

# What the plan deletes, per thread in scope (dry runs and reports). Rows: thread_id,
# checkpoints before, checkpoints to delete, writes to delete, stored bytes to free.
SUMMARY_COLUMNS = ("thread_id", "checkpoints_total", "checkpoints", "writes", "bytes")
# The writes a row of `w` holds (a "p:" row packs several).
WRITES_HELD = """COALESCE(SUM(CASE WHEN substr(w.value, 1, 2) = 'p:'
      THEN json_array_length(substr(w.value, 3)) ELSE 1 END), 0)"""


def _goes(row: str) -> str:
    """Whether `row` (c: a checkpoint, w: a write, pt: a part) of thread s.thread_id goes, as
    DELETE_UNKEPT deletes."""
    return (f"{row}.thread_id = s.thread_id AND NOT {kept(row, f'{row}.checkpoint_id')}"
            + (f"\n            AND {not_in_flight(row)}" if row != "c" else ""))


PLAN_SUMMARY = f"""SELECT s.thread_id,
  (SELECT COUNT(*) FROM checkpoints AS c WHERE c.thread_id = s.thread_id) AS checkpoints_total,
  (SELECT COUNT(*) FROM checkpoints AS c WHERE {_goes("c")}) AS checkpoints,
  (SELECT {WRITES_HELD} FROM writes AS w WHERE {_goes("w")}) AS writes,
  (SELECT COALESCE(SUM(LENGTH(c.checkpoint) + LENGTH(c.metadata)), 0) FROM checkpoints AS c
     WHERE {_goes("c")})
  + (SELECT COALESCE(SUM(LENGTH(w.value)), 0) FROM writes AS w WHERE {_goes("w")})
  + (SELECT COALESCE(SUM(LENGTH(pt.data)), 0) FROM chunks AS pt WHERE {_goes("pt")}) AS bytes
FROM d1saver_scope AS s ORDER BY s.thread_id"""
SUMMARIZE_PLAN = q(PLAN_SUMMARY)

# A real run's summary is recorded under the batch's op id (see "idempotency records") and
# read back, so that a retried batch, which finds nothing more to delete, still reports what
# its first try deleted (:op_id). The record is a JSON array of the summary's rows, thread
# ids in hex (SQLite 3.40's JSON decoder stops at "\u0000"); read back as SUMMARY_COLUMNS.
RECORD_PLAN = q(f"""
INSERT OR IGNORE INTO d1saver_ops (op_id, result, created_at)
SELECT :op_id, json_group_array(json_array(hex(p.thread_id), p.checkpoints_total, p.checkpoints,
                                       p.writes, p.bytes)),
       {NOW}
FROM (
{PLAN_SUMMARY}) AS p""")
RECORDED_PLAN = q("""
SELECT CAST(unhex(r.value->>0) AS TEXT) AS thread_id, r.value->>1 AS checkpoints_total,
       r.value->>2 AS checkpoints, r.value->>3 AS writes, r.value->>4 AS bytes
FROM d1saver_ops AS o, json_each(o.result) AS r WHERE o.op_id = :op_id
ORDER BY thread_id""")


# --- thread listing: what a compaction pass pages through (and `d1saver threads`) --------

# The figures of a thread (c: its checkpoints, grouped): checkpoints, namespaces, last ts, and
# the thread's whole storage (checkpoints, writes, parts, chunk rows, frozen histories).
THREAD_FIGURES = """SELECT c.thread_id, COUNT(*) AS checkpoints,
       COUNT(DISTINCT c.checkpoint_ns) AS namespaces, MAX(c.ts) AS updated,
       SUM(LENGTH(c.checkpoint) + LENGTH(c.metadata))
       + (SELECT COALESCE(SUM(LENGTH(w.value)), 0) FROM writes AS w WHERE w.thread_id = c.thread_id)
       + (SELECT COALESCE(SUM(LENGTH(p.data)), 0) FROM chunks AS p WHERE p.thread_id = c.thread_id)
       + (SELECT COALESCE(SUM(LENGTH(k.data)), 0) FROM d1saver_chunks AS k
          WHERE k.thread_id = c.thread_id)
       + (SELECT COALESCE(SUM(LENGTH(f.value) + COALESCE(LENGTH(f.metadata), 0)), 0)
          FROM delta_frozen AS f WHERE f.thread_id = c.thread_id) AS bytes
FROM checkpoints AS c"""
# Keyset pages of threads after :after ('' first), :limit at most.
THREADS_PAGE = q(f"""
{THREAD_FIGURES} WHERE c.thread_id > :after
GROUP BY c.thread_id ORDER BY c.thread_id LIMIT :limit""")
# The same figures for named threads (:thread_ids, a JSON array).
THREADS_INFO = q(f"""
{THREAD_FIGURES}
WHERE c.thread_id IN {THREAD_IDS}
GROUP BY c.thread_id ORDER BY c.thread_id""")

# --- compaction's plan, one source for `d1saver compact` and the Worker's cron (issue 30) ---
#
# Which threads of a page need a retention batch, and how they group into batches: the policy
# `d1saver compact` (compaction/job.py) and the gateway Worker's Cron Trigger (worker/
# compaction.js, through worker/compaction.generated.js) both follow, decided here once.
# A thread needs work when it is idle past :cutoff (ISO text, NULL: none; it keeps only its
# tags), has more than :keep checkpoints, or holds chunks a replaced row may have left
# (d1saver_gc_pending, migration 14); staged rows (a copy or a move) never do. Batches follow
# thread order (so a cursor splits done from to do), hold one kind (idle or not), at most
# :batch_threads threads, and about :batch_checkpoints deletions (a thread weighs what it
# loses, at least 1): greedily, as a recursive walk over the page. Columns PLAN_COLUMNS: every
# thread of the page, `batch` its batch number (from 0) or NULL for none.
PLAN_COLUMNS = ("thread_id", "checkpoints", "updated", "staged", "expired", "batch")
_NEW_BATCH = ("(p.cur < 0 OR w.expired <> p.kind OR p.load + w.weight > :batch_checkpoints"
              " OR p.size >= :batch_threads)")
_PLAN = f"""
WITH RECURSIVE listed AS (
    SELECT c.thread_id, COUNT(*) AS checkpoints, MAX(c.ts) AS updated,
        ROW_NUMBER() OVER (ORDER BY c.thread_id) AS n
    FROM checkpoints AS c WHERE {{threads}}
    GROUP BY c.thread_id ORDER BY c.thread_id{{limit}}
), judged AS (
    SELECT n, thread_id, checkpoints, updated, staged, expired,
        NOT staged AND (expired OR checkpoints > CAST(:keep AS INTEGER) OR EXISTS (
            SELECT 1 FROM d1saver_gc_pending AS g WHERE g.thread_id = s.thread_id)) AS work,
        MAX(checkpoints - CASE WHEN expired THEN 0 ELSE CAST(:keep AS INTEGER) END, 1) AS weight
    FROM (SELECT l.*, substr(l.thread_id, 1, 9) = char(31) || 'd1saver-' AS staged,
              :cutoff IS NOT NULL AND COALESCE(l.updated, '') < :cutoff AS expired
          FROM listed AS l) AS s
), packed(n, thread_id, checkpoints, updated, staged, expired, batch, cur, kind, load, size) AS (
    SELECT 0, NULL, NULL, NULL, NULL, NULL, NULL, -1, NULL, 0, 0
    UNION ALL
    SELECT w.n, w.thread_id, w.checkpoints, w.updated, w.staged, w.expired,
        CASE WHEN w.work THEN p.cur + CASE WHEN {_NEW_BATCH} THEN 1 ELSE 0 END END,
        CASE WHEN w.work AND {_NEW_BATCH} THEN p.cur + 1 ELSE p.cur END,
        CASE WHEN w.work AND {_NEW_BATCH} THEN w.expired ELSE p.kind END,
        CASE WHEN NOT w.work THEN p.load WHEN {_NEW_BATCH} THEN w.weight
             ELSE p.load + w.weight END,
        CASE WHEN NOT w.work THEN p.size WHEN {_NEW_BATCH} THEN 1 ELSE p.size + 1 END
    FROM packed AS p CROSS JOIN judged AS w ON w.n = p.n + 1
)
SELECT thread_id, checkpoints, updated, staged, expired, batch FROM packed WHERE n > 0 ORDER BY n"""
# The keyset page of threads after :after ('' first), :limit at most (the walk's join on n is
# served by an automatic index: linear in the page, 3,000 threads in ~30 ms on SQLite 3.40).
PLAN_PAGE = q(_PLAN.format(threads="c.thread_id > :after",
                           limit=" LIMIT CAST(:limit AS INTEGER)"))
# The named threads (:thread_ids, a JSON array of hex ids), as one page.
PLAN_THREADS = q(_PLAN.format(
    threads="c.thread_id IN (SELECT CAST(unhex(value) AS TEXT) FROM json_each(:thread_ids))",
    limit=""))

# What a whole-database run ends with (compaction/job.py's finish and the Worker's, one
# batch with the lease's release): staged rows killed copies and moves left (every move's
# and comparison's, copies' once expired: admin.removable's rule) removed, only while this
# run still holds the lease (:name, :holder) and without failing when it does not (a retry
# after a lost answer finds the lease released and the rows gone: it removes nothing); the
# gc marks of threads that no longer exist dropped. :low, :high: the staging ids' range.
_REMOVABLE = """
SELECT t.thread_id FROM (SELECT thread_id FROM (
SELECT thread_id FROM checkpoints WHERE thread_id >= :low AND thread_id < :high
UNION SELECT thread_id FROM writes WHERE thread_id >= :low AND thread_id < :high
UNION SELECT thread_id FROM chunks WHERE thread_id >= :low AND thread_id < :high
UNION SELECT thread_id FROM tags WHERE thread_id >= :low AND thread_id < :high
UNION SELECT thread_id FROM (
    SELECT thread_id FROM d1saver_chunks WHERE thread_id >= :low AND thread_id < :high
    UNION SELECT thread_id FROM delta_unwritten WHERE thread_id >= :low AND thread_id < :high
    UNION SELECT thread_id FROM delta_frozen WHERE thread_id >= :low AND thread_id < :high)
)) AS t
LEFT JOIN d1saver_staged AS s ON s.staging_id = t.thread_id
WHERE (s.staging_id IS NULL OR s.expires_at < CAST(strftime('%s', 'now') AS INTEGER)
    OR substr(t.thread_id, 1, 16) = char(31) || 'd1saver-moving' || char(31)
    OR substr(t.thread_id, 1, 17) = char(31) || 'd1saver-leaving' || char(31))"""
# A dry run's count of what a run would remove.
LEFTOVERS_REMOVABLE_COLUMNS = ("staged",)
COUNT_LEFTOVERS_REMOVABLE = q(f"SELECT COUNT(*) AS staged FROM ({_REMOVABLE})")
SCOPE_LEFTOVERS_REMOVABLE = q(f"""
INSERT INTO d1saver_scope (thread_id) {_REMOVABLE}
    AND EXISTS (SELECT 1 FROM leases WHERE name = :name AND holder = :holder)""")
# Their registrations go (the delete trigger takes no other row: LEAVE does that).
UNSTAGE_SCOPE = q("""
DELETE FROM d1saver_staged WHERE staging_id IN (SELECT thread_id FROM d1saver_scope)""")
SCOPED_COLUMNS = ("staged",)
SCOPED = q("SELECT COUNT(*) AS staged FROM d1saver_scope")
FORGET_GC_GONE = q("""
DELETE FROM d1saver_gc_pending
WHERE thread_id NOT IN (SELECT DISTINCT thread_id FROM checkpoints)""")

# One thread's checkpoints, newest first (`d1saver history`).
HISTORY = q(f"""
SELECT c.checkpoint_ns, c.checkpoint_id, c.parent_checkpoint_id,
       json_extract(c.metadata, '$.step') AS step, json_extract(c.metadata, '$.source') AS source,
       c.ts, LENGTH(c.checkpoint) + LENGTH(c.metadata) AS bytes,
       (SELECT {WRITES_HELD} FROM writes AS w
        WHERE w.thread_id = c.thread_id AND w.checkpoint_ns = c.checkpoint_ns
          AND w.checkpoint_id = c.checkpoint_id) AS writes,
       (SELECT group_concat(g.name, ',') FROM tags AS g WHERE g.thread_id = c.thread_id
          AND g.checkpoint_ns = c.checkpoint_ns AND g.checkpoint_id = c.checkpoint_id) AS tags
FROM checkpoints AS c WHERE c.thread_id = :thread_id
ORDER BY c.checkpoint_id DESC, c.checkpoint_ns LIMIT :limit""")

# --- the lease -------------------------------------------------------------------------------

# Leases keep compaction runs from overlapping; time is the database's clock (NOW), so
# clients' clocks need not agree. :seconds to live. Returns a row if acquired.
ACQUIRE_LEASE = q(f"""
INSERT INTO leases (name, holder, expires_at)
VALUES (:name, :holder, {NOW} + :seconds)
ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, expires_at = excluded.expires_at
WHERE leases.expires_at < {NOW}
   OR leases.holder = excluded.holder
RETURNING holder""")
# Sent first in every compaction batch: fails the batch if the lease was lost, else renews it.
_HELD = "name = :name AND holder = :holder"
CHECK_LEASE = q(f"""
INSERT INTO d1saver_guards (lease_lost)
SELECT 1 WHERE NOT EXISTS (SELECT 1 FROM leases WHERE {_HELD})""")
RENEW_LEASE = q(f"UPDATE leases SET expires_at = {NOW} + :seconds WHERE {_HELD}")
RELEASE_LEASE = q(f"DELETE FROM leases WHERE {_HELD}")
BREAK_LEASE = q("DELETE FROM leases WHERE name = :name")
LEASE_HOLDER = q(f"""
SELECT holder, expires_at - {NOW} AS seconds_left
FROM leases WHERE name = :name""")


# --- compaction by the gateway Worker's Cron Trigger (worker/compaction.js) ----------------
#
# The Worker sends these (generated into worker/compaction.generated.js by `d1saver gateway
# build`) around the retention batches above; `d1saver compact --history` reads the records.
# Times are the database's clock, as ISO 8601 UTC text. Numbers arrive as REAL from the
# Worker as from the REST API: each is CAST where it is stored.

# A run begins on one database; :max_age_days NULL: none; :reason NULL unless the run was
# skipped or failed.
RUN_BEGIN = q("""
INSERT OR REPLACE INTO d1saver_compaction_runs (run_id, database_id, trigger, started_at,
    status, reason, keep, max_age_days)
VALUES (:run_id, :database_id, :trigger, strftime('%Y-%m-%dT%H:%M:%fZ', 'now'), :status,
    :reason, CAST(:keep AS INTEGER), CAST(:max_age_days AS INTEGER))""")
# Runs still "running" on this database when a run takes the lease died midway (a run holding
# the lease would have stopped this one).
RUNS_INTERRUPTED = q("""
UPDATE d1saver_compaction_runs SET status = 'interrupted',
    ended_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now'),
    reason = 'stopped midway (the Worker was killed or ran out of time); ' || :run_id || ' went on'
WHERE database_id = :database_id AND status = 'running' AND run_id <> :run_id""")
# Last in a compaction batch, so the figures commit with the deletions they count: adds what
# the batch's recorded plan (RECORD_PLAN under :op_id) says; :expired 1 if the batch expired
# idle threads, else 0.
_RECORDED = "FROM d1saver_ops AS o, json_each(o.result) AS r WHERE o.op_id = :op_id"
RUN_ADD_BATCH = q(f"""
UPDATE d1saver_compaction_runs SET batches = batches + 1,
    threads_compacted = threads_compacted + (SELECT COUNT(*) {_RECORDED}
        AND CAST(:expired AS INTEGER) = 0 AND r.value->>2 > 0),
    threads_expired = threads_expired + (SELECT COUNT(*) {_RECORDED}
        AND CAST(:expired AS INTEGER) = 1),
    checkpoints_deleted = checkpoints_deleted + (SELECT COALESCE(SUM(r.value->>2), 0) {_RECORDED}),
    writes_deleted = writes_deleted + (SELECT COALESCE(SUM(r.value->>3), 0) {_RECORDED}),
    bytes_freed = bytes_freed + (SELECT COALESCE(SUM(r.value->>4), 0) {_RECORDED})
WHERE run_id = :run_id AND database_id = :database_id""")
# A run ends on one database; :threads_scanned by this run.
RUN_END = q("""
UPDATE d1saver_compaction_runs SET ended_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now'),
    status = :status, reason = :reason,
    threads_scanned = threads_scanned + CAST(:threads_scanned AS INTEGER)
WHERE run_id = :run_id AND database_id = :database_id""")
# The pass's cursor. Columns: after (the last thread id it finished), run_id (who wrote it).
CURSOR_COLUMNS = ("after", "run_id")
CURSOR_GET = q("SELECT after, run_id FROM d1saver_compaction_cursor WHERE name = :name")
# Last in a compaction batch: the pass has finished every thread up to :after.
CURSOR_SET = q("""
INSERT OR REPLACE INTO d1saver_compaction_cursor (name, after, run_id, updated_at)
VALUES (:name, :after, :run_id, strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))""")
# A pass is over: the next run starts from the first thread.
CURSOR_CLEAR = q("DELETE FROM d1saver_compaction_cursor WHERE name = :name")
# The newest run records, newest first.
COMPACTION_RUNS_COLUMNS = ("run_id", "database_id", "trigger", "started_at", "ended_at",
                           "status", "reason", "keep", "max_age_days", "threads_scanned",
                           "threads_compacted", "threads_expired", "checkpoints_deleted",
                           "writes_deleted", "bytes_freed", "batches")
COMPACTION_RUNS = q(f"""
SELECT {', '.join(COMPACTION_RUNS_COLUMNS)} FROM d1saver_compaction_runs
ORDER BY started_at DESC, run_id, database_id LIMIT :limit""")

# After GC_CHUNKS: the threads of the scope hold no unreferenced chunk (migration 14).
GC_DONE = q("DELETE FROM d1saver_gc_pending WHERE thread_id IN (SELECT thread_id FROM d1saver_scope)")

# A retention batch voids the moves of the threads in its scope (migration 12): a move that
# read them before must not publish that copy after.
VOID_MOVES_IN_SCOPE = q(f"DELETE FROM d1saver_moves WHERE {IN_SCOPE}")


def retention_batch(plan: list[Query], *, summarize: bool = False, delete: bool = True,
                    freeze: bool = False) -> list[Query]:
    """The statements of one retention batch: scope and keep-plan statements, then the rest.

    `plan` are the statements that fill d1saver_scope and d1saver_keep; they share the
    batch's parameters. RECORD_PLAN and RECORDED_PLAN take the batch's op id; the rest take
    none. A summary of a batch that deletes is recorded (it must survive a retry); a dry
    run's is only read. With `freeze` (compaction and prune, which keep the state of what
    they keep; not delete_for_runs, whose runs' writes must go), kept checkpoints' DeltaChannel
    histories are frozen before their ancestors go.
    """
    stmts = [*CLEAR_SCRATCH, *plan]
    if summarize:
        stmts += [FORGET_OLD_OPS, RECORD_PLAN, RECORDED_PLAN] if delete else [SUMMARIZE_PLAN]
    if delete:
        stmts += [FREEZE, FREEZE_DONE, FREEZE_PIECES] if freeze else []
        stmts += [PLAN_RELINK, APPLY_RELINK, REBIND_FROZEN, *DELETE_UNKEPT, GC_CHUNKS,
                  GC_DONE, VOID_MOVES_IN_SCOPE]
    return [*stmts, *CLEAR_SCRATCH]


# --- inspection ---------------------------------------------------------------------------

# A thread's newest checkpoint row as stored (the demo shows a sealed one), :chars of it.
STORED_SAMPLE = q("""
SELECT checkpoint_id, substr(checkpoint, 1, :chars) AS head, LENGTH(checkpoint) AS bytes, metadata
FROM checkpoints WHERE thread_id = :thread_id ORDER BY checkpoint_id DESC LIMIT 1""")

# Rows and stored bytes per table (the demo's "what is stored" and `d1saver threads`' totals).
STORAGE_SUMMARY = q("""
SELECT 'checkpoints' AS tbl, COUNT(*) AS row_count,
       COALESCE(SUM(LENGTH(checkpoint) + LENGTH(metadata)), 0) AS bytes
FROM checkpoints
UNION ALL SELECT 'writes', COUNT(*), COALESCE(SUM(LENGTH(value)), 0) FROM writes
UNION ALL SELECT 'chunks', COUNT(*), COALESCE(SUM(LENGTH(data)), 0) FROM chunks
UNION ALL SELECT 'tags', COUNT(*), 0 FROM tags
UNION ALL SELECT * FROM (
    SELECT 'delta_frozen', COUNT(*),
        COALESCE(SUM(LENGTH(value) + COALESCE(LENGTH(metadata), 0)), 0) FROM delta_frozen
    UNION ALL
    SELECT 'd1saver_chunks', COUNT(*), COALESCE(SUM(LENGTH(data)), 0) FROM d1saver_chunks)""")


# Every statement of this module (and the statements of d1saver/sql/maintenance.py its
# batches send: CLEAR_SCOPE, GC_CHUNKS), in definition order.
STATEMENTS: list[Query] = name_queries(globals())
