"""Every SQL statement d1saver sends, each a named constant written out whole, and the schema
migrations (docs/SQL.md).

A statement is `q(text)`: its `:name` parameters are bound by name (`Statement.bind`), and
its text is made ready to send once, at import (d1saver/sql/query.py); the snapshot in
tests/sql/statements.snapshot.sql holds every one exactly as sent. Statements take only bound
parameters. Lists (thread ids, run ids, channels, writes, metadata filters) travel as ONE JSON
parameter read with json_each(), so no statement is ever assembled from user input and none
comes near D1's 100-parameter limit.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from d1saver.sql import memory as _memory
from d1saver.sql.query import Query, name_queries, q

# --- schema and migrations ----------------------------------------------------------------
#
# Forward-only steps, as Alembic's and Django's: MIGRATIONS[k - 1] takes a database from
# version k - 1 to k, and a database records each version applied, one row in d1saver_schema.
# A fresh database is created whole from schema.sql (the current schema, recording
# SCHEMA_VERSION); an older one is brought up by the steps after its version, each in one
# batch (d1saver/ops/operations.py, docs/MIGRATIONS.md). A released step never changes.


def _schema_text() -> str:
    """schema.sql: package data in an install (setup.py copies the top-level file into the
    wheel); in a source checkout or an editable install, the top-level file itself."""
    packaged = resources.files("d1saver").joinpath("schema.sql")
    if packaged.is_file():
        return packaged.read_text(encoding="utf-8")
    checkout = Path(__file__).resolve().parents[2] / "schema.sql"
    if (checkout.parent / "pyproject.toml").is_file() and checkout.is_file():
        return checkout.read_text(encoding="utf-8")
    raise FileNotFoundError("d1saver's schema.sql is missing from the package: reinstall d1saver "
                            "from a wheel or sdist built by its setup.py (which copies it in)")


def split_script(script: str) -> list[str]:
    """Split an SQL script into statements: `--` comments dropped, `;` ends a statement at a line end."""
    statements, current = [], []
    for line in script.splitlines():
        if line.lstrip().startswith("--"):
            continue
        stripped = line.split("--", 1)[0].rstrip() if "'" not in line else line.rstrip()
        if not stripped.strip():
            continue
        current.append(stripped)
        if stripped.endswith(";"):
            statements.append("\n".join(current).rstrip(";").strip())
            current = []
    if current:
        statements.append("\n".join(current).strip())
    return statements


SCHEMA_SQL = _schema_text()
SCHEMA_STATEMENTS = split_script(SCHEMA_SQL)
# schema.sql as sent, one statement each.
SCHEMA = [q(s, name=f"SCHEMA[{i}]") for i, s in enumerate(SCHEMA_STATEMENTS)]

# Version 1 as d1saver 0.1.0 released it: its schema.sql without comments, frozen (a test holds
# it to tests/data/v0_1_0_schema.sql). This code never runs it (schema.sql creates fresh
# databases); it is the base every later step starts from.
_V1 = """
CREATE TABLE IF NOT EXISTS checkpoints (
    thread_id TEXT NOT NULL,
    checkpoint_ns TEXT NOT NULL DEFAULT '',
    checkpoint_id TEXT NOT NULL,
    parent_checkpoint_id TEXT,
    type TEXT,
    checkpoint TEXT NOT NULL,
    metadata TEXT NOT NULL DEFAULT '{}',
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
CREATE TABLE IF NOT EXISTS chunks (
    thread_id TEXT NOT NULL,
    checkpoint_ns TEXT NOT NULL DEFAULT '',
    checkpoint_id TEXT NOT NULL,
    owner TEXT NOT NULL,
    seq INTEGER NOT NULL,
    data TEXT NOT NULL,
    PRIMARY KEY (thread_id, checkpoint_ns, checkpoint_id, owner, seq)
);
CREATE TABLE IF NOT EXISTS tags (
    thread_id TEXT NOT NULL,
    checkpoint_ns TEXT NOT NULL DEFAULT '',
    checkpoint_id TEXT NOT NULL,
    name TEXT NOT NULL,
    created_at TEXT NOT NULL,
    PRIMARY KEY (thread_id, checkpoint_ns, name)
);
CREATE INDEX IF NOT EXISTS tags_checkpoint ON tags (thread_id, checkpoint_ns, checkpoint_id);
CREATE TABLE IF NOT EXISTS leases (
    name TEXT PRIMARY KEY,
    holder TEXT NOT NULL,
    expires_at INTEGER NOT NULL
);
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
CREATE TABLE IF NOT EXISTS d1saver_guard (
    head_moved INTEGER CONSTRAINT head_moved CHECK (head_moved IS NULL),
    lease_lost INTEGER CONSTRAINT lease_lost CHECK (lease_lost IS NULL)
);
CREATE TABLE IF NOT EXISTS d1saver_schema (
    version INTEGER PRIMARY KEY,
    applied_at TEXT NOT NULL
);
INSERT OR IGNORE INTO d1saver_schema (version, applied_at) VALUES (1, strftime('%Y-%m-%dT%H:%M:%SZ', 'now'));
"""

MIGRATIONS: list[list[str]] = [
    # 1: d1saver 0.1.0.
    split_script(_V1),
    # 2: guards that every version-1 database can use (d1saver_guard.lease_lost was added to
    # version 1 in place, so databases created before lack it), and min_reader for rolling
    # deploys. Additive: d1saver_guard stays for 0.1.0's instances.
    [
        """
CREATE TABLE IF NOT EXISTS d1saver_guards (
    head_moved INTEGER CONSTRAINT head_moved CHECK (head_moved IS NULL),
    lease_lost INTEGER CONSTRAINT lease_lost CHECK (lease_lost IS NULL),
    schema_outdated INTEGER CONSTRAINT schema_outdated CHECK (schema_outdated IS NULL),
    schema_too_new INTEGER CONSTRAINT schema_too_new CHECK (schema_too_new IS NULL)
)""",
        "ALTER TABLE d1saver_schema ADD COLUMN min_reader INTEGER NOT NULL DEFAULT 1",
    ],
    # 3: additive.
    # - list(None) reads its pages in index order, from the cursor on, instead of sorting the
    #   whole table for every page (defect 9).
    # - A checkpoint or write row that is (re)inserted owns no pieces but those its batch
    #   inserts after it (defect 4): a value rewritten smaller, a replay, or copy_thread onto a
    #   thread that holds the same checkpoint never leave stale pieces, at no cost in request
    #   bytes. An ignored INSERT (a replayed regular write) fires nothing.
    [
        "CREATE INDEX IF NOT EXISTS checkpoints_by_id "
        "ON checkpoints (checkpoint_id, thread_id, checkpoint_ns)",
        """CREATE TRIGGER IF NOT EXISTS checkpoints_own_chunks AFTER INSERT ON checkpoints BEGIN
    DELETE FROM chunks WHERE thread_id = NEW.thread_id AND checkpoint_ns = NEW.checkpoint_ns
        AND checkpoint_id = NEW.checkpoint_id AND owner IN ('', ':metadata');
END""",
        """CREATE TRIGGER IF NOT EXISTS writes_own_chunks AFTER INSERT ON writes BEGIN
    DELETE FROM chunks WHERE thread_id = NEW.thread_id AND checkpoint_ns = NEW.checkpoint_ns
        AND checkpoint_id = NEW.checkpoint_id AND owner = NEW.task_id || '/' || NEW.idx;
END""",
    ],
    # 4: idempotency records (see FORGET_OLD_OPS): the answers of untag and of compaction
    # batches, kept so that a retry after a lost response answers as the first try did.
    # Additive.
    [
        """
CREATE TABLE IF NOT EXISTS d1saver_ops (
    op_id TEXT PRIMARY KEY,
    result TEXT NOT NULL,
    created_at INTEGER NOT NULL
)""",
        "CREATE INDEX IF NOT EXISTS d1saver_ops_created ON d1saver_ops (created_at)",
    ],
    # 5: which DeltaChannels a checkpoint declares but has never written. LangGraph replays
    # only channels in channel_versions, which lives inside the serialized checkpoint; SQL
    # walks that seek a never-written channel find no seed and read the thread's whole
    # history. A row exists only for a checkpoint with such channels (`channels`: JSON array),
    # so other graphs pay nothing. Triggers drop a checkpoint's row whenever the checkpoint is
    # written or deleted, by any statement or any d1saver version (0.1.0's included), so a
    # row is never stale. Additive.
    [
        """
CREATE TABLE IF NOT EXISTS delta_unwritten (
    thread_id TEXT NOT NULL,
    checkpoint_ns TEXT NOT NULL,
    checkpoint_id TEXT NOT NULL,
    channels TEXT NOT NULL,
    PRIMARY KEY (thread_id, checkpoint_ns, checkpoint_id)
)""",
        """
CREATE TRIGGER IF NOT EXISTS delta_unwritten_on_put AFTER INSERT ON checkpoints BEGIN
    DELETE FROM delta_unwritten WHERE thread_id = NEW.thread_id
        AND checkpoint_ns = NEW.checkpoint_ns AND checkpoint_id = NEW.checkpoint_id;
END""",
        """
CREATE TRIGGER IF NOT EXISTS delta_unwritten_on_delete AFTER DELETE ON checkpoints BEGIN
    DELETE FROM delta_unwritten WHERE thread_id = OLD.thread_id
        AND checkpoint_ns = OLD.checkpoint_ns AND checkpoint_id = OLD.checkpoint_id;
END""",
    ],
    # 6: frozen DeltaChannel histories (see FREEZE): what get_delta_channel_history returned
    # for a kept checkpoint whose ancestors compaction deleted, copied verbatim from those
    # ancestors' rows with their identity, so that walks stop there. A checkpoint deleted,
    # by any statement or d1saver version, drops its records. Additive.
    [
        """
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
    PRIMARY KEY (thread_id, checkpoint_ns, checkpoint_id, channel, kind, depth, task_id, idx)
)""",
        """
CREATE TRIGGER IF NOT EXISTS delta_frozen_on_delete AFTER DELETE ON checkpoints BEGIN
    DELETE FROM delta_frozen WHERE thread_id = OLD.thread_id
        AND checkpoint_ns = OLD.checkpoint_ns AND checkpoint_id = OLD.checkpoint_id;
END""",
    ],
    # 7: content-addressed values (docs/STORAGE_DESIGN.md). d1saver_chunks holds each chunk
    # once per thread, keyed by its hash: level 0 codec text of bytes, level n a tree node (its
    # children's refs joined by ','). Rows that hold an "m:" manifest list their chunks. Triggers
    # keep the table closed: a node is stored only if its children are, and a row only if the
    # chunks it lists are, so a chunk a writer wrongly assumed stored fails its batch
    # ("chunk_missing") instead of leaving a dangling manifest. Garbage collection (GC_CHUNKS,
    # DELETE_THREADS) keeps it exact. The two views take a put or a put_writes with its new
    # chunks in one short statement (their text travels with every request). Additive.
    [
        """
CREATE TABLE IF NOT EXISTS d1saver_chunks (
    thread_id TEXT NOT NULL,
    id TEXT NOT NULL,
    level INTEGER NOT NULL,
    data TEXT NOT NULL,
    PRIMARY KEY (thread_id, id)
) WITHOUT ROWID""",
        """
CREATE TRIGGER IF NOT EXISTS d1saver_chunks_closed AFTER INSERT ON d1saver_chunks
WHEN NEW.level > 0 BEGIN
    SELECT RAISE(ABORT, 'd1saver chunk_missing') WHERE EXISTS (
        SELECT 1 FROM json_each('["' || replace(NEW.data, ',', '","') || '"]') AS j WHERE NOT EXISTS (
            SELECT 1 FROM d1saver_chunks AS k
            WHERE k.thread_id = NEW.thread_id AND k.id = ltrim(j.value, '^')));
END""",
        """
CREATE TRIGGER IF NOT EXISTS checkpoints_chunks_closed AFTER INSERT ON checkpoints
WHEN substr(NEW.checkpoint, 1, 2) = 'm:' BEGIN
    SELECT RAISE(ABORT, 'd1saver chunk_missing') WHERE EXISTS (
        SELECT 1 FROM json_each('["' || replace(substr(NEW.checkpoint, 3), ',', '","') || '"]') AS j
        WHERE instr(j.value, ':') = 0 AND NOT EXISTS (
            SELECT 1 FROM d1saver_chunks AS k
            WHERE k.thread_id = NEW.thread_id AND k.id = ltrim(j.value, '^')));
END""",
        """
CREATE TRIGGER IF NOT EXISTS writes_chunks_closed AFTER INSERT ON writes
WHEN substr(NEW.value, 1, 2) = 'm:' BEGIN
    SELECT RAISE(ABORT, 'd1saver chunk_missing') WHERE EXISTS (
        SELECT 1 FROM json_each('["' || replace(substr(NEW.value, 3), ',', '","') || '"]') AS j
        WHERE instr(j.value, ':') = 0 AND NOT EXISTS (
            SELECT 1 FROM d1saver_chunks AS k
            WHERE k.thread_id = NEW.thread_id AND k.id = ltrim(j.value, '^')));
END""",
        """
CREATE VIEW IF NOT EXISTS d1saver_put (thread_id, checkpoint_ns, checkpoint_id,
    parent_checkpoint_id, type, checkpoint, metadata, channels, run_id, ts, chunks)
AS SELECT NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL WHERE 0""",
        """
CREATE TRIGGER IF NOT EXISTS d1saver_put_row INSTEAD OF INSERT ON d1saver_put BEGIN
    INSERT OR IGNORE INTO d1saver_chunks (thread_id, id, level, data)
    SELECT NEW.thread_id, value->>0, value->>1, value->>2 FROM json_each(NEW.chunks);
    INSERT OR REPLACE INTO checkpoints (thread_id, checkpoint_ns, checkpoint_id,
        parent_checkpoint_id, type, checkpoint, metadata, channels, run_id, ts)
    VALUES (NEW.thread_id, NEW.checkpoint_ns, NEW.checkpoint_id, NEW.parent_checkpoint_id,
        COALESCE(NEW.type, 'msgpack'), NEW.checkpoint, NEW.metadata, NEW.channels,
        NEW.run_id, NEW.ts);
END""",
        """
CREATE VIEW IF NOT EXISTS d1saver_put_writes (thread_id, checkpoint_ns, checkpoint_id,
    task_id, task_path, special, regular, chunks)
AS SELECT NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL WHERE 0""",
        """
CREATE TRIGGER IF NOT EXISTS d1saver_put_writes_rows INSTEAD OF INSERT ON d1saver_put_writes
BEGIN
    INSERT OR IGNORE INTO d1saver_chunks (thread_id, id, level, data)
    SELECT NEW.thread_id, value->>0, value->>1, value->>2 FROM json_each(NEW.chunks);
    INSERT OR REPLACE INTO writes (thread_id, checkpoint_ns, checkpoint_id, task_id,
        task_path, idx, channel, type, value)
    SELECT NEW.thread_id, NEW.checkpoint_ns, NEW.checkpoint_id, NEW.task_id, NEW.task_path,
        value->>0, value->>1, COALESCE(value->>2, 'msgpack'), value->>3
    FROM json_each(NEW.special);
    INSERT OR IGNORE INTO writes (thread_id, checkpoint_ns, checkpoint_id, task_id,
        task_path, idx, channel, type, value)
    SELECT NEW.thread_id, NEW.checkpoint_ns, NEW.checkpoint_id, NEW.task_id, NEW.task_path,
        json_extract(NEW.regular, '$[0][0]'), '', 'pack', 'p:' || NEW.regular
    WHERE json_array_length(NEW.regular) > 1 AND NOT EXISTS (
        SELECT 1 FROM writes WHERE thread_id = NEW.thread_id
            AND checkpoint_ns = NEW.checkpoint_ns AND checkpoint_id = NEW.checkpoint_id
            AND task_id = NEW.task_id AND idx >= 0);
    INSERT OR IGNORE INTO writes (thread_id, checkpoint_ns, checkpoint_id, task_id,
        task_path, idx, channel, type, value)
    SELECT NEW.thread_id, NEW.checkpoint_ns, NEW.checkpoint_id, NEW.task_id, NEW.task_path,
        j.value->>0, j.value->>1, COALESCE(j.value->>2, 'msgpack'), j.value->>3
    FROM json_each(NEW.regular) AS j
    WHERE NOT EXISTS (
        SELECT 1 FROM writes AS p, json_each(CASE WHEN substr(p.value, 1, 2) = 'p:'
                                                  THEN substr(p.value, 3) ELSE '[]' END) AS q
        WHERE p.thread_id = NEW.thread_id AND p.checkpoint_ns = NEW.checkpoint_ns
            AND p.checkpoint_id = NEW.checkpoint_id AND p.task_id = NEW.task_id
            AND q.value->>0 = j.value->>0);
END""",
        """
CREATE TRIGGER IF NOT EXISTS writes_pack_chunks_closed AFTER INSERT ON writes
WHEN substr(NEW.value, 1, 2) = 'p:' BEGIN
    SELECT RAISE(ABORT, 'd1saver chunk_missing') WHERE EXISTS (
        SELECT 1 FROM json_each(substr(NEW.value, 3)) AS w,
            json_each(CASE WHEN substr(w.value->>3, 1, 2) = 'm:'
                THEN '["' || replace(substr(w.value->>3, 3), ',', '","') || '"]'
                ELSE '[]' END) AS j
        WHERE instr(j.value, ':') = 0 AND NOT EXISTS (
            SELECT 1 FROM d1saver_chunks AS k
            WHERE k.thread_id = NEW.thread_id AND k.id = ltrim(j.value, '^')));
END""",
    ],
    # 8: values written from here on may be "r:" (raw deflate with DICT_V2, d1saver/storage/codec.py),
    # which an older reader cannot decode: a contract step with no DDL, only its min_reader.
    [],
    # 9: derived rows bound to what they were derived from (issue 20).
    # - delta_frozen.parent: the holder's parent a frozen record was computed for (retention
    #   sets it as it relinks the holder: REBIND_FROZEN; records already stored are bound to
    #   their holder's parent now). A checkpoint row inserted by any statement (a put, a copy,
    #   an older d1saver's) drops its records unless its parent is that one, with their pieces:
    #   INSERT OR REPLACE fires no delete trigger, so a record would otherwise outlive the row
    #   it was computed for (a restored backup read the messages after a tag twice). A put
    #   retried after a prune relinked its row names a parent that is gone: the row keeps the
    #   parent its records hold for (else the retry lost the first messages).
    # - Chunk ids hash a domain tag first (d1saver/storage/chunking.py: a leaf could spell a
    #   node's text): a version-8 reader cannot check them, hence min_reader 9.
    [
        "ALTER TABLE delta_frozen ADD COLUMN parent TEXT",
        """
UPDATE delta_frozen SET parent = (
    SELECT c.parent_checkpoint_id FROM checkpoints AS c WHERE c.thread_id = delta_frozen.thread_id
        AND c.checkpoint_ns = delta_frozen.checkpoint_ns
        AND c.checkpoint_id = delta_frozen.checkpoint_id)""",
        """
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
          AND p.checkpoint_ns = NEW.checkpoint_ns AND p.checkpoint_id = NEW.parent_checkpoint_id);
    DELETE FROM delta_frozen WHERE thread_id = NEW.thread_id
        AND checkpoint_ns = NEW.checkpoint_ns AND checkpoint_id = NEW.checkpoint_id
        AND parent IS NOT (SELECT c.parent_checkpoint_id FROM checkpoints AS c
            WHERE c.thread_id = NEW.thread_id AND c.checkpoint_ns = NEW.checkpoint_ns
              AND c.checkpoint_id = NEW.checkpoint_id);
    DELETE FROM chunks WHERE thread_id = NEW.thread_id AND checkpoint_ns = NEW.checkpoint_ns
        AND checkpoint_id = NEW.checkpoint_id AND substr(owner, 1, 2) = 'f/'
        AND NOT EXISTS (SELECT 1 FROM delta_frozen AS f WHERE f.thread_id = NEW.thread_id
            AND f.checkpoint_ns = NEW.checkpoint_ns AND f.checkpoint_id = NEW.checkpoint_id);
END""",
    ],
    # 10: the compaction runs of the gateway Worker's Cron Trigger, one row per run and database
    # (`d1saver compact --history`), and the cursor a run stopped at, so that the next run goes
    # on from there (worker/compaction.js). Additive.
    [
        """
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
)""",
        "CREATE INDEX IF NOT EXISTS d1saver_compaction_runs_started ON d1saver_compaction_runs (started_at)",
        """
CREATE TABLE IF NOT EXISTS d1saver_compaction_cursor (
    name TEXT PRIMARY KEY,
    after TEXT NOT NULL,
    run_id TEXT NOT NULL,
    updated_at TEXT NOT NULL
)""",
    ],
    # 11: long-term memory and the node cache (D1Store, D1Cache: d1saver/sql/memory.py), additive.
    list(_memory.MEMORY_DDL),
    # 12: maintenance across databases bound to the application's operations (issue 20; numbered 9 on its branch).
    # - d1saver_moves: a move (`d1saver rebalance`) registers the thread at its new home
    #   before it reads the old one; delete_thread and prune (any strategy) of the thread drop
    #   the registration in the same batch, and the move's publishing batch fails
    #   ("move_voided") without it: a copy read before a delete or a prune never lands after it.
    # - d1saver_staged: rows staged under a hidden id (a copy between databases, a move) name
    #   what they will become, what they came from, and when they expire, so that every
    #   cleanup path finds them; the renaming batch fails ("staging_lost") if they were removed.
    #   d1saver_staged_elsewhere, in the source's database, names where a copy of it is staged,
    #   so that delete_thread of the source removes that too.
    # Additive.
    [
        """
CREATE TABLE IF NOT EXISTS d1saver_moves (
    thread_id TEXT PRIMARY KEY,
    move_id TEXT NOT NULL,
    created_at INTEGER NOT NULL
)""",
        """
CREATE TABLE IF NOT EXISTS d1saver_staged (
    staging_id TEXT PRIMARY KEY,
    thread_id TEXT NOT NULL,
    source_id TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    expires_at INTEGER NOT NULL
)""",
        "CREATE INDEX IF NOT EXISTS d1saver_staged_thread ON d1saver_staged (thread_id)",
        "CREATE INDEX IF NOT EXISTS d1saver_staged_source ON d1saver_staged (source_id)",
        """
CREATE TRIGGER IF NOT EXISTS d1saver_staged_removed AFTER DELETE ON d1saver_staged BEGIN
    DELETE FROM writes WHERE thread_id = OLD.staging_id;
    DELETE FROM d1saver_chunks WHERE thread_id = OLD.staging_id;
    DELETE FROM chunks WHERE thread_id = OLD.staging_id;
    DELETE FROM tags WHERE thread_id = OLD.staging_id;
    DELETE FROM checkpoints WHERE thread_id = OLD.staging_id;
END""",
        """
CREATE TABLE IF NOT EXISTS d1saver_staged_elsewhere (
    source_id TEXT NOT NULL,
    database_id TEXT NOT NULL,
    staging_id TEXT NOT NULL,
    expires_at INTEGER NOT NULL,
    PRIMARY KEY (source_id, database_id, staging_id)
)""",
        """
CREATE TABLE IF NOT EXISTS d1saver_move_guards (
    move_voided INTEGER CONSTRAINT move_voided CHECK (move_voided IS NULL),
    staging_lost INTEGER CONSTRAINT staging_lost CHECK (staging_lost IS NULL)
)""",
    ],
    # 13, 14, 15: placeholders on this branch (search, issue 31 part 3), cut before main took
    # them: 13 is reserved for issue 30's store and cache exactness, 14 (d1saver_gc_pending)
    # and 15 ("s:" values, a contract step) are main's. The lead takes main's steps at merge.
    [],
    [],
    [],
    # 16: the prefilter of search by meaning (issue 31): each vector's code (d1saver/memory/
    # codes.py), written with it by PUT_VECTORS. Additive: an older d1saver writes vectors
    # without one (NULL), and the store re-ranks those always.
    ["ALTER TABLE store_vectors ADD COLUMN code TEXT"],
    # Append the next step here, as a list of statements; never edit one above, and update
    # schema.sql to match (docs/MIGRATIONS.md).
]
SCHEMA_VERSION = len(MIGRATIONS)


def migration(version: int) -> list[Query]:
    """The step to `version` as sent (MIGRATIONS[version - 1], each statement minified)."""
    return [q(s, name=f"MIGRATIONS[{version - 1}][{i}]")
            for i, s in enumerate(MIGRATIONS[version - 1])]


# Contract steps, which code of older versions cannot use: version -> the oldest schema version
# whose d1saver still works once that step is applied. A step not listed is additive.
MIN_READER: dict[int, int] = {
    # Rows written from version 7 on may be "m:" manifests over d1saver_chunks and "p:" packed
    # writes, which code of an older schema cannot read (0.1.0 reads neither: docs/MIGRATIONS.md).
    7: 7,
    # Values written from version 8 on may be "r:" (d1saver/storage/codec.py): version 7 cannot read them.
    8: 8,
    # Chunk ids from version 9 on are domain-separated: version 8 cannot check them.
    9: 9,
}


def min_reader(version: int) -> int:
    """The oldest schema version whose d1saver can use a database at `version`."""
    return max([1, *(m for v, m in MIN_READER.items() if v <= version)])


# Every version the database records, whole rows. It must run on every version, past and future
# (version 1's rows have no min_reader), so it selects what the rows hold and the reader
# (_rows.schema_info) takes columns by name. It goes first in an instance's first request.
READ_SCHEMA = q("SELECT * FROM d1saver_schema")
# First in a migration's batch: records the version, and fails the batch ("UNIQUE constraint
# failed: d1saver_schema.version") when it is recorded already: another instance applied the
# step, or this one did before its response was lost.
CLAIM_VERSION = q("""
INSERT INTO d1saver_schema (version, applied_at)
VALUES (:version, strftime('%Y-%m-%dT%H:%M:%SZ', 'now'))""")
# Last in a migration's batch (the column exists from version 2 on).
SET_MIN_READER = q("UPDATE d1saver_schema SET min_reader = :min_reader WHERE version = :version")

# --- put and put_writes -------------------------------------------------------------------

# Idempotent: a retried put rewrites the same row (INSERT OR REPLACE, as SqliteSaver; nothing
# references a checkpoint row, so replacing loses nothing, in a third of the text of an
# upsert, which travels with every put; version 3's trigger drops the row's old pieces).
# Both hot inserts name their columns, although their text travels with every put and
# put_writes (about 100 bytes each): a statement that supplies every column in table order
# breaks as soon as a migration adds one, in every instance of the older release still
# running during a rolling deploy (0.1.0's did). A column added later must have a default:
# an older instance's REPLACE of the same row resets it.
CHECKPOINT_COLUMNS = ("thread_id", "checkpoint_ns", "checkpoint_id", "parent_checkpoint_id",
                      "type", "checkpoint", "metadata", "channels", "run_id", "ts")
WRITE_COLUMNS = ("thread_id", "checkpoint_ns", "checkpoint_id", "task_id", "task_path", "idx",
                 "channel", "type", "value")
UPSERT_CHECKPOINT = q("""
INSERT OR REPLACE INTO checkpoints (thread_id, checkpoint_ns, checkpoint_id,
    parent_checkpoint_id, type, checkpoint, metadata, channels, run_id, ts)
VALUES (:thread_id, :checkpoint_ns, :checkpoint_id,
    :parent_checkpoint_id, :type, :checkpoint, :metadata, :channels, :run_id, :ts)""")

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
INSERT_WRITES_REPLACE = q("""
INSERT OR REPLACE INTO writes (thread_id, checkpoint_ns, checkpoint_id, task_id, task_path,
    idx, channel, type, value)
