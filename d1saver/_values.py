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

Encryption keys. With a `Sealer`, every value is compressed and sealed as one "e:" text bound
to its row by the `Bind` the caller gives (d1saver/_crypto.py), then chunked if need be: pieces
are parts of one sealed text, so a piece moved, lost or mixed in fails the whole. Metadata
keeps in its column only `PLAIN_METADATA` (what d1saver's SQL reads: LangGraph's bookkeeping,
no user content) and, under METADATA_KEY, the rest sealed ("e:...", or "c:<n>" when its
sealed text goes to chunks). The sealed rest is bound to that plaintext and to the row's
`channels` column, so neither can be altered apart from it. Filters on other keys are
decided in Python, on the opened metadata.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

from langgraph.checkpoint.serde.base import SerializerProtocol

from d1saver import _codec
from d1saver._crypto import Bind, Binding, Sealer, refuse_plaintext
from d1saver._errors import (
    ConfigError,
    D1Error,
    IntegrityError,
    PlaintextValueError,
    ResponseError,
    SerializationError,
    StoredValueError,
)

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
# With keys, the metadata a column keeps in plaintext: what d1saver's SQL reads (the
# DeltaChannel walk and retention read counters_since_delta_snapshot; `d1saver history` shows
# step and source). LangGraph writes them; they hold no user content.
PLAIN_METADATA = ("counters_since_delta_snapshot", "source", "step")


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


def bound_columns(plain: Mapping[str, Any], channels: str | None) -> str:
    """What sealed metadata is bound to besides its row: its plaintext part, canonical, and
    the row's channels column as stored."""
    return json.dumps([plain, channels], ensure_ascii=False, sort_keys=True,
                      separators=(",", ":"))


def _join(marker: str, pieces: Pieces | None, owner: str,
          binding: Binding | None = None) -> str:
    """The text of a chunked value: pieces 0..n-1 of its owner, n from its marker. With keys
    (a `binding`) a piece missing is an integrity failure of the value."""
    expected = int(marker.split(":", 1)[1])
    parts = dict((pieces or {}).get(owner, []))
    found = [parts[seq] for seq in range(expected) if seq in parts]
    if len(found) != expected:
        why = f"stored in {expected} chunks, {len(found)} found"
        if binding is not None:
            raise binding.fail(IntegrityError, f"is {why}: nothing was returned")
        raise ResponseError(f"value {why}")
    return "".join(found)


def load_metadata(text: str | None, pieces: Pieces | None) -> dict[str, Any]:
    """A checkpoint's metadata from its column, joined from its chunks when it lives there."""
    metadata = json.loads(text) if text else {}
    marker = metadata.get(METADATA_KEY) if isinstance(metadata, dict) else None
    if isinstance(marker, str) and _codec.is_sealed(marker):
        _codec.decode(marker)  # raises: the value is encrypted, give the saver its keys
    if not (isinstance(marker, str) and _codec.is_chunked(marker)):
        return cast(dict[str, Any], metadata)
    joined = _join(marker, pieces, METADATA_OWNER)
    try:
        return cast(dict[str, Any], json.loads(_codec.decode(joined).decode("utf-8")))
    except (ValueError, UnicodeDecodeError) as exc:
        raise StoredValueError(f"stored metadata cannot be read ({exc})") from exc


