"""Every SQL statement d1saver sends, in one list (STATEMENTS), and every named statement and
column list under one name: the aggregate of the concern modules below (docs/SQL.md).

    schema.py       schema.sql, the forward-only migrations, the version records
    writes.py       put and put_writes: rows, pieces, content-addressed chunks
    reads.py        the page reads (get_tuple, list) and the DeltaChannel walks
    maintenance.py  idempotency records, tags, chunk collection and check, delete and copy
    compaction.py   retention (prune, delete_for_runs, compaction), thread listing, the lease,
                    the gateway Worker's run records, storage figures
    transfers.py    rows between databases (copy, rebalance), moves and staged rows
    reseal.py       raw pages and rewrites under encryption keys (copy, rekey)
    memory.py       D1Store and D1Cache

A statement is `q(text)`: its `:name` parameters are bound by name (`Statement.bind`), and
its text is made ready to send once, at import (d1saver/sql/query.py). Statements that share
text are built from named parts when their module loads (d1saver/sql/parts.py and each
module's own), from constants only: nothing is assembled from user input. Lists (thread ids,
run ids, channels, writes, metadata filters) travel as ONE JSON parameter read with
json_each(), so none comes near D1's 100-parameter limit. The snapshot in
tests/sql/statements.snapshot.sql holds every statement exactly as sent, in STATEMENTS' order.
"""

from __future__ import annotations

from d1saver.sql.schema import (CLAIM_VERSION, MIGRATIONS, MIN_READER, READ_SCHEMA, SCHEMA,
                                SCHEMA_SQL, SCHEMA_STATEMENTS, SCHEMA_VERSION, SET_MIN_READER,
                                migration, min_reader, split_script)
from d1saver.sql.writes import (DELETE_CHUNKS_OF, GUARD_HEAD, INSERT_CHUNK, INSERT_CHUNKS,
                                INSERT_WRITES_IGNORE, INSERT_WRITES_REPLACE, INSERT_WRITE_CHUNK,
                                PUT, PUT_UNWRITTEN, PUT_WRITES, UPSERT_CHECKPOINT)
from d1saver.sql.reads import (DELTA_HISTORY, DELTA_HISTORY_COLUMNS, PAGE_COLUMNS, PAGE_DELTA_OF,
                               SELECT_PAGE_ALL, SELECT_PAGE_ALL_FILTERED, SELECT_PAGE_DELTA_ALL,
                               SELECT_PAGE_DELTA_ALL_FILTERED, SELECT_PAGE_DELTA_THREAD,
                               SELECT_PAGE_DELTA_THREAD_FILTERED, SELECT_PAGE_DELTA_THREAD_NS,
                               SELECT_PAGE_DELTA_THREAD_NS_FILTERED, SELECT_PAGE_THREAD,
                               SELECT_PAGE_THREAD_FILTERED, SELECT_PAGE_THREAD_NS,
                               SELECT_PAGE_THREAD_NS_FILTERED)
from d1saver.sql.maintenance import (CHUNK_CHECK, CHUNK_CHECK_COLUMNS, CLEAR_SCOPE,
                                     COPY_CHECKPOINTS, COPY_CHUNKS, COPY_D1SAVER_CHUNKS,
                                     COPY_DELTA_FROZEN, COPY_DELTA_UNWRITTEN, COPY_TAGS,
                                     COPY_THREAD, COPY_WRITES, DELETE_THREADS,
                                     DELETE_THREADS_STAGED, DELETE_THREADS_STAGED_ELSEWHERE,
                                     FORGET_OLD_OPS, GC_CHUNKS, LIST_TAGS, LIST_TAGS_COLUMNS,
                                     OP_RESULT, OP_RESULT_COLUMNS, RECORD_UNTAG, SCOPE_TARGET, TAG,
                                     UNPACK_TARGET_DROP, UNPACK_TARGET_PACKS, UNPACK_TARGET_PIECES,
                                     UNPACK_TARGET_WRITES, UNTAG)
from d1saver.sql.compaction import (ACQUIRE_LEASE, APPLY_RELINK, BREAK_LEASE, CHECK_LEASE,
                                    CLEAR_KEEP, CLEAR_RELINK, CLEAR_SCRATCH, COMPACTION_RUNS,
                                    COMPACTION_RUNS_COLUMNS, CURSOR_CLEAR, CURSOR_COLUMNS,
                                    CURSOR_GET, CURSOR_SET, DELETE_UNKEPT, FREEZE, FREEZE_DONE,
                                    FREEZE_PIECES, HISTORY, LEASE_HOLDER, PLAN_KEEP,
                                    PLAN_KEEP_OTHER_RUNS, PLAN_RELINK, REBIND_FROZEN, RECORDED_PLAN,
                                    RECORD_PLAN, RELEASE_LEASE, RENEW_LEASE, RUNS_INTERRUPTED,
                                    RUN_ADD_BATCH, RUN_BEGIN, RUN_END, SCOPE_RUNS, SCOPE_THREADS,
                                    STORAGE_SUMMARY, STORED_SAMPLE, SUMMARIZE_PLAN, SUMMARY_COLUMNS,
                                    THREADS_INFO, THREADS_PAGE, VOID_MOVES_IN_SCOPE,
                                    retention_batch, PLAN_COLUMNS, PLAN_PAGE, PLAN_THREADS, LEFTOVERS_REMOVABLE_COLUMNS, COUNT_LEFTOVERS_REMOVABLE, SCOPE_LEFTOVERS_REMOVABLE, UNSTAGE_SCOPE, SCOPED_COLUMNS, SCOPED, FORGET_GC_GONE, GC_DONE)
