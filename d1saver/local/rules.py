"""D1's documented limits and the SQL rules seen on D1's engine (workerd), as data.

`database` enforces them on SQLite and `request` checks the statement length before parsing.
"""

from __future__ import annotations

import sqlite3

__all__ = [
    "ALLOWED_PRAGMAS",
    "DDL_ACTIONS",
    "DENIED_FUNCTIONS",
    "MAX_LIKE_PATTERN_BYTES",
    "MAX_PARAMS",
    "MAX_SQL_BYTES",
    "MAX_VALUE_BYTES",
    "TRANSACTION_REFUSED",
]

MAX_PARAMS = 100
MAX_SQL_BYTES = 100_000
MAX_VALUE_BYTES = 2_000_000
MAX_LIKE_PATTERN_BYTES = 50

# PRAGMAs D1 documents as supported; anything else is refused.
ALLOWED_PRAGMAS = frozenset(
    {
        "table_list", "table_info", "table_xinfo", "index_list", "index_info", "index_xinfo",
        "foreign_key_list", "foreign_key_check", "quick_check", "optimize",
        "foreign_keys", "defer_foreign_keys", "legacy_alter_table", "recursive_triggers",
        "reverse_unordered_selects", "case_sensitive_like", "ignore_check_constraints",
    }
)  # fmt: skip
DENIED_FUNCTIONS = frozenset({"sqlite_version", "load_extension"})
# Authorizer actions that change the schema: a statement doing any of them reports changed_db.
DDL_ACTIONS = frozenset(
    getattr(sqlite3, name)
    for name in (
        "SQLITE_CREATE_INDEX", "SQLITE_CREATE_TABLE", "SQLITE_CREATE_TRIGGER", "SQLITE_CREATE_VIEW",
        "SQLITE_CREATE_TEMP_INDEX", "SQLITE_CREATE_TEMP_TABLE", "SQLITE_CREATE_TEMP_TRIGGER",
        "SQLITE_CREATE_TEMP_VIEW", "SQLITE_CREATE_VTABLE", "SQLITE_DROP_INDEX", "SQLITE_DROP_TABLE",
        "SQLITE_DROP_TRIGGER", "SQLITE_DROP_VIEW", "SQLITE_DROP_TEMP_INDEX", "SQLITE_DROP_TEMP_TABLE",
        "SQLITE_DROP_TEMP_TRIGGER", "SQLITE_DROP_TEMP_VIEW", "SQLITE_DROP_VTABLE", "SQLITE_ALTER_TABLE",
        "SQLITE_REINDEX", "SQLITE_ANALYZE",
    )
)  # fmt: skip
# Word for word what D1 (workerd) answers to BEGIN, COMMIT, ROLLBACK, SAVEPOINT and RELEASE.
TRANSACTION_REFUSED = (
    "To execute a transaction, please use the state.storage.transaction() or "
    "state.storage.transactionSync() APIs instead of the SQL BEGIN TRANSACTION or SAVEPOINT "
    "statements. The JavaScript API is safer because it will automatically roll back on exceptions, "
    "and because it interacts correctly with Durable Objects' automatic atomic write coalescing."
)
