"""A checkpoint's row at its bounds (d1saver/storage/values.py, fit_row), without a database:
metadata moves to pieces only past ROW_MAX, a value stored whole moves to pieces only past
ROW_MAX beside its metadata (a value in parts never moves again), and metadata in pieces
keeps in its column LangGraph's keys first, then the smallest, up to 65,536 bytes in all.
Each exactly at its bound one way, one byte more the other way. (Through a saver, and a
value of exactly 4,096 bytes of JSON: tests/ops/test_chunks.py.)"""

from __future__ import annotations

import json
from typing import Any

from d1saver.storage.values import METADATA_KEY, ROW_MAX, StoredValue, fit_row

# A value stored whole, as a row's text; and what a chunk marker takes beside it at most.
VALUE = StoredValue("msgpack", "b:AAAA", None)
MARKER_MAX = 64


def column(metadata: dict[str, Any], fixed: int = 0) -> tuple[dict[str, Any], bool]:
    """The metadata column's keys as stored, and whether the whole metadata went to pieces."""
    _, stored = fit_row(VALUE, metadata, fixed)
    return json.loads(stored.text), stored.parts is not None


def note(size: int) -> dict[str, Any]:
    """Metadata whose JSON is `size` bytes: {"note": "..."}."""
    return {"note": "n" * (size - len('{"note":""}'))}


def test_metadata_that_fills_the_row_exactly_stays_in_its_column() -> None:
    """The row's other columns, a marker's room and the metadata adding up to ROW_MAX: the
    metadata stays whole in its column; one byte more and it goes to pieces."""
    fixed = 1_000
    at = note(ROW_MAX - fixed - MARKER_MAX)
    assert column(at, fixed) == (at, False)
    over = note(ROW_MAX - fixed - MARKER_MAX + 1)
    kept, chunked = column(over, fixed)
    assert chunked and "note" not in kept and METADATA_KEY in kept


def test_a_value_that_fills_the_row_beside_its_metadata_stays_whole() -> None:
    """A value stored whole whose text and the metadata's add up to ROW_MAX stays in its row;
    one byte more and the value moves to pieces (the metadata stays)."""
    metadata = {"step": 1}
    size = len(json.dumps(metadata, separators=(",", ":")))
    at = StoredValue("msgpack", "b:" + "A" * (ROW_MAX - size - 2), None)
    value, stored = fit_row(at, metadata, 0)
    assert value == at and stored.parts is None
    over = StoredValue("msgpack", at.text + "A", None)
    value, stored = fit_row(over, metadata, 0)
    assert value.parts == [over.text] and stored.parts is None


def test_the_filterable_part_takes_up_to_65536_bytes_smallest_first() -> None:
    """Keys cost their JSON, their name and 4 bytes of framing: sixteen of 4,096 bytes fill
    65,536 exactly and all stay; one byte more on the largest and it is left out (it still
    reads back from the pieces)."""
    def keys(extra: int) -> dict[str, Any]:
        # "kNN" (3) + 4 + the JSON (4,089: 4,087 characters and quotes) = 4,096 each
        out = {f"k{i:02}": "y" * 4_087 for i in range(16)}
        out["k15"] += "y" * extra
        return out

    kept, chunked = column({**note(ROW_MAX), **keys(0)})
    assert chunked and set(kept) == {*keys(0), METADATA_KEY}
    kept, chunked = column({**note(ROW_MAX), **keys(1)})
    assert chunked and set(kept) == {*keys(0), METADATA_KEY} - {"k15"}
    # LangGraph's own keys go first, however large: a source of 4,012 bytes leaves room for
    # fifteen of the sixteen.
    kept, _ = column({**note(ROW_MAX), **keys(0), "source": "s" * 4_000})
    assert set(kept) == {*keys(0), "source", METADATA_KEY} - {"k15"}


def test_a_value_already_in_parts_stays_as_it_is_however_full_the_row() -> None:
    """A value in parts leaves only its marker in the row: other columns that fill the row
    (a run id, the channels) move the metadata to pieces, never the value's parts again."""
    value = StoredValue("msgpack", "c:2", ["b:AAAA", "BBBB"])
    moved, stored = fit_row(value, {"step": 1}, ROW_MAX - 10)
    assert moved == value and stored.parts is not None
