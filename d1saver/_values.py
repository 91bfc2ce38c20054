"""The values layer: a Python value to the text a row stores, and back.

Serialize with the saver's serde, compress and mark with a codec (d1saver/_codec.py), and
split what exceeds D1's 2 MB value limit into pieces; loading reverses it. No I/O, no SQL:
testable alone with a serde.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

from langgraph.checkpoint.serde.base import SerializerProtocol

from d1saver import _codec
from d1saver._errors import D1Error, ResponseError, SerializationError, StoredValueError

# Pieces of chunked values, per owner ('' the checkpoint, '<task_id>/<idx>' a write):
# (seq, text) pairs in any order.
Pieces = Mapping[str, Sequence[tuple[int, str]]]


@dataclass(frozen=True)
class StoredValue:
    """A serialized value ready to store: the row's type and text, plus pieces when over 2 MB."""

    type: str
    text: str
    pieces: list[str] | None


class Values:
    """Dumps and loads stored values with one serde."""

    def __init__(self, serde: SerializerProtocol) -> None:
        self.serde = serde

    def dump(self, obj: Any) -> StoredValue:
        try:
            type_, data = self.serde.dumps_typed(obj)
        except Exception as exc:  # the serde's own errors vary by type
            raise SerializationError(
                f"cannot serialize {type(obj).__name__}: {type(exc).__name__}: {exc}"
            ) from exc
        text = _codec.encode(data)
        pieces = _codec.split(text)
        if pieces is not None:
            text = _codec.chunk_marker(len(pieces))
        return StoredValue(type_, text, pieces)

    def load(self, type_: str | None, text: str | None, pieces: Pieces | None,
             owner: str) -> Any:
        """The value of a row; a "c:" row is joined from its owner's pieces first."""
        if text is None:
            return None
        if _codec.is_chunked(text):
            parts = sorted((pieces or {}).get(owner, []))
            expected = int(text.split(":", 1)[1])
            if len(parts) != expected:
                raise ResponseError(f"value stored in {expected} chunks, {len(parts)} found")
            text = "".join(p for _, p in parts)
        try:
            return self.serde.loads_typed((cast(str, type_), _codec.decode(text)))
        except D1Error:
            raise
        except Exception as exc:  # the serde's and codec's refusals vary by kind
            raise StoredValueError(
                f"a stored value cannot be read ({type(exc).__name__}: {exc})") from exc


__all__ = ["Pieces", "StoredValue", "Values"]
