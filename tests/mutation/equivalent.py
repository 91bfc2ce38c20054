"""Surviving mutants judged equivalent: no input tells them from the code as written.

`RULES` name them by what they change: the statements (a glob of names) or the function, the
operator, and the text changed; each with the reason. `EQUIVALENT` names single mutants by
their stable id (`./dev mutate` prints it). A rule keeps matching when the statement moves to
another module (the names stay); an id stops matching when its statement or function changes,
and the mutant is then counted again until someone looks at it afresh.
"""

from __future__ import annotations

import fnmatch
import re
from typing import Any

from d1saver.sql.transfers import TRANSFER_TABLES

# sql/memory.py's _KEPT as sent (minified), for {t} the table's prefix.
_KEPT = ("(CASE WHEN substr({t}value,1,1)<>'{{' THEN 1 ELSE NOT EXISTS(SELECT 1 FROM equals e "
         "WHERE CASE e.k WHEN 'text' THEN json_extract({t}value,e.p)IS NOT e.a ELSE "
         "coalesce(instr(e.a,'|'||({t}value ->e.p)||'|'),0)=0 AND json_type({t}value,e.p)"
         "IS NOT 'real' END)END)")

# (statements, or module:function, as a glob; the operator; for a drop, the text dropped
# (separators aside), else a text of the change as printed (`where`); the reason; and, if
# given, a text the change's context as printed must hold)
RULES: list[tuple[str, ...]] = [
    # UNPACK_TARGET_DROP (and the rename's copy): a pack row sits at its first write's idx
    # (d1saver_put_writes: json_extract(regular, '$[0][0]')), so a target pack of a task the
    # source has is, after UNPACK_TARGET_PACKS, either replaced by its first write unpacked
    # (INSERT OR REPLACE at that idx) or at an idx the source has, which has_write(t.idx)
    # deletes: the 'p:' arm never finds a row the other arm leaves.
    *((name, "drop-or", "substr(t.value,1,2)='p:'",
       "a pack left after the unpacking sits at an idx the source has: the other arm deletes it")
      for name in ("UNPACK_TARGET_DROP", "RENAME_UNPACK_DROP")),
    # The page of one thread (or one namespace) orders by (checkpoint_id, thread_id,
    # checkpoint_ns) as the page of every thread does, for one cursor shape; its WHERE fixes
    # the thread (and the namespace) by equality.
    ("SELECT_PAGE_*THREAD*", "swap-dir", "thread_id [DESC->ASC]",
     "the direction of thread_id, which the WHERE fixes (thread_id = :thread_id)"),
    ("SELECT_PAGE_*THREAD_NS*", "swap-dir", "checkpoint_ns [DESC->ASC]",
     "the direction of checkpoint_ns, which the WHERE fixes (= :checkpoint_ns)"),
    # list(None) names no checkpoint: the page of every thread always has :checkpoint_id NULL
    # (d1saver/ops/operations.py, list_pages; get_tuple always names a thread).
    ("SELECT_PAGE_*ALL*", "drop-and", "(?5 IS NULL OR checkpoint_id=?5)",
     "(:checkpoint_id IS NULL OR ...) is always true: list(None) names no checkpoint"),
    ("SELECT_PAGE_*ALL*", "drop-or", "checkpoint_id=?5",
     "(:checkpoint_id IS NULL OR ...) is always true: list(None) names no checkpoint"),
    # Manifest entries holding ':' are inline pieces; chunk ids (base85, "." for "^") never
    # hold one, so the filter only spares the join with d1saver_chunks a lookup that finds
    # nothing.
    ("*", "drop-where", "WHERE instr(j.value,':')=0",
     "an inline piece (it holds ':') never names a chunk: the join finds nothing for it"),
    # A leaf's data is one codec text ("b:" or "r:" and base85: no ',' and no '"'), so read
    # as a list of children it is one entry holding ':', which names no chunk.
    ("*", "drop-where", "WHERE n.level>0",
     "a leaf's data read as a node's list is one entry holding ':': it names no chunk"),
    # Levels count up from 0 (a leaf): level >= 0 lets every node through, as dropping the
    # WHERE does.
    ("*", "flip-cmp", "n.level[>->>=]0",
     "no level is below 0: >= 0 lets leaves in as dropping the WHERE does; a leaf's data "
     "read as a node's list is one entry holding ':': it names no chunk"),
    # Chunk ids name their content (and their kind) whatever the thread, so a node looked up
    # by id alone, in another thread, lists the same children: the same rows come out, but
    # the lookup no longer uses the key (thread_id, id) and reads other threads' rows.
    ("*", "drop-using", "thread_id",
     "cost only: a chunk id names the same content in every thread (rows read, not results)",
     "d1saver_chunks n USING([-thread_id,-]id)"),
    ("*", "drop-using", "thread_id",
     "cost only: a chunk id names the same content in every thread (rows read, not results)",
     "d1saver_chunks k USING([-thread_id,-]id)"),
    # A rekey's raw page walks chunks (with :content 1) only to hand each value of the page a
    # lookup by id within its thread (ops/reseal.py: content[thread][id]; collect_content
    # goes by thread, not by the ids returned). The walk's step joined by thread alone opens
    # every node of the thread, not only the reached ones: a superset of the reached chunks,
    # of the same thread, with the same data per id, so every lookup finds what it found.
    ("RAW_*_ALL", "drop-using", "id",
     "cost only: the rekey's chunk walk joined by thread alone reaches a superset of the "
     "thread's chunks; they serve only a lookup by id within the thread",
     "_chunks n USING(thread_id[-,id-])"),
    # The page's pieces of frozen histories ('f/' owners) are read by no value of the page
    # (its owners are '', ':metadata' and 'task/idx'): results equal; only bytes differ, on a
    # compacted thread whose frozen values are over 1.8 MB.
    ("SELECT_PAGE_*", "drop-where", "WHERE NOT substr(k.owner,1,2)='f/'",
     "cost only: frozen pieces are read by no value of the page (bytes, not results)"),

    # The pages of one thread (or one namespace) hold one thread: the DeltaChannel walk's
    # `visited` and the 'h' rows' groups (GROUP BY thread_id, part) need no thread_id.
    ("SELECT_PAGE_*THREAD*", "drop-group-term", "thread_id,",
     "the page holds one thread (thread_id = :thread_id): grouping by it splits nothing"),
    ("SELECT_PAGE_DELTA_*THREAD_NS*", "drop-group-term", ",checkpoint_ns",
     "the page holds one namespace (checkpoint_ns = :checkpoint_ns): grouping by it splits "
     "nothing"),
    # The prefetch's walk step joined by namespace alone reaches every checkpoint of the
    # namespace from every walk row: the true walk's rows are among them (the join keeps
    # c = the walk row's checkpoint), and readers follow parent links from the page's
    # checkpoints, so the rows off those paths, and the extra channels sought at a checkpoint
    # on one (its seeds' values, more writes), are read and left. (Not so the page's own
    # writes, `page_out`: there a wider join hides chunks the page never sent.)
    ("SELECT_PAGE_DELTA_*", "drop-using", "checkpoint_id",
     "cost only: the walk joined by namespace reads a superset of the true walk's rows; "
     "readers follow parent links from the page's checkpoints",
     "[-,checkpoint_id-])WHERE json_array_length("),
    # The page's walk on with nothing sought (to the root) adds only rows `visited` drops:
    # it reads each walk row's channels through json_each(walk.sought), which yields no row
    # for []; the UNION still ends it (a parent loop repeats the same row).
    *((("SELECT_PAGE_DELTA_*", kind, text,
        "cost only: a walk on with nothing sought adds rows `visited` drops (json_each of [] "
        "yields none); the UNION still ends it")
       for kind, text in (("flip-cmp", "(w.sought)[>->>=]0"),
                          ("drop-where", "WHERE json_array_length(w.sought)>0")))),
    # The prefetch's ancestors ('a' rows) carry their checkpoint and metadata only when they
    # hold a channel sought there: the reader (ops/rows.py: histories_from_walk) opens an
    # ancestor's value only for a channel in its `channels` that its walk still seeks, which
    # is then in `visited.sought`; a value sent for any other ancestor is never opened.
    ("SELECT_PAGE_DELTA_*", "drop-where", "WHERE s.value IN(SELECT value FROM json_each(c.channels))",
     "cost only: the reader opens an ancestor's value only for a sought channel it holds, "
     "where the CASE sends it anyway"),
    # CHECKPOINT_IDS: the range [:prefix, :upper) (:upper the prefix with its last character's
    # successor, surrogates skipped: inspection.checkpoint_ids) holds exactly the ids that
    # start with :prefix, as text compares by code point (UTF-8 bytes); the substr states
    # the same rule. Each alone decides (so :upper itself may pass the range: substr stops
    # it); the range lets the primary key seek. And
    # checkpoint_ids sorts what it reads and keeps `limit` itself.
    *(("CHECKPOINT_IDS", kind, text,
       "the range [:prefix, :upper) and substr(...) = :prefix each select exactly the ids "
       "starting with :prefix (UTF-8 sorts by code point; :upper is the last character's "
       "successor)")
      for kind, text in (("drop-and", "checkpoint_id>=?3"), ("drop-and", "checkpoint_id<?4"),
                         ("drop-and", "substr(checkpoint_id,1,length(?3))=?3"),
                         ("flip-cmp", "checkpoint_id[<-><=]?4"))),
    # The trigger delta_frozen_bound (migration 9) sets a checkpoint's parent to a scalar
    # subquery's value: SQLite takes a subquery used as an expression to its first row by
    # giving it LIMIT 1 itself (sqlite.org/lang_expr.html, "Subquery Expressions"), so the
    # LIMIT 1 written there changes neither the scan nor the row taken (EXPLAIN of both: one
    # counter set to 1, the same loop, left after its first row).
    ("SCHEMA*", "drop-limit", "LIMIT 1",
     "a scalar subquery (parent_checkpoint_id = (SELECT f.parent ...)) is its first row: "
     "SQLite limits it to one row itself", "-LIMIT 1-])WHERE thread_id=NEW.thre"),
    ("CHECKPOINT_IDS", "drop-limit", "LIMIT ?5",
     "inspection.checkpoint_ids, its one reader, sorts the ids read and keeps `limit` itself"),
    # DELTA_HISTORY's pieces come keyed by their own checkpoint, owner and seq, and a value
    # is joined from them by seq (d1saver/storage/values.py: _join): joined to every holder
    # of the namespace, a piece comes more than once and means the same.
    ("DELTA_HISTORY", "drop-and", "k.checkpoint_id=h.checkpoint_id",
     "cost only: pieces are keyed by their own checkpoint, owner and seq; one met twice "
     "is joined once (by seq)"),
    # DELTA_HISTORY reads one thread: its chunks ('h', through vals of :thread_id) are of it.
    ("DELTA_HISTORY", "drop-group-term", "thread_id,",
     "the history is of one thread (:thread_id): grouping its chunks by it splits nothing"),
    # The walk's rows whose sought channels are empty add rows only to `chain`: `ancestors`
    # (and through it `holders` and every row returned) keeps only those still seeking.
    ("DELTA_HISTORY", "drop-and", "json_array_length(chain.sought)>0",
     "cost only: a walk on with nothing sought yields chain rows `ancestors` drops "
     "(it keeps json_array_length(chain.sought) > 0); depth still bounds it",
     "chain.depth<20000"),
    # A walk goes past depth 20000 only round a corrupt parent loop: LangGraph snapshots a
    # DeltaChannel within DELTA_MAX_SUPERSTEPS_SINCE_SNAPSHOT super-steps (5000 by default),
    # so a true chain meets a seed first. Round a loop, the one step more repeats a
    # checkpoint already walked, where rows.delta_history stops (`if cid in seen: break`).
    ("DELTA_HISTORY", "flip-cmp", "chain.depth[<-><=]20000",
     "one walk step more only round a corrupt parent loop (a seed comes within 5000 steps): "
     "it repeats a checkpoint walked already, where the reader stops"),
    # The target's own pieces (depth 0, owners '', ':metadata', a write's) are read by
    # nothing: at depth 0 the reader loads only the target's frozen records, from their 'f/'
    # pieces (rows.delta_history: take(0)); the target is no ancestor of itself.
    ("DELTA_HISTORY", "flip-cmp", "h.depth[>->>=]0",
     "cost only: the target's own pieces are read by no row of its history (at depth 0 only "
     "its frozen records' 'f/' pieces are)"),
    # `visited` without `checkpoint_id IS NOT NULL` holds the walk's step past the root
    # (parent NULL) too: joined USING (..., checkpoint_id), NULL matches no checkpoint,
    # write, piece nor frozen row, so no row comes of it.
    ("SELECT_PAGE_DELTA_*", "drop-where", "WHERE checkpoint_id IS NOT NULL",
     "the walk's step past the root (checkpoint_id NULL) joins no row: USING compares with "
     "=, which NULL never meets"),
    # The one-thread raw pages' pieces are keyed by the piece's own (thread, namespace, id)
    # and attached only to a row of the page (d1saver/ops/reseal.py: raw_checkpoints,
    # raw_writes, raw_frozen): a piece of another thread's row is met and dropped.
    ("RAW_*_THREAD", "drop-and", "k.thread_id=p.thread_id",
     "cost only: a piece of another thread is keyed to a row the one-thread page does not "
     "hold, and dropped by the reader"),
    ("RAW_FROZEN_THREAD", "drop-and", "k.thread_id=h.thread_id",
     "cost only: a piece of another thread is keyed to a row the one-thread page does not "
     "hold, and dropped by the reader"),
    # Nor does a copy care whose pieces come with a row of its page: each piece comes keyed by
    # its own row, and a value is joined from its owner's pieces by seq (d1saver/storage/
    # values.py: _join), so a piece met twice is joined once. (Rekey's pages, ..._ALL, are
    # not so: its guard fingerprints the pieces read.)
    *((name, "drop-and", f"k.{column}={alias}.{column}",
       "cost only: pieces come keyed by their own row and are joined by seq: a copy joins a "
       "piece met twice once")
      for name, alias in (("RAW_CHECKPOINTS_THREAD", "p"), ("RAW_WRITES_THREAD", "p"),
                          ("RAW_FROZEN_THREAD", "h"))
      for column in ("checkpoint_ns", "checkpoint_id")),
    # A frozen 'c' row (the history goes on at the holder's parent) holds no value: FREEZE
    # writes its type, value, metadata and channels NULL, and copies keep them (ops/reseal.py:
    # copy_frozen). Where `kind <> 'c'` stands beside `value IS NOT NULL`, the latter decides.
    *((name, "drop-and", text,
       "a 'c' row's value is NULL: `value IS NOT NULL` beside it already leaves it out",
       "value IS NOT NULL")
      for name in ("STAGED_VALUES", "KEY_CENSUS", "RAW_FROZEN_*")
      for text in ("kind<>'c'", "f.kind<>'c'")),

    # LEAVE_UNLESS_SAME_<table> compares both ways after LEAVE_SCOPE found the read row count
    # in both (see EQUIVALENT below): any one column comparison dropped weakens one direction
    # only, and the other, with equal counts of rows distinct by key, proves the sets equal.
    *(("LEAVE_UNLESS_SAME_*", "drop-and", f"b.{c} IS a.{c}",
       "one direction of a two-way comparison, weakened: the other, with equal row counts, "
       "is exact (rows are distinct by key)")
      for c in sorted({c for keys, rest in TRANSFER_TABLES.values() for c in keys + rest})),

    # The same for the thread of the rows sought (b.thread_id) in one direction: rows of any
    # thread found identical weaken that direction only; the other, exact, with equal counts
    # of rows distinct by key, still proves the two threads' rows equal. (The outer
    # a.thread_id is another matter: see EQUIVALENT below.)
    *(("LEAVE_UNLESS_SAME_*", "drop-and", f"b.thread_id=?{n}",
       "one direction of a two-way comparison, weakened: the other, with equal row counts, "
       "is exact (rows are distinct by key)") for n in (1, 2)),

    # FREEZE_PIECES' second arm copies pieces held by another holder; let through, a piece
    # of the holder itself is the very row it would insert (same thread, namespace,
    # checkpoint, owner and seq), which INSERT OR IGNORE leaves as it is.
    ("FREEZE_PIECES", "drop-and", "k.checkpoint_id<>f.checkpoint_id",
     "cost only: a piece of the holder itself would be inserted onto itself: OR IGNORE "
     "leaves it"),

    # A chunk walk (parts.tree_walk) whose arms are joined by UNION ALL returns a chunk once per
    # way it is reached (content ids admit no cycle, so the walk still ends): the readers keep
    # chunks by id (d1saver/storage/manifest.py: Chunks; ops/reseal.py: content), so only the
    # bytes sent grow.
    *((name, "union-all", "[UNION->UNION ALL] SELECT",
       "cost only: a chunk reached twice comes twice; readers keep chunks by id",
       "nstr(j.value,':')=0 [UNION->UNION ALL] SELECT")
      for name in ("SELECT_PAGE_*", "DELTA_HISTORY", "RAW_*_ALL")),
    # GROWTH's first-reached chunks are joined with d1saver_chunks by id before they count
    # (and before the walk opens them): an inline piece (it holds ':') let through joins
    # nothing. (Not so in CHUNK_CHECK, which counts reached ids that are not stored.)
    ("GROWTH", "drop-and", "instr(j.value,':')=0",
     "an inline piece (it holds ':') never names a chunk: the join finds nothing for it"),
    ("GC_CHUNKS", "drop-and", "instr(j.value,':')=0",
     "an inline piece (it holds ':') never names a chunk: NOT IN never meets it"),
    # GC_CHUNKS deletes chunks of the scope's threads whose (thread_id, id) is not reached:
    # reaching the rows of threads outside the scope too adds pairs of those threads only.
    ("GC_CHUNKS", "drop-and", "c.thread_id IN(SELECT thread_id FROM d1saver_scope)",
     "cost only: `reached` pairs each id with its thread; other threads' pairs match no chunk "
     "of the scope"),
    ("GC_CHUNKS", "drop-and", "w.thread_id IN(SELECT thread_id FROM d1saver_scope)",
     "cost only: `reached` pairs each id with its thread; other threads' pairs match no chunk "
     "of the scope"),
    ("GC_CHUNKS", "drop-and", "f.thread_id IN(SELECT thread_id FROM d1saver_scope)",
     "cost only: `reached` pairs each id with its thread; other threads' pairs match no chunk "
     "of the scope"),
    ("GC_CHUNKS", "drop-and", "n.level>0",
     "a leaf's data read as a node's list is one entry holding ':': NOT IN never meets it"),
    # GROWTH's walk from a leaf reaches that one entry, and only rows joined with
    # d1saver_chunks by id count (or are opened): an id holding ':' joins nothing.
    ("GROWTH", "drop-and", "n.level>0",
     "a leaf's data read as a node's list is one entry holding ':': it names no chunk"),
    # GROWTH reads `reached` only grouped by id (the first checkpoint to reach each).
    ("GROWTH", "union-all", "[UNION->UNION ALL]",
     "`reached` is only read grouped by id: duplicates change nothing"),
    # GC_CHUNKS deletes the chunks of the scope NOT IN `reached`: a duplicate row in it
    # changes nothing (ids name their content, so no tree node lists itself: the walk ends).
    ("GC_CHUNKS", "union-all", "[UNION->UNION ALL]",
     "`reached` is only read by NOT IN: duplicates change nothing"),

    # PLAN_RELINK's walk starting from every checkpoint of a namespace that keeps one, not
    # from the kept ones only, also relinks checkpoints that are not kept: the same batch
    # deletes them (DELETE_UNKEPT_CHECKPOINTS spares none, and their frozen rows go with
    # them), after the summary and the freeze have read the parents. Rows of kept ones are
    # the same (the walk's UNION drops the duplicates).
    ("PLAN_RELINK", "drop-and", "c.checkpoint_id=k.checkpoint_id",
     "cost only: the extra relinked checkpoints are not kept, and the batch deletes them"),
    # Joined without the namespace, a kept checkpoint also starts a walk from the checkpoints
    # of its thread under the same id in other namespaces: those that are kept start their
    # own walk anyway (the same rows: UNION), and the others are not kept, so the same batch
    # deletes them (their thread is in scope: d1saver_keep holds only threads in scope).
    ("PLAN_RELINK", "drop-and", "c.checkpoint_ns=k.checkpoint_ns",
     "cost only: a checkpoint of another namespace under a kept id is kept (its own walk) or "
     "deleted by the batch"),
    # d1saver_relink is emptied before the walk fills it (CLEAR_SCRATCH), and its GROUP BY
    # gives one row per key: there is never a row to replace.
    ("PLAN_RELINK", "conflict", "[REPLACE->IGNORE]",
     "one row per key, into a table emptied first: nothing to replace"),
    # Every column of the scratch tables d1saver_scope (thread_id) and d1saver_keep (thread,
    # namespace, checkpoint id) is its primary key, and no trigger is on them: a row that
    # conflicts is the very row already there, so replacing it and keeping it leave the same.
    *(("*", "conflict", "[IGNORE->REPLACE]",
       f"every column of {table} is its key: a conflicting row is the row already there",
       f"[IGNORE->REPLACE] INTO {table}(")
      for table in ("d1saver_scope", "d1saver_keep")),
    # PLAN_THREADS names its threads (no LIMIT): the order of `listed` is not read; each
    # thread's n comes from ROW_NUMBER() OVER (ORDER BY c.thread_id), and the plan's rows
    # are ordered by n.
    ("PLAN_THREADS", "swap-dir", "ORDER BY c.thread_id[-> DESC]),judged",
     "the page of named threads has no LIMIT: n is numbered by its own window order"),

    # The plan's packing walk (_PLAN): p.cur < 0 until the first thread that needs work, which
    # always opens batch 0 (cur 0); before it, load and size are still 0. So where a new
    # batch sets load to w.weight and size to 1, and an old one adds them to p.load and
    # p.size, `p.cur < 0` picks between equal values.
    *((name, "drop-or", "p.cur<0",
       "before the first thread with work, load and size are 0: a new batch and an added one "
       "give the same", f"THEN p.{column} WHEN([-p.cur<0 OR -]")
      for name in ("PLAN_THREADS", "PLAN_PAGE") for column in ("load", "size")),
    # A sweep deletes rows whose expires_at is at most a time: for a row without a TTL
    # (expires_at NULL) `expires_at <= t` is NULL, never true, with or without the NULL test.
    ("SWEEP_*", "drop-and", "expires_at IS NOT NULL",
     "NULL <= t is never true: a row without a TTL is never swept either way"),
    # The cache summary counts as expired the entries whose expires_at is at most :now, by the
    # same test: an entry without a TTL is counted 0 either way (CASE's ELSE).
    ("CACHE_SUMMARY", "drop-and", "expires_at IS NOT NULL",
     "NULL <= :now is never true: an entry without a TTL is counted 0 either way"),
    # D1Store lists namespaces as a set, sorted and paged in Python (memory/store.py, _list):
    # the order SQL returns them in is never read.
    # RECORD_PLAN stores the plan's summary as a JSON array; its readers are RECORDED_PLAN,
    # which sorts the rows by their thread_id (unique: d1saver_scope's primary key; the name
    # can only be its own alias, json_each and d1saver_ops having no such column), and
    # RUN_ADD_BATCH, which counts and sums them: the array's order is never seen.
    ("RECORD_PLAN", "swap-dir", "ORDER BY s.thread_id[-> DESC]",
     "the record is read back sorted by thread_id (RECORDED_PLAN) or counted and summed "
     "(RUN_ADD_BATCH): the array's order is never seen"),
    ("LIST_NAMESPACES", "swap-dir", "ORDER BY ns[-> DESC]",
     "the store sorts the namespaces itself (a set, sorted, then paged in Python)"),
    # json_each(NULL) is an empty table and `x NOT IN (empty)` is true, NULL x included: with
    # :heads NULL the head test keeps every row with or without `:heads IS NULL OR`.
    ("RAW_ITEMS", "drop-or", "?3 IS NULL",
     "with :heads NULL, NOT IN (SELECT value FROM json_each(NULL)) is true for every row"),
    ("RAW_ENTRIES", "drop-or", "?3 IS NULL",
     "with :heads NULL, NOT IN (SELECT value FROM json_each(NULL)) is true for every row"),

    # A filter's verdict (memory.py, _VERDICT): where the path is absent, json_type, the value
    # and its text are all NULL, so every later arm of "num" and "cmp" is NULL and the CASE
    # falls to ELSE 0, the verdict `d.type IS NULL OR` gives at once.
    ("*", "drop-or", "d.type IS NULL",
     "an absent path's NULL type, value and text make every later arm NULL: ELSE 0, as before",
     "-]d.type NOT IN("),

    # The "num" arm's first test is a shortcut: the arms after it give 0 to every other JSON
    # type as well (a string's, an object's, a list's or null's JSON text is never one of the
    # operand's number texts "|1|1.0|true|", and only a real has the margin).
    ("*", "drop-when", "WHEN d.type IS NULL OR d.type NOT IN('integer','real','true','false')"
     "THEN 0", "the later arms of \"num\" give every JSON type but a number or bool 0 too",
     "WHEN 'num' THEN CASE [-WHEN d.type IS NULL"),
    ("*", "drop-or", "d.type NOT IN('integer','real','true','false')",
     "the later arms of \"num\" give every JSON type but a number or bool 0 too",
     "-]THEN 0 WHEN instr(d.a,"),
    # A memory scope's range (sql/memory.py, _SCOPE): :low is the prefix's text up to
    # `,"` and :high up to `,#` (memory/namespaces.scope), neither of them a namespace's text
    # (always a whole JSON array, closed by `]`), so no ns equals a bound: >= and >, < and <=
    # select the same rows.
    ("*", "flip-cmp", "OR(ns[>=->>]?", "no namespace's text equals :low (an unclosed array)"),
    ("*", "flip-cmp", "OR(s.ns[>=->>]?", "no namespace's text equals :low (an unclosed array)"),
    ("*", "flip-cmp", " AND ns[<-><=]?", "no namespace's text equals :high (an unclosed array)"),
    ("*", "flip-cmp", " AND s.ns[<-><=]?", "no namespace's text equals :high (an unclosed array)"),
    # The refresh of a filtered page: `counted` holds rows of verdict 1 or 2 only, and a row
    # of verdict 1 counts itself in unsure_upto, so `unsure_upto = 0` holds only where the
    # verdict is 2.
    ("REFRESH_SEARCH_FILTERED", "drop-and", "verdict=2",
     "unsure_upto = 0 implies verdict 2: a row of verdict 1 counts itself in unsure_upto"),
    # The refresh of a filtered page writes rows of verdict 2 only, and rows of verdict 0 count
    # in neither sure_before (verdict 2) nor unsure_upto (verdict 1): letting them into
    # `counted` changes no row written.
    ("REFRESH_SEARCH_FILTERED", "drop-where", "WHERE verdict>0",
     "rows of verdict 0 count in neither window count and the refresh writes verdict 2 only"),
    # "cmp": an operand's texts ("a") are float reprs (a '.', an 'e'); an integer's or a
    # bool's JSON text is never one of them, and a string is decided by the arm before.
    ("*", "drop-and", "d.type='real'",
     "no integer's or bool's JSON text is a float repr: only a real's can be in \"a\"",
     "[-d.type='real' AND -]instr(d.a,"),
    # "numtype": json_extract gives an SQL integer only for a JSON integer of 64 bits and for
    # true and false (1, 0), which the arm's first test takes already: `typeof(d.x) =
    # 'integer'` alone implies `d.type = 'integer'` wherever the test is reached.
    ("*", "drop-and", "d.type='integer'",
     "json_extract is an SQL integer only for a JSON integer or a bool (taken before)",
     "OR([-d.type='integer' AND -]typeof(d.x)='integer')"),
    # LIMIT -1 is no limit: it only keeps SQLite from flattening the verdict's subqueries into
    # the CASE (each condition then reads the row's JSON once); the rows are the same.
    ("*", "drop-limit", "LIMIT -1", "speed only: LIMIT -1 is no limit (it stops the flattening)"),
    # A condition SQL cannot tell is 1 by the CASE's own ELSE 1.
    ("*", "drop-when", "WHEN 'unknown' THEN 1", "the CASE's ELSE gives 1 as well"),
    # The filtered statements of a plain search (and the exact scan's vectors) are sent only
    # for a search with a filter (memory/plan.py: `where is None` sends SEARCH_ITEMS and
    # SEARCH_VECTORS instead; compile_filter gives None for no or an empty filter), so their
    # :filter is never NULL and the verdict's first arm never runs.
    *((name, "drop-when", f"WHEN ?{n} IS NULL THEN 2",
       "sent only with a filter (plan.py sends the unfiltered statement without one): "
       ":filter IS NULL never holds")
      for name, n in (("SEARCH_ITEMS_FILTERED", 1), ("REFRESH_SEARCH_FILTERED", 2),
                      ("SEARCH_VECTORS_FILTERED", 1))),
    # The cheap equalities (`_KEPT`) leave out before the verdict only rows whose verdict is
    # 0 by the same expressions (sql/memory.py); each statement then keeps `verdict > 0`
    # only, so without them the same rows come out. (Not so in the whole-read count,
    # `_SCOPE_COUNT`, written with bare columns: there they decide the threshold.)
    *(("*", "drop-and", _KEPT.format(t=t),
       "speed only: the rows the equalities leave out have verdict 0, which `verdict > 0` "
       "leaves out anyway") for t in ("s.", "store_items.")),
    # RANK_ROWS's order is never read: the store sorts a search's rows itself (store.py,
    # _search: newest first, then ns, key) and ranks them by score; the gateway Worker keeps
    # rows by score alone (worker/rank.js, keepBest); the page skips nothing (skipped 0).
    *(("RANK_ROWS", "swap-dir", change,
       "the store sorts the rows itself (newest, ns, key) and the gateway keeps them by score")
      for change in ("c.updated_at [DESC->ASC]", "c.ns[-> DESC]", "c.key[-> DESC]")),
    # A filter's "false" condition (nan, a tuple, a range no item compares with) is never
    # negated: no row of such a filter has verdict 2, with the arm (0) or without it (1), and
    # the refresh of a filtered page writes only rows of verdict 2.
    ("REFRESH_SEARCH_FILTERED", "drop-when", "WHEN 'false' THEN 0",
     "\"false\" is never negated: no row of its filter has verdict 2 either way, and only "
     "rows of verdict 2 are refreshed"),
    # A memory move registers under MEMORY_MOVE_PREFIX + its move id (compaction/rebalance.py:
    # a uuid4's hex, never empty): no thread id equals :low, the bare prefix.
    ("VOID_MEMORY_MOVES", "flip-cmp", "thread_id[>=->>]?",
     "a memory move's thread id is the prefix and a uuid4's hex: none equals :low, the prefix"),
    # The prefilter's first statement is always sent with :whole (memory/plan.py binds
    # `whole_items`, for the gateway Worker's ranked searches too): `:whole IS NULL OR` never
    # holds.
    ("RANK_ROWS", "drop-or", "?6 IS NULL",
     "d1saver binds :whole (whole_items) on every path: `:whole IS NULL` never holds"),

    # A move's vectors land only for items the target does not hold (MOVE_IN_VECTORS's WHERE
    # NOT EXISTS), and no database holds a vector of an item it does not hold: every put and
    # delete of an item deletes its vectors in the same batch (memory/store.py: `reindexed`
    # takes every key put or deleted), and sweeps, scope deletes and moves out delete an
    # item's vectors with it. So no row is there for OR REPLACE to replace or OR IGNORE to keep.
    ("MOVE_IN_VECTORS", "conflict", "[REPLACE->IGNORE]",
     "no database holds a vector of an item it does not hold: nothing to replace or keep"),

    # The gateway Worker begins a run's record once per database, under a run id drawn for
    # the run (worker/compaction.js): there is never a record to replace or to keep; a batch
    # retried after a lost response would differ only in started_at, by the retry's delay.
    ("RUN_BEGIN", "conflict", "[REPLACE->IGNORE]",
     "a run's record is begun once per database under a fresh run id: nothing to replace"),
]

