"""How serialized bytes travel and rest in D1: as TEXT "<codec>:<payload>", marked per value.

D1's REST API carries parameters as JSON and returns BLOB columns as arrays of integers (about
4 bytes per byte), so bytes go as text. Codecs:
  "b:" base64 of the raw bytes (values too small or too random to compress);
  "s:" base64, unpadded, of raw deflate (no zlib header nor checksum: 6 bytes) with the preset
       dictionary DICT_V2, from R_MIN bytes, when that saves 10% and its text is the shorter:
       what schema v15 writes. Python's base64 runs in C (binascii: about 0.003 us a byte to
       decode), its base85 in pure Python (about 0.4 us): a read of a 100-turn thread spent
       half its CPU in base85 (benchmarks/RESULTS.md, "Client CPU"). base64 takes 4/3 where
       base85 took 5/4, 7% more text for a compressed value; no compressor at hand repays it
       (docs/STORAGE_DESIGN.md, "Schema v15"). Its alphabet, like base85's, holds no ',', '"'
       nor '\\': manifests need no escaping (d1saver/storage/manifest.py).
  "r:" base85 of the same raw deflate with DICT_V2 (DICT_V1 and then the framing of a LangGraph
       1.x checkpoint with schema v8's versions and of a `Send` packet): what schema v8 to v14
       wrote (0.2.0); read only. The deflate stream's end marker still tells a truncated value
       from a whole one, but with no checksum some damaged bytes decode to other bytes: a
       chunk is checked against its id when read (_manifest.unpack).
  "d:" base85 of zlib-compressed bytes with the preset dictionary DICT_V1 (written by 0.1.0 and
       schema v7 from 128 bytes when it saved 10%, sealed or not; read only). Most writes are
       single small messages that compress poorly alone; the dictionary holds the
       serializer's own framing (LangChain message and checkpoint skeletons, no user text),
       so each value need not spell it out again.
  "z:" base64 of zlib-compressed bytes without a dictionary (rows of d1saver 0.1.0; read only);
  "c:" the value was over D1's 2 MB limit and lives in the `chunks` table as parts of
       encoded text; the marker records the part count.
  "e:" a value sealed with a key (d1saver/storage/crypto.py): key id, codec byte ("r" or "b",
       as `pack` makes it, or "d" as schema v7 made it; upper case when the sealer's caller
       set its flag), nonce, then the AES-256-GCM ciphertext and tag of the packed payload.
       Compressed before sealing, since ciphertext does not compress. From schema v15 "e:~"
       and unpadded base64 (a base85 text never starts with "~"); before, "e:" and base85.
The marker makes every stored row self-describing, so the format can evolve row by row.
DICT_V1 and DICT_V2 must never change: rows written with them are decoded with them. A new
dictionary is a new codec letter.
"""

from __future__ import annotations

import base64
import binascii
import zlib

# D1 refuses strings, BLOBs and rows over 2,000,000 bytes; stay clear of it with row overhead.
CHUNK_SIZE = 1_800_000


