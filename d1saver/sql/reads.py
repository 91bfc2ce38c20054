"""The reads of get_tuple, list and get_delta_channel_history: one page of checkpoints with
everything they need, in one statement, and the DeltaChannel walks (docs/SQL.md).

Twelve page statements are one design in two families (the page, and the page with its
DeltaChannel prefetch) over three scopes, each with and without a metadata filter: each is
built here, when the module loads, from the named parts below and in d1saver/sql/parts.py.
"""

from __future__ import annotations

from d1saver.sql.parts import (FROZEN_REF, not_staged, replayed_writes, seeds, still_sought,
                               sought, tree_walk, unended)
from d1saver.sql.query import Query, name_queries, q

# One page of checkpoints together with their writes and chunks, in ONE statement, in the
# narrowest of three scopes, each read in page order from its cursor on: one namespace of a
# thread (get_tuple, and list with a namespace) by the primary key (THREAD_NS), every
# namespace of a thread (THREAD, which sorts that thread's rows), every thread (list(None):
# ALL, by checkpoints_by_id). Each scope comes without a metadata filter (get_tuple, most
# lists) and with one (..._FILTERED), so that the filter's text travels only with the lists
# that filter. Parameters:
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
THREAD_NS = """thread_id = :thread_id AND checkpoint_ns = :checkpoint_ns
      AND checkpoint_id < COALESCE(:after_checkpoint_id, :before, x'')"""
_BELOW_CURSOR = """(checkpoint_id, thread_id, checkpoint_ns)
          < (COALESCE(:after_checkpoint_id, :before, x''), COALESCE(:after_thread_id, ''),
             COALESCE(:after_checkpoint_ns, ''))"""
THREAD = f"""thread_id = :thread_id
      AND {_BELOW_CURSOR}"""
ALL = f"""{_BELOW_CURSOR}
      AND {not_staged()}"""

# The metadata filter, as InMemorySaver's `query == metadata.get(key)` (defect 6): the value
# at f.path in the metadata and in f.doc are equal JSON trees: the same nodes (by full key,
# so object key order does not matter), each of the same kind (numbers and booleans are one
# kind, so 1 == 1.0 == true) and atom. A null query matches null or a missing key. Chunked
# metadata (d1saver/storage/values.py) that lacks the key in its column passes here and is
# decided in Python. Trees are read from the stored text itself: no number is re-rendered.
METADATA_FILTER = """
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
            AND json_type(c.metadata, '$."d1saver:metadata"') IS NOT NULL)))"""


def page(scope: str, metadata_filter: str = "") -> str:
    """The CTE `page`: the checkpoint rows of one page, in `scope`."""
    return f"""page AS (
    SELECT thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id, type, checkpoint,
           metadata, channels
    FROM checkpoints AS c
    WHERE {scope}
      AND (:checkpoint_id IS NULL OR checkpoint_id = :checkpoint_id){metadata_filter}
    ORDER BY checkpoint_id DESC, thread_id DESC, checkpoint_ns DESC
    LIMIT :limit
)"""


# Content-addressed chunks (migration 7) ride in the same statement as the rows that list them
# (through `out`, whose columns take the first SELECT's affinity: integers may come back as
# text, so readers convert them). `vals` holds the manifest column of each returned row;
# `refs` gathers every id the "m:" manifests and "p:" packs in `vals` reach (TREE_WALK). A
# frozen value's pieces live with its holder in chunks, owner 'f/<src_checkpoint_id>/<owner>':
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
#   'h' chunks:     thread_id, value their ids and data (chunk_rows)
#   'a' ancestor (prefetch): ref parent_checkpoint_id, channels, type, and metadata and value
#                   the checkpoint only when it seeds a sought channel
#   'f' frozen (prefetch): checkpoint_id the holder, ref the identity of the row the value
#                   came from ([kind, src_checkpoint_id, task_id, task_path, idx, channel,
#                   depth]), metadata, channels, type, value
PAGE_COLUMNS = ("kind", "thread_id", "checkpoint_ns", "checkpoint_id", "ref", "metadata",
                "task_path", "idx", "channels", "type", "value")

# The page's own rows: 'c', 'w', and 'k' but the frozen values' pieces.
PAGE_ROWS = """out AS (
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
)"""


def row_values(kinds: str, thread_id: str = "thread_id") -> str:
    """The CTE `vals(thread_id, v)`: the stored value of each row of `out` of `kinds`."""
    return f"""vals(thread_id, v) AS (
    SELECT {thread_id}, CASE WHEN kind IN ({kinds}) THEN value END FROM out
)"""


# Characters of chunk text an 'h' row holds at most, beside one chunk (under 100 KB): well
# under D1's 2 MB limit on a value, which a computed one meets too.
CHUNK_GROUP = 1_000_000


