"""The values layer: a Python value to the text a row stores, and back.

Serialize with the saver's serde, compress and mark with a codec (d1saver/_codec.py), and
split what exceeds D1's 2 MB value limit into pieces; loading reverses it. No I/O, no SQL:
testable alone with a serde.

With a `Sealer` (encryption keys), every value is compressed and sealed as one "e:" text
bound to its row by the `Bind` the caller gives (d1saver/_crypto.py), then split: pieces are
parts of one sealed text, so a piece moved, lost or mixed in fails the whole. Metadata keeps
in its column only what d1saver's SQL reads (`PLAIN_METADATA`, LangGraph's own bookkeeping, no
user content) beside the sealed whole under `METADATA_KEY`; the sealed whole is bound to that
plaintext and to the row's `channels`, so neither can be altered apart from it.
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

# Pieces of chunked values, per owner ('' the checkpoint, '<task_id>/<idx>' a write):
# (seq, text) pairs in any order.
Pieces = Mapping[str, Sequence[tuple[int, str]]]

# With keys, the metadata a column keeps in plaintext: what d1saver's SQL reads (the
# DeltaChannel walk and retention read counters_since_delta_snapshot; `d1saver history` shows
# step and source). LangGraph writes them; they hold no user content.
PLAIN_METADATA = ("counters_since_delta_snapshot", "source", "step")
# In a metadata column, the key under which the whole metadata is stored elsewhere: sealed
# ("e:...") with keys. Filter keys cannot spell it (no ':').
METADATA_KEY = "d1saver:metadata"


def _json(obj: Any, what: str) -> str:
    try:
        return json.dumps(obj, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise SerializationError(f"{what} must be JSON: {exc}") from None


def bound_columns(plain: Mapping[str, Any], channels: str | None) -> str:
    """What sealed metadata is bound to besides its row: its plaintext part, canonical, and
    the row's channels column as stored."""
    return json.dumps([plain, channels], ensure_ascii=False, sort_keys=True,
                      separators=(",", ":"))


@dataclass(frozen=True)
class StoredValue:
    """A serialized value ready to store: the row's type and text, plus pieces when over 2 MB."""

    type: str
    text: str
    pieces: list[str] | None


