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
# What a read sees: rows that expire after :live_at (now), or every row when :live_at is NULL
# (TTLConfig omit_expired False: expired rows stay visible until a sweep deletes them).
_LIVE = "({t}expires_at IS NULL OR :live_at IS NULL OR {t}expires_at > :live_at)"

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
# :rows JSON [[ns, key, field, vector, code], ...]: `code` the vector's prefilter code
# (d1saver/memory/codes.py), derived from `vector` and written with it (schema v16). A row
# replaced by an older d1saver, which names no code, gets NULL: its vector is always re-ranked.
PUT_VECTORS = q("""INSERT OR REPLACE INTO store_vectors (ns, key, field, vector, code)
SELECT value->>0, value->>1, value->>2, value->>3, value->>4 FROM json_each(:rows)""")

# --- reads ----------------------------------------------------------------------------------

ITEM_COLUMNS = ("ns", "key", "value", "created_at", "updated_at", "ttl_minutes")

# :keys JSON [[ns, key], ...]: the items among them a read sees.
GET_ITEMS = q(f"""SELECT s.ns, s.key, s.value, s.created_at, s.updated_at, s.ttl_minutes
FROM json_each(:keys) AS j JOIN store_items AS s ON s.ns = j.value->>0 AND s.key = j.value->>1
WHERE {_LIVE.format(t='s.')}""")
# Before GET_ITEMS in the same batch: the items among them a read sees that have a TTL start it
# again at :now.
REFRESH_ITEMS = q(f"""UPDATE store_items SET expires_at = :now + ttl_minutes * 60
WHERE (ns, key) IN (SELECT value->>0, value->>1 FROM json_each(:keys))
    AND ttl_minutes IS NOT NULL AND {_LIVE.format(t='')}""")
# After a batch's writes, for an item one of its searches returned to refresh in a second
# request (a ranked page, or rows SQL could not tell) and its put wrote again: the created_at
# the item had when read (:created_at). The refresh belongs before the put (reads come first in
# a batch), so the put did not meet an expired item; only the row the put created (created_at
# :put_at) changes, whether or not another put of the item has come since (it kept that
# created_at, as it would have kept the first one after the whole batch).
RESTORE_CREATED = q("""UPDATE store_items SET created_at = :created_at
WHERE ns = :ns AND key = :key AND created_at = :put_at""")

