"""The read statements of inspection (`d1saver threads`, the web inspector `d1saver ui`): a
page of threads sorted and filtered in SQL, one thread's storage checkpoint by checkpoint,
the memory's namespaces and items with their TTLs, the cache's figures. They only read.

Sorting is chosen by a bound value (:sort), never by text put into the statement; a page
starts after a keyset cursor (:key, :after), so every page costs the same at any depth.
"""

from __future__ import annotations

from d1saver.sql.query import Query, name_queries, q

# Everything a thread stores, in bytes, for a thread `{t}.thread_id` whose own checkpoint rows
# add up to `{t}.own` ({t} must be none of the aliases used inside: w, p, k, f): writes, parts
# of large values, content-addressed chunks, frozen DeltaChannel histories (the same sum as THREADS_PAGE in d1saver/sql/catalogue.py).
_BYTES = """({t}.own
    + (SELECT COALESCE(SUM(LENGTH(w.value)), 0) FROM writes AS w WHERE w.thread_id = {t}.thread_id)
    + (SELECT COALESCE(SUM(LENGTH(p.data)), 0) FROM chunks AS p WHERE p.thread_id = {t}.thread_id)
    + (SELECT COALESCE(SUM(LENGTH(k.data)), 0) FROM d1saver_chunks AS k
       WHERE k.thread_id = {t}.thread_id)
    + (SELECT COALESCE(SUM(LENGTH(f.value) + COALESCE(LENGTH(f.metadata), 0)), 0)
       FROM delta_frozen AS f WHERE f.thread_id = {t}.thread_id))"""

THREADS_LIST_COLUMNS = ("thread_id", "checkpoints", "namespaces", "updated", "bytes", "waiting",
                        "sort_key", "total")
# A page of threads whose id holds :text (ASCII case folded; '' every thread), staged rows of
# a copy or move left out, ordered by :sort ('updated', 'bytes', 'checkpoints', or anything
# else: by id) newest or largest first, then by id. The page starts after the cursor
# (:key, :after) of the previous page's last row (:after NULL: the first page; :inclusive 1
# also takes a row equal to the cursor, for another database's copy of that thread).
# `waiting`: the newest checkpoint of the root namespace holds an interrupt (an
# `__interrupt__` write), so the thread waits on a person; `total`: the threads that match,
# on every row, and on a row of NULLs when no thread is left after the cursor (`threads`,
# read twice, is materialized once). The bytes of every thread are summed only to sort by
# bytes (CASE is lazy); otherwise only the page's.
THREADS_LIST = q(f"""
WITH threads AS (
    SELECT c.thread_id, COUNT(*) AS checkpoints, COUNT(DISTINCT c.checkpoint_ns) AS namespaces,
           MAX(c.ts) AS updated, SUM(LENGTH(c.checkpoint) + LENGTH(c.metadata)) AS own,
           MAX(CASE WHEN c.checkpoint_ns = '' THEN c.checkpoint_id END) AS head
    FROM checkpoints AS c
    WHERE NOT (c.thread_id >= char(31) || 'd1saver-' AND c.thread_id < char(31) || 'd1saver.')
      AND instr(lower(c.thread_id), lower(:text)) > 0
    GROUP BY c.thread_id
),
keyed AS (
    SELECT t.*, CASE :sort
        WHEN 'updated' THEN COALESCE(t.updated, '')
        WHEN 'checkpoints' THEN printf('%020d', t.checkpoints)
        WHEN 'bytes' THEN printf('%020d', {_BYTES.format(t='t')})
        ELSE '' END AS sort_key
    FROM threads AS t
)
SELECT x.thread_id, x.checkpoints, x.namespaces, x.updated, {_BYTES.format(t='x')} AS bytes,
       EXISTS (SELECT 1 FROM writes AS w WHERE w.thread_id = x.thread_id
               AND w.checkpoint_ns = '' AND w.checkpoint_id = x.head
               AND w.channel = '__interrupt__') AS waiting,
       x.sort_key, n.total
FROM (SELECT COUNT(*) AS total FROM threads) AS n
LEFT JOIN keyed AS x ON :after IS NULL OR x.sort_key < :key OR (x.sort_key = :key
      AND (x.thread_id > :after OR (x.thread_id = :after AND :inclusive = 1)))
ORDER BY x.sort_key DESC, x.thread_id LIMIT :limit""")