SELECT :thread_id, :checkpoint_ns, :checkpoint_id, :task_id, :task_path,
    value->>0, value->>1, value->>2, value->>3
FROM json_each(:writes)""")
# Nor an index a "p:" row of the task holds (migration 7): the first write stays the one read.
INSERT_WRITES_IGNORE = q("""
INSERT OR IGNORE INTO writes (thread_id, checkpoint_ns, checkpoint_id, task_id, task_path,
    idx, channel, type, value)
SELECT :thread_id, :checkpoint_ns, :checkpoint_id, :task_id, :task_path,
    j.value->>0, j.value->>1, j.value->>2, j.value->>3
FROM json_each(:writes) AS j
WHERE NOT EXISTS (
    SELECT 1 FROM writes AS p, json_each(CASE WHEN substr(p.value, 1, 2) = 'p:'
                                              THEN substr(p.value, 3) ELSE '[]' END) AS q
    WHERE p.thread_id = :thread_id AND p.checkpoint_ns = :checkpoint_ns
        AND p.checkpoint_id = :checkpoint_id AND p.task_id = :task_id
        AND q.value->>0 = j.value->>0)""")

# Values over D1's 2 MB limit: the owner row holds "c:<n>", the pieces (seq 0..n-1) live
# here. Pieces follow their row in the batch. An upserted row (checkpoint, special write)
# deletes its owner's pieces and inserts its own.
DELETE_CHUNKS_OF = q("""
DELETE FROM chunks WHERE thread_id = :thread_id AND checkpoint_ns = :checkpoint_ns
    AND checkpoint_id = :checkpoint_id AND owner = :owner""")
INSERT_CHUNK = q("""
INSERT OR REPLACE INTO chunks (thread_id, checkpoint_ns, checkpoint_id, owner, seq, data)
VALUES (:thread_id, :checkpoint_ns, :checkpoint_id, :owner, :seq, :data)""")
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
PUT_UNWRITTEN = q("""
INSERT OR REPLACE INTO delta_unwritten (thread_id, checkpoint_ns, checkpoint_id, channels)
VALUES (:thread_id, :checkpoint_ns, :checkpoint_id, :channels)""")

# --- reads --------------------------------------------------------------------------------
#
# One page of checkpoints together with their writes and chunks, in ONE statement, in the
# narrowest of three scopes, each read in page order from its cursor on: one namespace of a
# thread (get_tuple, and list with a namespace) by the primary key (SELECT_PAGE_THREAD_NS),
# every namespace of a thread (SELECT_PAGE_THREAD, which sorts that thread's rows), every
# thread (list(None): SELECT_PAGE_ALL, by checkpoints_by_id). Each scope comes without a
# metadata filter (get_tuple, most lists) and with one (..._FILTERED), so that the filter's
# text travels only with the lists that filter. Parameters:
#   :thread_id :checkpoint_ns (the scope)   :checkpoint_id (NULL: any)
#   :before (checkpoint_id upper bound, NULL: none)   :limit (rows asked)
#   :after_checkpoint_id, :after_thread_id, :after_checkpoint_ns: the keyset cursor, the
#       previous page's last row (NULL: first page; one namespace needs only its id)
#   :filter (..._FILTERED): a JSON array of [path, doc] pairs, one per filter key, where path
#       is '$.' + the validated key and doc the JSON text of an object holding the wanted
#       value at that path.
#
# The cursor (or `before`) is an upper bound an index can seek to: the scope compares the
# order columns with COALESCE(:after_checkpoint_id, :before, x'') and friends, which are
# constants to the planner (a BLOB sorts after every TEXT, so x'' bounds nothing), where
# ":after_checkpoint_id IS NULL OR ..." would make every page scan from the newest row.
#
# The metadata filter, as InMemorySaver's `query == metadata.get(key)` (defect 6): the value
# at f.path in the metadata and in f.doc are equal JSON trees: the same nodes (by full key,
# so object key order does not matter), each of the same kind (numbers and booleans are one
# kind, so 1 == 1.0 == true) and atom. A null query matches null or a missing key. Chunked
# metadata (d1saver/storage/values.py) that lacks the key in its column passes here and is
# decided in Python. Trees are read from the stored text itself: no number is re-rendered.
#
# Content-addressed chunks (migration 7) ride in the same statement as the rows that list them
# (through `out`, whose columns take the first SELECT's affinity: integers may come back as
# text, so readers convert them). `vals` holds the manifest column of each returned row;
# `refs` gathers every id the "m:" manifests and "p:" packs in `vals` reach (nodes opened
# level by level). UNION, not UNION ALL, so each chunk is returned once however many rows list
# it. A frozen value's pieces live with its holder in chunks, owner 'f/<src_checkpoint_id>/<owner>':
# the page leaves them to the DeltaChannel prefetch.
#
# D1's REST API carries a statement's text in every request body, and the page statements are
# the longest sent at run time (the first get_tuple of each graph invocation sends the page
# and its DeltaChannel prefetch together): the minifier (d1saver/sql/query.py) sends them
# tight.
#
# Columns of every page statement, and of its DeltaChannel prefetch, per row kind:
#   'c' checkpoint: ref parent_checkpoint_id, metadata, channels, type, value the checkpoint
#                   (with keys a sealed checkpoint is bound to metadata and channels)
#   'w' write:      ref task_id, task_path, idx, channels the channel, type, value
#   'k' piece:      ref owner, idx seq, value the piece's text
#   'h' chunk:      thread_id, ref the chunk id, value its data
#   'a' ancestor (prefetch): ref parent_checkpoint_id, channels, type, and metadata and value
#                   the checkpoint only when it seeds a sought channel
#   'f' frozen (prefetch): checkpoint_id the holder, ref the identity of the row the value
#                   came from ([kind, src_checkpoint_id, task_id, task_path, idx, channel,
#                   depth]), metadata, channels, type, value
PAGE_COLUMNS = ("kind", "thread_id", "checkpoint_ns", "checkpoint_id", "ref", "metadata",
                "task_path", "idx", "channels", "type", "value")
SELECT_PAGE_THREAD_NS = q("""
WITH RECURSIVE
page AS (
    SELECT thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id, type, checkpoint,
           metadata, channels
    FROM checkpoints AS c
    WHERE thread_id = :thread_id AND checkpoint_ns = :checkpoint_ns
      AND checkpoint_id < COALESCE(:after_checkpoint_id, :before, x'')
      AND (:checkpoint_id IS NULL OR checkpoint_id = :checkpoint_id)
    ORDER BY checkpoint_id DESC, thread_id DESC, checkpoint_ns DESC
    LIMIT :limit
),
out AS (
SELECT 'c' AS kind, thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id AS ref,
       metadata, NULL AS task_path, NULL AS idx, channels, type, checkpoint AS value
FROM page
UNION ALL
SELECT 'w', thread_id, checkpoint_ns, checkpoint_id, w.task_id, NULL, w.task_path, w.idx,
       w.channel, w.type, w.value
FROM page AS p CROSS JOIN writes AS w USING (thread_id, checkpoint_ns, checkpoint_id)
UNION ALL
SELECT 'k', thread_id, checkpoint_ns, checkpoint_id, k.owner, NULL, NULL, k.seq, NULL, NULL,
       k.data
FROM page AS p CROSS JOIN chunks AS k USING (thread_id, checkpoint_ns, checkpoint_id)
WHERE NOT substr(k.owner, 1, 2) = 'f/'
),
vals(thread_id, v) AS (
    SELECT thread_id, CASE WHEN kind IN ('c', 'w') THEN value END FROM out
),
refs(thread_id, id) AS (
    SELECT o.thread_id, ltrim(j.value, '^')
    FROM vals AS o, json_each(CASE WHEN substr(o.v, 1, 2) = 'm:'
        THEN '["' || replace(substr(o.v, 3), ',', '","') || '"]' ELSE '[]' END) AS j
    WHERE instr(j.value, ':') = 0
    UNION
    SELECT o.thread_id, ltrim(j.value, '^')
    FROM vals AS o, json_each(CASE WHEN substr(o.v, 1, 2) = 'p:'
        THEN substr(o.v, 3) ELSE '[]' END) AS w,
        json_each(CASE WHEN substr(w.value->>3, 1, 2) = 'm:'
        THEN '["' || replace(substr(w.value->>3, 3), ',', '","') || '"]' ELSE '[]' END) AS j
    WHERE instr(j.value, ':') = 0
    UNION
    SELECT r.thread_id, ltrim(j.value, '^')
    FROM refs AS r CROSS JOIN d1saver_chunks AS n USING (thread_id, id),
        json_each('["' || replace(n.data, ',', '","') || '"]') AS j
    WHERE n.level > 0
)
SELECT * FROM out
UNION ALL
SELECT 'h', thread_id, NULL, NULL, id, NULL, NULL, NULL, NULL, NULL, k.data
FROM refs AS r CROSS JOIN d1saver_chunks AS k USING (thread_id, id)""")
SELECT_PAGE_THREAD = q("""
WITH RECURSIVE
page AS (
    SELECT thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id, type, checkpoint,
           metadata, channels
    FROM checkpoints AS c
    WHERE thread_id = :thread_id
      AND (checkpoint_id, thread_id, checkpoint_ns)
          < (COALESCE(:after_checkpoint_id, :before, x''), COALESCE(:after_thread_id, ''),
             COALESCE(:after_checkpoint_ns, ''))
      AND (:checkpoint_id IS NULL OR checkpoint_id = :checkpoint_id)
    ORDER BY checkpoint_id DESC, thread_id DESC, checkpoint_ns DESC
    LIMIT :limit
),
out AS (
SELECT 'c' AS kind, thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id AS ref,
       metadata, NULL AS task_path, NULL AS idx, channels, type, checkpoint AS value
FROM page
UNION ALL
SELECT 'w', thread_id, checkpoint_ns, checkpoint_id, w.task_id, NULL, w.task_path, w.idx,
       w.channel, w.type, w.value
FROM page AS p CROSS JOIN writes AS w USING (thread_id, checkpoint_ns, checkpoint_id)
UNION ALL
SELECT 'k', thread_id, checkpoint_ns, checkpoint_id, k.owner, NULL, NULL, k.seq, NULL, NULL,
       k.data
FROM page AS p CROSS JOIN chunks AS k USING (thread_id, checkpoint_ns, checkpoint_id)
WHERE NOT substr(k.owner, 1, 2) = 'f/'
),
vals(thread_id, v) AS (
    SELECT thread_id, CASE WHEN kind IN ('c', 'w') THEN value END FROM out
),
refs(thread_id, id) AS (
    SELECT o.thread_id, ltrim(j.value, '^')
    FROM vals AS o, json_each(CASE WHEN substr(o.v, 1, 2) = 'm:'
        THEN '["' || replace(substr(o.v, 3), ',', '","') || '"]' ELSE '[]' END) AS j
    WHERE instr(j.value, ':') = 0
    UNION
    SELECT o.thread_id, ltrim(j.value, '^')
    FROM vals AS o, json_each(CASE WHEN substr(o.v, 1, 2) = 'p:'
        THEN substr(o.v, 3) ELSE '[]' END) AS w,
        json_each(CASE WHEN substr(w.value->>3, 1, 2) = 'm:'
        THEN '["' || replace(substr(w.value->>3, 3), ',', '","') || '"]' ELSE '[]' END) AS j
    WHERE instr(j.value, ':') = 0
    UNION
    SELECT r.thread_id, ltrim(j.value, '^')
    FROM refs AS r CROSS JOIN d1saver_chunks AS n USING (thread_id, id),
        json_each('["' || replace(n.data, ',', '","') || '"]') AS j
    WHERE n.level > 0
)
SELECT * FROM out
UNION ALL
SELECT 'h', thread_id, NULL, NULL, id, NULL, NULL, NULL, NULL, NULL, k.data
FROM refs AS r CROSS JOIN d1saver_chunks AS k USING (thread_id, id)""")
SELECT_PAGE_ALL = q("""
WITH RECURSIVE
page AS (
    SELECT thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id, type, checkpoint,
           metadata, channels
    FROM checkpoints AS c
    WHERE (checkpoint_id, thread_id, checkpoint_ns)
          < (COALESCE(:after_checkpoint_id, :before, x''), COALESCE(:after_thread_id, ''),
             COALESCE(:after_checkpoint_ns, ''))
      AND substr(thread_id, 1, 9) <> char(31) || 'd1saver-'
      AND (:checkpoint_id IS NULL OR checkpoint_id = :checkpoint_id)
    ORDER BY checkpoint_id DESC, thread_id DESC, checkpoint_ns DESC
    LIMIT :limit
),
out AS (
SELECT 'c' AS kind, thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id AS ref,
       metadata, NULL AS task_path, NULL AS idx, channels, type, checkpoint AS value
FROM page
UNION ALL
SELECT 'w', thread_id, checkpoint_ns, checkpoint_id, w.task_id, NULL, w.task_path, w.idx,
       w.channel, w.type, w.value
FROM page AS p CROSS JOIN writes AS w USING (thread_id, checkpoint_ns, checkpoint_id)
UNION ALL
SELECT 'k', thread_id, checkpoint_ns, checkpoint_id, k.owner, NULL, NULL, k.seq, NULL, NULL,
       k.data
FROM page AS p CROSS JOIN chunks AS k USING (thread_id, checkpoint_ns, checkpoint_id)
WHERE NOT substr(k.owner, 1, 2) = 'f/'
),
vals(thread_id, v) AS (
    SELECT thread_id, CASE WHEN kind IN ('c', 'w') THEN value END FROM out
),
refs(thread_id, id) AS (
    SELECT o.thread_id, ltrim(j.value, '^')
    FROM vals AS o, json_each(CASE WHEN substr(o.v, 1, 2) = 'm:'
        THEN '["' || replace(substr(o.v, 3), ',', '","') || '"]' ELSE '[]' END) AS j
    WHERE instr(j.value, ':') = 0
    UNION
    SELECT o.thread_id, ltrim(j.value, '^')
    FROM vals AS o, json_each(CASE WHEN substr(o.v, 1, 2) = 'p:'
        THEN substr(o.v, 3) ELSE '[]' END) AS w,
        json_each(CASE WHEN substr(w.value->>3, 1, 2) = 'm:'
        THEN '["' || replace(substr(w.value->>3, 3), ',', '","') || '"]' ELSE '[]' END) AS j
    WHERE instr(j.value, ':') = 0
    UNION
    SELECT r.thread_id, ltrim(j.value, '^')
    FROM refs AS r CROSS JOIN d1saver_chunks AS n USING (thread_id, id),
        json_each('["' || replace(n.data, ',', '","') || '"]') AS j
    WHERE n.level > 0
)
SELECT * FROM out
UNION ALL
SELECT 'h', thread_id, NULL, NULL, id, NULL, NULL, NULL, NULL, NULL, k.data
FROM refs AS r CROSS JOIN d1saver_chunks AS k USING (thread_id, id)""")
SELECT_PAGE_THREAD_NS_FILTERED = q("""
WITH RECURSIVE
page AS (
    SELECT thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id, type, checkpoint,
           metadata, channels
    FROM checkpoints AS c
    WHERE thread_id = :thread_id AND checkpoint_ns = :checkpoint_ns
      AND checkpoint_id < COALESCE(:after_checkpoint_id, :before, x'')
      AND (:checkpoint_id IS NULL OR checkpoint_id = :checkpoint_id)
      AND NOT EXISTS (
    SELECT 1 FROM (SELECT value ->> 0 AS path, value ->> 1 AS doc FROM json_each(:filter)) AS f
    WHERE NOT (CASE WHEN json_type(f.doc, f.path) = 'null'
        THEN COALESCE(json_type(c.metadata, f.path), 'null') = 'null'
        ELSE (SELECT COUNT(*) FROM json_tree(c.metadata, f.path))
             = (SELECT COUNT(*) FROM json_tree(f.doc, f.path))
         AND NOT EXISTS (SELECT 1 FROM json_tree(f.doc, f.path) AS q WHERE NOT EXISTS (
             SELECT 1 FROM json_tree(c.metadata, f.path) AS m
             WHERE m.fullkey = q.fullkey AND m.atom IS q.atom
                 AND CASE WHEN m.type IN ('integer','real','true','false') THEN 'n'
                 ELSE m.type END = CASE WHEN q.type IN ('integer','real','true','false')
                 THEN 'n' ELSE q.type END))
        END
        OR (json_type(c.metadata, f.path) IS NULL
            AND json_type(c.metadata, '$."d1saver:metadata"') IS NOT NULL)))
    ORDER BY checkpoint_id DESC, thread_id DESC, checkpoint_ns DESC
    LIMIT :limit
),
out AS (
SELECT 'c' AS kind, thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id AS ref,
       metadata, NULL AS task_path, NULL AS idx, channels, type, checkpoint AS value
FROM page
UNION ALL
SELECT 'w', thread_id, checkpoint_ns, checkpoint_id, w.task_id, NULL, w.task_path, w.idx,
       w.channel, w.type, w.value
FROM page AS p CROSS JOIN writes AS w USING (thread_id, checkpoint_ns, checkpoint_id)
UNION ALL
SELECT 'k', thread_id, checkpoint_ns, checkpoint_id, k.owner, NULL, NULL, k.seq, NULL, NULL,
       k.data
FROM page AS p CROSS JOIN chunks AS k USING (thread_id, checkpoint_ns, checkpoint_id)
WHERE NOT substr(k.owner, 1, 2) = 'f/'
),
vals(thread_id, v) AS (
    SELECT thread_id, CASE WHEN kind IN ('c', 'w') THEN value END FROM out
),
refs(thread_id, id) AS (
    SELECT o.thread_id, ltrim(j.value, '^')
    FROM vals AS o, json_each(CASE WHEN substr(o.v, 1, 2) = 'm:'
        THEN '["' || replace(substr(o.v, 3), ',', '","') || '"]' ELSE '[]' END) AS j
    WHERE instr(j.value, ':') = 0
    UNION
    SELECT o.thread_id, ltrim(j.value, '^')
    FROM vals AS o, json_each(CASE WHEN substr(o.v, 1, 2) = 'p:'
        THEN substr(o.v, 3) ELSE '[]' END) AS w,
        json_each(CASE WHEN substr(w.value->>3, 1, 2) = 'm:'
        THEN '["' || replace(substr(w.value->>3, 3), ',', '","') || '"]' ELSE '[]' END) AS j
    WHERE instr(j.value, ':') = 0
    UNION
    SELECT r.thread_id, ltrim(j.value, '^')
    FROM refs AS r CROSS JOIN d1saver_chunks AS n USING (thread_id, id),
        json_each('["' || replace(n.data, ',', '","') || '"]') AS j
    WHERE n.level > 0
)
SELECT * FROM out
UNION ALL
SELECT 'h', thread_id, NULL, NULL, id, NULL, NULL, NULL, NULL, NULL, k.data
FROM refs AS r CROSS JOIN d1saver_chunks AS k USING (thread_id, id)""")
SELECT_PAGE_THREAD_FILTERED = q("""
WITH RECURSIVE
page AS (
    SELECT thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id, type, checkpoint,
           metadata, channels
    FROM checkpoints AS c
    WHERE thread_id = :thread_id
      AND (checkpoint_id, thread_id, checkpoint_ns)
          < (COALESCE(:after_checkpoint_id, :before, x''), COALESCE(:after_thread_id, ''),
             COALESCE(:after_checkpoint_ns, ''))
      AND (:checkpoint_id IS NULL OR checkpoint_id = :checkpoint_id)
      AND NOT EXISTS (
    SELECT 1 FROM (SELECT value ->> 0 AS path, value ->> 1 AS doc FROM json_each(:filter)) AS f
    WHERE NOT (CASE WHEN json_type(f.doc, f.path) = 'null'
        THEN COALESCE(json_type(c.metadata, f.path), 'null') = 'null'
        ELSE (SELECT COUNT(*) FROM json_tree(c.metadata, f.path))
             = (SELECT COUNT(*) FROM json_tree(f.doc, f.path))
         AND NOT EXISTS (SELECT 1 FROM json_tree(f.doc, f.path) AS q WHERE NOT EXISTS (
             SELECT 1 FROM json_tree(c.metadata, f.path) AS m
             WHERE m.fullkey = q.fullkey AND m.atom IS q.atom
                 AND CASE WHEN m.type IN ('integer','real','true','false') THEN 'n'
                 ELSE m.type END = CASE WHEN q.type IN ('integer','real','true','false')
                 THEN 'n' ELSE q.type END))
        END
        OR (json_type(c.metadata, f.path) IS NULL
            AND json_type(c.metadata, '$."d1saver:metadata"') IS NOT NULL)))
    ORDER BY checkpoint_id DESC, thread_id DESC, checkpoint_ns DESC
    LIMIT :limit
),
out AS (
SELECT 'c' AS kind, thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id AS ref,
       metadata, NULL AS task_path, NULL AS idx, channels, type, checkpoint AS value
FROM page
UNION ALL
SELECT 'w', thread_id, checkpoint_ns, checkpoint_id, w.task_id, NULL, w.task_path, w.idx,
       w.channel, w.type, w.value
FROM page AS p CROSS JOIN writes AS w USING (thread_id, checkpoint_ns, checkpoint_id)
UNION ALL
SELECT 'k', thread_id, checkpoint_ns, checkpoint_id, k.owner, NULL, NULL, k.seq, NULL, NULL,
       k.data
FROM page AS p CROSS JOIN chunks AS k USING (thread_id, checkpoint_ns, checkpoint_id)
WHERE NOT substr(k.owner, 1, 2) = 'f/'
),
vals(thread_id, v) AS (
    SELECT thread_id, CASE WHEN kind IN ('c', 'w') THEN value END FROM out
),
refs(thread_id, id) AS (
    SELECT o.thread_id, ltrim(j.value, '^')
    FROM vals AS o, json_each(CASE WHEN substr(o.v, 1, 2) = 'm:'
        THEN '["' || replace(substr(o.v, 3), ',', '","') || '"]' ELSE '[]' END) AS j
    WHERE instr(j.value, ':') = 0
    UNION
    SELECT o.thread_id, ltrim(j.value, '^')
    FROM vals AS o, json_each(CASE WHEN substr(o.v, 1, 2) = 'p:'
        THEN substr(o.v, 3) ELSE '[]' END) AS w,
        json_each(CASE WHEN substr(w.value->>3, 1, 2) = 'm:'
        THEN '["' || replace(substr(w.value->>3, 3), ',', '","') || '"]' ELSE '[]' END) AS j
    WHERE instr(j.value, ':') = 0
    UNION
    SELECT r.thread_id, ltrim(j.value, '^')
    FROM refs AS r CROSS JOIN d1saver_chunks AS n USING (thread_id, id),
        json_each('["' || replace(n.data, ',', '","') || '"]') AS j
    WHERE n.level > 0
)
SELECT * FROM out
UNION ALL
SELECT 'h', thread_id, NULL, NULL, id, NULL, NULL, NULL, NULL, NULL, k.data
FROM refs AS r CROSS JOIN d1saver_chunks AS k USING (thread_id, id)""")
SELECT_PAGE_ALL_FILTERED = q("""
WITH RECURSIVE
page AS (
    SELECT thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id, type, checkpoint,
           metadata, channels
    FROM checkpoints AS c
    WHERE (checkpoint_id, thread_id, checkpoint_ns)
          < (COALESCE(:after_checkpoint_id, :before, x''), COALESCE(:after_thread_id, ''),
             COALESCE(:after_checkpoint_ns, ''))
      AND substr(thread_id, 1, 9) <> char(31) || 'd1saver-'
      AND (:checkpoint_id IS NULL OR checkpoint_id = :checkpoint_id)
      AND NOT EXISTS (
    SELECT 1 FROM (SELECT value ->> 0 AS path, value ->> 1 AS doc FROM json_each(:filter)) AS f
    WHERE NOT (CASE WHEN json_type(f.doc, f.path) = 'null'
        THEN COALESCE(json_type(c.metadata, f.path), 'null') = 'null'
        ELSE (SELECT COUNT(*) FROM json_tree(c.metadata, f.path))
             = (SELECT COUNT(*) FROM json_tree(f.doc, f.path))
         AND NOT EXISTS (SELECT 1 FROM json_tree(f.doc, f.path) AS q WHERE NOT EXISTS (
             SELECT 1 FROM json_tree(c.metadata, f.path) AS m
             WHERE m.fullkey = q.fullkey AND m.atom IS q.atom
                 AND CASE WHEN m.type IN ('integer','real','true','false') THEN 'n'
                 ELSE m.type END = CASE WHEN q.type IN ('integer','real','true','false')
                 THEN 'n' ELSE q.type END))
        END
        OR (json_type(c.metadata, f.path) IS NULL
            AND json_type(c.metadata, '$."d1saver:metadata"') IS NOT NULL)))
    ORDER BY checkpoint_id DESC, thread_id DESC, checkpoint_ns DESC
    LIMIT :limit
),
out AS (
SELECT 'c' AS kind, thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id AS ref,
       metadata, NULL AS task_path, NULL AS idx, channels, type, checkpoint AS value
FROM page
UNION ALL
SELECT 'w', thread_id, checkpoint_ns, checkpoint_id, w.task_id, NULL, w.task_path, w.idx,
       w.channel, w.type, w.value
FROM page AS p CROSS JOIN writes AS w USING (thread_id, checkpoint_ns, checkpoint_id)
UNION ALL
SELECT 'k', thread_id, checkpoint_ns, checkpoint_id, k.owner, NULL, NULL, k.seq, NULL, NULL,
       k.data
FROM page AS p CROSS JOIN chunks AS k USING (thread_id, checkpoint_ns, checkpoint_id)
WHERE NOT substr(k.owner, 1, 2) = 'f/'
),
vals(thread_id, v) AS (
    SELECT thread_id, CASE WHEN kind IN ('c', 'w') THEN value END FROM out
),
refs(thread_id, id) AS (
    SELECT o.thread_id, ltrim(j.value, '^')
    FROM vals AS o, json_each(CASE WHEN substr(o.v, 1, 2) = 'm:'
        THEN '["' || replace(substr(o.v, 3), ',', '","') || '"]' ELSE '[]' END) AS j
    WHERE instr(j.value, ':') = 0
    UNION
    SELECT o.thread_id, ltrim(j.value, '^')
    FROM vals AS o, json_each(CASE WHEN substr(o.v, 1, 2) = 'p:'
        THEN substr(o.v, 3) ELSE '[]' END) AS w,
        json_each(CASE WHEN substr(w.value->>3, 1, 2) = 'm:'
        THEN '["' || replace(substr(w.value->>3, 3), ',', '","') || '"]' ELSE '[]' END) AS j
    WHERE instr(j.value, ':') = 0
    UNION
    SELECT r.thread_id, ltrim(j.value, '^')
    FROM refs AS r CROSS JOIN d1saver_chunks AS n USING (thread_id, id),
        json_each('["' || replace(n.data, ',', '","') || '"]') AS j
    WHERE n.level > 0
)
SELECT * FROM out
UNION ALL
SELECT 'h', thread_id, NULL, NULL, id, NULL, NULL, NULL, NULL, NULL, k.data
FROM refs AS r CROSS JOIN d1saver_chunks AS k USING (thread_id, id)""")
# The DeltaChannel prefetch sent with each page statement, with the same parameters: what the
# page's DeltaChannels replay from, so that LangGraph's get_delta_channel_history after
# get_tuple/list costs no request. The walk follows parents while some channel is still
# without a seed or a frozen record ending its history (a record with a 'c' row goes on at
# the holder's parent); the channels sought are the keys of
# metadata.counters_since_delta_snapshot that the checkpoint holds no value of and that have
# been written (not in delta_unwritten: LangGraph replays only channels in channel_versions).
# UNION (not UNION ALL) ends a corrupt parent loop. Rows 'a', 'w', 'k', 'f' and 'h'
# (PAGE_COLUMNS); 'h' leaves out the chunks the page returns (`seen`, read only when the
# prefetch has chunks of its own: on Wrangler's engine, folding it into `refs` read the page's
# writes every time). At most 4 terms in a compound SELECT (see DELTA_HISTORY).
SELECT_PAGE_DELTA_THREAD_NS = q("""
WITH RECURSIVE
page AS (
    SELECT thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id, type, checkpoint,
           metadata, channels
    FROM checkpoints AS c
    WHERE thread_id = :thread_id AND checkpoint_ns = :checkpoint_ns
      AND checkpoint_id < COALESCE(:after_checkpoint_id, :before, x'')
      AND (:checkpoint_id IS NULL OR checkpoint_id = :checkpoint_id)
    ORDER BY checkpoint_id DESC, thread_id DESC, checkpoint_ns DESC
    LIMIT :limit
),
walk(thread_id, checkpoint_ns, checkpoint_id, sought) AS (
    SELECT p.thread_id, p.checkpoint_ns, p.parent_checkpoint_id,
           (SELECT json_group_array(s.value) FROM json_each((SELECT json_group_array(d.key)
     FROM json_each(p.metadata, '$.counters_since_delta_snapshot') AS d
     WHERE d.key NOT IN (SELECT value FROM json_each(p.channels))
       AND d.key NOT IN (
            SELECT u.value FROM delta_unwritten AS x, json_each(x.channels) AS u
            WHERE x.thread_id = p.thread_id AND x.checkpoint_ns = p.checkpoint_ns
              AND x.checkpoint_id = p.checkpoint_id))) AS s
     WHERE s.value NOT IN (SELECT f.channel FROM delta_frozen AS f
                           WHERE f.thread_id = p.thread_id AND f.checkpoint_ns = p.checkpoint_ns
                             AND f.checkpoint_id = p.checkpoint_id
                           GROUP BY f.channel HAVING SUM(f.kind = 'c') = 0))
    FROM page AS p
    UNION
    SELECT c.thread_id, c.checkpoint_ns, c.parent_checkpoint_id,
           (SELECT json_group_array(s.value) FROM json_each((SELECT json_group_array(s.value)
               FROM json_each(w.sought) AS s
     WHERE s.value NOT IN (SELECT value FROM json_each(c.channels)))) AS s
     WHERE s.value NOT IN (SELECT f.channel FROM delta_frozen AS f
                           WHERE f.thread_id = c.thread_id AND f.checkpoint_ns = c.checkpoint_ns
                             AND f.checkpoint_id = c.checkpoint_id
                           GROUP BY f.channel HAVING SUM(f.kind = 'c') = 0))
    FROM walk AS w JOIN checkpoints AS c USING (thread_id, checkpoint_ns, checkpoint_id)
    WHERE json_array_length(w.sought) > 0
),
visited AS (
    SELECT thread_id, checkpoint_ns, checkpoint_id,
           json_group_array(DISTINCT s.value) AS sought
    FROM walk, json_each(walk.sought) AS s
    WHERE checkpoint_id IS NOT NULL
    GROUP BY thread_id, checkpoint_ns, checkpoint_id
),
holders AS (
    SELECT thread_id, checkpoint_ns, checkpoint_id, sought FROM visited
    UNION ALL
    SELECT thread_id, checkpoint_ns, checkpoint_id, NULL FROM page
),
out AS (
SELECT 'a' AS kind, thread_id, checkpoint_ns, checkpoint_id, c.parent_checkpoint_id AS ref,
       CASE WHEN EXISTS (SELECT 1 FROM json_each(v.sought) AS s
                         WHERE s.value IN (SELECT value FROM json_each(c.channels)))
            THEN c.metadata END AS metadata,
       NULL AS task_path, NULL AS idx, c.channels AS channels, c.type AS type,
       CASE WHEN EXISTS (SELECT 1 FROM json_each(v.sought) AS s
                         WHERE s.value IN (SELECT value FROM json_each(c.channels)))
            THEN c.checkpoint END AS value
FROM visited AS v JOIN checkpoints AS c USING (thread_id, checkpoint_ns, checkpoint_id)
UNION ALL
SELECT 'w', thread_id, checkpoint_ns, checkpoint_id, w.task_id, NULL, w.task_path, w.idx,
       w.channel, w.type, w.value
FROM visited AS v CROSS JOIN writes AS w USING (thread_id, checkpoint_ns, checkpoint_id)
WHERE (w.channel IN (SELECT value FROM json_each(v.sought)) OR substr(w.value, 1, 2) = 'p:')
UNION ALL
SELECT 'k', thread_id, checkpoint_ns, checkpoint_id, k.owner, NULL, NULL, k.seq, NULL, NULL,
       k.data
FROM holders AS v CROSS JOIN chunks AS k USING (thread_id, checkpoint_ns, checkpoint_id)
WHERE v.sought IS NOT NULL OR substr(k.owner, 1, 2) = 'f/'
UNION ALL
SELECT 'f', thread_id, checkpoint_ns, checkpoint_id,
       json_array(f.kind, f.src_checkpoint_id, f.task_id, f.task_path, f.idx, f.channel, f.depth),
       f.metadata, NULL, NULL, f.channels, f.type, f.value
FROM holders AS v CROSS JOIN delta_frozen AS f USING (thread_id, checkpoint_ns, checkpoint_id)
WHERE v.sought IS NULL OR f.channel IN (SELECT value FROM json_each(v.sought))
),
vals(thread_id, v) AS (
    SELECT thread_id, CASE WHEN kind IN ('a', 'w', 'f') THEN value END FROM out
),
refs(thread_id, id) AS (
    SELECT o.thread_id, ltrim(j.value, '^')
    FROM vals AS o, json_each(CASE WHEN substr(o.v, 1, 2) = 'm:'
        THEN '["' || replace(substr(o.v, 3), ',', '","') || '"]' ELSE '[]' END) AS j
    WHERE instr(j.value, ':') = 0
    UNION
    SELECT o.thread_id, ltrim(j.value, '^')
    FROM vals AS o, json_each(CASE WHEN substr(o.v, 1, 2) = 'p:'
        THEN substr(o.v, 3) ELSE '[]' END) AS w,
        json_each(CASE WHEN substr(w.value->>3, 1, 2) = 'm:'
        THEN '["' || replace(substr(w.value->>3, 3), ',', '","') || '"]' ELSE '[]' END) AS j
    WHERE instr(j.value, ':') = 0
    UNION
    SELECT r.thread_id, ltrim(j.value, '^')
    FROM refs AS r CROSS JOIN d1saver_chunks AS n USING (thread_id, id),
        json_each('["' || replace(n.data, ',', '","') || '"]') AS j
    WHERE n.level > 0
),
page_out(thread_id, v) AS (
    SELECT thread_id, checkpoint FROM page
    UNION ALL
    SELECT thread_id, w.value
    FROM page AS p CROSS JOIN writes AS w USING (thread_id, checkpoint_ns, checkpoint_id)
),
seen(thread_id, id) AS (
    SELECT o.thread_id, ltrim(j.value, '^')
    FROM page_out AS o, json_each(CASE WHEN substr(o.v, 1, 2) = 'm:'
        THEN '["' || replace(substr(o.v, 3), ',', '","') || '"]' ELSE '[]' END) AS j
    WHERE instr(j.value, ':') = 0
    UNION
    SELECT o.thread_id, ltrim(j.value, '^')
    FROM page_out AS o, json_each(CASE WHEN substr(o.v, 1, 2) = 'p:'
        THEN substr(o.v, 3) ELSE '[]' END) AS w,
        json_each(CASE WHEN substr(w.value->>3, 1, 2) = 'm:'
        THEN '["' || replace(substr(w.value->>3, 3), ',', '","') || '"]' ELSE '[]' END) AS j
    WHERE instr(j.value, ':') = 0
    UNION
    SELECT r.thread_id, ltrim(j.value, '^')
    FROM seen AS r CROSS JOIN d1saver_chunks AS n USING (thread_id, id),
        json_each('["' || replace(n.data, ',', '","') || '"]') AS j
    WHERE n.level > 0
)
SELECT * FROM out
UNION ALL
SELECT 'h', thread_id, NULL, NULL, id, NULL, NULL, NULL, NULL, NULL, k.data
FROM refs AS r CROSS JOIN d1saver_chunks AS k USING (thread_id, id)
WHERE NOT EXISTS (SELECT 1 FROM seen AS s WHERE s.thread_id = r.thread_id AND s.id = r.id)""")
SELECT_PAGE_DELTA_THREAD = q("""
WITH RECURSIVE
page AS (
    SELECT thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id, type, checkpoint,
           metadata, channels
    FROM checkpoints AS c
    WHERE thread_id = :thread_id
      AND (checkpoint_id, thread_id, checkpoint_ns)
          < (COALESCE(:after_checkpoint_id, :before, x''), COALESCE(:after_thread_id, ''),
             COALESCE(:after_checkpoint_ns, ''))
      AND (:checkpoint_id IS NULL OR checkpoint_id = :checkpoint_id)
    ORDER BY checkpoint_id DESC, thread_id DESC, checkpoint_ns DESC
    LIMIT :limit
),
walk(thread_id, checkpoint_ns, checkpoint_id, sought) AS (
    SELECT p.thread_id, p.checkpoint_ns, p.parent_checkpoint_id,
           (SELECT json_group_array(s.value) FROM json_each((SELECT json_group_array(d.key)
     FROM json_each(p.metadata, '$.counters_since_delta_snapshot') AS d
     WHERE d.key NOT IN (SELECT value FROM json_each(p.channels))
       AND d.key NOT IN (
            SELECT u.value FROM delta_unwritten AS x, json_each(x.channels) AS u
            WHERE x.thread_id = p.thread_id AND x.checkpoint_ns = p.checkpoint_ns
              AND x.checkpoint_id = p.checkpoint_id))) AS s
     WHERE s.value NOT IN (SELECT f.channel FROM delta_frozen AS f
                           WHERE f.thread_id = p.thread_id AND f.checkpoint_ns = p.checkpoint_ns
                             AND f.checkpoint_id = p.checkpoint_id
                           GROUP BY f.channel HAVING SUM(f.kind = 'c') = 0))
    FROM page AS p
    UNION
    SELECT c.thread_id, c.checkpoint_ns, c.parent_checkpoint_id,
           (SELECT json_group_array(s.value) FROM json_each((SELECT json_group_array(s.value)
               FROM json_each(w.sought) AS s
     WHERE s.value NOT IN (SELECT value FROM json_each(c.channels)))) AS s
     WHERE s.value NOT IN (SELECT f.channel FROM delta_frozen AS f
                           WHERE f.thread_id = c.thread_id AND f.checkpoint_ns = c.checkpoint_ns
                             AND f.checkpoint_id = c.checkpoint_id
                           GROUP BY f.channel HAVING SUM(f.kind = 'c') = 0))
    FROM walk AS w JOIN checkpoints AS c USING (thread_id, checkpoint_ns, checkpoint_id)
    WHERE json_array_length(w.sought) > 0
),
visited AS (
    SELECT thread_id, checkpoint_ns, checkpoint_id,
           json_group_array(DISTINCT s.value) AS sought
    FROM walk, json_each(walk.sought) AS s
    WHERE checkpoint_id IS NOT NULL
    GROUP BY thread_id, checkpoint_ns, checkpoint_id
),
holders AS (
    SELECT thread_id, checkpoint_ns, checkpoint_id, sought FROM visited
    UNION ALL
    SELECT thread_id, checkpoint_ns, checkpoint_id, NULL FROM page
),
out AS (
SELECT 'a' AS kind, thread_id, checkpoint_ns, checkpoint_id, c.parent_checkpoint_id AS ref,
       CASE WHEN EXISTS (SELECT 1 FROM json_each(v.sought) AS s
                         WHERE s.value IN (SELECT value FROM json_each(c.channels)))
            THEN c.metadata END AS metadata,
       NULL AS task_path, NULL AS idx, c.channels AS channels, c.type AS type,
       CASE WHEN EXISTS (SELECT 1 FROM json_each(v.sought) AS s
                         WHERE s.value IN (SELECT value FROM json_each(c.channels)))
            THEN c.checkpoint END AS value
FROM visited AS v JOIN checkpoints AS c USING (thread_id, checkpoint_ns, checkpoint_id)
UNION ALL
SELECT 'w', thread_id, checkpoint_ns, checkpoint_id, w.task_id, NULL, w.task_path, w.idx,
       w.channel, w.type, w.value
FROM visited AS v CROSS JOIN writes AS w USING (thread_id, checkpoint_ns, checkpoint_id)
WHERE (w.channel IN (SELECT value FROM json_each(v.sought)) OR substr(w.value, 1, 2) = 'p:')
UNION ALL
SELECT 'k', thread_id, checkpoint_ns, checkpoint_id, k.owner, NULL, NULL, k.seq, NULL, NULL,
       k.data
FROM holders AS v CROSS JOIN chunks AS k USING (thread_id, checkpoint_ns, checkpoint_id)
WHERE v.sought IS NOT NULL OR substr(k.owner, 1, 2) = 'f/'
UNION ALL
SELECT 'f', thread_id, checkpoint_ns, checkpoint_id,
       json_array(f.kind, f.src_checkpoint_id, f.task_id, f.task_path, f.idx, f.channel, f.depth),
       f.metadata, NULL, NULL, f.channels, f.type, f.value
FROM holders AS v CROSS JOIN delta_frozen AS f USING (thread_id, checkpoint_ns, checkpoint_id)
WHERE v.sought IS NULL OR f.channel IN (SELECT value FROM json_each(v.sought))
),
vals(thread_id, v) AS (
    SELECT thread_id, CASE WHEN kind IN ('a', 'w', 'f') THEN value END FROM out
),
refs(thread_id, id) AS (
    SELECT o.thread_id, ltrim(j.value, '^')
    FROM vals AS o, json_each(CASE WHEN substr(o.v, 1, 2) = 'm:'
        THEN '["' || replace(substr(o.v, 3), ',', '","') || '"]' ELSE '[]' END) AS j
    WHERE instr(j.value, ':') = 0
    UNION
    SELECT o.thread_id, ltrim(j.value, '^')
    FROM vals AS o, json_each(CASE WHEN substr(o.v, 1, 2) = 'p:'
        THEN substr(o.v, 3) ELSE '[]' END) AS w,
        json_each(CASE WHEN substr(w.value->>3, 1, 2) = 'm:'
        THEN '["' || replace(substr(w.value->>3, 3), ',', '","') || '"]' ELSE '[]' END) AS j
    WHERE instr(j.value, ':') = 0
    UNION
    SELECT r.thread_id, ltrim(j.value, '^')
    FROM refs AS r CROSS JOIN d1saver_chunks AS n USING (thread_id, id),
        json_each('["' || replace(n.data, ',', '","') || '"]') AS j
    WHERE n.level > 0
),
page_out(thread_id, v) AS (
    SELECT thread_id, checkpoint FROM page
    UNION ALL
    SELECT thread_id, w.value
    FROM page AS p CROSS JOIN writes AS w USING (thread_id, checkpoint_ns, checkpoint_id)
),
seen(thread_id, id) AS (
    SELECT o.thread_id, ltrim(j.value, '^')
    FROM page_out AS o, json_each(CASE WHEN substr(o.v, 1, 2) = 'm:'
        THEN '["' || replace(substr(o.v, 3), ',', '","') || '"]' ELSE '[]' END) AS j
    WHERE instr(j.value, ':') = 0
    UNION
    SELECT o.thread_id, ltrim(j.value, '^')
    FROM page_out AS o, json_each(CASE WHEN substr(o.v, 1, 2) = 'p:'
        THEN substr(o.v, 3) ELSE '[]' END) AS w,
        json_each(CASE WHEN substr(w.value->>3, 1, 2) = 'm:'
        THEN '["' || replace(substr(w.value->>3, 3), ',', '","') || '"]' ELSE '[]' END) AS j
    WHERE instr(j.value, ':') = 0
    UNION
    SELECT r.thread_id, ltrim(j.value, '^')
    FROM seen AS r CROSS JOIN d1saver_chunks AS n USING (thread_id, id),
        json_each('["' || replace(n.data, ',', '","') || '"]') AS j
    WHERE n.level > 0
)
SELECT * FROM out
UNION ALL
SELECT 'h', thread_id, NULL, NULL, id, NULL, NULL, NULL, NULL, NULL, k.data
FROM refs AS r CROSS JOIN d1saver_chunks AS k USING (thread_id, id)
WHERE NOT EXISTS (SELECT 1 FROM seen AS s WHERE s.thread_id = r.thread_id AND s.id = r.id)""")
SELECT_PAGE_DELTA_ALL = q("""
WITH RECURSIVE
page AS (
    SELECT thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id, type, checkpoint,
           metadata, channels
    FROM checkpoints AS c
    WHERE (checkpoint_id, thread_id, checkpoint_ns)
          < (COALESCE(:after_checkpoint_id, :before, x''), COALESCE(:after_thread_id, ''),
             COALESCE(:after_checkpoint_ns, ''))
      AND substr(thread_id, 1, 9) <> char(31) || 'd1saver-'
      AND (:checkpoint_id IS NULL OR checkpoint_id = :checkpoint_id)
    ORDER BY checkpoint_id DESC, thread_id DESC, checkpoint_ns DESC
    LIMIT :limit
),
walk(thread_id, checkpoint_ns, checkpoint_id, sought) AS (
    SELECT p.thread_id, p.checkpoint_ns, p.parent_checkpoint_id,
           (SELECT json_group_array(s.value) FROM json_each((SELECT json_group_array(d.key)
     FROM json_each(p.metadata, '$.counters_since_delta_snapshot') AS d
     WHERE d.key NOT IN (SELECT value FROM json_each(p.channels))
       AND d.key NOT IN (
            SELECT u.value FROM delta_unwritten AS x, json_each(x.channels) AS u
            WHERE x.thread_id = p.thread_id AND x.checkpoint_ns = p.checkpoint_ns
              AND x.checkpoint_id = p.checkpoint_id))) AS s
     WHERE s.value NOT IN (SELECT f.channel FROM delta_frozen AS f
                           WHERE f.thread_id = p.thread_id AND f.checkpoint_ns = p.checkpoint_ns
                             AND f.checkpoint_id = p.checkpoint_id
                           GROUP BY f.channel HAVING SUM(f.kind = 'c') = 0))
    FROM page AS p
    UNION
    SELECT c.thread_id, c.checkpoint_ns, c.parent_checkpoint_id,
           (SELECT json_group_array(s.value) FROM json_each((SELECT json_group_array(s.value)
               FROM json_each(w.sought) AS s
     WHERE s.value NOT IN (SELECT value FROM json_each(c.channels)))) AS s
     WHERE s.value NOT IN (SELECT f.channel FROM delta_frozen AS f
                           WHERE f.thread_id = c.thread_id AND f.checkpoint_ns = c.checkpoint_ns
                             AND f.checkpoint_id = c.checkpoint_id
                           GROUP BY f.channel HAVING SUM(f.kind = 'c') = 0))
    FROM walk AS w JOIN checkpoints AS c USING (thread_id, checkpoint_ns, checkpoint_id)
    WHERE json_array_length(w.sought) > 0
),
visited AS (
    SELECT thread_id, checkpoint_ns, checkpoint_id,
           json_group_array(DISTINCT s.value) AS sought
    FROM walk, json_each(walk.sought) AS s
    WHERE checkpoint_id IS NOT NULL
    GROUP BY thread_id, checkpoint_ns, checkpoint_id
),
holders AS (
    SELECT thread_id, checkpoint_ns, checkpoint_id, sought FROM visited
    UNION ALL
    SELECT thread_id, checkpoint_ns, checkpoint_id, NULL FROM page
),
out AS (
SELECT 'a' AS kind, thread_id, checkpoint_ns, checkpoint_id, c.parent_checkpoint_id AS ref,
       CASE WHEN EXISTS (SELECT 1 FROM json_each(v.sought) AS s
                         WHERE s.value IN (SELECT value FROM json_each(c.channels)))
            THEN c.metadata END AS metadata,
       NULL AS task_path, NULL AS idx, c.channels AS channels, c.type AS type,
       CASE WHEN EXISTS (SELECT 1 FROM json_each(v.sought) AS s
                         WHERE s.value IN (SELECT value FROM json_each(c.channels)))
            THEN c.checkpoint END AS value
FROM visited AS v JOIN checkpoints AS c USING (thread_id, checkpoint_ns, checkpoint_id)
UNION ALL
SELECT 'w', thread_id, checkpoint_ns, checkpoint_id, w.task_id, NULL, w.task_path, w.idx,
       w.channel, w.type, w.value
FROM visited AS v CROSS JOIN writes AS w USING (thread_id, checkpoint_ns, checkpoint_id)
WHERE (w.channel IN (SELECT value FROM json_each(v.sought)) OR substr(w.value, 1, 2) = 'p:')
UNION ALL
SELECT 'k', thread_id, checkpoint_ns, checkpoint_id, k.owner, NULL, NULL, k.seq, NULL, NULL,
       k.data
FROM holders AS v CROSS JOIN chunks AS k USING (thread_id, checkpoint_ns, checkpoint_id)
WHERE v.sought IS NOT NULL OR substr(k.owner, 1, 2) = 'f/'
UNION ALL
SELECT 'f', thread_id, checkpoint_ns, checkpoint_id,
       json_array(f.kind, f.src_checkpoint_id, f.task_id, f.task_path, f.idx, f.channel, f.depth),
       f.metadata, NULL, NULL, f.channels, f.type, f.value
FROM holders AS v CROSS JOIN delta_frozen AS f USING (thread_id, checkpoint_ns, checkpoint_id)
WHERE v.sought IS NULL OR f.channel IN (SELECT value FROM json_each(v.sought))
),
vals(thread_id, v) AS (
    SELECT thread_id, CASE WHEN kind IN ('a', 'w', 'f') THEN value END FROM out
),
refs(thread_id, id) AS (
    SELECT o.thread_id, ltrim(j.value, '^')
    FROM vals AS o, json_each(CASE WHEN substr(o.v, 1, 2) = 'm:'
        THEN '["' || replace(substr(o.v, 3), ',', '","') || '"]' ELSE '[]' END) AS j
    WHERE instr(j.value, ':') = 0
    UNION
    SELECT o.thread_id, ltrim(j.value, '^')
    FROM vals AS o, json_each(CASE WHEN substr(o.v, 1, 2) = 'p:'
        THEN substr(o.v, 3) ELSE '[]' END) AS w,
        json_each(CASE WHEN substr(w.value->>3, 1, 2) = 'm:'
        THEN '["' || replace(substr(w.value->>3, 3), ',', '","') || '"]' ELSE '[]' END) AS j
    WHERE instr(j.value, ':') = 0
    UNION
    SELECT r.thread_id, ltrim(j.value, '^')
    FROM refs AS r CROSS JOIN d1saver_chunks AS n USING (thread_id, id),
        json_each('["' || replace(n.data, ',', '","') || '"]') AS j
    WHERE n.level > 0
),
page_out(thread_id, v) AS (
    SELECT thread_id, checkpoint FROM page
    UNION ALL
    SELECT thread_id, w.value
    FROM page AS p CROSS JOIN writes AS w USING (thread_id, checkpoint_ns, checkpoint_id)
),
seen(thread_id, id) AS (
    SELECT o.thread_id, ltrim(j.value, '^')
    FROM page_out AS o, json_each(CASE WHEN substr(o.v, 1, 2) = 'm:'
        THEN '["' || replace(substr(o.v, 3), ',', '","') || '"]' ELSE '[]' END) AS j
    WHERE instr(j.value, ':') = 0
    UNION
    SELECT o.thread_id, ltrim(j.value, '^')
    FROM page_out AS o, json_each(CASE WHEN substr(o.v, 1, 2) = 'p:'
        THEN substr(o.v, 3) ELSE '[]' END) AS w,
        json_each(CASE WHEN substr(w.value->>3, 1, 2) = 'm:'
        THEN '["' || replace(substr(w.value->>3, 3), ',', '","') || '"]' ELSE '[]' END) AS j
    WHERE instr(j.value, ':') = 0
    UNION
    SELECT r.thread_id, ltrim(j.value, '^')
    FROM seen AS r CROSS JOIN d1saver_chunks AS n USING (thread_id, id),
        json_each('["' || replace(n.data, ',', '","') || '"]') AS j
    WHERE n.level > 0
)
SELECT * FROM out
UNION ALL
SELECT 'h', thread_id, NULL, NULL, id, NULL, NULL, NULL, NULL, NULL, k.data
FROM refs AS r CROSS JOIN d1saver_chunks AS k USING (thread_id, id)
WHERE NOT EXISTS (SELECT 1 FROM seen AS s WHERE s.thread_id = r.thread_id AND s.id = r.id)""")
SELECT_PAGE_DELTA_THREAD_NS_FILTERED = q("""
WITH RECURSIVE
page AS (
    SELECT thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id, type, checkpoint,
           metadata, channels
    FROM checkpoints AS c
    WHERE thread_id = :thread_id AND checkpoint_ns = :checkpoint_ns
      AND checkpoint_id < COALESCE(:after_checkpoint_id, :before, x'')
      AND (:checkpoint_id IS NULL OR checkpoint_id = :checkpoint_id)
      AND NOT EXISTS (
    SELECT 1 FROM (SELECT value ->> 0 AS path, value ->> 1 AS doc FROM json_each(:filter)) AS f
    WHERE NOT (CASE WHEN json_type(f.doc, f.path) = 'null'
        THEN COALESCE(json_type(c.metadata, f.path), 'null') = 'null'
        ELSE (SELECT COUNT(*) FROM json_tree(c.metadata, f.path))
             = (SELECT COUNT(*) FROM json_tree(f.doc, f.path))
         AND NOT EXISTS (SELECT 1 FROM json_tree(f.doc, f.path) AS q WHERE NOT EXISTS (
             SELECT 1 FROM json_tree(c.metadata, f.path) AS m
             WHERE m.fullkey = q.fullkey AND m.atom IS q.atom
                 AND CASE WHEN m.type IN ('integer','real','true','false') THEN 'n'
                 ELSE m.type END = CASE WHEN q.type IN ('integer','real','true','false')
                 THEN 'n' ELSE q.type END))
        END
        OR (json_type(c.metadata, f.path) IS NULL
            AND json_type(c.metadata, '$."d1saver:metadata"') IS NOT NULL)))
    ORDER BY checkpoint_id DESC, thread_id DESC, checkpoint_ns DESC
    LIMIT :limit
),
walk(thread_id, checkpoint_ns, checkpoint_id, sought) AS (
    SELECT p.thread_id, p.checkpoint_ns, p.parent_checkpoint_id,
           (SELECT json_group_array(s.value) FROM json_each((SELECT json_group_array(d.key)
     FROM json_each(p.metadata, '$.counters_since_delta_snapshot') AS d
     WHERE d.key NOT IN (SELECT value FROM json_each(p.channels))
       AND d.key NOT IN (
            SELECT u.value FROM delta_unwritten AS x, json_each(x.channels) AS u
            WHERE x.thread_id = p.thread_id AND x.checkpoint_ns = p.checkpoint_ns
              AND x.checkpoint_id = p.checkpoint_id))) AS s
     WHERE s.value NOT IN (SELECT f.channel FROM delta_frozen AS f
                           WHERE f.thread_id = p.thread_id AND f.checkpoint_ns = p.checkpoint_ns
                             AND f.checkpoint_id = p.checkpoint_id
                           GROUP BY f.channel HAVING SUM(f.kind = 'c') = 0))
    FROM page AS p
    UNION
    SELECT c.thread_id, c.checkpoint_ns, c.parent_checkpoint_id,
           (SELECT json_group_array(s.value) FROM json_each((SELECT json_group_array(s.value)
               FROM json_each(w.sought) AS s
     WHERE s.value NOT IN (SELECT value FROM json_each(c.channels)))) AS s
     WHERE s.value NOT IN (SELECT f.channel FROM delta_frozen AS f
                           WHERE f.thread_id = c.thread_id AND f.checkpoint_ns = c.checkpoint_ns
                             AND f.checkpoint_id = c.checkpoint_id
                           GROUP BY f.channel HAVING SUM(f.kind = 'c') = 0))
    FROM walk AS w JOIN checkpoints AS c USING (thread_id, checkpoint_ns, checkpoint_id)
    WHERE json_array_length(w.sought) > 0
),
visited AS (
    SELECT thread_id, checkpoint_ns, checkpoint_id,
           json_group_array(DISTINCT s.value) AS sought
    FROM walk, json_each(walk.sought) AS s
    WHERE checkpoint_id IS NOT NULL
    GROUP BY thread_id, checkpoint_ns, checkpoint_id
),
holders AS (
    SELECT thread_id, checkpoint_ns, checkpoint_id, sought FROM visited
    UNION ALL
    SELECT thread_id, checkpoint_ns, checkpoint_id, NULL FROM page
),
out AS (
SELECT 'a' AS kind, thread_id, checkpoint_ns, checkpoint_id, c.parent_checkpoint_id AS ref,
       CASE WHEN EXISTS (SELECT 1 FROM json_each(v.sought) AS s
                         WHERE s.value IN (SELECT value FROM json_each(c.channels)))
            THEN c.metadata END AS metadata,
       NULL AS task_path, NULL AS idx, c.channels AS channels, c.type AS type,
       CASE WHEN EXISTS (SELECT 1 FROM json_each(v.sought) AS s
                         WHERE s.value IN (SELECT value FROM json_each(c.channels)))
            THEN c.checkpoint END AS value
FROM visited AS v JOIN checkpoints AS c USING (thread_id, checkpoint_ns, checkpoint_id)
UNION ALL
SELECT 'w', thread_id, checkpoint_ns, checkpoint_id, w.task_id, NULL, w.task_path, w.idx,
       w.channel, w.type, w.value
FROM visited AS v CROSS JOIN writes AS w USING (thread_id, checkpoint_ns, checkpoint_id)
WHERE (w.channel IN (SELECT value FROM json_each(v.sought)) OR substr(w.value, 1, 2) = 'p:')
UNION ALL
SELECT 'k', thread_id, checkpoint_ns, checkpoint_id, k.owner, NULL, NULL, k.seq, NULL, NULL,
       k.data
FROM holders AS v CROSS JOIN chunks AS k USING (thread_id, checkpoint_ns, checkpoint_id)
WHERE v.sought IS NOT NULL OR substr(k.owner, 1, 2) = 'f/'
UNION ALL
SELECT 'f', thread_id, checkpoint_ns, checkpoint_id,
       json_array(f.kind, f.src_checkpoint_id, f.task_id, f.task_path, f.idx, f.channel, f.depth),
       f.metadata, NULL, NULL, f.channels, f.type, f.value
FROM holders AS v CROSS JOIN delta_frozen AS f USING (thread_id, checkpoint_ns, checkpoint_id)
WHERE v.sought IS NULL OR f.channel IN (SELECT value FROM json_each(v.sought))
),
vals(thread_id, v) AS (
    SELECT thread_id, CASE WHEN kind IN ('a', 'w', 'f') THEN value END FROM out
),
refs(thread_id, id) AS (
    SELECT o.thread_id, ltrim(j.value, '^')
    FROM vals AS o, json_each(CASE WHEN substr(o.v, 1, 2) = 'm:'
        THEN '["' || replace(substr(o.v, 3), ',', '","') || '"]' ELSE '[]' END) AS j
    WHERE instr(j.value, ':') = 0
    UNION
    SELECT o.thread_id, ltrim(j.value, '^')
    FROM vals AS o, json_each(CASE WHEN substr(o.v, 1, 2) = 'p:'
        THEN substr(o.v, 3) ELSE '[]' END) AS w,
        json_each(CASE WHEN substr(w.value->>3, 1, 2) = 'm:'
        THEN '["' || replace(substr(w.value->>3, 3), ',', '","') || '"]' ELSE '[]' END) AS j
    WHERE instr(j.value, ':') = 0
    UNION
    SELECT r.thread_id, ltrim(j.value, '^')
    FROM refs AS r CROSS JOIN d1saver_chunks AS n USING (thread_id, id),
        json_each('["' || replace(n.data, ',', '","') || '"]') AS j
    WHERE n.level > 0
),
page_out(thread_id, v) AS (
    SELECT thread_id, checkpoint FROM page
    UNION ALL
    SELECT thread_id, w.value
    FROM page AS p CROSS JOIN writes AS w USING (thread_id, checkpoint_ns, checkpoint_id)
),
seen(thread_id, id) AS (
    SELECT o.thread_id, ltrim(j.value, '^')
    FROM page_out AS o, json_each(CASE WHEN substr(o.v, 1, 2) = 'm:'
        THEN '["' || replace(substr(o.v, 3), ',', '","') || '"]' ELSE '[]' END) AS j
    WHERE instr(j.value, ':') = 0
    UNION
    SELECT o.thread_id, ltrim(j.value, '^')
    FROM page_out AS o, json_each(CASE WHEN substr(o.v, 1, 2) = 'p:'
        THEN substr(o.v, 3) ELSE '[]' END) AS w,
        json_each(CASE WHEN substr(w.value->>3, 1, 2) = 'm:'
        THEN '["' || replace(substr(w.value->>3, 3), ',', '","') || '"]' ELSE '[]' END) AS j
    WHERE instr(j.value, ':') = 0
    UNION
    SELECT r.thread_id, ltrim(j.value, '^')
    FROM seen AS r CROSS JOIN d1saver_chunks AS n USING (thread_id, id),
        json_each('["' || replace(n.data, ',', '","') || '"]') AS j
    WHERE n.level > 0
)
SELECT * FROM out
UNION ALL
SELECT 'h', thread_id, NULL, NULL, id, NULL, NULL, NULL, NULL, NULL, k.data
FROM refs AS r CROSS JOIN d1saver_chunks AS k USING (thread_id, id)
WHERE NOT EXISTS (SELECT 1 FROM seen AS s WHERE s.thread_id = r.thread_id AND s.id = r.id)""")
SELECT_PAGE_DELTA_THREAD_FILTERED = q("""
WITH RECURSIVE
page AS (
    SELECT thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id, type, checkpoint,
           metadata, channels
    FROM checkpoints AS c
    WHERE thread_id = :thread_id
      AND (checkpoint_id, thread_id, checkpoint_ns)
          < (COALESCE(:after_checkpoint_id, :before, x''), COALESCE(:after_thread_id, ''),
             COALESCE(:after_checkpoint_ns, ''))
      AND (:checkpoint_id IS NULL OR checkpoint_id = :checkpoint_id)
      AND NOT EXISTS (
    SELECT 1 FROM (SELECT value ->> 0 AS path, value ->> 1 AS doc FROM json_each(:filter)) AS f
    WHERE NOT (CASE WHEN json_type(f.doc, f.path) = 'null'
        THEN COALESCE(json_type(c.metadata, f.path), 'null') = 'null'
        ELSE (SELECT COUNT(*) FROM json_tree(c.metadata, f.path))
             = (SELECT COUNT(*) FROM json_tree(f.doc, f.path))
         AND NOT EXISTS (SELECT 1 FROM json_tree(f.doc, f.path) AS q WHERE NOT EXISTS (
             SELECT 1 FROM json_tree(c.metadata, f.path) AS m
             WHERE m.fullkey = q.fullkey AND m.atom IS q.atom
                 AND CASE WHEN m.type IN ('integer','real','true','false') THEN 'n'
                 ELSE m.type END = CASE WHEN q.type IN ('integer','real','true','false')
                 THEN 'n' ELSE q.type END))
        END
        OR (json_type(c.metadata, f.path) IS NULL
            AND json_type(c.metadata, '$."d1saver:metadata"') IS NOT NULL)))
    ORDER BY checkpoint_id DESC, thread_id DESC, checkpoint_ns DESC
    LIMIT :limit
),
walk(thread_id, checkpoint_ns, checkpoint_id, sought) AS (
    SELECT p.thread_id, p.checkpoint_ns, p.parent_checkpoint_id,
           (SELECT json_group_array(s.value) FROM json_each((SELECT json_group_array(d.key)
     FROM json_each(p.metadata, '$.counters_since_delta_snapshot') AS d
     WHERE d.key NOT IN (SELECT value FROM json_each(p.channels))
       AND d.key NOT IN (
            SELECT u.value FROM delta_unwritten AS x, json_each(x.channels) AS u
            WHERE x.thread_id = p.thread_id AND x.checkpoint_ns = p.checkpoint_ns
              AND x.checkpoint_id = p.checkpoint_id))) AS s
     WHERE s.value NOT IN (SELECT f.channel FROM delta_frozen AS f
                           WHERE f.thread_id = p.thread_id AND f.checkpoint_ns = p.checkpoint_ns
                             AND f.checkpoint_id = p.checkpoint_id
                           GROUP BY f.channel HAVING SUM(f.kind = 'c') = 0))
    FROM page AS p
    UNION
    SELECT c.thread_id, c.checkpoint_ns, c.parent_checkpoint_id,
           (SELECT json_group_array(s.value) FROM json_each((SELECT json_group_array(s.value)
               FROM json_each(w.sought) AS s
     WHERE s.value NOT IN (SELECT value FROM json_each(c.channels)))) AS s
     WHERE s.value NOT IN (SELECT f.channel FROM delta_frozen AS f
                           WHERE f.thread_id = c.thread_id AND f.checkpoint_ns = c.checkpoint_ns
                             AND f.checkpoint_id = c.checkpoint_id
                           GROUP BY f.channel HAVING SUM(f.kind = 'c') = 0))
    FROM walk AS w JOIN checkpoints AS c USING (thread_id, checkpoint_ns, checkpoint_id)
    WHERE json_array_length(w.sought) > 0
),
visited AS (
    SELECT thread_id, checkpoint_ns, checkpoint_id,
           json_group_array(DISTINCT s.value) AS sought
    FROM walk, json_each(walk.sought) AS s
    WHERE checkpoint_id IS NOT NULL
    GROUP BY thread_id, checkpoint_ns, checkpoint_id
),
holders AS (
    SELECT thread_id, checkpoint_ns, checkpoint_id, sought FROM visited
    UNION ALL
    SELECT thread_id, checkpoint_ns, checkpoint_id, NULL FROM page
),
out AS (
SELECT 'a' AS kind, thread_id, checkpoint_ns, checkpoint_id, c.parent_checkpoint_id AS ref,
       CASE WHEN EXISTS (SELECT 1 FROM json_each(v.sought) AS s
                         WHERE s.value IN (SELECT value FROM json_each(c.channels)))
            THEN c.metadata END AS metadata,
       NULL AS task_path, NULL AS idx, c.channels AS channels, c.type AS type,
       CASE WHEN EXISTS (SELECT 1 FROM json_each(v.sought) AS s
                         WHERE s.value IN (SELECT value FROM json_each(c.channels)))
            THEN c.checkpoint END AS value
FROM visited AS v JOIN checkpoints AS c USING (thread_id, checkpoint_ns, checkpoint_id)
UNION ALL
SELECT 'w', thread_id, checkpoint_ns, checkpoint_id, w.task_id, NULL, w.task_path, w.idx,
       w.channel, w.type, w.value
FROM visited AS v CROSS JOIN writes AS w USING (thread_id, checkpoint_ns, checkpoint_id)
WHERE (w.channel IN (SELECT value FROM json_each(v.sought)) OR substr(w.value, 1, 2) = 'p:')
UNION ALL
SELECT 'k', thread_id, checkpoint_ns, checkpoint_id, k.owner, NULL, NULL, k.seq, NULL, NULL,
       k.data
FROM holders AS v CROSS JOIN chunks AS k USING (thread_id, checkpoint_ns, checkpoint_id)
WHERE v.sought IS NOT NULL OR substr(k.owner, 1, 2) = 'f/'
UNION ALL
SELECT 'f', thread_id, checkpoint_ns, checkpoint_id,
       json_array(f.kind, f.src_checkpoint_id, f.task_id, f.task_path, f.idx, f.channel, f.depth),
       f.metadata, NULL, NULL, f.channels, f.type, f.value
FROM holders AS v CROSS JOIN delta_frozen AS f USING (thread_id, checkpoint_ns, checkpoint_id)
WHERE v.sought IS NULL OR f.channel IN (SELECT value FROM json_each(v.sought))
),
vals(thread_id, v) AS (
    SELECT thread_id, CASE WHEN kind IN ('a', 'w', 'f') THEN value END FROM out
),
refs(thread_id, id) AS (
    SELECT o.thread_id, ltrim(j.value, '^')
    FROM vals AS o, json_each(CASE WHEN substr(o.v, 1, 2) = 'm:'
        THEN '["' || replace(substr(o.v, 3), ',', '","') || '"]' ELSE '[]' END) AS j
    WHERE instr(j.value, ':') = 0
    UNION
    SELECT o.thread_id, ltrim(j.value, '^')
    FROM vals AS o, json_each(CASE WHEN substr(o.v, 1, 2) = 'p:'
        THEN substr(o.v, 3) ELSE '[]' END) AS w,
        json_each(CASE WHEN substr(w.value->>3, 1, 2) = 'm:'
        THEN '["' || replace(substr(w.value->>3, 3), ',', '","') || '"]' ELSE '[]' END) AS j
    WHERE instr(j.value, ':') = 0
    UNION
    SELECT r.thread_id, ltrim(j.value, '^')
    FROM refs AS r CROSS JOIN d1saver_chunks AS n USING (thread_id, id),
        json_each('["' || replace(n.data, ',', '","') || '"]') AS j
    WHERE n.level > 0
),
page_out(thread_id, v) AS (
    SELECT thread_id, checkpoint FROM page
    UNION ALL
    SELECT thread_id, w.value
    FROM page AS p CROSS JOIN writes AS w USING (thread_id, checkpoint_ns, checkpoint_id)
),
seen(thread_id, id) AS (
    SELECT o.thread_id, ltrim(j.value, '^')
    FROM page_out AS o, json_each(CASE WHEN substr(o.v, 1, 2) = 'm:'
        THEN '["' || replace(substr(o.v, 3), ',', '","') || '"]' ELSE '[]' END) AS j
    WHERE instr(j.value, ':') = 0
    UNION
    SELECT o.thread_id, ltrim(j.value, '^')
    FROM page_out AS o, json_each(CASE WHEN substr(o.v, 1, 2) = 'p:'
        THEN substr(o.v, 3) ELSE '[]' END) AS w,
        json_each(CASE WHEN substr(w.value->>3, 1, 2) = 'm:'
        THEN '["' || replace(substr(w.value->>3, 3), ',', '","') || '"]' ELSE '[]' END) AS j
    WHERE instr(j.value, ':') = 0
    UNION
    SELECT r.thread_id, ltrim(j.value, '^')
    FROM seen AS r CROSS JOIN d1saver_chunks AS n USING (thread_id, id),
        json_each('["' || replace(n.data, ',', '","') || '"]') AS j
    WHERE n.level > 0
)
SELECT * FROM out
UNION ALL
SELECT 'h', thread_id, NULL, NULL, id, NULL, NULL, NULL, NULL, NULL, k.data
FROM refs AS r CROSS JOIN d1saver_chunks AS k USING (thread_id, id)
WHERE NOT EXISTS (SELECT 1 FROM seen AS s WHERE s.thread_id = r.thread_id AND s.id = r.id)""")
SELECT_PAGE_DELTA_ALL_FILTERED = q("""
WITH RECURSIVE
page AS (
    SELECT thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id, type, checkpoint,
           metadata, channels
    FROM checkpoints AS c
    WHERE (checkpoint_id, thread_id, checkpoint_ns)
          < (COALESCE(:after_checkpoint_id, :before, x''), COALESCE(:after_thread_id, ''),
             COALESCE(:after_checkpoint_ns, ''))
      AND substr(thread_id, 1, 9) <> char(31) || 'd1saver-'
      AND (:checkpoint_id IS NULL OR checkpoint_id = :checkpoint_id)
      AND NOT EXISTS (
    SELECT 1 FROM (SELECT value ->> 0 AS path, value ->> 1 AS doc FROM json_each(:filter)) AS f
    WHERE NOT (CASE WHEN json_type(f.doc, f.path) = 'null'
        THEN COALESCE(json_type(c.metadata, f.path), 'null') = 'null'
        ELSE (SELECT COUNT(*) FROM json_tree(c.metadata, f.path))
             = (SELECT COUNT(*) FROM json_tree(f.doc, f.path))
         AND NOT EXISTS (SELECT 1 FROM json_tree(f.doc, f.path) AS q WHERE NOT EXISTS (
             SELECT 1 FROM json_tree(c.metadata, f.path) AS m
             WHERE m.fullkey = q.fullkey AND m.atom IS q.atom
                 AND CASE WHEN m.type IN ('integer','real','true','false') THEN 'n'
                 ELSE m.type END = CASE WHEN q.type IN ('integer','real','true','false')
                 THEN 'n' ELSE q.type END))
        END
        OR (json_type(c.metadata, f.path) IS NULL
            AND json_type(c.metadata, '$."d1saver:metadata"') IS NOT NULL)))
    ORDER BY checkpoint_id DESC, thread_id DESC, checkpoint_ns DESC
    LIMIT :limit
),
walk(thread_id, checkpoint_ns, checkpoint_id, sought) AS (
    SELECT p.thread_id, p.checkpoint_ns, p.parent_checkpoint_id,
           (SELECT json_group_array(s.value) FROM json_each((SELECT json_group_array(d.key)
     FROM json_each(p.metadata, '$.counters_since_delta_snapshot') AS d
     WHERE d.key NOT IN (SELECT value FROM json_each(p.channels))
       AND d.key NOT IN (
            SELECT u.value FROM delta_unwritten AS x, json_each(x.channels) AS u
            WHERE x.thread_id = p.thread_id AND x.checkpoint_ns = p.checkpoint_ns
              AND x.checkpoint_id = p.checkpoint_id))) AS s
     WHERE s.value NOT IN (SELECT f.channel FROM delta_frozen AS f
                           WHERE f.thread_id = p.thread_id AND f.checkpoint_ns = p.checkpoint_ns
                             AND f.checkpoint_id = p.checkpoint_id
                           GROUP BY f.channel HAVING SUM(f.kind = 'c') = 0))
    FROM page AS p
    UNION
    SELECT c.thread_id, c.checkpoint_ns, c.parent_checkpoint_id,
           (SELECT json_group_array(s.value) FROM json_each((SELECT json_group_array(s.value)
               FROM json_each(w.sought) AS s
     WHERE s.value NOT IN (SELECT value FROM json_each(c.channels)))) AS s
     WHERE s.value NOT IN (SELECT f.channel FROM delta_frozen AS f
                           WHERE f.thread_id = c.thread_id AND f.checkpoint_ns = c.checkpoint_ns
                             AND f.checkpoint_id = c.checkpoint_id
                           GROUP BY f.channel HAVING SUM(f.kind = 'c') = 0))
    FROM walk AS w JOIN checkpoints AS c USING (thread_id, checkpoint_ns, checkpoint_id)
    WHERE json_array_length(w.sought) > 0
),
visited AS (
    SELECT thread_id, checkpoint_ns, checkpoint_id,
           json_group_array(DISTINCT s.value) AS sought
    FROM walk, json_each(walk.sought) AS s
    WHERE checkpoint_id IS NOT NULL
    GROUP BY thread_id, checkpoint_ns, checkpoint_id
),
holders AS (
    SELECT thread_id, checkpoint_ns, checkpoint_id, sought FROM visited
    UNION ALL
    SELECT thread_id, checkpoint_ns, checkpoint_id, NULL FROM page
),
out AS (
SELECT 'a' AS kind, thread_id, checkpoint_ns, checkpoint_id, c.parent_checkpoint_id AS ref,
       CASE WHEN EXISTS (SELECT 1 FROM json_each(v.sought) AS s
                         WHERE s.value IN (SELECT value FROM json_each(c.channels)))
            THEN c.metadata END AS metadata,
       NULL AS task_path, NULL AS idx, c.channels AS channels, c.type AS type,
       CASE WHEN EXISTS (SELECT 1 FROM json_each(v.sought) AS s
                         WHERE s.value IN (SELECT value FROM json_each(c.channels)))
            THEN c.checkpoint END AS value
FROM visited AS v JOIN checkpoints AS c USING (thread_id, checkpoint_ns, checkpoint_id)
UNION ALL
SELECT 'w', thread_id, checkpoint_ns, checkpoint_id, w.task_id, NULL, w.task_path, w.idx,
       w.channel, w.type, w.value
FROM visited AS v CROSS JOIN writes AS w USING (thread_id, checkpoint_ns, checkpoint_id)
WHERE (w.channel IN (SELECT value FROM json_each(v.sought)) OR substr(w.value, 1, 2) = 'p:')
UNION ALL
SELECT 'k', thread_id, checkpoint_ns, checkpoint_id, k.owner, NULL, NULL, k.seq, NULL, NULL,
       k.data
FROM holders AS v CROSS JOIN chunks AS k USING (thread_id, checkpoint_ns, checkpoint_id)
WHERE v.sought IS NOT NULL OR substr(k.owner, 1, 2) = 'f/'
UNION ALL
SELECT 'f', thread_id, checkpoint_ns, checkpoint_id,
       json_array(f.kind, f.src_checkpoint_id, f.task_id, f.task_path, f.idx, f.channel, f.depth),
       f.metadata, NULL, NULL, f.channels, f.type, f.value
FROM holders AS v CROSS JOIN delta_frozen AS f USING (thread_id, checkpoint_ns, checkpoint_id)
WHERE v.sought IS NULL OR f.channel IN (SELECT value FROM json_each(v.sought))
),
vals(thread_id, v) AS (
    SELECT thread_id, CASE WHEN kind IN ('a', 'w', 'f') THEN value END FROM out
),
refs(thread_id, id) AS (
    SELECT o.thread_id, ltrim(j.value, '^')
    FROM vals AS o, json_each(CASE WHEN substr(o.v, 1, 2) = 'm:'
        THEN '["' || replace(substr(o.v, 3), ',', '","') || '"]' ELSE '[]' END) AS j
    WHERE instr(j.value, ':') = 0
    UNION
    SELECT o.thread_id, ltrim(j.value, '^')
    FROM vals AS o, json_each(CASE WHEN substr(o.v, 1, 2) = 'p:'
        THEN substr(o.v, 3) ELSE '[]' END) AS w,
        json_each(CASE WHEN substr(w.value->>3, 1, 2) = 'm:'
        THEN '["' || replace(substr(w.value->>3, 3), ',', '","') || '"]' ELSE '[]' END) AS j
    WHERE instr(j.value, ':') = 0
    UNION
    SELECT r.thread_id, ltrim(j.value, '^')
    FROM refs AS r CROSS JOIN d1saver_chunks AS n USING (thread_id, id),
        json_each('["' || replace(n.data, ',', '","') || '"]') AS j
    WHERE n.level > 0
),
page_out(thread_id, v) AS (
    SELECT thread_id, checkpoint FROM page
    UNION ALL
    SELECT thread_id, w.value
    FROM page AS p CROSS JOIN writes AS w USING (thread_id, checkpoint_ns, checkpoint_id)
),
seen(thread_id, id) AS (
    SELECT o.thread_id, ltrim(j.value, '^')
    FROM page_out AS o, json_each(CASE WHEN substr(o.v, 1, 2) = 'm:'
        THEN '["' || replace(substr(o.v, 3), ',', '","') || '"]' ELSE '[]' END) AS j
    WHERE instr(j.value, ':') = 0
    UNION
    SELECT o.thread_id, ltrim(j.value, '^')
    FROM page_out AS o, json_each(CASE WHEN substr(o.v, 1, 2) = 'p:'
        THEN substr(o.v, 3) ELSE '[]' END) AS w,
        json_each(CASE WHEN substr(w.value->>3, 1, 2) = 'm:'
        THEN '["' || replace(substr(w.value->>3, 3), ',', '","') || '"]' ELSE '[]' END) AS j
    WHERE instr(j.value, ':') = 0
    UNION
    SELECT r.thread_id, ltrim(j.value, '^')
    FROM seen AS r CROSS JOIN d1saver_chunks AS n USING (thread_id, id),
        json_each('["' || replace(n.data, ',', '","') || '"]') AS j
    WHERE n.level > 0
)
SELECT * FROM out
UNION ALL
SELECT 'h', thread_id, NULL, NULL, id, NULL, NULL, NULL, NULL, NULL, k.data
FROM refs AS r CROSS JOIN d1saver_chunks AS k USING (thread_id, id)
WHERE NOT EXISTS (SELECT 1 FROM seen AS s WHERE s.thread_id = r.thread_id AND s.id = r.id)""")
# The DeltaChannel prefetch that rides with each page statement (same parameters).
PAGE_DELTA_OF = {
    "SELECT_PAGE_THREAD_NS": SELECT_PAGE_DELTA_THREAD_NS,
    "SELECT_PAGE_THREAD": SELECT_PAGE_DELTA_THREAD,
    "SELECT_PAGE_ALL": SELECT_PAGE_DELTA_ALL,
    "SELECT_PAGE_THREAD_NS_FILTERED": SELECT_PAGE_DELTA_THREAD_NS_FILTERED,
    "SELECT_PAGE_THREAD_FILTERED": SELECT_PAGE_DELTA_THREAD_FILTERED,
    "SELECT_PAGE_ALL_FILTERED": SELECT_PAGE_DELTA_ALL_FILTERED,
}

# get_delta_channel_history in one statement. Walks parent links from the target
# (:checkpoint_id, or the thread's newest when NULL) and carries, per step, the JSON array of
# requested :channels still without a seed; a checkpoint whose `channels` holds one seeds it,
# and one with a frozen record of it (the target included) ends its walk with that record.
# Rows: 'a' (ancestor), 'w' (write of a sought channel at an ancestor), 'k' (piece of an
# ancestor's value, or a frozen piece of the target), 'f' (a holder's frozen record), 'h'
# (content-addressed chunks), columns as DELTA_HISTORY_COLUMNS says. At most 4 terms
# in a compound SELECT: the real D1 engine refused 6 ("too many terms in compound SELECT").
# The depth bound stops a corrupt parent loop; LangGraph snapshots every 5000 steps at most.
DELTA_HISTORY = q("""
WITH RECURSIVE
target AS (
    SELECT thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id FROM checkpoints
    WHERE thread_id = :thread_id AND checkpoint_ns = :checkpoint_ns AND (:checkpoint_id IS NULL
        OR checkpoint_id = :checkpoint_id)
    ORDER BY checkpoint_id DESC LIMIT 1
),
chain(checkpoint_id, depth, sought) AS (
    SELECT t.parent_checkpoint_id, 1, (SELECT json_group_array(s.value)
        FROM json_each(json(:channels)) AS s
     WHERE s.value NOT IN (SELECT f.channel FROM delta_frozen AS f
                           WHERE f.thread_id = t.thread_id AND f.checkpoint_ns = t.checkpoint_ns
                             AND f.checkpoint_id = t.checkpoint_id
                           GROUP BY f.channel HAVING SUM(f.kind = 'c') = 0))
    FROM target AS t
    UNION ALL
    SELECT p.parent_checkpoint_id, chain.depth + 1,
           (SELECT json_group_array(s.value) FROM json_each((SELECT json_group_array(s.value)
            FROM json_each(chain.sought) AS s
            WHERE s.value NOT IN (SELECT value FROM json_each(p.channels)))) AS s
     WHERE s.value NOT IN (SELECT f.channel FROM delta_frozen AS f
                           WHERE f.thread_id = p.thread_id AND f.checkpoint_ns = p.checkpoint_ns
                             AND f.checkpoint_id = p.checkpoint_id
                           GROUP BY f.channel HAVING SUM(f.kind = 'c') = 0))
    FROM chain JOIN checkpoints AS p ON p.thread_id = :thread_id
        AND p.checkpoint_ns = :checkpoint_ns
        AND p.checkpoint_id = chain.checkpoint_id
    WHERE json_array_length(chain.sought) > 0 AND chain.depth < 20000
),
ancestors AS (
    SELECT chain.depth, chain.sought, p.checkpoint_id, p.channels, p.type, p.checkpoint,
           p.metadata
    FROM chain JOIN checkpoints AS p ON p.thread_id = :thread_id
        AND p.checkpoint_ns = :checkpoint_ns
        AND p.checkpoint_id = chain.checkpoint_id
    WHERE json_array_length(chain.sought) > 0
),
holders AS (
    SELECT 0 AS depth, json(:channels) AS sought, t.checkpoint_id, '[]' AS channels
        FROM target AS t
    UNION ALL
    SELECT depth, sought, checkpoint_id, channels FROM ancestors
),
out AS (
SELECT 'a' AS kind, a.depth AS depth, a.checkpoint_id AS checkpoint_id, NULL AS ref,
       a.sought AS sought,
       CASE WHEN EXISTS (SELECT 1 FROM json_each(a.sought) AS s
                         WHERE s.value IN (SELECT value FROM json_each(a.channels)))
            THEN a.metadata END AS metadata,
       NULL AS task_path, NULL AS idx, a.channels AS channels, a.type AS type,
       CASE WHEN EXISTS (SELECT 1 FROM json_each(a.sought) AS s
                         WHERE s.value IN (SELECT value FROM json_each(a.channels)))
            THEN a.checkpoint END AS value
FROM ancestors AS a
UNION ALL
SELECT 'w', a.depth, w.checkpoint_id, w.task_id, NULL, NULL, w.task_path, w.idx, w.channel,
       w.type, w.value
FROM ancestors AS a JOIN writes AS w ON w.thread_id = :thread_id
    AND w.checkpoint_ns = :checkpoint_ns
    AND w.checkpoint_id = a.checkpoint_id
WHERE (w.channel IN (SELECT value FROM json_each(a.sought)) OR substr(w.value, 1, 2) = 'p:')
UNION ALL
SELECT 'f', h.depth, h.checkpoint_id,
       json_array(f.kind, f.src_checkpoint_id, f.task_id, f.task_path, f.idx, f.channel, f.depth),
       NULL, f.metadata, NULL, NULL, f.channels, f.type, f.value
FROM holders AS h JOIN delta_frozen AS f ON f.thread_id = :thread_id
    AND f.checkpoint_ns = :checkpoint_ns
    AND f.checkpoint_id = h.checkpoint_id
WHERE f.channel IN (SELECT value FROM json_each(h.sought))
  AND f.channel NOT IN (SELECT value FROM json_each(h.channels))
UNION ALL
SELECT 'k', h.depth, k.checkpoint_id, k.owner, NULL, NULL, NULL, k.seq, NULL, NULL, k.data
FROM holders AS h JOIN chunks AS k ON k.thread_id = :thread_id AND k.checkpoint_ns = :checkpoint_ns
    AND k.checkpoint_id = h.checkpoint_id
WHERE h.depth > 0 OR substr(k.owner, 1, 2) = 'f/'
),
vals(thread_id, v) AS (
    SELECT :thread_id, CASE WHEN kind IN ('a', 'w', 'f') THEN value END FROM out
),
refs(thread_id, id) AS (
    SELECT o.thread_id, ltrim(j.value, '^')
    FROM vals AS o, json_each(CASE WHEN substr(o.v, 1, 2) = 'm:'
        THEN '["' || replace(substr(o.v, 3), ',', '","') || '"]' ELSE '[]' END) AS j
    WHERE instr(j.value, ':') = 0
    UNION
    SELECT o.thread_id, ltrim(j.value, '^')
    FROM vals AS o, json_each(CASE WHEN substr(o.v, 1, 2) = 'p:'
        THEN substr(o.v, 3) ELSE '[]' END) AS w,
        json_each(CASE WHEN substr(w.value->>3, 1, 2) = 'm:'
        THEN '["' || replace(substr(w.value->>3, 3), ',', '","') || '"]' ELSE '[]' END) AS j
    WHERE instr(j.value, ':') = 0
    UNION
    SELECT r.thread_id, ltrim(j.value, '^')
    FROM refs AS r CROSS JOIN d1saver_chunks AS n USING (thread_id, id),
        json_each('["' || replace(n.data, ',', '","') || '"]') AS j
    WHERE n.level > 0
)
SELECT * FROM out
UNION ALL
SELECT 'h', NULL, NULL, id, NULL, NULL, NULL, NULL, NULL, NULL, k.data
FROM refs AS r CROSS JOIN d1saver_chunks AS k USING (thread_id, id)""")

# Columns of DELTA_HISTORY, per row kind (every row but 'h' has its depth on the walk):
#   'a' ancestor: checkpoint_id, sought (the channels still sought on arrival), channels,
#                 type, and metadata and value the checkpoint only if it is a seed
#   'w' write:    checkpoint_id, ref task_id, task_path, idx, channels the channel, type, value
#   'k' piece:    checkpoint_id, ref owner, idx seq, value the piece's text
#   'f' frozen:   checkpoint_id (the holder), ref the identity of the row the value came from,
#                 metadata, channels, type, value
#   'h' chunk:    ref the chunk id, value its data
DELTA_HISTORY_COLUMNS = ("kind", "depth", "checkpoint_id", "ref", "sought", "metadata",
                         "task_path", "idx", "channels", "type", "value")

# --- idempotency records ------------------------------------------------------------------
#
# A request whose response was lost is sent again, identical, and runs on the state its first
# try left. Every write is idempotent, but an answer drawn from what a statement changed is
# not: untag's retry finds no tag, a retried compaction batch nothing left to delete. Such a
# batch records its answer under an op id the client drew before sending (INSERT OR IGNORE:
# a retry keeps the first try's) and reads it back. Records live a day on the database's
# clock, far past any retry (RetryPolicy.max_elapsed is 60 s by default); the batches that
# record also forget the expired ones.
FORGET_OLD_OPS = q("""
DELETE FROM d1saver_ops WHERE created_at < CAST(strftime('%s', 'now') AS INTEGER) - 86400""")
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
UNTAG = q("""
DELETE FROM tags WHERE thread_id = :thread_id AND checkpoint_ns = :checkpoint_ns
    AND name = :name""")
# Sent before UNTAG in its batch: records under :op_id whether the tag exists (1 or 0).
RECORD_UNTAG = q("""
INSERT OR IGNORE INTO d1saver_ops (op_id, result, created_at)
SELECT :op_id, COUNT(*), CAST(strftime('%s', 'now') AS INTEGER)
FROM tags WHERE thread_id = :thread_id AND checkpoint_ns = :checkpoint_ns AND name = :name""")
LIST_TAGS_COLUMNS = ("name", "checkpoint_id")
LIST_TAGS = q("""
SELECT name, checkpoint_id FROM tags WHERE thread_id = :thread_id
    AND checkpoint_ns = :checkpoint_ns
