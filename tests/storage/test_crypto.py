"""Authenticated encryption of stored values (d1saver/storage/crypto.py), standalone: sealing, what is
refused (a flipped byte, a moved value, an unknown key, plaintext), rotation, overhead, key
parsing, and that no message or repr shows key material."""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import sys
from typing import Any

import pytest

from d1saver import ConfigError, D1Error, IntegrityError, PlaintextValueError, StoredValueError, UnknownKeyError
from d1saver.storage import codec as _codec
from d1saver.storage.crypto import (
    ENV_KEYS,
    HEAD_CHARS,
    KEY_ID_SIZE,
    OVERHEAD,
    Binding,
    Sealer,
    aad_for_checkpoint,
    aad_for_chunk,
    aad_for_write,
    key_id,
    key_id_of_text,
    keys_from_env,
    new_key,
    parse_key,
    parse_keys,
)

K1, K2, K3 = (bytes([n]) * 32 for n in (1, 2, 3))
K1_B64 = base64.b64encode(K1).decode()

CK = aad_for_checkpoint("t1", "", "c1", "checkpoint", type_="msgpack")
W = aad_for_write("t1", "", "c1", "task-a", 0, "messages", type_="msgpack")


def key_forms(key: bytes) -> list[str]:
    """Every way a key could leak into text."""
    return [key.hex(), base64.b64encode(key).decode(), base64.urlsafe_b64encode(key).decode(),
            repr(key), key.decode("latin-1")]


def assert_no_key_material(exc_or_obj: Any, *keys: bytes | str) -> None:
    texts = [str(exc_or_obj), repr(exc_or_obj)]
    if isinstance(exc_or_obj, BaseException):
        for linked in (exc_or_obj.__cause__, exc_or_obj.__context__):
            if linked is not None:
                texts += [str(linked), repr(linked)]
    forms: list[str] = []
    for k in keys:
        forms += key_forms(k) if isinstance(k, bytes) else [k.strip()]
    for text in texts:
        for form in forms:
            assert form not in text, f"key material in {text!r}"


# --- round trip -------------------------------------------------------------------------------