# A search filter's verdict on a row: 2 it holds, 0 it does not, 1 SQL cannot tell (Python
# decides). :filter is the JSON array of conditions d1saver/memory/filters.py compiles (each an
# object: k kind, p JSON path, a and v operands, o operator, s 1 when v is read exactly, n 1 to
# negate); NULL: no filter. A value that is not JSON text (compressed or sealed) is 1 whatever
# the filter. A row's verdict is the least of its conditions' (0 wins, then 1). A number is
# equal when its JSON text is one of the operand's ("a": json.dumps writes each number one
# way, an integer of any size in decimal); SQLite may read a real's text one unit in the last
# place off Python's float(), so where the margin of 1e-15 cannot tell, the verdict is 1.
# Differences are taken in REAL: SQLite's integer abs() and subtraction fail on overflow.
# The shape is for speed, the verdicts are the same: `conds` reads :filter once a statement,
# and LIMIT -1 keeps SQLite from inlining the subqueries d and c into the CASE, so each
# condition reads the row's JSON once (json_type, json_extract, ->), not once per mention.
_VERDICT = """(CASE WHEN :filter IS NULL THEN 2 WHEN substr({t}value, 1, 1) <> '{{' THEN 1 ELSE (
    WITH conds AS MATERIALIZED (SELECT value->>'k' AS k, value->>'n' AS n, value->>'a' AS a,
        value->>'v' AS v, value->>'o' AS o, value->>'s' AS s, value->>'p' AS p
        FROM json_each(:filter))
    SELECT min(CASE WHEN c.n = 1 THEN 2 - c.r ELSE c.r END) FROM (
        SELECT d.n, CASE d.k
            WHEN 'unknown' THEN 1 WHEN 'true' THEN 2 WHEN 'false' THEN 0
            WHEN 'object' THEN CASE WHEN d.type = 'object' THEN 2 ELSE 0 END
            WHEN 'array' THEN CASE WHEN d.type = 'array'
                AND json_array_length({t}value, d.p) = d.a THEN 2 ELSE 0 END
            WHEN 'keys' THEN CASE WHEN d.type = 'object'
                AND (SELECT count(*) FROM json_each({t}value, d.p)) = d.a THEN 2 ELSE 0 END
            WHEN 'none' THEN CASE WHEN d.type IS NULL OR d.type = 'null' THEN 2 ELSE 0 END
            WHEN 'null' THEN CASE WHEN d.type = 'null' THEN 2 ELSE 0 END
            WHEN 'text' THEN CASE WHEN d.type = 'text' AND d.x = d.a THEN 2 ELSE 0 END
            WHEN 'text?' THEN CASE WHEN d.type = 'text' THEN 1 ELSE 0 END
            WHEN 'num' THEN CASE
                WHEN d.type IS NULL OR d.type NOT IN ('integer', 'real', 'true', 'false') THEN 0
                WHEN instr(d.a, '|' || d.raw || '|') > 0 THEN 2
                WHEN d.type = 'real' AND abs(d.x - d.v) <= 1e-15 * abs(d.v) + 1e-300 THEN 1
                ELSE 0 END
            WHEN 'cmp' THEN CASE
                WHEN d.type = 'text' OR (d.type = 'integer' AND typeof(d.x) <> 'integer') THEN 1
                WHEN d.type IS NULL OR d.type NOT IN ('integer', 'real', 'true', 'false') THEN 0
                WHEN d.type = 'real' AND instr(d.a, '|' || d.raw || '|') > 0
                    THEN CASE WHEN d.o IN ('gte', 'lte') THEN 2 ELSE 0 END
                WHEN (d.type = 'real' OR d.s = 0)
                    AND abs(CAST(d.x AS REAL) - d.v) <= 1e-15 * abs(d.v) + 1e-300 THEN 1
                WHEN CASE d.o WHEN 'gt' THEN CAST(d.x AS REAL) > d.v
                    WHEN 'gte' THEN CAST(d.x AS REAL) >= d.v
                    WHEN 'lt' THEN CAST(d.x AS REAL) < d.v
                    ELSE CAST(d.x AS REAL) <= d.v END THEN 2
                ELSE 0 END
            WHEN 'numtype' THEN CASE
                WHEN d.type IN ('real', 'true', 'false')
                    OR (d.type = 'integer' AND typeof(d.x) = 'integer') THEN d.a
                WHEN d.type IN ('text', 'integer') THEN 1 ELSE 0 END
            WHEN 'notcontainer' THEN CASE WHEN d.type = d.a THEN 1 ELSE 2 END
            ELSE 1 END AS r
        FROM (SELECT f.k, f.n, f.a, f.v, f.o, f.s, f.p,
                json_type({t}value, f.p) AS type,
                json_extract({t}value, f.p) AS x,
                {t}value -> f.p AS raw
            FROM conds AS f LIMIT -1) AS d LIMIT -1) AS c) END)"""

# The conditions that rule a row out cheaply, for speed: the filter's "text" and "num"
# conditions that are not negated. A row one of them rules out (`_KEPT` false) has verdict 0,
# by the same expressions as _VERDICT's (json_extract for "text", the JSON text -> for "num"),
# so leaving it out before its verdict changes no result (a value that is not JSON text, kept by
# CASE before any JSON function reads it, is 1); the verdict, which reads every
# condition, is then computed for the rows left only (a filtered search over 1,000 items:
# 4.1 ms -> 1.8 ms of SQLite, benchmarks/RESULTS.md). No :filter: no condition, every row kept.
_EQUALS = """equals AS MATERIALIZED (SELECT value->>'k' AS k, value->>'p' AS p, value->>'a' AS a
    FROM json_each(:filter) WHERE value->>'k' IN ('text', 'num') AND value->>'n' IS NULL)"""
_KEPT = """(CASE WHEN substr({t}value, 1, 1) <> '{{' THEN 1 ELSE NOT EXISTS (
    SELECT 1 FROM equals AS e WHERE CASE e.k WHEN 'text' THEN json_extract({t}value, e.p) IS NOT e.a
        ELSE coalesce(instr(e.a, '|' || ({t}value -> e.p) || '|'), 0) = 0
            AND json_type({t}value, e.p) IS NOT 'real' END) END)"""

# Without a filter: the page newest first (as SqliteStore orders them), :limit (-1: every row)
# rows after :offset, of the scope's rows a read sees.
SEARCH_ITEMS = q(f"""SELECT ns, key, value, created_at, updated_at, ttl_minutes FROM store_items
WHERE {_SCOPE.format(t='')} AND {_LIVE.format(t='')}
ORDER BY updated_at DESC, ns, key LIMIT CAST(:limit AS INTEGER) OFFSET CAST(:offset AS INTEGER)""")
# Before SEARCH_ITEMS in the same batch, with its parameters and :now: the page's rows that
# have a TTL start it again.
REFRESH_SEARCH = q(f"""UPDATE store_items SET expires_at = :now + ttl_minutes * 60
WHERE rowid IN (SELECT rowid FROM store_items
    WHERE {_SCOPE.format(t='')} AND {_LIVE.format(t='')}
    ORDER BY updated_at DESC, ns, key LIMIT CAST(:limit AS INTEGER) OFFSET CAST(:offset AS INTEGER))
    AND ttl_minutes IS NOT NULL""")