ORDER BY checkpoint_id DESC, name""")

# --- content-addressed chunks: garbage collection and the check --------------------------

# Exact garbage collection of content-addressed chunks (migration 7), last in every batch that
# deletes rows of the threads in d1saver_scope: a chunk stays only if a remaining checkpoint or
# write of its thread reaches it (through its manifest, nodes opened level by level). In the
# same batch as the deletions, so no chunk is ever referenced but missing, and none is left
# unreferenced. A put racing it either committed first (its chunks are reached) or finds a
# chunk gone and fails with chunk_missing, then sends its chunks again (d1saver/ops/operations.py).
# A manifest's entries are read as a JSON array by wrapping them in quotes: entries never
# hold ',', '"' or '\\' (d1saver/storage/manifest.py), so that is exact; a "p:" row packs one
# put_writes call's regular writes (migration 7), each of which may be a manifest.
GC_CHUNKS = q("""
WITH RECURSIVE reached(thread_id, id) AS (
    SELECT c.thread_id, ltrim(j.value, '^')
    FROM checkpoints AS c, json_each(CASE WHEN substr(c.checkpoint, 1, 2) = 'm:'
        THEN '["' || replace(substr(c.checkpoint, 3), ',', '","') || '"]' ELSE '[]' END) AS j
    WHERE c.thread_id IN (SELECT thread_id FROM d1saver_scope) AND instr(j.value, ':') = 0
    UNION
    SELECT w.thread_id, ltrim(j.value, '^')
    FROM writes AS w, json_each(CASE WHEN substr(w.value, 1, 2) = 'm:'
        THEN '["' || replace(substr(w.value, 3), ',', '","') || '"]' ELSE '[]' END) AS j
    WHERE w.thread_id IN (SELECT thread_id FROM d1saver_scope) AND instr(j.value, ':') = 0
    UNION
    SELECT w.thread_id, ltrim(j.value, '^')
    FROM writes AS w, json_each(CASE WHEN substr(w.value, 1, 2) = 'p:' THEN substr(w.value, 3)
        ELSE '[]' END) AS p, json_each(CASE WHEN substr(p.value->>3, 1, 2) = 'm:'
        THEN '["' || replace(substr(p.value->>3, 3), ',', '","') || '"]' ELSE '[]' END) AS j
    WHERE w.thread_id IN (SELECT thread_id FROM d1saver_scope) AND instr(j.value, ':') = 0
    UNION
    SELECT f.thread_id, ltrim(j.value, '^')
    FROM delta_frozen AS f, json_each(CASE WHEN substr(f.value, 1, 2) = 'm:'
        THEN '["' || replace(substr(f.value, 3), ',', '","') || '"]' ELSE '[]' END) AS j
    WHERE f.thread_id IN (SELECT thread_id FROM d1saver_scope) AND instr(j.value, ':') = 0
    UNION
    SELECT r.thread_id, ltrim(j.value, '^')
    FROM reached AS r CROSS JOIN d1saver_chunks AS n ON n.thread_id = r.thread_id AND n.id = r.id
        AND n.level > 0, json_each('["' || replace(n.data, ',', '","') || '"]') AS j
)
DELETE FROM d1saver_chunks WHERE thread_id IN (SELECT thread_id FROM d1saver_scope)
    AND (thread_id, id) NOT IN (SELECT thread_id, id FROM reached)""")

# The check (`d1saver check`, and the tests after every deleting operation): per thread
# (:thread_id, or every thread when NULL) that breaks the rule, the ids its rows reach that are not
# stored, and the chunks stored that no row reaches. No row: the chunk table is exact.
CHUNK_CHECK_COLUMNS = ("thread_id", "missing", "unreferenced")
CHUNK_CHECK = q("""
WITH RECURSIVE reached(thread_id, id) AS (
    SELECT c.thread_id, ltrim(j.value, '^')
    FROM checkpoints AS c, json_each(CASE WHEN substr(c.checkpoint, 1, 2) = 'm:'
        THEN '["' || replace(substr(c.checkpoint, 3), ',', '","') || '"]' ELSE '[]' END) AS j
    WHERE c.thread_id IN (SELECT thread_id FROM checkpoints WHERE :thread_id IS NULL
        OR thread_id = :thread_id
        UNION SELECT thread_id FROM writes WHERE :thread_id IS NULL OR thread_id = :thread_id)
            AND instr(j.value, ':') = 0
    UNION
    SELECT w.thread_id, ltrim(j.value, '^')
    FROM writes AS w, json_each(CASE WHEN substr(w.value, 1, 2) = 'm:'
        THEN '["' || replace(substr(w.value, 3), ',', '","') || '"]' ELSE '[]' END) AS j
    WHERE w.thread_id IN (SELECT thread_id FROM checkpoints WHERE :thread_id IS NULL
        OR thread_id = :thread_id
        UNION SELECT thread_id FROM writes WHERE :thread_id IS NULL OR thread_id = :thread_id)
            AND instr(j.value, ':') = 0
    UNION
    SELECT w.thread_id, ltrim(j.value, '^')
    FROM writes AS w, json_each(CASE WHEN substr(w.value, 1, 2) = 'p:' THEN substr(w.value, 3)
        ELSE '[]' END) AS p, json_each(CASE WHEN substr(p.value->>3, 1, 2) = 'm:'
        THEN '["' || replace(substr(p.value->>3, 3), ',', '","') || '"]' ELSE '[]' END) AS j
    WHERE w.thread_id IN (SELECT thread_id FROM checkpoints WHERE :thread_id IS NULL
        OR thread_id = :thread_id
        UNION SELECT thread_id FROM writes WHERE :thread_id IS NULL OR thread_id = :thread_id)
            AND instr(j.value, ':') = 0
    UNION
    SELECT f.thread_id, ltrim(j.value, '^')
    FROM delta_frozen AS f, json_each(CASE WHEN substr(f.value, 1, 2) = 'm:'
        THEN '["' || replace(substr(f.value, 3), ',', '","') || '"]' ELSE '[]' END) AS j
    WHERE f.thread_id IN (SELECT thread_id FROM checkpoints WHERE :thread_id IS NULL
        OR thread_id = :thread_id
        UNION SELECT thread_id FROM writes WHERE :thread_id IS NULL OR thread_id = :thread_id)
            AND instr(j.value, ':') = 0
    UNION
    SELECT r.thread_id, ltrim(j.value, '^')
    FROM reached AS r CROSS JOIN d1saver_chunks AS n ON n.thread_id = r.thread_id AND n.id = r.id
        AND n.level > 0, json_each('["' || replace(n.data, ',', '","') || '"]') AS j
),
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