@pytest.mark.parametrize("size", [0, 1, 127, 128, 5000, 300_000])
def test_round_trip(size: int) -> None:
    sealer = Sealer([K1])
    data = os.urandom(size // 2) + b"x" * (size - size // 2)  # half random, half compressible
    assert sealer.open(sealer.seal(data, CK), CK) == data
    text = sealer.seal_text(data, CK)
    assert text.startswith("e:") and _codec.is_sealed(text)
    assert sealer.open_text(text, CK) == data


def test_equal_values_seal_differently() -> None:
    sealer = Sealer([K1])
    assert sealer.seal(b"same", CK) != sealer.seal(b"same", CK)  # a fresh nonce each time


def test_keys_as_base64_text_and_as_bytes_are_the_same_key() -> None:
    blob = Sealer([K1]).seal(b"v", CK)
    assert Sealer([K1_B64]).open(blob, CK) == b"v"
    assert Sealer(K1_B64).open(blob, CK) == b"v"  # one key given bare


def test_compressible_values_are_compressed_before_sealing() -> None:
    sealer = Sealer([K1])
    data = b"the same words again " * 500
    assert len(sealer.seal_text(data, CK)) < len(data) // 10


# --- refused: a flipped byte ------------------------------------------------------------------


def test_an_authentic_value_of_an_unknown_codec_is_refused_as_newer() -> None:
    """A value sealed under the right key and binding with a codec byte this release does not
    know (a newer d1saver's) is refused with a ValueError saying so, never opened as bytes."""
    sealer = Sealer([K1])
    text = sealer._text(sealer.seal(b"payload", CK, b"q"))
    with pytest.raises(ValueError, match="unknown packed codec"):
        sealer.open_text(text, CK)


def test_every_one_byte_flip_is_refused() -> None:
    sealer = Sealer([K1])
    blob = sealer.seal(b"a small stored value", CK)
    for i in range(len(blob)):
        tampered = bytearray(blob)
        tampered[i] ^= 0x01
        with pytest.raises(IntegrityError) as info:
            sealer.open(bytes(tampered), CK)
        # A flip in the key id names a key the saver does not hold; anywhere else (the codec
        # byte included, which is associated data), the tag fails.
        assert isinstance(info.value, UnknownKeyError) == (i < KEY_ID_SIZE)


def unb64(text: str) -> bytes:
    """The blob of an "e:~" text (unpadded base64 after the marker)."""
    assert text.startswith("e:~")
    return base64.b64decode(text[3:] + "=" * (-len(text[3:]) % 4))


def b85_text(blob: bytes) -> str:
    """A blob as schema v8 to v14 stored it: "e:" and base85."""
    return "e:" + base64.b85encode(blob).decode()


def test_a_flip_in_the_stored_text_is_refused() -> None:
    sealer = Sealer([K1])
    text = sealer.seal_text(b"x" * 1000, CK)
    old = b85_text(unb64(text))
    assert sealer.open_text(old, CK) == b"x" * 1000  # as schema v8 to v14 stored it
    # Positions inside full groups (base64's 4 characters, base85's 5): a char changed in a
    # short last group may decode to the same bytes, which is no tampering.
    last_full = 3 + 4 * (len(unb64(text)) // 3) - 1
    last_full_85 = 2 + 5 * (len(unb64(text)) // 4) - 1
    for stored, positions in ((text, (2, 3, 6, 7, len(text) // 2, last_full)),
                              (old, (2, 6, 7, len(old) // 2, last_full_85))):
        for i in positions:
            other = "A" if stored[i] != "A" else "B"
            with pytest.raises(IntegrityError):
                sealer.open_text(stored[:i] + other + stored[i + 1:], CK)


@pytest.mark.parametrize("cut", [0, 1, 10, 16, OVERHEAD - 1])  # 10: inside the nonce
def test_truncated_values_are_refused(cut: int) -> None:
    sealer = Sealer([K1])
    blob = unb64(sealer.seal_text(b"", CK))
    assert len(blob) == OVERHEAD  # key id, codec, nonce, tag: no payload
    assert sealer.open(blob, CK) == b""
    with pytest.raises(IntegrityError):
        sealer.open(blob[:cut], CK)
    with pytest.raises(IntegrityError):
        sealer.open_text("e:~" + base64.b64encode(blob[:cut]).decode().rstrip("="), CK)
    with pytest.raises(IntegrityError):
        sealer.open_text(b85_text(blob[:cut]), CK)


def test_stored_text_that_is_not_base85_is_refused() -> None:
    for text in ("e:not base64 \x00 at all", "e:~not base64 \x00 at all", "e:~A", "e:~AB=C"):
        with pytest.raises(IntegrityError):
            Sealer([K1]).open_text(text, CK)


def test_the_sealed_format_is_pinned() -> None:
    """Schema v15's sealed text: "e:~", then unpadded base64 of key id (3 bytes: the first 4
    characters, the head SQL compares), codec byte, nonce, ciphertext and tag. A base85 text
    (schema v8 to v14) never starts with "~": its first group is at most 2**32 - 1, whose
    first digit is "|" (index 82 of 85)."""
    sealer = Sealer([K1, K2])
    text = sealer.seal_text(b"y" * 200, CK)
    assert text.startswith("e:~" + base64.b64encode(key_id(K1)).decode())
    blob = unb64(text)
    assert blob[:KEY_ID_SIZE] == key_id(K1) and blob[KEY_ID_SIZE:KEY_ID_SIZE + 1] == b"r"
    assert text == "e:~" + base64.b64encode(blob).decode().rstrip("=")
    assert base64.b85encode(b"\xff" * 4).decode()[0] == "|"
    # Each format's head names its key; the newest key's heads cover both formats.
    old = b85_text(blob)
    assert key_id_of_text(text) == key_id_of_text(old) == key_id(K1).hex()
    assert key_id_of_text(text[:HEAD_CHARS]) == key_id(K1).hex()
    assert {text[:HEAD_CHARS], old[:HEAD_CHARS]} <= set(sealer.fresh_heads)
    under_k2 = Sealer([K2]).seal_text(b"y" * 200, CK)
    assert under_k2[:HEAD_CHARS] not in sealer.fresh_heads
    assert sealer.open_text(under_k2, CK) == b"y" * 200


# --- refused: a value moved or copied to another row ------------------------------------------

MOVES = {
    "other thread": aad_for_checkpoint("t2", "", "c1", "checkpoint", type_="msgpack"),
    "other namespace": aad_for_checkpoint("t1", "sub:1", "c1", "checkpoint", type_="msgpack"),
    "other checkpoint": aad_for_checkpoint("t1", "", "c2", "checkpoint", type_="msgpack"),
    "value as metadata": aad_for_checkpoint("t1", "", "c1", "metadata", type_="msgpack"),
    "other type tag": aad_for_checkpoint("t1", "", "c1", "checkpoint", type_="bytes"),
    "no type tag": aad_for_checkpoint("t1", "", "c1", "checkpoint", type_=None),
    "as a write": aad_for_write("t1", "", "c1", "", 0, "", type_="msgpack"),
    "as a chunk": aad_for_chunk("c1"),
}

WRITE_MOVES = {
    "other task": aad_for_write("t1", "", "c1", "task-b", 0, "messages", type_="msgpack"),
    "other idx": aad_for_write("t1", "", "c1", "task-a", 1, "messages", type_="msgpack"),
    "other channel": aad_for_write("t1", "", "c1", "task-a", 0, "branch", type_="msgpack"),
    "other checkpoint": aad_for_write("t1", "", "c2", "task-a", 0, "messages", type_="msgpack"),
    "other thread": aad_for_write("t2", "", "c1", "task-a", 0, "messages", type_="msgpack"),
    "other type tag": aad_for_write("t1", "", "c1", "task-a", 0, "messages", type_="json"),
}


@pytest.mark.parametrize("where", list(MOVES))
def test_a_checkpoint_value_moved_elsewhere_is_refused(where: str) -> None:
    sealer = Sealer([K1])
    text = sealer.seal_text(b"state of t1/c1", CK)
    target = MOVES[where]
    with pytest.raises(IntegrityError) as info:
        sealer.open_text(text, target)
    assert type(info.value) is IntegrityError
    # The error names the row it was read from (the caller's binding), so the operator finds it.
    err = info.value
    if target.thread_id is not None:
        assert (err.thread_id, err.checkpoint_ns, err.checkpoint_id) == (
            target.thread_id, target.checkpoint_ns, target.checkpoint_id)
        assert repr(target.thread_id) in str(err) and repr(target.checkpoint_id) in str(err)
    assert "nothing was returned" in str(err)


@pytest.mark.parametrize("where", list(WRITE_MOVES))
def test_a_write_moved_to_another_slot_is_refused(where: str) -> None:
    sealer = Sealer([K1])
    text = sealer.seal_text(b"write t1/c1/task-a/0", W)
    with pytest.raises(IntegrityError):
        sealer.open_text(text, WRITE_MOVES[where])


def test_associated_data_is_unambiguous() -> None:
    # Field boundaries, None against "", and the kind are all part of the encoding.
    pairs = [
        (aad_for_checkpoint("a", "bc", "d", "checkpoint", type_="x"),
         aad_for_checkpoint("ab", "c", "d", "checkpoint", type_="x")),
        (aad_for_checkpoint("a", "", "d", "checkpoint", type_=None),
         aad_for_checkpoint("a", "", "d", "checkpoint", type_="")),
        (aad_for_checkpoint("a", "", "d", "checkpoint", type_=None),
         aad_for_checkpoint("a", "", "d", "metadata", type_=None)),
        (aad_for_write("a", "", "d", "t", 1, "c1", type_="x"),
         aad_for_write("a", "", "d", "t", 11, "c", type_="x")),
        (Binding("chunk", ("a",)), Binding("chunk", ("a", None))),
    ]
    for one, two in pairs:
        assert bytes(one) != bytes(two), (one, two)


def test_part_must_be_checkpoint_or_metadata() -> None:
    with pytest.raises(ValueError, match="part"):
        aad_for_checkpoint("t", "", "c", "write", type_=None)  # type: ignore[arg-type]


# --- refused: an unknown key, plaintext --------------------------------------------------------


def test_a_value_under_a_key_the_saver_does_not_hold_is_refused() -> None:
    text = Sealer([K2]).seal_text(b"secret", CK)
    with pytest.raises(UnknownKeyError) as info:
        Sealer([K1, K3]).open_text(text, CK)
    msg = str(info.value)
    assert key_id(K2).hex() in msg  # which key it needs, by id
    assert key_id(K1).hex() in msg and key_id(K3).hex() in msg  # which keys are held
    assert "'t1'" in msg and "'c1'" in msg
    assert_no_key_material(info.value, K1, K2, K3)


@pytest.mark.parametrize("text", [_codec.encode(b"planted"), _codec.encode(b"p" * 4000),
                                  "z:eJwrSMzJSQUABkwCJA==", ""])
def test_a_plaintext_row_is_refused_when_keys_are_set(text: str) -> None:
    with pytest.raises(PlaintextValueError) as info:
        Sealer([K1]).open_text(text, W)
    assert info.value.thread_id == "t1" and info.value.checkpoint_id == "c1"
    assert "not encrypted" in str(info.value)


def test_a_sealed_row_without_keys_says_how_to_read_it() -> None:
    text = Sealer([K1]).seal_text(b"v", CK)
    with pytest.raises(ValueError, match="encrypted: give the saver its encryption keys"):
        _codec.decode(text)


def test_integrity_errors_are_stored_value_errors() -> None:
    for cls in (IntegrityError, UnknownKeyError, PlaintextValueError):
        assert issubclass(cls, StoredValueError) and issubclass(cls, D1Error)
    assert issubclass(UnknownKeyError, IntegrityError)
    assert issubclass(PlaintextValueError, IntegrityError)


# --- rotation ---------------------------------------------------------------------------------


def test_rotation_old_keys_open_new_key_seals() -> None:
    old = Sealer([K1])
    written_before = old.seal_text(b"before rotation", CK)
    rotated = Sealer([K2, K1])  # newest first
    assert rotated.open_text(written_before, CK) == b"before rotation"
    written_after = rotated.seal_text(b"after rotation", CK)
    blob = unb64(written_after)
    assert blob[:KEY_ID_SIZE] == key_id(K2)
    # The old key alone cannot open what the new key sealed; once rows are rekeyed, the
    # new key alone opens everything new and refuses the old rows by name.
    with pytest.raises(UnknownKeyError):
        old.open_text(written_after, CK)
    with pytest.raises(UnknownKeyError):
        Sealer([K2]).open_text(written_before, CK)
    assert rotated.key_ids == [key_id(K2).hex(), key_id(K1).hex()]


# --- overhead ---------------------------------------------------------------------------------


@pytest.mark.parametrize("size", [0, 1, 2, 3, 100, 127, 128, 1000, 10_000])
@pytest.mark.parametrize("kind", ["random", "compressible"])
def test_overhead_is_32_bytes_and_at_most_44_characters_per_value(size: int, kind: str) -> None:
    data = os.urandom(size) if kind == "random" else (b"abc" * size)[:size]
    blob = Sealer([K1]).seal(data, CK)
    assert len(blob) - len(data) == OVERHEAD == 32
    # As stored, against the same value without a key: "~" and 32 bytes in unpadded base64
    # (42 or 43 characters) more when it is compressed (both unpadded base64), at most 44
    # when it is stored raw ("b:" is padded base64).
    text = Sealer([K1]).seal_text(data, CK)
    plain = _codec.encode(data)
    extra = len(text) - len(plain)
    assert extra in (43, 44) if plain.startswith("s:") else extra <= 44


# --- keys: parsing, ids, errors -----------------------------------------------------------------


def test_key_id_is_a_truncated_hmac_of_a_label() -> None:
    assert key_id(K1) == hmac.new(K1, b"d1saver key id", hashlib.sha256).digest()[:3]
    assert key_id(K1) != key_id(K2)


def test_new_key_is_usable() -> None:
    key = new_key()
    assert len(base64.b64decode(key)) == 32 and key != new_key()
    Sealer([key])


def test_url_safe_base64_and_surrounding_space_are_accepted() -> None:
    key = bytes(range(224, 256))  # encodes with '+' and '/' in the standard alphabet
    assert "/" in base64.b64encode(key).decode()
    assert parse_key(base64.urlsafe_b64encode(key).decode()) == key
    assert parse_key(f"  {base64.b64encode(key).decode()}\n") == key


BAD_KEYS = {
    "not base64": ("this is not base64 at all!!", "not base64"),
    "short bytes": (b"\x07" * 16, "16 bytes given"),
    "long bytes": (b"\x07" * 33, "33 bytes given"),
    "base64 of 31 bytes": (base64.b64encode(b"\x09" * 31).decode(), "base64 of 31 bytes"),
    "a 32-character password": ("correcthorsebatterystaple1234567", "base64 of 24 bytes"),
    "an int": (12345, "is a int"),
}


@pytest.mark.parametrize("case", list(BAD_KEYS))
def test_bad_keys_are_config_errors_that_name_the_position(case: str) -> None:
    bad, expected = BAD_KEYS[case]
    with pytest.raises(ConfigError) as info:
        parse_keys([K1, bad])
    assert "encryption key 2" in str(info.value) and expected in str(info.value)
    assert_no_key_material(info.value, K1, *([bad] if isinstance(bad, (bytes, str)) else []))
    with pytest.raises(ConfigError):
        Sealer([bad])


def test_no_keys_and_repeated_keys_are_config_errors() -> None:
    with pytest.raises(ConfigError, match="no encryption keys"):
        parse_keys([])
    with pytest.raises(ConfigError, match="keys 1 and 3 have the same key id") as info:
        parse_keys([K1, K2, K1_B64])
    assert_no_key_material(info.value, K1, K2)


def test_keys_from_the_environment() -> None:
    k2 = base64.b64encode(K2).decode()
    assert keys_from_env({}) is None
    assert keys_from_env({ENV_KEYS: "  "}) is None
    assert keys_from_env({ENV_KEYS: f"{k2}, {K1_B64}"}) == [K2, K1]  # newest first
    assert keys_from_env({ENV_KEYS: K1_B64}) == [K1]


@pytest.mark.parametrize("value, position", [
    (f"{K1_B64},", 2), (f",{K1_B64}", 1), (f"{K1_B64},,{K1_B64}", 2),
    (f"{K1_B64},bm90IGEga2V5", 2), (f"{K1_B64},{K1_B64}", None)])
def test_bad_environment_keys_name_the_variable_and_position(value: str,
                                                             position: int | None) -> None:
    with pytest.raises(ConfigError) as info:
        keys_from_env({ENV_KEYS: value})
    msg = str(info.value)
    assert ENV_KEYS in msg
    if position is not None:
        assert f"{ENV_KEYS} key {position}" in msg
    if "" in [item.strip() for item in value.split(",")]:  # said so, not "base64 of 0 bytes"
        assert f"key {position} is empty (a stray comma?)" in msg
    assert_no_key_material(info.value, K1, "bm90IGEga2V5")


def test_the_process_environment_is_read_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_KEYS, K1_B64)
    assert keys_from_env() == [K1]


def test_no_repr_shows_key_material() -> None:
    sealer = Sealer([K1, K2])
    assert_no_key_material(sealer, K1, K2)
    assert_no_key_material(vars(sealer), K1, K2)  # not even the attributes' reprs
    assert_no_key_material(CK, K1, K2)
    for make in (lambda: sealer.open(b"\x00" * 40, CK),
                 lambda: sealer.open(Sealer([K3]).seal(b"v", CK), CK),
                 lambda: sealer.open_text("b:AAAA", CK),
                 lambda: sealer.open(sealer.seal(b"v", CK)[:-1] + b"\x00", CK)):
        with pytest.raises(IntegrityError) as info:
            make()
        assert_no_key_material(info.value, K1, K2, K3)
        assert info.value.__context__ is None  # nothing chained that could carry a key


def test_missing_cryptography_is_a_config_error(monkeypatch: pytest.MonkeyPatch) -> None:
    # A None entry in sys.modules makes the import fail, as if the package were not installed.
    monkeypatch.setitem(sys.modules, "cryptography.hazmat.primitives.ciphers.aead", None)
    with pytest.raises(ConfigError, match=r"pip install 'd1saver\[encryption\]'"):
        Sealer([K1])
