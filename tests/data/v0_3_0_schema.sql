-- d1saver schema, version 16: the whole current schema, for a fresh database.
-- Applied by D1Saver.setup() and, unchanged, by `wrangler d1 execute <db> --file schema.sql`.
-- Statements are separated by semicolons at line ends only; each is idempotent.
--
-- A database that an older d1saver created is NOT upgraded by this file but by the migrations
-- in d1saver/sql/catalogue.py (MIGRATIONS), which any d1saver operation or D1Saver.setup() applies:
-- on such a database this file stops at the schema_outdated guard below, and D1 rolls it all
-- back. See docs/MIGRATIONS.md. A test holds this file to version 1 plus every migration.
--
-- Values (serialized checkpoints and writes) are stored as TEXT, not BLOB: D1's REST API carries
-- parameters as JSON and returns BLOBs as arrays of integers, so a value travels as
-- "<codec>:<base64>" both ways (see d1saver/storage/codec.py). Metadata is plain JSON so that
-- json_extract() filters work on a real D1.

-- The applied schema versions, one row each (a fresh database records the current one only).
-- min_reader: the oldest schema version whose d1saver can still use the database.
CREATE TABLE IF NOT EXISTS d1saver_schema (
    version INTEGER PRIMARY KEY,
    applied_at TEXT NOT NULL,
    min_reader INTEGER NOT NULL DEFAULT 1
);

