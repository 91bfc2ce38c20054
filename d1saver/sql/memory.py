"""The SQL of long-term memory (D1Store) and of the node cache (D1Cache), as named constants.

A namespace is stored as the JSON array of its labels (`ns`, compact, ASCII: d1saver/memory/
namespaces.py), so labels are data: a prefix is matched as a range of that text, never with
LIKE or GLOB. Times are unix seconds as REAL (sub-second), from the writer's clock. Lists
travel as one JSON parameter read by json_each, so no statement nears D1's 100 parameters.
"""

from __future__ import annotations

from d1saver.sql.query import Query, name_queries, q

# --- schema (migration step 9; schema.sql holds the same) --------------------------------------

MEMORY_DDL = [
    """CREATE TABLE IF NOT EXISTS store_items (
    ns TEXT NOT NULL,
    key TEXT NOT NULL,
    value TEXT NOT NULL,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    expires_at REAL,
    ttl_minutes REAL,
    PRIMARY KEY (ns, key)
)""",
    "CREATE INDEX IF NOT EXISTS store_items_expires ON store_items (expires_at) "
    "WHERE expires_at IS NOT NULL",
    """CREATE TABLE IF NOT EXISTS store_vectors (
    ns TEXT NOT NULL,
    key TEXT NOT NULL,
    field TEXT NOT NULL,
    vector TEXT NOT NULL,
    PRIMARY KEY (ns, key, field)
)""",
    """CREATE TABLE IF NOT EXISTS cache_entries (
    ns TEXT NOT NULL,
    key TEXT NOT NULL,
    value TEXT NOT NULL,
    expires_at REAL,
    PRIMARY KEY (ns, key)
)""",
    "CREATE INDEX IF NOT EXISTS cache_entries_expires ON cache_entries (expires_at) "
    "WHERE expires_at IS NOT NULL",
]

# --- scope: which namespaces a statement reads --------------------------------------------------
#
# :exact the whole namespace's text, :low and :high the range of its descendants (ns >= :low AND
# ns < :high; d1saver/memory/namespaces.py builds them); :exact NULL: every namespace.
_SCOPE = "(:exact IS NULL OR {t}ns = :exact OR ({t}ns >= :low AND {t}ns < :high))"
_LIVE = "({t}expires_at IS NULL OR {t}expires_at > :now)"

# --- writes ---------------------------------------------------------------------------------

# :rows JSON [[ns, key, value, expires_at, ttl_minutes], ...]. An item put again keeps its
# created_at, unless it had expired (then it is a new item).
PUT_ITEMS = q("""INSERT INTO store_items (ns, key, value, created_at, updated_at, expires_at,
    ttl_minutes)
SELECT j.value->>0, j.value->>1, j.value->>2, :now, :now, j.value->>3, j.value->>4
FROM json_each(:rows) AS j WHERE 1
ON CONFLICT (ns, key) DO UPDATE SET value = excluded.value,
    created_at = CASE WHEN store_items.expires_at IS NOT NULL
        AND store_items.expires_at <= excluded.updated_at
        THEN excluded.created_at ELSE store_items.created_at END,
    updated_at = excluded.updated_at, expires_at = excluded.expires_at,
    ttl_minutes = excluded.ttl_minutes""")

# :keys JSON [[ns, key], ...]: the items (and their vectors) deleted or put again.
DELETE_ITEMS = q("""DELETE FROM store_items WHERE (ns, key) IN (
    SELECT value->>0, value->>1 FROM json_each(:keys))""")
DELETE_VECTORS = q("""DELETE FROM store_vectors WHERE (ns, key) IN (
    SELECT value->>0, value->>1 FROM json_each(:keys))""")
# :rows JSON [[ns, key, field, vector], ...]
PUT_VECTORS = q("""INSERT OR REPLACE INTO store_vectors (ns, key, field, vector)
SELECT value->>0, value->>1, value->>2, value->>3 FROM json_each(:rows)""")

# --- reads ----------------------------------------------------------------------------------

ITEM_COLUMNS = ("ns", "key", "value", "created_at", "updated_at", "ttl_minutes")

