"""The SQL of long-term memory (D1Store) and of the node cache (D1Cache), as named constants.

A namespace is stored as the JSON array of its labels (`ns`, compact, ASCII: d1saver/memory/
namespaces.py), so labels are data: a prefix is matched as a range of that text, never with
LIKE or GLOB. Times are unix seconds as REAL (sub-second), from the writer's clock. Lists
travel as one JSON parameter read by json_each, so no statement nears D1's 100 parameters.
"""

from __future__ import annotations

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
# ?1 the whole namespace's text (exact), ?2 and ?3 the range of its descendants: ns >= ?2 AND
# ns < ?3 (d1saver/memory/namespaces.py builds them); ?1 NULL: every namespace. ?4 now.
_SCOPE = "(?1 IS NULL OR {t}ns = ?1 OR ({t}ns >= ?2 AND {t}ns < ?3))"
_LIVE = "({t}expires_at IS NULL OR {t}expires_at > ?4)"

# --- writes ---------------------------------------------------------------------------------

# ?1 JSON [[ns, key, value, expires_at, ttl_minutes], ...], ?2 now. An item put again keeps its
# created_at, unless it had expired (then it is a new item).
PUT_ITEMS = """INSERT INTO store_items (ns, key, value, created_at, updated_at, expires_at,
    ttl_minutes)
SELECT j.value->>0, j.value->>1, j.value->>2, ?2, ?2, j.value->>3, j.value->>4
FROM json_each(?1) AS j WHERE 1
ON CONFLICT (ns, key) DO UPDATE SET value = excluded.value,
    created_at = CASE WHEN store_items.expires_at IS NOT NULL
        AND store_items.expires_at <= excluded.updated_at
        THEN excluded.created_at ELSE store_items.created_at END,
    updated_at = excluded.updated_at, expires_at = excluded.expires_at,
    ttl_minutes = excluded.ttl_minutes"""

# ?1 JSON [[ns, key], ...]: the items (and their vectors) deleted or put again.
DELETE_ITEMS = """DELETE FROM store_items WHERE (ns, key) IN (
    SELECT value->>0, value->>1 FROM json_each(?1))"""
DELETE_VECTORS = """DELETE FROM store_vectors WHERE (ns, key) IN (
    SELECT value->>0, value->>1 FROM json_each(?1))"""
# ?1 JSON [[ns, key, field, vector], ...]
PUT_VECTORS = """INSERT OR REPLACE INTO store_vectors (ns, key, field, vector)
SELECT value->>0, value->>1, value->>2, value->>3 FROM json_each(?1)"""

# --- reads ----------------------------------------------------------------------------------

ITEM_COLUMNS = ("ns", "key", "value", "created_at", "updated_at", "ttl_minutes")

# ?1 JSON [[ns, key], ...], ?2 now: the live items among them.
GET_ITEMS = """SELECT s.ns, s.key, s.value, s.created_at, s.updated_at, s.ttl_minutes
FROM json_each(?1) AS j JOIN store_items AS s ON s.ns = j.value->>0 AND s.key = j.value->>1
WHERE s.expires_at IS NULL OR s.expires_at > ?2"""
# Before GET_ITEMS in the same batch: the live items among them that have a TTL start it again.
REFRESH_ITEMS = """UPDATE store_items SET expires_at = ?2 + ttl_minutes * 60
WHERE (ns, key) IN (SELECT value->>0, value->>1 FROM json_each(?1))
    AND ttl_minutes IS NOT NULL AND expires_at > ?2"""

# A value filter SQL can decide, ?N: JSON [[path, kind, operand], ...], each an equality that
# must hold (d1saver/memory/values.py compiles it); NULL: no filter. Only a JSON value ("{...}")
# is tested (json_extract fails on other text); a compressed or sealed one ({opaque}: 0 leaves it
# out, for SEARCH_OPAQUE to return; 1 keeps it) is left to Python. CASE fixes the order of evaluation, which AND does not.
_FILTER = """(?{n} IS NULL OR CASE WHEN substr({t}value, 1, 1) = '{{' THEN NOT EXISTS (
    SELECT 1 FROM json_each(?{n}) AS f WHERE NOT (CASE f.value->>1
        WHEN 'null' THEN json_extract({t}value, f.value->>0) IS NULL
        WHEN 'text' THEN json_type({t}value, f.value->>0) = 'text'
            AND json_extract({t}value, f.value->>0) = f.value->>2
        WHEN 'number' THEN json_type({t}value, f.value->>0) IN ('integer', 'real', 'true', 'false')
            AND json_extract({t}value, f.value->>0) = f.value->>2
        ELSE 0 END)) ELSE {opaque} END)"""

