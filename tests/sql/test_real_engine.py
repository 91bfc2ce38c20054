"""Every statement d1saver sends prepares on Wrangler's D1 engine (workerd), as sent: the
engine D1 runs, not only the Python sqlite3 of test_statements.py (D1 refused, for one, a
compound SELECT of more terms than SQLite allows)."""

from __future__ import annotations

from typing import Any

import pytest

from d1saver import D1Error, Statement
from d1saver.sql import catalogue as _sql
from tests.conftest import Backend


@pytest.mark.realengine
def test_every_statement_prepares_on_the_real_engine(wrangler_d1: Any) -> None:
    """EXPLAIN prepares a statement without running it; each one binds exactly as many
    parameters as it names (D1 refuses a count that differs from the text's)."""
    real = Backend("wrangler", wrangler_d1.base_url, wrangler_d1.api_token,
                   wrangler_d1.account_id, wrangler_d1.database_id)
    with real.saver() as saver:
        saver.setup()
        refused = {}
        for s in _sql.STATEMENTS:
            if s.name.startswith(("SCHEMA[", "MIGRATIONS[")):
                continue  # DDL: setup and the migration tests run them
            try:
                saver.client.execute([Statement("EXPLAIN " + s.sql, [None] * len(s.params))])
            except D1Error as exc:
                refused[s.name] = str(exc)
    assert not refused, refused
    assert len(_sql.STATEMENTS) > 150