DICT_V1 = base64.b64decode(
    "h6F2BKJ0c9kgMjAyNi0wMS0wMVQwMDowMDowMC4wMDAwMDArMDA6MDCiaWTZJDFmMDAwMDAwLTAwMDAtNjAwMC04MDAwLTAw"
    "MDAwMDAwMDAwMK5jaGFubmVsX3ZhbHVlc4OpX19zdGFydF9fgahtZXNzYWdlc5CobWVzc2FnZXOQr2JyYW5jaDp0bzphZ2Vu"
    "dMCwY2hhbm5lbF92ZXJzaW9uc4WpX19zdGFydF9fsTAwMDAwMDAwMDEuMDAwMDAwqG1lc3NhZ2VzsTAwMDAwMDAwMDIuMDAw"
    "MDAwr2JyYW5jaDp0bzphZ2VudLEwMDAwMDAwMDAyLjAwMDAwMK9icmFuY2g6dG86dG9vbHOxMDAwMDAwMDAwMy4wMDAwMDCu"
    "X19wcmVnZWxfdGFza3OxMDAwMDAwMDAwMy4wMDAwMDCtdmVyc2lvbnNfc2VlboSpX19pbnB1dF9fgKlfX3N0YXJ0X1+BqV9f"
    "c3RhcnRfX7EwMDAwMDAwMDAxLjAwMDAwMKVhZ2VudIGvYnJhbmNoOnRvOmFnZW50sTAwMDAwMDAwMDIuMDAwMDAwpXRvb2xz"
    "ga9icmFuY2g6dG86dG9vbHOxMDAwMDAwMDAwMy4wMDAwMDCwdXBkYXRlZF9jaGFubmVsc5OobWVzc2FnZXOvYnJhbmNoOnRv"
    "OmFnZW50rl9fcHJlZ2VsX3Rhc2tzkceuBZS+bGFuZ2NoYWluX2NvcmUubWVzc2FnZXMuc3lzdGVtrVN5c3RlbU1lc3NhZ2WG"
    "p2NvbnRlbnSheLFhZGRpdGlvbmFsX2t3YXJnc4CxcmVzcG9uc2VfbWV0YWRhdGGApHR5cGWmc3lzdGVtpG5hbWXAomlk2SQw"
    "MDAwMDAwMC0wMDAwLTAwMDAtMDAwMC0wMDAwMDAwMDAwMDCzbW9kZWxfdmFsaWRhdGVfanNvbpHHqwWUvWxhbmdjaGFpbl9j"
    "b3JlLm1lc3NhZ2VzLmh1bWFurEh1bWFuTWVzc2FnZYanY29udGVudKF4sWFkZGl0aW9uYWxfa3dhcmdzgLFyZXNwb25zZV9t"
    "ZXRhZGF0YYCkdHlwZaVodW1hbqRuYW1lwKJpZNkkMDAwMDAwMDAtMDAwMC0wMDAwLTAwMDAtMDAwMDAwMDAwMDAws21vZGVs"
    "X3ZhbGlkYXRlX2pzb26RyAFkBZS6bGFuZ2NoYWluX2NvcmUubWVzc2FnZXMuYWmpQUlNZXNzYWdliadjb250ZW50oXixYWRk"
    "aXRpb25hbF9rd2FyZ3OAsXJlc3BvbnNlX21ldGFkYXRhgq1maW5pc2hfcmVhc29uqnRvb2xfY2FsbHOqbW9kZWxfbmFtZaF4"
    "pHR5cGWiYWmkbmFtZcCiaWTZKnJ1bi0wMDAwMDAwMC0wMDAwLTAwMDAtMDAwMC0wMDAwMDAwMDAwMDAtMKp0b29sX2NhbGxz"
    "kYSkbmFtZaZzZWFyY2ikYXJnc4GlcXVlcnmheKJpZK1jYWxsXzAwMDAwMDAwpHR5cGWpdG9vbF9jYWxssmludmFsaWRfdG9v"
    "bF9jYWxsc5CudXNhZ2VfbWV0YWRhdGGDrGlucHV0X3Rva2VucwGtb3V0cHV0X3Rva2VucwGsdG90YWxfdG9rZW5zArNtb2Rl"
    "bF92YWxpZGF0ZV9qc29ukcfiBZS8bGFuZ2NoYWluX2NvcmUubWVzc2FnZXMudG9vbKtUb29sTWVzc2FnZYmnY29udGVudKF4"
    "sWFkZGl0aW9uYWxfa3dhcmdzgLFyZXNwb25zZV9tZXRhZGF0YYCkdHlwZaR0b29spG5hbWWmc2VhcmNoomlk2SQwMDAwMDAw"
    "MC0wMDAwLTAwMDAtMDAwMC0wMDAwMDAwMDAwMDCsdG9vbF9jYWxsX2lkrWNhbGxfMDAwMDAwMDCoYXJ0aWZhY3TApnN0YXR1"
    "c6dzdWNjZXNzs21vZGVsX3ZhbGlkYXRlX2pzb27HrgWUvmxhbmdjaGFpbl9jb3JlLm1lc3NhZ2VzLnN5c3Rlba1TeXN0ZW1N"
    "ZXNzYWdlhqdjb250ZW50oXixYWRkaXRpb25hbF9rd2FyZ3OAsXJlc3BvbnNlX21ldGFkYXRhgKR0eXBlpnN5c3RlbaRuYW1l"
    "wKJpZNkkMDAwMDAwMDAtMDAwMC0wMDAwLTAwMDAtMDAwMDAwMDAwMDAws21vZGVsX3ZhbGlkYXRlX2pzb27HqwWUvWxhbmdj"
    "aGFpbl9jb3JlLm1lc3NhZ2VzLmh1bWFurEh1bWFuTWVzc2FnZYanY29udGVudKF4sWFkZGl0aW9uYWxfa3dhcmdzgLFyZXNw"
    "b25zZV9tZXRhZGF0YYCkdHlwZaVodW1hbqRuYW1lwKJpZNkkMDAwMDAwMDAtMDAwMC0wMDAwLTAwMDAtMDAwMDAwMDAwMDAw"
    "s21vZGVsX3ZhbGlkYXRlX2pzb27IAWQFlLpsYW5nY2hhaW5fY29yZS5tZXNzYWdlcy5haalBSU1lc3NhZ2WJp2NvbnRlbnSh"
    "eLFhZGRpdGlvbmFsX2t3YXJnc4CxcmVzcG9uc2VfbWV0YWRhdGGCrWZpbmlzaF9yZWFzb26qdG9vbF9jYWxsc6ptb2RlbF9u"
    "YW1loXikdHlwZaJhaaRuYW1lwKJpZNkqcnVuLTAwMDAwMDAwLTAwMDAtMDAwMC0wMDAwLTAwMDAwMDAwMDAwMC0wqnRvb2xf"
    "Y2FsbHORhKRuYW1lpnNlYXJjaKRhcmdzgaVxdWVyeaF4omlkrWNhbGxfMDAwMDAwMDCkdHlwZal0b29sX2NhbGyyaW52YWxp"
    "ZF90b29sX2NhbGxzkK51c2FnZV9tZXRhZGF0YYOsaW5wdXRfdG9rZW5zAa1vdXRwdXRfdG9rZW5zAax0b3RhbF90b2tlbnMC"
    "s21vZGVsX3ZhbGlkYXRlX2pzb27H4gWUvGxhbmdjaGFpbl9jb3JlLm1lc3NhZ2VzLnRvb2yrVG9vbE1lc3NhZ2WJp2NvbnRl"
    "bnSheLFhZGRpdGlvbmFsX2t3YXJnc4CxcmVzcG9uc2VfbWV0YWRhdGGApHR5cGWkdG9vbKRuYW1lpnNlYXJjaKJpZNkkMDAw"
    "MDAwMDAtMDAwMC0wMDAwLTAwMDAtMDAwMDAwMDAwMDAwrHRvb2xfY2FsbF9pZK1jYWxsXzAwMDAwMDAwqGFydGlmYWN0wKZz"
    "dGF0dXOnc3VjY2Vzc7Ntb2RlbF92YWxpZGF0ZV9qc29u"
)