# Lists of ids (threads, runs) arrive as a JSON array of the hex of their UTF-8: a JSON decoder
# that stops at "\u0000" (SQLite 3.40's, the local D1's) cannot cut an id short.

# :thread_ids: JSON array of thread ids. Children first, checkpoints last.
DELETE_THREADS_WRITES = q("""
DELETE FROM writes WHERE thread_id IN (SELECT CAST(unhex(value) AS TEXT)
    FROM json_each(:thread_ids))""")
DELETE_THREADS_D1SAVER_CHUNKS = q("""
DELETE FROM d1saver_chunks WHERE thread_id IN (SELECT CAST(unhex(value) AS TEXT)
    FROM json_each(:thread_ids))""")
DELETE_THREADS_CHUNKS = q("""
DELETE FROM chunks WHERE thread_id IN (SELECT CAST(unhex(value) AS TEXT)
    FROM json_each(:thread_ids))""")
DELETE_THREADS_TAGS = q("""
DELETE FROM tags WHERE thread_id IN (SELECT CAST(unhex(value) AS TEXT)
    FROM json_each(:thread_ids))""")
DELETE_THREADS_CHECKPOINTS = q("""
DELETE FROM checkpoints WHERE thread_id IN (SELECT CAST(unhex(value) AS TEXT)
    FROM json_each(:thread_ids))""")
