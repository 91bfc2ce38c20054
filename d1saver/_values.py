"""The values layer: a Python value to the text a row stores, and back.

Serialize with the saver's serde, compress and mark with a codec (d1saver/_codec.py), and
move to the `chunks` table whatever would take a row past D1's 2 MB limit; loading reverses
it. No I/O, no SQL: testable alone with a serde.

Chunks. An owner's pieces are exactly the rows its marker "c:<n>" names, seq 0..n-1: a row
written again replaces its pieces in the same batch (d1saver/_sql.py), and a read joins
pieces 0..n-1 only, so pieces that rows of d1saver 0.1.0 left past n are never mixed in.

Metadata. Metadata stays plain JSON in its column so that SQL can filter on it and walk it.
When a row cannot hold it (defect 15), its full JSON goes to chunks of owner ':metadata',
codec-encoded, and the column keeps its small top-level keys (the filterable part) plus
`METADATA_KEY: "c:<n>"`. A filter on a key the column lacks is then decided in Python.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

from langgraph.checkpoint.serde.base import SerializerProtocol

from d1saver import _codec
from d1saver._errors import D1Error, ResponseError, SerializationError, StoredValueError

# Pieces of chunked values, per owner ('' the checkpoint, '<task_id>/<idx>' a write,
# METADATA_OWNER a checkpoint's metadata): (seq, text) pairs in any order.
Pieces = Mapping[str, Sequence[tuple[int, str]]]

# What the columns of one row may add up to, in bytes: D1 refuses rows over 2,000,000.
ROW_MAX = 1_900_000
METADATA_OWNER = ":metadata"
# In a metadata column, this key names the chunks holding the whole metadata. Filter keys
# cannot spell it (no ':'), and metadata that holds it is always chunked, so in a column it
# is always d1saver's.
METADATA_KEY = "d1saver:metadata"
# The filterable part of chunked metadata: top-level keys whose JSON is at most this long...
_KEPT_VALUE_MAX = 4_096
# ...smallest first, up to this much; LangGraph's own keys first (the DeltaChannel walk and
# compaction read counters_since_delta_snapshot in SQL).
_KEPT_MAX = 65_536
_KEPT_FIRST = ("counters_since_delta_snapshot", "source", "step", "parents", "run_id")
_MARKER_MAX = 64  # a chunk marker, and the metadata key that names one, in bytes at most


@dataclass(frozen=True)
class StoredValue:
    """A serialized value ready to store: the row's type and text (the encoded value, or its
    chunk marker), plus the pieces when it lives in chunks."""

    type: str
    text: str
    pieces: list[str] | None

    def chunked(self) -> StoredValue:
        """The same value moved to chunks (however small), to make room in its row."""
        if self.pieces is not None:
            return self
        return StoredValue(self.type, _codec.chunk_marker(1), [self.text])


@dataclass(frozen=True)
class StoredMetadata:
    """Metadata ready to store: the column's JSON, plus the pieces of the whole when chunked."""

    text: str
    pieces: list[str] | None