# ?1..?4 the scope and now, ?5 limit (-1: all), ?6 offset, ?7 the filter. Newest first, as
# SqliteStore orders them.
SEARCH_ITEMS = f"""SELECT ns, key, value, created_at, updated_at, ttl_minutes FROM store_items
WHERE {_SCOPE.format(t='')} AND {_LIVE.format(t='')} AND {_FILTER.format(t='store_items.', n=7, opaque=0)}
ORDER BY updated_at DESC, ns, key LIMIT CAST(?5 AS INTEGER) OFFSET CAST(?6 AS INTEGER)"""
# With a filter in SQL: the items in scope whose value SQL cannot read (compressed or sealed),
# for Python to filter (?1..?4).
SEARCH_OPAQUE = f"""SELECT ns, key, value, created_at, updated_at, ttl_minutes FROM store_items
WHERE {_SCOPE.format(t='')} AND {_LIVE.format(t='')} AND substr(value, 1, 1) <> '{{'"""
# An unfiltered page's TTLs refreshed, before it is read (same batch, ?1..?6).
REFRESH_SEARCH = f"""UPDATE store_items SET expires_at = ?4 + ttl_minutes * 60
WHERE rowid IN (SELECT rowid FROM store_items
    WHERE {_SCOPE.format(t='')} AND {_LIVE.format(t='')}
    ORDER BY updated_at DESC, ns, key LIMIT CAST(?5 AS INTEGER) OFFSET CAST(?6 AS INTEGER))
    AND ttl_minutes IS NOT NULL"""

VECTOR_COLUMNS = ("ns", "key", "field", "vector")
# The vectors of every live item in scope that may pass the filter: ?1..?4, ?5 the filter.
SEARCH_VECTORS = f"""SELECT v.ns, v.key, v.field, v.vector
FROM store_items AS s JOIN store_vectors AS v ON v.ns = s.ns AND v.key = s.key
WHERE {_SCOPE.format(t='s.')} AND {_LIVE.format(t='s.')} AND {_FILTER.format(t='s.', n=5, opaque=1)}"""

NAMESPACE_COLUMNS = ("ns",)
# The distinct namespaces of live items in scope: ?1..?4.
LIST_NAMESPACES = f"""SELECT DISTINCT ns FROM store_items
WHERE {_SCOPE.format(t='')} AND {_LIVE.format(t='')} ORDER BY ns"""

# Delete every item in scope (a namespace and its descendants): ?1..?3.
DELETE_SCOPE = [
    f"DELETE FROM store_vectors WHERE {_SCOPE.format(t='')}",
    f"DELETE FROM store_items WHERE {_SCOPE.format(t='')}",
]

# --- TTL sweep: ?1 now ------------------------------------------------------------------------

COUNT_EXPIRED = """SELECT
    (SELECT COUNT(*) FROM store_items WHERE expires_at IS NOT NULL AND expires_at <= ?1) AS items,
    (SELECT COUNT(*) FROM cache_entries WHERE expires_at IS NOT NULL AND expires_at <= ?1)
        AS cache"""
EXPIRED_COLUMNS = ("items", "cache")
SWEEP_STORE = [
    """DELETE FROM store_vectors WHERE (ns, key) IN (SELECT ns, key FROM store_items
    WHERE expires_at IS NOT NULL AND expires_at <= ?1)""",
    "DELETE FROM store_items WHERE expires_at IS NOT NULL AND expires_at <= ?1",
]
SWEEP_CACHE = "DELETE FROM cache_entries WHERE expires_at IS NOT NULL AND expires_at <= ?1"

# --- cache ------------------------------------------------------------------------------------

CACHE_COLUMNS = ("ns", "key", "value")
# ?1 JSON [[ns, key], ...], ?2 now: the live entries among them.
CACHE_GET = """SELECT c.ns, c.key, c.value
FROM json_each(?1) AS j JOIN cache_entries AS c ON c.ns = j.value->>0 AND c.key = j.value->>1
WHERE c.expires_at IS NULL OR c.expires_at > ?2"""
# ?1 JSON [[ns, key, value, expires_at], ...]
CACHE_SET = """INSERT OR REPLACE INTO cache_entries (ns, key, value, expires_at)
SELECT value->>0, value->>1, value->>2, value->>3 FROM json_each(?1)"""
# ?1 JSON [ns, ...], or NULL: every entry.
CACHE_CLEAR = "DELETE FROM cache_entries WHERE ?1 IS NULL OR ns IN (SELECT value FROM json_each(?1))"
