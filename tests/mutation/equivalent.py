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

# (statements, or module:function, as a glob; the operator; for a drop, the text dropped
# (separators aside), else a text of the change as printed (`where`); the reason; and, if
# given, a text the change's context as printed must hold)
RULES: list[tuple[str, ...]] = [
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
    # Chunk ids name their content (and their kind) whatever the thread, so a node looked up
    # by id alone, in another thread, lists the same children: the same rows come out, but
    # the lookup no longer uses the key (thread_id, id) and reads other threads' rows.
    ("*", "drop-using", "thread_id",
     "cost only: a chunk id names the same content in every thread (rows read, not results)",
     "d1saver_chunks n USING([-thread_id,-]id)"),
    ("*", "drop-using", "thread_id",
     "cost only: a chunk id names the same content in every thread (rows read, not results)",
     "d1saver_chunks k USING([-thread_id,-]id)"),
    # The page's pieces of frozen histories ('f/' owners) are read by no value of the page
    # (its owners are '', ':metadata' and 'task/idx'): results equal; only bytes differ, on a
    # compacted thread whose frozen values are over 1.8 MB.
    ("SELECT_PAGE_*", "drop-where", "WHERE NOT substr(k.owner,1,2)='f/'",
     "cost only: frozen pieces are read by no value of the page (bytes, not results)"),

    # D1Store lists namespaces as a set, sorted and paged in Python (memory/store.py, _list):
    # the order SQL returns them in is never read.
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

    # A TTL sweep's `expires_at IS NOT NULL AND expires_at <= :now`: NULL <= :now is NULL,
    # never true, so the first test only lets SQLite use the partial index on expires_at.
    ("SWEEP_STORE*", "drop-and", "expires_at IS NOT NULL",
     "cost only: NULL <= :now is never true (the test lets SQLite use the partial index)"),
    ("SWEEP_CACHE", "drop-and", "expires_at IS NOT NULL",
     "cost only: NULL <= :now is never true (the test lets SQLite use the partial index)"),

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
    # "cmp": an operand's texts ("a") are float reprs (a '.', an 'e'); an integer's or a
    # bool's JSON text is never one of them, and a string is decided by the arm before.
    ("*", "drop-and", "d.type='real'",
     "no integer's or bool's JSON text is a float repr: only a real's can be in \"a\"",
     "[-d.type='real' AND -]instr(d.a,"),
    # LIMIT -1 is no limit: it only keeps SQLite from flattening the verdict's subqueries into
    # the CASE (each condition then reads the row's JSON once); the rows are the same.
    ("*", "drop-limit", "LIMIT -1", "speed only: LIMIT -1 is no limit (it stops the flattening)"),
    # A condition SQL cannot tell is 1 by the CASE's own ELSE 1.
    ("*", "drop-when", "WHEN 'unknown' THEN 1", "the CASE's ELSE gives 1 as well"),
    # The prefilter's first statement is always sent with :whole (memory/plan.py binds
    # WHOLE_MAX, for the gateway Worker's ranked searches too): `:whole IS NULL OR` never holds.
    ("RANK_ROWS", "drop-or", "?6 IS NULL",
     "d1saver binds :whole (WHOLE_MAX) on every path: `:whole IS NULL` never holds"),

    # The gateway Worker begins a run's record once per database, under a run id drawn for
    # the run (worker/compaction.js): there is never a record to replace or to keep; a batch
    # retried after a lost response would differ only in started_at, by the retry's delay.
    ("RUN_BEGIN", "conflict", "[REPLACE->IGNORE]",
     "a run's record is begun once per database under a fresh run id: nothing to replace"),
]

EQUIVALENT: dict[str, str] = {
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
    # The one-thread raw pages are read by copies only (ops/reseal.copy_sealed, ops/rewrites),
    # always with :heads NULL (every row): `:heads IS NULL OR <stale>` never reads the head.
    "sql:RAW_WRITES_THREAD:fcdba63663":
        "one-thread pages are always read with :heads NULL: the head (and its join) is never "
        "evaluated",
    # A checkpoint's head is read from a piece only when its row holds a "c:" marker: then
    # its own piece 0 (owner '') exists, and the lookup by primary key (thread, ns, id,
    # owner, seq) meets it first ('' sorts before ':metadata', 'f/...' and 'task/idx'); the
    # metadata is sealed with its checkpoint anyway, under the same key.
    "sql:KEY_CENSUS:c22aca62eb":
        "a chunked checkpoint's own piece 0 (owner '') exists and comes first in key order; "
        "its other pieces are sealed under the same key",
    # Staged thread ids are a staging prefix (char(31) 'd1saver-' and more) plus the
    # target's id: none equals the bare char(31) || 'd1saver-', the only id >= and > tell
    # apart.
    "sql:STAGED_VALUES:eac523004f":
        "no thread id equals the bare prefix char(31)||'d1saver-': staged ids extend it",
    # Rows of one key but kind are an 's' (or 'w' with task '') and a 'c' row at one depth
    # of one holder and channel; FREEZE_DONE, in the batch that freezes, deletes a 'c' row
    # whenever another row of that holder and channel lies at its depth or deeper.
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
    "sql:SEARCH_VECTORS_FILTERED:364acd00a3":
        "the verdict is only tested > 0: 'true' giving 1 for 2 keeps every row",
    "sql:SEARCH_VECTORS_FILTERED:e296ecfa17":
        "the verdict is only tested > 0: 'notcontainer' giving 1 for 2 keeps every row",
}


def reason(mutant: Any) -> str | None:
    """Why the mutant is equivalent, or None."""
    stable = getattr(mutant, "stable", "")
    if stable in EQUIVALENT:
        return EQUIVALENT[stable]
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