EQUIVALENT: dict[str, str] = {
    # THREADS_IN_RANGE is a compound ((((A UNION B) UNION C) UNION D) UNION (E UNION F UNION
    # G)) read left to right: a UNION ALL anywhere but the last outer UNION is followed by a
    # UNION that removes the duplicates it lets in. (The last one is killed in
    # tests/saver/test_clause_boundaries.py: a thread with rows in every table.)
    "sql:THREADS_IN_RANGE:4ef31bf3f8":
        "a later UNION of the same compound drops the duplicates (compound operators apply left to right)",
    "sql:THREADS_IN_RANGE:2f1829f6e0":
        "a later UNION of the same compound drops the duplicates (compound operators apply left to right)",
    "sql:THREADS_IN_RANGE:7edfd3e241":
        "a later UNION of the same compound drops the duplicates (compound operators apply left to right)",
    "sql:THREADS_IN_RANGE:8e427fea93":
        "a later UNION of the same compound drops the duplicates (compound operators apply left to right)",
    "sql:THREADS_IN_RANGE:3e299a0d25":
        "a later UNION of the same compound drops the duplicates (compound operators apply left to right)",
    # transfer._pack's statement budget is what its callers leave after their own statements
    # with slack (copy_batches: `fixed` counts the last batch's rename and collect and 3 more;
    # delete_if_unchanged: 2 more), so one insert more per batch (`>=` -> `>`) still keeps
    # every batch within max_statements: the same rows written, in as many or fewer requests.
    "py:d1saver.ops.transfer:_pack:c6acd9fa71":
        "one row more per batch stays within the callers' max_statements (their budgets keep "
        "slack): the same rows, no more requests",
    # rows.delta_history's take(): DELTA_HISTORY returns frozen rows ('f') only of channels
    # still sought at their depth: asked for (:channels), not seeded by a nearer ancestor
    # (still_sought drops a channel at the checkpoint whose `channels` column lists it, and a
    # holder's own listed channels get no 'f' rows) and not ended by a nearer record
    # (unended). So `ch in collected` always holds and `ch not in seeds` never fails there,
    # given that a checkpoint's `channels` column lists the channels its value holds (PUT
    # writes both from the same checkpoint): `and` -> `or` changes nothing.
    "py:d1saver.ops.rows:delta_history:5b5f32e263":
        "the statement returns frozen rows only of channels asked for and not yet seeded or "
        "ended at a nearer depth: both conditions always hold",
    # An entry's age against its TTL on the monotonic clock: `age > ttl` and `age >= ttl`
    # differ only when the age is the TTL to the clock's last digit; no test, and no user,
    # can place a read there.
    "py:d1saver.ops.delta_cache:DeltaCache.take:36e241cf42":
        "an age equal to the TTL to the clock's resolution: the boundary of a continuous clock",
    # LEAVE_UNLESS_SAME_<table> checks both ways (every row of the thread has an identical
    # row in the scratch copy, and every scratch row one in the thread) after LEAVE_SCOPE
    # found the read row count in both. Rows of one thread are distinct by key, so either
    # direction with equal counts proves the sets equal: weakening one direction's
    # comparison (a column dropped from it) leaves the other exact. (Dropping an outer
    # `a.thread_id = ...` is not equivalent: it compares other threads' rows too;
    # tests/fleet/test_transfer_shared_keys.py kills those.)
    "sql:LEAVE_UNLESS_SAME_D1SAVER_CHUNKS:837fc3e57f":
        "one direction of a two-way comparison, weakened: the other, with equal row counts, "
        "is exact (rows are distinct by key)",
    "sql:LEAVE_UNLESS_SAME_DELTA_FROZEN:f793a61ae4":
        "one direction of a two-way comparison, weakened: the other, with equal row counts, "
        "is exact (rows are distinct by key)",
    "sql:LEAVE_UNLESS_SAME_WRITES:5a22292696":
        "one direction of a two-way comparison, weakened: the other, with equal row counts, "
        "is exact (rows are distinct by key)",
    # LEAVE_SCOPE asks, per table, that the thread and its scratch copy both hold the row
    # count read; LEAVE_UNLESS_SAME_<table> then empties the scope unless every row of either
    # has an identical row (key and all) in the other. Rows of one thread are distinct by key,
    # so when both directions hold the two hold equal sets, hence equal counts: either count
    # alone, dropping the other, still lets the thread go only when both hold the count read.
    **{f"sql:LEAVE_SCOPE:{digest}":
       "one of a table's two row counts dropped: the two-way comparison that follows proves "
       "the thread and its copy equal sets of rows distinct by key, so their counts are equal"
       for digest in ("46bebfdab2", "bf8b205730", "d661c7126f", "9cfc8f6693", "10f342930d",
                      "6ef0e05d09", "c6454a0191", "182e7b5e67", "776823fdcd", "196c8def82",
                      "78b9479380", "f6fe752da6", "d8d45702b3", "79b5afac5e")},
    # The plan's packing walk (_PLAN), the `kind` column: a thread with work that joins the
    # open batch has the batch's kind (a kind that differs always opens one: w.expired <>
    # p.kind, both 0 or 1 once the first batch is open), so setting `kind` to the thread's
    # whenever it has work, or on a condition weakened beside that term, changes nothing.
    **{f"sql:{stable}":
       "the batch's kind: a thread that joins a batch has its kind, so taking the thread's "
       "kind changes nothing (a kind that differs still opens a batch)"
       for stable in ("PLAN_THREADS:53abe64677", "PLAN_THREADS:6b450b1829",
                      "PLAN_THREADS:37c8e1b95b", "PLAN_THREADS:abaf2a86fe",
                      "PLAN_PAGE:4f718a81e7", "PLAN_PAGE:651cdbf278", "PLAN_PAGE:d1bcd0d9c3",
                      "PLAN_PAGE:29e068ce21",
                      # the load term compared with >= or its weight subtracted
                      "PLAN_THREADS:25962f8071", "PLAN_PAGE:b638c3c811",
                      "PLAN_THREADS:438f30e230", "PLAN_PAGE:da6ae35224")},
    # _REMOVABLE's thread ids: one compound of UNIONs whose last term is itself a compound
    # of UNIONs. SQLite applies compound operators left to right, so a UNION ALL before the
    # last UNION of the outer chain, or anywhere in the inner one (the outer chain's last
    # UNION takes it whole), is followed by a UNION that removes the duplicates.
    **{f"sql:{name}:{digest}":
       "a later UNION of the same compound (or of the one enclosing it) removes the "
       "duplicates: compound operators apply left to right"
       for name, digests in (
           ("COUNT_LEFTOVERS_REMOVABLE", ("9f7410628f", "f4d0d5743f", "a40c07d332",
                                          "19081b70c9", "a4c3d74ca8")),
           ("SCOPE_LEFTOVERS_REMOVABLE", ("71a2916bbd", "d8275c1d98", "cdfb48fd3a",
                                          "bac01d7321", "5facc4b6cb")))
       for digest in digests},
    # The one-thread raw pages are read by copies only (ops/reseal.copy_sealed, ops/rewrites),
    # always with :heads NULL (every row): `:heads IS NULL OR <stale>` never reads the head.
    "sql:RAW_WRITES_THREAD:fcdba63663":
        "one-thread pages are always read with :heads NULL: the head (and its join) is never "
        "evaluated",
    # A checkpoint's head is read from a piece only when its row holds a "c:" marker: then
    # its own piece 0 (owner '') exists, and the lookup by primary key (thread, ns, id,
    # owner, seq) meets it first ('' sorts before ':metadata', 'f/...' and 'task/idx'); the
    # metadata is sealed with its checkpoint anyway, under the same key.
    **{stable: "a chunked checkpoint's own piece 0 (owner '') exists and comes first in key "
               "order; its other pieces are sealed under the same key"
       for stable in ("sql:KEY_CENSUS:c22aca62eb", "sql:RAW_CHECKPOINTS_ALL:dd4e90fe5f")},
    # Staged thread ids are a staging prefix (char(31) 'd1saver-' and more) plus the
    # target's id: none equals the bare char(31) || 'd1saver-', the only id >= and > tell
    # apart.
    **{f"sql:STAGED_VALUES:{digest}":
       "no thread id equals the bare prefix char(31)||'d1saver-': staged ids extend it"
       for digest in ("eac523004f", "ac4a186552", "66e6466fd7")},
    # PUT_UNWRITTEN is sent only right after its checkpoint's PUT, in the same batch
    # (ops/statements.py: put_statements); PUT's view trigger INSERTs OR REPLACEs the
    # checkpoint's row, which fires delta_unwritten_on_put (AFTER INSERT, schema.sql): the
    # checkpoint's delta_unwritten row is gone before PUT_UNWRITTEN inserts one row for it, so
    # no conflict is met and OR IGNORE inserts what OR REPLACE does.
    "sql:PUT_UNWRITTEN:28f0573c20":
        "sent right after its checkpoint's PUT, whose insert trigger has deleted the row: no "
        "conflict is ever met",
    # Rows of one key but kind are an 's' (or 'w' with task '') and a 'c' row at one depth
    # of one holder and channel; FREEZE_DONE, in the batch that freezes, deletes a 'c' row
    # whenever another row of that holder and channel lies at its depth or deeper.
    # CHUNK_CHECK lists what each branch of `reached` reads (checkpoints, writes, packed
    # writes, frozen histories) for the threads "of checkpoints (:thread_id NULL or the
    # thread) UNION of writes (likewise)". A branch's row belongs to a thread that its own
    # part of that union always selects (a checkpoint's thread is a thread of checkpoints, a
    # write's a thread of writes, a frozen row's a thread of checkpoints: delta_frozen rows
    # go with their checkpoints), so weakening the other part changes nothing.
    "sql:CHUNK_CHECK:a494460ba2": "a checkpoint's thread is selected by the checkpoints part",
    "sql:CHUNK_CHECK:6044500e3b": "a checkpoint's thread is selected by the checkpoints part",
    "sql:CHUNK_CHECK:5a395e1d17": "a write's thread is selected by the writes part",
    "sql:CHUNK_CHECK:9d163e1e98": "a write's thread is selected by the writes part",
    "sql:CHUNK_CHECK:8ead353320": "a packed write's thread is selected by the writes part",
    "sql:CHUNK_CHECK:478c9cfb82": "a packed write's thread is selected by the writes part",
    "sql:CHUNK_CHECK:00f158656f":
        "a frozen row's thread has checkpoints: the checkpoints part selects it",
    "sql:CHUNK_CHECK:e15a7ee226":
        "a frozen row's thread has checkpoints: the checkpoints part selects it",
    # encode keeps deflate only when it saves a tenth, from R_MIN (16) bytes: its unpadded
    # base64 (at most ceil(1.2 n) characters) is then always shorter than the raw padded
    # base64 (4 ceil(n / 3) >= 1.33 n), so `len(packed) < len(raw)` and `<=` never differ.
    "py:d1saver.storage.codec:encode:5ded4e76d1":
        "after a tenth saved from 16 bytes on, the deflated text is always strictly shorter",
    # _cut_value's `if item_end > end: raise _NotMsgpack` is defensive: a container's end is
    # the data's end (at the top) or where _skip found it, from the same headers its items
    # are skipped by (or its parent's end, when it is the last item), and _skip itself
    # raises past the data's end; so an item never ends past its container.
    "py:d1saver.storage.chunking:_cut_value:b632dba933":
        "no item ends past its container: _skip reads the same headers and refuses the data's end",
    # _header's `if len(field) != width: raise _NotMsgpack`: a length field is cut short only
    # by the data's end (_cut_value reads its own header with at least LONG_ELEMENT_MIN bytes
    # before `end`). Read short, the value's end is then past the data: _skip raises (a raw
    # value's end, or pending items whose next header starts at the data's end).
    "py:d1saver.storage.chunking:_header:e2040b210d":
        "a length field cut by the data's end puts the value's end past it: _skip refuses that",
    # _header's `b < 0x90` made `<=`: 0x90 is an array of 0 items; read as a map of 0 items
    # (0x90 & 0x0F) it has one header byte and nothing to open or skip either: walked, cut
    # and skipped alike (an array's kind only matters to its items).
    "py:d1saver.storage.chunking:_header:d638dd07ab":
        "0x90 read as a map (0x90 & 0x0F = 0 items) is empty too: same header, no items",
    # _header's `b < 0xC0` made `<=`: 0xC0 (nil) read as a raw value of 0xC0 & 0x1F = 0
    # bytes: one header byte and no payload, neither a container: cut and skipped alike.
    "py:d1saver.storage.chunking:_header:9a7d3cf90f":
        "0xC0 (nil) read as a raw value of 0 bytes: one byte either way, neither a container",
    # _header's `if kind == _SCALAR: return _SCALAR, before, 0` dropped: every scalar entry
    # of _TABLE has a length field of 0 bytes, so the general path reads an empty field
    # (len 0 == width 0) and returns (kind, before + 0, int.from_bytes(b"")) = the same.
    "py:d1saver.storage.chunking:_header:b77a13dc82":
        "a scalar's entry has a 0-byte length field: the general path returns the same triple",
    # load_checkpoint with keys: `if text is None: raise refuse_plaintext(binding)`. Without
    # it a NULL value is neither "c:" nor "m:" and goes to Sealer.open_flagged, whose
    # open_packed refuses any text that is not "e:" (None too) with the same
    # refuse_plaintext(binding): the same error, the same message.
    "py:d1saver.storage.values:Values.load_checkpoint:69452dac4f":
        "a NULL value reaches open_packed, which raises the same refuse_plaintext(binding)",
    # codec.split's only caller is values._parts, `split(text) or [text]`: a text of exactly
    # CHUNK_SIZE gives None there, and [text] (one part, the whole) under `<`: [text] both ways.
    "py:d1saver.storage.codec:split:f67afaabb6":
        "its only caller reads None as [text]; a text of CHUNK_SIZE split is [text] too",
    # Its `if len(text) <= CHUNK_SIZE: return None` dropped: a text that fits is then split
    # into [text] (or [] when empty), which that caller's `or [text]` makes [text] as None.
    "py:d1saver.storage.codec:split:d301b9af55":
        "its only caller reads None as [text]; a text that fits split is [text] (or [])",
    # Values.reseal's `if text is None: return None`: rekey's pages read only rows holding a
    # value (d1saver/sql/reseal.py SEALED: `w.value IS NOT NULL`, `f.value IS NOT NULL` under
    # :heads), and the writes of a "p:" pack are texts d1saver wrote; copies send :heads NULL
    # but re-seal with plaintext=False, where a None text falls to `return None` all the same
    # (tests/compaction/test_rekey.py: a NULL write value is left, the rest sealed).
    "py:d1saver.storage.values:Values.reseal:5409e6a5c8":
        "None reaches reseal only from copies (plaintext=False), where it returns None anyway",
    # FREEZE's walk from a kept checkpoint without a parent (parent_checkpoint_id NULL) finds
    # nothing: every branch joins or tests its row at `cur` (NULL), which matches no row and
    # no d1saver_keep entry, and the recursive step joins the parent at NULL too.
    "sql:FREEZE:2b2c6949b7":
        "a walk row at a NULL parent joins nothing: no write, seed, record or 'c' row comes of it",
    # collect_content's `if not threads: return []`: without it a page holding nothing stored
    # by content sends GC_CHUNKS and CLEAR_SCOPE with no thread scoped. d1saver_scope is empty
    # at every request boundary (each batch that fills it ends with CLEAR_SCOPE), and GC_CHUNKS
    # deletes only in scoped threads: the two statements change no row.
    "py:d1saver.ops.reseal:collect_content:31698b87ae":
        "with no thread scoped (d1saver_scope is empty between batches) GC_CHUNKS deletes nothing",
    "sql:REKEY_FROZEN:66242db464":
        "no 'c' row shares the rest of its key with a row holding a value: FREEZE_DONE "
        "deletes it in the batch that freezes",
    # Where a filter's verdict is only tested `> 0` (CANDIDATE_ITEMS's WHERE, its second copy;
    # SEARCH_VECTORS_FILTERED's only one), a condition that says 1 for 2 changes no row: the
    # verdict is the least of its conditions', and 'true' and 'notcontainer' are never
    # negated. (Their copies whose verdict is returned are killed by
    # tests/memory/test_filter_grid.py.)
    "sql:CANDIDATE_ITEMS:c11b89b620":
        "the WHERE's copy of the verdict is only tested > 0: 'true' giving 1 for 2 keeps it",
    "sql:CANDIDATE_ITEMS:1154567019":
        "the WHERE's copy of the verdict is only tested > 0: 'notcontainer' giving 1 for 2 keeps it",
    # CANDIDATE_ITEMS's returned verdict is read only for rows its WHERE's copy keeps
    # (verdict > 0). A strict "cmp" made loose ('gt' >, 'lt' <) differs only where the item
    # equals the operand exactly (an integer or bool read exactly: reals and unsafe operands
    # are 1 at equality by the arm before), where the condition, never negated, gives 0: the
    # WHERE's copy leaves the row out either way.
    **{f"sql:CANDIDATE_ITEMS:{digest}":
       "the returned copy differs only where the WHERE's copy gives 0 (the row is left out)"
       for digest in ("2fb3e921ca", "6cbebfd5ad")},
    "sql:SEARCH_VECTORS_FILTERED:364acd00a3":
        "the verdict is only tested > 0: 'true' giving 1 for 2 keeps every row",
    "sql:SEARCH_VECTORS_FILTERED:e296ecfa17":
        "the verdict is only tested > 0: 'notcontainer' giving 1 for 2 keeps every row",
}