# :keys JSON [[ns, key], ...]: the live items among them.
GET_ITEMS = q("""SELECT s.ns, s.key, s.value, s.created_at, s.updated_at, s.ttl_minutes
FROM json_each(:keys) AS j JOIN store_items AS s ON s.ns = j.value->>0 AND s.key = j.value->>1
WHERE s.expires_at IS NULL OR s.expires_at > :now""")
# Before GET_ITEMS in the same batch: the live items among them that have a TTL start it again.
REFRESH_ITEMS = q("""UPDATE store_items SET expires_at = :now + ttl_minutes * 60
WHERE (ns, key) IN (SELECT value->>0, value->>1 FROM json_each(:keys))
    AND ttl_minutes IS NOT NULL AND expires_at > :now""")

# A value filter SQL can decide, :filter: JSON [[path, kind, operand], ...], each an equality
# that must hold (d1saver/memory/values.py compiles it); NULL: no filter. Only a JSON value
# ("{...}") is tested (json_extract fails on other text); a compressed or sealed one ({opaque}:
# 0 leaves it out, for SEARCH_OPAQUE to return; 1 keeps it) is left to Python. CASE fixes the
# order of evaluation, which AND does not.
_FILTER = """(:filter IS NULL OR CASE WHEN substr({t}value, 1, 1) = '{{' THEN NOT EXISTS (
    SELECT 1 FROM json_each(:filter) AS f WHERE NOT (CASE f.value->>1
        WHEN 'null' THEN json_extract({t}value, f.value->>0) IS NULL
        WHEN 'text' THEN json_type({t}value, f.value->>0) = 'text'
            AND json_extract({t}value, f.value->>0) = f.value->>2
        WHEN 'number' THEN json_type({t}value, f.value->>0) IN ('integer', 'real', 'true', 'false')
            AND json_extract({t}value, f.value->>0) = f.value->>2
        ELSE 0 END)) ELSE {opaque} END)"""

# The scope, :limit (-1: all), :offset, :filter. Newest first, as SqliteStore orders them.
SEARCH_ITEMS = q(f"""SELECT ns, key, value, created_at, updated_at, ttl_minutes FROM store_items
WHERE {_SCOPE.format(t='')} AND {_LIVE.format(t='')}
    AND {_FILTER.format(t='store_items.', opaque=0)}
ORDER BY updated_at DESC, ns, key LIMIT CAST(:limit AS INTEGER) OFFSET CAST(:offset AS INTEGER)""")
# With a filter in SQL: the items in scope whose value SQL cannot read (compressed or sealed),
# for Python to filter.
SEARCH_OPAQUE = q(f"""SELECT ns, key, value, created_at, updated_at, ttl_minutes FROM store_items
WHERE {_SCOPE.format(t='')} AND {_LIVE.format(t='')} AND substr(value, 1, 1) <> '{{'""")
# An unfiltered page's TTLs refreshed, before it is read (same batch, same page).
REFRESH_SEARCH = q(f"""UPDATE store_items SET expires_at = :now + ttl_minutes * 60
WHERE rowid IN (SELECT rowid FROM store_items
    WHERE {_SCOPE.format(t='')} AND {_LIVE.format(t='')}
    ORDER BY updated_at DESC, ns, key LIMIT CAST(:limit AS INTEGER) OFFSET CAST(:offset AS INTEGER))
    AND ttl_minutes IS NOT NULL""")

VECTOR_COLUMNS = ("ns", "key", "field", "vector")
# The vectors of every live item in scope that may pass :filter.
SEARCH_VECTORS = q(f"""SELECT v.ns, v.key, v.field, v.vector
FROM store_items AS s JOIN store_vectors AS v ON v.ns = s.ns AND v.key = s.key
WHERE {_SCOPE.format(t='s.')} AND {_LIVE.format(t='s.')} AND {_FILTER.format(t='s.', opaque=1)}""")

NAMESPACE_COLUMNS = ("ns",)
# The distinct namespaces of live items in scope.
LIST_NAMESPACES = q(f"""SELECT DISTINCT ns FROM store_items
WHERE {_SCOPE.format(t='')} AND {_LIVE.format(t='')} ORDER BY ns""")

