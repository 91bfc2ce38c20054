-- d1saver schema, version 1.
-- Applied by D1Saver.setup() and, unchanged, by `wrangler d1 execute <db> --file schema.sql`.
-- Every statement is idempotent; statements are separated by semicolons at line ends only.
--
-- Values (serialized checkpoints and writes) are stored as TEXT, not BLOB: D1's REST API carries
-- parameters as JSON and returns BLOBs as arrays of integers, so a value travels as
-- "<codec>:<base64>" both ways (see d1saver/_codec.py). Metadata is plain JSON so that
-- json_extract() filters work on a real D1.

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

-- Pieces of values over D1's 2 MB limit; the owning row holds a "c:" reference (d1saver/_codec.py).
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

-- Guards: a statement inserts here only when its batch must not commit; the named CHECK then
-- fails and D1 rolls the whole batch back ("CHECK constraint failed: head_moved"). head_moved:
-- the opt-in put guard (the parent is no longer the thread's head); lease_lost: a compaction
-- batch whose run no longer holds the lease.
CREATE TABLE IF NOT EXISTS d1saver_guard (
    head_moved INTEGER CONSTRAINT head_moved CHECK (head_moved IS NULL),
    lease_lost INTEGER CONSTRAINT lease_lost CHECK (lease_lost IS NULL)
);

CREATE TABLE IF NOT EXISTS d1saver_schema (
    version INTEGER PRIMARY KEY,
    applied_at TEXT NOT NULL
);

INSERT OR IGNORE INTO d1saver_schema (version, applied_at) VALUES (1, strftime('%Y-%m-%dT%H:%M:%SZ', 'now'));
