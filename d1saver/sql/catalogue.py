"""Every SQL statement d1saver sends, as named constants, and the schema migrations.

Statements take only bound parameters. Lists (thread ids, run ids, channels, writes, metadata
filters) travel as ONE JSON parameter read with json_each(), so no statement is ever assembled
from user input and none comes near D1's 100-parameter limit.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

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
# step, or this one did before its response was lost. ?1 version.
CLAIM_VERSION = q("""
INSERT INTO d1saver_schema (version, applied_at) VALUES (:version, strftime('%Y-%m-%dT%H:%M:%SZ', 'now'))""")
# Last in a migration's batch (the column exists from version 2 on): ?1 version, ?2 min_reader.
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
INSERT OR REPLACE INTO checkpoints (thread_id,checkpoint_ns,checkpoint_id,parent_checkpoint_id,type,checkpoint,metadata,channels,run_id,ts) VALUES (:thread_id,:checkpoint_ns,:checkpoint_id,:parent_checkpoint_id,:type,:checkpoint,:metadata,:channels,:run_id,:ts)""")

# From schema version 7 on, a put and a put_writes go through views whose INSTEAD OF triggers
# (migration 7) insert the new chunks (a JSON array of [id, level, data], children before
# nodes) and then the rows, so the SQL text each request carries is the shortest possible.
# A type NULL is "msgpack" (the serde's usual tag, sent with every value otherwise). A
# put_writes call's regular writes, two or more, are one "p:" row (the JSON array as sent):
# per write, they would be most of the rows a conversation writes. The views' columns never
# change (a later release adds a new view).
PUT = q("""
INSERT INTO d1saver_put VALUES (:thread_id,:checkpoint_ns,:checkpoint_id,:parent_checkpoint_id,:type,:checkpoint,:metadata,:channels,:run_id,:ts,:chunks)""")
# ?6 special writes, ?7 regular ones (JSON arrays of [idx, channel, type, value], or NULL),
# ?8 the new chunks.
PUT_WRITES = q("""
INSERT INTO d1saver_put_writes VALUES (:thread_id,:checkpoint_ns,:checkpoint_id,:task_id,:task_path,:special,:regular,:chunks)""")
# New chunks beyond what one parameter carries, sent before the row's statement.
INSERT_CHUNKS = q("""
INSERT OR IGNORE INTO d1saver_chunks (thread_id, id, level, data)
SELECT :thread_id, value->>0, value->>1, value->>2 FROM json_each(:chunks)""")

# Opt-in head guard, sent before UPSERT_CHECKPOINT in the same batch: ?4 is the parent the
# caller built on; if the thread's newest checkpoint is another one, the insert trips the
# CHECK on d1saver_guards and D1 rolls the batch back.
GUARD_HEAD = q("""
INSERT INTO d1saver_guards (head_moved)
SELECT 1 FROM (
    SELECT checkpoint_id FROM checkpoints WHERE thread_id = :thread_id AND checkpoint_ns = :checkpoint_ns
    ORDER BY checkpoint_id DESC LIMIT 1
) AS head
WHERE head.checkpoint_id IS NOT :parent_checkpoint_id AND head.checkpoint_id IS NOT :checkpoint_id""")

# Writes: ?6 is a JSON array of [idx, channel, type, value] rows for one task.
# REPLACE for special writes (errors, interrupts: the latest wins), IGNORE for regular ones
# (a retry or a replayed task must not change what was stored), as WRITES_IDX_MAP intends.
INSERT_WRITES_REPLACE = q("""
INSERT OR REPLACE INTO writes (thread_id,checkpoint_ns,checkpoint_id,task_id,task_path,idx,channel,type,value)
SELECT :thread_id,:checkpoint_ns,:checkpoint_id,:task_id,:task_path,value->>0,value->>1,value->>2,value->>3 FROM json_each(:writes)""")
# Nor an index a "p:" row of the task holds (migration 7): the first write stays the one read.
INSERT_WRITES_IGNORE = q("""
INSERT OR IGNORE INTO writes (thread_id,checkpoint_ns,checkpoint_id,task_id,task_path,idx,channel,type,value)
SELECT :thread_id,:checkpoint_ns,:checkpoint_id,:task_id,:task_path,j.value->>0,j.value->>1,j.value->>2,j.value->>3 FROM json_each(:writes) AS j
WHERE NOT EXISTS (
    SELECT 1 FROM writes AS p, json_each(CASE WHEN substr(p.value, 1, 2) = 'p:'
                                              THEN substr(p.value, 3) ELSE '[]' END) AS q
    WHERE p.thread_id = :thread_id AND p.checkpoint_ns = :checkpoint_ns AND p.checkpoint_id = :checkpoint_id
        AND p.task_id = :task_id AND q.value->>0 = j.value->>0)""")

# Values over D1's 2 MB limit: the owner row holds "c:<n>", the pieces (seq 0..n-1) live
# here. Pieces follow their row in the batch. An upserted row (checkpoint, special write)
# deletes its owner's pieces and inserts its own.
DELETE_CHUNKS_OF = q("""
DELETE FROM chunks WHERE thread_id = :thread_id AND checkpoint_ns = :checkpoint_ns AND checkpoint_id = :checkpoint_id
    AND owner = :owner""")
INSERT_CHUNK = q("""
INSERT OR REPLACE INTO chunks (thread_id, checkpoint_ns, checkpoint_id, owner, seq, data)
VALUES (:thread_id, :checkpoint_ns, :checkpoint_id, :owner, :seq, :data)""")
# A piece of a regular write (?4 owner, of ?7 task_id and ?8 idx), which is INSERT OR IGNORE:
# stored only if the row holds this very marker (?9), so that a replay whose row was ignored
# adds no piece.
INSERT_WRITE_CHUNK = q("""
INSERT OR IGNORE INTO chunks (thread_id, checkpoint_ns, checkpoint_id, owner, seq, data)
SELECT :thread_id, :checkpoint_ns, :checkpoint_id, :owner, :seq, :data WHERE EXISTS (
    SELECT 1 FROM writes WHERE thread_id = :thread_id AND checkpoint_ns = :checkpoint_ns AND checkpoint_id = :checkpoint_id
        AND task_id = :task_id AND idx = :idx AND value = :value)""")

# --- reads --------------------------------------------------------------------------------

# D1's REST API carries a statement's text in every request body, and the page statements are
# the longest sent at run time (the first get_tuple of each graph invocation sends the page
# and its DeltaChannel prefetch together). They are laid out here for reading and sent tight:
# no white space beside punctuation (the client folds the rest: _client.compact_sql), and no
# AS before an alias (optional in SQLite; aliases here are lower case, CAST's types and the
# keywords upper case, and a CTE's AS is followed by its parenthesis).


# One page of checkpoints together with their writes and chunks, in ONE statement: rows are
# tagged 'c' (checkpoint), 'w' (write) or 'k' (chunk). Parameters:
#   ?1 thread_id   ?2 checkpoint_ns (NULL: any)   ?3 checkpoint_id (NULL: any)
#   ?4 before: checkpoint_id upper bound (NULL: none)
#   ?5 metadata filter (NULL: none): a JSON array of [path, doc] pairs, one per filter key,
#      where path is '$.' + the validated key and doc is the JSON text of an object that
#      holds the wanted value at that path
#   ?6 ?7 ?8 keyset cursor (checkpoint_id, thread_id, checkpoint_ns) of the previous page's
#      last row (NULL: first page)   ?9 page size
#
# The cursor (or `before`) is an upper bound an index can seek to: the scope compares the
# order columns with COALESCE(?6, ?4, x'') and friends, which are constants to the planner
# (a BLOB sorts after every TEXT, so x'' bounds nothing), where "?6 IS NULL OR ..." would
# make every page scan from the newest row.

# The metadata filter, as InMemorySaver's `query == metadata.get(key)` (defect 6): the value
# at f.path in the metadata and in f.doc are equal JSON trees: the same nodes (by full key,
# so object key order does not matter), each of the same kind (numbers and booleans are one
# kind, so 1 == 1.0 == true) and atom. A null query matches null or a missing key. Chunked
# metadata (d1saver/storage/values.py) that lacks the key in its column passes here and is decided
# in Python. Trees are read from the stored text itself: no number is re-rendered.


# The channels of JSON array {sought} whose history holder {c} has no frozen record ending
# (FREEZE: a record with a 'c' row goes on at the holder's parent).

# A holder's frozen record, as one row per seed or write: the identity of the row the value
# came from as a JSON array [kind, src_checkpoint_id, task_id, task_path, idx, channel, depth],
# then type, value, channels, metadata.


# A frozen value's pieces live with its holder in chunks, owner 'f/<src_checkpoint_id>/<owner>'.


# Content-addressed chunks (migration 7) ride in the same statement as the rows that list them
# (through `out`, whose columns take the first SELECT's affinity: integers may come back as
# text, so readers convert them). `vals` holds the manifest column of each returned row;
# {refs} gathers every id the "m:" manifests in {vals} (rows of thread_id, v) reach (nodes
# opened level by level). UNION, not UNION ALL, so each chunk is returned once however many
# rows list it. Rows 'h': the thread, f1 the chunk id, f2 its data.

# The manifest columns of the page's own rows, as the page statement returns them (for the
# DeltaChannel prefetch that rides with it). `seen` is read only when the prefetch has chunks
# of its own: on Wrangler's engine, folding it into `refs` read the page's writes every time.





# --- DeltaChannels ------------------------------------------------------------------------

# Sent with a put whose checkpoint declares DeltaChannels it has never written (?4: JSON array
# of their names, the metadata's counters_since_delta_snapshot keys not in channel_versions).
# After UPSERT_CHECKPOINT in the batch: its trigger has just cleared the checkpoint's old row.
PUT_UNWRITTEN = q("""
INSERT OR REPLACE INTO delta_unwritten (thread_id, checkpoint_ns, checkpoint_id, channels)
VALUES (:thread_id, :checkpoint_ns, :checkpoint_id, :channels)""")

# The DeltaChannels checkpoint {c} replays from its ancestors, as a JSON array: the keys of
# metadata.counters_since_delta_snapshot that it holds no value of (`channels`) and that have
# been written (not in delta_unwritten): LangGraph replays only channels in channel_versions.

# The channels of JSON array {sought} that checkpoint {c} does not seed (hold a value of).

# Sent with each page, same parameters: what the page's DeltaChannels replay from, so that
# LangGraph's get_delta_channel_history after get_tuple/list costs no request. The walk follows
# parents while some channel (_SOUGHT) is still without a seed or a frozen record. UNION (not
# UNION ALL) ends a corrupt parent loop. Rows: 'a' (ancestor: id, parent, channels, type, and the
# checkpoint when it holds a sought channel), 'w' (its writes of sought channels), 'k' (chunks
# of both, and the frozen pieces of page rows), 'f' (frozen records of page rows, and of
# ancestors for channels sought there: _FROZEN_ROW). 4 terms at most (see DELTA_HISTORY).

# Columns of every page statement. A UNION's columns carry a meaning per row kind:
#   'c' checkpoint: f1 parent_checkpoint_id, f2 type, f3 checkpoint, f4 metadata,
#                   f5 channels (with keys a sealed checkpoint is bound to both)
#   'w' write:      f1 task_id, f2 task_path, f3 idx, f4 channel, f5 type, f6 value
#   'k' chunk:      f1 owner, f2 seq, f3 data
#   'a' ancestor (delta walk): f1 parent_checkpoint_id, f2 channels, f3 type,
#                   f4 checkpoint and f5 metadata (only when it seeds a sought channel)
#   'f' frozen (delta walk): checkpoint_id the holder, f1 identity, f2 type, f3 value,
#                   f4 channels, f5 metadata (_FROZEN_ROW)
PAGE_COLUMNS = ("kind", "thread_id", "checkpoint_ns", "checkpoint_id",
                "f1", "f2", "f3", "f4", "f5", "f6")

