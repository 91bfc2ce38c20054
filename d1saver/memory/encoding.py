"""How a store item's value, a cache entry and a vector are stored: pure, no SQL, no I/O.

An item's value is its JSON object text when it fits a row (readable to SQL, as SqliteStore
stores it); a larger one is compressed with the checkpoints' codec ("s:", "r:" before 0.3, "b:";
d1saver/storage/codec.py); with keys it is sealed whole ("e:"), bound to (namespace, key).
A cache entry is the serde's (type, bytes), encoded or sealed the same way, bound to its
(namespace, key, type). A vector is float32 little-endian in base64.
"""

from __future__ import annotations

import base64
import json
import math
import re
import struct
from collections.abc import Mapping, Sequence
from typing import Any

from d1saver.core.errors import (
    InvalidInputError,
    SerializationError,
    StoredValueError,
    ValueTooLargeError,
)
from d1saver.storage import codec as _codec
from d1saver.storage.crypto import (
    Sealer,
    aad_for_cache_entry,
    aad_for_store_item,
    refuse_plaintext,
)

# What a value's text may take as sent: it travels inside a JSON list parameter, where each of
# its quotes, backslashes and control characters is escaped once more (D1 refuses a parameter
# or a row over 2,000,000 bytes; the rest of the row, namespace and key, is checked when the
# parameters are built, d1saver/memory/plan.py).
VALUE_MAX = 1_800_000


