"""How serialized bytes travel and rest in D1: as TEXT "<codec>:<payload>", marked per value.

D1's REST API carries parameters as JSON and returns BLOB columns as arrays of integers (about
4 bytes per byte), so bytes go as base64 text (4/3). Codecs:
  "b:" base64 of the raw bytes;
  "z:" base64 of zlib-compressed bytes, used above COMPRESS_MIN when it saves at least 10%
       (serialized messages compress 3-5x: most of a checkpoint is repeated English text);
  "c:" the value was over D1's 2 MB limit and lives in the `chunks` table as pieces of
       "b:"/"z:" text; the marker records the piece count.
The marker makes every stored row self-describing, so the format can evolve row by row.
"""

from __future__ import annotations

import base64
import zlib

COMPRESS_MIN = 512
# D1 refuses strings, BLOBs and rows over 2,000,000 bytes; stay clear of it with row overhead.
CHUNK_SIZE = 1_800_000


def encode(data: bytes) -> str:
    """Encode bytes as codec-marked base64 text, compressed when that pays."""
    if len(data) >= COMPRESS_MIN:
        packed = zlib.compress(data, 6)
        if len(packed) <= len(data) * 0.9:
            return "z:" + base64.b64encode(packed).decode("ascii")
    return "b:" + base64.b64encode(data).decode("ascii")


def decode(text: str) -> bytes:
    """Decode text made by `encode` (not a chunk marker: join chunks first)."""
    codec, _, payload = text.partition(":")
    if codec == "b":
        return base64.b64decode(payload)
    if codec == "z":
        return zlib.decompress(base64.b64decode(payload))
    raise ValueError(f"unknown value codec {codec!r}: written by a newer d1saver?")


def split(text: str) -> list[str] | None:
    """Pieces of an encoded value too big for one D1 row, or None when it fits."""
    if len(text) <= CHUNK_SIZE:
        return None
    return [text[i : i + CHUNK_SIZE] for i in range(0, len(text), CHUNK_SIZE)]


def chunk_marker(pieces: int) -> str:
    return f"c:{pieces}"


def is_chunked(text: str | None) -> bool:
    return text is not None and text.startswith("c:")