# Three scopes, each read in page order from its cursor on: one namespace of a thread
# (get_tuple, and list with a namespace) by the primary key, every thread (list(None)) by
# checkpoints_by_id; every namespace of a thread sorts that thread's rows.
# Each scope comes without a filter (?5 NULL: get_tuple, most lists) and with one, so that
# the filter's text travels only with the lists that filter.
SELECT_PAGE_THREAD_NS = q("""
WITH RECURSIVE
page AS (
    SELECT thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id, type, checkpoint,
           metadata, channels
    FROM checkpoints AS c
    WHERE thread_id = :thread_id AND checkpoint_ns = :checkpoint_ns AND checkpoint_id < COALESCE(:after_checkpoint_id, :before, x'')
      AND (:checkpoint_id IS NULL OR checkpoint_id = :checkpoint_id)
    ORDER BY checkpoint_id DESC, thread_id DESC, checkpoint_ns DESC
    LIMIT :limit
),
out AS (
SELECT 'c' AS kind, thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id AS f1,
       type AS f2, checkpoint AS f3, metadata AS f4, channels AS f5, NULL AS f6
FROM page
UNION ALL
SELECT 'w', thread_id, checkpoint_ns, checkpoint_id, w.task_id, w.task_path, w.idx, w.channel,
       w.type, w.value
FROM page AS p CROSS JOIN writes AS w USING (thread_id, checkpoint_ns, checkpoint_id)
UNION ALL
SELECT 'k', thread_id, checkpoint_ns, checkpoint_id, k.owner, k.seq, k.data, NULL, NULL, NULL
FROM page AS p CROSS JOIN chunks AS k USING (thread_id, checkpoint_ns, checkpoint_id)
WHERE NOT substr(k.owner, 1, 2) = 'f/'
),
vals(thread_id, v) AS (SELECT thread_id, CASE kind WHEN 'c' THEN f3 WHEN 'w' THEN f6 END FROM out),
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
SELECT 'h', thread_id, NULL, NULL, id, k.data, NULL, NULL, NULL, NULL
FROM refs AS r CROSS JOIN d1saver_chunks AS k USING (thread_id, id)""")
SELECT_PAGE_THREAD = q("""
WITH RECURSIVE
page AS (
    SELECT thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id, type, checkpoint,
           metadata, channels
    FROM checkpoints AS c
    WHERE thread_id = :thread_id AND (checkpoint_id, thread_id, checkpoint_ns) < (COALESCE(:after_checkpoint_id, :before, x''), COALESCE(:after_thread_id, ''), COALESCE(:after_checkpoint_ns, ''))
      AND (:checkpoint_id IS NULL OR checkpoint_id = :checkpoint_id)
    ORDER BY checkpoint_id DESC, thread_id DESC, checkpoint_ns DESC
    LIMIT :limit
),
out AS (
SELECT 'c' AS kind, thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id AS f1,
       type AS f2, checkpoint AS f3, metadata AS f4, channels AS f5, NULL AS f6
FROM page
UNION ALL
SELECT 'w', thread_id, checkpoint_ns, checkpoint_id, w.task_id, w.task_path, w.idx, w.channel,
       w.type, w.value
FROM page AS p CROSS JOIN writes AS w USING (thread_id, checkpoint_ns, checkpoint_id)
UNION ALL
SELECT 'k', thread_id, checkpoint_ns, checkpoint_id, k.owner, k.seq, k.data, NULL, NULL, NULL
FROM page AS p CROSS JOIN chunks AS k USING (thread_id, checkpoint_ns, checkpoint_id)
WHERE NOT substr(k.owner, 1, 2) = 'f/'
),
vals(thread_id, v) AS (SELECT thread_id, CASE kind WHEN 'c' THEN f3 WHEN 'w' THEN f6 END FROM out),
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
SELECT 'h', thread_id, NULL, NULL, id, k.data, NULL, NULL, NULL, NULL
FROM refs AS r CROSS JOIN d1saver_chunks AS k USING (thread_id, id)""")
SELECT_PAGE_ALL = q("""
WITH RECURSIVE
page AS (
    SELECT thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id, type, checkpoint,
           metadata, channels
    FROM checkpoints AS c
    WHERE (checkpoint_id, thread_id, checkpoint_ns) < (COALESCE(:after_checkpoint_id, :before, x''), COALESCE(:after_thread_id, ''), COALESCE(:after_checkpoint_ns, ''))
      AND (:checkpoint_id IS NULL OR checkpoint_id = :checkpoint_id)
    ORDER BY checkpoint_id DESC, thread_id DESC, checkpoint_ns DESC
    LIMIT :limit
),
out AS (
SELECT 'c' AS kind, thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id AS f1,
       type AS f2, checkpoint AS f3, metadata AS f4, channels AS f5, NULL AS f6
FROM page
UNION ALL
SELECT 'w', thread_id, checkpoint_ns, checkpoint_id, w.task_id, w.task_path, w.idx, w.channel,
       w.type, w.value
FROM page AS p CROSS JOIN writes AS w USING (thread_id, checkpoint_ns, checkpoint_id)
UNION ALL
SELECT 'k', thread_id, checkpoint_ns, checkpoint_id, k.owner, k.seq, k.data, NULL, NULL, NULL
FROM page AS p CROSS JOIN chunks AS k USING (thread_id, checkpoint_ns, checkpoint_id)
WHERE NOT substr(k.owner, 1, 2) = 'f/'
),
vals(thread_id, v) AS (SELECT thread_id, CASE kind WHEN 'c' THEN f3 WHEN 'w' THEN f6 END FROM out),
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
SELECT 'h', thread_id, NULL, NULL, id, k.data, NULL, NULL, NULL, NULL
FROM refs AS r CROSS JOIN d1saver_chunks AS k USING (thread_id, id)""")
SELECT_PAGE_THREAD_NS_FILTERED = q("""
WITH RECURSIVE
page AS (
    SELECT thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id, type, checkpoint,
           metadata, channels
    FROM checkpoints AS c
    WHERE thread_id = :thread_id AND checkpoint_ns = :checkpoint_ns AND checkpoint_id < COALESCE(:after_checkpoint_id, :before, x'')
      AND (:checkpoint_id IS NULL OR checkpoint_id = :checkpoint_id)
      AND NOT EXISTS (
    SELECT 1 FROM (SELECT value ->> 0 AS path, value ->> 1 AS doc FROM json_each(:filter)) AS f
    WHERE NOT (CASE WHEN json_type(f.doc, f.path) = 'null'
        THEN COALESCE(json_type(c.metadata, f.path), 'null') = 'null'
        ELSE (SELECT COUNT(*) FROM json_tree(c.metadata, f.path))
             = (SELECT COUNT(*) FROM json_tree(f.doc, f.path))
         AND NOT EXISTS (SELECT 1 FROM json_tree(f.doc, f.path) AS q WHERE NOT EXISTS (
             SELECT 1 FROM json_tree(c.metadata, f.path) AS m
             WHERE m.fullkey = q.fullkey AND m.atom IS q.atom AND CASE WHEN m.type IN ('integer','real','true','false') THEN 'n' ELSE m.type END = CASE WHEN q.type IN ('integer','real','true','false') THEN 'n' ELSE q.type END))
        END
        OR (json_type(c.metadata, f.path) IS NULL
            AND json_type(c.metadata, '$."d1saver:metadata"') IS NOT NULL)))
    ORDER BY checkpoint_id DESC, thread_id DESC, checkpoint_ns DESC
    LIMIT :limit
),
out AS (
SELECT 'c' AS kind, thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id AS f1,
       type AS f2, checkpoint AS f3, metadata AS f4, channels AS f5, NULL AS f6
FROM page
UNION ALL
SELECT 'w', thread_id, checkpoint_ns, checkpoint_id, w.task_id, w.task_path, w.idx, w.channel,
       w.type, w.value
FROM page AS p CROSS JOIN writes AS w USING (thread_id, checkpoint_ns, checkpoint_id)
UNION ALL
SELECT 'k', thread_id, checkpoint_ns, checkpoint_id, k.owner, k.seq, k.data, NULL, NULL, NULL
FROM page AS p CROSS JOIN chunks AS k USING (thread_id, checkpoint_ns, checkpoint_id)
WHERE NOT substr(k.owner, 1, 2) = 'f/'
),
vals(thread_id, v) AS (SELECT thread_id, CASE kind WHEN 'c' THEN f3 WHEN 'w' THEN f6 END FROM out),
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
SELECT 'h', thread_id, NULL, NULL, id, k.data, NULL, NULL, NULL, NULL
FROM refs AS r CROSS JOIN d1saver_chunks AS k USING (thread_id, id)""")
SELECT_PAGE_THREAD_FILTERED = q("""
WITH RECURSIVE
page AS (
    SELECT thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id, type, checkpoint,
           metadata, channels
    FROM checkpoints AS c
    WHERE thread_id = :thread_id AND (checkpoint_id, thread_id, checkpoint_ns) < (COALESCE(:after_checkpoint_id, :before, x''), COALESCE(:after_thread_id, ''), COALESCE(:after_checkpoint_ns, ''))
      AND (:checkpoint_id IS NULL OR checkpoint_id = :checkpoint_id)
      AND NOT EXISTS (
    SELECT 1 FROM (SELECT value ->> 0 AS path, value ->> 1 AS doc FROM json_each(:filter)) AS f
    WHERE NOT (CASE WHEN json_type(f.doc, f.path) = 'null'
        THEN COALESCE(json_type(c.metadata, f.path), 'null') = 'null'
        ELSE (SELECT COUNT(*) FROM json_tree(c.metadata, f.path))
             = (SELECT COUNT(*) FROM json_tree(f.doc, f.path))
         AND NOT EXISTS (SELECT 1 FROM json_tree(f.doc, f.path) AS q WHERE NOT EXISTS (
             SELECT 1 FROM json_tree(c.metadata, f.path) AS m
             WHERE m.fullkey = q.fullkey AND m.atom IS q.atom AND CASE WHEN m.type IN ('integer','real','true','false') THEN 'n' ELSE m.type END = CASE WHEN q.type IN ('integer','real','true','false') THEN 'n' ELSE q.type END))
        END
        OR (json_type(c.metadata, f.path) IS NULL
            AND json_type(c.metadata, '$."d1saver:metadata"') IS NOT NULL)))
    ORDER BY checkpoint_id DESC, thread_id DESC, checkpoint_ns DESC
    LIMIT :limit
),
out AS (
SELECT 'c' AS kind, thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id AS f1,
       type AS f2, checkpoint AS f3, metadata AS f4, channels AS f5, NULL AS f6
FROM page
UNION ALL
SELECT 'w', thread_id, checkpoint_ns, checkpoint_id, w.task_id, w.task_path, w.idx, w.channel,
       w.type, w.value
FROM page AS p CROSS JOIN writes AS w USING (thread_id, checkpoint_ns, checkpoint_id)
UNION ALL
SELECT 'k', thread_id, checkpoint_ns, checkpoint_id, k.owner, k.seq, k.data, NULL, NULL, NULL
FROM page AS p CROSS JOIN chunks AS k USING (thread_id, checkpoint_ns, checkpoint_id)
WHERE NOT substr(k.owner, 1, 2) = 'f/'
),
vals(thread_id, v) AS (SELECT thread_id, CASE kind WHEN 'c' THEN f3 WHEN 'w' THEN f6 END FROM out),
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
SELECT 'h', thread_id, NULL, NULL, id, k.data, NULL, NULL, NULL, NULL
FROM refs AS r CROSS JOIN d1saver_chunks AS k USING (thread_id, id)""")
SELECT_PAGE_ALL_FILTERED = q("""
WITH RECURSIVE
page AS (
    SELECT thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id, type, checkpoint,
           metadata, channels
    FROM checkpoints AS c
    WHERE (checkpoint_id, thread_id, checkpoint_ns) < (COALESCE(:after_checkpoint_id, :before, x''), COALESCE(:after_thread_id, ''), COALESCE(:after_checkpoint_ns, ''))
      AND (:checkpoint_id IS NULL OR checkpoint_id = :checkpoint_id)
      AND NOT EXISTS (
    SELECT 1 FROM (SELECT value ->> 0 AS path, value ->> 1 AS doc FROM json_each(:filter)) AS f
    WHERE NOT (CASE WHEN json_type(f.doc, f.path) = 'null'
        THEN COALESCE(json_type(c.metadata, f.path), 'null') = 'null'
        ELSE (SELECT COUNT(*) FROM json_tree(c.metadata, f.path))
             = (SELECT COUNT(*) FROM json_tree(f.doc, f.path))
         AND NOT EXISTS (SELECT 1 FROM json_tree(f.doc, f.path) AS q WHERE NOT EXISTS (
             SELECT 1 FROM json_tree(c.metadata, f.path) AS m
             WHERE m.fullkey = q.fullkey AND m.atom IS q.atom AND CASE WHEN m.type IN ('integer','real','true','false') THEN 'n' ELSE m.type END = CASE WHEN q.type IN ('integer','real','true','false') THEN 'n' ELSE q.type END))
        END
        OR (json_type(c.metadata, f.path) IS NULL
            AND json_type(c.metadata, '$."d1saver:metadata"') IS NOT NULL)))
    ORDER BY checkpoint_id DESC, thread_id DESC, checkpoint_ns DESC
    LIMIT :limit
),
out AS (
SELECT 'c' AS kind, thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id AS f1,
       type AS f2, checkpoint AS f3, metadata AS f4, channels AS f5, NULL AS f6
FROM page
UNION ALL
SELECT 'w', thread_id, checkpoint_ns, checkpoint_id, w.task_id, w.task_path, w.idx, w.channel,
       w.type, w.value
FROM page AS p CROSS JOIN writes AS w USING (thread_id, checkpoint_ns, checkpoint_id)
UNION ALL
SELECT 'k', thread_id, checkpoint_ns, checkpoint_id, k.owner, k.seq, k.data, NULL, NULL, NULL
FROM page AS p CROSS JOIN chunks AS k USING (thread_id, checkpoint_ns, checkpoint_id)
WHERE NOT substr(k.owner, 1, 2) = 'f/'
),
vals(thread_id, v) AS (SELECT thread_id, CASE kind WHEN 'c' THEN f3 WHEN 'w' THEN f6 END FROM out),
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
SELECT 'h', thread_id, NULL, NULL, id, k.data, NULL, NULL, NULL, NULL
FROM refs AS r CROSS JOIN d1saver_chunks AS k USING (thread_id, id)""")
SELECT_PAGE_DELTA_THREAD_NS = q("""
WITH RECURSIVE
page AS (
    SELECT thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id, type, checkpoint,
           metadata, channels
    FROM checkpoints AS c
    WHERE thread_id = :thread_id AND checkpoint_ns = :checkpoint_ns AND checkpoint_id < COALESCE(:after_checkpoint_id, :before, x'')
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
           (SELECT json_group_array(s.value) FROM json_each((SELECT json_group_array(s.value) FROM json_each(w.sought) AS s
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
SELECT 'a' AS kind, thread_id, checkpoint_ns, checkpoint_id, c.parent_checkpoint_id AS f1,
       c.channels AS f2, c.type AS f3,
       CASE WHEN EXISTS (SELECT 1 FROM json_each(v.sought) AS s
                         WHERE s.value IN (SELECT value FROM json_each(c.channels)))
            THEN c.checkpoint END AS f4,
       CASE WHEN EXISTS (SELECT 1 FROM json_each(v.sought) AS s
                         WHERE s.value IN (SELECT value FROM json_each(c.channels)))
            THEN c.metadata END AS f5, NULL AS f6
FROM visited AS v JOIN checkpoints AS c USING (thread_id, checkpoint_ns, checkpoint_id)
UNION ALL
SELECT 'w', thread_id, checkpoint_ns, checkpoint_id, w.task_id, w.task_path, w.idx, w.channel,
       w.type, w.value
FROM visited AS v CROSS JOIN writes AS w USING (thread_id, checkpoint_ns, checkpoint_id)
WHERE (w.channel IN (SELECT value FROM json_each(v.sought)) OR substr(w.value, 1, 2) = 'p:')
UNION ALL
SELECT 'k', thread_id, checkpoint_ns, checkpoint_id, k.owner, k.seq, k.data, NULL, NULL, NULL
FROM holders AS v CROSS JOIN chunks AS k USING (thread_id, checkpoint_ns, checkpoint_id)
WHERE v.sought IS NOT NULL OR substr(k.owner, 1, 2) = 'f/'
UNION ALL
SELECT 'f', thread_id, checkpoint_ns, checkpoint_id, json_array(f.kind, f.src_checkpoint_id, f.task_id, f.task_path, f.idx,
                  f.channel, f.depth), f.type, f.value, f.channels, f.metadata, NULL
FROM holders AS v CROSS JOIN delta_frozen AS f USING (thread_id, checkpoint_ns, checkpoint_id)
WHERE v.sought IS NULL OR f.channel IN (SELECT value FROM json_each(v.sought))
),
vals(thread_id, v) AS (SELECT thread_id, CASE kind WHEN 'a' THEN f4 WHEN 'w' THEN f6 WHEN 'f' THEN f3 END FROM out),
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
SELECT 'h', thread_id, NULL, NULL, id, k.data, NULL, NULL, NULL, NULL
FROM refs AS r CROSS JOIN d1saver_chunks AS k USING (thread_id, id)
WHERE NOT EXISTS (SELECT 1 FROM seen AS s WHERE s.thread_id = r.thread_id AND s.id = r.id)""")
SELECT_PAGE_DELTA_THREAD = q("""
WITH RECURSIVE
page AS (
    SELECT thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id, type, checkpoint,
           metadata, channels
    FROM checkpoints AS c
    WHERE thread_id = :thread_id AND (checkpoint_id, thread_id, checkpoint_ns) < (COALESCE(:after_checkpoint_id, :before, x''), COALESCE(:after_thread_id, ''), COALESCE(:after_checkpoint_ns, ''))
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
           (SELECT json_group_array(s.value) FROM json_each((SELECT json_group_array(s.value) FROM json_each(w.sought) AS s
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
SELECT 'a' AS kind, thread_id, checkpoint_ns, checkpoint_id, c.parent_checkpoint_id AS f1,
       c.channels AS f2, c.type AS f3,
       CASE WHEN EXISTS (SELECT 1 FROM json_each(v.sought) AS s
                         WHERE s.value IN (SELECT value FROM json_each(c.channels)))
            THEN c.checkpoint END AS f4,
       CASE WHEN EXISTS (SELECT 1 FROM json_each(v.sought) AS s
                         WHERE s.value IN (SELECT value FROM json_each(c.channels)))
            THEN c.metadata END AS f5, NULL AS f6
FROM visited AS v JOIN checkpoints AS c USING (thread_id, checkpoint_ns, checkpoint_id)
UNION ALL
SELECT 'w', thread_id, checkpoint_ns, checkpoint_id, w.task_id, w.task_path, w.idx, w.channel,
       w.type, w.value
FROM visited AS v CROSS JOIN writes AS w USING (thread_id, checkpoint_ns, checkpoint_id)
WHERE (w.channel IN (SELECT value FROM json_each(v.sought)) OR substr(w.value, 1, 2) = 'p:')
UNION ALL
SELECT 'k', thread_id, checkpoint_ns, checkpoint_id, k.owner, k.seq, k.data, NULL, NULL, NULL
FROM holders AS v CROSS JOIN chunks AS k USING (thread_id, checkpoint_ns, checkpoint_id)
WHERE v.sought IS NOT NULL OR substr(k.owner, 1, 2) = 'f/'
UNION ALL
SELECT 'f', thread_id, checkpoint_ns, checkpoint_id, json_array(f.kind, f.src_checkpoint_id, f.task_id, f.task_path, f.idx,
                  f.channel, f.depth), f.type, f.value, f.channels, f.metadata, NULL
FROM holders AS v CROSS JOIN delta_frozen AS f USING (thread_id, checkpoint_ns, checkpoint_id)
WHERE v.sought IS NULL OR f.channel IN (SELECT value FROM json_each(v.sought))
),
vals(thread_id, v) AS (SELECT thread_id, CASE kind WHEN 'a' THEN f4 WHEN 'w' THEN f6 WHEN 'f' THEN f3 END FROM out),
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
SELECT 'h', thread_id, NULL, NULL, id, k.data, NULL, NULL, NULL, NULL
FROM refs AS r CROSS JOIN d1saver_chunks AS k USING (thread_id, id)
WHERE NOT EXISTS (SELECT 1 FROM seen AS s WHERE s.thread_id = r.thread_id AND s.id = r.id)""")
SELECT_PAGE_DELTA_ALL = q("""
WITH RECURSIVE
page AS (
    SELECT thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id, type, checkpoint,
           metadata, channels
    FROM checkpoints AS c
    WHERE (checkpoint_id, thread_id, checkpoint_ns) < (COALESCE(:after_checkpoint_id, :before, x''), COALESCE(:after_thread_id, ''), COALESCE(:after_checkpoint_ns, ''))
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
           (SELECT json_group_array(s.value) FROM json_each((SELECT json_group_array(s.value) FROM json_each(w.sought) AS s
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
SELECT 'a' AS kind, thread_id, checkpoint_ns, checkpoint_id, c.parent_checkpoint_id AS f1,
       c.channels AS f2, c.type AS f3,
       CASE WHEN EXISTS (SELECT 1 FROM json_each(v.sought) AS s
                         WHERE s.value IN (SELECT value FROM json_each(c.channels)))
            THEN c.checkpoint END AS f4,
       CASE WHEN EXISTS (SELECT 1 FROM json_each(v.sought) AS s
                         WHERE s.value IN (SELECT value FROM json_each(c.channels)))
            THEN c.metadata END AS f5, NULL AS f6
FROM visited AS v JOIN checkpoints AS c USING (thread_id, checkpoint_ns, checkpoint_id)
UNION ALL
SELECT 'w', thread_id, checkpoint_ns, checkpoint_id, w.task_id, w.task_path, w.idx, w.channel,
       w.type, w.value
FROM visited AS v CROSS JOIN writes AS w USING (thread_id, checkpoint_ns, checkpoint_id)
WHERE (w.channel IN (SELECT value FROM json_each(v.sought)) OR substr(w.value, 1, 2) = 'p:')
UNION ALL
SELECT 'k', thread_id, checkpoint_ns, checkpoint_id, k.owner, k.seq, k.data, NULL, NULL, NULL
FROM holders AS v CROSS JOIN chunks AS k USING (thread_id, checkpoint_ns, checkpoint_id)
WHERE v.sought IS NOT NULL OR substr(k.owner, 1, 2) = 'f/'
UNION ALL
SELECT 'f', thread_id, checkpoint_ns, checkpoint_id, json_array(f.kind, f.src_checkpoint_id, f.task_id, f.task_path, f.idx,
                  f.channel, f.depth), f.type, f.value, f.channels, f.metadata, NULL
FROM holders AS v CROSS JOIN delta_frozen AS f USING (thread_id, checkpoint_ns, checkpoint_id)
WHERE v.sought IS NULL OR f.channel IN (SELECT value FROM json_each(v.sought))
),
vals(thread_id, v) AS (SELECT thread_id, CASE kind WHEN 'a' THEN f4 WHEN 'w' THEN f6 WHEN 'f' THEN f3 END FROM out),
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
SELECT 'h', thread_id, NULL, NULL, id, k.data, NULL, NULL, NULL, NULL
FROM refs AS r CROSS JOIN d1saver_chunks AS k USING (thread_id, id)
WHERE NOT EXISTS (SELECT 1 FROM seen AS s WHERE s.thread_id = r.thread_id AND s.id = r.id)""")
SELECT_PAGE_DELTA_THREAD_NS_FILTERED = q("""
WITH RECURSIVE
page AS (
    SELECT thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id, type, checkpoint,
           metadata, channels
    FROM checkpoints AS c
    WHERE thread_id = :thread_id AND checkpoint_ns = :checkpoint_ns AND checkpoint_id < COALESCE(:after_checkpoint_id, :before, x'')
      AND (:checkpoint_id IS NULL OR checkpoint_id = :checkpoint_id)
      AND NOT EXISTS (
    SELECT 1 FROM (SELECT value ->> 0 AS path, value ->> 1 AS doc FROM json_each(:filter)) AS f
    WHERE NOT (CASE WHEN json_type(f.doc, f.path) = 'null'
        THEN COALESCE(json_type(c.metadata, f.path), 'null') = 'null'
        ELSE (SELECT COUNT(*) FROM json_tree(c.metadata, f.path))
             = (SELECT COUNT(*) FROM json_tree(f.doc, f.path))
         AND NOT EXISTS (SELECT 1 FROM json_tree(f.doc, f.path) AS q WHERE NOT EXISTS (
             SELECT 1 FROM json_tree(c.metadata, f.path) AS m
             WHERE m.fullkey = q.fullkey AND m.atom IS q.atom AND CASE WHEN m.type IN ('integer','real','true','false') THEN 'n' ELSE m.type END = CASE WHEN q.type IN ('integer','real','true','false') THEN 'n' ELSE q.type END))
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
           (SELECT json_group_array(s.value) FROM json_each((SELECT json_group_array(s.value) FROM json_each(w.sought) AS s
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
SELECT 'a' AS kind, thread_id, checkpoint_ns, checkpoint_id, c.parent_checkpoint_id AS f1,
       c.channels AS f2, c.type AS f3,
       CASE WHEN EXISTS (SELECT 1 FROM json_each(v.sought) AS s
                         WHERE s.value IN (SELECT value FROM json_each(c.channels)))
            THEN c.checkpoint END AS f4,
       CASE WHEN EXISTS (SELECT 1 FROM json_each(v.sought) AS s
                         WHERE s.value IN (SELECT value FROM json_each(c.channels)))
            THEN c.metadata END AS f5, NULL AS f6
FROM visited AS v JOIN checkpoints AS c USING (thread_id, checkpoint_ns, checkpoint_id)
UNION ALL
SELECT 'w', thread_id, checkpoint_ns, checkpoint_id, w.task_id, w.task_path, w.idx, w.channel,
       w.type, w.value
FROM visited AS v CROSS JOIN writes AS w USING (thread_id, checkpoint_ns, checkpoint_id)
WHERE (w.channel IN (SELECT value FROM json_each(v.sought)) OR substr(w.value, 1, 2) = 'p:')
UNION ALL
SELECT 'k', thread_id, checkpoint_ns, checkpoint_id, k.owner, k.seq, k.data, NULL, NULL, NULL
FROM holders AS v CROSS JOIN chunks AS k USING (thread_id, checkpoint_ns, checkpoint_id)
WHERE v.sought IS NOT NULL OR substr(k.owner, 1, 2) = 'f/'
UNION ALL
SELECT 'f', thread_id, checkpoint_ns, checkpoint_id, json_array(f.kind, f.src_checkpoint_id, f.task_id, f.task_path, f.idx,
                  f.channel, f.depth), f.type, f.value, f.channels, f.metadata, NULL
FROM holders AS v CROSS JOIN delta_frozen AS f USING (thread_id, checkpoint_ns, checkpoint_id)
WHERE v.sought IS NULL OR f.channel IN (SELECT value FROM json_each(v.sought))
),
vals(thread_id, v) AS (SELECT thread_id, CASE kind WHEN 'a' THEN f4 WHEN 'w' THEN f6 WHEN 'f' THEN f3 END FROM out),
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
SELECT 'h', thread_id, NULL, NULL, id, k.data, NULL, NULL, NULL, NULL
FROM refs AS r CROSS JOIN d1saver_chunks AS k USING (thread_id, id)
WHERE NOT EXISTS (SELECT 1 FROM seen AS s WHERE s.thread_id = r.thread_id AND s.id = r.id)""")
SELECT_PAGE_DELTA_THREAD_FILTERED = q("""
WITH RECURSIVE
page AS (
    SELECT thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id, type, checkpoint,
           metadata, channels
    FROM checkpoints AS c
    WHERE thread_id = :thread_id AND (checkpoint_id, thread_id, checkpoint_ns) < (COALESCE(:after_checkpoint_id, :before, x''), COALESCE(:after_thread_id, ''), COALESCE(:after_checkpoint_ns, ''))
      AND (:checkpoint_id IS NULL OR checkpoint_id = :checkpoint_id)
      AND NOT EXISTS (
    SELECT 1 FROM (SELECT value ->> 0 AS path, value ->> 1 AS doc FROM json_each(:filter)) AS f
    WHERE NOT (CASE WHEN json_type(f.doc, f.path) = 'null'
        THEN COALESCE(json_type(c.metadata, f.path), 'null') = 'null'
        ELSE (SELECT COUNT(*) FROM json_tree(c.metadata, f.path))
             = (SELECT COUNT(*) FROM json_tree(f.doc, f.path))
         AND NOT EXISTS (SELECT 1 FROM json_tree(f.doc, f.path) AS q WHERE NOT EXISTS (
             SELECT 1 FROM json_tree(c.metadata, f.path) AS m
             WHERE m.fullkey = q.fullkey AND m.atom IS q.atom AND CASE WHEN m.type IN ('integer','real','true','false') THEN 'n' ELSE m.type END = CASE WHEN q.type IN ('integer','real','true','false') THEN 'n' ELSE q.type END))
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
           (SELECT json_group_array(s.value) FROM json_each((SELECT json_group_array(s.value) FROM json_each(w.sought) AS s
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
SELECT 'a' AS kind, thread_id, checkpoint_ns, checkpoint_id, c.parent_checkpoint_id AS f1,
       c.channels AS f2, c.type AS f3,
       CASE WHEN EXISTS (SELECT 1 FROM json_each(v.sought) AS s
                         WHERE s.value IN (SELECT value FROM json_each(c.channels)))
            THEN c.checkpoint END AS f4,
       CASE WHEN EXISTS (SELECT 1 FROM json_each(v.sought) AS s
                         WHERE s.value IN (SELECT value FROM json_each(c.channels)))
            THEN c.metadata END AS f5, NULL AS f6
FROM visited AS v JOIN checkpoints AS c USING (thread_id, checkpoint_ns, checkpoint_id)
UNION ALL
SELECT 'w', thread_id, checkpoint_ns, checkpoint_id, w.task_id, w.task_path, w.idx, w.channel,
       w.type, w.value
FROM visited AS v CROSS JOIN writes AS w USING (thread_id, checkpoint_ns, checkpoint_id)
WHERE (w.channel IN (SELECT value FROM json_each(v.sought)) OR substr(w.value, 1, 2) = 'p:')
UNION ALL
SELECT 'k', thread_id, checkpoint_ns, checkpoint_id, k.owner, k.seq, k.data, NULL, NULL, NULL
FROM holders AS v CROSS JOIN chunks AS k USING (thread_id, checkpoint_ns, checkpoint_id)
WHERE v.sought IS NOT NULL OR substr(k.owner, 1, 2) = 'f/'
UNION ALL
SELECT 'f', thread_id, checkpoint_ns, checkpoint_id, json_array(f.kind, f.src_checkpoint_id, f.task_id, f.task_path, f.idx,
                  f.channel, f.depth), f.type, f.value, f.channels, f.metadata, NULL
FROM holders AS v CROSS JOIN delta_frozen AS f USING (thread_id, checkpoint_ns, checkpoint_id)
WHERE v.sought IS NULL OR f.channel IN (SELECT value FROM json_each(v.sought))
),
vals(thread_id, v) AS (SELECT thread_id, CASE kind WHEN 'a' THEN f4 WHEN 'w' THEN f6 WHEN 'f' THEN f3 END FROM out),
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
SELECT 'h', thread_id, NULL, NULL, id, k.data, NULL, NULL, NULL, NULL
FROM refs AS r CROSS JOIN d1saver_chunks AS k USING (thread_id, id)
WHERE NOT EXISTS (SELECT 1 FROM seen AS s WHERE s.thread_id = r.thread_id AND s.id = r.id)""")
SELECT_PAGE_DELTA_ALL_FILTERED = q("""
WITH RECURSIVE
page AS (
    SELECT thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id, type, checkpoint,
           metadata, channels
    FROM checkpoints AS c
    WHERE (checkpoint_id, thread_id, checkpoint_ns) < (COALESCE(:after_checkpoint_id, :before, x''), COALESCE(:after_thread_id, ''), COALESCE(:after_checkpoint_ns, ''))
      AND (:checkpoint_id IS NULL OR checkpoint_id = :checkpoint_id)
      AND NOT EXISTS (
    SELECT 1 FROM (SELECT value ->> 0 AS path, value ->> 1 AS doc FROM json_each(:filter)) AS f
    WHERE NOT (CASE WHEN json_type(f.doc, f.path) = 'null'
        THEN COALESCE(json_type(c.metadata, f.path), 'null') = 'null'
        ELSE (SELECT COUNT(*) FROM json_tree(c.metadata, f.path))
             = (SELECT COUNT(*) FROM json_tree(f.doc, f.path))
         AND NOT EXISTS (SELECT 1 FROM json_tree(f.doc, f.path) AS q WHERE NOT EXISTS (
             SELECT 1 FROM json_tree(c.metadata, f.path) AS m
             WHERE m.fullkey = q.fullkey AND m.atom IS q.atom AND CASE WHEN m.type IN ('integer','real','true','false') THEN 'n' ELSE m.type END = CASE WHEN q.type IN ('integer','real','true','false') THEN 'n' ELSE q.type END))
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
           (SELECT json_group_array(s.value) FROM json_each((SELECT json_group_array(s.value) FROM json_each(w.sought) AS s
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
SELECT 'a' AS kind, thread_id, checkpoint_ns, checkpoint_id, c.parent_checkpoint_id AS f1,
       c.channels AS f2, c.type AS f3,
       CASE WHEN EXISTS (SELECT 1 FROM json_each(v.sought) AS s
                         WHERE s.value IN (SELECT value FROM json_each(c.channels)))
            THEN c.checkpoint END AS f4,
       CASE WHEN EXISTS (SELECT 1 FROM json_each(v.sought) AS s
                         WHERE s.value IN (SELECT value FROM json_each(c.channels)))
            THEN c.metadata END AS f5, NULL AS f6
FROM visited AS v JOIN checkpoints AS c USING (thread_id, checkpoint_ns, checkpoint_id)
UNION ALL
SELECT 'w', thread_id, checkpoint_ns, checkpoint_id, w.task_id, w.task_path, w.idx, w.channel,
       w.type, w.value
FROM visited AS v CROSS JOIN writes AS w USING (thread_id, checkpoint_ns, checkpoint_id)
WHERE (w.channel IN (SELECT value FROM json_each(v.sought)) OR substr(w.value, 1, 2) = 'p:')
UNION ALL
SELECT 'k', thread_id, checkpoint_ns, checkpoint_id, k.owner, k.seq, k.data, NULL, NULL, NULL
FROM holders AS v CROSS JOIN chunks AS k USING (thread_id, checkpoint_ns, checkpoint_id)
WHERE v.sought IS NOT NULL OR substr(k.owner, 1, 2) = 'f/'
UNION ALL
SELECT 'f', thread_id, checkpoint_ns, checkpoint_id, json_array(f.kind, f.src_checkpoint_id, f.task_id, f.task_path, f.idx,
                  f.channel, f.depth), f.type, f.value, f.channels, f.metadata, NULL
FROM holders AS v CROSS JOIN delta_frozen AS f USING (thread_id, checkpoint_ns, checkpoint_id)
WHERE v.sought IS NULL OR f.channel IN (SELECT value FROM json_each(v.sought))
),
vals(thread_id, v) AS (SELECT thread_id, CASE kind WHEN 'a' THEN f4 WHEN 'w' THEN f6 WHEN 'f' THEN f3 END FROM out),
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
SELECT 'h', thread_id, NULL, NULL, id, k.data, NULL, NULL, NULL, NULL
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
# (?3, or the thread's newest when NULL) and carries, per step, the JSON array of requested
# channels (?4) still without a seed; a checkpoint whose `channels` holds one seeds it, and one
# with a frozen record of it (the target included) ends its walk with that record.
# Rows: 'a' (ancestor: depth, id, channels still sought on arrival, type, checkpoint),
# 'w' (write of a sought channel at an ancestor), 'k' (chunk of an ancestor's value, or a
# frozen piece of the target), 'f' (holder's id, _FROZEN_ROW, its depth). At most 4 terms
# in a compound SELECT: the real D1 engine refused 6 ("too many terms in compound SELECT").
# The depth bound stops a corrupt parent loop; LangGraph snapshots every 5000 steps at most.
DELTA_HISTORY = q("""
WITH RECURSIVE
target AS (
    SELECT thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id FROM checkpoints
    WHERE thread_id = :thread_id AND checkpoint_ns = :checkpoint_ns AND (:checkpoint_id IS NULL OR checkpoint_id = :checkpoint_id)
    ORDER BY checkpoint_id DESC LIMIT 1
),
chain(checkpoint_id, depth, sought) AS (
    SELECT t.parent_checkpoint_id, 1, (SELECT json_group_array(s.value) FROM json_each(json(:channels)) AS s
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
    FROM chain JOIN checkpoints AS p ON p.thread_id = :thread_id AND p.checkpoint_ns = :checkpoint_ns
        AND p.checkpoint_id = chain.checkpoint_id
    WHERE json_array_length(chain.sought) > 0 AND chain.depth < 20000
),
ancestors AS (
    SELECT chain.depth, chain.sought, p.checkpoint_id, p.channels, p.type, p.checkpoint,
           p.metadata
    FROM chain JOIN checkpoints AS p ON p.thread_id = :thread_id AND p.checkpoint_ns = :checkpoint_ns
        AND p.checkpoint_id = chain.checkpoint_id
    WHERE json_array_length(chain.sought) > 0
),
holders AS (
    SELECT 0 AS depth, json(:channels) AS sought, t.checkpoint_id, '[]' AS channels FROM target AS t
    UNION ALL
    SELECT depth, sought, checkpoint_id, channels FROM ancestors
),
out AS (
SELECT 'a' AS kind, a.depth AS depth, a.checkpoint_id AS checkpoint_id, a.sought AS f1,
       a.type AS f2,
       CASE WHEN EXISTS (SELECT 1 FROM json_each(a.sought) AS s
                         WHERE s.value IN (SELECT value FROM json_each(a.channels)))
            THEN a.checkpoint END AS f3,
       a.channels AS f4,
       CASE WHEN EXISTS (SELECT 1 FROM json_each(a.sought) AS s
                         WHERE s.value IN (SELECT value FROM json_each(a.channels)))
            THEN a.metadata END AS f5, NULL AS f6
FROM ancestors AS a
UNION ALL
SELECT 'w', a.depth, w.checkpoint_id, w.task_id, w.task_path, w.idx, w.channel, w.type, w.value
FROM ancestors AS a JOIN writes AS w ON w.thread_id = :thread_id AND w.checkpoint_ns = :checkpoint_ns
    AND w.checkpoint_id = a.checkpoint_id
WHERE (w.channel IN (SELECT value FROM json_each(a.sought)) OR substr(w.value, 1, 2) = 'p:')
UNION ALL
SELECT 'f', h.depth, h.checkpoint_id, json_array(f.kind, f.src_checkpoint_id, f.task_id, f.task_path, f.idx,
                  f.channel, f.depth), f.type, f.value, f.channels, f.metadata, h.depth
FROM holders AS h JOIN delta_frozen AS f ON f.thread_id = :thread_id AND f.checkpoint_ns = :checkpoint_ns
    AND f.checkpoint_id = h.checkpoint_id
WHERE f.channel IN (SELECT value FROM json_each(h.sought))
  AND f.channel NOT IN (SELECT value FROM json_each(h.channels))
UNION ALL
SELECT 'k', h.depth, k.checkpoint_id, k.owner, k.seq, k.data, NULL, NULL, NULL
FROM holders AS h JOIN chunks AS k ON k.thread_id = :thread_id AND k.checkpoint_ns = :checkpoint_ns
    AND k.checkpoint_id = h.checkpoint_id
WHERE h.depth > 0 OR substr(k.owner, 1, 2) = 'f/'
),
vals(thread_id, v) AS (SELECT :thread_id, CASE kind WHEN 'a' THEN f3 WHEN 'w' THEN f6 WHEN 'f' THEN f3 END FROM out),
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
SELECT 'h', NULL, NULL, id, k.data, NULL, NULL, NULL, NULL
FROM refs AS r CROSS JOIN d1saver_chunks AS k USING (thread_id, id)""")

# Columns of DELTA_HISTORY, per row kind:
#   'a' ancestor: f1 channels still sought on arrival, f2 type, f3 checkpoint, f4 channels,
#                 f5 metadata (checkpoint and metadata only if it is a seed)
#   'w' write:    checkpoint_id, f1 task_id, f2 task_path, f3 idx, f4 channel, f5 type, f6 value
#   'k' chunk:    checkpoint_id, f1 owner, f2 seq, f3 data
#   'f' frozen:   checkpoint_id (the holder), f1 identity, f2 type, f3 value, f4 channels,
#                 f5 metadata, f6 the holder's depth
DELTA_HISTORY_COLUMNS = ("kind", "depth", "checkpoint_id", "f1", "f2", "f3", "f4", "f5", "f6")

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

# ?1 thread, ?2 ns, ?3 checkpoint_id (NULL: the newest), ?4 name. Returns a row only if the
# checkpoint exists; a name already used in the namespace moves to this checkpoint.
TAG = q("""
INSERT INTO tags (thread_id, checkpoint_ns, checkpoint_id, name, created_at)
SELECT thread_id, checkpoint_ns, checkpoint_id, :name, strftime('%Y-%m-%dT%H:%M:%SZ', 'now')
FROM checkpoints WHERE thread_id = :thread_id AND checkpoint_ns = :checkpoint_ns
    AND checkpoint_id = COALESCE(:checkpoint_id, (SELECT MAX(checkpoint_id) FROM checkpoints
                                      WHERE thread_id = :thread_id AND checkpoint_ns = :checkpoint_ns))
ON CONFLICT (thread_id, checkpoint_ns, name) DO UPDATE SET
    checkpoint_id = excluded.checkpoint_id, created_at = excluded.created_at
RETURNING checkpoint_id""")
UNTAG = q("""
DELETE FROM tags WHERE thread_id = :thread_id AND checkpoint_ns = :checkpoint_ns AND name = :name""")
# Sent before UNTAG in its batch: records under op id ?4 whether the tag exists (1 or 0).
RECORD_UNTAG = q("""
INSERT OR IGNORE INTO d1saver_ops (op_id, result, created_at)
SELECT :op_id, COUNT(*), CAST(strftime('%s', 'now') AS INTEGER)
FROM tags WHERE thread_id = :thread_id AND checkpoint_ns = :checkpoint_ns AND name = :name""")
LIST_TAGS_COLUMNS = ("name", "checkpoint_id")
LIST_TAGS = q("""
SELECT name, checkpoint_id FROM tags WHERE thread_id = :thread_id AND checkpoint_ns = :checkpoint_ns
ORDER BY checkpoint_id DESC, name""")

# --- content-addressed chunks: garbage collection and the check --------------------------

# How many writes row {t} holds: a "p:" row packs one put_writes call's (migration 7).

# Exact garbage collection of content-addressed chunks (migration 7), last in every batch that
# deletes rows of the threads in d1saver_scope: a chunk stays only if a remaining checkpoint or
# write of its thread reaches it (through its manifest, nodes opened level by level). In the
# same batch as the deletions, so no chunk is ever referenced but missing, and none is left
# unreferenced. A put racing it either committed first (its chunks are reached) or finds a
# chunk gone and fails with chunk_missing, then sends its chunks again (d1saver/ops/operations.py).
# The entries of manifest {v} (or none if it is not one) as a JSON array: entries never hold
# ',', '"' or '\\' (d1saver/storage/manifest.py), so wrapping them is exact.
# The writes packed in {v} (a "p:" row: one put_writes call's regular writes, migration 7).
GC_CHUNKS = q("""
WITH RECURSIVE reached(thread_id, id) AS (
    SELECT c.thread_id, ltrim(j.value, '^')
    FROM checkpoints AS c, json_each(CASE WHEN substr(c.checkpoint, 1, 2) = 'm:' THEN '["' || replace(substr(c.checkpoint, 3), ',', '","') || '"]' ELSE '[]' END) AS j
    WHERE c.thread_id IN (SELECT thread_id FROM d1saver_scope) AND instr(j.value, ':') = 0
    UNION
    SELECT w.thread_id, ltrim(j.value, '^')
    FROM writes AS w, json_each(CASE WHEN substr(w.value, 1, 2) = 'm:' THEN '["' || replace(substr(w.value, 3), ',', '","') || '"]' ELSE '[]' END) AS j
    WHERE w.thread_id IN (SELECT thread_id FROM d1saver_scope) AND instr(j.value, ':') = 0
    UNION
    SELECT w.thread_id, ltrim(j.value, '^')
    FROM writes AS w, json_each(CASE WHEN substr(w.value, 1, 2) = 'p:' THEN substr(w.value, 3) ELSE '[]' END) AS p, json_each(CASE WHEN substr(p.value->>3, 1, 2) = 'm:' THEN '["' || replace(substr(p.value->>3, 3), ',', '","') || '"]' ELSE '[]' END) AS j
    WHERE w.thread_id IN (SELECT thread_id FROM d1saver_scope) AND instr(j.value, ':') = 0
    UNION
    SELECT f.thread_id, ltrim(j.value, '^')
    FROM delta_frozen AS f, json_each(CASE WHEN substr(f.value, 1, 2) = 'm:' THEN '["' || replace(substr(f.value, 3), ',', '","') || '"]' ELSE '[]' END) AS j
    WHERE f.thread_id IN (SELECT thread_id FROM d1saver_scope) AND instr(j.value, ':') = 0
    UNION
    SELECT r.thread_id, ltrim(j.value, '^')
    FROM reached AS r CROSS JOIN d1saver_chunks AS n ON n.thread_id = r.thread_id AND n.id = r.id
        AND n.level > 0, json_each('["' || replace(n.data, ',', '","') || '"]') AS j
)
DELETE FROM d1saver_chunks WHERE thread_id IN (SELECT thread_id FROM d1saver_scope)
    AND (thread_id, id) NOT IN (SELECT thread_id, id FROM reached)""")

# The check (`d1saver check`, and the tests after every deleting operation): per thread
# (?1, or every thread when NULL) that breaks the rule, the ids its rows reach that are not
# stored, and the chunks stored that no row reaches. No row: the chunk table is exact.
CHUNK_CHECK_COLUMNS = ("thread_id", "missing", "unreferenced")
CHUNK_CHECK = q("""
WITH RECURSIVE reached(thread_id, id) AS (
    SELECT c.thread_id, ltrim(j.value, '^')
    FROM checkpoints AS c, json_each(CASE WHEN substr(c.checkpoint, 1, 2) = 'm:' THEN '["' || replace(substr(c.checkpoint, 3), ',', '","') || '"]' ELSE '[]' END) AS j
    WHERE c.thread_id IN (SELECT thread_id FROM checkpoints WHERE :thread_id IS NULL OR thread_id = :thread_id
        UNION SELECT thread_id FROM writes WHERE :thread_id IS NULL OR thread_id = :thread_id) AND instr(j.value, ':') = 0
    UNION
    SELECT w.thread_id, ltrim(j.value, '^')
    FROM writes AS w, json_each(CASE WHEN substr(w.value, 1, 2) = 'm:' THEN '["' || replace(substr(w.value, 3), ',', '","') || '"]' ELSE '[]' END) AS j
    WHERE w.thread_id IN (SELECT thread_id FROM checkpoints WHERE :thread_id IS NULL OR thread_id = :thread_id
        UNION SELECT thread_id FROM writes WHERE :thread_id IS NULL OR thread_id = :thread_id) AND instr(j.value, ':') = 0
    UNION
    SELECT w.thread_id, ltrim(j.value, '^')
    FROM writes AS w, json_each(CASE WHEN substr(w.value, 1, 2) = 'p:' THEN substr(w.value, 3) ELSE '[]' END) AS p, json_each(CASE WHEN substr(p.value->>3, 1, 2) = 'm:' THEN '["' || replace(substr(p.value->>3, 3), ',', '","') || '"]' ELSE '[]' END) AS j
    WHERE w.thread_id IN (SELECT thread_id FROM checkpoints WHERE :thread_id IS NULL OR thread_id = :thread_id
        UNION SELECT thread_id FROM writes WHERE :thread_id IS NULL OR thread_id = :thread_id) AND instr(j.value, ':') = 0
    UNION
    SELECT f.thread_id, ltrim(j.value, '^')
    FROM delta_frozen AS f, json_each(CASE WHEN substr(f.value, 1, 2) = 'm:' THEN '["' || replace(substr(f.value, 3), ',', '","') || '"]' ELSE '[]' END) AS j
    WHERE f.thread_id IN (SELECT thread_id FROM checkpoints WHERE :thread_id IS NULL OR thread_id = :thread_id
        UNION SELECT thread_id FROM writes WHERE :thread_id IS NULL OR thread_id = :thread_id) AND instr(j.value, ':') = 0
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

# ?1: JSON array of thread ids. Children first, checkpoints last.
DELETE_THREADS_WRITES = q("""
DELETE FROM writes WHERE thread_id IN (SELECT CAST(unhex(value) AS TEXT) FROM json_each(:thread_ids))""")
DELETE_THREADS_D1SAVER_CHUNKS = q("""
DELETE FROM d1saver_chunks WHERE thread_id IN (SELECT CAST(unhex(value) AS TEXT) FROM json_each(:thread_ids))""")
DELETE_THREADS_CHUNKS = q("""
DELETE FROM chunks WHERE thread_id IN (SELECT CAST(unhex(value) AS TEXT) FROM json_each(:thread_ids))""")
DELETE_THREADS_TAGS = q("""
DELETE FROM tags WHERE thread_id IN (SELECT CAST(unhex(value) AS TEXT) FROM json_each(:thread_ids))""")
DELETE_THREADS_CHECKPOINTS = q("""
DELETE FROM checkpoints WHERE thread_id IN (SELECT CAST(unhex(value) AS TEXT) FROM json_each(:thread_ids))""")
DELETE_THREADS = [DELETE_THREADS_WRITES, DELETE_THREADS_D1SAVER_CHUNKS, DELETE_THREADS_CHUNKS, DELETE_THREADS_TAGS, DELETE_THREADS_CHECKPOINTS]

# ?1 source thread, ?2 target thread. Rows already on the target are replaced.
COPY_D1SAVER_CHUNKS = q("""
INSERT OR IGNORE INTO d1saver_chunks (thread_id, id, level, data)
SELECT :target, id, level, data FROM d1saver_chunks WHERE thread_id = :source ORDER BY level""")
COPY_CHECKPOINTS = q("""
INSERT OR REPLACE INTO checkpoints (thread_id, checkpoint_ns, checkpoint_id,
    parent_checkpoint_id, type, checkpoint, metadata, channels, run_id, ts)
SELECT :target, checkpoint_ns, checkpoint_id, parent_checkpoint_id, type, checkpoint,
       metadata, channels, run_id, ts
FROM checkpoints WHERE thread_id = :source""")
COPY_WRITES = q("""
INSERT OR REPLACE INTO writes (thread_id, checkpoint_ns, checkpoint_id, task_id, task_path,
    idx, channel, type, value)
SELECT :target, checkpoint_ns, checkpoint_id, task_id, task_path, idx, channel, type, value
FROM writes WHERE thread_id = :source""")
COPY_CHUNKS = q("""
INSERT OR REPLACE INTO chunks (thread_id, checkpoint_ns, checkpoint_id, owner, seq, data)
SELECT :target, checkpoint_ns, checkpoint_id, owner, seq, data FROM chunks WHERE thread_id = :source""")
COPY_TAGS = q("""
INSERT OR REPLACE INTO tags (thread_id, checkpoint_ns, checkpoint_id, name, created_at)
SELECT :target, checkpoint_ns, checkpoint_id, name, created_at FROM tags WHERE thread_id = :source""")
COPY_DELTA_UNWRITTEN = q("""
INSERT OR REPLACE INTO delta_unwritten (thread_id, checkpoint_ns, checkpoint_id, channels)
SELECT :target, checkpoint_ns, checkpoint_id, channels FROM delta_unwritten WHERE thread_id = :source""")
COPY_DELTA_FROZEN = q("""
INSERT OR REPLACE INTO delta_frozen (thread_id, checkpoint_ns, checkpoint_id, channel, kind, depth, task_id, idx, src_checkpoint_id, task_path, type, value, metadata, channels)
SELECT :target, checkpoint_ns, checkpoint_id, channel, kind, depth, task_id, idx, src_checkpoint_id, task_path, type, value, metadata, channels FROM delta_frozen WHERE thread_id = :source""")
CLEAR_SCOPE = q("DELETE FROM d1saver_scope")
SCOPE_TARGET = q("INSERT INTO d1saver_scope (thread_id) VALUES (:target)")
COPY_THREAD = [COPY_D1SAVER_CHUNKS, COPY_CHECKPOINTS, COPY_WRITES, COPY_CHUNKS, COPY_TAGS, COPY_DELTA_UNWRITTEN, COPY_DELTA_FROZEN, CLEAR_SCOPE, SCOPE_TARGET, GC_CHUNKS, CLEAR_SCOPE]

# --- retention: shared by prune(), delete_for_runs() and the compaction job --------------
#
# One batch: fill d1saver_scope with the threads concerned and d1saver_keep with what must
# survive in them, relink survivors whose parent goes, delete the rest, empty the scratch
# tables. D1 runs a batch as one transaction, so nobody ever sees a half-pruned thread.

CLEAR_KEEP = q("DELETE FROM d1saver_keep")
CLEAR_RELINK = q("DELETE FROM d1saver_relink")
CLEAR_SCRATCH = [CLEAR_SCOPE, CLEAR_KEEP, CLEAR_RELINK]

SCOPE_THREADS = q("""
INSERT OR IGNORE INTO d1saver_scope (thread_id) SELECT CAST(unhex(value) AS TEXT) FROM json_each(:thread_ids)""")
SCOPE_RUNS = q("""
INSERT OR IGNORE INTO d1saver_scope (thread_id)
SELECT DISTINCT thread_id FROM checkpoints WHERE run_id IN (SELECT CAST(unhex(value) AS TEXT) FROM json_each(:run_ids))""")


# A subgraph's namespace is its parent's, then '|' unless the parent is the root, then
# '<node>:<task_id>' of the parent's task that called it; a task that calls a subgraph again
# adds '|<n>'. `peel` drops those numeric segments; `head` is s up to and including its last
# '|' (rtrim drops from the right every character but '|'), '' if none. `owners` maps every
# subgraph namespace in scope whose parent namespace exists to that parent and the task.
# A part of PLAN_KEEP: it reads PLAN_KEEP's `ranked`.

# ?1: N. Keeps, in the threads in scope:
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

# ?1: JSON array of run ids. Keeps every checkpoint in scope that no listed run made.
PLAN_KEEP_OTHER_RUNS = q("""
INSERT OR IGNORE INTO d1saver_keep (thread_id, checkpoint_ns, checkpoint_id)
SELECT thread_id, checkpoint_ns, checkpoint_id FROM checkpoints
WHERE thread_id IN (SELECT thread_id FROM d1saver_scope)
  AND (run_id IS NULL OR run_id NOT IN (SELECT CAST(unhex(value) AS TEXT) FROM json_each(:run_ids)))""")

# DeltaChannel histories frozen before their ancestors go (docs/STORAGE_DESIGN.md). A kept
# checkpoint whose parent is not kept gets, per channel it replays (_SOUGHT) and holds no
# ending record of, what get_delta_channel_history's walk finds between it and the nearest
# kept ancestor: each ancestor's writes of the channel ('w'), and, where the walk ends before
# a kept one, the seed's whole checkpoint row ('s') or the copy of the record it ended at (its
# depths plus where it was met). A walk that reaches a kept ancestor leaves a 'c' row instead:
# the record holds only the newer part of the history, and readers go on from the holder's
# parent, which PLAN_RELINK makes that ancestor; walks through kept checkpoints change nothing,
# so every deleted write is copied once, not once per kept descendant. A holder whose record
# continues ('c') and whose parent goes again walks on from the 'c' row's depth. Values are
# copied verbatim with the identity of the rows they were stored at: nothing is decoded, so
# it works for any state and with keys. (The saver cannot compute the channel's value: its
# reducer is graph code. So it records the history, not a snapshot.) A walk row is (origin,
# channel, depth, cur: the checkpoint at that depth, steps taken, bound: the namespace's
# checkpoints, more steps than a walk without a loop can take, so a corrupt parent loop ends).
# The depth of the 'c' row of {t}'s record of channel {ch} (NULL: none, or no record).
# Whether {t} holds a record of channel {ch} that ends its history (no 'c' row).
# Each write row {t} holds as [idx, channel, type, value] entries: a "p:" row (migration 7)
# packs one put_writes call's writes (type null: "msgpack"), any other row holds itself.
FREEZE = q("""
INSERT OR IGNORE INTO delta_frozen (thread_id, checkpoint_ns, checkpoint_id, channel, kind, depth, task_id, idx, src_checkpoint_id, task_path, type, value, metadata, channels)
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
    AND f.channel = s.value) AND (SELECT MAX(f.depth) FROM delta_frozen AS f WHERE f.thread_id = c.thread_id
    AND f.checkpoint_ns = c.checkpoint_ns AND f.checkpoint_id = c.checkpoint_id
    AND f.channel = s.value AND f.kind = 'c') IS NULL)
    UNION ALL
    SELECT w.thread_id, w.checkpoint_ns, w.origin, w.channel,
           w.depth + COALESCE((SELECT MAX(f.depth) FROM delta_frozen AS f WHERE f.thread_id = p.thread_id
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
    AND f.channel = w.channel) AND (SELECT MAX(f.depth) FROM delta_frozen AS f WHERE f.thread_id = p.thread_id
    AND f.checkpoint_ns = p.checkpoint_ns AND f.checkpoint_id = p.checkpoint_id
    AND f.channel = w.channel AND f.kind = 'c') IS NULL)
)
SELECT w.thread_id, w.checkpoint_ns, w.origin, w.channel, 'w', w.depth, x.task_id,
       e.value->>0, w.cur, x.task_path, COALESCE(e.value->>2, 'msgpack'), e.value->>3, NULL, NULL
FROM walk AS w CROSS JOIN writes AS x ON x.thread_id = w.thread_id
    AND x.checkpoint_ns = w.checkpoint_ns AND x.checkpoint_id = w.cur
CROSS JOIN json_each(CASE WHEN substr(x.value, 1, 2) = 'p:' THEN substr(x.value, 3)
    ELSE json_array(json_array(x.idx, x.channel, x.type, x.value)) END) AS e
WHERE e.value->>1 = w.channel AND NOT EXISTS (SELECT 1 FROM d1saver_keep AS k WHERE k.thread_id = w.thread_id
    AND k.checkpoint_ns = w.checkpoint_ns AND k.checkpoint_id = w.cur)
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
DELETE FROM delta_frozen AS c WHERE c.kind = 'c' AND c.thread_id IN (SELECT thread_id FROM d1saver_scope) AND EXISTS (
    SELECT 1 FROM delta_frozen AS f WHERE f.thread_id = c.thread_id
        AND f.checkpoint_ns = c.checkpoint_ns AND f.checkpoint_id = c.checkpoint_id
        AND f.channel = c.channel AND f.depth >= c.depth AND NOT (f.kind = 'c' AND f.depth = c.depth))""")

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
    AND (k.owner = CASE f.kind WHEN 'w' THEN f.task_id || '/' || f.idx END OR (f.kind = 's' AND k.owner IN ('', ':metadata')))
WHERE f.thread_id IN (SELECT thread_id FROM d1saver_scope)
UNION ALL
SELECT f.thread_id, f.checkpoint_ns, f.checkpoint_id, k.owner, k.seq, k.data
FROM delta_frozen AS f CROSS JOIN chunks AS k ON k.thread_id = f.thread_id
    AND k.checkpoint_ns = f.checkpoint_ns AND k.checkpoint_id <> f.checkpoint_id
    AND (k.owner = 'f/' || f.src_checkpoint_id || '/' || CASE f.kind WHEN 'w' THEN f.task_id || '/' || f.idx END
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
        AND k.checkpoint_ns = writes.checkpoint_ns AND k.checkpoint_id = writes.checkpoint_id) AND writes.checkpoint_id <= (
    SELECT MAX(n.checkpoint_id) FROM checkpoints AS n
    WHERE n.thread_id = writes.thread_id AND n.checkpoint_ns = writes.checkpoint_ns)""")
DELETE_UNKEPT_CHUNKS = q("""
DELETE FROM chunks WHERE thread_id IN (SELECT thread_id FROM d1saver_scope) AND NOT EXISTS (
    SELECT 1 FROM d1saver_keep AS k WHERE k.thread_id = chunks.thread_id
        AND k.checkpoint_ns = chunks.checkpoint_ns AND k.checkpoint_id = chunks.checkpoint_id) AND chunks.checkpoint_id <= (
    SELECT MAX(n.checkpoint_id) FROM checkpoints AS n
    WHERE n.thread_id = chunks.thread_id AND n.checkpoint_ns = chunks.checkpoint_ns)""")
DELETE_UNKEPT_TAGS = q("""
DELETE FROM tags WHERE thread_id IN (SELECT thread_id FROM d1saver_scope) AND NOT EXISTS (
    SELECT 1 FROM d1saver_keep AS k WHERE k.thread_id = tags.thread_id
        AND k.checkpoint_ns = tags.checkpoint_ns AND k.checkpoint_id = tags.checkpoint_id)""")
DELETE_UNKEPT_CHECKPOINTS = q("""
DELETE FROM checkpoints WHERE thread_id IN (SELECT thread_id FROM d1saver_scope) AND NOT EXISTS (
    SELECT 1 FROM d1saver_keep AS k WHERE k.thread_id = checkpoints.thread_id
        AND k.checkpoint_ns = checkpoints.checkpoint_ns AND k.checkpoint_id = checkpoints.checkpoint_id)""")
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
        AND k.checkpoint_ns = c.checkpoint_ns AND k.checkpoint_id = c.checkpoint_id)) AS checkpoints,
  (SELECT COALESCE(SUM(CASE WHEN substr(w.value, 1, 2) = 'p:' THEN json_array_length(substr(w.value, 3)) ELSE 1 END), 0) FROM writes AS w
     WHERE w.thread_id = s.thread_id AND NOT EXISTS (
    SELECT 1 FROM d1saver_keep AS k WHERE k.thread_id = w.thread_id
        AND k.checkpoint_ns = w.checkpoint_ns AND k.checkpoint_id = w.checkpoint_id) AND w.checkpoint_id <= (
    SELECT MAX(n.checkpoint_id) FROM checkpoints AS n
    WHERE n.thread_id = w.thread_id AND n.checkpoint_ns = w.checkpoint_ns)) AS writes,
  (SELECT COALESCE(SUM(LENGTH(c.checkpoint) + LENGTH(c.metadata)), 0) FROM checkpoints AS c
     WHERE c.thread_id = s.thread_id AND NOT EXISTS (
    SELECT 1 FROM d1saver_keep AS k WHERE k.thread_id = c.thread_id
        AND k.checkpoint_ns = c.checkpoint_ns AND k.checkpoint_id = c.checkpoint_id))
  + (SELECT COALESCE(SUM(LENGTH(w.value)), 0) FROM writes AS w
     WHERE w.thread_id = s.thread_id AND NOT EXISTS (
    SELECT 1 FROM d1saver_keep AS k WHERE k.thread_id = w.thread_id
        AND k.checkpoint_ns = w.checkpoint_ns AND k.checkpoint_id = w.checkpoint_id) AND w.checkpoint_id <= (
    SELECT MAX(n.checkpoint_id) FROM checkpoints AS n
    WHERE n.thread_id = w.thread_id AND n.checkpoint_ns = w.checkpoint_ns))
  + (SELECT COALESCE(SUM(LENGTH(k.data)), 0) FROM chunks AS k
     WHERE k.thread_id = s.thread_id AND NOT EXISTS (
    SELECT 1 FROM d1saver_keep AS k WHERE k.thread_id = k.thread_id
        AND k.checkpoint_ns = k.checkpoint_ns AND k.checkpoint_id = k.checkpoint_id) AND k.checkpoint_id <= (
    SELECT MAX(n.checkpoint_id) FROM checkpoints AS n
    WHERE n.thread_id = k.thread_id AND n.checkpoint_ns = k.checkpoint_ns)) AS bytes
FROM d1saver_scope AS s ORDER BY s.thread_id""")

# A real run's summary is recorded under the batch's op id (see "idempotency records") and
# read back, so that a retried batch, which finds nothing more to delete, still reports what
# its first try deleted. ?1: op id. The record is a JSON array of the summary's rows, thread
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
        AND k.checkpoint_ns = c.checkpoint_ns AND k.checkpoint_id = c.checkpoint_id)) AS checkpoints,
  (SELECT COALESCE(SUM(CASE WHEN substr(w.value, 1, 2) = 'p:' THEN json_array_length(substr(w.value, 3)) ELSE 1 END), 0) FROM writes AS w
     WHERE w.thread_id = s.thread_id AND NOT EXISTS (
    SELECT 1 FROM d1saver_keep AS k WHERE k.thread_id = w.thread_id
        AND k.checkpoint_ns = w.checkpoint_ns AND k.checkpoint_id = w.checkpoint_id) AND w.checkpoint_id <= (
    SELECT MAX(n.checkpoint_id) FROM checkpoints AS n
    WHERE n.thread_id = w.thread_id AND n.checkpoint_ns = w.checkpoint_ns)) AS writes,
  (SELECT COALESCE(SUM(LENGTH(c.checkpoint) + LENGTH(c.metadata)), 0) FROM checkpoints AS c
     WHERE c.thread_id = s.thread_id AND NOT EXISTS (
    SELECT 1 FROM d1saver_keep AS k WHERE k.thread_id = c.thread_id
        AND k.checkpoint_ns = c.checkpoint_ns AND k.checkpoint_id = c.checkpoint_id))
  + (SELECT COALESCE(SUM(LENGTH(w.value)), 0) FROM writes AS w
     WHERE w.thread_id = s.thread_id AND NOT EXISTS (
    SELECT 1 FROM d1saver_keep AS k WHERE k.thread_id = w.thread_id
        AND k.checkpoint_ns = w.checkpoint_ns AND k.checkpoint_id = w.checkpoint_id) AND w.checkpoint_id <= (
    SELECT MAX(n.checkpoint_id) FROM checkpoints AS n
    WHERE n.thread_id = w.thread_id AND n.checkpoint_ns = w.checkpoint_ns))
  + (SELECT COALESCE(SUM(LENGTH(k.data)), 0) FROM chunks AS k
     WHERE k.thread_id = s.thread_id AND NOT EXISTS (
    SELECT 1 FROM d1saver_keep AS k WHERE k.thread_id = k.thread_id
        AND k.checkpoint_ns = k.checkpoint_ns AND k.checkpoint_id = k.checkpoint_id) AND k.checkpoint_id <= (
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

# The same figures for named threads: ?1 JSON array of thread ids.
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

# One thread's checkpoints, newest first (`d1saver history`): ?1 thread_id, ?2 limit.
HISTORY = q("""
SELECT c.checkpoint_ns, c.checkpoint_id, c.parent_checkpoint_id,
       json_extract(c.metadata, '$.step') AS step, json_extract(c.metadata, '$.source') AS source,
       c.ts, LENGTH(c.checkpoint) + LENGTH(c.metadata) AS bytes,
       (SELECT COALESCE(SUM(CASE WHEN substr(w.value, 1, 2) = 'p:' THEN json_array_length(substr(w.value, 3)) ELSE 1 END), 0) FROM writes AS w
        WHERE w.thread_id = c.thread_id AND w.checkpoint_ns = c.checkpoint_ns
          AND w.checkpoint_id = c.checkpoint_id) AS writes,
       (SELECT group_concat(g.name, ',') FROM tags AS g WHERE g.thread_id = c.thread_id
          AND g.checkpoint_ns = c.checkpoint_ns AND g.checkpoint_id = c.checkpoint_id) AS tags
FROM checkpoints AS c WHERE c.thread_id = :thread_id
ORDER BY c.checkpoint_id DESC, c.checkpoint_ns LIMIT :limit""")

# Leases keep compaction runs from overlapping; time is the database's clock, so clients'
# clocks need not agree. ?1 name, ?2 holder, ?3 seconds to live. Returns a row if acquired.
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
        stmts += [PLAN_RELINK, APPLY_RELINK, *DELETE_UNKEPT, GC_CHUNKS]
    return [*stmts, *CLEAR_SCRATCH]

# --- inspection ---------------------------------------------------------------------------

# A thread's newest checkpoint row as stored (the demo shows a sealed one): ?1 thread, ?2 chars.
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
                     ("src_checkpoint_id", "task_path", "type", "value", "metadata", "channels")),
}






