"""The writes of put and put_writes: rows, their pieces and their content-addressed chunks."""

from __future__ import annotations

from d1saver.sql.parts import (CHECKPOINT_COLUMNS, TABLE_COLUMNS, WRITE_COLUMNS, column_list,
                               insert_values, packed_writes)
from d1saver.sql.query import Query, name_queries, q

# Idempotent: a retried put rewrites the same row (INSERT OR REPLACE, as SqliteSaver; nothing
# references a checkpoint row, so replacing loses nothing, in a third of the text of an
# upsert, which travels with every put; version 3's trigger drops the row's old pieces).
# Both hot inserts name their columns, although their text travels with every put and
# put_writes (about 100 bytes each): a statement that supplies every column in table order
# breaks as soon as a migration adds one, in every instance of the older release still
# running during a rolling deploy (0.1.0's did). A column added later must have a default:
# an older instance's REPLACE of the same row resets it.
UPSERT_CHECKPOINT = q(insert_values("REPLACE", "checkpoints", CHECKPOINT_COLUMNS))

# From schema version 7 on, a put and a put_writes go through views whose INSTEAD OF triggers
# (migration 7) insert the new chunks (a JSON array of [id, level, data], children before
# nodes) and then the rows, so the SQL text each request carries is the shortest possible.
# A type NULL is "msgpack" (the serde's usual tag, sent with every value otherwise). A
# put_writes call's regular writes, two or more, are one "p:" row (the JSON array as sent):
# per write, they would be most of the rows a conversation writes. The views' columns never
# change (a later release adds a new view).
# :chunks are the new chunks ([id, level, data], or NULL).
PUT = q("""
INSERT INTO d1saver_put VALUES (:thread_id, :checkpoint_ns, :checkpoint_id,
    :parent_checkpoint_id, :type, :checkpoint, :metadata, :channels, :run_id, :ts, :chunks)""")
# :special and :regular writes are JSON arrays of [idx, channel, type, value], or NULL.
PUT_WRITES = q("""
INSERT INTO d1saver_put_writes VALUES (:thread_id, :checkpoint_ns, :checkpoint_id,
    :task_id, :task_path, :special, :regular, :chunks)""")
# New chunks beyond what one parameter carries, sent before the row's statement.
INSERT_CHUNKS = q("""
INSERT OR IGNORE INTO d1saver_chunks (thread_id, id, level, data)
SELECT :thread_id, value->>0, value->>1, value->>2 FROM json_each(:chunks)""")

# Opt-in head guard, sent before PUT in the same batch: :parent_checkpoint_id is the parent the
# caller built on; if the thread's newest checkpoint is another one, the insert trips the
# CHECK on d1saver_guards and D1 rolls the batch back.
GUARD_HEAD = q("""
INSERT INTO d1saver_guards (head_moved)
SELECT 1 FROM (
    SELECT checkpoint_id FROM checkpoints
    WHERE thread_id = :thread_id AND checkpoint_ns = :checkpoint_ns
    ORDER BY checkpoint_id DESC LIMIT 1
) AS head
WHERE head.checkpoint_id IS NOT :parent_checkpoint_id
    AND head.checkpoint_id IS NOT :checkpoint_id""")

# Writes: :writes is a JSON array of [idx, channel, type, value] rows for one task.
# REPLACE for special writes (errors, interrupts: the latest wins), IGNORE for regular ones
# (a retry or a replayed task must not change what was stored), as WRITES_IDX_MAP intends.
_TASK_WRITES = f"""INTO writes ({column_list(WRITE_COLUMNS)})
SELECT :thread_id, :checkpoint_ns, :checkpoint_id, :task_id, :task_path,"""
INSERT_WRITES_REPLACE = q(f"""
INSERT OR REPLACE {_TASK_WRITES}
    value->>0, value->>1, value->>2, value->>3
FROM json_each(:writes)""")
# Nor an index a "p:" row of the task holds (migration 7): the first write stays the one read.
INSERT_WRITES_IGNORE = q(f"""
INSERT OR IGNORE {_TASK_WRITES}
    j.value->>0, j.value->>1, j.value->>2, j.value->>3
FROM json_each(:writes) AS j
WHERE NOT EXISTS (
    SELECT 1 FROM writes AS p, {packed_writes("p.value")} AS q
    WHERE p.thread_id = :thread_id AND p.checkpoint_ns = :checkpoint_ns
        AND p.checkpoint_id = :checkpoint_id AND p.task_id = :task_id
        AND q.value->>0 = j.value->>0)""")

# Values over D1's 2 MB limit: the owner row holds "c:<n>", the pieces (seq 0..n-1) live
# here. Pieces follow their row in the batch. An upserted row (checkpoint, special write)
# deletes its owner's pieces and inserts its own.
DELETE_CHUNKS_OF = q("""
DELETE FROM chunks WHERE thread_id = :thread_id AND checkpoint_ns = :checkpoint_ns
    AND checkpoint_id = :checkpoint_id AND owner = :owner""")
INSERT_CHUNK = q(insert_values("REPLACE", "chunks", TABLE_COLUMNS["chunks"]))
# A piece of a regular write (:owner, of :task_id and :idx), which is INSERT OR IGNORE:
# stored only if the row holds this very marker (:value), so that a replay whose row was
# ignored adds no piece.
INSERT_WRITE_CHUNK = q("""
INSERT OR IGNORE INTO chunks (thread_id, checkpoint_ns, checkpoint_id, owner, seq, data)
SELECT :thread_id, :checkpoint_ns, :checkpoint_id, :owner, :seq, :data WHERE EXISTS (
    SELECT 1 FROM writes WHERE thread_id = :thread_id AND checkpoint_ns = :checkpoint_ns
        AND checkpoint_id = :checkpoint_id AND task_id = :task_id AND idx = :idx
        AND value = :value)""")

# Sent with a put whose checkpoint declares DeltaChannels it has never written (:channels: JSON
# array of their names, the metadata's counters_since_delta_snapshot keys not in channel_versions).
# After PUT in the batch: its trigger has just cleared the checkpoint's old row.
PUT_UNWRITTEN = q(insert_values("REPLACE", "delta_unwritten", TABLE_COLUMNS["delta_unwritten"]))

# Every statement of this module, named by its identifier, in definition order.
STATEMENTS: list[Query] = name_queries(globals())
