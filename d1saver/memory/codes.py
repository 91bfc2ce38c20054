"""The prefilter of search by meaning: a vector's code, and which items can be in a page.

Pure: no SQL, no I/O. A code is the stored vector (float32) quantized to one signed byte a
dimension with its scale, the largest error of that quantization, and the vector's norm, so
that every score the exact scan would give is bounded from the code alone: |q.v - q.v'| <=
err * |q|_1. The store reads every item's codes (about a quarter of the vectors' bytes, no
value), keeps the items whose upper bound reaches the k-th best lower bound, and ranks those
exactly from their full vectors: the page is the exact scan's page, whatever the data
(docs/STORE.md). numpy is used when installed, with a pure-Python fallback.
"""

from __future__ import annotations

import base64
import math
import struct
from collections.abc import Sequence
from typing import Any

# Code text: base64 of [format 1][f32 scale][f32 err][f64 norm][int8 x dims]. The format byte
# names the layout, so a later one can stand beside it.
_FORMAT = 1
_HEAD = struct.Struct("<Bffd")
# Bounds are widened by this much (relative, and absolute) for floating-point rounding: the
# exact scan and the bounds sum in different orders.
_SLACK = 1e-9

Bounds = tuple[float, float]


def _np() -> Any:
    try:
        import numpy
    except ImportError:  # optional: the pure-Python fallback below
        return None
    return numpy


def _f32_up(x: float) -> float:
    """The least float32 not below x."""
    f = struct.unpack("<f", struct.pack("<f", x))[0]
    if f >= x:
        return float(f)
    bits = struct.unpack("<I", struct.pack("<f", f))[0]
    return float(struct.unpack("<f", struct.pack("<I", bits + 1))[0])


def encode(vector: Sequence[float]) -> str:
    """The code of a stored vector (the float32 values `pack_vector` stores)."""
    top = max((abs(x) for x in vector), default=0.0)
    scale = struct.unpack("<f", struct.pack("<f", top / 127 if top > 0 else 1.0))[0]
    ints = [max(-127, min(127, round(x / scale))) for x in vector]
    err = max((abs(x - scale * c) for x, c in zip(vector, ints, strict=True)), default=0.0)
    norm = math.sqrt(math.fsum(x * x for x in vector))
    head = _HEAD.pack(_FORMAT, scale, _f32_up(err), norm)
    return base64.b64encode(head + struct.pack(f"<{len(ints)}b", *ints)).decode("ascii")


def _parts(code: str) -> tuple[float, float, float, bytes] | None:
    raw = base64.b64decode(code)
    if len(raw) < _HEAD.size or raw[0] != _FORMAT:
        return None
    fmt, scale, err, norm = _HEAD.unpack_from(raw)
    return scale, err, norm, raw[_HEAD.size:]


def bounds(query: Sequence[float], codes: Sequence[str | None], distance: str
           ) -> list[Bounds | None]:
    """For each code, the interval its vector's score lies in (scored as values.similarity
    scores); None for a vector without a readable code (it must be ranked from its vector)."""
    out: list[Bounds | None] = [None] * len(codes)
    parts = [(_parts(c) if c else None) for c in codes]
    dims = len(query)
    good = [n for n, p in enumerate(parts) if p is not None and len(p[3]) == dims]
    if not good:
        return out
    q1 = math.fsum(abs(x) for x in query)
    qn = math.sqrt(math.fsum(x * x for x in query))
    np = _np()
    if np is not None:
        ints = np.frombuffer(b"".join(parts[n][3] for n in good),  # type: ignore[index]
                             dtype=np.int8).reshape(len(good), dims)
        head = np.array([parts[n][:3] for n in good], dtype=np.float64)  # type: ignore[index]
        dots = (ints.astype(np.float64) @ np.asarray(query, dtype=np.float64)) * head[:, 0]
        errs = head[:, 1] * q1
        norms = head[:, 2]
        approx = [(float(d), float(e), float(m)) for d, e, m in zip(dots, errs, norms,
                                                                      strict=True)]
    else:
        approx = []
        for n in good:
            scale, err, norm, data = parts[n]  # type: ignore[misc]
            ints_ = struct.unpack(f"<{dims}b", data)
            approx.append((scale * math.fsum(a * b for a, b in zip(query, ints_, strict=True)),
                           err * q1, norm))
    for n, (dot, err, norm) in zip(good, approx, strict=True):
        pad = _SLACK * (abs(dot) + err + qn * norm) + 1e-12
        lo, hi = dot - err - pad, dot + err + pad
        if distance == "cosine":
            if norm == 0 or qn == 0:
                out[n] = (0.0, 0.0)
                continue
            lo, hi = lo / (qn * norm), hi / (qn * norm)
            slack = _SLACK * (abs(lo) + abs(hi)) + 1e-12
            out[n] = (lo - slack, hi + slack)
        elif distance == "inner_product":
            out[n] = (lo, hi)
        else:  # l2: the score is -|q - v|, and |q - v|^2 = |q|^2 + |v|^2 - 2 q.v
            base = qn * qn + norm * norm
            far, near = max(0.0, base - 2 * lo), max(0.0, base - 2 * hi)
            slack = _SLACK * base + 1e-12
            out[n] = (-math.sqrt(far + slack), -math.sqrt(max(0.0, near - slack)))
    return out


def candidates(items: Sequence[tuple[bool, list[Bounds | None]]], need: int) -> list[int]:
    """Which items (by position) can be among the `need` best: `items` gives each item's
    (sure: SQL knows it passes the filter, the bounds of each of its vectors). An item's score is
    its best vector's. An item is kept when its upper bound reaches the `need`-th best lower
    bound among the sure items; items with a vector without bounds are always kept; if fewer
    than `need` sure items have vectors, every item is kept (items without vectors may fill
    the page then, as the exact scan fills it)."""
    if need <= 0:
        return []
    lows: list[float] = []
    for sure, vecs in items:
        if sure and vecs:
            lows.append(max(-math.inf if b is None else b[0] for b in vecs))
    if len(lows) < need:
        return list(range(len(items)))
    lows.sort(reverse=True)
    floor = lows[need - 1]
    out = []
    for n, (_, vecs) in enumerate(items):
        if vecs and max(math.inf if b is None else b[1] for b in vecs) >= floor:
            out.append(n)
    return out


__all__ = ["bounds", "candidates", "encode"]