# A move of these threads in flight must not publish what it read before (migration 12).
DELETE_THREADS_MOVES = q("""
DELETE FROM d1saver_moves WHERE thread_id IN (SELECT CAST(unhex(value) AS TEXT)
    FROM json_each(:thread_ids))""")
# Rows staged to become these threads, or copied from them (a copy killed midway): their
# registration goes, and its delete trigger (d1saver_staged_removed) takes the rows
# (migration 12).
DELETE_THREADS_STAGED = q("""
DELETE FROM d1saver_staged
WHERE thread_id IN (SELECT CAST(unhex(value) AS TEXT) FROM json_each(:thread_ids))
   OR source_id IN (SELECT CAST(unhex(value) AS TEXT) FROM json_each(:thread_ids))
   OR staging_id IN (SELECT CAST(unhex(value) AS TEXT) FROM json_each(:thread_ids))""")
# Last: where copies of these threads are staged in other databases (columns
# STAGED_ELSEWHERE_COLUMNS), for delete_thread to remove them there too.
DELETE_THREADS_STAGED_ELSEWHERE = q("""
DELETE FROM d1saver_staged_elsewhere WHERE source_id IN (SELECT CAST(unhex(value) AS TEXT)
    FROM json_each(:thread_ids))
RETURNING database_id, staging_id""")
DELETE_THREADS = [DELETE_THREADS_WRITES, DELETE_THREADS_D1SAVER_CHUNKS, DELETE_THREADS_CHUNKS,
                  DELETE_THREADS_TAGS, DELETE_THREADS_CHECKPOINTS, DELETE_THREADS_MOVES,
                  DELETE_THREADS_STAGED, DELETE_THREADS_STAGED_ELSEWHERE]
# delta_unwritten and delta_frozen rows go with their checkpoints (triggers)

# Writes are stored packed ("p:": one put_writes call's regular writes in one row, keyed by its
# first idx), so a copy cannot replace them by row key: for every task the source has writes
# of, at a checkpoint, the target's writes of that task become one row each but those whose
# idx the source has, which go (with their pieces), so that the source's rows then inserted
# give each (task, idx) once: the source's if it has it, else the target's (as a per-key copy
# of InMemorySaver's storage). :source, :target; in COPY_THREAD and RENAME_THREAD.
UNPACK_TARGET_PIECES = q("""
DELETE FROM chunks WHERE thread_id = :target AND EXISTS (
    SELECT 1 FROM writes AS t WHERE t.thread_id = :target AND t.checkpoint_ns = chunks.checkpoint_ns
        AND t.checkpoint_id = chunks.checkpoint_id AND chunks.owner = t.task_id || '/' || t.idx
        AND EXISTS (SELECT 1 FROM writes AS s CROSS JOIN json_each(
                CASE WHEN substr(s.value, 1, 2) = 'p:' THEN substr(s.value, 3)
                ELSE json_array(json_array(s.idx)) END) AS q
            WHERE s.thread_id = :source AND s.checkpoint_ns = t.checkpoint_ns
              AND s.checkpoint_id = t.checkpoint_id AND s.task_id = t.task_id
              AND q.value->>0 = t.idx))""")
UNPACK_TARGET_PACKS = q("""
INSERT OR REPLACE INTO writes (thread_id, checkpoint_ns, checkpoint_id, task_id, task_path,
    idx, channel, type, value)
SELECT t.thread_id, t.checkpoint_ns, t.checkpoint_id, t.task_id, t.task_path, e.value->>0,
       e.value->>1, COALESCE(e.value->>2, 'msgpack'), e.value->>3
FROM writes AS t CROSS JOIN json_each(substr(t.value, 3)) AS e
WHERE t.thread_id = :target AND substr(t.value, 1, 2) = 'p:'
  AND EXISTS (SELECT 1 FROM writes AS s WHERE s.thread_id = :source
      AND s.checkpoint_ns = t.checkpoint_ns AND s.checkpoint_id = t.checkpoint_id
      AND s.task_id = t.task_id)
  AND NOT EXISTS (SELECT 1 FROM writes AS s CROSS JOIN json_each(
          CASE WHEN substr(s.value, 1, 2) = 'p:' THEN substr(s.value, 3)
          ELSE json_array(json_array(s.idx)) END) AS q
      WHERE s.thread_id = :source AND s.checkpoint_ns = t.checkpoint_ns
        AND s.checkpoint_id = t.checkpoint_id AND s.task_id = t.task_id
        AND q.value->>0 = e.value->>0)""")
UNPACK_TARGET_DROP = q("""
DELETE FROM writes AS t WHERE t.thread_id = :target
  AND EXISTS (SELECT 1 FROM writes AS s WHERE s.thread_id = :source
      AND s.checkpoint_ns = t.checkpoint_ns AND s.checkpoint_id = t.checkpoint_id
      AND s.task_id = t.task_id)
  AND (substr(t.value, 1, 2) = 'p:'
       OR EXISTS (SELECT 1 FROM writes AS s CROSS JOIN json_each(
              CASE WHEN substr(s.value, 1, 2) = 'p:' THEN substr(s.value, 3)
              ELSE json_array(json_array(s.idx)) END) AS q
          WHERE s.thread_id = :source AND s.checkpoint_ns = t.checkpoint_ns
            AND s.checkpoint_id = t.checkpoint_id AND s.task_id = t.task_id
            AND q.value->>0 = t.idx))""")
UNPACK_TARGET_WRITES = [UNPACK_TARGET_PIECES, UNPACK_TARGET_PACKS, UNPACK_TARGET_DROP]

# :source thread, :target thread. Rows already on the target are replaced (writes per (task,
# idx): UNPACK_TARGET_WRITES). Checkpoints go in id order, parents before children
# (delta_frozen_bound, migration 9, looks a parent up).
COPY_D1SAVER_CHUNKS = q("""
INSERT OR IGNORE INTO d1saver_chunks (thread_id, id, level, data)
SELECT :target, id, level, data FROM d1saver_chunks WHERE thread_id = :source ORDER BY level""")
COPY_CHECKPOINTS = q("""
INSERT OR REPLACE INTO checkpoints (thread_id, checkpoint_ns, checkpoint_id,
    parent_checkpoint_id, type, checkpoint, metadata, channels, run_id, ts)
SELECT :target, checkpoint_ns, checkpoint_id, parent_checkpoint_id, type, checkpoint,
       metadata, channels, run_id, ts
FROM checkpoints WHERE thread_id = :source ORDER BY checkpoint_ns, checkpoint_id""")
COPY_WRITES = q("""
INSERT OR REPLACE INTO writes (thread_id, checkpoint_ns, checkpoint_id, task_id, task_path,
    idx, channel, type, value)
SELECT :target, checkpoint_ns, checkpoint_id, task_id, task_path, idx, channel, type, value
FROM writes WHERE thread_id = :source""")
COPY_CHUNKS = q("""
INSERT OR REPLACE INTO chunks (thread_id, checkpoint_ns, checkpoint_id, owner, seq, data)
SELECT :target, checkpoint_ns, checkpoint_id, owner, seq, data FROM chunks
    WHERE thread_id = :source""")
COPY_TAGS = q("""
INSERT OR REPLACE INTO tags (thread_id, checkpoint_ns, checkpoint_id, name, created_at)
SELECT :target, checkpoint_ns, checkpoint_id, name, created_at FROM tags
    WHERE thread_id = :source""")