def chunk_rows(thread_id: str = "thread_id", where: str = "") -> str:
    """The rows of `out`, then the chunks `refs` reached (`where` of `r`, the ref): an 'h' row
    per thread and about CHUNK_GROUP characters of them (a running sum in the order the rows
    come, which needs no sort, counting 30 for an id and the spaces, more than they take:
    a group is rows in a range of it), its value each chunk's id and data joined by
    spaces (an id is base85 or base64url, data codec text or a node's ids joined by ',': no
    space in either). A row per chunk cost about 60 bytes of D1's framing each, a fifth of
    a state's size (issue 12)."""
    return f"""SELECT * FROM out
UNION ALL
SELECT 'h', {thread_id}, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
       group_concat(id || ' ' || data, ' ')
FROM (
    SELECT r.thread_id, r.id, k.data,
           sum(length(k.data) + 30) OVER (ROWS UNBOUNDED PRECEDING) / {CHUNK_GROUP} AS part
    FROM refs AS r CROSS JOIN d1saver_chunks AS k USING (thread_id, id)
    {where}
)
GROUP BY thread_id, part"""


CHUNK_ROWS = chunk_rows()


def select_page(scope: str, metadata_filter: str = "") -> str:
    return f"""
WITH RECURSIVE
{page(scope, metadata_filter)},
{PAGE_ROWS},
{row_values("'c', 'w'")},
{tree_walk("refs", "vals")}
{CHUNK_ROWS}"""


# Per scope, without and with the metadata filter.
(SELECT_PAGE_THREAD_NS, SELECT_PAGE_THREAD, SELECT_PAGE_ALL, SELECT_PAGE_THREAD_NS_FILTERED,
 SELECT_PAGE_THREAD_FILTERED, SELECT_PAGE_ALL_FILTERED) = (
    q(select_page(scope, where)) for where in ("", METADATA_FILTER)
    for scope in (THREAD_NS, THREAD, ALL))

# The DeltaChannel prefetch sent with each page statement, with the same parameters: what the
# page's DeltaChannels replay from, so that LangGraph's get_delta_channel_history after
# get_tuple/list costs no request. The walk follows parents while some channel is still
# without a seed or a frozen record ending its history (a record with a 'c' row goes on at
# the holder's parent); the channels sought are the page's checkpoints' (parts.sought).
# UNION (not UNION ALL) ends a corrupt parent loop. `visited` holds each checkpoint walked
# with the channels sought on arrival, `holders` those and the page's own (whose frozen
# records end their walks).
DELTA_WALK = f"""walk(thread_id, checkpoint_ns, checkpoint_id, sought) AS (
    SELECT p.thread_id, p.checkpoint_ns, p.parent_checkpoint_id,
           {unended(sought("p"), "p")}
    FROM page AS p
    UNION
    SELECT c.thread_id, c.checkpoint_ns, c.parent_checkpoint_id,
           {unended(still_sought("w.sought", "c"), "c")}
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
)"""

# Rows 'a', 'w', 'k', 'f' (PAGE_COLUMNS). At most 4 terms in a compound SELECT (see
# DELTA_HISTORY).
DELTA_ROWS = f"""out AS (
SELECT 'a' AS kind, thread_id, checkpoint_ns, checkpoint_id, c.parent_checkpoint_id AS ref,
       CASE WHEN {seeds("v.sought", "c.channels")}
            THEN c.metadata END AS metadata,
       NULL AS task_path, NULL AS idx, c.channels AS channels, c.type AS type,
       CASE WHEN {seeds("v.sought", "c.channels")}
            THEN c.checkpoint END AS value
FROM visited AS v JOIN checkpoints AS c USING (thread_id, checkpoint_ns, checkpoint_id)
UNION ALL
SELECT 'w', thread_id, checkpoint_ns, checkpoint_id, w.task_id, NULL, w.task_path, w.idx,
       w.channel, w.type, w.value
FROM visited AS v CROSS JOIN writes AS w USING (thread_id, checkpoint_ns, checkpoint_id)
WHERE {replayed_writes("v.sought")}
UNION ALL
SELECT 'k', thread_id, checkpoint_ns, checkpoint_id, k.owner, NULL, NULL, k.seq, NULL, NULL,
       k.data
FROM holders AS v CROSS JOIN chunks AS k USING (thread_id, checkpoint_ns, checkpoint_id)
WHERE v.sought IS NOT NULL OR substr(k.owner, 1, 2) = 'f/'
UNION ALL
SELECT 'f', thread_id, checkpoint_ns, checkpoint_id,
       {FROZEN_REF},
       f.metadata, NULL, NULL, f.channels, f.type, f.value
FROM holders AS v CROSS JOIN delta_frozen AS f USING (thread_id, checkpoint_ns, checkpoint_id)
WHERE v.sought IS NULL OR f.channel IN (SELECT value FROM json_each(v.sought))
)"""

