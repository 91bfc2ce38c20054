"""Named parts of SQL that statements of several concerns share, each written once.

A part is a piece of text, or a function of the aliases and columns it joins (constants of the
statement that uses it, never a value from a caller), joined into statements when their module
loads. What D1 receives is the statement whole (tests/sql/statements.snapshot.sql); read one
composed, laid out as written, with `python -m d1saver.sql NAME` (docs/SQL.md).
Pure text; imports nothing else of d1saver.
"""

from __future__ import annotations

# --- the tables' columns, in table order -------------------------------------------------------

CHECKPOINT_COLUMNS = ("thread_id", "checkpoint_ns", "checkpoint_id", "parent_checkpoint_id",
                      "type", "checkpoint", "metadata", "channels", "run_id", "ts")
WRITE_COLUMNS = ("thread_id", "checkpoint_ns", "checkpoint_id", "task_id", "task_path", "idx",
                 "channel", "type", "value")
TABLE_COLUMNS: dict[str, tuple[str, ...]] = {
    "d1saver_chunks": ("thread_id", "id", "level", "data"),
    "checkpoints": CHECKPOINT_COLUMNS,
    "writes": WRITE_COLUMNS,
    "chunks": ("thread_id", "checkpoint_ns", "checkpoint_id", "owner", "seq", "data"),
    "tags": ("thread_id", "checkpoint_ns", "checkpoint_id", "name", "created_at"),
    "delta_unwritten": ("thread_id", "checkpoint_ns", "checkpoint_id", "channels"),
    "delta_frozen": ("thread_id", "checkpoint_ns", "checkpoint_id", "channel", "kind", "depth",
                     "task_id", "idx", "src_checkpoint_id", "task_path", "type", "value",
                     "metadata", "channels", "parent"),
}


def column_list(columns: tuple[str, ...], prefix: str = "") -> str:
    """`a, b, c` (prefix ':' names the parameters of the same names)."""
    return ", ".join(prefix + c for c in columns)


def insert_values(verb: str, table: str, columns: tuple[str, ...]) -> str:
    """INSERT OR `verb` of one row, each column bound to the parameter of its name."""
    return (f"INSERT OR {verb} INTO {table} ({column_list(columns)})\n"
            f"VALUES ({column_list(columns, ':')})")


# Unix seconds on the database's clock (leases, records, staged rows: clients' clocks need not
# agree).
NOW = "CAST(strftime('%s', 'now') AS INTEGER)"

# --- which threads ------------------------------------------------------------------------------

# Thread ids arrive as a JSON array of the hex of their UTF-8: a JSON decoder that stops at
# "\u0000" (SQLite 3.40's, the local D1's) cannot cut an id short.
THREAD_IDS = "(SELECT CAST(unhex(value) AS TEXT) FROM json_each(:thread_ids))"
# The threads a maintenance batch works on (d1saver_scope, filled first in the batch).
IN_SCOPE = "thread_id IN (SELECT thread_id FROM d1saver_scope)"


def not_staged(thread_id: str = "thread_id") -> str:
    """A thread that is not rows staged under a hidden id (d1saver/fleet/routing.py prefixes)."""
    return f"substr({thread_id}, 1, 9) <> char(31) || 'd1saver-'"


# --- stored values: manifests, packs, pieces ---------------------------------------------------
#
# A manifest ("m:" then entries joined by ',') lists a value's content-addressed chunks: its
# entries are read as a JSON array by wrapping them in quotes, which is exact because entries
# never hold ',', '"' or '\\' (d1saver/storage/manifest.py). An entry names a chunk (its id,
# after an optional '^') unless it holds ':' (a codec text inline). A pack ("p:" then a JSON
# array) holds one put_writes call's regular writes as [idx, channel, type, value], each of
# which may be a manifest. A tree node (d1saver_chunks.level > 0) holds its children's entries
# joined by ','.

# The chunk id an entry `j` names, and whether it names one.
CHUNK_ID = "ltrim(j.value, '^')"
NAMES_A_CHUNK = "instr(j.value, ':') = 0"


def manifest_pieces(value: str) -> str:
    """json_each over the entries of `value` if it is a manifest, else over nothing."""
    return f"""json_each(CASE WHEN substr({value}, 1, 2) = 'm:'
        THEN '["' || replace(substr({value}, 3), ',', '","') || '"]' ELSE '[]' END)"""


def packed_writes(value: str) -> str:
    """json_each over the writes of `value` if it is a pack, else over nothing."""
    return f"""json_each(CASE WHEN substr({value}, 1, 2) = 'p:'
        THEN substr({value}, 3) ELSE '[]' END)"""


def write_entries(w: str, single: str) -> str:
    """json_each over write row `w` as [idx, channel, type, value] entries: a pack's writes,
    or the row itself as one entry of the columns `single`."""
    return (f"json_each(CASE WHEN substr({w}.value, 1, 2) = 'p:' THEN substr({w}.value, 3)\n"
            f"    ELSE json_array(json_array({single})) END)")