-- Guards: a statement inserts here only when its batch must not commit; the named CHECK then
-- fails and D1 rolls the whole batch back ("CHECK constraint failed: head_moved"). head_moved:
-- the opt-in put guard (the parent is no longer the thread's head); lease_lost: a compaction
-- batch whose run no longer holds the lease; schema_outdated, schema_too_new: this file, run on
-- a database it must not touch.
CREATE TABLE IF NOT EXISTS d1saver_guards (
    head_moved INTEGER CONSTRAINT head_moved CHECK (head_moved IS NULL),
    lease_lost INTEGER CONSTRAINT lease_lost CHECK (lease_lost IS NULL),
    schema_outdated INTEGER CONSTRAINT schema_outdated CHECK (schema_outdated IS NULL),
    schema_too_new INTEGER CONSTRAINT schema_too_new CHECK (schema_too_new IS NULL)
);

-- Stop on a database at an older version (its migrations bring it up) or on one that needs a
-- newer d1saver than version 16's.
INSERT INTO d1saver_guards (schema_outdated)
SELECT 1 WHERE (SELECT MAX(version) FROM d1saver_schema) < 16;

INSERT INTO d1saver_guards (schema_too_new)
SELECT 1 WHERE (SELECT MAX(min_reader) FROM d1saver_schema) > 16;

CREATE TABLE IF NOT EXISTS checkpoints (
    thread_id TEXT NOT NULL,
    checkpoint_ns TEXT NOT NULL DEFAULT '',
    checkpoint_id TEXT NOT NULL,
    parent_checkpoint_id TEXT,
    type TEXT,
    checkpoint TEXT NOT NULL,
    metadata TEXT NOT NULL DEFAULT '{}',
    -- JSON array of the keys of channel_values: lets SQL find DeltaChannel seeds without decoding.
    channels TEXT NOT NULL DEFAULT '[]',
    run_id TEXT,
    ts TEXT,
    PRIMARY KEY (thread_id, checkpoint_ns, checkpoint_id)
);

CREATE INDEX IF NOT EXISTS checkpoints_run_id ON checkpoints (run_id);

-- list(None) reads its pages in this order, from the cursor on, instead of sorting the table.
CREATE INDEX IF NOT EXISTS checkpoints_by_id ON checkpoints (checkpoint_id, thread_id, checkpoint_ns);

CREATE TABLE IF NOT EXISTS writes (
    thread_id TEXT NOT NULL,
    checkpoint_ns TEXT NOT NULL DEFAULT '',
    checkpoint_id TEXT NOT NULL,
    task_id TEXT NOT NULL,
    task_path TEXT NOT NULL DEFAULT '',
    idx INTEGER NOT NULL,
    channel TEXT NOT NULL,
    type TEXT,
    value TEXT,
    PRIMARY KEY (thread_id, checkpoint_ns, checkpoint_id, task_id, idx)
);

-- Pieces of values over D1's 2 MB limit; the owning row holds a "c:" reference (d1saver/storage/codec.py).
CREATE TABLE IF NOT EXISTS chunks (
    thread_id TEXT NOT NULL,
    checkpoint_ns TEXT NOT NULL DEFAULT '',
    checkpoint_id TEXT NOT NULL,
    -- '' for the checkpoint itself, '<task_id>/<idx>' for a write.
    owner TEXT NOT NULL,
    seq INTEGER NOT NULL,
    data TEXT NOT NULL,
    PRIMARY KEY (thread_id, checkpoint_ns, checkpoint_id, owner, seq)
);

-- A checkpoint or write row that is (re)inserted owns no pieces but those its batch inserts
-- after it. (The inner statements end mid-line: a ';' at a line end ends a statement here.)
CREATE TRIGGER IF NOT EXISTS checkpoints_own_chunks AFTER INSERT ON checkpoints BEGIN
    DELETE FROM chunks WHERE thread_id = NEW.thread_id AND checkpoint_ns = NEW.checkpoint_ns
        AND checkpoint_id = NEW.checkpoint_id AND owner IN ('', ':metadata'); END;

CREATE TRIGGER IF NOT EXISTS writes_own_chunks AFTER INSERT ON writes BEGIN
    DELETE FROM chunks WHERE thread_id = NEW.thread_id AND checkpoint_ns = NEW.checkpoint_ns
        AND checkpoint_id = NEW.checkpoint_id AND owner = NEW.task_id || '/' || NEW.idx; END;

-- Named checkpoints that compaction never deletes.
CREATE TABLE IF NOT EXISTS tags (
    thread_id TEXT NOT NULL,
    checkpoint_ns TEXT NOT NULL DEFAULT '',
    checkpoint_id TEXT NOT NULL,
    name TEXT NOT NULL,
    created_at TEXT NOT NULL,
    PRIMARY KEY (thread_id, checkpoint_ns, name)
);

CREATE INDEX IF NOT EXISTS tags_checkpoint ON tags (thread_id, checkpoint_ns, checkpoint_id);

-- A lease keeps two compaction runs from overlapping.
CREATE TABLE IF NOT EXISTS leases (
    name TEXT PRIMARY KEY,
    holder TEXT NOT NULL,
    expires_at INTEGER NOT NULL
);

-- Scratch tables for retention (prune and compaction): filled and emptied inside one batch,
-- which D1 runs as one transaction, so no other request ever sees rows in them.
CREATE TABLE IF NOT EXISTS d1saver_scope (
    thread_id TEXT PRIMARY KEY
);

CREATE TABLE IF NOT EXISTS d1saver_keep (
    thread_id TEXT NOT NULL,
    checkpoint_ns TEXT NOT NULL,
    checkpoint_id TEXT NOT NULL,
    PRIMARY KEY (thread_id, checkpoint_ns, checkpoint_id)
);

CREATE TABLE IF NOT EXISTS d1saver_relink (
    thread_id TEXT NOT NULL,
    checkpoint_ns TEXT NOT NULL,
    checkpoint_id TEXT NOT NULL,
    new_parent TEXT,
    PRIMARY KEY (thread_id, checkpoint_ns, checkpoint_id)
);

-- Idempotency records: the answers of untag and of compaction batches, kept a day so that a
-- retry after a lost response answers as the first try did (d1saver/sql/catalogue.py, FORGET_OLD_OPS).
CREATE TABLE IF NOT EXISTS d1saver_ops (
    op_id TEXT PRIMARY KEY,
    result TEXT NOT NULL,
    created_at INTEGER NOT NULL
);

CREATE INDEX IF NOT EXISTS d1saver_ops_created ON d1saver_ops (created_at);

-- The DeltaChannels a checkpoint declares but has never written (a row only for a checkpoint
-- with some): walks seeking them would find no seed. A checkpoint written or deleted, by any
-- statement or d1saver version, drops its row.
CREATE TABLE IF NOT EXISTS delta_unwritten (
    thread_id TEXT NOT NULL,
    checkpoint_ns TEXT NOT NULL,
    checkpoint_id TEXT NOT NULL,
    channels TEXT NOT NULL,
    PRIMARY KEY (thread_id, checkpoint_ns, checkpoint_id)
);

CREATE TRIGGER IF NOT EXISTS delta_unwritten_on_put AFTER INSERT ON checkpoints BEGIN
    DELETE FROM delta_unwritten WHERE thread_id = NEW.thread_id
        AND checkpoint_ns = NEW.checkpoint_ns AND checkpoint_id = NEW.checkpoint_id; END;

CREATE TRIGGER IF NOT EXISTS delta_unwritten_on_delete AFTER DELETE ON checkpoints BEGIN
    DELETE FROM delta_unwritten WHERE thread_id = OLD.thread_id
        AND checkpoint_ns = OLD.checkpoint_ns AND checkpoint_id = OLD.checkpoint_id; END;

-- Frozen DeltaChannel histories: for a kept checkpoint whose ancestors compaction deleted, per
-- channel, the seed ('s': the whole checkpoint value that held it) and the writes ('w') its
-- history replayed, copied verbatim with the identity of the rows they came from (src_checkpoint_id,
-- task_id, task_path, idx, channel: with keys a value opens only with its own row's binding);
-- depth counts from the holder (1: its parent). Deleting the holder drops its rows.
CREATE TABLE IF NOT EXISTS delta_frozen (
    thread_id TEXT NOT NULL,
    checkpoint_ns TEXT NOT NULL,
    checkpoint_id TEXT NOT NULL,
    channel TEXT NOT NULL,
    kind TEXT NOT NULL,
    depth INTEGER NOT NULL,
    task_id TEXT NOT NULL,
    idx INTEGER NOT NULL,
    src_checkpoint_id TEXT NOT NULL,
    task_path TEXT NOT NULL DEFAULT '',
    type TEXT,
    value TEXT,
    metadata TEXT,
    channels TEXT,
    parent TEXT,
    PRIMARY KEY (thread_id, checkpoint_ns, checkpoint_id, channel, kind, depth, task_id, idx)
);

CREATE TRIGGER IF NOT EXISTS delta_frozen_on_delete AFTER DELETE ON checkpoints BEGIN
    DELETE FROM delta_frozen WHERE thread_id = OLD.thread_id
        AND checkpoint_ns = OLD.checkpoint_ns AND checkpoint_id = OLD.checkpoint_id; END;

-- A frozen record holds for the parent its holder had when it was computed (parent). A
-- checkpoint row inserted (put, copy, any statement) drops the records it no longer matches;
-- a put retried after a prune relinked the row (its parent is gone) keeps the relinked parent.
CREATE TRIGGER IF NOT EXISTS delta_frozen_bound AFTER INSERT ON checkpoints
WHEN EXISTS (SELECT 1 FROM delta_frozen AS f WHERE f.thread_id = NEW.thread_id
    AND f.checkpoint_ns = NEW.checkpoint_ns AND f.checkpoint_id = NEW.checkpoint_id) BEGIN
    UPDATE checkpoints SET parent_checkpoint_id = (
        SELECT f.parent FROM delta_frozen AS f WHERE f.thread_id = NEW.thread_id
            AND f.checkpoint_ns = NEW.checkpoint_ns AND f.checkpoint_id = NEW.checkpoint_id
        LIMIT 1)
    WHERE thread_id = NEW.thread_id AND checkpoint_ns = NEW.checkpoint_ns
      AND checkpoint_id = NEW.checkpoint_id AND NEW.parent_checkpoint_id IS NOT NULL
      AND NOT EXISTS (SELECT 1 FROM checkpoints AS p WHERE p.thread_id = NEW.thread_id
          AND p.checkpoint_ns = NEW.checkpoint_ns AND p.checkpoint_id = NEW.parent_checkpoint_id); DELETE FROM delta_frozen WHERE thread_id = NEW.thread_id
        AND checkpoint_ns = NEW.checkpoint_ns AND checkpoint_id = NEW.checkpoint_id
        AND parent IS NOT (SELECT c.parent_checkpoint_id FROM checkpoints AS c
            WHERE c.thread_id = NEW.thread_id AND c.checkpoint_ns = NEW.checkpoint_ns
              AND c.checkpoint_id = NEW.checkpoint_id); DELETE FROM chunks WHERE thread_id = NEW.thread_id AND checkpoint_ns = NEW.checkpoint_ns
        AND checkpoint_id = NEW.checkpoint_id AND substr(owner, 1, 2) = 'f/'
        AND NOT EXISTS (SELECT 1 FROM delta_frozen AS f WHERE f.thread_id = NEW.thread_id
            AND f.checkpoint_ns = NEW.checkpoint_ns AND f.checkpoint_id = NEW.checkpoint_id); END;

-- Compaction runs of the gateway Worker's Cron Trigger, one row per run and database
-- (`d1saver compact --history`; docs/COMPACTION.md). status: running, done, partial (its
-- budget of batches spent: the next run goes on), skipped (another run held the lease),
-- failed (reason says why), interrupted (found still running by the next run: it was killed).
CREATE TABLE IF NOT EXISTS d1saver_compaction_runs (
    run_id TEXT NOT NULL,
    database_id TEXT NOT NULL,
    trigger TEXT NOT NULL,
    started_at TEXT NOT NULL,
    ended_at TEXT,
    status TEXT NOT NULL,
    reason TEXT,
    keep INTEGER,
    max_age_days INTEGER,
    threads_scanned INTEGER NOT NULL DEFAULT 0,
    threads_compacted INTEGER NOT NULL DEFAULT 0,
    threads_expired INTEGER NOT NULL DEFAULT 0,
    checkpoints_deleted INTEGER NOT NULL DEFAULT 0,
    writes_deleted INTEGER NOT NULL DEFAULT 0,
    bytes_freed INTEGER NOT NULL DEFAULT 0,
    batches INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (run_id, database_id)
);

CREATE INDEX IF NOT EXISTS d1saver_compaction_runs_started ON d1saver_compaction_runs (started_at);

-- Where the Cron Trigger's pass over the threads stopped (the last thread id it finished),
-- written in the same batch as that thread's deletions; no row: the next run starts a pass.
CREATE TABLE IF NOT EXISTS d1saver_compaction_cursor (
    name TEXT PRIMARY KEY,
    after TEXT NOT NULL,
    run_id TEXT NOT NULL,
    updated_at TEXT NOT NULL
);

-- Version 1's guard table, which d1saver 0.1.0 still uses (d1saver_guards replaces it; a later
-- release drops it once no 0.1.0 instance remains).
CREATE TABLE IF NOT EXISTS d1saver_guard (
    head_moved INTEGER CONSTRAINT head_moved CHECK (head_moved IS NULL),
    lease_lost INTEGER CONSTRAINT lease_lost CHECK (lease_lost IS NULL)
);

-- Content-addressed values: each chunk once per thread, keyed by its hash (level 0: codec text
-- of bytes; level n: a tree node, the JSON list of its children). A row holding an "m:" manifest
-- lists its chunks. The triggers keep the table closed (a node only over stored children, a
-- row only over stored chunks: else the batch fails with "chunk_missing"); the views take a
-- put or a put_writes with its new chunks in one short statement.
CREATE TABLE IF NOT EXISTS d1saver_chunks (
    thread_id TEXT NOT NULL,
    id TEXT NOT NULL,
    level INTEGER NOT NULL,
    data TEXT NOT NULL,
    PRIMARY KEY (thread_id, id)
) WITHOUT ROWID;

CREATE TRIGGER IF NOT EXISTS d1saver_chunks_closed AFTER INSERT ON d1saver_chunks
WHEN NEW.level > 0 BEGIN
    SELECT RAISE(ABORT, 'd1saver chunk_missing') WHERE EXISTS (
        SELECT 1 FROM json_each('["' || replace(NEW.data, ',', '","') || '"]') AS j WHERE NOT EXISTS (
            SELECT 1 FROM d1saver_chunks AS k
            WHERE k.thread_id = NEW.thread_id AND k.id = ltrim(j.value, '^'))); END;

CREATE TRIGGER IF NOT EXISTS checkpoints_chunks_closed AFTER INSERT ON checkpoints
WHEN substr(NEW.checkpoint, 1, 2) = 'm:' BEGIN
    SELECT RAISE(ABORT, 'd1saver chunk_missing') WHERE EXISTS (
        SELECT 1 FROM json_each('["' || replace(substr(NEW.checkpoint, 3), ',', '","') || '"]') AS j
        WHERE instr(j.value, ':') = 0 AND NOT EXISTS (
            SELECT 1 FROM d1saver_chunks AS k
            WHERE k.thread_id = NEW.thread_id AND k.id = ltrim(j.value, '^'))); END;

CREATE TRIGGER IF NOT EXISTS writes_chunks_closed AFTER INSERT ON writes
WHEN substr(NEW.value, 1, 2) = 'm:' BEGIN
    SELECT RAISE(ABORT, 'd1saver chunk_missing') WHERE EXISTS (
        SELECT 1 FROM json_each('["' || replace(substr(NEW.value, 3), ',', '","') || '"]') AS j
        WHERE instr(j.value, ':') = 0 AND NOT EXISTS (
            SELECT 1 FROM d1saver_chunks AS k
            WHERE k.thread_id = NEW.thread_id AND k.id = ltrim(j.value, '^'))); END;

CREATE VIEW IF NOT EXISTS d1saver_put (thread_id, checkpoint_ns, checkpoint_id,
    parent_checkpoint_id, type, checkpoint, metadata, channels, run_id, ts, chunks)
AS SELECT NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL WHERE 0;

CREATE TRIGGER IF NOT EXISTS d1saver_put_row INSTEAD OF INSERT ON d1saver_put BEGIN
    INSERT OR IGNORE INTO d1saver_chunks (thread_id, id, level, data)
    SELECT NEW.thread_id, value->>0, value->>1, value->>2 FROM json_each(NEW.chunks); INSERT
    OR REPLACE INTO checkpoints (thread_id, checkpoint_ns, checkpoint_id,
        parent_checkpoint_id, type, checkpoint, metadata, channels, run_id, ts)
    VALUES (NEW.thread_id, NEW.checkpoint_ns, NEW.checkpoint_id, NEW.parent_checkpoint_id,
        COALESCE(NEW.type, 'msgpack'), NEW.checkpoint, NEW.metadata, NEW.channels,
        NEW.run_id, NEW.ts); END;

CREATE VIEW IF NOT EXISTS d1saver_put_writes (thread_id, checkpoint_ns, checkpoint_id,
    task_id, task_path, special, regular, chunks)
AS SELECT NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL WHERE 0;

CREATE TRIGGER IF NOT EXISTS d1saver_put_writes_rows INSTEAD OF INSERT ON d1saver_put_writes
BEGIN
    INSERT OR IGNORE INTO d1saver_chunks (thread_id, id, level, data)
    SELECT NEW.thread_id, value->>0, value->>1, value->>2 FROM json_each(NEW.chunks); INSERT
    OR REPLACE INTO writes (thread_id, checkpoint_ns, checkpoint_id, task_id,
        task_path, idx, channel, type, value)
    SELECT NEW.thread_id, NEW.checkpoint_ns, NEW.checkpoint_id, NEW.task_id, NEW.task_path,
        value->>0, value->>1, COALESCE(value->>2, 'msgpack'), value->>3
    FROM json_each(NEW.special); INSERT
    OR IGNORE INTO writes (thread_id, checkpoint_ns, checkpoint_id, task_id,
        task_path, idx, channel, type, value)
    SELECT NEW.thread_id, NEW.checkpoint_ns, NEW.checkpoint_id, NEW.task_id, NEW.task_path,
        json_extract(NEW.regular, '$[0][0]'), '', 'pack', 'p:' || NEW.regular
    WHERE json_array_length(NEW.regular) > 1 AND NOT EXISTS (
        SELECT 1 FROM writes WHERE thread_id = NEW.thread_id
            AND checkpoint_ns = NEW.checkpoint_ns AND checkpoint_id = NEW.checkpoint_id
            AND task_id = NEW.task_id AND idx >= 0); INSERT
    OR IGNORE INTO writes (thread_id, checkpoint_ns, checkpoint_id, task_id,
        task_path, idx, channel, type, value)
    SELECT NEW.thread_id, NEW.checkpoint_ns, NEW.checkpoint_id, NEW.task_id, NEW.task_path,
        j.value->>0, j.value->>1, COALESCE(j.value->>2, 'msgpack'), j.value->>3
    FROM json_each(NEW.regular) AS j
    WHERE NOT EXISTS (
        SELECT 1 FROM writes AS p, json_each(CASE WHEN substr(p.value, 1, 2) = 'p:'
                                                  THEN substr(p.value, 3) ELSE '[]' END) AS q
        WHERE p.thread_id = NEW.thread_id AND p.checkpoint_ns = NEW.checkpoint_ns
            AND p.checkpoint_id = NEW.checkpoint_id AND p.task_id = NEW.task_id
            AND q.value->>0 = j.value->>0); END;

CREATE TRIGGER IF NOT EXISTS writes_pack_chunks_closed AFTER INSERT ON writes
WHEN substr(NEW.value, 1, 2) = 'p:' BEGIN
    SELECT RAISE(ABORT, 'd1saver chunk_missing') WHERE EXISTS (
        SELECT 1 FROM json_each(substr(NEW.value, 3)) AS w,
            json_each(CASE WHEN substr(w.value->>3, 1, 2) = 'm:'
                THEN '["' || replace(substr(w.value->>3, 3), ',', '","') || '"]'
                ELSE '[]' END) AS j
        WHERE instr(j.value, ':') = 0 AND NOT EXISTS (
            SELECT 1 FROM d1saver_chunks AS k
            WHERE k.thread_id = NEW.thread_id AND k.id = ltrim(j.value, '^'))); END;

-- Long-term memory (D1Store): one row per item, its namespace the compact ASCII JSON array of
-- its labels (prefixes are ranges of that text, never LIKE), its value JSON (or "r:"/"e:" codec
-- text: compressed or sealed), times in unix seconds (REAL). Vectors per (item, field), float32
-- little-endian in base64. The node cache (D1Cache): serde type and value, expiry in seconds.
CREATE TABLE IF NOT EXISTS store_items (
    ns TEXT NOT NULL,
    key TEXT NOT NULL,
    value TEXT NOT NULL,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    expires_at REAL,
    ttl_minutes REAL,
    PRIMARY KEY (ns, key)
);

CREATE INDEX IF NOT EXISTS store_items_expires ON store_items (expires_at) WHERE expires_at IS NOT NULL;

CREATE TABLE IF NOT EXISTS store_vectors (
    ns TEXT NOT NULL,
    key TEXT NOT NULL,
    field TEXT NOT NULL,
    vector TEXT NOT NULL,
    code TEXT,
    PRIMARY KEY (ns, key, field)
);

CREATE TABLE IF NOT EXISTS cache_entries (
    ns TEXT NOT NULL,
    key TEXT NOT NULL,
    value TEXT NOT NULL,
    expires_at REAL,
    PRIMARY KEY (ns, key)
);

CREATE INDEX IF NOT EXISTS cache_entries_expires ON cache_entries (expires_at) WHERE expires_at IS NOT NULL;

-- A move between databases (`d1saver rebalance`) in flight: registered at the thread's new
-- home before the old one is read; delete_thread and prune drop the registration, and the
-- move's publishing batch fails without it ("move_voided"), so a delete or a prune wins.
CREATE TABLE IF NOT EXISTS d1saver_moves (
    thread_id TEXT PRIMARY KEY,
    move_id TEXT NOT NULL,
    created_at INTEGER NOT NULL
);

-- Rows staged under a hidden thread id (a copy between databases, a move): what they become
-- (thread_id), where they came from (source_id), and when a cleanup may remove them.
CREATE TABLE IF NOT EXISTS d1saver_staged (
    staging_id TEXT PRIMARY KEY,
    thread_id TEXT NOT NULL,
    source_id TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    expires_at INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS d1saver_staged_thread ON d1saver_staged (thread_id);
CREATE INDEX IF NOT EXISTS d1saver_staged_source ON d1saver_staged (source_id);

-- A registration removed takes its staged rows with it.
CREATE TRIGGER IF NOT EXISTS d1saver_staged_removed AFTER DELETE ON d1saver_staged BEGIN
    DELETE FROM writes WHERE thread_id = OLD.staging_id; DELETE
    FROM d1saver_chunks WHERE thread_id = OLD.staging_id; DELETE
    FROM chunks WHERE thread_id = OLD.staging_id; DELETE
    FROM tags WHERE thread_id = OLD.staging_id; DELETE
    FROM checkpoints WHERE thread_id = OLD.staging_id; END;

-- In a copy's source database: where a copy of the source is staged (database_id,
-- staging_id), so that delete_thread of the source removes it there too.
CREATE TABLE IF NOT EXISTS d1saver_staged_elsewhere (
    source_id TEXT NOT NULL,
    database_id TEXT NOT NULL,
    staging_id TEXT NOT NULL,
    expires_at INTEGER NOT NULL,
    PRIMARY KEY (source_id, database_id, staging_id)
);

-- Guards of moves and staged copies: move_voided (the thread was deleted or pruned at its
-- new home since the move began), staging_lost (a cleanup removed the staged rows).
CREATE TABLE IF NOT EXISTS d1saver_move_guards (
    move_voided INTEGER CONSTRAINT move_voided CHECK (move_voided IS NULL),
    staging_lost INTEGER CONSTRAINT staging_lost CHECK (staging_lost IS NULL)
);

-- Threads a row put again (with other content) may have left unreferenced chunks in: the next
-- compaction collects them, even where it deletes no checkpoint (schema 14).
CREATE TABLE IF NOT EXISTS d1saver_gc_pending (thread_id TEXT PRIMARY KEY);

CREATE TRIGGER IF NOT EXISTS checkpoints_gc_pending BEFORE INSERT ON checkpoints
WHEN EXISTS (SELECT 1 FROM checkpoints WHERE thread_id = NEW.thread_id
    AND checkpoint_ns = NEW.checkpoint_ns AND checkpoint_id = NEW.checkpoint_id
    AND substr(checkpoint, 1, 2) = 'm:' AND checkpoint IS NOT NEW.checkpoint)
BEGIN
    INSERT OR IGNORE INTO d1saver_gc_pending (thread_id) VALUES (NEW.thread_id); END;

CREATE TRIGGER IF NOT EXISTS writes_gc_pending BEFORE INSERT ON writes
WHEN EXISTS (SELECT 1 FROM writes WHERE thread_id = NEW.thread_id
    AND checkpoint_ns = NEW.checkpoint_ns AND checkpoint_id = NEW.checkpoint_id
    AND task_id = NEW.task_id AND idx = NEW.idx
    AND substr(value, 1, 2) IN ('m:', 'p:') AND value IS NOT NEW.value)
BEGIN
    INSERT OR IGNORE INTO d1saver_gc_pending (thread_id) VALUES (NEW.thread_id); END;

INSERT OR IGNORE INTO d1saver_schema (version, applied_at, min_reader)
VALUES (16, strftime('%Y-%m-%dT%H:%M:%SZ', 'now'), 15);