# Params: ?1 thread_id, then the key of the previous page's last row (all NULL on the first
# page), then the row limit and the byte budget.
TRANSFER_PAGE_D1SAVER_CHUNKS = q("""
SELECT level, id, data, available FROM (
    SELECT level, id, data, SUM(COALESCE(LENGTH(data), 0)) OVER (ORDER BY level, id ROWS UNBOUNDED PRECEDING)
               - (COALESCE(LENGTH(data), 0)) AS bytes_before,
           COUNT(*) OVER () AS available
    FROM (SELECT level, id, data FROM d1saver_chunks
          WHERE thread_id = :thread_id AND (:after_level IS NULL OR (level, id) > (:after_level, :after_id))
          ORDER BY level, id LIMIT :limit)
)
WHERE bytes_before < :budget
ORDER BY level, id""")
TRANSFER_PAGE_CHECKPOINTS = q("""
SELECT checkpoint_ns, checkpoint_id, parent_checkpoint_id, type, checkpoint, metadata, channels, run_id, ts, available FROM (
    SELECT checkpoint_ns, checkpoint_id, parent_checkpoint_id, type, checkpoint, metadata, channels, run_id, ts, SUM(COALESCE(LENGTH(parent_checkpoint_id), 0) + COALESCE(LENGTH(type), 0) + COALESCE(LENGTH(checkpoint), 0) + COALESCE(LENGTH(metadata), 0) + COALESCE(LENGTH(channels), 0) + COALESCE(LENGTH(run_id), 0) + COALESCE(LENGTH(ts), 0)) OVER (ORDER BY checkpoint_ns, checkpoint_id ROWS UNBOUNDED PRECEDING)
               - (COALESCE(LENGTH(parent_checkpoint_id), 0) + COALESCE(LENGTH(type), 0) + COALESCE(LENGTH(checkpoint), 0) + COALESCE(LENGTH(metadata), 0) + COALESCE(LENGTH(channels), 0) + COALESCE(LENGTH(run_id), 0) + COALESCE(LENGTH(ts), 0)) AS bytes_before,
           COUNT(*) OVER () AS available
    FROM (SELECT checkpoint_ns, checkpoint_id, parent_checkpoint_id, type, checkpoint, metadata, channels, run_id, ts FROM checkpoints
          WHERE thread_id = :thread_id AND (:after_checkpoint_ns IS NULL OR (checkpoint_ns, checkpoint_id) > (:after_checkpoint_ns, :after_checkpoint_id))
          ORDER BY checkpoint_ns, checkpoint_id LIMIT :limit)
)
WHERE bytes_before < :budget
ORDER BY checkpoint_ns, checkpoint_id""")
TRANSFER_PAGE_WRITES = q("""
SELECT checkpoint_ns, checkpoint_id, task_id, idx, task_path, channel, type, value, available FROM (
    SELECT checkpoint_ns, checkpoint_id, task_id, idx, task_path, channel, type, value, SUM(COALESCE(LENGTH(task_path), 0) + COALESCE(LENGTH(channel), 0) + COALESCE(LENGTH(type), 0) + COALESCE(LENGTH(value), 0)) OVER (ORDER BY checkpoint_ns, checkpoint_id, task_id, idx ROWS UNBOUNDED PRECEDING)
               - (COALESCE(LENGTH(task_path), 0) + COALESCE(LENGTH(channel), 0) + COALESCE(LENGTH(type), 0) + COALESCE(LENGTH(value), 0)) AS bytes_before,
           COUNT(*) OVER () AS available
    FROM (SELECT checkpoint_ns, checkpoint_id, task_id, idx, task_path, channel, type, value FROM writes
          WHERE thread_id = :thread_id AND (:after_checkpoint_ns IS NULL OR (checkpoint_ns, checkpoint_id, task_id, idx) > (:after_checkpoint_ns, :after_checkpoint_id, :after_task_id, :after_idx))
          ORDER BY checkpoint_ns, checkpoint_id, task_id, idx LIMIT :limit)
)
WHERE bytes_before < :budget
ORDER BY checkpoint_ns, checkpoint_id, task_id, idx""")
TRANSFER_PAGE_CHUNKS = q("""
SELECT checkpoint_ns, checkpoint_id, owner, seq, data, available FROM (
    SELECT checkpoint_ns, checkpoint_id, owner, seq, data, SUM(COALESCE(LENGTH(data), 0)) OVER (ORDER BY checkpoint_ns, checkpoint_id, owner, seq ROWS UNBOUNDED PRECEDING)
               - (COALESCE(LENGTH(data), 0)) AS bytes_before,
           COUNT(*) OVER () AS available
    FROM (SELECT checkpoint_ns, checkpoint_id, owner, seq, data FROM chunks
          WHERE thread_id = :thread_id AND (:after_checkpoint_ns IS NULL OR (checkpoint_ns, checkpoint_id, owner, seq) > (:after_checkpoint_ns, :after_checkpoint_id, :after_owner, :after_seq))
          ORDER BY checkpoint_ns, checkpoint_id, owner, seq LIMIT :limit)
)
WHERE bytes_before < :budget
ORDER BY checkpoint_ns, checkpoint_id, owner, seq""")
TRANSFER_PAGE_TAGS = q("""
SELECT checkpoint_ns, name, checkpoint_id, created_at, available FROM (
    SELECT checkpoint_ns, name, checkpoint_id, created_at, SUM(COALESCE(LENGTH(checkpoint_id), 0) + COALESCE(LENGTH(created_at), 0)) OVER (ORDER BY checkpoint_ns, name ROWS UNBOUNDED PRECEDING)
               - (COALESCE(LENGTH(checkpoint_id), 0) + COALESCE(LENGTH(created_at), 0)) AS bytes_before,
           COUNT(*) OVER () AS available
    FROM (SELECT checkpoint_ns, name, checkpoint_id, created_at FROM tags
          WHERE thread_id = :thread_id AND (:after_checkpoint_ns IS NULL OR (checkpoint_ns, name) > (:after_checkpoint_ns, :after_name))
          ORDER BY checkpoint_ns, name LIMIT :limit)
)
WHERE bytes_before < :budget
ORDER BY checkpoint_ns, name""")
TRANSFER_PAGE_DELTA_UNWRITTEN = q("""
SELECT checkpoint_ns, checkpoint_id, channels, available FROM (
    SELECT checkpoint_ns, checkpoint_id, channels, SUM(COALESCE(LENGTH(channels), 0)) OVER (ORDER BY checkpoint_ns, checkpoint_id ROWS UNBOUNDED PRECEDING)
               - (COALESCE(LENGTH(channels), 0)) AS bytes_before,
           COUNT(*) OVER () AS available
    FROM (SELECT checkpoint_ns, checkpoint_id, channels FROM delta_unwritten
          WHERE thread_id = :thread_id AND (:after_checkpoint_ns IS NULL OR (checkpoint_ns, checkpoint_id) > (:after_checkpoint_ns, :after_checkpoint_id))
          ORDER BY checkpoint_ns, checkpoint_id LIMIT :limit)
)
WHERE bytes_before < :budget
ORDER BY checkpoint_ns, checkpoint_id""")
TRANSFER_PAGE_DELTA_FROZEN = q("""
SELECT checkpoint_ns, checkpoint_id, channel, kind, depth, task_id, idx, src_checkpoint_id, task_path, type, value, metadata, channels, available FROM (
    SELECT checkpoint_ns, checkpoint_id, channel, kind, depth, task_id, idx, src_checkpoint_id, task_path, type, value, metadata, channels, SUM(COALESCE(LENGTH(src_checkpoint_id), 0) + COALESCE(LENGTH(task_path), 0) + COALESCE(LENGTH(type), 0) + COALESCE(LENGTH(value), 0) + COALESCE(LENGTH(metadata), 0) + COALESCE(LENGTH(channels), 0)) OVER (ORDER BY checkpoint_ns, checkpoint_id, channel, kind, depth, task_id, idx ROWS UNBOUNDED PRECEDING)
               - (COALESCE(LENGTH(src_checkpoint_id), 0) + COALESCE(LENGTH(task_path), 0) + COALESCE(LENGTH(type), 0) + COALESCE(LENGTH(value), 0) + COALESCE(LENGTH(metadata), 0) + COALESCE(LENGTH(channels), 0)) AS bytes_before,
           COUNT(*) OVER () AS available
    FROM (SELECT checkpoint_ns, checkpoint_id, channel, kind, depth, task_id, idx, src_checkpoint_id, task_path, type, value, metadata, channels FROM delta_frozen
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
INSERT OR REPLACE INTO d1saver_chunks (thread_id, level, id, data) VALUES (:thread_id, :level, :id, :data)""")
TRANSFER_INSERT_CHECKPOINTS = q("""
INSERT OR REPLACE INTO checkpoints (thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id, type, checkpoint, metadata, channels, run_id, ts) VALUES (:thread_id, :checkpoint_ns, :checkpoint_id, :parent_checkpoint_id, :type, :checkpoint, :metadata, :channels, :run_id, :ts)""")
TRANSFER_INSERT_WRITES = q("""
INSERT OR REPLACE INTO writes (thread_id, checkpoint_ns, checkpoint_id, task_id, idx, task_path, channel, type, value) VALUES (:thread_id, :checkpoint_ns, :checkpoint_id, :task_id, :idx, :task_path, :channel, :type, :value)""")
TRANSFER_INSERT_CHUNKS = q("""
INSERT OR REPLACE INTO chunks (thread_id, checkpoint_ns, checkpoint_id, owner, seq, data) VALUES (:thread_id, :checkpoint_ns, :checkpoint_id, :owner, :seq, :data)""")
TRANSFER_INSERT_TAGS = q("""
INSERT OR REPLACE INTO tags (thread_id, checkpoint_ns, name, checkpoint_id, created_at) VALUES (:thread_id, :checkpoint_ns, :name, :checkpoint_id, :created_at)""")
TRANSFER_INSERT_DELTA_UNWRITTEN = q("""
INSERT OR REPLACE INTO delta_unwritten (thread_id, checkpoint_ns, checkpoint_id, channels) VALUES (:thread_id, :checkpoint_ns, :checkpoint_id, :channels)""")
TRANSFER_INSERT_DELTA_FROZEN = q("""
INSERT OR REPLACE INTO delta_frozen (thread_id, checkpoint_ns, checkpoint_id, channel, kind, depth, task_id, idx, src_checkpoint_id, task_path, type, value, metadata, channels) VALUES (:thread_id, :checkpoint_ns, :checkpoint_id, :channel, :kind, :depth, :task_id, :idx, :src_checkpoint_id, :task_path, :type, :value, :metadata, :channels)""")
TRANSFER_INSERT = {
    "d1saver_chunks": TRANSFER_INSERT_D1SAVER_CHUNKS,
    "checkpoints": TRANSFER_INSERT_CHECKPOINTS,
    "writes": TRANSFER_INSERT_WRITES,
    "chunks": TRANSFER_INSERT_CHUNKS,
    "tags": TRANSFER_INSERT_TAGS,
    "delta_unwritten": TRANSFER_INSERT_DELTA_UNWRITTEN,
    "delta_frozen": TRANSFER_INSERT_DELTA_FROZEN,
}