# Delete every item in scope (a namespace and its descendants; :exact, :low, :high).
DELETE_SCOPE = [
    q(f"DELETE FROM store_vectors WHERE {_SCOPE.format(t='')}", "DELETE_SCOPE[0]"),
    q(f"DELETE FROM store_items WHERE {_SCOPE.format(t='')}", "DELETE_SCOPE[1]"),
]

# --- TTL sweep: what expired at :now -----------------------------------------------------------

# D1Store.sweep_ttl and D1Cache.sweep_ttl: by the store's own clock (:now), as SqliteStore's
# sweeper goes by its process's.
SWEEP_STORE = [
    q("""DELETE FROM store_vectors WHERE (ns, key) IN (SELECT ns, key FROM store_items
    WHERE expires_at IS NOT NULL AND expires_at <= :now)""", "SWEEP_STORE[0]"),
    q("DELETE FROM store_items WHERE expires_at IS NOT NULL AND expires_at <= :now",
      "SWEEP_STORE[1]"),
]
SWEEP_CACHE = q("DELETE FROM cache_entries WHERE expires_at IS NOT NULL AND expires_at <= :now")

# Compaction's sweep (`d1saver compact` and the Worker's cron, one policy): by the database's
# own clock, one clock for every writer, less SWEEP_MARGIN seconds, so that a writer whose
# clock runs behind the database's by up to that much never sees an item it still holds live
# swept. Expiries are unix seconds from the writers' clocks (julianday's epoch is 2440587.5).
SWEEP_MARGIN = 60
_EXPIRED = ("expires_at IS NOT NULL AND expires_at <= "
            f"(julianday('now') - 2440587.5) * 86400.0 - {SWEEP_MARGIN}")
EXPIRED_COLUMNS = ("items", "cache")
COUNT_EXPIRED = q(f"""SELECT
    (SELECT COUNT(*) FROM store_items WHERE {_EXPIRED}) AS items,
    (SELECT COUNT(*) FROM cache_entries WHERE {_EXPIRED}) AS cache""")
# Store items (their vectors first), then cache entries: the last two statements' changes are
# what was swept.
SWEEP_EXPIRED = [
    q(f"""DELETE FROM store_vectors WHERE (ns, key) IN (SELECT ns, key FROM store_items
    WHERE {_EXPIRED})""", "SWEEP_EXPIRED[0]"),
    q(f"DELETE FROM store_items WHERE {_EXPIRED}", "SWEEP_EXPIRED[1]"),
    q(f"DELETE FROM cache_entries WHERE {_EXPIRED}", "SWEEP_EXPIRED[2]"),
]

# --- cache ------------------------------------------------------------------------------------

CACHE_COLUMNS = ("ns", "key", "value")
# :keys JSON [[ns, key], ...]: the live entries among them.
CACHE_GET = q("""SELECT c.ns, c.key, c.value
FROM json_each(:keys) AS j JOIN cache_entries AS c ON c.ns = j.value->>0 AND c.key = j.value->>1
WHERE c.expires_at IS NULL OR c.expires_at > :now""")
# :rows JSON [[ns, key, value, expires_at], ...]
CACHE_SET = q("""INSERT OR REPLACE INTO cache_entries (ns, key, value, expires_at)
SELECT value->>0, value->>1, value->>2, value->>3 FROM json_each(:rows)""")
# :keys JSON [[ns, key], ...]: these entries (a set's older copy at a previous home).
CACHE_DELETE = q("""DELETE FROM cache_entries WHERE (ns, key) IN (
    SELECT value->>0, value->>1 FROM json_each(:keys))""")
# :namespaces JSON [ns, ...], or NULL: every entry.
CACHE_CLEAR = q("""DELETE FROM cache_entries
WHERE :namespaces IS NULL OR ns IN (SELECT value FROM json_each(:namespaces))""")

