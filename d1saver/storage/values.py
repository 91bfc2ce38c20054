"""The values layer: a Python value to the text a row stores, and back.

Serialize with the saver's serde, compress and mark with a codec (d1saver/storage/codec.py), and
move to the `chunks` table whatever would take a row past D1's 2 MB limit; loading reverses
it. No I/O, no SQL: testable alone with a serde.

Chunks. An owner's parts are exactly the rows its marker "c:<n>" names, seq 0..n-1: a row
written again replaces its parts in the same batch (d1saver/sql/catalogue.py), and a read joins
parts 0..n-1 only, so parts that rows of d1saver 0.1.0 left past n are never mixed in.

Metadata. Metadata stays plain JSON in its column so that SQL can filter on it and walk it.
When a row cannot hold it (defect 15), its full JSON goes to chunks of owner ':metadata',
codec-encoded, and the column keeps its small top-level keys (the filterable part) plus
`METADATA_KEY: "c:<n>"`. A filter on a key the column lacks is then decided in Python.

Encryption keys. With a `Sealer`, every value is compressed and sealed as one "e:" text bound
to its row by the `Bind` the caller gives (d1saver/storage/crypto.py), then chunked if need be: parts
are parts of one sealed text, so a part moved, lost or mixed in fails the whole. A
checkpoint's metadata keeps in its column only `PLAIN_METADATA` (LangGraph's own bookkeeping,
no user content: what d1saver's SQL reads, and the ids the row holds anyway); the rest, when
there is any, is sealed inside the checkpoint's value, ahead of it (`_frame`; the seal's flag
says so), so a row costs one seal, 40 characters. The value is bound to the plaintext part
and to the row's `channels` column, so neither can be altered apart from it. Filters on
other keys are decided in Python, on the opened metadata.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Container, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple, cast

from langgraph.checkpoint.serde.base import SerializerProtocol

from d1saver.storage import codec as _codec
from d1saver.storage import manifest as _manifest
from d1saver.storage.manifest import Chunk, Chunks
from d1saver.storage.crypto import Bind, Binding, CheckpointBind, Sealer, refuse_plaintext
from d1saver.core.errors import (
    ConfigError,
    D1Error,
    IntegrityError,
    PlaintextValueError,
    ResponseError,
    SerializationError,
    StoredValueError,
)

# Parts of chunked values, per owner ('' the checkpoint, '<task_id>/<idx>' a write,
# METADATA_OWNER a checkpoint's metadata): (seq, text) pairs in any order.
Parts = Mapping[str, Sequence[tuple[int, str]]]

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
PLAIN_METADATA = ("counters_since_delta_snapshot", "parents", "run_id", "source", "step")


# A manifest longer than this is not used: the value is stored whole (with keys' path rules),
# so that a manifest always fits its row and SQL can read every one (never a "c:" part).
_MANIFEST_MAX = 500_000


class Serialized(NamedTuple):
    """A value as its serde made it: the type tag and the bytes."""

    type: str
    data: bytes


@dataclass(frozen=True)
class StoredValue:
    """A serialized value ready to store: the row's type and text (the encoded value, its
    chunk marker, or its "m:" manifest), plus the parts when it lives in chunks, and for a
    manifest the chunks the thread may not hold yet and every id it reaches."""

    type: str
    text: str
    parts: list[str] | None
    new_chunks: list[Chunk] = field(default_factory=list)
    reached: frozenset[str] | set[str] = frozenset()

    def chunked(self) -> StoredValue:
        """The same value moved to chunks (however small), to make room in its row."""
        if self.parts is not None:
            return self
        return replace(self, text=_codec.chunk_marker(1), parts=[self.text])


@dataclass(frozen=True)
class StoredMetadata:
    """Metadata ready to store: the column's JSON, plus the parts of the whole when chunked."""

    text: str
    parts: list[str] | None