# Staged rows become the thread in one batch: ?1 staging thread id, ?2 the thread id. An
# UPDATE fires no insert trigger, so the batch first does what the triggers of migrations 2 and
# 4 do for an insert: a checkpoint or write that replaces one of the thread's drops the old
# one's pieces, and a checkpoint its old delta_unwritten row.
RENAME_DROP_CHECKPOINT_PIECES = q("""
DELETE FROM chunks WHERE thread_id = :thread_id AND owner IN ('', ':metadata') AND EXISTS (
    SELECT 1 FROM checkpoints AS s WHERE s.thread_id = :staged
        AND s.checkpoint_ns = chunks.checkpoint_ns AND s.checkpoint_id = chunks.checkpoint_id)""")
RENAME_DROP_WRITE_PIECES = q("""
DELETE FROM chunks WHERE thread_id = :thread_id AND EXISTS (
    SELECT 1 FROM writes AS s WHERE s.thread_id = :staged AND s.checkpoint_ns = chunks.checkpoint_ns
        AND s.checkpoint_id = chunks.checkpoint_id AND chunks.owner = s.task_id || '/' || s.idx)""")
RENAME_DROP_UNWRITTEN = q("""
DELETE FROM delta_unwritten WHERE thread_id = :thread_id AND EXISTS (
    SELECT 1 FROM checkpoints AS s WHERE s.thread_id = :staged
        AND s.checkpoint_ns = delta_unwritten.checkpoint_ns
        AND s.checkpoint_id = delta_unwritten.checkpoint_id)""")
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
RENAME_THREAD = [RENAME_DROP_CHECKPOINT_PIECES, RENAME_DROP_WRITE_PIECES, RENAME_DROP_UNWRITTEN, RENAME_D1SAVER_CHUNKS, RENAME_CHECKPOINTS, RENAME_WRITES, RENAME_CHUNKS, RENAME_TAGS, RENAME_DELTA_UNWRITTEN, RENAME_DELTA_FROZEN]
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
# ?1 the thread, ?2 its scratch id, then per table in TRANSFER_TABLES order the row count read.
# The scope gets the thread only if both hold that many rows in every table.
LEAVE_SCOPE = q("""
INSERT INTO d1saver_scope (thread_id) SELECT :thread_id WHERE (SELECT COUNT(*) FROM d1saver_chunks WHERE thread_id = :thread_id) = :count_d1saver_chunks AND (SELECT COUNT(*) FROM d1saver_chunks WHERE thread_id = :scratch_id) = :count_d1saver_chunks
    AND (SELECT COUNT(*) FROM checkpoints WHERE thread_id = :thread_id) = :count_checkpoints AND (SELECT COUNT(*) FROM checkpoints WHERE thread_id = :scratch_id) = :count_checkpoints
    AND (SELECT COUNT(*) FROM writes WHERE thread_id = :thread_id) = :count_writes AND (SELECT COUNT(*) FROM writes WHERE thread_id = :scratch_id) = :count_writes
    AND (SELECT COUNT(*) FROM chunks WHERE thread_id = :thread_id) = :count_chunks AND (SELECT COUNT(*) FROM chunks WHERE thread_id = :scratch_id) = :count_chunks
    AND (SELECT COUNT(*) FROM tags WHERE thread_id = :thread_id) = :count_tags AND (SELECT COUNT(*) FROM tags WHERE thread_id = :scratch_id) = :count_tags
    AND (SELECT COUNT(*) FROM delta_unwritten WHERE thread_id = :thread_id) = :count_delta_unwritten AND (SELECT COUNT(*) FROM delta_unwritten WHERE thread_id = :scratch_id) = :count_delta_unwritten
    AND (SELECT COUNT(*) FROM delta_frozen WHERE thread_id = :thread_id) = :count_delta_frozen AND (SELECT COUNT(*) FROM delta_frozen WHERE thread_id = :scratch_id) = :count_delta_frozen""")




