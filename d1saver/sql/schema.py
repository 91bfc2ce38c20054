"""The schema: schema.sql (a fresh database, whole), the forward-only migrations that bring an
older database up (docs/MIGRATIONS.md), and the statements that read and record versions.

Released steps are text that never changes; the snapshot (tests/sql/statements.snapshot.sql)
holds each as sent (MIGRATIONS[v][i]).
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
    # 13: held for issue 30's store and cache exactness, which needed no DDL (its filters,
    # ranges and pages are decided by the statements over step 11's tables): an empty step.
    [],
    # 14: compaction collects what a checkpoint or write put again leaves (issue 30): a row
    # replaced by one with other content can leave content-addressed chunks that no row
    # reaches, in a thread compaction would otherwise skip (no more than N checkpoints). Such a
    # thread is marked in d1saver_gc_pending, by a trigger, when its row is replaced; the next
    # compaction's plan includes it, and its retention batch's garbage collection clears the
    # mark. Marks every thread holding chunks on the way up (garbage written before the step is
    # collected once). Additive: an older d1saver's puts fire the triggers too.
    [
        "CREATE TABLE IF NOT EXISTS d1saver_gc_pending (thread_id TEXT PRIMARY KEY)",
        """
CREATE TRIGGER IF NOT EXISTS checkpoints_gc_pending BEFORE INSERT ON checkpoints
WHEN EXISTS (SELECT 1 FROM checkpoints WHERE thread_id = NEW.thread_id
    AND checkpoint_ns = NEW.checkpoint_ns AND checkpoint_id = NEW.checkpoint_id
    AND substr(checkpoint, 1, 2) = 'm:' AND checkpoint IS NOT NEW.checkpoint)
BEGIN
    INSERT OR IGNORE INTO d1saver_gc_pending (thread_id) VALUES (NEW.thread_id);
END""",
        """
CREATE TRIGGER IF NOT EXISTS writes_gc_pending BEFORE INSERT ON writes
WHEN EXISTS (SELECT 1 FROM writes WHERE thread_id = NEW.thread_id
    AND checkpoint_ns = NEW.checkpoint_ns AND checkpoint_id = NEW.checkpoint_id
    AND task_id = NEW.task_id AND idx = NEW.idx
    AND substr(value, 1, 2) IN ('m:', 'p:') AND value IS NOT NEW.value)
BEGIN
    INSERT OR IGNORE INTO d1saver_gc_pending (thread_id) VALUES (NEW.thread_id);
END""",
        "INSERT OR IGNORE INTO d1saver_gc_pending (thread_id) "
        "SELECT DISTINCT thread_id FROM d1saver_chunks",
    ],
    # 15: values written from here on may be "s:" (raw deflate with DICT_V2 in base64, where
    # "r:" was base85: Python decodes base64 in C, base85 in pure Python) and sealed values
    # "e:~" (base64 where "e:" was base85): d1saver/storage/codec.py, crypto.py. A contract
    # step with no DDL, only its min_reader: an older reader cannot decode them.
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
    # Values written from version 15 on may be "s:" and "e:~" (base64): version 14 cannot read them.
    15: 15,
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

# The statements of schema.sql and the version records, named by their identifiers (the
# migration steps' statements, MIGRATIONS[v][i], are made by `migration`).
STATEMENTS: list[Query] = name_queries(globals())
