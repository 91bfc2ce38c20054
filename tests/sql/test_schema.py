"""The schema holds to what the statements assume of it."""

from __future__ import annotations

from d1saver import Statement
from d1saver.ops import rows as _rows
from d1saver.sql import catalogue as _sql
from tests.conftest import Backend


def columns(backend: Backend, table: str) -> tuple[str, ...]:
    saver = backend.saver()
    saver.setup()
    (result,) = saver.client.execute([Statement(f"SELECT name FROM pragma_table_info('{table}')")])
    return tuple(row[0] for row in result.rows)


def test_inserts_name_columns_the_tables_have(backend: Backend) -> None:
    """put and put_writes name their columns, so a migration may add more: each one named exists."""
    assert f"({','.join(_sql.CHECKPOINT_COLUMNS)})" in _sql.UPSERT_CHECKPOINT.sql
    for query in (_sql.INSERT_WRITES_REPLACE, _sql.INSERT_WRITES_IGNORE):
        assert f"({','.join(_sql.WRITE_COLUMNS)})" in query.sql
    assert set(_sql.CHECKPOINT_COLUMNS) <= set(columns(backend, "checkpoints"))
    assert set(_sql.WRITE_COLUMNS) <= set(columns(backend, "writes"))


def test_schema_version_recorded(backend: Backend) -> None:
    """setup records the schema version, and the oldest version whose code can use it."""
    saver = backend.saver()
    saver.setup()
    (result,) = saver.client.execute([Statement.bind(_sql.READ_SCHEMA)])
    assert _rows.schema_info(result) == _rows.SchemaInfo(
        _sql.SCHEMA_VERSION, _sql.min_reader(_sql.SCHEMA_VERSION))