class Values:
    """Dumps and loads stored values with one serde, sealed when given a `Sealer`."""

    def __init__(self, serde: SerializerProtocol, sealer: Sealer | None = None) -> None:
        self.serde = serde
        self.sealer = sealer

    def encode(self, data: bytes, bind: Bind, field: str | None) -> str:
        """Bytes as a row's text: sealed, bound by bind(field), with keys; else codec-marked."""
        if self.sealer is None:
            return _codec.encode(data)
        return self.sealer.seal_text(data, bind(field))

    def dump(self, obj: Any, bind: Bind, room: int = _codec.CHUNK_SIZE) -> StoredValue:
        """`obj` serialized; in chunks when its text exceeds a piece or the `room` its row
        has left. `bind` names the row (called with the serde's type tag)."""
        try:
            type_, data = self.serde.dumps_typed(obj)
        except Exception as exc:  # the serde's own errors vary by type
            raise SerializationError(
                f"cannot serialize {type(obj).__name__}: {type(exc).__name__}: {exc}"
            ) from exc
        text = self.encode(data, bind, type_)
        if len(text) <= min(room, _codec.CHUNK_SIZE):
            return StoredValue(type_, text, None)
        pieces = _pieces(text)
        return StoredValue(type_, _codec.chunk_marker(len(pieces)), pieces)

    def load(self, type_: str | None, text: str | None, pieces: Pieces | None,
             owner: str, bind: Bind) -> Any:
        """The value of a row; a "c:" row is joined from its owner's pieces first. With keys
        it is opened under bind(type_), the binding of the row it was read from."""
        binding = None if self.sealer is None else bind(type_)
        if text is None:
            if binding is not None:  # a sealed value is never NULL
                raise binding.fail(PlaintextValueError, "is missing (NULL): nothing was returned")
            return None
        if _codec.is_chunked(text):
            text = _join(text, pieces, owner, binding)
        try:
            data = (_codec.decode(text) if self.sealer is None
                    else self.sealer.open_text(text, cast(Binding, binding)))
            return self.serde.loads_typed((cast(str, type_), data))
        except D1Error:
            raise
        except Exception as exc:  # the serde's and codec's refusals vary by kind
            raise StoredValueError(
                f"a stored value cannot be read ({type(exc).__name__}: {exc})") from exc

    # --- metadata -------------------------------------------------------------------------

    def fit_row(self, value: StoredValue, metadata: Mapping[str, Any], channels: str | None,
                bind: Bind, fixed: int) -> tuple[StoredValue, StoredMetadata]:
        """`fit_row` with keys: the column holds PLAIN_METADATA and the whole, sealed under
        bind(bound_columns(...)), inline or, when the row cannot hold it, in chunks."""
        if self.sealer is None:
            return fit_row(value, metadata, fixed)
        plain = {k: metadata[k] for k in PLAIN_METADATA if k in metadata}
        rest = {k: v for k, v in metadata.items() if k not in plain}
        try:
            data = _json(rest, "checkpoint metadata").encode("utf-8")
        except UnicodeEncodeError as exc:
            raise SerializationError(
                f"checkpoint metadata is not valid Unicode ({exc.reason})") from None
        sealed = self.sealer.seal_text(data, bind(bound_columns(plain, channels)))
        stored = StoredMetadata(_json({**plain, METADATA_KEY: sealed}, "checkpoint metadata"),
                                None)
        if fixed + _MARKER_MAX + utf8_size(stored.text) > ROW_MAX:
            pieces = _pieces(sealed)
            stored = StoredMetadata(_json({**plain, METADATA_KEY: _codec.chunk_marker(
                len(pieces))}, "checkpoint metadata"), pieces)
        if fixed + len(value.text) + utf8_size(stored.text) > ROW_MAX:
            value = value.chunked()
        return value, stored

    def load_metadata(self, text: str | None, pieces: Pieces | None, channels: str | None,
                      bind: Bind) -> dict[str, Any]:
        """A checkpoint's metadata from its column; with keys, its sealed whole opened under
        bind(bound_columns(plaintext part, channels))."""
        if self.sealer is None:
            return load_metadata(text, pieces)
        try:
            stored = json.loads(text) if text else {}
        except ValueError:
            stored = None
        if not isinstance(stored, dict):
            raise bind(None).fail(IntegrityError, "is not a JSON object: it was altered; "
                                                  "nothing was returned")
        plain = dict(stored)
        sealed = plain.pop(METADATA_KEY, None)
        binding = bind(bound_columns(plain, channels))
        if not isinstance(sealed, str):
            raise refuse_plaintext(binding)
        if _codec.is_chunked(sealed):
            sealed = _join(sealed, pieces, METADATA_OWNER, binding)
        data = self.sealer.open_text(sealed, binding)
        try:
            rest = json.loads(data)
        except ValueError as exc:  # authentic but not JSON: written by a newer d1saver?
            raise StoredValueError(f"stored metadata cannot be read ({exc})") from exc
        return {**plain, **rest}

    # --- re-sealing: copies and rekeying (never deserialized) -----------------------------

    def reseal(self, text: str | None, pieces: Pieces | None, owner: str, old: Binding,
               new: Binding, *, plaintext: bool) -> tuple[str, list[str] | None] | None:
        """A stored value (row text and pieces) opened under `old` and sealed under the newest
        key, bound to `new`, as (row text, pieces); in chunks if it was (a sealed text keeps
        its length). A plaintext value is sealed if `plaintext` (rows written before keys were
        set), else None: left as it is."""
        sealer = self._sealer()
        if text is None:
            return None
        chunked = _codec.is_chunked(text)
        joined = _join(text, pieces, owner, old) if chunked else text
        if _codec.is_sealed(joined):
            out = sealer.reseal_text(joined, old, new)
        elif plaintext:
            out = sealer.seal_text(_codec.decode(joined), new)
        else:
            return None
        if not chunked and len(out) <= _codec.CHUNK_SIZE:
            return out, None
        split = _pieces(out)
        return _codec.chunk_marker(len(split)), split

    def reseal_metadata(self, text: str, pieces: Pieces | None, channels: str | None,
                        old: Bind, new: Bind, *, plaintext: bool
                        ) -> tuple[str, list[str] | None] | None:
        """A metadata column (and its pieces) re-sealed as `reseal` does a value."""
        sealer = self._sealer()
        try:
            stored = json.loads(text) if text else {}
        except ValueError:
            stored = None
        if not isinstance(stored, dict):
            raise old(None).fail(IntegrityError, "is not a JSON object: it was altered")
        plain = dict(stored)
        marker = plain.pop(METADATA_KEY, None)
        chunked = isinstance(marker, str) and _codec.is_chunked(marker)
        columns = bound_columns(plain, channels)
        joined = _join(marker, pieces, METADATA_OWNER, old(columns)) if chunked else marker
        if not (isinstance(joined, str) and _codec.is_sealed(joined)):
            if not plaintext:
                return None
            # Written before keys were set (d1saver's plaintext forms): sealed as a put would.
            _, md = self.fit_row(StoredValue("", "", None), load_metadata(text, pieces),
                                 channels, new, 0)
            return md.text, md.pieces
        out = sealer.reseal_text(joined, old(columns), new(columns))
        split = _pieces(out) if chunked else None
        kept = _codec.chunk_marker(len(split)) if split is not None else out
        return _json({**plain, METADATA_KEY: kept}, "checkpoint metadata"), split

    def _sealer(self) -> Sealer:
        if self.sealer is None:
            raise ConfigError("re-sealing needs encryption keys (encryption_keys, or "
                              "D1SAVER_ENCRYPTION_KEYS)")
        return self.sealer


__all__ = ["METADATA_KEY", "METADATA_OWNER", "PLAIN_METADATA", "Pieces", "ROW_MAX",
           "StoredMetadata", "StoredValue", "Values", "bound_columns", "fit_row",
           "load_metadata", "utf8_size"]