def _json(obj: Any, what: str) -> str:
    try:
        return json.dumps(obj, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise SerializationError(f"{what} must be JSON: {exc}") from None


def utf8_size(text: str) -> int:
    """Bytes of `text` in a row (a lone surrogate is refused later, when the request is built)."""
    return len(text.encode("utf-8", "surrogatepass"))


def _pieces(text: str) -> list[str]:
    return _codec.split(text) or [text]


def fit_row(value: StoredValue, metadata: Mapping[str, Any], fixed: int
            ) -> tuple[StoredValue, StoredMetadata]:
    """A checkpoint's value and metadata as one row of at most ROW_MAX bytes, `fixed` being
    what its other columns take. Metadata moves to chunks only if it cannot fit even beside a
    chunked value; then the value moves if the row still exceeds ROW_MAX."""
    md_text = _json(dict(metadata), "checkpoint metadata")
    stored = StoredMetadata(md_text, None)
    if METADATA_KEY in metadata or fixed + _MARKER_MAX + utf8_size(md_text) > ROW_MAX:
        try:
            data = md_text.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise SerializationError(
                f"checkpoint metadata is not valid Unicode ({exc.reason})") from None
        pieces = _pieces(_codec.encode(data))
        kept = _filterable_part(metadata, min(_KEPT_MAX, ROW_MAX - fixed - 2 * _MARKER_MAX))
        kept[METADATA_KEY] = _codec.chunk_marker(len(pieces))
        stored = StoredMetadata(_json(kept, "checkpoint metadata"), pieces)
    if fixed + len(value.text) + utf8_size(stored.text) > ROW_MAX:
        value = value.chunked()
    return value, stored


def _filterable_part(metadata: Mapping[str, Any], budget: int) -> dict[str, Any]:
    sized = sorted(((key not in _KEPT_FIRST, utf8_size(_json(v, "metadata")), key)
                    for key, v in metadata.items() if key != METADATA_KEY))
    kept: dict[str, Any] = {}
    for _, size, key in sized:
        if size <= _KEPT_VALUE_MAX and size + len(key) + 4 <= budget:
            kept[key] = metadata[key]
            budget -= size + len(key) + 4
    return kept


def _join(marker: str, pieces: Pieces | None, owner: str) -> str:
    """The text of a chunked value: pieces 0..n-1 of its owner, n from its marker."""
    expected = int(marker.split(":", 1)[1])
    parts = dict((pieces or {}).get(owner, []))
    found = [parts[seq] for seq in range(expected) if seq in parts]
    if len(found) != expected:
        raise ResponseError(f"value stored in {expected} chunks, {len(found)} found")
    return "".join(found)


def load_metadata(text: str | None, pieces: Pieces | None) -> dict[str, Any]:
    """A checkpoint's metadata from its column, joined from its chunks when it lives there."""
    metadata = json.loads(text) if text else {}
    marker = metadata.get(METADATA_KEY) if isinstance(metadata, dict) else None
    if not (isinstance(marker, str) and _codec.is_chunked(marker)):
        return cast(dict[str, Any], metadata)
    joined = _join(marker, pieces, METADATA_OWNER)
    try:
        return cast(dict[str, Any], json.loads(_codec.decode(joined).decode("utf-8")))
    except (ValueError, UnicodeDecodeError) as exc:
        raise StoredValueError(f"stored metadata cannot be read ({exc})") from exc


class Values:
    """Dumps and loads stored values with one serde."""

    def __init__(self, serde: SerializerProtocol) -> None:
        self.serde = serde

    def dump(self, obj: Any, room: int = _codec.CHUNK_SIZE) -> StoredValue:
        """`obj` serialized; in chunks when its text exceeds a piece or the `room` its row
        has left."""
        try:
            type_, data = self.serde.dumps_typed(obj)
        except Exception as exc:  # the serde's own errors vary by type
            raise SerializationError(
                f"cannot serialize {type(obj).__name__}: {type(exc).__name__}: {exc}"
            ) from exc
        text = _codec.encode(data)
        if len(text) <= min(room, _codec.CHUNK_SIZE):
            return StoredValue(type_, text, None)
        pieces = _pieces(text)
        return StoredValue(type_, _codec.chunk_marker(len(pieces)), pieces)

    def load(self, type_: str | None, text: str | None, pieces: Pieces | None,
             owner: str) -> Any:
        """The value of a row; a "c:" row is joined from its owner's pieces first."""
        if text is None:
            return None
        if _codec.is_chunked(text):
            text = _join(text, pieces, owner)
        try:
            return self.serde.loads_typed((cast(str, type_), _codec.decode(text)))
        except D1Error:
            raise
        except Exception as exc:  # the serde's and codec's refusals vary by kind
            raise StoredValueError(
                f"a stored value cannot be read ({type(exc).__name__}: {exc})") from exc


__all__ = ["METADATA_KEY", "METADATA_OWNER", "Pieces", "ROW_MAX", "StoredMetadata",
           "StoredValue", "Values", "fit_row", "load_metadata", "utf8_size"]