def node_children(data: str) -> str:
    """json_each over the entries of a tree node's `data`."""
    return f"""json_each('["' || replace({data}, ',', '","') || '"]')"""


def tree_walk(name: str, values: str) -> str:
    """The CTE `name(thread_id, id)`: every chunk the values of the CTE `values(thread_id, v)`
    reach, through their manifests, the manifests of their packs' writes and the nodes under
    them, opened level by level. UNION: each chunk once, however many values list it."""
    return f"""{name}(thread_id, id) AS (
    SELECT o.thread_id, {CHUNK_ID}
    FROM {values} AS o, {manifest_pieces("o.v")} AS j
    WHERE {NAMES_A_CHUNK}
    UNION
    SELECT o.thread_id, {CHUNK_ID}
    FROM {values} AS o, {packed_writes("o.v")} AS w,
        {manifest_pieces("w.value->>3")} AS j
    WHERE {NAMES_A_CHUNK}
    UNION
    SELECT r.thread_id, {CHUNK_ID}
    FROM {name} AS r CROSS JOIN d1saver_chunks AS n USING (thread_id, id),
        {node_children("n.data")} AS j
    WHERE n.level > 0
)"""


# The owner of a write's pieces, of a frozen value's pieces (held by its holder).
def write_owner(w: str) -> str:
    return f"{w}.task_id || '/' || {w}.idx"


FROZEN_OWNER = ("'f/' || f.src_checkpoint_id || '/'\n"
                "                      || CASE f.kind WHEN 'w' THEN f.task_id || '/' || f.idx "
                "ELSE '' END")


def stored_head(row: str, column: str, owner: str) -> str:
    """The text a value of `row` begins with: the column, or its first piece when the row
    holds a "c:" marker (values over D1's row limit). A sealed text's head names its key."""
    return f"""CASE WHEN substr({row}.{column}, 1, 2) = 'c:' THEN (
    SELECT k.data FROM chunks AS k WHERE k.thread_id = {row}.thread_id
        AND k.checkpoint_ns = {row}.checkpoint_ns AND k.checkpoint_id = {row}.checkpoint_id
        AND k.owner = {owner} AND k.seq = 0) ELSE {row}.{column} END"""


# --- DeltaChannel walks ---------------------------------------------------------------------
#
# LangGraph replays a DeltaChannel from the writes since its last snapshot: a walk follows
# parent links from a checkpoint, carrying the JSON array of channels still sought, until each
# has a seed (a checkpoint whose `channels` holds it) or a frozen record that ends its history
# (delta_frozen with no 'c' row for it: FREEZE).


def sought(c: str) -> str:
    """The channels checkpoint `c` replays from history: the keys of its metadata's
    counters_since_delta_snapshot it holds no value of and that have been written (not in
    delta_unwritten: LangGraph replays only channels in channel_versions)."""
    return f"""(SELECT json_group_array(d.key)
     FROM json_each({c}.metadata, '$.counters_since_delta_snapshot') AS d
     WHERE d.key NOT IN (SELECT value FROM json_each({c}.channels))
       AND d.key NOT IN (
            SELECT u.value FROM delta_unwritten AS x, json_each(x.channels) AS u
            WHERE x.thread_id = {c}.thread_id AND x.checkpoint_ns = {c}.checkpoint_ns
              AND x.checkpoint_id = {c}.checkpoint_id))"""


def still_sought(channels: str, c: str) -> str:
    """The `channels` that checkpoint `c` does not seed."""
    return f"""(SELECT json_group_array(s.value)
            FROM json_each({channels}) AS s
            WHERE s.value NOT IN (SELECT value FROM json_each({c}.channels)))"""


def unended(channels: str, c: str) -> str:
    """The `channels` whose history no frozen record held by checkpoint `c` ends."""
    return f"""(SELECT json_group_array(s.value) FROM json_each({channels}) AS s
     WHERE s.value NOT IN (SELECT f.channel FROM delta_frozen AS f
                           WHERE f.thread_id = {c}.thread_id AND f.checkpoint_ns = {c}.checkpoint_ns
                             AND f.checkpoint_id = {c}.checkpoint_id
                           GROUP BY f.channel HAVING SUM(f.kind = 'c') = 0))"""


def seeds(channels: str, held: str) -> str:
    """Whether a checkpoint holding the values of `held` seeds one of `channels`."""
    return (f"EXISTS (SELECT 1 FROM json_each({channels}) AS s\n"
            f"                         WHERE s.value IN (SELECT value FROM json_each({held})))")


def replayed_writes(channels: str) -> str:
    """Whether write `w` is one of `channels`' (or a pack, which may hold one)."""
    return (f"(w.channel IN (SELECT value FROM json_each({channels})) "
            "OR substr(w.value, 1, 2) = 'p:')")


# The identity of the row a frozen value came from, as readers take it.
FROZEN_REF = ("json_array(f.kind, f.src_checkpoint_id, f.task_id, f.task_path, f.idx, f.channel, "
              "f.depth)")