# The chunk ids a stored value's text lists, when it is a manifest ("m:", d1saver/storage/
# manifest.py): for json_each; inline pieces (they hold ':') are left out by the caller.
_IDS = """json_each(CASE WHEN substr({v}, 1, 2) = 'm:'
        THEN '["' || replace(substr({v}, 3), ',', '","') || '"]' ELSE '[]' END)"""

GROWTH_COLUMNS = ("checkpoint_ns", "checkpoint_id", "parent_checkpoint_id", "ts",
                  "checkpoint_bytes", "writes_bytes", "parts_bytes", "chunk_bytes",
                  "frozen_bytes")
# One thread's storage, checkpoint by checkpoint in id (time) order: its row, its writes,
# the parts of its large values, its frozen DeltaChannel histories, and the content-addressed
# chunks it was the first to reach (through its value's, its writes' or its frozen
# histories' manifests and the tree nodes under them): shared chunks count once, where they
# first appeared, so the running sum is the thread's storage as it grew. Chunks no row
# reaches count nowhere here. The :limit oldest checkpoints.
GROWTH = q(f"""
WITH RECURSIVE reached(checkpoint_ns, checkpoint_id, id) AS (
    SELECT c.checkpoint_ns, c.checkpoint_id, ltrim(j.value, '^')
    FROM checkpoints AS c, {_IDS.format(v='c.checkpoint')} AS j
    WHERE c.thread_id = :thread_id AND instr(j.value, ':') = 0
    UNION
    SELECT w.checkpoint_ns, w.checkpoint_id, ltrim(j.value, '^')
    FROM writes AS w, {_IDS.format(v='w.value')} AS j
    WHERE w.thread_id = :thread_id AND instr(j.value, ':') = 0
    UNION
    SELECT w.checkpoint_ns, w.checkpoint_id, ltrim(j.value, '^')
    FROM writes AS w, json_each(CASE WHEN substr(w.value, 1, 2) = 'p:' THEN substr(w.value, 3)
        ELSE '[]' END) AS p, {_IDS.format(v='p.value->>3')} AS j
    WHERE w.thread_id = :thread_id AND instr(j.value, ':') = 0
    UNION
    SELECT f.checkpoint_ns, f.checkpoint_id, ltrim(j.value, '^')
    FROM delta_frozen AS f, {_IDS.format(v='f.value')} AS j
    WHERE f.thread_id = :thread_id AND instr(j.value, ':') = 0
    UNION
    SELECT r.checkpoint_ns, r.checkpoint_id, ltrim(j.value, '^')
    FROM reached AS r CROSS JOIN d1saver_chunks AS n ON n.thread_id = :thread_id AND n.id = r.id
        AND n.level > 0, json_each('["' || replace(n.data, ',', '","') || '"]') AS j
),
first AS (
    SELECT id, checkpoint_ns, MIN(checkpoint_id) AS checkpoint_id FROM reached GROUP BY id
),
added AS (
    SELECT f.checkpoint_ns, f.checkpoint_id, SUM(LENGTH(k.data)) AS bytes
    FROM first AS f JOIN d1saver_chunks AS k ON k.thread_id = :thread_id AND k.id = f.id
    GROUP BY f.checkpoint_ns, f.checkpoint_id
)
SELECT c.checkpoint_ns, c.checkpoint_id, c.parent_checkpoint_id, c.ts,
       LENGTH(c.checkpoint) + LENGTH(c.metadata) AS checkpoint_bytes,
       (SELECT COALESCE(SUM(LENGTH(w.value)), 0) FROM writes AS w
        WHERE w.thread_id = c.thread_id AND w.checkpoint_ns = c.checkpoint_ns
          AND w.checkpoint_id = c.checkpoint_id) AS writes_bytes,
       (SELECT COALESCE(SUM(LENGTH(p.data)), 0) FROM chunks AS p
        WHERE p.thread_id = c.thread_id AND p.checkpoint_ns = c.checkpoint_ns
          AND p.checkpoint_id = c.checkpoint_id) AS parts_bytes,
       COALESCE(a.bytes, 0) AS chunk_bytes,
       (SELECT COALESCE(SUM(LENGTH(f.value) + COALESCE(LENGTH(f.metadata), 0)), 0)
        FROM delta_frozen AS f WHERE f.thread_id = c.thread_id
          AND f.checkpoint_ns = c.checkpoint_ns AND f.checkpoint_id = c.checkpoint_id)
        AS frozen_bytes
FROM checkpoints AS c LEFT JOIN added AS a ON a.checkpoint_ns = c.checkpoint_ns
    AND a.checkpoint_id = c.checkpoint_id
WHERE c.thread_id = :thread_id
ORDER BY c.checkpoint_id, c.checkpoint_ns LIMIT :limit""")