# Text no call ever runs, per statement (a glob): a mutant whose whole edit lies in it, or
# that drops one of its optional clauses whole, is equivalent. The one-thread raw pages are
# read by copies only (d1saver/ops/rewrites.py: _copy_thread; d1saver/ops/reseal.py:
# copy_sealed), always with :heads NULL and :content 0 (rekey reads every thread: ..._ALL):
# in `AND (:heads IS NULL OR <stale>)` the <stale> test never runs (the clause is true), and
# with `vals` empty (its WHERE :content = 1) the chunk walk `refs` and the 'h' arm have no
# rows. Edits of `:heads IS NULL` or of `vals` are not in these regions.
DEAD: list[tuple[str, str]] = [
    ("RAW_*_THREAD",
     "one-thread raw pages are read by copies only, with :heads NULL (every row) and "
     ":content 0 (no chunks): the head test and the chunk walk never run"),
]


def _balanced(sql: str, open_at: int) -> int:
    """The index after the parenthesis that closes the one at `open_at`."""
    depth = 0
    for k in range(open_at, len(sql)):
        depth += {"(": 1, ")": -1}.get(sql[k], 0)
        if depth == 0:
            return k + 1
    return len(sql)


def _dead_regions(sql: str) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """(regions no call runs, optional clauses droppable whole: the heads clause, or its
    never-run `OR <stale>` arm) of a one-thread raw page."""
    inside, whole = [], []
    heads = sql.find(" IS NULL OR")
    if heads >= 0:
        clause = sql.rfind("AND(", 0, heads)
        end = _balanced(sql, clause + 3)
        inside.append((heads + len(" IS NULL OR"), end - 1))
        whole.append((clause, end))
        whole.append((heads + len(" IS NULL"), end - 1))  # `OR <stale>` dropped
    refs = sql.find("refs(thread_id,id)AS(")
    if refs >= 0:
        inside.append((refs, _balanced(sql, refs + len("refs(thread_id,id)AS"))))
    arm = sql.find("UNION ALL SELECT 'h',")
    if arm >= 0:  # with the space before it, which a dropped arm takes along
        inside.append((arm - (sql[arm - 1:arm] == " "), len(sql)))
    return inside, whole