COPY_DELTA_UNWRITTEN = q("""
INSERT OR REPLACE INTO delta_unwritten (thread_id, checkpoint_ns, checkpoint_id, channels)
SELECT :target, checkpoint_ns, checkpoint_id, channels FROM delta_unwritten WHERE thread_id = :source""")
# Frozen histories (their pieces came with the chunks), with the parent each is bound to
# (migration 9). Without keys only: with keys a value is bound to its thread
# (d1saver/ops/reseal.py).
COPY_DELTA_FROZEN = q("""
INSERT OR REPLACE INTO delta_frozen (thread_id, checkpoint_ns, checkpoint_id, channel, kind, depth, task_id, idx, src_checkpoint_id, task_path, type, value, metadata, channels, parent)
SELECT :target, checkpoint_ns, checkpoint_id, channel, kind, depth, task_id, idx, src_checkpoint_id, task_path, type, value, metadata, channels, parent FROM delta_frozen WHERE thread_id = :source""")
CLEAR_SCOPE = q("DELETE FROM d1saver_scope")
SCOPE_TARGET = q("INSERT INTO d1saver_scope (thread_id) VALUES (:target)")
COPY_THREAD = [COPY_D1SAVER_CHUNKS, COPY_CHECKPOINTS, *UNPACK_TARGET_WRITES, COPY_WRITES, COPY_CHUNKS, COPY_TAGS, COPY_DELTA_UNWRITTEN, COPY_DELTA_FROZEN, CLEAR_SCOPE, SCOPE_TARGET, GC_CHUNKS, CLEAR_SCOPE]

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
# history first. CROSS JOIN holds the join order: left to choose, SQLite scanned a thread's checkpoints for
# every kept row. N = 0 keeps only tagged checkpoints (and what they need).
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
# walks on from the 'c' row's depth. Values are
# copied verbatim with the identity of the rows they were stored at: nothing is decoded, so
# it works for any state and with keys. (The saver cannot compute the channel's value: its
# reducer is graph code. So it records the history, not a snapshot.) A walk row is (origin,
# channel, depth, cur: the checkpoint at that depth, steps taken, bound: the namespace's
# checkpoints, more steps than a walk without a loop can take, so a corrupt parent loop ends).
# The sub-selects on delta_frozen read the depth of a checkpoint's 'c' row for the channel
# (NULL: none, or no record), and whether it holds a record of the channel that ends its
# history (no 'c' row). A write row is read as [idx, channel, type, value] entries: a "p:" row
# (migration 7) packs one put_writes call's writes (type null: "msgpack"), any other row
# holds itself.
FREEZE = q("""
INSERT OR IGNORE INTO delta_frozen (thread_id, checkpoint_ns, checkpoint_id, channel, kind,
    depth, task_id, idx, src_checkpoint_id, task_path, type, value, metadata, channels)
WITH RECURSIVE
walk(thread_id, checkpoint_ns, origin, channel, depth, cur, steps, bound) AS (
    SELECT c.thread_id, c.checkpoint_ns, c.checkpoint_id, s.value,
           COALESCE((SELECT MAX(f.depth) FROM delta_frozen AS f WHERE f.thread_id = c.thread_id
    AND f.checkpoint_ns = c.checkpoint_ns AND f.checkpoint_id = c.checkpoint_id
    AND f.channel = s.value AND f.kind = 'c'), 1), c.parent_checkpoint_id, 1,
           (SELECT COUNT(*) FROM checkpoints AS n WHERE n.thread_id = c.thread_id
                AND n.checkpoint_ns = c.checkpoint_ns)
    FROM d1saver_keep AS k CROSS JOIN checkpoints AS c ON c.thread_id = k.thread_id
        AND c.checkpoint_ns = k.checkpoint_ns AND c.checkpoint_id = k.checkpoint_id
    CROSS JOIN json_each((SELECT json_group_array(d.key)
     FROM json_each(c.metadata, '$.counters_since_delta_snapshot') AS d
     WHERE d.key NOT IN (SELECT value FROM json_each(c.channels))
       AND d.key NOT IN (
            SELECT u.value FROM delta_unwritten AS x, json_each(x.channels) AS u
            WHERE x.thread_id = c.thread_id AND x.checkpoint_ns = c.checkpoint_ns
              AND x.checkpoint_id = c.checkpoint_id))) AS s
    WHERE c.parent_checkpoint_id IS NOT NULL
      AND NOT EXISTS (SELECT 1 FROM d1saver_keep AS k WHERE k.thread_id = c.thread_id
    AND k.checkpoint_ns = c.checkpoint_ns AND k.checkpoint_id = c.parent_checkpoint_id)
      AND NOT (EXISTS (SELECT 1 FROM delta_frozen AS f WHERE f.thread_id = c.thread_id
    AND f.checkpoint_ns = c.checkpoint_ns AND f.checkpoint_id = c.checkpoint_id
    AND f.channel = s.value) AND (SELECT MAX(f.depth) FROM delta_frozen AS f
        WHERE f.thread_id = c.thread_id
    AND f.checkpoint_ns = c.checkpoint_ns AND f.checkpoint_id = c.checkpoint_id
    AND f.channel = s.value AND f.kind = 'c') IS NULL)
    UNION ALL
    SELECT w.thread_id, w.checkpoint_ns, w.origin, w.channel,
           w.depth + COALESCE((SELECT MAX(f.depth) FROM delta_frozen AS f
               WHERE f.thread_id = p.thread_id
    AND f.checkpoint_ns = p.checkpoint_ns AND f.checkpoint_id = p.checkpoint_id
    AND f.channel = w.channel AND f.kind = 'c'), 1),
           p.parent_checkpoint_id, w.steps + 1, w.bound
    FROM walk AS w CROSS JOIN checkpoints AS p ON p.thread_id = w.thread_id
        AND p.checkpoint_ns = w.checkpoint_ns AND p.checkpoint_id = w.cur
    WHERE p.parent_checkpoint_id IS NOT NULL AND w.steps < w.bound
      AND NOT EXISTS (SELECT 1 FROM d1saver_keep AS k WHERE k.thread_id = p.thread_id
    AND k.checkpoint_ns = p.checkpoint_ns AND k.checkpoint_id = p.checkpoint_id)
      AND w.channel NOT IN (SELECT value FROM json_each(p.channels))
      AND NOT (EXISTS (SELECT 1 FROM delta_frozen AS f WHERE f.thread_id = p.thread_id
    AND f.checkpoint_ns = p.checkpoint_ns AND f.checkpoint_id = p.checkpoint_id
    AND f.channel = w.channel) AND (SELECT MAX(f.depth) FROM delta_frozen AS f
        WHERE f.thread_id = p.thread_id
    AND f.checkpoint_ns = p.checkpoint_ns AND f.checkpoint_id = p.checkpoint_id
    AND f.channel = w.channel AND f.kind = 'c') IS NULL)
)
SELECT w.thread_id, w.checkpoint_ns, w.origin, w.channel, 'w', w.depth, x.task_id,
       e.value->>0, w.cur, x.task_path, COALESCE(e.value->>2, 'msgpack'), e.value->>3, NULL, NULL
FROM walk AS w CROSS JOIN writes AS x ON x.thread_id = w.thread_id
    AND x.checkpoint_ns = w.checkpoint_ns AND x.checkpoint_id = w.cur
CROSS JOIN json_each(CASE WHEN substr(x.value, 1, 2) = 'p:' THEN substr(x.value, 3)
    ELSE json_array(json_array(x.idx, x.channel, x.type, x.value)) END) AS e
WHERE e.value->>1 = w.channel AND NOT EXISTS (SELECT 1 FROM d1saver_keep AS k
    WHERE k.thread_id = w.thread_id
    AND k.checkpoint_ns = w.checkpoint_ns AND k.checkpoint_id = w.cur)
  AND EXISTS (SELECT 1 FROM checkpoints AS n WHERE n.thread_id = w.thread_id
              AND n.checkpoint_ns = w.checkpoint_ns AND n.checkpoint_id = w.cur)
UNION ALL
SELECT w.thread_id, w.checkpoint_ns, w.origin, w.channel, 's', w.depth, '', 0, w.cur, '',
       p.type, p.checkpoint, p.metadata, p.channels
FROM walk AS w CROSS JOIN checkpoints AS p ON p.thread_id = w.thread_id
    AND p.checkpoint_ns = w.checkpoint_ns AND p.checkpoint_id = w.cur
WHERE NOT EXISTS (SELECT 1 FROM d1saver_keep AS k WHERE k.thread_id = w.thread_id
    AND k.checkpoint_ns = w.checkpoint_ns AND k.checkpoint_id = w.cur)
  AND w.channel IN (SELECT value FROM json_each(p.channels))
UNION ALL
SELECT w.thread_id, w.checkpoint_ns, w.origin, w.channel, f.kind, w.depth + f.depth, f.task_id,
       f.idx, f.src_checkpoint_id, f.task_path, f.type, f.value, f.metadata, f.channels
FROM walk AS w CROSS JOIN delta_frozen AS f ON f.thread_id = w.thread_id
    AND f.checkpoint_ns = w.checkpoint_ns AND f.checkpoint_id = w.cur AND f.channel = w.channel
WHERE NOT EXISTS (SELECT 1 FROM d1saver_keep AS k WHERE k.thread_id = w.thread_id
    AND k.checkpoint_ns = w.checkpoint_ns AND k.checkpoint_id = w.cur) AND f.kind <> 'c'
UNION ALL
SELECT w.thread_id, w.checkpoint_ns, w.origin, w.channel, 'c', w.depth, '', 0, w.cur, '', NULL,
       NULL, NULL, NULL
FROM walk AS w WHERE EXISTS (SELECT 1 FROM d1saver_keep AS k WHERE k.thread_id = w.thread_id
    AND k.checkpoint_ns = w.checkpoint_ns AND k.checkpoint_id = w.cur)""")

# After FREEZE: a 'c' row that a record's newer rows now lie beyond (its holder's walk went on
# from there) goes.
FREEZE_DONE = q("""
DELETE FROM delta_frozen AS c WHERE c.kind = 'c' AND c.thread_id IN (SELECT thread_id
    FROM d1saver_scope) AND EXISTS (
    SELECT 1 FROM delta_frozen AS f WHERE f.thread_id = c.thread_id
        AND f.checkpoint_ns = c.checkpoint_ns AND f.checkpoint_id = c.checkpoint_id
        AND f.channel = c.channel AND f.depth >= c.depth AND NOT (f.kind = 'c'
            AND f.depth = c.depth))""")

# The pieces of frozen values stored over several rows ("c:<n>": values over D1's row limit),
# copied to their holder as owner 'f/<src_checkpoint_id>/<owner>': from the row they were
# stored with, or from the holder of the record they were copied from. For the threads in
# scope; a piece already there is left alone.
FREEZE_PIECES = q("""
INSERT OR IGNORE INTO chunks (thread_id, checkpoint_ns, checkpoint_id, owner, seq, data)
SELECT f.thread_id, f.checkpoint_ns, f.checkpoint_id,
       'f/' || f.src_checkpoint_id || '/' || k.owner, k.seq, k.data
FROM delta_frozen AS f CROSS JOIN chunks AS k ON k.thread_id = f.thread_id
    AND k.checkpoint_ns = f.checkpoint_ns AND k.checkpoint_id = f.src_checkpoint_id
    AND (k.owner = CASE f.kind WHEN 'w' THEN f.task_id || '/' || f.idx END OR (f.kind = 's'
        AND k.owner IN ('', ':metadata')))
WHERE f.thread_id IN (SELECT thread_id FROM d1saver_scope)
UNION ALL
SELECT f.thread_id, f.checkpoint_ns, f.checkpoint_id, k.owner, k.seq, k.data
FROM delta_frozen AS f CROSS JOIN chunks AS k ON k.thread_id = f.thread_id
    AND k.checkpoint_ns = f.checkpoint_ns AND k.checkpoint_id <> f.checkpoint_id
    AND (k.owner = 'f/' || f.src_checkpoint_id || '/' || CASE f.kind WHEN 'w'
        THEN f.task_id || '/' || f.idx END
         OR (f.kind = 's' AND k.owner IN ('f/' || f.src_checkpoint_id || '/',
                                          'f/' || f.src_checkpoint_id || '/:metadata')))
WHERE f.thread_id IN (SELECT thread_id FROM d1saver_scope)""")

# For every kept checkpoint whose parent is not kept, walk up to the nearest kept ancestor
# (or none) and record it, so that no parent_config ever names a deleted checkpoint. A walk
# row is (origin, checkpoint reached, whether it is kept); UNION ends a parent loop. CROSS JOIN
# starts from the kept rows: left to choose, SQLite scanned every checkpoint of the database.
PLAN_RELINK = q("""
INSERT OR REPLACE INTO d1saver_relink (thread_id, checkpoint_ns, checkpoint_id, new_parent)
WITH RECURSIVE
walk(thread_id, checkpoint_ns, origin, cur, kept) AS (
    SELECT c.thread_id, c.checkpoint_ns, c.checkpoint_id, c.parent_checkpoint_id, 0
    FROM d1saver_keep AS k CROSS JOIN checkpoints AS c ON c.thread_id = k.thread_id
        AND c.checkpoint_ns = k.checkpoint_ns AND c.checkpoint_id = k.checkpoint_id
    WHERE c.parent_checkpoint_id IS NOT NULL AND NOT EXISTS (
        SELECT 1 FROM d1saver_keep AS k2 WHERE k2.thread_id = c.thread_id
            AND k2.checkpoint_ns = c.checkpoint_ns AND k2.checkpoint_id = c.parent_checkpoint_id)
    UNION
    SELECT w.thread_id, w.checkpoint_ns, w.origin, p.parent_checkpoint_id, EXISTS (
        SELECT 1 FROM d1saver_keep AS k WHERE k.thread_id = w.thread_id
            AND k.checkpoint_ns = w.checkpoint_ns AND k.checkpoint_id = p.parent_checkpoint_id)
    FROM walk AS w JOIN checkpoints AS p ON p.thread_id = w.thread_id
        AND p.checkpoint_ns = w.checkpoint_ns AND p.checkpoint_id = w.cur
    WHERE w.kept = 0
)
SELECT thread_id, checkpoint_ns, origin AS checkpoint_id,
       MAX(CASE WHEN kept THEN cur END) AS new_parent
FROM walk GROUP BY thread_id, checkpoint_ns, origin""")

APPLY_RELINK = q("""
UPDATE checkpoints SET parent_checkpoint_id = r.new_parent
FROM d1saver_relink AS r
WHERE checkpoints.thread_id = r.thread_id AND checkpoints.checkpoint_ns = r.checkpoint_ns
  AND checkpoints.checkpoint_id = r.checkpoint_id""")
# After APPLY_RELINK: the frozen records of a relinked holder (FREEZE has just made them whole
# for its new parent) are bound to that parent (migration 9).
REBIND_FROZEN = q("""
UPDATE delta_frozen SET parent = r.new_parent
FROM d1saver_relink AS r
WHERE delta_frozen.thread_id = r.thread_id AND delta_frozen.checkpoint_ns = r.checkpoint_ns
  AND delta_frozen.checkpoint_id = r.checkpoint_id""")


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

# Deletes, in scope, what d1saver_keep does not hold, but for writes and chunks of checkpoints
# not stored yet. Children before checkpoints (the newest of a namespace is read before any
# checkpoint goes).
DELETE_UNKEPT_WRITES = q("""
DELETE FROM writes WHERE thread_id IN (SELECT thread_id FROM d1saver_scope) AND NOT EXISTS (
    SELECT 1 FROM d1saver_keep AS k WHERE k.thread_id = writes.thread_id
        AND k.checkpoint_ns = writes.checkpoint_ns AND k.checkpoint_id = writes.checkpoint_id)
            AND writes.checkpoint_id <= (
    SELECT MAX(n.checkpoint_id) FROM checkpoints AS n
    WHERE n.thread_id = writes.thread_id AND n.checkpoint_ns = writes.checkpoint_ns)""")
DELETE_UNKEPT_CHUNKS = q("""
DELETE FROM chunks WHERE thread_id IN (SELECT thread_id FROM d1saver_scope) AND NOT EXISTS (
    SELECT 1 FROM d1saver_keep AS k WHERE k.thread_id = chunks.thread_id
        AND k.checkpoint_ns = chunks.checkpoint_ns AND k.checkpoint_id = chunks.checkpoint_id)
            AND chunks.checkpoint_id <= (
    SELECT MAX(n.checkpoint_id) FROM checkpoints AS n
    WHERE n.thread_id = chunks.thread_id AND n.checkpoint_ns = chunks.checkpoint_ns)""")
DELETE_UNKEPT_TAGS = q("""
DELETE FROM tags WHERE thread_id IN (SELECT thread_id FROM d1saver_scope) AND NOT EXISTS (
    SELECT 1 FROM d1saver_keep AS k WHERE k.thread_id = tags.thread_id
        AND k.checkpoint_ns = tags.checkpoint_ns AND k.checkpoint_id = tags.checkpoint_id)""")
DELETE_UNKEPT_CHECKPOINTS = q("""
DELETE FROM checkpoints WHERE thread_id IN (SELECT thread_id FROM d1saver_scope) AND NOT EXISTS (
    SELECT 1 FROM d1saver_keep AS k WHERE k.thread_id = checkpoints.thread_id
        AND k.checkpoint_ns = checkpoints.checkpoint_ns
            AND k.checkpoint_id = checkpoints.checkpoint_id)""")
DELETE_UNKEPT = [DELETE_UNKEPT_WRITES, DELETE_UNKEPT_CHUNKS, DELETE_UNKEPT_TAGS, DELETE_UNKEPT_CHECKPOINTS]


# What the plan deletes, per thread in scope (dry runs and reports). Rows: thread_id,
# checkpoints before, checkpoints to delete, writes to delete, stored bytes to free.
SUMMARY_COLUMNS = ("thread_id", "checkpoints_total", "checkpoints", "writes", "bytes")
SUMMARIZE_PLAN = q("""
SELECT s.thread_id,
  (SELECT COUNT(*) FROM checkpoints AS c WHERE c.thread_id = s.thread_id) AS checkpoints_total,
  (SELECT COUNT(*) FROM checkpoints AS c
     WHERE c.thread_id = s.thread_id AND NOT EXISTS (
    SELECT 1 FROM d1saver_keep AS k WHERE k.thread_id = c.thread_id
        AND k.checkpoint_ns = c.checkpoint_ns
            AND k.checkpoint_id = c.checkpoint_id)) AS checkpoints,
  (SELECT COALESCE(SUM(CASE WHEN substr(w.value, 1, 2) = 'p:'
      THEN json_array_length(substr(w.value, 3)) ELSE 1 END), 0) FROM writes AS w
     WHERE w.thread_id = s.thread_id AND NOT EXISTS (
    SELECT 1 FROM d1saver_keep AS k WHERE k.thread_id = w.thread_id
        AND k.checkpoint_ns = w.checkpoint_ns AND k.checkpoint_id = w.checkpoint_id)
            AND w.checkpoint_id <= (
    SELECT MAX(n.checkpoint_id) FROM checkpoints AS n
    WHERE n.thread_id = w.thread_id AND n.checkpoint_ns = w.checkpoint_ns)) AS writes,
  (SELECT COALESCE(SUM(LENGTH(c.checkpoint) + LENGTH(c.metadata)), 0) FROM checkpoints AS c
     WHERE c.thread_id = s.thread_id AND NOT EXISTS (
    SELECT 1 FROM d1saver_keep AS k WHERE k.thread_id = c.thread_id
        AND k.checkpoint_ns = c.checkpoint_ns AND k.checkpoint_id = c.checkpoint_id))
  + (SELECT COALESCE(SUM(LENGTH(w.value)), 0) FROM writes AS w
     WHERE w.thread_id = s.thread_id AND NOT EXISTS (
    SELECT 1 FROM d1saver_keep AS k WHERE k.thread_id = w.thread_id
        AND k.checkpoint_ns = w.checkpoint_ns AND k.checkpoint_id = w.checkpoint_id)
            AND w.checkpoint_id <= (
    SELECT MAX(n.checkpoint_id) FROM checkpoints AS n
    WHERE n.thread_id = w.thread_id AND n.checkpoint_ns = w.checkpoint_ns))
  + (SELECT COALESCE(SUM(LENGTH(k.data)), 0) FROM chunks AS k
     WHERE k.thread_id = s.thread_id AND NOT EXISTS (
    SELECT 1 FROM d1saver_keep AS k WHERE k.thread_id = k.thread_id
        AND k.checkpoint_ns = k.checkpoint_ns AND k.checkpoint_id = k.checkpoint_id)
            AND k.checkpoint_id <= (
    SELECT MAX(n.checkpoint_id) FROM checkpoints AS n
    WHERE n.thread_id = k.thread_id AND n.checkpoint_ns = k.checkpoint_ns)) AS bytes
FROM d1saver_scope AS s ORDER BY s.thread_id""")

# A real run's summary is recorded under the batch's op id (see "idempotency records") and
# read back, so that a retried batch, which finds nothing more to delete, still reports what
# its first try deleted (:op_id). The record is a JSON array of the summary's rows, thread
# ids in hex (SQLite 3.40's JSON decoder stops at "\u0000"); read back as SUMMARY_COLUMNS.
RECORD_PLAN = q("""
INSERT OR IGNORE INTO d1saver_ops (op_id, result, created_at)
SELECT :op_id, json_group_array(json_array(hex(p.thread_id), p.checkpoints_total, p.checkpoints,
                                       p.writes, p.bytes)),
       CAST(strftime('%s', 'now') AS INTEGER)
FROM (
SELECT s.thread_id,
  (SELECT COUNT(*) FROM checkpoints AS c WHERE c.thread_id = s.thread_id) AS checkpoints_total,
  (SELECT COUNT(*) FROM checkpoints AS c
     WHERE c.thread_id = s.thread_id AND NOT EXISTS (
    SELECT 1 FROM d1saver_keep AS k WHERE k.thread_id = c.thread_id
        AND k.checkpoint_ns = c.checkpoint_ns
            AND k.checkpoint_id = c.checkpoint_id)) AS checkpoints,
  (SELECT COALESCE(SUM(CASE WHEN substr(w.value, 1, 2) = 'p:'
      THEN json_array_length(substr(w.value, 3)) ELSE 1 END), 0) FROM writes AS w
     WHERE w.thread_id = s.thread_id AND NOT EXISTS (
    SELECT 1 FROM d1saver_keep AS k WHERE k.thread_id = w.thread_id
        AND k.checkpoint_ns = w.checkpoint_ns AND k.checkpoint_id = w.checkpoint_id)
            AND w.checkpoint_id <= (
    SELECT MAX(n.checkpoint_id) FROM checkpoints AS n
    WHERE n.thread_id = w.thread_id AND n.checkpoint_ns = w.checkpoint_ns)) AS writes,
  (SELECT COALESCE(SUM(LENGTH(c.checkpoint) + LENGTH(c.metadata)), 0) FROM checkpoints AS c
     WHERE c.thread_id = s.thread_id AND NOT EXISTS (
    SELECT 1 FROM d1saver_keep AS k WHERE k.thread_id = c.thread_id
        AND k.checkpoint_ns = c.checkpoint_ns AND k.checkpoint_id = c.checkpoint_id))
  + (SELECT COALESCE(SUM(LENGTH(w.value)), 0) FROM writes AS w
     WHERE w.thread_id = s.thread_id AND NOT EXISTS (
    SELECT 1 FROM d1saver_keep AS k WHERE k.thread_id = w.thread_id
        AND k.checkpoint_ns = w.checkpoint_ns AND k.checkpoint_id = w.checkpoint_id)
            AND w.checkpoint_id <= (
    SELECT MAX(n.checkpoint_id) FROM checkpoints AS n
    WHERE n.thread_id = w.thread_id AND n.checkpoint_ns = w.checkpoint_ns))
  + (SELECT COALESCE(SUM(LENGTH(k.data)), 0) FROM chunks AS k
     WHERE k.thread_id = s.thread_id AND NOT EXISTS (
    SELECT 1 FROM d1saver_keep AS k WHERE k.thread_id = k.thread_id
        AND k.checkpoint_ns = k.checkpoint_ns AND k.checkpoint_id = k.checkpoint_id)
            AND k.checkpoint_id <= (
    SELECT MAX(n.checkpoint_id) FROM checkpoints AS n
    WHERE n.thread_id = k.thread_id AND n.checkpoint_ns = k.checkpoint_ns)) AS bytes
FROM d1saver_scope AS s ORDER BY s.thread_id) AS p""")
RECORDED_PLAN = q("""
SELECT CAST(unhex(r.value->>0) AS TEXT) AS thread_id, r.value->>1 AS checkpoints_total,
       r.value->>2 AS checkpoints, r.value->>3 AS writes, r.value->>4 AS bytes
FROM d1saver_ops AS o, json_each(o.result) AS r WHERE o.op_id = :op_id
ORDER BY thread_id""")


# --- compaction: thread listing, lease -----------------------------------------------------


# Keyset pages of threads after :after ('' first), :limit at most: checkpoints, namespaces, last
# ts, and the thread's whole storage (checkpoints, writes, parts, chunk rows, frozen histories).
THREADS_PAGE = q("""
SELECT c.thread_id, COUNT(*) AS checkpoints, COUNT(DISTINCT c.checkpoint_ns) AS namespaces,
       MAX(c.ts) AS updated,
       SUM(LENGTH(c.checkpoint) + LENGTH(c.metadata))
       + (SELECT COALESCE(SUM(LENGTH(w.value)), 0) FROM writes AS w WHERE w.thread_id = c.thread_id)
       + (SELECT COALESCE(SUM(LENGTH(p.data)), 0) FROM chunks AS p WHERE p.thread_id = c.thread_id)
       + (SELECT COALESCE(SUM(LENGTH(k.data)), 0) FROM d1saver_chunks AS k WHERE k.thread_id = c.thread_id)
       + (SELECT COALESCE(SUM(LENGTH(f.value) + COALESCE(LENGTH(f.metadata), 0)), 0)
          FROM delta_frozen AS f WHERE f.thread_id = c.thread_id) AS bytes
FROM checkpoints AS c WHERE c.thread_id > :after
GROUP BY c.thread_id ORDER BY c.thread_id LIMIT :limit""")

# The same figures for named threads (:thread_ids, a JSON array).
THREADS_INFO = q("""
SELECT c.thread_id, COUNT(*) AS checkpoints, COUNT(DISTINCT c.checkpoint_ns) AS namespaces,
       MAX(c.ts) AS updated,
       SUM(LENGTH(c.checkpoint) + LENGTH(c.metadata))
       + (SELECT COALESCE(SUM(LENGTH(w.value)), 0) FROM writes AS w WHERE w.thread_id = c.thread_id)
       + (SELECT COALESCE(SUM(LENGTH(p.data)), 0) FROM chunks AS p WHERE p.thread_id = c.thread_id)
       + (SELECT COALESCE(SUM(LENGTH(k.data)), 0) FROM d1saver_chunks AS k WHERE k.thread_id = c.thread_id)
       + (SELECT COALESCE(SUM(LENGTH(f.value) + COALESCE(LENGTH(f.metadata), 0)), 0)
          FROM delta_frozen AS f WHERE f.thread_id = c.thread_id) AS bytes
FROM checkpoints AS c
WHERE c.thread_id IN (SELECT CAST(unhex(value) AS TEXT) FROM json_each(:thread_ids))
GROUP BY c.thread_id ORDER BY c.thread_id""")

# One thread's checkpoints, newest first (`d1saver history`).
HISTORY = q("""
SELECT c.checkpoint_ns, c.checkpoint_id, c.parent_checkpoint_id,
       json_extract(c.metadata, '$.step') AS step, json_extract(c.metadata, '$.source') AS source,
       c.ts, LENGTH(c.checkpoint) + LENGTH(c.metadata) AS bytes,
       (SELECT COALESCE(SUM(CASE WHEN substr(w.value, 1, 2) = 'p:'
           THEN json_array_length(substr(w.value, 3)) ELSE 1 END), 0) FROM writes AS w
        WHERE w.thread_id = c.thread_id AND w.checkpoint_ns = c.checkpoint_ns
          AND w.checkpoint_id = c.checkpoint_id) AS writes,
       (SELECT group_concat(g.name, ',') FROM tags AS g WHERE g.thread_id = c.thread_id
          AND g.checkpoint_ns = c.checkpoint_ns AND g.checkpoint_id = c.checkpoint_id) AS tags
FROM checkpoints AS c WHERE c.thread_id = :thread_id
ORDER BY c.checkpoint_id DESC, c.checkpoint_ns LIMIT :limit""")

# Leases keep compaction runs from overlapping; time is the database's clock, so clients'
# clocks need not agree. :seconds to live. Returns a row if acquired.
ACQUIRE_LEASE = q("""
INSERT INTO leases (name, holder, expires_at)
VALUES (:name, :holder, CAST(strftime('%s', 'now') AS INTEGER) + :seconds)
ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, expires_at = excluded.expires_at
WHERE leases.expires_at < CAST(strftime('%s', 'now') AS INTEGER)
   OR leases.holder = excluded.holder
RETURNING holder""")
# Sent first in every compaction batch: fails the batch if the lease was lost, else renews it.
CHECK_LEASE = q("""
INSERT INTO d1saver_guards (lease_lost)
SELECT 1 WHERE NOT EXISTS (SELECT 1 FROM leases WHERE name = :name AND holder = :holder)""")
RENEW_LEASE = q("""
UPDATE leases SET expires_at = CAST(strftime('%s', 'now') AS INTEGER) + :seconds
WHERE name = :name AND holder = :holder""")
RELEASE_LEASE = q("DELETE FROM leases WHERE name = :name AND holder = :holder")
BREAK_LEASE = q("DELETE FROM leases WHERE name = :name")
LEASE_HOLDER = q("""
SELECT holder, expires_at - CAST(strftime('%s', 'now') AS INTEGER) AS seconds_left
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
RUN_ADD_BATCH = q("""
UPDATE d1saver_compaction_runs SET batches = batches + 1,
    threads_compacted = threads_compacted + (SELECT COUNT(*) FROM d1saver_ops AS o,
        json_each(o.result) AS r WHERE o.op_id = :op_id AND CAST(:expired AS INTEGER) = 0
        AND r.value->>2 > 0),
    threads_expired = threads_expired + (SELECT COUNT(*) FROM d1saver_ops AS o,
        json_each(o.result) AS r WHERE o.op_id = :op_id AND CAST(:expired AS INTEGER) = 1),
    checkpoints_deleted = checkpoints_deleted + (SELECT COALESCE(SUM(r.value->>2), 0)
        FROM d1saver_ops AS o, json_each(o.result) AS r WHERE o.op_id = :op_id),
    writes_deleted = writes_deleted + (SELECT COALESCE(SUM(r.value->>3), 0)
        FROM d1saver_ops AS o, json_each(o.result) AS r WHERE o.op_id = :op_id),
    bytes_freed = bytes_freed + (SELECT COALESCE(SUM(r.value->>4), 0)
        FROM d1saver_ops AS o, json_each(o.result) AS r WHERE o.op_id = :op_id)
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

# A retention batch voids the moves of the threads in its scope (migration 12): a move that
# read them before must not publish that copy after.
VOID_MOVES_IN_SCOPE = q("""
DELETE FROM d1saver_moves WHERE thread_id IN (SELECT thread_id FROM d1saver_scope)""")


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
                  VOID_MOVES_IN_SCOPE]
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


# --- transfers: a thread's rows read out of one database and written into another ----------
#
# Used by copy_thread between databases and by `d1saver rebalance`. Each table is read in keyset
# pages, in primary-key order, of at most ?N rows and about ?M bytes (a page always holds at
# least one row, so a 2 MB value still moves); rows are written back one statement each, every
# value a bound parameter. Columns: the table's columns but thread_id (keys first), then
# `available` (rows in the page before the byte cut: fewer than ?N means the table is done).

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