# What schema v8 adds to DICT_V1: the msgpack of a checkpoint (empty messages and tasks, ten-digit
# versions) and of Send("tools", <a tool call>), as langgraph-checkpoint 4.3 writes them. zlib
# matches nearest the dictionary's end most cheaply, so these come last.
DICT_V2 = DICT_V1 + base64.b64decode(
    "h6F2BKJ0c9kgMjAyNi0wMS0wMVQwMDowMDowMC4wMDAwMDArMDA6MDCiaWTZJDFmMDAwMDAwLTAwMDAtNjAwMC04MDAwLTAw"
    "MDAwMDAwMDAwMK5jaGFubmVsX3ZhbHVlc4OobWVzc2FnZXOQrl9fcHJlZ2VsX3Rhc2tzkK9icmFuY2g6dG86YWdlbnTAsGNo"
    "YW5uZWxfdmVyc2lvbnOEqV9fc3RhcnRfX6owMDAwMDAwMDAxqG1lc3NhZ2VzqjAwMDAwMDAwMDKvYnJhbmNoOnRvOmFnZW50"
    "qjAwMDAwMDAwMDKuX19wcmVnZWxfdGFza3OqMDAwMDAwMDAwMq12ZXJzaW9uc19zZWVuhKlfX2lucHV0X1+AqV9fc3RhcnRf"
    "X4GpX19zdGFydF9fqjAwMDAwMDAwMDGlYWdlbnSBr2JyYW5jaDp0bzphZ2VudKowMDAwMDAwMDAxpXRvb2xzgLB1cGRhdGVk"
    "X2NoYW5uZWxzk6htZXNzYWdlc69icmFuY2g6dG86YWdlbnSuX19wcmVnZWxfdGFza3PHTAGTr2xhbmdncmFwaC50eXBlc6RT"
    "ZW5kkqV0b29sc4SkbmFtZaF4pGFyZ3OBpXF1ZXJ5oXiiaWSmY2FsbF8wpHR5cGWpdG9vbF9jYWxs"
)
# From this size "r:" is tried: the dictionary makes even a checkpoint's 90-byte head (its
# ts, id and framing) shorter compressed than in base64.
R_MIN = 16


def _deflate(data: bytes) -> bytes:
    packer = zlib.compressobj(6, zlib.DEFLATED, zlib.MAX_WBITS, zdict=DICT_V1)
    return packer.compress(data) + packer.flush()