def _join(marker: str, pieces: Pieces | None, owner: str, binding: Binding | None) -> str:
    """The text of a chunked value from its owner's pieces; with keys, a piece missing is
    an integrity failure of the value."""
    parts = sorted((pieces or {}).get(owner, []))
    expected = int(marker.split(":", 1)[1])
    if len(parts) != expected:
        why = f"is stored in {expected} chunks, {len(parts)} found"
        if binding is not None:
            raise binding.fail(IntegrityError, f"{why}: nothing was returned")
        raise ResponseError(f"value {why}")
    return "".join(p for _, p in parts)


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

    def decode(self, text: str, binding: Binding | None) -> bytes:
        if self.sealer is None:
            return _codec.decode(text)
        return self.sealer.open_text(text, cast(Binding, binding))

    def dump(self, obj: Any, bind: Bind) -> StoredValue:
        """`obj` serialized; `bind` names the row (called with the serde's type tag)."""
        try:
            type_, data = self.serde.dumps_typed(obj)
        except Exception as exc:  # the serde's own errors vary by type
            raise SerializationError(
                f"cannot serialize {type(obj).__name__}: {type(exc).__name__}: {exc}"
            ) from exc
        text = self.encode(data, bind, type_)
        pieces = _codec.split(text)
        if pieces is not None:
            text = _codec.chunk_marker(len(pieces))
        return StoredValue(type_, text, pieces)

    def load(self, type_: str | None, text: str | None, pieces: Pieces | None,
             owner: str, bind: Bind) -> Any:
        """The value of a row; a "c:" row is joined from its owner's pieces first."""
        binding = None if self.sealer is None else bind(type_)
        if text is None:
            if binding is not None:  # a sealed value is never NULL
                raise binding.fail(PlaintextValueError, "is missing (NULL): nothing was returned")
            return None
        if _codec.is_chunked(text):
            text = _join(text, pieces, owner, binding)
        try:
            return self.serde.loads_typed((cast(str, type_), self.decode(text, binding)))
        except D1Error:
            raise
        except Exception as exc:  # the serde's and codec's refusals vary by kind
            raise StoredValueError(
                f"a stored value cannot be read ({type(exc).__name__}: {exc})") from exc

    # --- metadata -------------------------------------------------------------------------

    def dump_metadata(self, metadata: Mapping[str, Any], channels: str | None, bind: Bind
                      ) -> str:
        """The metadata column: plain JSON without keys; with keys, PLAIN_METADATA and the
        whole sealed under METADATA_KEY, bound by bind(bound_columns(plain, channels))."""
        text = _json(dict(metadata), "checkpoint metadata")
        if self.sealer is None:
            return text
        plain = {k: metadata[k] for k in PLAIN_METADATA if k in metadata}
        sealed = self.sealer.seal_text(text.encode("utf-8"), bind(bound_columns(plain, channels)))
        return _json({**plain, METADATA_KEY: sealed}, "checkpoint metadata")

    def load_metadata(self, text: str | None, channels: str | None, bind: Bind) -> dict[str, Any]:
        """A checkpoint's metadata from its column (and, with keys, its sealed whole)."""
        if self.sealer is None:
            return cast(dict[str, Any], json.loads(text) if text else {})
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
        data = self.sealer.open_text(sealed, binding)
        try:
            return cast(dict[str, Any], json.loads(data))
        except ValueError as exc:  # authentic but not JSON: written by a newer d1saver?
            raise StoredValueError(f"stored metadata cannot be read ({exc})") from exc


    # --- re-sealing: copies and rekeying (never deserialized) -----------------------------

    def reseal(self, text: str | None, pieces: Pieces | None, owner: str, old: Binding,
               new: Binding, *, plaintext: bool) -> tuple[str, list[str] | None] | None:
        """A stored value (row text and pieces) opened under `old` and sealed under the newest
        key, bound to `new`, as (row text, pieces). A plaintext value is sealed if `plaintext`
        (rows written before keys were set), else None: left as it is."""
        sealer = self._sealer()
        if text is None:
            return None
        joined = _join(text, pieces, owner, old) if _codec.is_chunked(text) else text
        if _codec.is_sealed(joined):
            out = sealer.reseal_text(joined, old, new)
        elif plaintext:
            out = sealer.seal_text(_codec.decode(joined), new)
        else:
            return None
        split = _codec.split(out)
        return (out, None) if split is None else (_codec.chunk_marker(len(split)), split)

    def reseal_metadata(self, text: str, channels: str | None, old: Bind, new: Bind, *,
                        plaintext: bool) -> str | None:
        """A metadata column re-sealed as `reseal` does a value (None: plaintext left)."""
        sealer = self._sealer()
        stored = json.loads(text) if text else {}
        if not isinstance(stored, dict):
            raise old(None).fail(IntegrityError, "is not a JSON object: it was altered")
        plain = dict(stored)
        sealed = plain.pop(METADATA_KEY, None)
        if sealed is None:
            return self.dump_metadata(stored, channels, new) if plaintext else None
        columns = bound_columns(plain, channels)
        return _json({**plain, METADATA_KEY: sealer.reseal_text(
            str(sealed), old(columns), new(columns))}, "checkpoint metadata")

    def _sealer(self) -> Sealer:
        if self.sealer is None:
            raise ConfigError("re-sealing needs encryption keys (encryption_keys, or "
                              "D1SAVER_ENCRYPTION_KEYS)")
        return self.sealer


__all__ = ["METADATA_KEY", "PLAIN_METADATA", "Pieces", "StoredValue", "Values",
           "bound_columns"]