def _dead(mutant: Any) -> str | None:
    """The reason, if the mutant edits only text no call runs (DEAD)."""
    name, text = getattr(mutant, "statement", None), getattr(mutant, "sql", None)
    if not name or text is None:
        return None
    for pattern, why in DEAD:
        if not fnmatch.fnmatchcase(name, pattern):
            continue
        from tests.mutation.sql import by_name, numbered

        base = numbered(by_name()[name].sql)
        head = 0
        while head < min(len(base), len(text)) and base[head] == text[head]:
            head += 1
        tail = 0
        while (tail < min(len(base), len(text)) - head
               and base[-1 - tail] == text[-1 - tail]):
            tail += 1
        lo, hi = head, len(base) - tail
        inside, whole = _dead_regions(base)
        if any(s <= lo and hi <= e for s, e in inside):
            return why
        if any(text.replace(" ", "") == (base[:s] + base[e:]).replace(" ", "")
               for s, e in whole):
            return why
    return None


def reason(mutant: Any) -> str | None:
    """Why the mutant is equivalent, or None."""
    stable = getattr(mutant, "stable", "")
    if stable in EQUIVALENT:
        return EQUIVALENT[stable]
    if dead := _dead(mutant):
        return dead
    name = getattr(mutant, "statement", None) or (
        f"{getattr(mutant, 'module', '')}:{getattr(mutant, 'function', '')}")
    old, new = getattr(mutant, "old", ""), getattr(mutant, "new", "")
    for pattern, kind, text, why, *context in RULES:
        if mutant.kind != kind or not fnmatch.fnmatchcase(name, pattern):
            continue
        if context and context[0] not in mutant.where:
            continue
        if (_bare(old) == _bare(text) if old and not new else text in mutant.where):
            return why
    return None


def _bare(text: str) -> str:
    """A dropped text without the separator dropped with it."""
    text = re.sub(r"^(AND|OR)\b", "", text.strip().strip(",").strip())
    return re.sub(r"\b(AND|OR)$", "", text.strip()).strip()