# With a filter: the rows in scope a read sees with the filter's verdict, and for each how many
# rows before it (newest first) SQL knows match (sure_before) and how many up to it SQL cannot
# tell (unsure_upto). Only the ordering columns and the verdict are kept while counting (a
# namespace's values may be large); the values of the rows returned are read by rowid.
_COUNTED = f"""WITH {_EQUALS}, scoped AS MATERIALIZED (
    SELECT rowid AS row_id, ns, key, updated_at, {_VERDICT.format(t='store_items.')} AS verdict
    FROM store_items WHERE {_SCOPE.format(t='')} AND {_LIVE.format(t='')}
        AND {_KEPT.format(t='store_items.')}),
counted AS (
    SELECT row_id, verdict,
        count(*) FILTER (WHERE verdict = 2) OVER page - (verdict = 2) AS sure_before,
        count(*) FILTER (WHERE verdict = 1) OVER page AS unsure_upto
    FROM scoped WHERE verdict > 0
    WINDOW page AS (ORDER BY updated_at DESC, ns, key ROWS UNBOUNDED PRECEDING))"""

SEARCH_COLUMNS = (*ITEM_COLUMNS, "verdict", "sure_before", "unsure_upto")
# The scope, :live_at, :filter, and the page: every row until :need rows SQL knows match have
# been seen (:need < 0: every row), leaving out the first :skip rows SQL knows match when no
# row it cannot tell comes before them. So the rows returned hold the page [skip, need) of the
# matches whatever Python decides for the rows SQL cannot tell (d1saver/memory/store.py).
SEARCH_ITEMS_FILTERED = q(f"""{_COUNTED}
SELECT s.ns, s.key, s.value, s.created_at, s.updated_at, s.ttl_minutes, c.verdict,
    c.sure_before, c.unsure_upto
FROM counted AS c JOIN store_items AS s ON s.rowid = c.row_id
WHERE (:need < 0 OR c.sure_before < :need)
    AND NOT (c.verdict = 2 AND c.unsure_upto = 0 AND c.sure_before < :skip)
ORDER BY s.updated_at DESC, s.ns, s.key""")
# Before SEARCH_ITEMS_FILTERED in the same batch, with its parameters and :now: the page's rows
# that SQL knows are in it (no row it cannot tell before them) and have a TTL start it again.
REFRESH_SEARCH_FILTERED = q(f"""UPDATE store_items SET expires_at = :now + ttl_minutes * 60
WHERE ttl_minutes IS NOT NULL AND rowid IN ({_COUNTED}
    SELECT row_id FROM counted
    WHERE verdict = 2 AND unsure_upto = 0 AND sure_before >= :skip
        AND (:need < 0 OR sure_before < :need))""")

VECTOR_COLUMNS = ("ns", "key", "field", "vector")
# The vectors of every row in scope a read sees.
SEARCH_VECTORS = q(f"""SELECT v.ns, v.key, v.field, v.vector
FROM store_items AS s JOIN store_vectors AS v ON v.ns = s.ns AND v.key = s.key
WHERE {_SCOPE.format(t='s.')} AND {_LIVE.format(t='s.')}""")
# The vectors of every row in scope a read sees that may pass :filter (verdict 1 or 2).
SEARCH_VECTORS_FILTERED = q(f"""WITH {_EQUALS}
SELECT v.ns, v.key, v.field, v.vector
FROM store_items AS s JOIN store_vectors AS v ON v.ns = s.ns AND v.key = s.key
WHERE {_SCOPE.format(t='s.')} AND {_LIVE.format(t='s.')} AND {_KEPT.format(t='s.')}
    AND {_VERDICT.format(t='s.')} > 0""")

# --- search by meaning: the prefilter (d1saver/memory/codes.py) and the gateway (worker/rank.js)
#
# How many items in scope a read sees that the filter's plain equalities keep (a constant
# subquery: SQLite evaluates it once). It decides between the two exact paths below (RANK_ROWS
# whole, or SEARCH_CODES then the candidates), the same expression in both, so exactly one of
# them returns rows; it bounds what a whole read returns, not what it scans.
_SCOPE_COUNT = (f"(SELECT count(*) FROM store_items WHERE {_SCOPE.format(t='')} "
                f"AND {_LIVE.format(t='')} AND {_KEPT.format(t='')})")