def _inflate(data: bytes) -> bytes:
    try:
        unpacker = zlib.decompressobj(zlib.MAX_WBITS, zdict=DICT_V1)
        return unpacker.decompress(data) + unpacker.flush()
    except zlib.error as exc:  # not a ValueError: callers turn ValueError into a typed error
        raise ValueError(f"a \"d:\" value is damaged ({exc})") from None


def _raw_deflate(data: bytes) -> bytes:
    packer = zlib.compressobj(6, zlib.DEFLATED, -zlib.MAX_WBITS, zdict=DICT_V2)
    return packer.compress(data) + packer.flush()


def _raw_inflate(data: bytes, codec: str = "r") -> bytes:
    unpacker = zlib.decompressobj(-zlib.MAX_WBITS, zdict=DICT_V2)
    try:
        out = unpacker.decompress(data) + unpacker.flush()
    except zlib.error as exc:
        raise ValueError(f"an \"{codec}:\" value is damaged ({exc})") from None
    if not unpacker.eof or unpacker.unused_data:
        raise ValueError(f"an \"{codec}:\" value is truncated or has trailing bytes")
    return out


def b64(data: bytes) -> str:
    """Unpadded base64 of `data` (the payload of "s:" and of "e:~" texts)."""
    return binascii.b2a_base64(data, newline=False).rstrip(b"=").decode("ascii")


def unb64(text: str) -> bytes:
    """The bytes of unpadded base64 text; anything else (a character outside the alphabet, a
    length no base64 has) raises ValueError (binascii.Error)."""
    return binascii.a2b_base64(text + "=" * (-len(text) % 4), strict_mode=True)


def encode(data: bytes) -> str:
    """Encode bytes as codec-marked text: "s:" (compressed) or "b:", whichever is shorter."""
    raw = "b:" + base64.b64encode(data).decode("ascii")
    if len(data) >= R_MIN:
        deflated = _raw_deflate(data)
        if len(deflated) <= len(data) * 0.9:
            packed = "s:" + b64(deflated)
            if len(packed) < len(raw):
                return packed
    return raw


def decode(text: str) -> bytes:
    """Decode text made by `encode` (not a chunk marker: join chunks first)."""
    if text.startswith("s:"):  # what this version writes: no partition, one copy fewer
        return _raw_inflate(unb64(text[2:]), "s")
    codec, _, payload = text.partition(":")
    if codec == "b":
        return base64.b64decode(payload)
    if codec == "r":
        return _raw_inflate(base64.b85decode(payload))
    if codec == "d":
        return _inflate(base64.b85decode(payload))
    if codec == "z":
        return zlib.decompress(base64.b64decode(payload))
    if codec == "e":
        raise ValueError("the value is encrypted: give the saver its encryption keys "
                         "(encryption_keys, or D1SAVER_ENCRYPTION_KEYS)")
    raise ValueError(f"unknown value codec {codec!r}: written by a newer d1saver?")


PACKED_CODECS = (b"b", b"d", b"r")


def pack(data: bytes) -> bytes:
    """One codec byte and its payload, the plaintext a key seals: "r" (raw deflate with
    DICT_V2, as "r:" and "s:") from R_MIN bytes when that saves 10%, else "b". Schema v7 and 0.1.0
    sealed "d" (zlib with DICT_V1), still opened."""
    if len(data) >= R_MIN:
        deflated = _raw_deflate(data)
        if len(deflated) <= len(data) * 0.9:
            return b"r" + deflated
    return b"b" + data


def unpack(packed: bytes) -> bytes:
    """The bytes `pack` was given."""
    codec, payload = packed[:1], packed[1:]
    if codec == b"b":
        return payload
    if codec == b"r":
        return _raw_inflate(payload)
    if codec == b"d":
        return _inflate(payload)
    raise ValueError(f"unknown packed codec {codec!r}: written by a newer d1saver?")


def is_sealed(text: str | None) -> bool:
    return text is not None and text.startswith("e:")


def split(text: str) -> list[str] | None:
    """Parts of an encoded value too big for one D1 row, or None when it fits."""
    if len(text) <= CHUNK_SIZE:
        return None
    return [text[i : i + CHUNK_SIZE] for i in range(0, len(text), CHUNK_SIZE)]


def chunk_marker(parts: int) -> str:
    return f"c:{parts}"


def is_chunked(text: str | None) -> bool:
    return text is not None and text.startswith("c:")