# Parameters: :thread_id, the key of the previous page's last row (:after_<key column>, all
# NULL on the first page), :limit rows and about :budget bytes.
TRANSFER_PAGE_D1SAVER_CHUNKS = q("""
SELECT level, id, data, available FROM (
    SELECT level, id, data, SUM(COALESCE(LENGTH(data), 0)) OVER (ORDER BY level,
        id ROWS UNBOUNDED PRECEDING)
               - (COALESCE(LENGTH(data), 0)) AS bytes_before,
           COUNT(*) OVER () AS available
    FROM (SELECT level, id, data FROM d1saver_chunks
          WHERE thread_id = :thread_id AND (:after_level IS NULL OR (level, id) > (:after_level,
              :after_id))
          ORDER BY level, id LIMIT :limit)
)
WHERE bytes_before < :budget
ORDER BY level, id""")
TRANSFER_PAGE_CHECKPOINTS = q("""
SELECT checkpoint_ns, checkpoint_id, parent_checkpoint_id, type, checkpoint, metadata, channels,
    run_id, ts, available FROM (
    SELECT checkpoint_ns, checkpoint_id, parent_checkpoint_id, type, checkpoint, metadata,
        channels, run_id, ts, SUM(COALESCE(LENGTH(parent_checkpoint_id),
        0) + COALESCE(LENGTH(type), 0) + COALESCE(LENGTH(checkpoint),
        0) + COALESCE(LENGTH(metadata), 0) + COALESCE(LENGTH(channels),
        0) + COALESCE(LENGTH(run_id), 0) + COALESCE(LENGTH(ts), 0)) OVER (ORDER BY checkpoint_ns,
        checkpoint_id ROWS UNBOUNDED PRECEDING)
               - (COALESCE(LENGTH(parent_checkpoint_id), 0) + COALESCE(LENGTH(type),
                   0) + COALESCE(LENGTH(checkpoint), 0) + COALESCE(LENGTH(metadata),
                   0) + COALESCE(LENGTH(channels), 0) + COALESCE(LENGTH(run_id),
                   0) + COALESCE(LENGTH(ts), 0)) AS bytes_before,
           COUNT(*) OVER () AS available
    FROM (SELECT checkpoint_ns, checkpoint_id, parent_checkpoint_id, type, checkpoint, metadata,
        channels, run_id, ts FROM checkpoints
          WHERE thread_id = :thread_id AND (:after_checkpoint_ns IS NULL OR (checkpoint_ns,
              checkpoint_id) > (:after_checkpoint_ns, :after_checkpoint_id))
          ORDER BY checkpoint_ns, checkpoint_id LIMIT :limit)
)
WHERE bytes_before < :budget
ORDER BY checkpoint_ns, checkpoint_id""")
TRANSFER_PAGE_WRITES = q("""
SELECT checkpoint_ns, checkpoint_id, task_id, idx, task_path, channel, type, value, available
    FROM (
    SELECT checkpoint_ns, checkpoint_id, task_id, idx, task_path, channel, type, value,
        SUM(COALESCE(LENGTH(task_path), 0) + COALESCE(LENGTH(channel),
        0) + COALESCE(LENGTH(type), 0) + COALESCE(LENGTH(value),
        0)) OVER (ORDER BY checkpoint_ns, checkpoint_id, task_id, idx ROWS UNBOUNDED PRECEDING)
               - (COALESCE(LENGTH(task_path), 0) + COALESCE(LENGTH(channel),
                   0) + COALESCE(LENGTH(type), 0) + COALESCE(LENGTH(value), 0)) AS bytes_before,
           COUNT(*) OVER () AS available
    FROM (SELECT checkpoint_ns, checkpoint_id, task_id, idx, task_path, channel, type, value
        FROM writes
          WHERE thread_id = :thread_id AND (:after_checkpoint_ns IS NULL OR (checkpoint_ns,
              checkpoint_id, task_id, idx) > (:after_checkpoint_ns, :after_checkpoint_id,
              :after_task_id, :after_idx))
          ORDER BY checkpoint_ns, checkpoint_id, task_id, idx LIMIT :limit)
)
WHERE bytes_before < :budget
ORDER BY checkpoint_ns, checkpoint_id, task_id, idx""")
TRANSFER_PAGE_CHUNKS = q("""
SELECT checkpoint_ns, checkpoint_id, owner, seq, data, available FROM (
    SELECT checkpoint_ns, checkpoint_id, owner, seq, data, SUM(COALESCE(LENGTH(data),
        0)) OVER (ORDER BY checkpoint_ns, checkpoint_id, owner, seq ROWS UNBOUNDED PRECEDING)
               - (COALESCE(LENGTH(data), 0)) AS bytes_before,
           COUNT(*) OVER () AS available
    FROM (SELECT checkpoint_ns, checkpoint_id, owner, seq, data FROM chunks
          WHERE thread_id = :thread_id AND (:after_checkpoint_ns IS NULL OR (checkpoint_ns,
              checkpoint_id, owner, seq) > (:after_checkpoint_ns, :after_checkpoint_id,
              :after_owner, :after_seq))
          ORDER BY checkpoint_ns, checkpoint_id, owner, seq LIMIT :limit)
)
WHERE bytes_before < :budget
ORDER BY checkpoint_ns, checkpoint_id, owner, seq""")
TRANSFER_PAGE_TAGS = q("""
SELECT checkpoint_ns, name, checkpoint_id, created_at, available FROM (
    SELECT checkpoint_ns, name, checkpoint_id, created_at, SUM(COALESCE(LENGTH(checkpoint_id),
        0) + COALESCE(LENGTH(created_at), 0)) OVER (ORDER BY checkpoint_ns,
        name ROWS UNBOUNDED PRECEDING)
               - (COALESCE(LENGTH(checkpoint_id), 0) + COALESCE(LENGTH(created_at),
                   0)) AS bytes_before,
           COUNT(*) OVER () AS available
    FROM (SELECT checkpoint_ns, name, checkpoint_id, created_at FROM tags
          WHERE thread_id = :thread_id AND (:after_checkpoint_ns IS NULL OR (checkpoint_ns,
              name) > (:after_checkpoint_ns, :after_name))
          ORDER BY checkpoint_ns, name LIMIT :limit)
)
WHERE bytes_before < :budget
ORDER BY checkpoint_ns, name""")
TRANSFER_PAGE_DELTA_UNWRITTEN = q("""
SELECT checkpoint_ns, checkpoint_id, channels, available FROM (
    SELECT checkpoint_ns, checkpoint_id, channels, SUM(COALESCE(LENGTH(channels),
        0)) OVER (ORDER BY checkpoint_ns, checkpoint_id ROWS UNBOUNDED PRECEDING)
               - (COALESCE(LENGTH(channels), 0)) AS bytes_before,
           COUNT(*) OVER () AS available
    FROM (SELECT checkpoint_ns, checkpoint_id, channels FROM delta_unwritten
          WHERE thread_id = :thread_id AND (:after_checkpoint_ns IS NULL OR (checkpoint_ns,
              checkpoint_id) > (:after_checkpoint_ns, :after_checkpoint_id))
          ORDER BY checkpoint_ns, checkpoint_id LIMIT :limit)
)
WHERE bytes_before < :budget
ORDER BY checkpoint_ns, checkpoint_id""")
TRANSFER_PAGE_DELTA_FROZEN = q("""
SELECT checkpoint_ns, checkpoint_id, channel, kind, depth, task_id, idx, src_checkpoint_id, task_path, type, value, metadata, channels, parent, available FROM (
    SELECT checkpoint_ns, checkpoint_id, channel, kind, depth, task_id, idx, src_checkpoint_id, task_path, type, value, metadata, channels, parent, SUM(COALESCE(LENGTH(src_checkpoint_id), 0) + COALESCE(LENGTH(task_path), 0) + COALESCE(LENGTH(type), 0) + COALESCE(LENGTH(value), 0) + COALESCE(LENGTH(metadata), 0) + COALESCE(LENGTH(channels), 0) + COALESCE(LENGTH(parent), 0)) OVER (ORDER BY checkpoint_ns, checkpoint_id, channel, kind, depth, task_id, idx ROWS UNBOUNDED PRECEDING)
               - (COALESCE(LENGTH(src_checkpoint_id), 0) + COALESCE(LENGTH(task_path), 0) + COALESCE(LENGTH(type), 0) + COALESCE(LENGTH(value), 0) + COALESCE(LENGTH(metadata), 0) + COALESCE(LENGTH(channels), 0) + COALESCE(LENGTH(parent), 0)) AS bytes_before,
           COUNT(*) OVER () AS available
    FROM (SELECT checkpoint_ns, checkpoint_id, channel, kind, depth, task_id, idx, src_checkpoint_id, task_path, type, value, metadata, channels, parent FROM delta_frozen
          WHERE thread_id = :thread_id AND (:after_checkpoint_ns IS NULL OR (checkpoint_ns, checkpoint_id, channel, kind, depth, task_id, idx) > (:after_checkpoint_ns, :after_checkpoint_id, :after_channel, :after_kind, :after_depth, :after_task_id, :after_idx))
          ORDER BY checkpoint_ns, checkpoint_id, channel, kind, depth, task_id, idx LIMIT :limit)
)
WHERE bytes_before < :budget
ORDER BY checkpoint_ns, checkpoint_id, channel, kind, depth, task_id, idx""")
TRANSFER_PAGE = {
    "d1saver_chunks": TRANSFER_PAGE_D1SAVER_CHUNKS,
    "checkpoints": TRANSFER_PAGE_CHECKPOINTS,
    "writes": TRANSFER_PAGE_WRITES,
    "chunks": TRANSFER_PAGE_CHUNKS,
    "tags": TRANSFER_PAGE_TAGS,
    "delta_unwritten": TRANSFER_PAGE_DELTA_UNWRITTEN,
    "delta_frozen": TRANSFER_PAGE_DELTA_FROZEN,
}
TRANSFER_PAGE_COLUMNS = {table: (*keys, *rest, "available")
                         for table, (keys, rest) in TRANSFER_TABLES.items()}
# Params: thread_id, then the row's columns in TRANSFER_TABLES order. A row already there is
# replaced: the copy wins, as copy_thread within one database does.
TRANSFER_INSERT_D1SAVER_CHUNKS = q("""
INSERT OR REPLACE INTO d1saver_chunks (thread_id, level, id, data) VALUES (:thread_id, :level,
    :id, :data)""")
TRANSFER_INSERT_CHECKPOINTS = q("""
INSERT OR REPLACE INTO checkpoints (thread_id, checkpoint_ns, checkpoint_id,
    parent_checkpoint_id, type, checkpoint, metadata, channels, run_id, ts) VALUES (:thread_id,
    :checkpoint_ns, :checkpoint_id, :parent_checkpoint_id, :type, :checkpoint, :metadata,
    :channels, :run_id, :ts)""")
TRANSFER_INSERT_WRITES = q("""
INSERT OR REPLACE INTO writes (thread_id, checkpoint_ns, checkpoint_id, task_id, idx, task_path,
    channel, type, value) VALUES (:thread_id, :checkpoint_ns, :checkpoint_id, :task_id, :idx,
    :task_path, :channel, :type, :value)""")
TRANSFER_INSERT_CHUNKS = q("""
INSERT OR REPLACE INTO chunks (thread_id, checkpoint_ns, checkpoint_id, owner, seq,
    data) VALUES (:thread_id, :checkpoint_ns, :checkpoint_id, :owner, :seq, :data)""")
TRANSFER_INSERT_TAGS = q("""
INSERT OR REPLACE INTO tags (thread_id, checkpoint_ns, name, checkpoint_id,
    created_at) VALUES (:thread_id, :checkpoint_ns, :name, :checkpoint_id, :created_at)""")
TRANSFER_INSERT_DELTA_UNWRITTEN = q("""
INSERT OR REPLACE INTO delta_unwritten (thread_id, checkpoint_ns, checkpoint_id,
    channels) VALUES (:thread_id, :checkpoint_ns, :checkpoint_id, :channels)""")
TRANSFER_INSERT_DELTA_FROZEN = q("""
INSERT OR REPLACE INTO delta_frozen (thread_id, checkpoint_ns, checkpoint_id, channel, kind, depth, task_id, idx, src_checkpoint_id, task_path, type, value, metadata, channels, parent) VALUES (:thread_id, :checkpoint_ns, :checkpoint_id, :channel, :kind, :depth, :task_id, :idx, :src_checkpoint_id, :task_path, :type, :value, :metadata, :channels, :parent)""")
TRANSFER_INSERT = {
    "d1saver_chunks": TRANSFER_INSERT_D1SAVER_CHUNKS,
    "checkpoints": TRANSFER_INSERT_CHECKPOINTS,
    "writes": TRANSFER_INSERT_WRITES,
    "chunks": TRANSFER_INSERT_CHUNKS,
    "tags": TRANSFER_INSERT_TAGS,
    "delta_unwritten": TRANSFER_INSERT_DELTA_UNWRITTEN,
    "delta_frozen": TRANSFER_INSERT_DELTA_FROZEN,
}

# Staged rows (:staged) become the thread (:thread_id) in one batch. An
# UPDATE fires no insert trigger, so the batch first does what the triggers of migrations 2 and
# 4 do for an insert: a checkpoint or write that replaces one of the thread's drops the old
# one's pieces, and a checkpoint its old delta_unwritten row and the frozen records it no
# longer matches (migration 9); the target's writes of a task the staged rows have writes of
# are taken per (task, idx) (UNPACK_TARGET_WRITES).
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
RENAME_UNPACK_PIECES = q(UNPACK_TARGET_PIECES.text.replace(":source", ":staged")
                         .replace(":target", ":thread_id"))
RENAME_UNPACK_PACKS = q(UNPACK_TARGET_PACKS.text.replace(":source", ":staged")
                        .replace(":target", ":thread_id"))
RENAME_UNPACK_DROP = q(UNPACK_TARGET_DROP.text.replace(":source", ":staged")
                       .replace(":target", ":thread_id"))
RENAME_D1SAVER_CHUNKS = q("""
UPDATE OR REPLACE d1saver_chunks SET thread_id = :thread_id WHERE thread_id = :staged""")
RENAME_CHECKPOINTS = q("""
UPDATE OR REPLACE checkpoints SET thread_id = :thread_id WHERE thread_id = :staged""")
RENAME_WRITES = q("UPDATE OR REPLACE writes SET thread_id = :thread_id WHERE thread_id = :staged")
RENAME_CHUNKS = q("UPDATE OR REPLACE chunks SET thread_id = :thread_id WHERE thread_id = :staged")
RENAME_TAGS = q("UPDATE OR REPLACE tags SET thread_id = :thread_id WHERE thread_id = :staged")
RENAME_DELTA_UNWRITTEN = q("""
UPDATE OR REPLACE delta_unwritten SET thread_id = :thread_id WHERE thread_id = :staged""")
RENAME_DELTA_FROZEN = q("""
UPDATE OR REPLACE delta_frozen SET thread_id = :thread_id WHERE thread_id = :staged""")
RENAME_THREAD = [RENAME_DROP_CHECKPOINT_PIECES, RENAME_DROP_WRITE_PIECES, RENAME_DROP_UNWRITTEN,
                 RENAME_DROP_FROZEN, RENAME_UNPACK_PIECES, RENAME_UNPACK_PACKS, RENAME_UNPACK_DROP,
                 RENAME_D1SAVER_CHUNKS, RENAME_CHECKPOINTS, RENAME_WRITES, RENAME_CHUNKS, RENAME_TAGS, RENAME_DELTA_UNWRITTEN, RENAME_DELTA_FROZEN]
# After rows written into thread ?1 (a copy between databases, RENAME_THREAD included): those
# they replaced may have left chunks no row reaches.
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
INSERT INTO d1saver_scope (thread_id) SELECT :thread_id WHERE (SELECT COUNT(*)
    FROM d1saver_chunks WHERE thread_id = :thread_id) = :count_d1saver_chunks
    AND (SELECT COUNT(*) FROM d1saver_chunks WHERE thread_id = :scratch_id) = :count_d1saver_chunks
    AND (SELECT COUNT(*) FROM checkpoints WHERE thread_id = :thread_id) = :count_checkpoints
        AND (SELECT COUNT(*) FROM checkpoints WHERE thread_id = :scratch_id) = :count_checkpoints
    AND (SELECT COUNT(*) FROM writes WHERE thread_id = :thread_id) = :count_writes
        AND (SELECT COUNT(*) FROM writes WHERE thread_id = :scratch_id) = :count_writes
    AND (SELECT COUNT(*) FROM chunks WHERE thread_id = :thread_id) = :count_chunks
        AND (SELECT COUNT(*) FROM chunks WHERE thread_id = :scratch_id) = :count_chunks
    AND (SELECT COUNT(*) FROM tags WHERE thread_id = :thread_id) = :count_tags
        AND (SELECT COUNT(*) FROM tags WHERE thread_id = :scratch_id) = :count_tags
    AND (SELECT COUNT(*) FROM delta_unwritten
        WHERE thread_id = :thread_id) = :count_delta_unwritten AND (SELECT COUNT(*)
        FROM delta_unwritten WHERE thread_id = :scratch_id) = :count_delta_unwritten
    AND (SELECT COUNT(*) FROM delta_frozen WHERE thread_id = :thread_id) = :count_delta_frozen
        AND (SELECT COUNT(*) FROM delta_frozen
        WHERE thread_id = :scratch_id) = :count_delta_frozen""")




# :thread_id and its :scratch_id: empties the scope if the table's rows differ at all.
LEAVE_UNLESS_SAME_D1SAVER_CHUNKS = q("""
DELETE FROM d1saver_scope WHERE EXISTS (SELECT 1 FROM d1saver_chunks AS a
    WHERE a.thread_id = :thread_id AND NOT EXISTS (SELECT 1 FROM d1saver_chunks AS b
    WHERE b.thread_id = :scratch_id AND b.level IS a.level AND b.id IS a.id AND b.data IS a.data))
    OR EXISTS (SELECT 1 FROM d1saver_chunks AS a WHERE a.thread_id = :scratch_id
        AND NOT EXISTS (SELECT 1 FROM d1saver_chunks AS b WHERE b.thread_id = :thread_id
        AND b.level IS a.level AND b.id IS a.id AND b.data IS a.data))""")
LEAVE_UNLESS_SAME_CHECKPOINTS = q("""
DELETE FROM d1saver_scope WHERE EXISTS (SELECT 1 FROM checkpoints AS a
    WHERE a.thread_id = :thread_id AND NOT EXISTS (SELECT 1 FROM checkpoints AS b
    WHERE b.thread_id = :scratch_id AND b.checkpoint_ns IS a.checkpoint_ns
    AND b.checkpoint_id IS a.checkpoint_id AND b.parent_checkpoint_id IS a.parent_checkpoint_id
    AND b.type IS a.type AND b.checkpoint IS a.checkpoint AND b.metadata IS a.metadata
    AND b.channels IS a.channels AND b.run_id IS a.run_id AND b.ts IS a.ts))
    OR EXISTS (SELECT 1 FROM checkpoints AS a WHERE a.thread_id = :scratch_id
        AND NOT EXISTS (SELECT 1 FROM checkpoints AS b WHERE b.thread_id = :thread_id
        AND b.checkpoint_ns IS a.checkpoint_ns AND b.checkpoint_id IS a.checkpoint_id
        AND b.parent_checkpoint_id IS a.parent_checkpoint_id AND b.type IS a.type
        AND b.checkpoint IS a.checkpoint AND b.metadata IS a.metadata
        AND b.channels IS a.channels AND b.run_id IS a.run_id AND b.ts IS a.ts))""")
LEAVE_UNLESS_SAME_WRITES = q("""
DELETE FROM d1saver_scope WHERE EXISTS (SELECT 1 FROM writes AS a WHERE a.thread_id = :thread_id
    AND NOT EXISTS (SELECT 1 FROM writes AS b WHERE b.thread_id = :scratch_id
    AND b.checkpoint_ns IS a.checkpoint_ns AND b.checkpoint_id IS a.checkpoint_id
    AND b.task_id IS a.task_id AND b.idx IS a.idx AND b.task_path IS a.task_path
    AND b.channel IS a.channel AND b.type IS a.type AND b.value IS a.value))
    OR EXISTS (SELECT 1 FROM writes AS a WHERE a.thread_id = :scratch_id
        AND NOT EXISTS (SELECT 1 FROM writes AS b WHERE b.thread_id = :thread_id
        AND b.checkpoint_ns IS a.checkpoint_ns AND b.checkpoint_id IS a.checkpoint_id
        AND b.task_id IS a.task_id AND b.idx IS a.idx AND b.task_path IS a.task_path
        AND b.channel IS a.channel AND b.type IS a.type AND b.value IS a.value))""")
LEAVE_UNLESS_SAME_CHUNKS = q("""
DELETE FROM d1saver_scope WHERE EXISTS (SELECT 1 FROM chunks AS a WHERE a.thread_id = :thread_id
    AND NOT EXISTS (SELECT 1 FROM chunks AS b WHERE b.thread_id = :scratch_id
    AND b.checkpoint_ns IS a.checkpoint_ns AND b.checkpoint_id IS a.checkpoint_id
    AND b.owner IS a.owner AND b.seq IS a.seq AND b.data IS a.data))
    OR EXISTS (SELECT 1 FROM chunks AS a WHERE a.thread_id = :scratch_id
        AND NOT EXISTS (SELECT 1 FROM chunks AS b WHERE b.thread_id = :thread_id
        AND b.checkpoint_ns IS a.checkpoint_ns AND b.checkpoint_id IS a.checkpoint_id
        AND b.owner IS a.owner AND b.seq IS a.seq AND b.data IS a.data))""")
LEAVE_UNLESS_SAME_TAGS = q("""
DELETE FROM d1saver_scope WHERE EXISTS (SELECT 1 FROM tags AS a WHERE a.thread_id = :thread_id
    AND NOT EXISTS (SELECT 1 FROM tags AS b WHERE b.thread_id = :scratch_id
    AND b.checkpoint_ns IS a.checkpoint_ns AND b.name IS a.name
    AND b.checkpoint_id IS a.checkpoint_id AND b.created_at IS a.created_at))
    OR EXISTS (SELECT 1 FROM tags AS a WHERE a.thread_id = :scratch_id AND NOT EXISTS (SELECT 1
        FROM tags AS b WHERE b.thread_id = :thread_id AND b.checkpoint_ns IS a.checkpoint_ns
        AND b.name IS a.name AND b.checkpoint_id IS a.checkpoint_id
        AND b.created_at IS a.created_at))""")
LEAVE_UNLESS_SAME_DELTA_UNWRITTEN = q("""
DELETE FROM d1saver_scope WHERE EXISTS (SELECT 1 FROM delta_unwritten AS a
    WHERE a.thread_id = :thread_id AND NOT EXISTS (SELECT 1 FROM delta_unwritten AS b
    WHERE b.thread_id = :scratch_id AND b.checkpoint_ns IS a.checkpoint_ns
    AND b.checkpoint_id IS a.checkpoint_id AND b.channels IS a.channels))
    OR EXISTS (SELECT 1 FROM delta_unwritten AS a WHERE a.thread_id = :scratch_id
        AND NOT EXISTS (SELECT 1 FROM delta_unwritten AS b WHERE b.thread_id = :thread_id
        AND b.checkpoint_ns IS a.checkpoint_ns AND b.checkpoint_id IS a.checkpoint_id
        AND b.channels IS a.channels))""")
LEAVE_UNLESS_SAME_DELTA_FROZEN = q("""
DELETE FROM d1saver_scope WHERE EXISTS (SELECT 1 FROM delta_frozen AS a WHERE a.thread_id = :thread_id AND NOT EXISTS (SELECT 1 FROM delta_frozen AS b WHERE b.thread_id = :scratch_id AND b.checkpoint_ns IS a.checkpoint_ns AND b.checkpoint_id IS a.checkpoint_id AND b.channel IS a.channel AND b.kind IS a.kind AND b.depth IS a.depth AND b.task_id IS a.task_id AND b.idx IS a.idx AND b.src_checkpoint_id IS a.src_checkpoint_id AND b.task_path IS a.task_path AND b.type IS a.type AND b.value IS a.value AND b.metadata IS a.metadata AND b.channels IS a.channels AND b.parent IS a.parent))
    OR EXISTS (SELECT 1 FROM delta_frozen AS a WHERE a.thread_id = :scratch_id AND NOT EXISTS (SELECT 1 FROM delta_frozen AS b WHERE b.thread_id = :thread_id AND b.checkpoint_ns IS a.checkpoint_ns AND b.checkpoint_id IS a.checkpoint_id AND b.channel IS a.channel AND b.kind IS a.kind AND b.depth IS a.depth AND b.task_id IS a.task_id AND b.idx IS a.idx AND b.src_checkpoint_id IS a.src_checkpoint_id AND b.task_path IS a.task_path AND b.type IS a.type AND b.value IS a.value AND b.metadata IS a.metadata AND b.channels IS a.channels AND b.parent IS a.parent))""")
LEAVE_UNLESS_SAME = {
    "d1saver_chunks": LEAVE_UNLESS_SAME_D1SAVER_CHUNKS,
    "checkpoints": LEAVE_UNLESS_SAME_CHECKPOINTS,
    "writes": LEAVE_UNLESS_SAME_WRITES,
    "chunks": LEAVE_UNLESS_SAME_CHUNKS,
    "tags": LEAVE_UNLESS_SAME_TAGS,
    "delta_unwritten": LEAVE_UNLESS_SAME_DELTA_UNWRITTEN,
    "delta_frozen": LEAVE_UNLESS_SAME_DELTA_FROZEN,
}
LEAVING_COLUMNS = ("moved",)
LEAVING = q("SELECT COUNT(*) AS moved FROM d1saver_scope")
# No parameters: the thread in the scope goes (its checkpoints last).
LEAVE_DELTA_FROZEN = q("""
DELETE FROM delta_frozen WHERE thread_id IN (SELECT thread_id FROM d1saver_scope)""")
LEAVE_DELTA_UNWRITTEN = q("""
DELETE FROM delta_unwritten WHERE thread_id IN (SELECT thread_id FROM d1saver_scope)""")
LEAVE_TAGS = q("DELETE FROM tags WHERE thread_id IN (SELECT thread_id FROM d1saver_scope)")
LEAVE_CHUNKS = q("DELETE FROM chunks WHERE thread_id IN (SELECT thread_id FROM d1saver_scope)")
LEAVE_WRITES = q("DELETE FROM writes WHERE thread_id IN (SELECT thread_id FROM d1saver_scope)")
LEAVE_CHECKPOINTS = q("""
DELETE FROM checkpoints WHERE thread_id IN (SELECT thread_id FROM d1saver_scope)""")
LEAVE_D1SAVER_CHUNKS = q("""
DELETE FROM d1saver_chunks WHERE thread_id IN (SELECT thread_id FROM d1saver_scope)""")
LEAVE = [LEAVE_DELTA_FROZEN, LEAVE_DELTA_UNWRITTEN, LEAVE_TAGS, LEAVE_CHUNKS, LEAVE_WRITES, LEAVE_CHECKPOINTS, LEAVE_D1SAVER_CHUNKS]
# The thread's rows in every transfer table (the scratch copy, before and after).
DROP_THREAD_DELTA_FROZEN = q("DELETE FROM delta_frozen WHERE thread_id = :thread_id")
DROP_THREAD_DELTA_UNWRITTEN = q("DELETE FROM delta_unwritten WHERE thread_id = :thread_id")
DROP_THREAD_TAGS = q("DELETE FROM tags WHERE thread_id = :thread_id")
DROP_THREAD_CHUNKS = q("DELETE FROM chunks WHERE thread_id = :thread_id")
DROP_THREAD_WRITES = q("DELETE FROM writes WHERE thread_id = :thread_id")
DROP_THREAD_CHECKPOINTS = q("DELETE FROM checkpoints WHERE thread_id = :thread_id")
DROP_THREAD_D1SAVER_CHUNKS = q("DELETE FROM d1saver_chunks WHERE thread_id = :thread_id")
DROP_THREAD = [DROP_THREAD_DELTA_FROZEN, DROP_THREAD_DELTA_UNWRITTEN, DROP_THREAD_TAGS, DROP_THREAD_CHUNKS, DROP_THREAD_WRITES, DROP_THREAD_CHECKPOINTS, DROP_THREAD_D1SAVER_CHUNKS]

# Thread ids in [:low, :high) in any table (staged rows left by a killed copy, by their prefix).
# D1 refuses a compound SELECT of more than 5 terms (probed on Wrangler's engine): nested.
THREADS_IN_RANGE = q("""
SELECT thread_id FROM checkpoints WHERE thread_id >= :low AND thread_id < :high
UNION SELECT thread_id FROM writes WHERE thread_id >= :low AND thread_id < :high
UNION SELECT thread_id FROM chunks WHERE thread_id >= :low AND thread_id < :high
UNION SELECT thread_id FROM tags WHERE thread_id >= :low AND thread_id < :high
UNION SELECT thread_id FROM (
    SELECT thread_id FROM d1saver_chunks WHERE thread_id >= :low AND thread_id < :high
    UNION SELECT thread_id FROM delta_unwritten WHERE thread_id >= :low AND thread_id < :high
    UNION SELECT thread_id FROM delta_frozen WHERE thread_id >= :low AND thread_id < :high)