# Every item in scope a read sees that may pass :filter (NULL: no filter), with its value, the
# verdict, and one row per vector (`vector` NULL: the item has none), newest first; when :whole
# is not NULL, only if the scope holds at most :whole items the equalities keep (else no row;
# d1saver binds memory/plan.py's `whole_items` on every path). As a prefiltered search's first
# statement it reads a small scope whole, as the exact scan (one request).
# Through d1saver's gateway Worker it is followed by RANK_MARK: the Worker
# scores the rows next to the data and returns only those of the items that can be in the
# page; D1 (or another gateway) returns them all.
RANK_COLUMNS = (*ITEM_COLUMNS, "verdict", "vector")
RANK_ROWS = q(f"""WITH {_EQUALS}
SELECT c.ns, c.key, c.value, c.created_at, c.updated_at, c.ttl_minutes, c.verdict, v.vector
FROM (SELECT s.ns, s.key, s.value, s.created_at, s.updated_at, s.ttl_minutes,
        {_VERDICT.format(t='s.')} AS verdict
    FROM store_items AS s WHERE {_SCOPE.format(t='s.')} AND {_LIVE.format(t='s.')}
        AND (:whole IS NULL OR {_SCOPE_COUNT} <= :whole) AND {_KEPT.format(t='s.')}) AS c
    LEFT JOIN store_vectors AS v ON v.ns = c.ns AND v.key = c.key
WHERE c.verdict > 0
ORDER BY c.updated_at DESC, c.ns, c.key""")
# :spec JSON {"query": [floats], "distance": "cosine" | "inner_product" | "l2", "keep": the
# page's end}. The gateway answers 1 when it ranked the rows before; D1 answers :spec.
RANK_MARK = q("SELECT :spec AS rank_spec")

# A prefiltered search's first request, beside RANK_ROWS: when the scope holds more than
# :whole items, every item in it a read sees that may pass :filter, by rowid, with the code
# of each of its vectors (NULL: the item has no vector; '': a vector written without a code),
# never a value or a vector. The store bounds each item's score from its codes and keeps the
# candidates that can be in the page; the second request reads their rows and full vectors,
# and ranks them exactly.
CODE_COLUMNS = ("item", "verdict", "code")
SEARCH_CODES = q(f"""WITH {_EQUALS}
SELECT c.item, c.verdict,
    CASE WHEN v.ns IS NULL THEN NULL ELSE coalesce(v.code, '') END AS code
FROM (SELECT s.rowid AS item, s.ns, s.key, {_VERDICT.format(t='s.')} AS verdict
    FROM store_items AS s WHERE {_SCOPE.format(t='s.')} AND {_LIVE.format(t='s.')}
        AND {_SCOPE_COUNT} > :whole AND {_KEPT.format(t='s.')}) AS c
    LEFT JOIN store_vectors AS v ON v.ns = c.ns AND v.key = c.key
WHERE c.verdict > 0""")
# The second request. :items JSON [rowid, ...]: the candidates still in scope that a read
# sees and that may pass :filter, with the verdict, as SEARCH_ITEMS_FILTERED's rows (a rowid
# reused since the first request names an item of the scope or none).
CANDIDATE_ITEMS = q(f"""SELECT s.ns, s.key, s.value, s.created_at, s.updated_at, s.ttl_minutes,
    {_VERDICT.format(t='s.')} AS verdict
FROM json_each(:items) AS j JOIN store_items AS s ON s.rowid = j.value
WHERE {_SCOPE.format(t='s.')} AND {_LIVE.format(t='s.')} AND {_VERDICT.format(t='s.')} > 0""")
# The full vectors of the candidates :items JSON [rowid, ...].
CANDIDATE_VECTORS = q("""SELECT v.ns, v.key, v.field, v.vector
FROM json_each(:items) AS j JOIN store_items AS s ON s.rowid = j.value
    JOIN store_vectors AS v ON v.ns = s.ns AND v.key = s.key""")

NAMESPACE_COLUMNS = ("ns",)
# The distinct namespaces of the rows in scope a read sees.
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

# At the target, first: an item it holds older than the page's (a lower updated_at) is an
# earlier move's copy that a writer on the old layout has changed since at the source, or a
# put there older than that writer's; it goes, with its vectors, and the page's row lands.
# :keys JSON [[ns, key, updated_at], ...] as read.
_OLDER_AT_TARGET = """SELECT s.ns, s.key FROM store_items AS s JOIN json_each(:keys) AS j
    ON s.ns = j.value->>0 AND s.key = j.value->>1 WHERE s.updated_at < j.value->>2"""
MOVE_IN_OLDER_VECTORS = q(f"DELETE FROM store_vectors WHERE (ns, key) IN ({_OLDER_AT_TARGET})")
MOVE_IN_OLDER_ITEMS = q(f"DELETE FROM store_items WHERE (ns, key) IN ({_OLDER_AT_TARGET})")

# Then what it holds wins (a put there since is newer; a killed move's copy is the same).
# Vectors first, for items it does not hold. :rows as read.
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
