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

# Code text: base64 of [format 1][f32 scale][f32 err][f64 norm][int8 x dims][0 x 0-2], zero
# bytes padding it to a multiple of 3 so that its base64 has no "=": the codes of a search
# are decoded joined, in one call. The format byte names the layout, so a later one can
# stand beside it. The norm's squares are summed in order (0.3.0 summed them exactly, with
# fsum: the bounds' _SLACK covers either rounding, so its codes read as they did).
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


def _size(dims: int) -> int:
    """A code's bytes for `dims` dimensions, padded to a multiple of 3."""
    return -(-(_HEAD.size + dims) // 3) * 3


def _scale(top: float) -> float:
    """The quantization step for a vector whose largest |x| is `top`, as a float32: top / 127,
    or the least float32 above 0 when that rounds to 0 (a vector of tiny subnormals)."""
    scale = struct.unpack("<f", struct.pack("<f", top / 127 if top > 0 else 1.0))[0]
    return float(scale) if scale > 0 else _LEAST_F32


_LEAST_F32 = 2.0 ** -149


def _text(scale: float, err: float, norm: float, ints: bytes) -> str:
    raw = _HEAD.pack(_FORMAT, scale, _f32_up(err), norm) + ints
    return base64.b64encode(raw.ljust(_size(len(ints)), b"\0")).decode("ascii")


def encode(vector: Sequence[float]) -> str:
    """The code of a stored vector (the float32 values `pack_vector` stores), in pure Python."""
    top = max((abs(x) for x in vector), default=0.0)
    scale = _scale(top)
    ints = [max(-127, min(127, round(x / scale))) for x in vector]
    err = max((abs(x - scale * c) for x, c in zip(vector, ints, strict=True)), default=0.0)
    total = 0.0
    for x in vector:  # in order, as numpy's cumsum adds (fsum is exact, and 10 times slower)
        total += x * x
    return _text(scale, err, math.sqrt(total), struct.pack(f"<{len(ints)}b", *ints))


def encode_packed(packed: Sequence[str]) -> list[str]:
    """The codes of stored vectors given as `pack_vector` texts (base64 of float32), equal
    bit for bit to `encode` of each: with numpy, the vectors of one length at once (a put of
    a hundred 256-dimension vectors: 1.5 ms instead of 15 in pure Python)."""
    np = _np()
    lengths = {len(p) for p in packed}
    if np is None or len(lengths) != 1 or 0 in lengths:
        return [encode(struct.unpack(f"<{len(raw) // 4}f", raw))
                for raw in map(base64.b64decode, packed)]
    # Texts of one length, decoded joined when none is padded ("="). Each step is the pure
    # one's, element by element in float64 (IEEE's rounding, ties to even as Python's round);
    # the squares are summed in order (cumsum: each partial sum is an output, so in order).
    raw = (b"".join(map(base64.b64decode, packed)) if any("=" in p for p in packed)
           else base64.b64decode("".join(packed)))
    if len(raw) % (4 * len(packed)):
        return [encode(struct.unpack(f"<{len(r) // 4}f", r)) for r in map(base64.b64decode, packed)]
    v = np.frombuffer(raw, dtype="<f4").reshape(len(packed), -1).astype(np.float64)
    top = np.abs(v).max(axis=1)
    scale = np.where(top > 0, top / 127, 1.0).astype(np.float32).astype(np.float64)
    scale = np.where(scale > 0, scale, _LEAST_F32)
    ints = np.clip(np.rint(v / scale[:, None]), -127, 127)
    err = np.abs(v - scale[:, None] * ints).max(axis=1)
    norm = np.sqrt(np.cumsum(v * v, axis=1)[:, -1])
    small = ints.astype(np.int8)
    return [_text(float(scale[n]), float(err[n]), float(norm[n]), small[n].tobytes())
            for n in range(len(packed))]


def _interval(dot: float, err: float, norm: float, qn: float, distance: str) -> Bounds:
    """The score's interval from q.v' (`dot`), its error bound and |v| (pure Python)."""
    pad = _SLACK * (abs(dot) + err + qn * norm) + 1e-12
    lo, hi = dot - err - pad, dot + err + pad
    if distance == "cosine":
        if norm == 0 or qn == 0:
            return (0.0, 0.0)
        lo, hi = lo / (qn * norm), hi / (qn * norm)
        slack = _SLACK * (abs(lo) + abs(hi)) + 1e-12
        return (lo - slack, hi + slack)
    if distance == "inner_product":
        return (lo, hi)
    # l2: the score is -|q - v|, and |q - v|^2 = |q|^2 + |v|^2 - 2 q.v
    base = qn * qn + norm * norm
    far, near = max(0.0, base - 2 * lo), max(0.0, base - 2 * hi)
    slack = _SLACK * base + 1e-12
    return (-math.sqrt(far + slack), -math.sqrt(max(0.0, near - slack)))


def bounds(query: Sequence[float], codes: Sequence[str | None], distance: str
           ) -> list[Bounds | None]:
    """For each code, the interval its vector's score lies in (scored as values.similarity
    scores); None for a vector without a readable code (it must be ranked from its vector)."""
    lo, hi, known = _arrays(query, codes, distance)
    return [(float(a), float(b)) if k else None for a, b, k in zip(lo, hi, known, strict=True)]


def _arrays(query: Sequence[float], codes: Sequence[str | None], distance: str
            ) -> tuple[Sequence[float], Sequence[float], Sequence[bool]]:
    """Lower and upper bounds of each code's score, and whether the code was readable
    (numpy arrays when numpy is installed, else lists)."""
    dims = len(query)
    size = _size(dims)
    width = size * 4 // 3
    good = [n for n, c in enumerate(codes) if c and len(c) == width]
    q1 = math.fsum(abs(x) for x in query)
    qn = math.sqrt(math.fsum(x * x for x in query))
    np = _np()
    if np is None:
        lo = [-math.inf] * len(codes)
        hi = [math.inf] * len(codes)
        known = [False] * len(codes)
        for n in good:
            raw = base64.b64decode(codes[n] or "")
            fmt, scale, err, norm = _HEAD.unpack_from(raw)
            if fmt != _FORMAT:
                continue
            ints = struct.unpack_from(f"<{dims}b", raw, _HEAD.size)
            dot = scale * math.fsum(a * b for a, b in zip(query, ints, strict=True))
            lo[n], hi[n] = _interval(dot, err * q1, norm, qn, distance)
            known[n] = True
        return lo, hi, known
    lo_a = np.full(len(codes), -np.inf)
    hi_a = np.full(len(codes), np.inf)
    known_a = np.zeros(len(codes), dtype=bool)
    if not good:
        return lo_a, hi_a, known_a
    raw = np.frombuffer(base64.b64decode("".join([codes[n] for n in good])),  # type: ignore[misc]
                        dtype=np.uint8).reshape(len(good), size)
    ok = raw[:, 0] == _FORMAT
    scale = raw[:, 1:5].copy().view("<f4")[:, 0].astype(np.float64)
    err = raw[:, 5:9].copy().view("<f4")[:, 0].astype(np.float64) * q1
    norm = raw[:, 9:17].copy().view("<f8")[:, 0]
    ints = raw[:, _HEAD.size:_HEAD.size + dims].view(np.int8).astype(np.float64)
    dot = (ints @ np.asarray(query, dtype=np.float64)) * scale
    pad = _SLACK * (np.abs(dot) + err + qn * norm) + 1e-12
    lo, hi = dot - err - pad, dot + err + pad
    if distance == "cosine":
        zero = (norm == 0) | (qn == 0)
        div = np.where(zero, 1.0, qn * norm)
        lo, hi = lo / div, hi / div
        slack = _SLACK * (np.abs(lo) + np.abs(hi)) + 1e-12
        lo, hi = np.where(zero, 0.0, lo - slack), np.where(zero, 0.0, hi + slack)
    elif distance == "l2":
        base = qn * qn + norm * norm
        slack = _SLACK * base + 1e-12
        far = np.maximum(0.0, base - 2 * lo)
        near = np.maximum(0.0, base - 2 * hi)
        lo, hi = -np.sqrt(far + slack), -np.sqrt(np.maximum(0.0, near - slack))
    where = np.asarray(good)[ok]
    lo_a[where], hi_a[where], known_a[where] = lo[ok], hi[ok], True
    return lo_a, hi_a, known_a


def select(query: Sequence[float], codes: Sequence[str | None], owner: Sequence[int],
           sure: Sequence[bool], need: int, distance: str) -> list[int]:
    """Which items can be among the `need` best. `codes[n]` is a code of item `owner[n]`
    (None or unreadable: bounds unknown); `sure[i]` says SQL knows item i passes the filter.
    An item's score is its best vector's. An item is kept when its upper bound reaches the
    `need`-th best lower bound among the sure items; an item with a vector of unknown bounds
    is always kept; if fewer than `need` sure items have vectors, every item is kept (items
    without vectors may fill the page then, as the exact scan fills it)."""
    items = len(sure)
    if need <= 0:
        return []
    lo, hi, known = _arrays(query, codes, distance)
    np = _np()
    if np is not None and items:
        own = np.asarray(owner, dtype=np.int64)
        low = np.full(items, -np.inf)
        high = np.full(items, -np.inf)
        has = np.zeros(items, dtype=bool)
        np.maximum.at(low, own, lo)
        np.maximum.at(high, own, np.where(known, hi, np.inf))
        has[own] = True
        lows = low[has & np.asarray(sure, dtype=bool)]
        if len(lows) < need:
            return list(range(items))
        floor = np.partition(lows, len(lows) - need)[len(lows) - need]
        return [int(i) for i in np.nonzero(has & (high >= floor))[0]]
    low_l = [-math.inf] * items
    high_l = [-math.inf] * items
    has_l = [False] * items
    for n, i in enumerate(owner):
        low_l[i] = max(low_l[i], lo[n])
        high_l[i] = max(high_l[i], hi[n] if known[n] else math.inf)
        has_l[i] = True
    sure_lows = sorted((low_l[i] for i in range(items) if has_l[i] and sure[i]), reverse=True)
    if len(sure_lows) < need:
        return list(range(items))
    floor_l = sure_lows[need - 1]
    return [i for i in range(items) if has_l[i] and high_l[i] >= floor_l]


__all__ = ["bounds", "encode", "encode_packed", "select"]