# --- moves between databases (`d1saver rebalance`; d1saver/memory/moves.py) --------------------
#
# A move registers at its target (d1saver_moves, under d1saver/fleet/routing.MEMORY_MOVE_PREFIX
# and its move id) before it reads the source; every batch that publishes checks the
# registration (catalogue.CHECK_MOVE: "move_voided" without it). A delete of memory at a
# database while migrating voids every memory move into it (:low, :high: the prefix's range),
# so a copy read before the delete reached the old home never lands after it.
VOID_MEMORY_MOVES = q("DELETE FROM d1saver_moves WHERE thread_id >= :low AND thread_id < :high")

# Keyset pages of the keys a database holds, after (:after_ns, :after_key), :limit at most.
# Keyset pages of the keys a database holds, after (:after_ns, :after_key), :limit at most,
# with the bytes a move of each carries (value, and an item's vectors).
MEMORY_KEY_COLUMNS = ("ns", "key", "bytes")
ITEM_KEYS_PAGE = q("""SELECT s.ns, s.key, length(s.value) + COALESCE((SELECT SUM(length(v.vector))
    FROM store_vectors AS v WHERE v.ns = s.ns AND v.key = s.key), 0) AS bytes
FROM store_items AS s WHERE (s.ns, s.key) > (:after_ns, :after_key)
ORDER BY s.ns, s.key LIMIT CAST(:limit AS INTEGER)""")
ENTRY_KEYS_PAGE = q("""SELECT ns, key, length(value) AS bytes FROM cache_entries
WHERE (ns, key) > (:after_ns, :after_key) ORDER BY ns, key LIMIT CAST(:limit AS INTEGER)""")

# The rows of :keys (JSON [[ns, key], ...]) as stored, each with its fingerprint (`fp`, made
# by this database: what the delete at the source compares, in SQL, with what it read).
_ITEM_FP = ("length(value) || ':' || substr(value, 1, 40) || substr(value, -40) || ':' || "
            "created_at || ':' || updated_at || ':' || COALESCE(expires_at, '-') || ':' || "
            "COALESCE(ttl_minutes, '-')")
_ENTRY_FP = ("length(value) || ':' || substr(value, 1, 40) || substr(value, -40) || ':' || "
             "COALESCE(expires_at, '-')")
MOVED_ITEM_COLUMNS = ("ns", "key", "value", "created_at", "updated_at", "expires_at",
                      "ttl_minutes", "fp")
READ_ITEMS_TO_MOVE = q(f"""SELECT ns, key, value, created_at, updated_at, expires_at,
    ttl_minutes, {_ITEM_FP} AS fp
FROM store_items WHERE (ns, key) IN (SELECT value->>0, value->>1 FROM json_each(:keys))""")
READ_VECTORS_TO_MOVE = q("""SELECT ns, key, field, vector FROM store_vectors
WHERE (ns, key) IN (SELECT value->>0, value->>1 FROM json_each(:keys))""")
MOVED_ENTRY_COLUMNS = ("ns", "key", "value", "expires_at", "fp")
READ_ENTRIES_TO_MOVE = q(f"""SELECT ns, key, value, expires_at, {_ENTRY_FP} AS fp
FROM cache_entries WHERE (ns, key) IN (SELECT value->>0, value->>1 FROM json_each(:keys))""")

# At the target: what it holds already wins (a put there since is newer; a killed move's copy
# is the same). Vectors first, for items it does not hold yet. :rows as read.
MOVE_IN_VECTORS = q("""INSERT OR REPLACE INTO store_vectors (ns, key, field, vector)
SELECT j.value->>0, j.value->>1, j.value->>2, j.value->>3 FROM json_each(:rows) AS j
WHERE NOT EXISTS (SELECT 1 FROM store_items AS s
    WHERE s.ns = j.value->>0 AND s.key = j.value->>1)""")
MOVE_IN_ITEMS = q("""INSERT INTO store_items (ns, key, value, created_at, updated_at, expires_at,
    ttl_minutes)
SELECT value->>0, value->>1, value->>2, value->>3, value->>4, value->>5, value->>6
FROM json_each(:rows) WHERE 1
ON CONFLICT (ns, key) DO NOTHING""")
MOVE_IN_ENTRIES = q("""INSERT INTO cache_entries (ns, key, value, expires_at)
SELECT value->>0, value->>1, value->>2, value->>3 FROM json_each(:rows) WHERE 1
ON CONFLICT (ns, key) DO NOTHING""")

