"""Values as D1 moves them between JSON and SQLite: numbers are JavaScript doubles, BLOBs byte arrays."""

from __future__ import annotations

import math
import string
from typing import Any

__all__ = ["bind_value", "json_value", "unhex"]

_JS_SAFE = 2**53


def json_value(value: Any) -> Any:
    """A result value as D1 (JavaScript) serializes it: numbers are doubles."""
    if isinstance(value, bytes):
        return list(value)  # D1 returns BLOBs as arrays of byte values
    if isinstance(value, float):
        if not math.isfinite(value):
            return None
        # A double with an integral value prints as an integer in JSON: REAL 2.0 -> 2.
        return int(value) if value.is_integer() and abs(value) <= _JS_SAFE else value
    if isinstance(value, int) and abs(value) > _JS_SAFE:
        return int(float(value))  # beyond 2**53 a JavaScript number loses precision
    return value


def bind_value(value: Any) -> Any:
    """A JSON parameter as D1 binds it: every number is a JavaScript double, so it binds as REAL
    (probed on workerd: typeof(?) is 'real' for 5). INTEGER columns turn 5.0 back into 5."""
    if isinstance(value, (bool, int)):
        return float(value)
    return value


def unhex(text: Any, ignore: str = "") -> bytes | None:
    """SQLite's unhex() (3.41+) for older libraries: NULL unless `text` is hex pairs, optionally
    separated by characters from `ignore`."""
    if text is None:
        return None
    text = text.decode("utf-8", "replace") if isinstance(text, bytes) else str(text)
    out = bytearray()
    i = 0
    while i < len(text):
        if text[i] in ignore:
            i += 1
            continue
        pair = text[i : i + 2]
        if len(pair) < 2 or not all(ch in string.hexdigits for ch in pair):
            return None
        out.append(int(pair, 16))
        i += 2
    return bytes(out)