# ?1 the thread, ?2 its scratch id: empties the scope if the table's rows differ at all.
LEAVE_UNLESS_SAME_D1SAVER_CHUNKS = q("""
DELETE FROM d1saver_scope WHERE EXISTS (SELECT 1 FROM d1saver_chunks AS a WHERE a.thread_id = :thread_id AND NOT EXISTS (SELECT 1 FROM d1saver_chunks AS b WHERE b.thread_id = :scratch_id AND b.level IS a.level AND b.id IS a.id AND b.data IS a.data))
    OR EXISTS (SELECT 1 FROM d1saver_chunks AS a WHERE a.thread_id = :scratch_id AND NOT EXISTS (SELECT 1 FROM d1saver_chunks AS b WHERE b.thread_id = :thread_id AND b.level IS a.level AND b.id IS a.id AND b.data IS a.data))""")
LEAVE_UNLESS_SAME_CHECKPOINTS = q("""
DELETE FROM d1saver_scope WHERE EXISTS (SELECT 1 FROM checkpoints AS a WHERE a.thread_id = :thread_id AND NOT EXISTS (SELECT 1 FROM checkpoints AS b WHERE b.thread_id = :scratch_id AND b.checkpoint_ns IS a.checkpoint_ns AND b.checkpoint_id IS a.checkpoint_id AND b.parent_checkpoint_id IS a.parent_checkpoint_id AND b.type IS a.type AND b.checkpoint IS a.checkpoint AND b.metadata IS a.metadata AND b.channels IS a.channels AND b.run_id IS a.run_id AND b.ts IS a.ts))
    OR EXISTS (SELECT 1 FROM checkpoints AS a WHERE a.thread_id = :scratch_id AND NOT EXISTS (SELECT 1 FROM checkpoints AS b WHERE b.thread_id = :thread_id AND b.checkpoint_ns IS a.checkpoint_ns AND b.checkpoint_id IS a.checkpoint_id AND b.parent_checkpoint_id IS a.parent_checkpoint_id AND b.type IS a.type AND b.checkpoint IS a.checkpoint AND b.metadata IS a.metadata AND b.channels IS a.channels AND b.run_id IS a.run_id AND b.ts IS a.ts))""")
