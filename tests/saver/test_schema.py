"""The schema holds to what the statements assume of it."""

from __future__ import annotations

from d1saver import Statement, _sql
from tests.conftest import Backend


def columns(backend: Backend, table: str) -> tuple[str, ...]:
    saver = backend.saver()
    saver.setup()
    (result,) = saver.client.execute([Statement(f"SELECT name FROM pragma_table_info('{table}')")])
    return tuple(row[0] for row in result.rows)


def test_insert_statements_match_column_order(backend: Backend) -> None:
    """put and put_writes name no columns: the tables' column order must be theirs."""
    assert columns(backend, "checkpoints") == _sql.CHECKPOINT_COLUMNS
    assert columns(backend, "writes") == _sql.WRITE_COLUMNS


def test_schema_version_recorded(backend: Backend) -> None:
    """setup records the schema version, so later changes can migrate."""
    saver = backend.saver()
    saver.setup()
    (result,) = saver.client.execute([Statement(_sql.SELECT_SCHEMA_VERSION)])
    assert result.rows == [[_sql.SCHEMA_VERSION]]