CHECKPOINT_HEAD_COLUMNS = ("head", "metadata")
# The first characters of a checkpoint's stored value: its codec marker and, sealed, the id
# of the key it was sealed under (d1saver/storage/crypto.py, key_id_of_text); and its metadata
# column, which keys leave in clear (LangGraph's bookkeeping: step, source, parents, run_id).
CHECKPOINT_HEAD = q("""
SELECT substr(checkpoint, 1, 40) AS head, metadata FROM checkpoints
WHERE thread_id = :thread_id AND checkpoint_ns = :checkpoint_ns
  AND checkpoint_id = :checkpoint_id""")

CHECKPOINT_IDS_COLUMNS = ("checkpoint_id",)
# The ids of a thread's checkpoints in one namespace that start with :prefix, in id order
# (an id equal to the prefix first), :limit of them: what a shortened id given to the CLI
# means. The range [:prefix, :upper) is those ids, read off the primary key (:upper is the
# prefix with its last character's code point raised by one); substr states the rule.
CHECKPOINT_IDS = q("""
SELECT checkpoint_id FROM checkpoints
WHERE thread_id = :thread_id AND checkpoint_ns = :checkpoint_ns
  AND checkpoint_id >= :prefix AND checkpoint_id < :upper
  AND substr(checkpoint_id, 1, length(:prefix)) = :prefix
ORDER BY checkpoint_id LIMIT :limit""")

# --- memory: D1Store's items and D1Cache's entries (d1saver/sql/memory.py's tables) ---------

STORE_NAMESPACES_COLUMNS = ("ns", "items", "bytes", "updated_at", "next_expiry")
# The namespaces under a prefix (:exact the prefix's stored text, :low and :high the range of
# its descendants, as d1saver/memory/namespaces.py's `scope` gives them; :exact NULL: every
# namespace) that hold live items at :now, with their figures; in ns order, :limit after :offset.
STORE_NAMESPACES = q("""
SELECT ns, COUNT(*) AS items, SUM(LENGTH(value)) AS bytes, MAX(updated_at) AS updated_at,
       MIN(expires_at) AS next_expiry
FROM store_items
WHERE (:exact IS NULL OR ns = :exact OR (ns >= :low AND ns < :high))
  AND (expires_at IS NULL OR expires_at > :now)
GROUP BY ns ORDER BY ns LIMIT :limit OFFSET :offset""")

STORE_ITEMS_COLUMNS = ("ns", "key", "value", "created_at", "updated_at", "expires_at",
                       "ttl_minutes")
# The live items of exactly one namespace (:ns, its stored text), newest first as D1Store's
# search orders them; :limit after :offset. Reading refreshes no TTL.
STORE_ITEMS = q("""
SELECT ns, key, value, created_at, updated_at, expires_at, ttl_minutes FROM store_items
WHERE ns = :ns AND (expires_at IS NULL OR expires_at > :now)
ORDER BY updated_at DESC, key LIMIT :limit OFFSET :offset""")

CACHE_SUMMARY_COLUMNS = ("ns", "entries", "bytes", "expired", "next_expiry")
# D1Cache's entries per namespace: how many, their stored bytes, how many have expired at
# :now (a sweep deletes them), and when the next live one expires.
CACHE_SUMMARY = q("""
SELECT ns, COUNT(*) AS entries, SUM(LENGTH(value)) AS bytes,
       SUM(CASE WHEN expires_at IS NOT NULL AND expires_at <= :now THEN 1 ELSE 0 END) AS expired,
       MIN(CASE WHEN expires_at > :now THEN expires_at END) AS next_expiry
FROM cache_entries GROUP BY ns ORDER BY ns LIMIT :limit""")

# Every statement of this module, named by its identifier (in d1saver/sql/catalogue.py's
# STATEMENTS, so the snapshot of every statement sent holds them).
STATEMENTS: list[Query] = name_queries(globals())