LEAVE_UNLESS_SAME_WRITES = q("""
DELETE FROM d1saver_scope WHERE EXISTS (SELECT 1 FROM writes AS a WHERE a.thread_id = :thread_id AND NOT EXISTS (SELECT 1 FROM writes AS b WHERE b.thread_id = :scratch_id AND b.checkpoint_ns IS a.checkpoint_ns AND b.checkpoint_id IS a.checkpoint_id AND b.task_id IS a.task_id AND b.idx IS a.idx AND b.task_path IS a.task_path AND b.channel IS a.channel AND b.type IS a.type AND b.value IS a.value))
    OR EXISTS (SELECT 1 FROM writes AS a WHERE a.thread_id = :scratch_id AND NOT EXISTS (SELECT 1 FROM writes AS b WHERE b.thread_id = :thread_id AND b.checkpoint_ns IS a.checkpoint_ns AND b.checkpoint_id IS a.checkpoint_id AND b.task_id IS a.task_id AND b.idx IS a.idx AND b.task_path IS a.task_path AND b.channel IS a.channel AND b.type IS a.type AND b.value IS a.value))""")
LEAVE_UNLESS_SAME_CHUNKS = q("""
DELETE FROM d1saver_scope WHERE EXISTS (SELECT 1 FROM chunks AS a WHERE a.thread_id = :thread_id AND NOT EXISTS (SELECT 1 FROM chunks AS b WHERE b.thread_id = :scratch_id AND b.checkpoint_ns IS a.checkpoint_ns AND b.checkpoint_id IS a.checkpoint_id AND b.owner IS a.owner AND b.seq IS a.seq AND b.data IS a.data))
    OR EXISTS (SELECT 1 FROM chunks AS a WHERE a.thread_id = :scratch_id AND NOT EXISTS (SELECT 1 FROM chunks AS b WHERE b.thread_id = :thread_id AND b.checkpoint_ns IS a.checkpoint_ns AND b.checkpoint_id IS a.checkpoint_id AND b.owner IS a.owner AND b.seq IS a.seq AND b.data IS a.data))""")