# At the source, once the target holds them: each row deleted only if it still holds what was
# read (:rows JSON [[ns, key, fp], ...]): a writer on the old layout that changed it keeps it
# there, and it moves again. Then the vectors of the items gone.
MOVE_OUT_ITEMS = q(f"""DELETE FROM store_items
WHERE (ns, key) IN (SELECT value->>0, value->>1 FROM json_each(:rows))
    AND {_ITEM_FP} = (SELECT j.value->>2 FROM json_each(:rows) AS j
        WHERE j.value->>0 = store_items.ns AND j.value->>1 = store_items.key)""")
MOVE_OUT_VECTORS = q("""DELETE FROM store_vectors
WHERE (ns, key) IN (SELECT value->>0, value->>1 FROM json_each(:rows))
    AND NOT EXISTS (SELECT 1 FROM store_items AS s
        WHERE s.ns = store_vectors.ns AND s.key = store_vectors.key)""")
MOVE_OUT_ENTRIES = q(f"""DELETE FROM cache_entries
WHERE (ns, key) IN (SELECT value->>0, value->>1 FROM json_each(:rows))
    AND {_ENTRY_FP} = (SELECT j.value->>2 FROM json_each(:rows) AS j
        WHERE j.value->>0 = cache_entries.ns AND j.value->>1 = cache_entries.key)""")

# --- encryption keys: the census and rekeying (`d1saver rekey`) ------------------------------
#
# Values per table and key, as catalogue.KEY_CENSUS counts the checkpoints' (tbl, head,
# row_count): head is the first 7 characters of a sealed text, NULL for plaintext. A cache
# entry's value is "<serde type>\n<codec text>": its head is that of the text after the type.
MEMORY_KEY_CENSUS = q("""
SELECT 'store_items' AS tbl, CASE WHEN substr(value, 1, 2) = 'e:' THEN substr(value, 1, 7) END
    AS head, COUNT(*) AS row_count
FROM store_items GROUP BY 2
UNION ALL
SELECT 'cache_entries', CASE WHEN substr(value, instr(value, char(10)) + 1, 2) = 'e:'
    THEN substr(value, instr(value, char(10)) + 1, 7) END, COUNT(*)
FROM cache_entries GROUP BY 2""")

RAW_MEMORY_COLUMNS = ("ns", "key", "value")
# A keyset page of items (entries) after (:after_ns, :after_key), :limit at most; with :heads
# (a JSON array: the newest key's heads, Sealer.fresh_heads), only those not sealed under it.
RAW_ITEMS = q("""
SELECT ns, key, value FROM store_items
WHERE (ns, key) > (:after_ns, :after_key)
    AND (:heads IS NULL OR substr(value, 1, 7) NOT IN (SELECT value FROM json_each(:heads)))
ORDER BY ns, key LIMIT CAST(:limit AS INTEGER)""")
RAW_ENTRIES = q("""
SELECT ns, key, value FROM cache_entries
WHERE (ns, key) > (:after_ns, :after_key)
    AND (:heads IS NULL OR substr(value, instr(value, char(10)) + 1, 7)
        NOT IN (SELECT value FROM json_each(:heads)))
ORDER BY ns, key LIMIT CAST(:limit AS INTEGER)""")
# A value re-sealed in place, only if the row still holds what was read (:value_fp: its
# length, first and last 40 characters, as d1saver/ops/reseal.py's fingerprint): a live
# writer's newer value is never overwritten (it is sealed under the newest key already).
REKEY_ITEM = q("""
UPDATE store_items SET value = :value
WHERE ns = :ns AND key = :key
    AND length(value) || ':' || substr(value, 1, 40) || substr(value, -40) IS :value_fp""")
REKEY_ENTRY = q("""
UPDATE cache_entries SET value = :value
WHERE ns = :ns AND key = :key
    AND length(value) || ':' || substr(value, 1, 40) || substr(value, -40) IS :value_fp""")

# Every statement of this module, named by its identifier (in d1saver/sql/catalogue.py's
# STATEMENTS, so the snapshot of every statement sent holds them).
STATEMENTS: list[Query] = name_queries(globals())
