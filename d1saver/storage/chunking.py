"""Content-defined chunks of a serialized value, each named by its hash: what a thread stores once.

Pure: bytes in, pieces out; no I/O. `split` cuts a value along its own msgpack structure (LangGraph's
serde writes msgpack): every element of a large array or map is a piece of its own, so a message
appended to the conversation's list is one new piece and every older message keeps its piece, and
the message a task wrote as a pending write (`[msg]`) is the very piece the next checkpoint holds.
Any other array or map is opened, never stored whole. An element too large for one piece is cut inside by FastCDC (pyfastcdc, the fastcdc-rs 2020
algorithm with its default gear table); bytes that are not one msgpack value are cut by FastCDC
alone. Framing between elements (headers, map keys, small scalars such as timestamps and
versions) and elements under `STORED_MIN` stay inline: a row of their own would cost more than
their bytes. Measured choices are in docs/STORAGE_DESIGN.md.

Piece boundaries and ids are stored forever (a chunk's id names its bytes in every manifest that
lists it): changing `STORED_MIN`, `PIECE_MAX`, the CDC sizes or the id function breaks no stored
row, but new pieces would no longer match old ones. tests/storage/test_chunking.py pins them.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import struct
from dataclasses import dataclass

from pyfastcdc import FastCDC

# An element (or whole value) of STORED_MIN..PIECE_MAX bytes is one stored piece; smaller ones stay
# inline. A LangChain message serializes to 300-1,000 bytes: each is its own piece.
STORED_MIN = 256
PIECE_MAX = 32 * 1024
# In an array of LONG_ARRAY elements or more (a conversation), elements from LONG_ELEMENT_MIN
# bytes on are pieces too: a short user message (a LangChain HumanMessage of a sentence is
# about 200 bytes) is otherwise sent again inline with every checkpoint of the thread.
LONG_ARRAY = 8
LONG_ELEMENT_MIN = 128
# Containers of more items than this are cut by FastCDC (or kept inline) rather than walked item by
# item in Python (a few microseconds an item).
WALK_MAX = 4096
# FastCDC inside elements over PIECE_MAX (and for bytes that are not msgpack): min/avg/max sizes.
CDC_MIN, CDC_AVG, CDC_MAX = 4 * 1024, 16 * 1024, 64 * 1024
# 20 bytes: collisions need ~2**80 work (see docs/STORAGE_DESIGN.md).
ID_BYTES = 20
# Ids are base85 (25 characters, not base64url's 27: a manifest lists ~10 of them per checkpoint),
# with "^" (which marks a node in a manifest) written as ".". No id holds ',', ':', '"' or '\\'.
_ID_FROM_B85 = str.maketrans("^", ".")
_ID_TO_B85 = str.maketrans(".", "^")
# base85's alphabet (RFC 1924, as base64.b85encode) with "." for "^", and every pair of its
# digits: an id's text is made three table lookups per 4 bytes (_id_text).
_ID_DIGITS = ("0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz!#$%&()*+-;<=>?@^_`{|}~"
              .translate(_ID_FROM_B85))
_ID_PAIRS = [a + b for a in _ID_DIGITS for b in _ID_DIGITS]
_ID_WORDS = struct.Struct(f">{ID_BYTES // 4}I").unpack

# Domain tags, hashed before the content: a leaf's id is the hash of LEAF + its bytes, a tree
# node's the hash of NODE + its text, so no bytes of one kind can take the id of the other (a
# piece is user content and may spell a node's text: the tail of a long string starting "^").
# Both are 16 bytes, so neither tagged input is a prefix of the other's. Any later kind of id
# gets a tag of its own. Schema v7 and v8 hashed leaves bare and nodes as "^" + text: readers
# still accept those ids (names), writers never make them.
LEAF = b"d1saver:leaf:v9\x00"
NODE = b"d1saver:node:v9\x00"

__all__ = ["ID_BYTES", "LEAF", "LONG_ARRAY", "LONG_ELEMENT_MIN", "NODE", "Piece", "chunk_id",
           "id_prefix", "join", "names", "node_id", "split"]


@dataclass(frozen=True, slots=True)
class Piece:
    """A contiguous part of a value: stored once per thread under `id`, or inline (`id` None)."""

    data: bytes
    id: str | None


def chunk_id(data: bytes, domain: bytes = LEAF) -> str:
    """The id of a chunk: SHA-256 of `domain` + `data` (LEAF: a piece's bytes; NODE: a tree
    node's text), truncated to 20 bytes, in base85 with "." for "^" (25 characters)."""
    return _id_text(hashlib.sha256(domain + data).digest()[:ID_BYTES])


def node_id(text: str) -> str:
    """The id of a tree node whose data (its children's refs joined by ',') is `text`."""
    return chunk_id(text.encode("ascii"), NODE)


@functools.lru_cache(maxsize=4096)
def _id_text(digest: bytes) -> str:
    """base85 of a 20-byte digest, "." for "^": what base64.b85encode gives, by tables (Python's
    base85 is pure Python: 2 us for 20 bytes, 1.3 here, against 0.7 us for the SHA-256 of a
    600-byte message; a read checks every chunk it returns). Cached: a put hashes every
    message of the state again."""
    return "".join([_ID_DIGITS[w // 52_200_625] + _ID_PAIRS[w // 7225 % 7225] + _ID_PAIRS[w % 7225]
                    for w in _ID_WORDS(digest)])


def names(chunk: str, data: bytes, domain: bytes = LEAF) -> bool:
    """Whether `chunk` is the id of `data` of kind `domain` (LEAF: a piece's bytes, NODE: a
    node's text), or the id schema v8 gave it: a leaf's bare hash, a node's hash of "^" + its
    text."""
    if chunk_id(data, domain) == chunk:
        return True
    return _id_text(hashlib.sha256(data if domain == LEAF else b"^" + data).digest()[:ID_BYTES]) == chunk


def id_prefix(chunk: str) -> int:
    """The first 4 bytes of the hash `chunk_id` gave `chunk`, as an integer (tree boundaries)."""
    return int.from_bytes(base64.b85decode(chunk[:5].translate(_ID_TO_B85)), "big")


def join(pieces: list[Piece]) -> bytes:
    """The value `split` was given."""
    return b"".join(p.data for p in pieces)


def split(data: bytes) -> list[Piece]:
    """`data` cut into pieces: stored ones named by `chunk_id`, inline framing merged."""
    cuts: list[tuple[int, int, bool]] = []
    try:
        _cut_value(data, 0, len(data), cuts)
    except (_NotMsgpack, RecursionError):  # RecursionError: nested deeper than Python recurses
        cuts = []
        _cut_cdc(data, 0, len(data), cuts)
    pieces: list[Piece] = []
    inline_from: int | None = None
    for start, end, stored in [*cuts, (len(data), len(data), True)]:
        if not stored:
            inline_from = start if inline_from is None else inline_from
            continue
        if inline_from is not None:
            pieces.extend(_inline(data, inline_from, start))
            inline_from = None
        if end > start:
            chunk = data[start:end]
            pieces.append(Piece(chunk, chunk_id(chunk)))
    return pieces


def _inline(data: bytes, start: int, end: int) -> list[Piece]:
    """Merged framing at data[start:end]: inline, or FastCDC pieces when over PIECE_MAX (a huge
    record of small scalars must not make one row too big for D1)."""
    if end - start <= PIECE_MAX:
        return [Piece(data[start:end], None)] if end > start else []
    cuts: list[tuple[int, int, bool]] = []
    _cut_cdc(data, start, end, cuts)
    return [Piece(data[a:b], chunk_id(data[a:b]) if stored else None) for a, b, stored in cuts]


# --- cutting ---------------------------------------------------------------------------------

def _cut_value(data: bytes, start: int, end: int, cuts: list[tuple[int, int, bool]],
               element: bool = False, minimum: int = STORED_MIN) -> None:
    """Cut the msgpack value at data[start:end], appending (start, end, stored) ranges in order.

    An array element of STORED_MIN..PIECE_MAX bytes is a piece whatever its type (a message, a
    record); any other array or map is opened (its header and small items inline), so a record's
    changing scalars (versions, timestamps) never make a piece of their own; a larger string,
    binary or extension is one piece, or FastCDC pieces beyond PIECE_MAX. The ranges always
    partition [start, end); bytes that are not msgpack raise _NotMsgpack. `minimum`: the
    smallest stored piece (LONG_ELEMENT_MIN for elements of long arrays)."""
    size = end - start
    if size < minimum:
        cuts.append((start, end, False))
        return
    kind, head, n = _header(data, start)
    container = kind == _ARRAY or kind == _MAP
    if size <= PIECE_MAX and (element or not container):
        cuts.append((start, end, True))
        return
    items = n if kind == _ARRAY else 2 * n  # a map's keys and values alike
    if not container or items > WALK_MAX:
        # A large string, binary or extension; or a container of too many items to walk in Python.
        if size <= PIECE_MAX:
            cuts.append((start, end, False))
        else:
            cuts.append((start, start + head, False))
            _cut_cdc(data, start + head, end, cuts)
        return
    cuts.append((start, start + head, False))
    pos = start + head
    smallest = LONG_ELEMENT_MIN if kind == _ARRAY and n >= LONG_ARRAY else STORED_MIN
    for i in range(items):
        item_end = end if i == items - 1 else _skip(data, pos)  # the last item ends with its container
        if item_end > end:
            raise _NotMsgpack
        _cut_value(data, pos, item_end, cuts, element=kind == _ARRAY, minimum=smallest)
        pos = item_end
    if pos != end:  # an empty container with trailing bytes
        raise _NotMsgpack


def _cut_cdc(data: bytes, start: int, end: int, cuts: list[tuple[int, int, bool]]) -> None:
    """FastCDC over data[start:end]; a tail under STORED_MIN stays inline."""
    view = memoryview(data)[start:end]
    # Every parameter explicit (the defaults could change); not thread-safe, so one per call (6 us).
    cdc = FastCDC(avg_size=CDC_AVG, min_size=CDC_MIN, max_size=CDC_MAX, normalized_chunking=1, seed=0)
    for c in cdc.cut_buf(view):
        cuts.append((start + c.offset, start + c.offset + c.length, c.length >= STORED_MIN))


# --- a msgpack skipper: value boundaries from headers, nothing decoded ----------------------

class _NotMsgpack(Exception):
    """The bytes are not exactly one well-formed msgpack value."""


_SCALAR, _RAW, _ARRAY, _MAP = 0, 1, 2, 3

# First bytes 0xc0-0xdf: (kind, header bytes before the length field, length field bytes) for
# raw/array/map; for scalars the value's whole size. Extensions count their type byte in the
# header. None: never used by msgpack (0xc1).
_TABLE: dict[int, tuple[int, int, int] | None] = {
    0xC0: (_SCALAR, 1, 0), 0xC1: None, 0xC2: (_SCALAR, 1, 0), 0xC3: (_SCALAR, 1, 0),
    0xC4: (_RAW, 1, 1), 0xC5: (_RAW, 1, 2), 0xC6: (_RAW, 1, 4),
    0xC7: (_RAW, 2, 1), 0xC8: (_RAW, 2, 2), 0xC9: (_RAW, 2, 4),
    0xCA: (_SCALAR, 5, 0), 0xCB: (_SCALAR, 9, 0),
    0xCC: (_SCALAR, 2, 0), 0xCD: (_SCALAR, 3, 0), 0xCE: (_SCALAR, 5, 0), 0xCF: (_SCALAR, 9, 0),
    0xD0: (_SCALAR, 2, 0), 0xD1: (_SCALAR, 3, 0), 0xD2: (_SCALAR, 5, 0), 0xD3: (_SCALAR, 9, 0),
    0xD4: (_SCALAR, 3, 0), 0xD5: (_SCALAR, 4, 0), 0xD6: (_SCALAR, 6, 0), 0xD7: (_SCALAR, 10, 0),
    0xD8: (_SCALAR, 18, 0),
    0xD9: (_RAW, 1, 1), 0xDA: (_RAW, 1, 2), 0xDB: (_RAW, 1, 4),
    0xDC: (_ARRAY, 1, 2), 0xDD: (_ARRAY, 1, 4), 0xDE: (_MAP, 1, 2), 0xDF: (_MAP, 1, 4),
}


def _header(data: bytes, pos: int) -> tuple[int, int, int]:
    """(kind, header size, n) of the value at `pos`: n is the payload size of a raw value
    (string, binary, extension), the item count of an array or map, 0 for a scalar."""
    if pos >= len(data):
        raise _NotMsgpack
    b = data[pos]
    if b < 0x80 or b >= 0xE0:
        return _SCALAR, 1, 0
    if b < 0x90:
        return _MAP, 1, b & 0x0F
    if b < 0xA0:
        return _ARRAY, 1, b & 0x0F
    if b < 0xC0:
        return _RAW, 1, b & 0x1F
    entry = _TABLE[b]
    if entry is None:
        raise _NotMsgpack
    kind, before, width = entry
    if kind == _SCALAR:
        return _SCALAR, before, 0
    field = data[pos + 1 : pos + 1 + width]
    if len(field) != width:
        raise _NotMsgpack
    return kind, before + width, int.from_bytes(field, "big")


def _skip(data: bytes, pos: int) -> int:
    """The end of the msgpack value starting at `pos`, an item that more items follow."""
    pending = 1
    while pending:
        pending -= 1
        kind, head, n = _header(data, pos)
        pos += head
        if kind == _RAW:
            pos += n
        elif kind == _ARRAY:
            pending += n
        elif kind == _MAP:
            pending += 2 * n
    if pos >= len(data):  # never a container's last item (_cut_value): another must follow
        raise _NotMsgpack
    return pos