LEAVE_UNLESS_SAME_TAGS = q("""
DELETE FROM d1saver_scope WHERE EXISTS (SELECT 1 FROM tags AS a WHERE a.thread_id = :thread_id AND NOT EXISTS (SELECT 1 FROM tags AS b WHERE b.thread_id = :scratch_id AND b.checkpoint_ns IS a.checkpoint_ns AND b.name IS a.name AND b.checkpoint_id IS a.checkpoint_id AND b.created_at IS a.created_at))
    OR EXISTS (SELECT 1 FROM tags AS a WHERE a.thread_id = :scratch_id AND NOT EXISTS (SELECT 1 FROM tags AS b WHERE b.thread_id = :thread_id AND b.checkpoint_ns IS a.checkpoint_ns AND b.name IS a.name AND b.checkpoint_id IS a.checkpoint_id AND b.created_at IS a.created_at))""")
LEAVE_UNLESS_SAME_DELTA_UNWRITTEN = q("""
DELETE FROM d1saver_scope WHERE EXISTS (SELECT 1 FROM delta_unwritten AS a WHERE a.thread_id = :thread_id AND NOT EXISTS (SELECT 1 FROM delta_unwritten AS b WHERE b.thread_id = :scratch_id AND b.checkpoint_ns IS a.checkpoint_ns AND b.checkpoint_id IS a.checkpoint_id AND b.channels IS a.channels))
    OR EXISTS (SELECT 1 FROM delta_unwritten AS a WHERE a.thread_id = :scratch_id AND NOT EXISTS (SELECT 1 FROM delta_unwritten AS b WHERE b.thread_id = :thread_id AND b.checkpoint_ns IS a.checkpoint_ns AND b.checkpoint_id IS a.checkpoint_id AND b.channels IS a.channels))""")
LEAVE_UNLESS_SAME_DELTA_FROZEN = q("""
DELETE FROM d1saver_scope WHERE EXISTS (SELECT 1 FROM delta_frozen AS a WHERE a.thread_id = :thread_id AND NOT EXISTS (SELECT 1 FROM delta_frozen AS b WHERE b.thread_id = :scratch_id AND b.checkpoint_ns IS a.checkpoint_ns AND b.checkpoint_id IS a.checkpoint_id AND b.channel IS a.channel AND b.kind IS a.kind AND b.depth IS a.depth AND b.task_id IS a.task_id AND b.idx IS a.idx AND b.src_checkpoint_id IS a.src_checkpoint_id AND b.task_path IS a.task_path AND b.type IS a.type AND b.value IS a.value AND b.metadata IS a.metadata AND b.channels IS a.channels))
    OR EXISTS (SELECT 1 FROM delta_frozen AS a WHERE a.thread_id = :scratch_id AND NOT EXISTS (SELECT 1 FROM delta_frozen AS b WHERE b.thread_id = :thread_id AND b.checkpoint_ns IS a.checkpoint_ns AND b.checkpoint_id IS a.checkpoint_id AND b.channel IS a.channel AND b.kind IS a.kind AND b.depth IS a.depth AND b.task_id IS a.task_id AND b.idx IS a.idx AND b.src_checkpoint_id IS a.src_checkpoint_id AND b.task_path IS a.task_path AND b.type IS a.type AND b.value IS a.value AND b.metadata IS a.metadata AND b.channels IS a.channels))""")
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
# ?1 a thread id: its rows in every transfer table (the scratch copy, before and after).
DROP_THREAD_DELTA_FROZEN = q("DELETE FROM delta_frozen WHERE thread_id = :thread_id")
DROP_THREAD_DELTA_UNWRITTEN = q("DELETE FROM delta_unwritten WHERE thread_id = :thread_id")
DROP_THREAD_TAGS = q("DELETE FROM tags WHERE thread_id = :thread_id")
DROP_THREAD_CHUNKS = q("DELETE FROM chunks WHERE thread_id = :thread_id")
DROP_THREAD_WRITES = q("DELETE FROM writes WHERE thread_id = :thread_id")
DROP_THREAD_CHECKPOINTS = q("DELETE FROM checkpoints WHERE thread_id = :thread_id")
DROP_THREAD_D1SAVER_CHUNKS = q("DELETE FROM d1saver_chunks WHERE thread_id = :thread_id")
DROP_THREAD = [DROP_THREAD_DELTA_FROZEN, DROP_THREAD_DELTA_UNWRITTEN, DROP_THREAD_TAGS, DROP_THREAD_CHUNKS, DROP_THREAD_WRITES, DROP_THREAD_CHECKPOINTS, DROP_THREAD_D1SAVER_CHUNKS]

# Thread ids in [?1, ?2) in any table (staged rows left by a killed copy, by their prefix).
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

# --- sealed rows: copies and rekeying (d1saver/ops/reseal.py) --------------------------------
#
# With encryption keys a value is bound to its row, so copy_thread and rekey rewrite values
# rather than rows: they read rows raw, in keyset pages in primary key order, re-seal each
# value in Python (never deserialized) and write it back.

# A stored value's text, or piece 0's when the row holds a chunk marker: where the key id is.
# Not under the newest key: ?{n} is the JSON array of the 7-character heads its texts have
# ("e:" and the base85 group of key id and codec: d1saver/storage/crypto.py).

# The chunks of a raw page's rows ('k' rows), of the owners named.

# Checkpoint rows after the cursor (?2, ?3, ?4: thread_id, checkpoint_ns, checkpoint_id;
# '' to start), ?5 rows, in one thread (?1) or all (?1 NULL); only those with a value not
# sealed under the newest key when ?6 (heads) is given (their metadata is sealed with it).
# With their chunks.
RAW_CHECKPOINTS_THREAD = q("""
WITH page AS (
    SELECT thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id, type, checkpoint,
           metadata, channels, run_id, ts
    FROM checkpoints AS c
    WHERE thread_id = :thread_id AND (thread_id, checkpoint_ns, checkpoint_id) > (:after_thread_id, :after_checkpoint_ns, :after_checkpoint_id)
      AND (:heads IS NULL OR substr(COALESCE(CASE WHEN substr(c.checkpoint, 1, 2) = 'c:' THEN (
    SELECT k.data FROM chunks AS k WHERE k.thread_id = c.thread_id
        AND k.checkpoint_ns = c.checkpoint_ns AND k.checkpoint_id = c.checkpoint_id
        AND k.owner = '' AND k.seq = 0) ELSE c.checkpoint END, ''), 1, 7) NOT IN (SELECT value FROM json_each(:heads)))
    ORDER BY thread_id, checkpoint_ns, checkpoint_id
    LIMIT :limit
)
SELECT 'c' AS kind, thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id AS f1,
       type AS f2, checkpoint AS f3, metadata AS f4, channels AS f5, run_id AS f6, ts AS f7
FROM page
UNION ALL
SELECT 'k', k.thread_id, k.checkpoint_ns, k.checkpoint_id, k.owner, k.seq, k.data, NULL, NULL,
       NULL, NULL
FROM page AS p JOIN chunks AS k ON k.thread_id = p.thread_id
    AND k.checkpoint_ns = p.checkpoint_ns AND k.checkpoint_id = p.checkpoint_id
    AND k.owner IN ('', ':metadata')""")
RAW_CHECKPOINTS_ALL = q("""
WITH page AS (
    SELECT thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id, type, checkpoint,
           metadata, channels, run_id, ts
    FROM checkpoints AS c
    WHERE (thread_id, checkpoint_ns, checkpoint_id) > (:after_thread_id, :after_checkpoint_ns, :after_checkpoint_id)
      AND (:heads IS NULL OR substr(COALESCE(CASE WHEN substr(c.checkpoint, 1, 2) = 'c:' THEN (
    SELECT k.data FROM chunks AS k WHERE k.thread_id = c.thread_id
        AND k.checkpoint_ns = c.checkpoint_ns AND k.checkpoint_id = c.checkpoint_id
        AND k.owner = '' AND k.seq = 0) ELSE c.checkpoint END, ''), 1, 7) NOT IN (SELECT value FROM json_each(:heads)))
    ORDER BY thread_id, checkpoint_ns, checkpoint_id
    LIMIT :limit
)
SELECT 'c' AS kind, thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id AS f1,
       type AS f2, checkpoint AS f3, metadata AS f4, channels AS f5, run_id AS f6, ts AS f7
FROM page
UNION ALL
SELECT 'k', k.thread_id, k.checkpoint_ns, k.checkpoint_id, k.owner, k.seq, k.data, NULL, NULL,
       NULL, NULL
FROM page AS p JOIN chunks AS k ON k.thread_id = p.thread_id
    AND k.checkpoint_ns = p.checkpoint_ns AND k.checkpoint_id = p.checkpoint_id
    AND k.owner IN ('', ':metadata')""")

