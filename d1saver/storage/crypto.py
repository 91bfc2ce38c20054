"""Authenticated encryption of stored values: AES-256-GCM under keys given newest first.

A sealed value is  key id (3) || codec (1) || nonce (12) || ciphertext || tag (16): 32 bytes
more than the bytes it seals. The key id, the first 3 bytes of HMAC-SHA256(key, "d1saver key
id"), lets a reader pick the key without trial decryption and says nothing about the key
(two keys with the same id are refused when the keys are given). The codec byte says whether
the plaintext is deflated (d1saver/storage/codec.py, `pack`), and in upper case carries the caller's
one-bit flag; it is in clear and authenticated as associated data. New values are sealed with the newest key; any key held opens (rotation).
Nonces are random 96-bit values: NIST SP 800-38D allows 2^32 seals per key that way, far
more than one database's rows.

Stored as "e:~" and unpadded base64, the alphabet of d1saver's compressed values ("s:"), so
that a key adds 43 or 44 characters ("~" and 32 bytes) to a compressed value, and at most 44
to one stored raw ("b:"), over what the same value takes without a key. The key id fills the first base64 group: the 4
characters after "e:~" name the key, which is how SQL finds rows under another key
(`Sealer.fresh_heads`: the first 7 characters of a sealed text). Schema v8 to v14 wrote "e:"
and base85 (Python decodes base85 in pure Python, base64 in C: d1saver/storage/codec.py),
whose first group, key id and codec, is the 5 characters after "e:"; a base85 text never
starts with "~", so both read.

The associated data (a `Binding`) is where the value is stored: its kind (checkpoint,
metadata, write, chunk), the row's identity (thread, namespace, checkpoint; task, index and
channel for a write) and the serializer's type tag, as length-prefixed fields. A value that
was altered, or moved or copied to another row, fails authentication (`IntegrityError`),
and so does a plaintext row where keys are set (`PlaintextValueError`); nothing of it is
returned. The codec compresses before sealing (see d1saver/storage/codec.py), so a value's stored
length still tracks how well its plaintext compresses.

Key ids use the standard library (HMAC); only
AES-GCM needs the `cryptography` package, the `encryption` extra.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
import struct
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, cast

from d1saver.storage import codec as _codec
from d1saver.core.errors import ConfigError, IntegrityError, PlaintextValueError, UnknownKeyError

KEY_SIZE = 32
KEY_ID_SIZE = 3
CODEC_SIZE = 1
NONCE_SIZE = 12
TAG_SIZE = 16
HEADER_SIZE = KEY_ID_SIZE + CODEC_SIZE
OVERHEAD = HEADER_SIZE + NONCE_SIZE + TAG_SIZE
ENV_KEYS = "D1SAVER_ENCRYPTION_KEYS"
SEALED = "e:"
SEALED_B64 = "e:~"  # schema v15 on: unpadded base64 (before: base85 after "e:")
HEAD_CHARS = len(SEALED) + 5  # "e:~" and the base64 group of the key id, or "e:" and the
                              # base85 group of key id and codec

_KEY_ID_LABEL = b"d1saver key id"
_AAD_VERSION = b"d1saver aad v1\x00"
_KINDS = {"checkpoint": b"C", "metadata": b"M", "write": b"W", "chunk": b"K",
          "store item": b"S", "cache entry": b"Q"}
_GENERATE = ("generate one with: python -c \"import base64, os; "
             "print(base64.b64encode(os.urandom(32)).decode())\"")

Key = bytes | str


# --- keys -------------------------------------------------------------------------------------


def new_key() -> str:
    """A fresh random key, as the base64 text D1SAVER_ENCRYPTION_KEYS holds."""
    return base64.b64encode(os.urandom(KEY_SIZE)).decode("ascii")


def parse_key(key: Key, position: int = 1, label: str = "encryption key") -> bytes:
    """A key as 32 bytes, from bytes or base64 text (standard or URL-safe alphabet).
    Errors name it by `label` and `position` (1 = newest), never by its value."""
    name = f"{label} {position}"
    if isinstance(key, (bytes, bytearray, memoryview)):
        raw = bytes(key)
        where = f"{name} ({len(raw)} bytes given)"
    elif isinstance(key, str):
        decoded = _b64decode(key.strip())
        if decoded is None:
            raise ConfigError(f"{name} is not base64 text; {_GENERATE}")
        raw = decoded
        where = f"{name} (base64 of {len(raw)} bytes)"
    else:
        raise ConfigError(f"{name} is a {type(key).__name__}: give bytes or base64 text")
    if len(raw) != KEY_SIZE:
        raise ConfigError(f"{where}: AES-256 needs exactly {KEY_SIZE} bytes; {_GENERATE}")
    return raw


def _b64decode(text: str) -> bytes | None:
    # No exception escapes with the key text in its context: failure is None.
    try:
        return base64.b64decode(text.replace("-", "+").replace("_", "/"), validate=True)
    except (binascii.Error, ValueError):
        return None


def parse_keys(keys: Sequence[Key] | Key, label: str = "encryption key") -> list[bytes]:
    """Keys newest first, each 32 bytes; at least one, no two with the same key id."""
    if isinstance(keys, (str, bytes)):
        keys = [keys]  # one key given bare
    parsed = [parse_key(k, i, label) for i, k in enumerate(keys, start=1)]
    if not parsed:
        raise ConfigError(f"no encryption keys given; {_GENERATE}")
    seen: dict[bytes, int] = {}
    for i, k in enumerate(parsed, start=1):
        kid = key_id(k)
        if kid in seen:
            raise ConfigError(f"{label}s {seen[kid]} and {i} have the same key id "
                              "(the same key twice?): give each key once")
        seen[kid] = i
    return parsed


def keys_from_env(environ: Mapping[str, str] | None = None) -> list[bytes] | None:
    """The keys in D1SAVER_ENCRYPTION_KEYS (comma-separated base64, newest first), or None
    when it is unset or blank."""
    text = (os.environ if environ is None else environ).get(ENV_KEYS, "")
    if not text.strip():
        return None
    items = [item.strip() for item in text.split(",")]
    for i, item in enumerate(items, start=1):
        if not item:
            raise ConfigError(f"{ENV_KEYS} key {i} is empty (a stray comma?)")
    return parse_keys(items, label=f"{ENV_KEYS} key")


def key_id(key: bytes) -> bytes:
    """The KEY_ID_SIZE-byte (3) id stored with every value sealed under `key`."""
    return hmac.new(key, _KEY_ID_LABEL, hashlib.sha256).digest()[:KEY_ID_SIZE]


# --- associated data --------------------------------------------------------------------------


@dataclass(frozen=True)
class Binding:
    """Where a value is stored: the associated data that binds it there, and how an error
    names the row. Build one with the aad_for_* functions."""

    kind: str
    fields: tuple[str | None, ...]
    thread_id: str | None = None
    checkpoint_ns: str | None = None
    checkpoint_id: str | None = None

    def __bytes__(self) -> bytes:
        # Every field is tagged and length-prefixed, so no two bindings encode alike.
        out = [_AAD_VERSION, _KINDS[self.kind], struct.pack(">I", len(self.fields))]
        for f in self.fields:
            if f is None:
                out.append(b"\x00")
            else:
                raw = f.encode("utf-8")
                out += [b"\x01", struct.pack(">I", len(raw)), raw]
        return b"".join(out)

    def describe(self) -> str:
        if self.kind in ("store item", "cache entry"):
            return f"stored {self.kind} {self.fields[1]!r} of namespace {self.fields[0]}"
        if self.thread_id is None:
            return f"stored {self.kind} {self.fields[0]!r}"
        return (f"stored {self.kind} of thread {self.thread_id!r}, checkpoint "
                f"{self.checkpoint_id!r} (namespace {self.checkpoint_ns!r})")

    def fail(self, cls: type[IntegrityError], why: str) -> IntegrityError:
        return cls(f"{self.describe()} {why}", thread_id=self.thread_id,
                   checkpoint_ns=self.checkpoint_ns, checkpoint_id=self.checkpoint_id)


def aad_for_checkpoint(thread_id: str, ns: str, checkpoint_id: str,
                       part: Literal["checkpoint", "metadata"], *,
                       type_: str | None, columns: str | None = None) -> Binding:
    """The binding of a checkpoint's value or metadata; `type_` is the serializer's type tag
    stored beside the value (None for metadata), so the tag cannot be swapped either.
    `columns` is what the row keeps readable to SQL beside the sealed value (its metadata's
    plaintext part and its channels: d1saver/storage/values.py), so that it cannot be altered apart
    from it."""
    if part not in ("checkpoint", "metadata"):
        raise ValueError(f"part must be 'checkpoint' or 'metadata', not {part!r}")
    return Binding(part, (thread_id, ns, checkpoint_id, type_, columns),
                   thread_id, ns, checkpoint_id)


def aad_for_write(thread_id: str, ns: str, checkpoint_id: str, task_id: str, idx: int,
                  channel: str, *, type_: str | None, task_path: str = "") -> Binding:
    """The binding of one pending write: its checkpoint, slot (task_id, idx), channel, and
    task_path (which orders a checkpoint's writes)."""
    return Binding("write", (thread_id, ns, checkpoint_id, task_id, str(int(idx)), channel, type_,
                             task_path), thread_id, ns, checkpoint_id)


def aad_for_chunk(chunk_id: str) -> Binding:
    """The binding of a content-addressed chunk: its keyed-hash id (shared across threads)."""
    return Binding("chunk", (chunk_id,))


# A Bind completes a row's binding with what is known only when the value is (de)coded: the
# serializer's type tag; for a checkpoint also the plaintext columns bound to it (its
# metadata's plaintext part and its channels: d1saver/storage/values.py).
Bind = Callable[[str | None], Binding]
CheckpointBind = Callable[[str | None, str | None], Binding]


def aad_for_store_item(ns: str, key: str) -> Binding:
    """The binding of a D1Store item's value: its namespace (as stored) and key."""
    return Binding("store item", (ns, key))


def aad_for_cache_entry(ns: str, key: str, type_: str) -> Binding:
    """The binding of a D1Cache entry: its namespace (as stored), key and serializer tag."""
    return Binding("cache entry", (ns, key, type_))


def checkpoint_binder(thread_id: str, ns: str, checkpoint_id: str) -> CheckpointBind:
    return lambda type_, columns: aad_for_checkpoint(thread_id, ns, checkpoint_id, "checkpoint",
                                                     type_=type_, columns=columns)


def write_binder(thread_id: str, ns: str, checkpoint_id: str, task_id: str, task_path: str,
                 idx: int, channel: str) -> Bind:
    return lambda type_: aad_for_write(thread_id, ns, checkpoint_id, task_id, idx, channel,
                                       type_=type_, task_path=task_path)


def key_id_of_text(text: str | None) -> str | None:
    """The hex id of the key a stored "e:" text was sealed under (None for other text); its
    first HEAD_CHARS characters suffice (SQL groups rows by them: see `Sealer.fresh_heads`)."""
    if not _codec.is_sealed(text) or len(cast(str, text)) < HEAD_CHARS:
        return None
    head = cast(str, text)[:HEAD_CHARS]
    try:
        if head.startswith(SEALED_B64):
            return _codec.unb64(head[len(SEALED_B64):]).hex()
        return base64.b85decode(head[len(SEALED):])[:KEY_ID_SIZE].hex()
    except ValueError:
        return None


def refuse_plaintext(aad: Binding) -> PlaintextValueError:
    """The error for a plaintext value where keys require a sealed one."""
    return cast(PlaintextValueError, aad.fail(PlaintextValueError, (
        "is not encrypted, but this saver has keys: planted by someone without the key, or "
        "written before keys were set (`d1saver rekey --seal-plaintext` seals such rows); "
        "nothing was returned")))


# --- sealing ----------------------------------------------------------------------------------


def _aesgcm() -> tuple[Any, type[Exception]]:
    """cryptography's AESGCM class and its InvalidTag error, or a ConfigError naming the fix."""
    try:
        from cryptography.exceptions import InvalidTag
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM
    except ImportError:
        pass  # raised below, outside the handler
    else:
        return AESGCM, InvalidTag
    raise ConfigError("encryption keys need the 'cryptography' package: "
                      "pip install 'd1saver[encryption]'")


class Sealer:
    """Seals values with the newest key and opens values sealed under any of `keys`
    (newest first; each 32 bytes, as bytes or base64 text)."""

    def __init__(self, keys: Sequence[Key] | Key) -> None:
        aesgcm, self._invalid_tag = _aesgcm()
        parsed = parse_keys(keys)
        self._ciphers = {key_id(k): aesgcm(k) for k in parsed}
        self._newest = key_id(parsed[0])

    def __repr__(self) -> str:
        return f"Sealer(keys={len(self._ciphers)}, newest={self._newest.hex()})"

    @property
    def key_ids(self) -> list[str]:
        """The held keys' ids in hex, newest first (as error messages show them)."""
        return [kid.hex() for kid in self._ciphers]

    @property
    def fresh_heads(self) -> list[str]:
        """The first HEAD_CHARS characters a text sealed under the newest key starts with:
        "e:~" and the base64 group of its key id; and as schema v8 to v14 sealed, "e:" and the
        base85 group of key id and codec, one per codec (and flag). SQL compares them to find
        rows that another key (or none) sealed."""
        return sorted([SEALED_B64 + _codec.b64(self._newest), *(
            SEALED + base64.b85encode(self._newest + codec).decode("ascii")
            for plain in _codec.PACKED_CODECS for codec in (plain, plain.upper()))])

    def seal(self, plaintext: bytes, aad: Binding, codec: bytes = b"b") -> bytes:
        """`plaintext` sealed under the newest key, bound to `aad`; `codec` (one byte) says how
        the plaintext is packed, in clear and authenticated."""
        nonce = os.urandom(NONCE_SIZE)
        return self._newest + codec + nonce + self._ciphers[self._newest].encrypt(
            nonce, plaintext, bytes(aad) + codec)

    def open(self, blob: bytes, aad: Binding) -> bytes:
        """The plaintext of `blob`, or IntegrityError (UnknownKeyError for a key not held)."""
        if len(blob) < OVERHEAD:
            raise aad.fail(IntegrityError, "is truncated: nothing was returned")
        kid, codec = blob[:KEY_ID_SIZE], blob[KEY_ID_SIZE:HEADER_SIZE]
        cipher = self._ciphers.get(kid)
        if cipher is None:
            raise aad.fail(UnknownKeyError, (
                f"was sealed under key id {kid.hex()}, which this saver does not hold "
                f"(it holds {', '.join(self.key_ids)}); nothing was returned: add that key "
                "to the encryption keys"))
        try:
            return cipher.decrypt(blob[HEADER_SIZE:HEADER_SIZE + NONCE_SIZE],
                                  blob[HEADER_SIZE + NONCE_SIZE:], bytes(aad) + codec)
        except self._invalid_tag:
            pass  # raised below, outside the handler: no chained context
        raise aad.fail(IntegrityError, (
            "failed authentication: it was altered, or moved or copied from another row; "
            "nothing was returned"))

    def seal_text(self, data: bytes, aad: Binding, *, flag: bool = False) -> str:
        """`data` packed (compressed when that pays), sealed, as "e:" text for a D1 row.
        `flag` rides in the codec byte (upper case), authenticated: a caller's one bit about
        the plaintext (d1saver/storage/values.py: a checkpoint that carries part of its metadata)."""
        packed = _codec.pack(data)
        codec = packed[:CODEC_SIZE].upper() if flag else packed[:CODEC_SIZE]
        return self._text(self.seal(packed[CODEC_SIZE:], aad, codec))

    def open_text(self, text: str, aad: Binding) -> bytes:
        """The bytes `seal_text` was given; a row that is not sealed is refused."""
        return self.open_flagged(text, aad)[0]

    def open_flagged(self, text: str, aad: Binding) -> tuple[bytes, bool]:
        """The bytes `seal_text` was given, and its `flag`."""
        packed = self.open_packed(text, aad)
        codec = packed[:CODEC_SIZE]
        return _codec.unpack(codec.lower() + packed[CODEC_SIZE:]), codec.isupper()

    def open_packed(self, text: str, aad: Binding) -> bytes:
        """The packed plaintext (codec byte and payload) of a stored "e:" text."""
        if not _codec.is_sealed(text):
            raise refuse_plaintext(aad)
        try:
            if text.startswith(SEALED_B64):
                blob = _codec.unb64(text[len(SEALED_B64):])
            else:
                blob = base64.b85decode(text[len(SEALED):])
        except ValueError:
            blob = b""  # not base64 (nor base85): damaged, refused as truncated
        return blob[KEY_ID_SIZE:HEADER_SIZE] + self.open(blob, aad)

    def reseal_text(self, text: str, aad: Binding, new_aad: Binding | None = None) -> str:
        """A stored "e:" text opened under `aad` and sealed again under the newest key, bound to
        `new_aad` (default: the same row). Not decompressed: the result has the same length
        (a base85 text of schema v8 to v14 comes back in base64: about 7% longer)."""
        packed = self.open_packed(text, aad)
        return self._text(self.seal(packed[CODEC_SIZE:], new_aad or aad, packed[:CODEC_SIZE]))

    @staticmethod
    def _text(blob: bytes) -> str:
        return SEALED_B64 + _codec.b64(blob)