# The page's own values (`page_out`) and the chunks they reach (`seen`): the prefetch's 'h'
# rows leave those out, the page returns them (read only when the prefetch has chunks of its
# own: on Wrangler's engine, folding it into `refs` read the page's writes every time).
PAGE_VALUES = """page_out(thread_id, v) AS (
    SELECT thread_id, checkpoint FROM page
    UNION ALL
    SELECT thread_id, w.value
    FROM page AS p CROSS JOIN writes AS w USING (thread_id, checkpoint_ns, checkpoint_id)
)"""


def select_page_delta(scope: str, metadata_filter: str = "") -> str:
    return f"""
WITH RECURSIVE
{page(scope, metadata_filter)},
{DELTA_WALK},
{DELTA_ROWS},
{row_values("'a', 'w', 'f'")},
{tree_walk("refs", "vals")},
{PAGE_VALUES},
{tree_walk("seen", "page_out")}
{chunk_rows(where="WHERE NOT EXISTS (SELECT 1 FROM seen AS s WHERE s.thread_id = r.thread_id "
                  "AND s.id = r.id)")}"""


(SELECT_PAGE_DELTA_THREAD_NS, SELECT_PAGE_DELTA_THREAD, SELECT_PAGE_DELTA_ALL,
 SELECT_PAGE_DELTA_THREAD_NS_FILTERED, SELECT_PAGE_DELTA_THREAD_FILTERED,
 SELECT_PAGE_DELTA_ALL_FILTERED) = (
    q(select_page_delta(scope, where)) for where in ("", METADATA_FILTER)
    for scope in (THREAD_NS, THREAD, ALL))
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
_ANCESTOR = """checkpoints AS p ON p.thread_id = :thread_id
        AND p.checkpoint_ns = :checkpoint_ns
        AND p.checkpoint_id = chain.checkpoint_id"""
DELTA_HISTORY = q(f"""
WITH RECURSIVE
target AS (
    SELECT thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id FROM checkpoints
    WHERE thread_id = :thread_id AND checkpoint_ns = :checkpoint_ns AND (:checkpoint_id IS NULL
        OR checkpoint_id = :checkpoint_id)
    ORDER BY checkpoint_id DESC LIMIT 1
),
chain(checkpoint_id, depth, sought) AS (
    SELECT t.parent_checkpoint_id, 1, {unended("json(:channels)", "t")}
    FROM target AS t
    UNION ALL
    SELECT p.parent_checkpoint_id, chain.depth + 1,
           {unended(still_sought("chain.sought", "p"), "p")}
    FROM chain JOIN {_ANCESTOR}
    WHERE json_array_length(chain.sought) > 0 AND chain.depth < 20000
),
ancestors AS (
    SELECT chain.depth, chain.sought, p.checkpoint_id, p.channels, p.type, p.checkpoint,
           p.metadata
    FROM chain JOIN {_ANCESTOR}
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
       CASE WHEN {seeds("a.sought", "a.channels")}
            THEN a.metadata END AS metadata,
       NULL AS task_path, NULL AS idx, a.channels AS channels, a.type AS type,
       CASE WHEN {seeds("a.sought", "a.channels")}
            THEN a.checkpoint END AS value
FROM ancestors AS a
UNION ALL
SELECT 'w', a.depth, w.checkpoint_id, w.task_id, NULL, NULL, w.task_path, w.idx, w.channel,
       w.type, w.value
FROM ancestors AS a JOIN writes AS w ON w.thread_id = :thread_id
    AND w.checkpoint_ns = :checkpoint_ns
    AND w.checkpoint_id = a.checkpoint_id
WHERE {replayed_writes("a.sought")}
UNION ALL
SELECT 'f', h.depth, h.checkpoint_id,
       {FROZEN_REF},
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
{row_values("'a', 'w', 'f'", thread_id=":thread_id")},
{tree_walk("refs", "vals")}
{chunk_rows(thread_id="NULL")}""")

# Columns of DELTA_HISTORY, per row kind (every row but 'h' has its depth on the walk):
#   'a' ancestor: checkpoint_id, sought (the channels still sought on arrival), channels,
#                 type, and metadata and value the checkpoint only if it is a seed
#   'w' write:    checkpoint_id, ref task_id, task_path, idx, channels the channel, type, value
#   'k' piece:    checkpoint_id, ref owner, idx seq, value the piece's text
#   'f' frozen:   checkpoint_id (the holder), ref the identity of the row the value came from,
#                 metadata, channels, type, value
#   'h' chunks:   value their ids and data (chunk_rows)
DELTA_HISTORY_COLUMNS = ("kind", "depth", "checkpoint_id", "ref", "sought", "metadata",
                         "task_path", "idx", "channels", "type", "value")

# Every statement of this module, named by its identifier, in definition order.
STATEMENTS: list[Query] = name_queries(globals())