from d1saver.sql.transfers import (BEGIN_MOVE, CHECK_MOVE, CLEAR_MOVES, COLLECT_THREAD, DROP_THREAD,
                                   END_MOVE, LEAVE, LEAVE_SCOPE, LEAVE_UNLESS_SAME, LEAVING,
                                   LEAVING_COLUMNS, LEFTOVERS, LEFTOVERS_COLUMNS, MOVES_REGISTERED,
                                   MOVES_REGISTERED_COLUMNS, RENAME_DROP_CHECKPOINT_PIECES,
                                   RENAME_DROP_FROZEN, RENAME_DROP_UNWRITTEN,
                                   RENAME_DROP_WRITE_PIECES, RENAME_THREAD, SCOPE_THREAD, STAGE,
                                   STAGED_ELSEWHERE_COLUMNS, STAGE_ELSEWHERE, STAGING_HELD,
                                   THREADS_IN_RANGE, TRANSFER_INSERT, TRANSFER_PAGE,
                                   TRANSFER_PAGE_COLUMNS, TRANSFER_TABLES, UNSTAGE,
                                   UNSTAGE_ELSEWHERE)
from d1saver.sql.reseal import (INSERT_FROZEN, KEY_CENSUS, KEY_CENSUS_COLUMNS,
                                RAW_CHECKPOINTS_ALL, RAW_CHECKPOINTS_THREAD, RAW_CHECKPOINT_COLUMNS,
                                RAW_FROZEN_ALL, RAW_FROZEN_COLUMNS, RAW_FROZEN_THREAD,
                                RAW_WRITES_ALL, RAW_WRITES_THREAD, RAW_WRITE_COLUMNS,
                                REKEY_ADD_WRITE, REKEY_CHECKPOINT, REKEY_DROP_WRITE, REKEY_FROZEN,
                                REKEY_GUARD_CHECKPOINT, REKEY_GUARD_FROZEN, REKEY_GUARD_WRITE,
                                REKEY_WRITE, STAGED_VALUES, STAGED_VALUES_COLUMNS)
from d1saver.sql.parts import CHECKPOINT_COLUMNS, WRITE_COLUMNS

from d1saver.sql import (compaction, inspection, maintenance, memory, reads, reseal, schema, transfers,
                         writes)
from d1saver.sql.query import Query


def _unique(statements: list[Query]) -> list[Query]:
    """Each statement once, where it first appears (a batch may hold another module's)."""
    return list({id(s): s for s in statements}.values())


# The concern modules, in the order STATEMENTS lists their statements (a new module of
# statements goes here too).
MODULES = (schema, writes, reads, maintenance, compaction, transfers, reseal, memory, inspection)
# Every statement d1saver sends, each once, in a stable order: the modules' statements in the
# order of MODULES, each module's in definition order, the migration steps' last.
STATEMENTS: list[Query] = _unique([
    *(s for module in MODULES for s in module.STATEMENTS),
    *(s for version in range(1, SCHEMA_VERSION + 1) for s in migration(version))])