def _json(obj: Any, what: str) -> str:
    try:
        return json.dumps(obj, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise SerializationError(f"{what} must be JSON: {exc}") from None


def utf8_size(text: str) -> int:
    """Bytes of `text` in a row (a lone surrogate is refused later, when the request is built)."""
    return len(text.encode("utf-8", "surrogatepass"))


def _parts(text: str) -> list[str]:
    return _codec.split(text) or [text]


def fit_row(value: StoredValue, metadata: Mapping[str, Any], fixed: int
            ) -> tuple[StoredValue, StoredMetadata]:
    """A checkpoint's value and metadata as one row of at most ROW_MAX bytes, `fixed` being
    what its other columns take. Metadata moves to chunks only if it cannot fit even beside a
    chunked value (beside the value itself if it is an "m:" manifest, which is never split:
    SQL reads it, to return, check and collect its chunks); then a value stored whole moves if
    the row still exceeds ROW_MAX (a manifest, at most _MANIFEST_MAX, always fits then)."""
    md_text = _json(dict(metadata), "checkpoint metadata")
    stored = StoredMetadata(md_text, None)
    manifest = _manifest.is_manifest(value.text)
    stays = len(value.text) if manifest else _MARKER_MAX
    if METADATA_KEY in metadata or fixed + stays + utf8_size(md_text) > ROW_MAX:
        try:
            data = md_text.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise SerializationError(
                f"checkpoint metadata is not valid Unicode ({exc.reason})") from None
        parts = _parts(_codec.encode(data))
        kept = _filterable_part(metadata, min(_KEPT_MAX, ROW_MAX - fixed - stays - _MARKER_MAX))
        kept[METADATA_KEY] = _codec.chunk_marker(len(parts))
        stored = StoredMetadata(_json(kept, "checkpoint metadata"), parts)
    if fixed + len(value.text) + utf8_size(stored.text) > ROW_MAX and not manifest:
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


def _join(marker: str, parts: Parts | None, owner: str,
          binding: Binding | None = None) -> str:
    """The text of a chunked value: parts 0..n-1 of its owner, n from its marker. With keys
    (a `binding`) a part missing is an integrity failure of the value."""
    expected = int(marker.split(":", 1)[1])
    by_seq = dict((parts or {}).get(owner, []))
    found = [by_seq[seq] for seq in range(expected) if seq in by_seq]
    if len(found) != expected:
        why = f"stored in {expected} chunks, {len(found)} found"
        if binding is not None:
            raise binding.fail(IntegrityError, f"is {why}: nothing was returned")
        raise ResponseError(f"value {why}")
    return "".join(found)


def load_metadata(text: str | None, parts: Parts | None) -> dict[str, Any]:
    """A checkpoint's metadata from its column, joined from its chunks when it lives there."""
    metadata = json.loads(text) if text else {}
    marker = metadata.get(METADATA_KEY) if isinstance(metadata, dict) else None
    if not (isinstance(marker, str) and _codec.is_chunked(marker)):
        return cast(dict[str, Any], metadata)
    joined = _join(marker, parts, METADATA_OWNER)
    try:
        return cast(dict[str, Any], json.loads(_codec.decode(joined).decode("utf-8")))
    except (ValueError, UnicodeDecodeError) as exc:
        raise StoredValueError(f"stored metadata cannot be read ({exc})") from exc


def _frame(rest: bytes, data: bytes) -> bytes:
    """A checkpoint's sealed plaintext when its metadata has more than PLAIN_METADATA: that
    rest as JSON (which never holds a raw NUL), a NUL, then the serialized checkpoint."""
    return rest + b"\x00" + data


def _unframe(framed: bytes) -> tuple[bytes, bytes]:
    rest, _, data = framed.partition(b"\x00")
    return rest, data


class Values:
    """Dumps and loads stored values with one serde, sealed when given a `Sealer`."""

    def __init__(self, serde: SerializerProtocol, sealer: Sealer | None = None) -> None:
        self.serde = serde
        self.sealer = sealer

    # --- values ---------------------------------------------------------------------------

    def serialize(self, obj: Any) -> Serialized:
        """`obj` as the serde's type tag and bytes: what a write stores, taken at once so that
        nothing the caller changes afterwards is stored (d1saver/ops/statements.py)."""
        return Serialized(*self._serialize(obj))

    def dump(self, obj: Any, bind: Bind, room: int = _codec.CHUNK_SIZE,
             held: Container[str] | None = None) -> StoredValue:
        """`obj` serialized, then stored as `dump_serialized` does."""
        return self.dump_serialized(self.serialize(obj), bind, room, held)

    def dump_serialized(self, value: Serialized, bind: Bind, room: int = _codec.CHUNK_SIZE,
                        held: Container[str] | None = None) -> StoredValue:
        """A serialized value; as a manifest over the thread's chunks when `held` (the ids the
        thread is known to hold) is given and the value has parts worth storing apart; else
        in chunks when its text exceeds a part or the `room` its row has left. With keys
        sealed whole, bound by bind(the serde's type tag)."""
        type_, data = value
        packed = self._pack(type_, data, held)
        if packed is not None:
            return packed
        text = _codec.encode(data) if self.sealer is None else self.sealer.seal_text(
            data, bind(type_))
        return _stored(type_, text, room)

    def _pack(self, type_: str, data: bytes, held: Container[str] | None) -> StoredValue | None:
        """The value as an "m:" manifest (content-addressed), or None. Not with keys: sealed
        values are stored whole (docs/STORAGE_DESIGN.md)."""
        if held is None or self.sealer is not None:
            return None
        packed = _manifest.pack(data, held, _codec.encode)
        if packed is None or len(packed.text) > _MANIFEST_MAX:
            return None
        return StoredValue(type_, packed.text, None, packed.new, packed.reached)

    def load(self, type_: str | None, text: str | None, parts: Parts | None,
             owner: str, bind: Bind, chunks: Mapping[str, str] | None = None) -> Any:
        """The value of a row; a "c:" row is joined from its owner's parts first, an "m:"
        row from the thread's `chunks` (id -> data). With keys it is opened under
        bind(type_), the binding of the row it was read from."""
        binding = None if self.sealer is None else bind(type_)
        if text is None and binding is None:
            return None
        return self._deserialize(type_, self._open(text, parts, owner, binding, chunks))

    def _serialize(self, obj: Any) -> tuple[str, bytes]:
        try:
            return self.serde.dumps_typed(obj)
        except Exception as exc:  # the serde's own errors vary by type
            raise SerializationError(
                f"cannot serialize {type(obj).__name__}: {type(exc).__name__}: {exc}"
            ) from exc

    def _deserialize(self, type_: str | None, data: bytes) -> Any:
        try:
            return self.serde.loads_typed((cast(str, type_), data))
        except D1Error:
            raise
        except Exception as exc:  # the serde's refusals vary by kind
            raise StoredValueError(
                f"a stored value cannot be read ({type(exc).__name__}: {exc})") from exc

    def _open(self, text: str | None, parts: Parts | None, owner: str,
              binding: Binding | None, chunks: Mapping[str, str] | None = None) -> bytes:
        """A row's text (joined from its parts or its chunks) to bytes: opened under
        `binding` with keys."""
        if text is None:  # with keys: a sealed value is never NULL
            raise cast(Binding, binding).fail(PlaintextValueError,
                                              "is missing (NULL): nothing was returned")
        if _codec.is_chunked(text):
            text = _join(text, parts, owner, binding)
        if _manifest.is_manifest(text):
            if binding is not None:  # written without keys: not authenticated
                raise binding.fail(PlaintextValueError, "is stored by content without a seal "
                                   "(written before keys were set): nothing was returned")
            return unpack(text, chunks)
        if binding is not None:
            return cast(Sealer, self.sealer).open_text(text, binding)
        try:
            return _codec.decode(text)
        except Exception as exc:  # an unknown codec, damaged data, sealed text without keys
            raise StoredValueError(
                f"a stored value cannot be read ({type(exc).__name__}: {exc})") from exc

    # --- checkpoints: value and metadata --------------------------------------------------

    def dump_checkpoint(self, checkpoint: Serialized, metadata: Mapping[str, Any], channels: str,
                        bind: CheckpointBind, fixed: int, held: Container[str] | None = None
                        ) -> tuple[StoredValue, StoredMetadata]:
        """A checkpoint row's value (serialized: `serialize`) and metadata column, `fixed`
        being what its other columns take (see `fit_row`); a manifest over the thread's chunks
        when `held` is given (see `dump`). With keys the column holds PLAIN_METADATA, and the
        rest of the metadata is sealed with the checkpoint, bound to the column and `channels`."""
        type_, data = checkpoint
        if self.sealer is None:
            value = self._pack(type_, data, held)
            if value is None:
                value = _stored(type_, _codec.encode(data), _codec.CHUNK_SIZE)
            return fit_row(value, metadata, fixed + len(type_))
        plain = {k: metadata[k] for k in PLAIN_METADATA if k in metadata}
        column = _json(plain, "checkpoint metadata")
        rest = {k: v for k, v in metadata.items() if k not in plain}
        if rest:
            data = _frame(_utf8(_json(rest, "checkpoint metadata")), data)
        text = self.sealer.seal_text(data, bind(type_, bound_columns(plain, channels)),
                                     flag=bool(rest))
        room = ROW_MAX - fixed - len(type_) - utf8_size(column)
        return _stored(type_, text, room), StoredMetadata(column, None)

    def load_checkpoint(self, type_: str | None, text: str, parts: Parts | None,
                        column: str | None, channels: str | None, bind: CheckpointBind,
                        chunks: Mapping[str, str] | None = None
                        ) -> tuple[Any, dict[str, Any]]:
        """A checkpoint and its metadata, from the row's value (and parts or chunks),
        metadata column and channels; with keys opened under the binding of the row they were
        read from."""
        if self.sealer is None:
            return (self._deserialize(type_, self._open(text, parts, "", None, chunks)),
                    load_metadata(column, parts))
        plain = self._plain_part(column, lambda: bind(type_, None))
        binding = bind(type_, bound_columns(plain, channels))
        if text is None:
            raise refuse_plaintext(binding)
        if _codec.is_chunked(text):
            text = _join(text, parts, "", binding)
        if _manifest.is_manifest(text):
            raise binding.fail(PlaintextValueError, "is stored by content without a seal "
                               "(written before keys were set): nothing was returned")
        data, framed = self.sealer.open_flagged(text, binding)
        if not framed:
            return self._deserialize(type_, data), plain
        rest, data = _unframe(data)
        try:
            metadata = {**plain, **json.loads(rest)}
        except ValueError as exc:  # authentic, but not JSON: written by a newer d1saver?
            raise StoredValueError(f"stored metadata cannot be read ({exc})") from exc
        return self._deserialize(type_, data), metadata

    @staticmethod
    def _plain_part(column: str | None, where: Callable[[], Binding]) -> dict[str, Any]:
        """A keyed metadata column: a JSON object, or the row was altered."""
        try:
            stored = json.loads(column) if column else {}
        except ValueError:
            stored = None
        if not isinstance(stored, dict):
            raise where().fail(IntegrityError, "has metadata that is not a JSON object: it was "
                                               "altered; nothing was returned")
        return stored

    # --- re-sealing: copies and rekeying (never deserialized) -----------------------------

    def reseal(self, text: str | None, parts: Parts | None, owner: str, old: Binding,
               new: Binding, *, plaintext: bool, chunks: Mapping[str, str] | None = None
               ) -> tuple[str, list[str] | None] | None:
        """A stored value (row text and parts) opened under `old` and sealed under the newest
        key, bound to `new`, as (row text, parts); in chunks if it was (a sealed text keeps
        its length). A plaintext value is sealed if `plaintext` (rows written before keys were
        set), else None: left as it is; one stored by content ("m:") is unpacked from `chunks`
        (its thread's, id -> data) and sealed whole, as a put with keys stores it."""
        sealer = self._sealer()
        if text is None:
            return None
        chunked = _codec.is_chunked(text)
        joined = _join(text, parts, owner, old) if chunked else text
        if _codec.is_sealed(joined):
            out = sealer.reseal_text(joined, old, new)
        elif plaintext:
            out = sealer.seal_text(_plain_bytes(joined, chunks), new)
        else:
            return None
        return _resplit(out, chunked)

    def reseal_checkpoint(self, type_: str | None, text: str, parts: Parts | None,
                          column: str, channels: str | None, old: CheckpointBind,
                          new: CheckpointBind, *, plaintext: bool,
                          chunks: Mapping[str, str] | None = None
                          ) -> tuple[tuple[str, list[str] | None], str] | None:
        """A checkpoint row's value re-sealed as `reseal` does (one stored by content unpacked
        from `chunks`), and its metadata column: the same, or, for a row written before keys
        were set (if `plaintext`), the column cut to PLAIN_METADATA and the rest sealed in the
        value, as a put with keys would."""
        sealer = self._sealer()
        chunked = _codec.is_chunked(text)
        joined = _join(text, parts, "", old(type_, None)) if chunked else text
        if _codec.is_sealed(joined):
            columns = bound_columns(self._plain_part(column, lambda: old(type_, None)), channels)
            out = sealer.reseal_text(joined, old(type_, columns), new(type_, columns))
            return _resplit(out, chunked), column
        if not plaintext:
            return None
        metadata = load_metadata(column, parts)  # plaintext, inline or in chunks
        data = _plain_bytes(joined, chunks)
        plain = {k: metadata[k] for k in PLAIN_METADATA if k in metadata}
        rest = {k: v for k, v in metadata.items() if k not in plain}
        if rest:
            data = _frame(_utf8(_json(rest, "checkpoint metadata")), data)
        out = sealer.seal_text(data, new(type_, bound_columns(plain, channels)),
                               flag=bool(rest))
        return _resplit(out, chunked), _json(plain, "checkpoint metadata")

    def _sealer(self) -> Sealer:
        if self.sealer is None:
            raise ConfigError("re-sealing needs encryption keys (encryption_keys, or "
                              "D1SAVER_ENCRYPTION_KEYS)")
        return self.sealer


def _stored(type_: str, text: str, room: int) -> StoredValue:
    """A value's row text, or its chunk marker and parts when it exceeds a part or `room`."""
    if len(text) <= min(room, _codec.CHUNK_SIZE):
        return StoredValue(type_, text, None)
    parts = _parts(text)
    return StoredValue(type_, _codec.chunk_marker(len(parts)), parts)


def unpack(text: str, chunks: Mapping[str, str] | None) -> bytes:
    """The bytes of an "m:" manifest from its thread's chunks; a chunk that was not returned
    is D1's answer missing a part (or the table broken): a typed error naming it."""
    try:
        return _manifest.unpack(text, chunks or {}, _codec.decode)
    except KeyError as exc:
        raise ResponseError(f"value lists chunk {exc.args[0]!r}, which was not returned") from None
    except (ValueError, TypeError) as exc:
        raise StoredValueError(f"a stored manifest cannot be read ({exc})") from exc


def _plain_bytes(text: str, chunks: Mapping[str, str] | None) -> bytes:
    """The bytes of a plaintext row's text: decoded, or unpacked from its thread's `chunks`
    when it is an "m:" manifest."""
    if _manifest.is_manifest(text):
        return unpack(text, chunks)
    return _codec.decode(text)


def _resplit(text: str, chunked: bool) -> tuple[str, list[str] | None]:
    """A re-sealed text as (row text, parts): in chunks if the value was, or must be."""
    if not chunked and len(text) <= _codec.CHUNK_SIZE:
        return text, None
    parts = _parts(text)
    return _codec.chunk_marker(len(parts)), parts


def _utf8(text: str) -> bytes:
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise SerializationError(f"checkpoint metadata is not valid Unicode ({exc.reason})") from None


__all__ = ["METADATA_KEY", "METADATA_OWNER", "PLAIN_METADATA", "Chunks", "Parts", "ROW_MAX",
           "Serialized", "StoredMetadata", "StoredValue", "Values", "bound_columns", "fit_row",
           "load_metadata", "utf8_size"]