def _size(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


def sent_size(text: str) -> int:
    """The bytes `text` takes as a string inside a JSON parameter (its quotes included)."""
    return _size(json.dumps(text, ensure_ascii=False))


def dump_item(value: Mapping[str, Any], ns: str, key: str, sealer: Sealer | None) -> str:
    """The stored text of an item's value (a JSON object)."""
    if not isinstance(value, Mapping):
        raise InvalidInputError(f"a store value is a dict, not {type(value).__name__}")
    try:
        text = json.dumps(dict(value), ensure_ascii=False, separators=(",", ":"),
                          allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise SerializationError(f"the value of item {key!r} is not JSON: {exc}") from exc
    data = text.encode("utf-8", "surrogatepass")
    if sealer is not None:
        stored = sealer.seal_text(data, aad_for_store_item(ns, key))
    elif 6 * len(text) + 2 <= VALUE_MAX or sent_size(text) <= VALUE_MAX:  # a character
        # takes at most 6 bytes as sent ("\\u001f"): a short text is not measured
        return text
    else:  # compressed (opaque to SQL filters; base85/base64 escapes nothing)
        stored = _codec.encode(data)
    if sent_size(stored) > VALUE_MAX:
        raise ValueTooLargeError(
            f"the value of item {key!r} takes {len(stored):,} bytes stored (compressed); a "
            f"D1 row holds {VALUE_MAX:,}: store it in parts")
    return stored


def load_item(text: str, ns: str, key: str, sealer: Sealer | None) -> dict[str, Any]:
    """The value `dump_item` stored; with keys, a value not sealed to this row is refused."""
    if sealer is not None:
        aad = aad_for_store_item(ns, key)
        if not _codec.is_sealed(text):
            raise refuse_plaintext(aad)
        data = sealer.open_text(text, aad)
    elif text.startswith("{"):
        return json.loads(text)
    else:
        try:
            data = _codec.decode(text)
        except ValueError as exc:
            raise StoredValueError(f"stored store item {key!r} of namespace {ns}: {exc}") from exc
    return json.loads(data.decode("utf-8", "surrogatepass"))


def dump_entry(type_: str, data: bytes, ns: str, key: str, sealer: Sealer | None) -> str:
    """A cache entry's stored text: "<type>\\n<codec text>", or sealed (type bound)."""
    if "\n" in type_:
        raise SerializationError(f"serializer type tag {type_!r} holds a newline")
    body = _codec.encode(data) if sealer is None else sealer.seal_text(
        data, aad_for_cache_entry(ns, key, type_))
    stored = f"{type_}\n{body}"
    if sent_size(stored) > VALUE_MAX:
        raise ValueTooLargeError(f"cache entry {key!r} takes {len(stored):,} bytes stored; a "
                                 f"D1 row holds {VALUE_MAX:,}")
    return stored


def load_entry(text: str, ns: str, key: str, sealer: Sealer | None) -> tuple[str, bytes]:
    type_, _, body = text.partition("\n")
    if sealer is not None:
        aad = aad_for_cache_entry(ns, key, type_)
        if not _codec.is_sealed(body):
            raise refuse_plaintext(aad)
        return type_, sealer.open_text(body, aad)
    try:
        return type_, _codec.decode(body)
    except ValueError as exc:
        raise StoredValueError(f"stored cache entry {key!r} of namespace {ns}: {exc}") from exc


# --- vectors ---------------------------------------------------------------------------------


def check_vector(vector: Sequence[float], dims: int | None, what: str) -> list[float]:
    """A vector as floats, refused (InvalidInputError) if its length is not the index's dims
    or it holds NaN or infinity."""
    try:
        out = [float(x) for x in vector]
    except (TypeError, ValueError) as exc:
        raise InvalidInputError(f"{what} is not a vector of numbers: {exc}") from None
    if dims is not None and len(out) != dims:
        raise InvalidInputError(f"{what} has {len(out)} dimensions; the index has {dims}")
    if not math.isfinite(sum(out)) and not all(math.isfinite(x) for x in out):  # a finite
        # sum is all finite: one C loop for the common case
        raise InvalidInputError(f"{what} holds NaN or infinity")
    return out


def pack_vector(vector: Sequence[float]) -> str:
    """float32 little-endian, base64: 4 bytes a dimension, 5.33 characters stored."""
    return base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode("ascii")


def pack_vectors(vectors: Sequence[Sequence[float]], dims: int | None,
                 whats: Sequence[str]) -> list[str]:
    """`pack_vector(check_vector(v, dims, what))` of each vector: the same texts, and the same
    error for a bad one (the one-by-one path decides then). With numpy, read at once."""
    np = _numpy()
    if np is not None and vectors and dims:
        try:
            arr = np.array(vectors)
        except (TypeError, ValueError, OverflowError):
            arr = None
        if arr is not None and arr.dtype.kind in "fiub":  # numbers (no text, no object):
            arr = arr.astype(np.float64)  # each correctly rounded, as float() of it
        else:
            arr = None
        if (arr is not None and arr.shape == (len(vectors), dims)
                and bool((np.abs(arr) <= _F32_MAX).all())):  # finite, and fits a float32
            f32 = arr.astype("<f4")  # the C cast struct.pack("<f") makes
            return [base64.b64encode(row.tobytes()).decode("ascii") for row in f32]
    return [pack_vector(check_vector(v, dims, what)) for v, what in zip(vectors, whats, strict=True)]


_F32_MAX = 3.4028234663852886e38


def _numpy() -> Any:
    try:
        import numpy
    except ImportError:  # optional: the one-by-one path
        return None
    return numpy


def unpack_vector(text: str) -> list[float]:
    raw = base64.b64decode(text)
    return list(struct.unpack(f"<{len(raw) // 4}f", raw))


def unpack_vectors(texts: Sequence[str]) -> Any:
    """The vectors packed in `texts`, in order: with numpy one float64 matrix decoded at once
    (the same values as `unpack_vector`'s), else a list of lists."""
    np = _numpy()
    raws = [base64.b64decode(t) for t in texts]
    if np is None or not raws or not raws[0] or len({len(r) for r in raws}) != 1:
        return [list(struct.unpack(f"<{len(r) // 4}f", r)) for r in raws]
    return np.frombuffer(b"".join(raws), dtype="<f4").reshape(len(raws), -1).astype(np.float64)


def cosine(query: Sequence[float], vectors: Sequence[Sequence[float]]) -> list[float]:
    """Cosine similarity of `query` with each vector (0 where a norm is 0), as InMemoryStore."""
    if len(vectors) == 0:
        return []
    try:
        import numpy as np
    except ImportError:
        return _cosine(query, vectors)
    x = np.asarray(query, dtype=np.float64)
    y = np.asarray(vectors, dtype=np.float64)
    xn, yn = np.linalg.norm(x), np.linalg.norm(y, axis=1)
    out = np.zeros(len(vectors))
    mask = (yn != 0) & (xn != 0)
    out[mask] = (y[mask] @ x) / (yn[mask] * xn)
    return [float(v) for v in out]


def _cosine(query: Sequence[float], vectors: Sequence[Sequence[float]]) -> list[float]:
    """cosine without numpy (the bench extra brings it)."""
    qn = math.sqrt(sum(a * a for a in query))
    scores = []
    for v in vectors:
        vn = math.sqrt(sum(b * b for b in v))
        dot = sum(a * b for a, b in zip(query, v, strict=True))
        scores.append(dot / (qn * vn) if qn > 0 and vn > 0 else 0.0)
    return scores


DISTANCES = ("cosine", "inner_product", "l2")


def similarity(query: Sequence[float], vectors: Sequence[Sequence[float]],
               distance: str = "cosine") -> list[float]:
    """Scores, higher nearer, as PostgresStore gives them for its index's `distance_type`:
    cosine similarity (InMemoryStore's and SqliteStore's only kind), the inner product, or
    the negated Euclidean distance ("l2")."""
    if distance == "cosine":
        return cosine(query, vectors)
    if distance == "inner_product":
        return [math.fsum(a * b for a, b in zip(query, v, strict=True)) for v in vectors]
    return [-math.sqrt(math.fsum((a - b) ** 2 for a, b in zip(query, v, strict=True)))
            for v in vectors]


# --- keys and TTLs --------------------------------------------------------------------------


def check_key(key: Any, what: str) -> None:
    """A key as D1 stores it exactly: a string without NUL (SQLite's JSON functions and D1 cut a
    text at a NUL, so two keys would become one) and without a lone surrogate (no UTF-8)."""
    if not isinstance(key, str):
        raise InvalidInputError(f"{what} is a string, not {type(key).__name__}")
    if "\x00" in key:
        raise InvalidInputError(f"{what} {key!r} contains a NUL character, which D1 cannot "
                                f"store exactly")
    if _SURROGATE.search(key):
        raise InvalidInputError(f"{what} {key!r} holds a lone surrogate: not UTF-8 text")


_SURROGATE = re.compile("[\ud800-\udfff]")


def check_ttl(ttl: Any, unit: str, seconds_per_unit: float) -> float:
    """A TTL as a finite number of `unit` greater than 0 whose expiry time is finite, else
    InvalidInputError (before anything is sent): not a bool, not NaN or infinity, not 0 or
    less, not so large that now + ttl overflows."""
    if isinstance(ttl, bool) or not isinstance(ttl, int | float):
        raise InvalidInputError(f"a TTL is a number of {unit}, not {ttl!r}")
    try:
        seconds = float(ttl) * seconds_per_unit
    except OverflowError:
        seconds = math.inf
    if not math.isfinite(seconds) or not ttl > 0:
        raise InvalidInputError(f"a TTL is a finite number of {unit} greater than 0, not "
                                f"{ttl!r}")
    return float(ttl)
