"""The frozen 0.3.0 databases: what release 0.3.0 wrote, loaded into any D1 for the tests of
every later release (tests/saver/test_v0_3_0_data.py; made by make_v0_3_0.py).

The same scenarios, databases ("plain" and "keyed", sealed under KEY), tables and loader as
0.2.0's (tests/data/v0_2_0_fixture.py, whose version-independent parts this reuses); only the
files and the schema they load under are 0.3.0's.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from d1saver import D1Saver, Statement
from tests.data.v0_2_0_fixture import (BATCH_BYTES, BATCH_STATEMENTS, CACHE_KEYS, DATABASES,
                                       KEY, LOAD_ORDER, MEMORY_ITEMS, MEMORY_NS, dump, embed,
                                       load_rows)

HERE = Path(__file__).resolve().parent
ROWS_PATH = HERE / "v0_3_0.jsonl"
EXPECTED_PATH = HERE / "v0_3_0_expected.json"
SCHEMA_PATH = HERE / "v0_3_0_schema.sql"


def read_rows(path: Path = ROWS_PATH) -> list[dict[str, Any]]:
    with path.open(encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def expected() -> dict[str, Any]:
    return json.loads(EXPECTED_PATH.read_text(encoding="utf-8"))


def create_schema(saver: D1Saver) -> None:
    """The schema exactly as 0.3.0's schema.sql made it, without setup(): a later release's
    saver then finds the database as 0.3.0 left it, and migrates it."""
    from d1saver.sql.catalogue import split_script

    saver.execute([Statement(sql) for sql in split_script(SCHEMA_PATH.read_text(encoding="utf-8"))])


__all__ = ["BATCH_BYTES", "BATCH_STATEMENTS", "CACHE_KEYS", "DATABASES", "EXPECTED_PATH", "KEY",
           "LOAD_ORDER", "MEMORY_ITEMS", "MEMORY_NS", "ROWS_PATH", "SCHEMA_PATH", "create_schema",
           "dump", "embed", "expected", "load_rows", "read_rows"]
