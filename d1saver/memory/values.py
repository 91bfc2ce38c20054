"""How a store item's value, a cache entry and a vector are stored: pure, no SQL, no I/O.

An item's value is its JSON object text when it fits a row (readable to SQL, as SqliteStore
stores it); a larger one is compressed with the checkpoints' codec ("r:"/"b:",
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

# What a value's text may take in its row (D1 refuses rows over 2,000,000 bytes; the rest of
# the row, namespace and key, is bounded by the batch size checks of the caller).
VALUE_MAX = 1_800_000


def _size(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


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
    elif len(data) <= VALUE_MAX:
        return text
    else:
        stored = _codec.encode(data)
    if len(stored) > VALUE_MAX:
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
    if _size(stored) > VALUE_MAX:
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
    if not all(math.isfinite(x) for x in out):
        raise InvalidInputError(f"{what} holds NaN or infinity")
    return out


def pack_vector(vector: Sequence[float]) -> str:
    """float32 little-endian, base64: 4 bytes a dimension, 5.33 characters stored."""
    return base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode("ascii")


def unpack_vector(text: str) -> list[float]:
    raw = base64.b64decode(text)
    return list(struct.unpack(f"<{len(raw) // 4}f", raw))


def cosine(query: Sequence[float], vectors: Sequence[Sequence[float]]) -> list[float]:
    """Cosine similarity of `query` with each vector (0 where a norm is 0), as InMemoryStore."""
    if not vectors:
        return []
    try:
        import numpy as np
    except ImportError:
        np = None  # type: ignore[assignment]
    if np is not None:
        x = np.asarray(query, dtype=np.float64)
        y = np.asarray(vectors, dtype=np.float64)
        xn, yn = np.linalg.norm(x), np.linalg.norm(y, axis=1)
        out = np.zeros(len(vectors))
        mask = (yn != 0) & (xn != 0)
        out[mask] = (y[mask] @ x) / (yn[mask] * xn)
        return [float(v) for v in out]
    qn = math.sqrt(sum(a * a for a in query))
    scores = []
    for v in vectors:
        vn = math.sqrt(sum(b * b for b in v))
        dot = sum(a * b for a, b in zip(query, v, strict=True))
        scores.append(dot / (qn * vn) if qn > 0 and vn > 0 else 0.0)
    return scores


# --- filters -----------------------------------------------------------------------------------

OPERATORS = ("$eq", "$ne", "$gt", "$gte", "$lt", "$lte")


def check_filter(filter: Mapping[str, Any] | None) -> None:
    """Refuse (InvalidInputError) a filter with an operator outside OPERATORS, at any depth."""
    if filter is None:
        return
    if not isinstance(filter, Mapping):
        raise InvalidInputError(f"a filter is a dict, not {type(filter).__name__}")

    def walk(node: Any) -> None:
        if isinstance(node, Mapping):
            for k, v in node.items():
                if isinstance(k, str) and k.startswith("$") and k not in OPERATORS:
                    raise InvalidInputError(
                        f"unknown filter operator {k!r}: use one of {', '.join(OPERATORS)}")
                walk(v)
        elif isinstance(node, list | tuple):
            for v in node:
                walk(v)

    walk(filter)


# A longer string operand is compared in Python: the parameter stays far below D1's 2 MB.
_OPERAND_MAX = 10_000
_SIMPLE_KEY = re.compile(r"^[A-Za-z0-9_\- ]{1,64}$")


def sql_filter(filter: Mapping[str, Any] | None) -> tuple[str | None, bool]:
    """The part of a filter SQL can decide, as the JSON parameter of the search statements
    ([[path, kind, operand], ...]: equalities that must hold), and whether that part is the
    whole filter (then SQL can take the page). Kept to what SQL decides exactly as `matches`
    does: equality with a string, a finite number or a bool (Python's 1 == 1.0 == True, as
    JSON's 1, 1.0 and true compare in SQL), and None at the top level (absent or null);
    keys of plain characters, nested dicts followed. The rest is left to Python."""
    if not filter:
        return None, True
    conditions: list[list[Any]] = []
    exact = True

    def walk(path: list[str], want: Any) -> None:
        nonlocal exact
        if isinstance(want, Mapping):
            if not want:  # {} matches any dict: not an equality
                exact = False
                return
            if any(isinstance(k, str) and k.startswith("$") for k in want):
                if set(want) == {"$eq"}:
                    walk(path, want["$eq"])
                else:
                    exact = False
                return
            for k, v in want.items():
                if isinstance(k, str) and _SIMPLE_KEY.match(k):
                    walk([*path, k], v)
                else:
                    exact = False
            return
        where = "$" + "".join(f'."{k}"' for k in path)
        if isinstance(want, str) and len(want) <= _OPERAND_MAX:
            conditions.append([where, "text", want])
        elif isinstance(want, bool):
            conditions.append([where, "number", int(want)])
        elif isinstance(want, int) and abs(want) < 2**53 or (
                isinstance(want, float) and math.isfinite(want)):
            conditions.append([where, "number", want])
        elif want is None and len(path) == 1:
            conditions.append([where, "null", None])
        else:
            exact = False

    for key, want in filter.items():
        if isinstance(key, str) and _SIMPLE_KEY.match(key):
            walk([key], want)
        else:
            exact = False
    if not conditions:
        return None, False
    return json.dumps(conditions, ensure_ascii=False, separators=(",", ":")), exact


def matches(value: Mapping[str, Any], filter: Mapping[str, Any] | None) -> bool:
    """Whether an item's value passes a filter, with InMemoryStore's semantics: each key is
    looked up in the value (a key absent is None), a dict of operators compares, a nested
    dict matches nested keys, a list matches element by element, anything else is ==.
    Comparisons ($gt...) between values that are not numbers are false, not an error."""
    if not filter:
        return True
    return all(_compare(value.get(k), f) for k, f in filter.items())


def _compare(item: Any, want: Any) -> bool:
    if isinstance(want, Mapping):
        if any(isinstance(k, str) and k.startswith("$") for k in want):
            return all(_apply(item, op, arg) for op, arg in want.items())
        if not isinstance(item, Mapping):
            return False
        return all(_compare(item.get(k), v) for k, v in want.items())
    if isinstance(want, list | tuple):
        return (isinstance(item, list | tuple) and len(item) == len(want)
                and all(_compare(i, w) for i, w in zip(item, want, strict=True)))
    return bool(item == want)


def _apply(item: Any, op: str, arg: Any) -> bool:
    if op == "$eq":
        return bool(item == arg)
    if op == "$ne":
        return bool(item != arg)
    try:
        a, b = float(item), float(arg)
    except (TypeError, ValueError):
        return False
    if op == "$gt":
        return a > b
    if op == "$gte":
        return a >= b
    if op == "$lt":
        return a < b
    if op == "$lte":
        return a <= b
    raise InvalidInputError(f"unknown filter operator {op!r}")