# Write rows after the cursor (?2..?6: thread_id, checkpoint_ns, checkpoint_id, task_id, idx),
# ?7 rows, in one thread (?1) or all; with ?8 (heads) only those not under the newest key.
RAW_WRITES_THREAD = q("""
WITH page AS (
    SELECT thread_id, checkpoint_ns, checkpoint_id, task_id, task_path, idx, channel, type, value
    FROM writes AS w
    WHERE thread_id = :thread_id
      AND (thread_id, checkpoint_ns, checkpoint_id, task_id, idx) > (:after_thread_id, :after_checkpoint_ns, :after_checkpoint_id, :after_task_id, :after_idx)
      AND (:heads IS NULL OR (w.value IS NOT NULL AND substr(COALESCE(CASE WHEN substr(w.value, 1, 2) = 'c:' THEN (
    SELECT k.data FROM chunks AS k WHERE k.thread_id = w.thread_id
        AND k.checkpoint_ns = w.checkpoint_ns AND k.checkpoint_id = w.checkpoint_id
        AND k.owner = w.task_id || '/' || w.idx AND k.seq = 0) ELSE w.value END, ''), 1, 7) NOT IN (SELECT value FROM json_each(:heads))))
    ORDER BY thread_id, checkpoint_ns, checkpoint_id, task_id, idx
    LIMIT :limit
)
SELECT 'w' AS kind, thread_id, checkpoint_ns, checkpoint_id, task_id AS f1, task_path AS f2,
       idx AS f3, channel AS f4, type AS f5, value AS f6, NULL AS f7
FROM page
UNION ALL
SELECT 'k', k.thread_id, k.checkpoint_ns, k.checkpoint_id, k.owner, k.seq, k.data, NULL, NULL,
       NULL, NULL
FROM page AS p JOIN chunks AS k ON k.thread_id = p.thread_id
    AND k.checkpoint_ns = p.checkpoint_ns AND k.checkpoint_id = p.checkpoint_id
    AND k.owner = p.task_id || '/' || p.idx""")
RAW_WRITES_ALL = q("""
WITH page AS (
    SELECT thread_id, checkpoint_ns, checkpoint_id, task_id, task_path, idx, channel, type, value
    FROM writes AS w
    WHERE (thread_id, checkpoint_ns, checkpoint_id, task_id, idx) > (:after_thread_id, :after_checkpoint_ns, :after_checkpoint_id, :after_task_id, :after_idx)
      AND (:heads IS NULL OR (w.value IS NOT NULL AND substr(COALESCE(CASE WHEN substr(w.value, 1, 2) = 'c:' THEN (
    SELECT k.data FROM chunks AS k WHERE k.thread_id = w.thread_id
        AND k.checkpoint_ns = w.checkpoint_ns AND k.checkpoint_id = w.checkpoint_id
        AND k.owner = w.task_id || '/' || w.idx AND k.seq = 0) ELSE w.value END, ''), 1, 7) NOT IN (SELECT value FROM json_each(:heads))))
    ORDER BY thread_id, checkpoint_ns, checkpoint_id, task_id, idx
    LIMIT :limit
)
SELECT 'w' AS kind, thread_id, checkpoint_ns, checkpoint_id, task_id AS f1, task_path AS f2,
       idx AS f3, channel AS f4, type AS f5, value AS f6, NULL AS f7
FROM page
UNION ALL
SELECT 'k', k.thread_id, k.checkpoint_ns, k.checkpoint_id, k.owner, k.seq, k.data, NULL, NULL,
       NULL, NULL
FROM page AS p JOIN chunks AS k ON k.thread_id = p.thread_id
    AND k.checkpoint_ns = p.checkpoint_ns AND k.checkpoint_id = p.checkpoint_id
    AND k.owner = p.task_id || '/' || p.idx""")

# Frozen DeltaChannel rows (delta_frozen) after the cursor (?2..?9: thread_id, checkpoint_ns,
# checkpoint_id, channel, kind, depth, task_id, idx; '' and -2^63 to start), ?10 rows, of one
# thread (?1) or all; with ?11 (heads) only 's' and 'w' rows not under the newest key. With
# their holders' frozen pieces ('k': owner in `channel`, seq in `depth`, data in `value`). For
# copy_thread and rekey under keys, which re-seal them.
RAW_FROZEN_THREAD = q("""
WITH page AS (
    SELECT thread_id, checkpoint_ns, checkpoint_id, channel, kind, depth, task_id, idx, src_checkpoint_id, task_path, type, value, metadata, channels FROM delta_frozen AS f
    WHERE thread_id = :thread_id
      AND (thread_id, checkpoint_ns, checkpoint_id, channel, kind, depth, task_id, idx)
          > (:after_thread_id, :after_checkpoint_ns, :after_checkpoint_id, :after_channel, :after_kind, :after_depth, :after_task_id, :after_idx)
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
       task_id, idx, src_checkpoint_id, task_path, type, value, metadata, channels
FROM page
UNION ALL
SELECT 'k', k.thread_id, k.checkpoint_ns, k.checkpoint_id, k.owner, NULL, k.seq, NULL, NULL,
       NULL, NULL, NULL, k.data, NULL, NULL
FROM (SELECT DISTINCT thread_id, checkpoint_ns, checkpoint_id FROM page) AS h
JOIN chunks AS k ON k.thread_id = h.thread_id AND k.checkpoint_ns = h.checkpoint_ns
    AND k.checkpoint_id = h.checkpoint_id AND substr(k.owner, 1, 2) = 'f/'""")
RAW_FROZEN_ALL = q("""
WITH page AS (
    SELECT thread_id, checkpoint_ns, checkpoint_id, channel, kind, depth, task_id, idx, src_checkpoint_id, task_path, type, value, metadata, channels FROM delta_frozen AS f
    WHERE (thread_id, checkpoint_ns, checkpoint_id, channel, kind, depth, task_id, idx)
          > (:after_thread_id, :after_checkpoint_ns, :after_checkpoint_id, :after_channel, :after_kind, :after_depth, :after_task_id, :after_idx)
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
       task_id, idx, src_checkpoint_id, task_path, type, value, metadata, channels
FROM page
UNION ALL
SELECT 'k', k.thread_id, k.checkpoint_ns, k.checkpoint_id, k.owner, NULL, k.seq, NULL, NULL,
       NULL, NULL, NULL, k.data, NULL, NULL
FROM (SELECT DISTINCT thread_id, checkpoint_ns, checkpoint_id FROM page) AS h
JOIN chunks AS k ON k.thread_id = h.thread_id AND k.checkpoint_ns = h.checkpoint_ns
    AND k.checkpoint_id = h.checkpoint_id AND substr(k.owner, 1, 2) = 'f/'""")
RAW_FROZEN_COLUMNS = ("kind", "thread_id", "checkpoint_ns", "checkpoint_id", "channel",
                      "fkind", "depth", "task_id", "idx", "src_checkpoint_id", "task_path",
                      "type", "value", "metadata", "channels")
INSERT_FROZEN = q("""
INSERT OR REPLACE INTO delta_frozen (thread_id, checkpoint_ns, checkpoint_id, channel, kind, depth, task_id, idx, src_checkpoint_id, task_path, type, value, metadata, channels) VALUES (:thread_id,:checkpoint_ns,:checkpoint_id,:channel,:kind,:depth,:task_id,:idx,:src_checkpoint_id,:task_path,:type,:value,:metadata,:channels)""")

# Columns of the raw pages, per row kind:
#   'c' checkpoint: f1 parent_checkpoint_id, f2 type, f3 checkpoint, f4 metadata, f5 channels,
#                   f6 run_id, f7 ts
#   'w' write:      f1 task_id, f2 task_path, f3 idx, f4 channel, f5 type, f6 value
#   'k' chunk:      f1 owner, f2 seq, f3 data
RAW_COLUMNS = ("kind", "thread_id", "checkpoint_ns", "checkpoint_id",
               "f1", "f2", "f3", "f4", "f5", "f6", "f7")

# Rekeying writes a value back only if its row still holds what was read: a guard per row,
# sent before its update in the same batch, trips d1saver_guard's CHECK ("head_moved": the row
# moved on) and rolls the batch back otherwise; the job then reads the page again. A text is
# compared by a fingerprint (length, first and last 40 characters: sealed texts start with a
# random nonce and end with a tag), its chunks by count, total length and piece 0's fingerprint.
# ?1 ?2 ?3 the checkpoint, ?4 ?5 fingerprints of checkpoint and metadata, ?6 ?7 of their chunks.
REKEY_GUARD_CHECKPOINT = q("""
INSERT INTO d1saver_guard (head_moved)
SELECT 1 WHERE NOT EXISTS (
    SELECT 1 FROM checkpoints WHERE thread_id = :thread_id AND checkpoint_ns = :checkpoint_ns AND checkpoint_id = :checkpoint_id
        AND length(checkpoint) || ':' || substr(checkpoint, 1, 40) || substr(checkpoint, -40) IS :checkpoint_fp AND length(metadata) || ':' || substr(metadata, 1, 40) || substr(metadata, -40) IS :metadata_fp)
    OR (SELECT COUNT(*) || ':' || SUM(length(data)) || ':'
        || MAX(CASE WHEN seq = 0 THEN substr(data, 1, 40) || substr(data, -40) END)
    FROM chunks WHERE thread_id = :thread_id AND checkpoint_ns = :checkpoint_ns AND checkpoint_id = :checkpoint_id
        AND owner = '') IS NOT :checkpoint_pieces_fp
    OR (SELECT COUNT(*) || ':' || SUM(length(data)) || ':'
        || MAX(CASE WHEN seq = 0 THEN substr(data, 1, 40) || substr(data, -40) END)
    FROM chunks WHERE thread_id = :thread_id AND checkpoint_ns = :checkpoint_ns AND checkpoint_id = :checkpoint_id
        AND owner = ':metadata') IS NOT :metadata_pieces_fp""")
# ?1 ?2 ?3 the checkpoint, ?4 task_id, ?5 idx, ?6 fingerprint of the value, ?7 of its chunks.
REKEY_GUARD_WRITE = q("""
INSERT INTO d1saver_guard (head_moved)
SELECT 1 WHERE NOT EXISTS (
    SELECT 1 FROM writes WHERE thread_id = :thread_id AND checkpoint_ns = :checkpoint_ns AND checkpoint_id = :checkpoint_id
        AND task_id = :task_id AND idx = :idx AND length(value) || ':' || substr(value, 1, 40) || substr(value, -40) IS :value_fp)
    OR (SELECT COUNT(*) || ':' || SUM(length(data)) || ':'
        || MAX(CASE WHEN seq = 0 THEN substr(data, 1, 40) || substr(data, -40) END)
    FROM chunks WHERE thread_id = :thread_id AND checkpoint_ns = :checkpoint_ns AND checkpoint_id = :checkpoint_id
        AND owner = :task_id || '/' || :idx) IS NOT :pieces_fp""")
# ?1..?8 the frozen row's key (thread_id .. idx), ?9 fingerprint of its value, ?10 of its
# pieces (held by the holder, ?11 their owner).
REKEY_GUARD_FROZEN = q("""
INSERT INTO d1saver_guard (head_moved)
SELECT 1 WHERE NOT EXISTS (
    SELECT 1 FROM delta_frozen WHERE thread_id = :thread_id AND checkpoint_ns = :checkpoint_ns
        AND checkpoint_id = :checkpoint_id AND channel = :channel AND kind = :kind AND depth = :depth AND task_id = :task_id
        AND idx = :idx AND length(value) || ':' || substr(value, 1, 40) || substr(value, -40) IS :value_fp)
    OR (SELECT COUNT(*) || ':' || SUM(length(data)) || ':'
        || MAX(CASE WHEN seq = 0 THEN substr(data, 1, 40) || substr(data, -40) END)
    FROM chunks WHERE thread_id = :thread_id AND checkpoint_ns = :checkpoint_ns AND checkpoint_id = :checkpoint_id
        AND owner = :owner) IS NOT :pieces_fp""")
REKEY_FROZEN = q("""
UPDATE delta_frozen SET value = :value, metadata = :metadata
WHERE thread_id = :thread_id AND checkpoint_ns = :checkpoint_ns AND checkpoint_id = :checkpoint_id AND channel = :channel
  AND kind = :kind AND depth = :depth AND task_id = :task_id AND idx = :idx""")
REKEY_CHECKPOINT = q("""
UPDATE checkpoints SET checkpoint = :checkpoint, metadata = :metadata
WHERE thread_id = :thread_id AND checkpoint_ns = :checkpoint_ns AND checkpoint_id = :checkpoint_id""")
# A plaintext pack (migration 7) sealed as one row per write: the pack goes, its writes come.
REKEY_DROP_WRITE = q("""
DELETE FROM writes
WHERE thread_id = :thread_id AND checkpoint_ns = :checkpoint_ns AND checkpoint_id = :checkpoint_id AND task_id = :task_id AND idx = :idx""")
REKEY_ADD_WRITE = q("""
INSERT OR IGNORE INTO writes (thread_id,checkpoint_ns,checkpoint_id,task_id,task_path,idx,channel,type,value) VALUES (:thread_id, :checkpoint_ns, :checkpoint_id, :task_id, :task_path, :idx, :channel, :type, :value)""")
REKEY_WRITE = q("""
UPDATE writes SET value = :value
WHERE thread_id = :thread_id AND checkpoint_ns = :checkpoint_ns AND checkpoint_id = :checkpoint_id AND task_id = :task_id AND idx = :idx""")

# Stored values per table and key: rows (tbl, head, row_count), head being the first 7
# characters of sealed texts (d1saver/storage/crypto.py: key_id_of_text) and NULL for plaintext.
KEY_CENSUS = q("""
SELECT 'checkpoints' AS tbl, CASE WHEN substr(v, 1, 2) = 'e:' THEN substr(v, 1, 7) END AS head, COUNT(*) AS row_count
FROM (SELECT CASE WHEN substr(c.checkpoint, 1, 2) = 'c:' THEN (
    SELECT k.data FROM chunks AS k WHERE k.thread_id = c.thread_id
        AND k.checkpoint_ns = c.checkpoint_ns AND k.checkpoint_id = c.checkpoint_id
        AND k.owner = '' AND k.seq = 0) ELSE c.checkpoint END AS v FROM checkpoints AS c) GROUP BY CASE WHEN substr(v, 1, 2) = 'e:' THEN substr(v, 1, 7) END
UNION ALL
SELECT 'writes', CASE WHEN substr(v, 1, 2) = 'e:' THEN substr(v, 1, 7) END, COUNT(*)
FROM (SELECT CASE WHEN substr(w.value, 1, 2) = 'c:' THEN (
    SELECT k.data FROM chunks AS k WHERE k.thread_id = w.thread_id
        AND k.checkpoint_ns = w.checkpoint_ns AND k.checkpoint_id = w.checkpoint_id
        AND k.owner = w.task_id || '/' || w.idx AND k.seq = 0) ELSE w.value END AS v FROM writes AS w WHERE w.value IS NOT NULL)
GROUP BY CASE WHEN substr(v, 1, 2) = 'e:' THEN substr(v, 1, 7) END
UNION ALL
SELECT 'delta_frozen', CASE WHEN substr(v, 1, 2) = 'e:' THEN substr(v, 1, 7) END, COUNT(*)
FROM (SELECT CASE WHEN substr(f.value, 1, 2) = 'c:' THEN (
    SELECT k.data FROM chunks AS k WHERE k.thread_id = f.thread_id
        AND k.checkpoint_ns = f.checkpoint_ns AND k.checkpoint_id = f.checkpoint_id
        AND k.owner = 'f/' || f.src_checkpoint_id || '/'
                      || CASE f.kind WHEN 'w' THEN f.task_id || '/' || f.idx ELSE '' END
        AND k.seq = 0) ELSE f.value END AS v FROM delta_frozen AS f
      WHERE f.kind <> 'c' AND f.value IS NOT NULL)
GROUP BY CASE WHEN substr(v, 1, 2) = 'e:' THEN substr(v, 1, 7) END""")
KEY_CENSUS_COLUMNS = ("tbl", "head", "row_count")

# copy_thread under keys: the target's tags and delta_unwritten rows, as COPY_THREAD copies
# them (?1 source, ?2 target); after the checkpoints, whose insert trigger clears the latter.

# Every statement of this module, named by its identifier.
STATEMENTS = [*name_queries(globals()),
              *(s for version in range(1, SCHEMA_VERSION + 1) for s in migration(version))]