ORDER BY thread_id""")

# --- moves and staged rows bound to the application's deletes (migration 12) --------------
#
# :thread_id the thread, :move_id the move's id. A move registers the thread at its new home
# before it reads the old home; its publishing batch starts with CHECK_MOVE (fails
# "move_voided" if a delete or a prune dropped the registration since) and ends with END_MOVE.
BEGIN_MOVE = q("""
INSERT OR REPLACE INTO d1saver_moves (thread_id, move_id, created_at)
VALUES (:thread_id, :move_id, CAST(strftime('%s', 'now') AS INTEGER))""")
CHECK_MOVE = q("""
INSERT INTO d1saver_move_guards (move_voided)
SELECT 1 WHERE NOT EXISTS (SELECT 1 FROM d1saver_moves
    WHERE thread_id = :thread_id AND move_id = :move_id)""")
END_MOVE = q("DELETE FROM d1saver_moves WHERE thread_id = :thread_id AND move_id = :move_id")
CLEAR_MOVES = q("DELETE FROM d1saver_moves")
MOVES_REGISTERED_COLUMNS = ("moves",)
MOVES_REGISTERED = q("SELECT COUNT(*) AS moves FROM d1saver_moves")

# Staged rows: :staging_id, the thread they become (:thread_id), the thread they come from
# (:source_id), :seconds until a cleanup may remove them. Every staging batch (re)registers
# them, which pushes the expiry on; the renaming batch checks (STAGING_HELD) and drops the
# registration.
STAGE = q("""
INSERT INTO d1saver_staged (staging_id, thread_id, source_id, created_at, expires_at)
VALUES (:staging_id, :thread_id, :source_id, CAST(strftime('%s', 'now') AS INTEGER),
        CAST(strftime('%s', 'now') AS INTEGER) + CAST(:seconds AS INTEGER))
ON CONFLICT (staging_id) DO UPDATE SET thread_id = excluded.thread_id,
    source_id = excluded.source_id, expires_at = excluded.expires_at""")
STAGING_HELD = q("""
INSERT INTO d1saver_move_guards (staging_lost)
SELECT 1 WHERE NOT EXISTS (SELECT 1 FROM d1saver_staged WHERE staging_id = :staging_id)""")
UNSTAGE = q("DELETE FROM d1saver_staged WHERE staging_id = :staging_id")
# In the source's database, while a copy of it is staged in another (:source_id, that
# database's id :database_id, :staging_id, :seconds): DELETE_THREADS' last statement returns
# and drops these, and delete_thread removes the staged rows there too.
STAGE_ELSEWHERE = q("""
INSERT OR REPLACE INTO d1saver_staged_elsewhere (source_id, database_id, staging_id, expires_at)
VALUES (:source_id, :database_id, :staging_id,
        CAST(strftime('%s', 'now') AS INTEGER) + CAST(:seconds AS INTEGER))""")
UNSTAGE_ELSEWHERE = q("""
DELETE FROM d1saver_staged_elsewhere
WHERE source_id = :source_id AND database_id = :database_id AND staging_id = :staging_id""")
STAGED_ELSEWHERE_COLUMNS = ("database_id", "staging_id")
# Every staged thread id in [:low, :high) with its registration: target and source (NULL if
# unregistered: staged before migration 12), expired (1 if unregistered or past its expiry:
# then no copy is writing it any more, and any cleanup may remove it).
LEFTOVERS_COLUMNS = ("thread_id", "target", "source", "expired")
LEFTOVERS = q("""
SELECT t.thread_id, s.thread_id AS target, s.source_id AS source,
    CASE WHEN s.staging_id IS NULL
        OR s.expires_at < CAST(strftime('%s', 'now') AS INTEGER) THEN 1 ELSE 0 END AS expired
FROM (SELECT thread_id FROM (
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
ORDER BY t.thread_id""")

# --- sealed rows: copies and rekeying (d1saver/ops/reseal.py) --------------------------------
#
# With encryption keys a value is bound to its row, so copy_thread and rekey rewrite values
# rather than rows: they read rows raw, in keyset pages in primary key order, re-seal each
# value in Python (never deserialized) and write it back.

# A value is read by its head: its text, or piece 0's when the row holds a chunk marker
# (where the key id is). Not under the newest key: its head is not among :heads, the JSON
# array of the 7-character heads the newest key's texts have ("e:" and the base85 group of key
# id and codec: d1saver/storage/crypto.py). A raw page's rows come with their pieces ('k').

# Checkpoint rows after the cursor (:after_thread_id, :after_checkpoint_ns,
# :after_checkpoint_id; '' to start), :limit rows, in one thread (..._THREAD) or all (..._ALL);
# only those with a value not sealed under the newest key when :heads is given (their metadata
# is sealed with it). With their pieces.
RAW_CHECKPOINTS_THREAD = q("""
WITH page AS (
    SELECT thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id, type, checkpoint,
           metadata, channels, run_id, ts
    FROM checkpoints AS c
    WHERE thread_id = :thread_id AND (thread_id, checkpoint_ns,
        checkpoint_id) > (:after_thread_id, :after_checkpoint_ns, :after_checkpoint_id)
      AND (:heads IS NULL OR substr(COALESCE(CASE WHEN substr(c.checkpoint, 1, 2) = 'c:' THEN (
    SELECT k.data FROM chunks AS k WHERE k.thread_id = c.thread_id
        AND k.checkpoint_ns = c.checkpoint_ns AND k.checkpoint_id = c.checkpoint_id
        AND k.owner = '' AND k.seq = 0) ELSE c.checkpoint END, ''), 1, 7) NOT IN (SELECT value
            FROM json_each(:heads)))
    ORDER BY thread_id, checkpoint_ns, checkpoint_id
    LIMIT :limit
)
SELECT 'c' AS kind, thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id, type,
       checkpoint AS value, metadata, channels, run_id, ts, NULL AS owner, NULL AS seq
FROM page
UNION ALL
SELECT 'k', k.thread_id, k.checkpoint_ns, k.checkpoint_id, NULL, NULL, k.data, NULL, NULL, NULL,
       NULL, k.owner, k.seq
FROM page AS p JOIN chunks AS k ON k.thread_id = p.thread_id
    AND k.checkpoint_ns = p.checkpoint_ns AND k.checkpoint_id = p.checkpoint_id
    AND k.owner IN ('', ':metadata')""")
RAW_CHECKPOINTS_ALL = q("""
WITH page AS (
    SELECT thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id, type, checkpoint,
           metadata, channels, run_id, ts
    FROM checkpoints AS c
    WHERE (thread_id, checkpoint_ns, checkpoint_id) > (:after_thread_id, :after_checkpoint_ns,
        :after_checkpoint_id)
      AND substr(thread_id, 1, 9) <> char(31) || 'd1saver-'
      AND (:heads IS NULL OR substr(COALESCE(CASE WHEN substr(c.checkpoint, 1, 2) = 'c:' THEN (
    SELECT k.data FROM chunks AS k WHERE k.thread_id = c.thread_id
        AND k.checkpoint_ns = c.checkpoint_ns AND k.checkpoint_id = c.checkpoint_id
        AND k.owner = '' AND k.seq = 0) ELSE c.checkpoint END, ''), 1, 7) NOT IN (SELECT value
            FROM json_each(:heads)))
    ORDER BY thread_id, checkpoint_ns, checkpoint_id
    LIMIT :limit
)
SELECT 'c' AS kind, thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id, type,
       checkpoint AS value, metadata, channels, run_id, ts, NULL AS owner, NULL AS seq
FROM page
UNION ALL
SELECT 'k', k.thread_id, k.checkpoint_ns, k.checkpoint_id, NULL, NULL, k.data, NULL, NULL, NULL,
       NULL, k.owner, k.seq
FROM page AS p JOIN chunks AS k ON k.thread_id = p.thread_id
    AND k.checkpoint_ns = p.checkpoint_ns AND k.checkpoint_id = p.checkpoint_id
    AND k.owner IN ('', ':metadata')""")

# Write rows after the cursor (:after_thread_id .. :after_idx), :limit rows, in one thread or
# all; with :heads only those not under the newest key.
RAW_WRITES_THREAD = q("""
WITH page AS (
    SELECT thread_id, checkpoint_ns, checkpoint_id, task_id, task_path, idx, channel, type, value
    FROM writes AS w
    WHERE thread_id = :thread_id
      AND (thread_id, checkpoint_ns, checkpoint_id, task_id, idx) > (:after_thread_id,
          :after_checkpoint_ns, :after_checkpoint_id, :after_task_id, :after_idx)
      AND (:heads IS NULL OR (w.value IS NOT NULL AND substr(COALESCE(CASE WHEN substr(w.value,
          1, 2) = 'c:' THEN (
    SELECT k.data FROM chunks AS k WHERE k.thread_id = w.thread_id
        AND k.checkpoint_ns = w.checkpoint_ns AND k.checkpoint_id = w.checkpoint_id
        AND k.owner = w.task_id || '/' || w.idx AND k.seq = 0) ELSE w.value END, ''), 1,
            7) NOT IN (SELECT value FROM json_each(:heads))))
    ORDER BY thread_id, checkpoint_ns, checkpoint_id, task_id, idx
    LIMIT :limit
)
SELECT 'w' AS kind, thread_id, checkpoint_ns, checkpoint_id, task_id, task_path, idx, channel,
       type, value, NULL AS owner, NULL AS seq
FROM page
UNION ALL
SELECT 'k', k.thread_id, k.checkpoint_ns, k.checkpoint_id, NULL, NULL, NULL, NULL, NULL, k.data,
       k.owner, k.seq
FROM page AS p JOIN chunks AS k ON k.thread_id = p.thread_id
    AND k.checkpoint_ns = p.checkpoint_ns AND k.checkpoint_id = p.checkpoint_id
    AND k.owner = p.task_id || '/' || p.idx""")
RAW_WRITES_ALL = q("""
WITH page AS (
    SELECT thread_id, checkpoint_ns, checkpoint_id, task_id, task_path, idx, channel, type, value
    FROM writes AS w
    WHERE (thread_id, checkpoint_ns, checkpoint_id, task_id, idx) > (:after_thread_id,
        :after_checkpoint_ns, :after_checkpoint_id, :after_task_id, :after_idx)
      AND substr(thread_id, 1, 9) <> char(31) || 'd1saver-'
      AND (:heads IS NULL OR (w.value IS NOT NULL AND substr(COALESCE(CASE WHEN substr(w.value,
          1, 2) = 'c:' THEN (
    SELECT k.data FROM chunks AS k WHERE k.thread_id = w.thread_id
        AND k.checkpoint_ns = w.checkpoint_ns AND k.checkpoint_id = w.checkpoint_id
        AND k.owner = w.task_id || '/' || w.idx AND k.seq = 0) ELSE w.value END, ''), 1,
            7) NOT IN (SELECT value FROM json_each(:heads))))
    ORDER BY thread_id, checkpoint_ns, checkpoint_id, task_id, idx
    LIMIT :limit
)
SELECT 'w' AS kind, thread_id, checkpoint_ns, checkpoint_id, task_id, task_path, idx, channel,
       type, value, NULL AS owner, NULL AS seq
FROM page
UNION ALL
SELECT 'k', k.thread_id, k.checkpoint_ns, k.checkpoint_id, NULL, NULL, NULL, NULL, NULL, k.data,
       k.owner, k.seq
FROM page AS p JOIN chunks AS k ON k.thread_id = p.thread_id
    AND k.checkpoint_ns = p.checkpoint_ns AND k.checkpoint_id = p.checkpoint_id
    AND k.owner = p.task_id || '/' || p.idx""")

# Frozen DeltaChannel rows (delta_frozen) after the cursor (:after_thread_id .. :after_idx, the
# primary key; '' and -2^63 to start), :limit rows, of one thread or all; with :heads only 's'
# and 'w' rows not under the newest key. With
# their holders' frozen pieces ('k': owner in `channel`, seq in `depth`, data in `value`). For
# copy_thread and rekey under keys, which re-seal them.
RAW_FROZEN_THREAD = q("""
WITH page AS (
    SELECT thread_id, checkpoint_ns, checkpoint_id, channel, kind, depth, task_id, idx, src_checkpoint_id, task_path, type, value, metadata, channels, parent FROM delta_frozen AS f
    WHERE thread_id = :thread_id
      AND (thread_id, checkpoint_ns, checkpoint_id, channel, kind, depth, task_id, idx)
          > (:after_thread_id, :after_checkpoint_ns, :after_checkpoint_id, :after_channel,
              :after_kind, :after_depth, :after_task_id, :after_idx)
      AND (:heads IS NULL OR (f.kind <> 'c' AND f.value IS NOT NULL
                           AND substr(COALESCE(CASE WHEN substr(f.value, 1, 2) = 'c:' THEN (
    SELECT k.data FROM chunks AS k WHERE k.thread_id = f.thread_id
        AND k.checkpoint_ns = f.checkpoint_ns AND k.checkpoint_id = f.checkpoint_id
        AND k.owner = 'f/' || f.src_checkpoint_id || '/'
                      || CASE f.kind WHEN 'w' THEN f.task_id || '/' || f.idx ELSE '' END
        AND k.seq = 0) ELSE f.value END, ''), 1, 7) NOT IN (SELECT value FROM json_each(:heads))))
    ORDER BY thread_id, checkpoint_ns, checkpoint_id, channel, kind, depth, task_id, idx
    LIMIT :limit
)
SELECT 'f' AS kind, thread_id, checkpoint_ns, checkpoint_id, channel, kind AS fkind, depth,
       task_id, idx, src_checkpoint_id, task_path, type, value, metadata, channels, parent
FROM page
UNION ALL
SELECT 'k', k.thread_id, k.checkpoint_ns, k.checkpoint_id, k.owner, NULL, k.seq, NULL, NULL,
       NULL, NULL, NULL, k.data, NULL, NULL, NULL
FROM (SELECT DISTINCT thread_id, checkpoint_ns, checkpoint_id FROM page) AS h
JOIN chunks AS k ON k.thread_id = h.thread_id AND k.checkpoint_ns = h.checkpoint_ns
    AND k.checkpoint_id = h.checkpoint_id AND substr(k.owner, 1, 2) = 'f/'""")
RAW_FROZEN_ALL = q("""
WITH page AS (
    SELECT thread_id, checkpoint_ns, checkpoint_id, channel, kind, depth, task_id, idx, src_checkpoint_id, task_path, type, value, metadata, channels, parent FROM delta_frozen AS f
    WHERE (thread_id, checkpoint_ns, checkpoint_id, channel, kind, depth, task_id, idx)
          > (:after_thread_id, :after_checkpoint_ns, :after_checkpoint_id, :after_channel,
              :after_kind, :after_depth, :after_task_id, :after_idx)
      AND substr(thread_id, 1, 9) <> char(31) || 'd1saver-'
      AND (:heads IS NULL OR (f.kind <> 'c' AND f.value IS NOT NULL
                           AND substr(COALESCE(CASE WHEN substr(f.value, 1, 2) = 'c:' THEN (
    SELECT k.data FROM chunks AS k WHERE k.thread_id = f.thread_id
        AND k.checkpoint_ns = f.checkpoint_ns AND k.checkpoint_id = f.checkpoint_id
        AND k.owner = 'f/' || f.src_checkpoint_id || '/'
                      || CASE f.kind WHEN 'w' THEN f.task_id || '/' || f.idx ELSE '' END
        AND k.seq = 0) ELSE f.value END, ''), 1, 7) NOT IN (SELECT value FROM json_each(:heads))))
    ORDER BY thread_id, checkpoint_ns, checkpoint_id, channel, kind, depth, task_id, idx
    LIMIT :limit
)
SELECT 'f' AS kind, thread_id, checkpoint_ns, checkpoint_id, channel, kind AS fkind, depth,
       task_id, idx, src_checkpoint_id, task_path, type, value, metadata, channels, parent
FROM page
UNION ALL
SELECT 'k', k.thread_id, k.checkpoint_ns, k.checkpoint_id, k.owner, NULL, k.seq, NULL, NULL,
       NULL, NULL, NULL, k.data, NULL, NULL, NULL
FROM (SELECT DISTINCT thread_id, checkpoint_ns, checkpoint_id FROM page) AS h
JOIN chunks AS k ON k.thread_id = h.thread_id AND k.checkpoint_ns = h.checkpoint_ns
    AND k.checkpoint_id = h.checkpoint_id AND substr(k.owner, 1, 2) = 'f/'""")
RAW_FROZEN_COLUMNS = ("kind", "thread_id", "checkpoint_ns", "checkpoint_id", "channel",
                      "fkind", "depth", "task_id", "idx", "src_checkpoint_id", "task_path",
                      "type", "value", "metadata", "channels", "parent")
INSERT_FROZEN = q("""
INSERT OR REPLACE INTO delta_frozen (thread_id, checkpoint_ns, checkpoint_id, channel, kind, depth, task_id, idx, src_checkpoint_id, task_path, type, value, metadata, channels, parent) VALUES (:thread_id,:checkpoint_ns,:checkpoint_id,:channel,:kind,:depth,:task_id,:idx,:src_checkpoint_id,:task_path,:type,:value,:metadata,:channels,:parent)""")

# Columns of the raw pages: a row's own columns ('c' or 'w'), then its pieces' ('k': the piece
# text in `value`, with its owner and seq).
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
# The checkpoint's key, the fingerprints of its checkpoint and metadata and of their pieces.
REKEY_GUARD_CHECKPOINT = q("""
INSERT INTO d1saver_guard (head_moved)
SELECT 1 WHERE NOT EXISTS (
    SELECT 1 FROM checkpoints WHERE thread_id = :thread_id AND checkpoint_ns = :checkpoint_ns
        AND checkpoint_id = :checkpoint_id
        AND length(checkpoint) || ':' || substr(checkpoint, 1, 40) || substr(checkpoint,
            -40) IS :checkpoint_fp AND length(metadata) || ':' || substr(metadata, 1,
            40) || substr(metadata, -40) IS :metadata_fp)
    OR (SELECT COUNT(*) || ':' || SUM(length(data)) || ':'
        || MAX(CASE WHEN seq = 0 THEN substr(data, 1, 40) || substr(data, -40) END)
    FROM chunks WHERE thread_id = :thread_id AND checkpoint_ns = :checkpoint_ns
        AND checkpoint_id = :checkpoint_id
        AND owner = '') IS NOT :checkpoint_pieces_fp
    OR (SELECT COUNT(*) || ':' || SUM(length(data)) || ':'
        || MAX(CASE WHEN seq = 0 THEN substr(data, 1, 40) || substr(data, -40) END)
    FROM chunks WHERE thread_id = :thread_id AND checkpoint_ns = :checkpoint_ns
        AND checkpoint_id = :checkpoint_id
        AND owner = ':metadata') IS NOT :metadata_pieces_fp""")
# ?1 ?2 ?3 the checkpoint, ?4 task_id, ?5 idx, ?6 fingerprint of the value, ?7 of its chunks.
# The owner is built with CAST: D1 binds numbers as REAL, so :idx alone would read '0.0'.
REKEY_GUARD_WRITE = q("""
INSERT INTO d1saver_guard (head_moved)
SELECT 1 WHERE NOT EXISTS (
    SELECT 1 FROM writes WHERE thread_id = :thread_id AND checkpoint_ns = :checkpoint_ns
        AND checkpoint_id = :checkpoint_id
        AND task_id = :task_id AND idx = :idx AND length(value) || ':' || substr(value, 1,
            40) || substr(value, -40) IS :value_fp)
    OR (SELECT COUNT(*) || ':' || SUM(length(data)) || ':'
        || MAX(CASE WHEN seq = 0 THEN substr(data, 1, 40) || substr(data, -40) END)
    FROM chunks WHERE thread_id = :thread_id AND checkpoint_ns = :checkpoint_ns AND checkpoint_id = :checkpoint_id
        AND owner = :task_id || '/' || CAST(:idx AS INTEGER)) IS NOT :pieces_fp""")
# ?1..?8 the frozen row's key (thread_id .. idx), ?9 fingerprint of its value, ?10 of its
# pieces (held by the holder, ?11 their owner).
REKEY_GUARD_FROZEN = q("""
INSERT INTO d1saver_guard (head_moved)
SELECT 1 WHERE NOT EXISTS (
    SELECT 1 FROM delta_frozen WHERE thread_id = :thread_id AND checkpoint_ns = :checkpoint_ns
        AND checkpoint_id = :checkpoint_id AND channel = :channel AND kind = :kind
            AND depth = :depth AND task_id = :task_id
        AND idx = :idx AND length(value) || ':' || substr(value, 1, 40) || substr(value,
            -40) IS :value_fp)
    OR (SELECT COUNT(*) || ':' || SUM(length(data)) || ':'
        || MAX(CASE WHEN seq = 0 THEN substr(data, 1, 40) || substr(data, -40) END)
    FROM chunks WHERE thread_id = :thread_id AND checkpoint_ns = :checkpoint_ns
        AND checkpoint_id = :checkpoint_id
        AND owner = :owner) IS NOT :pieces_fp""")
REKEY_FROZEN = q("""
UPDATE delta_frozen SET value = :value, metadata = :metadata
WHERE thread_id = :thread_id AND checkpoint_ns = :checkpoint_ns
    AND checkpoint_id = :checkpoint_id AND channel = :channel
  AND kind = :kind AND depth = :depth AND task_id = :task_id AND idx = :idx""")
REKEY_CHECKPOINT = q("""
UPDATE checkpoints SET checkpoint = :checkpoint, metadata = :metadata
WHERE thread_id = :thread_id AND checkpoint_ns = :checkpoint_ns
    AND checkpoint_id = :checkpoint_id""")
# A plaintext pack (migration 7) sealed as one row per write: the pack goes, its writes come.
REKEY_DROP_WRITE = q("""
DELETE FROM writes
WHERE thread_id = :thread_id AND checkpoint_ns = :checkpoint_ns
    AND checkpoint_id = :checkpoint_id AND task_id = :task_id AND idx = :idx""")
REKEY_ADD_WRITE = q("""
INSERT OR IGNORE INTO writes (thread_id,checkpoint_ns,checkpoint_id,task_id,task_path,idx,channel,type,value) VALUES (:thread_id, :checkpoint_ns, :checkpoint_id, :task_id, :task_path, :idx, :channel, :type, :value)""")
REKEY_WRITE = q("""
UPDATE writes SET value = :value
WHERE thread_id = :thread_id AND checkpoint_ns = :checkpoint_ns
    AND checkpoint_id = :checkpoint_id AND task_id = :task_id AND idx = :idx""")

# The threads that hold values stored by content (an "m:" manifest lists at least one chunk,
# and garbage collection leaves no chunk unlisted): `rekey --seal-plaintext` leaves each of
# them whole, in plaintext (a manifest's chunks are shared by its thread's rows).
CONTENT_THREADS = q("SELECT DISTINCT thread_id FROM d1saver_chunks")

# Stored values per table and key: rows (tbl, head, row_count), head being the first 7
# characters of sealed texts (d1saver/storage/crypto.py: key_id_of_text) and NULL for plaintext.
KEY_CENSUS = q("""
SELECT 'checkpoints' AS tbl, CASE WHEN substr(v, 1, 2) = 'e:' THEN substr(v, 1, 7) END AS head,
    COUNT(*) AS row_count
FROM (SELECT CASE WHEN substr(c.checkpoint, 1, 2) = 'c:' THEN (
    SELECT k.data FROM chunks AS k WHERE k.thread_id = c.thread_id
        AND k.checkpoint_ns = c.checkpoint_ns AND k.checkpoint_id = c.checkpoint_id
        AND k.owner = '' AND k.seq = 0) ELSE c.checkpoint END AS v
            FROM checkpoints AS c
            WHERE substr(c.thread_id, 1, 9) <> char(31) || 'd1saver-') GROUP BY CASE WHEN substr(v, 1, 2) = 'e:' THEN substr(v, 1,
            7) END
UNION ALL
SELECT 'writes', CASE WHEN substr(v, 1, 2) = 'e:' THEN substr(v, 1, 7) END, COUNT(*)
FROM (SELECT CASE WHEN substr(w.value, 1, 2) = 'c:' THEN (
    SELECT k.data FROM chunks AS k WHERE k.thread_id = w.thread_id
        AND k.checkpoint_ns = w.checkpoint_ns AND k.checkpoint_id = w.checkpoint_id
        AND k.owner = w.task_id || '/' || w.idx AND k.seq = 0) ELSE w.value END AS v
            FROM writes AS w WHERE w.value IS NOT NULL
                AND substr(w.thread_id, 1, 9) <> char(31) || 'd1saver-')
GROUP BY CASE WHEN substr(v, 1, 2) = 'e:' THEN substr(v, 1, 7) END
UNION ALL
SELECT 'delta_frozen', CASE WHEN substr(v, 1, 2) = 'e:' THEN substr(v, 1, 7) END, COUNT(*)
FROM (SELECT CASE WHEN substr(f.value, 1, 2) = 'c:' THEN (
    SELECT k.data FROM chunks AS k WHERE k.thread_id = f.thread_id
        AND k.checkpoint_ns = f.checkpoint_ns AND k.checkpoint_id = f.checkpoint_id
        AND k.owner = 'f/' || f.src_checkpoint_id || '/'
                      || CASE f.kind WHEN 'w' THEN f.task_id || '/' || f.idx ELSE '' END
        AND k.seq = 0) ELSE f.value END AS v FROM delta_frozen AS f
      WHERE f.kind <> 'c' AND f.value IS NOT NULL
        AND substr(f.thread_id, 1, 9) <> char(31) || 'd1saver-')
GROUP BY CASE WHEN substr(v, 1, 2) = 'e:' THEN substr(v, 1, 7) END""")
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

# copy_thread under keys: the target's tags and delta_unwritten rows, as COPY_THREAD copies
# them (:source to :target); after the checkpoints, whose insert trigger clears the latter.

# Every statement of this module, named by its identifier.
STATEMENTS = [*name_queries(globals()), *_memory.STATEMENTS,
              *(s for version in range(1, SCHEMA_VERSION + 1) for s in migration(version))]
