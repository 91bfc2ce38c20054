"""The frozen 0.3.0 databases: what release 0.3.0 wrote, loaded into any D1 for the tests of
every later release (tests/saver/test_v0_3_0_data.py; made by make_v0_3_0.py).

Two databases of the same scenarios (the graphs of v0_1_0_graphs.py): "plain", stored by
content (chunk rows, manifests, packed writes, a frozen DeltaChannel history after a prune),
and "keyed", sealed under KEY. Each row of v0_3_0.jsonl names its database and table; the
loader inserts the rows table by table in LOAD_ORDER (chunk rows before the rows that list
them, as the schema's triggers require) with statements built from COLUMNS only.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from d1saver import D1Saver, Statement
from tests.support import execute_in_batches

HERE = Path(__file__).resolve().parent
ROWS_PATH = HERE / "v0_3_0.jsonl"
EXPECTED_PATH = HERE / "v0_3_0_expected.json"
SCHEMA_PATH = HERE / "v0_3_0_schema.sql"
# A test key, public on purpose: the keyed database is sealed under it.
KEY = "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY="
DATABASES = ("plain", "keyed")
# The tables 0.3.0 keeps data in, in the order they load, with their columns as 0.3.0 made them.
COLUMNS: dict[str, tuple[str, ...]] = {}  # filled from the expected file's "columns" (frozen there)
LOAD_ORDER = ("d1saver_chunks", "checkpoints", "writes", "chunks", "delta_unwritten", "delta_frozen", "tags",
              "store_items", "store_vectors", "cache_entries")
BATCH_STATEMENTS = 40
BATCH_BYTES = 900_000


def embed(texts: list[str]) -> list[list[float]]:
    """The memory scenario's embedding: letter frequencies over 8 dimensions (no network)."""
    out = []
    for text in texts:
        v = [0.0] * 8
        for ch in text.lower():
            if ch.isalpha():
                v[(ord(ch) - 97) % 8] += 1.0
        out.append(v)
    return out


MEMORY_NS = ("users", "ana", "memories")
MEMORY_ITEMS = {"seat": {"text": "always a window seat", "score": 3},
                "food": {"text": "vegetarian meals only", "score": 5},
                "noindex": {"text": "not searchable by meaning", "score": 1}}
CACHE_KEYS = [(("forecast", "lisbon"), "today"), (("forecast", "porto"), "today")]


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


def load_rows(saver: D1Saver, rows: Iterable[Mapping[str, Any]], database: str,
              columns: Mapping[str, list[str]]) -> dict[str, int]:
    """Insert one database's rows, table by table in LOAD_ORDER; returns rows per table."""
    counts = {t: 0 for t in LOAD_ORDER}
    ordered = sorted((r for r in rows if r["db"] == database), key=lambda r: (
        LOAD_ORDER.index(r["table"]), r["row"].get("level", 0) if r["table"] == "d1saver_chunks" else 0))

    def statements() -> Iterator[Statement]:
        for item in ordered:
            table, row = item["table"], item["row"]
            names = columns[table]
            if set(row) != set(names):
                raise ValueError(f"{table} row has columns {sorted(row)}, expected {sorted(names)}")
            sql = f"INSERT OR IGNORE INTO {table} ({', '.join(names)}) VALUES ({', '.join('?' * len(names))})"
            counts[table] += 1
            yield Statement(sql, tuple(row[c] for c in names))

    execute_in_batches(saver, statements(), max_statements=BATCH_STATEMENTS, max_bytes=BATCH_BYTES)
    return counts


def dump(saver: D1Saver, columns: Mapping[str, list[str]]) -> list[tuple[str, dict[str, Any]]]:
    """Every row of the data tables, each table in primary-key order."""
    out = []
    for table in LOAD_ORDER:
        names = columns[table]
        (result,) = saver.execute([Statement(f"SELECT {', '.join(names)} FROM {table} ORDER BY {', '.join(names)}")])
        out += [(table, dict(zip(names, row, strict=True))) for row in result.rows]
    return out