# Every name imported above is re-exported (ruff holds this list to the imports).
__all__ = ["CLAIM_VERSION", "MIGRATIONS", "MIN_READER", "READ_SCHEMA", "SCHEMA", "SCHEMA_SQL",
           "SCHEMA_STATEMENTS", "SCHEMA_VERSION", "SET_MIN_READER", "migration", "min_reader",
           "split_script", "DELETE_CHUNKS_OF", "GUARD_HEAD", "INSERT_CHUNK", "INSERT_CHUNKS",
           "INSERT_WRITES_IGNORE", "INSERT_WRITES_REPLACE", "INSERT_WRITE_CHUNK", "PUT",
           "PUT_UNWRITTEN", "PUT_WRITES", "UPSERT_CHECKPOINT", "DELTA_HISTORY",
           "DELTA_HISTORY_COLUMNS", "PAGE_COLUMNS", "PAGE_DELTA_OF", "SELECT_PAGE_ALL",
           "SELECT_PAGE_ALL_FILTERED", "SELECT_PAGE_DELTA_ALL", "SELECT_PAGE_DELTA_ALL_FILTERED",
           "SELECT_PAGE_DELTA_THREAD", "SELECT_PAGE_DELTA_THREAD_FILTERED",
           "SELECT_PAGE_DELTA_THREAD_NS", "SELECT_PAGE_DELTA_THREAD_NS_FILTERED",
           "SELECT_PAGE_THREAD", "SELECT_PAGE_THREAD_FILTERED", "SELECT_PAGE_THREAD_NS",
           "SELECT_PAGE_THREAD_NS_FILTERED", "CHUNK_CHECK", "CHUNK_CHECK_COLUMNS", "CLEAR_SCOPE",
           "COPY_CHECKPOINTS", "COPY_CHUNKS", "COPY_D1SAVER_CHUNKS", "COPY_DELTA_FROZEN",
           "COPY_DELTA_UNWRITTEN", "COPY_TAGS", "COPY_THREAD", "COPY_WRITES", "DELETE_THREADS",
           "DELETE_THREADS_STAGED", "DELETE_THREADS_STAGED_ELSEWHERE", "FORGET_OLD_OPS",
           "GC_CHUNKS", "LIST_TAGS", "LIST_TAGS_COLUMNS", "OP_RESULT", "OP_RESULT_COLUMNS",
           "RECORD_UNTAG", "SCOPE_TARGET", "TAG", "UNPACK_TARGET_DROP", "UNPACK_TARGET_PACKS",
           "UNPACK_TARGET_PIECES", "UNPACK_TARGET_WRITES", "UNTAG", "ACQUIRE_LEASE", "APPLY_RELINK",
           "BREAK_LEASE", "CHECK_LEASE", "CLEAR_KEEP", "CLEAR_RELINK", "CLEAR_SCRATCH",
           "COMPACTION_RUNS", "COMPACTION_RUNS_COLUMNS", "CURSOR_CLEAR", "CURSOR_COLUMNS",
           "CURSOR_GET", "CURSOR_SET", "DELETE_UNKEPT", "FREEZE", "FREEZE_DONE", "FREEZE_PIECES",
           "HISTORY", "LEASE_HOLDER", "PLAN_KEEP", "PLAN_KEEP_OTHER_RUNS", "PLAN_RELINK",
           "REBIND_FROZEN", "RECORDED_PLAN", "RECORD_PLAN", "RELEASE_LEASE", "RENEW_LEASE",
           "RUNS_INTERRUPTED", "RUN_ADD_BATCH", "RUN_BEGIN", "RUN_END", "SCOPE_RUNS",
           "SCOPE_THREADS", "STORAGE_SUMMARY", "STORED_SAMPLE", "SUMMARIZE_PLAN", "SUMMARY_COLUMNS",
           "THREADS_INFO", "THREADS_PAGE", "VOID_MOVES_IN_SCOPE", "retention_batch", "PLAN_COLUMNS", "PLAN_PAGE", "PLAN_THREADS", "LEFTOVERS_REMOVABLE_COLUMNS", "COUNT_LEFTOVERS_REMOVABLE", "SCOPE_LEFTOVERS_REMOVABLE", "UNSTAGE_SCOPE", "SCOPED_COLUMNS", "SCOPED", "FORGET_GC_GONE", "GC_DONE", "BEGIN_MOVE",
           "CHECK_MOVE", "CLEAR_MOVES", "COLLECT_THREAD", "DROP_THREAD", "END_MOVE", "LEAVE",
           "LEAVE_SCOPE", "LEAVE_UNLESS_SAME", "LEAVING", "LEAVING_COLUMNS", "LEFTOVERS",
           "LEFTOVERS_COLUMNS", "MOVES_REGISTERED", "MOVES_REGISTERED_COLUMNS",
           "RENAME_DROP_CHECKPOINT_PIECES", "RENAME_DROP_FROZEN", "RENAME_DROP_UNWRITTEN",
           "RENAME_DROP_WRITE_PIECES", "RENAME_THREAD", "SCOPE_THREAD", "STAGE",
           "STAGED_ELSEWHERE_COLUMNS", "STAGE_ELSEWHERE", "STAGING_HELD", "THREADS_IN_RANGE",
           "TRANSFER_INSERT", "TRANSFER_PAGE", "TRANSFER_PAGE_COLUMNS", "TRANSFER_TABLES",
           "UNSTAGE", "UNSTAGE_ELSEWHERE", "INSERT_FROZEN", "KEY_CENSUS",
           "KEY_CENSUS_COLUMNS", "RAW_CHECKPOINTS_ALL", "RAW_CHECKPOINTS_THREAD",
           "RAW_CHECKPOINT_COLUMNS", "RAW_FROZEN_ALL", "RAW_FROZEN_COLUMNS", "RAW_FROZEN_THREAD",
           "RAW_WRITES_ALL", "RAW_WRITES_THREAD", "RAW_WRITE_COLUMNS", "REKEY_ADD_WRITE",
           "REKEY_CHECKPOINT", "REKEY_DROP_WRITE", "REKEY_FROZEN", "REKEY_GUARD_CHECKPOINT",
           "REKEY_GUARD_FROZEN", "REKEY_GUARD_WRITE", "REKEY_WRITE", "STAGED_VALUES",
           "STAGED_VALUES_COLUMNS", "CHECKPOINT_COLUMNS", "WRITE_COLUMNS", "MODULES",
           "STATEMENTS"]
