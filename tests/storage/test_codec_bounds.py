"""The codec's and the values layer's size bounds, at the bound itself: deflate kept when it
saves exactly 10%, and a re-sealed text of exactly CHUNK_SIZE characters kept in its row."""

from __future__ import annotations

import random

import pytest

from d1saver.storage import codec as _codec
from d1saver.storage import values as _values


def _saving_exactly_a_tenth() -> bytes:
    """Bytes whose raw deflate is exactly 90% of their size (random bytes, then zeros)."""
    rng = random.Random(26)
    for n in range(200, 400):
        head = rng.randbytes(n)
        for zeros in range(0, 200):
            data = head + bytes(zeros)
            if len(data) % 10 == 0 and len(_codec._raw_deflate(data)) * 10 == len(data) * 9:
                return data
    raise AssertionError("no input found")  # pragma: no cover


def test_deflate_that_saves_exactly_a_tenth_is_kept() -> None:
    data = _saving_exactly_a_tenth()
    text = _codec.encode(data)
    assert text.startswith("s:")
    assert _codec.decode(text) == data


def test_a_resealed_text_of_chunk_size_stays_in_its_row() -> None:
    text = "e" * _codec.CHUNK_SIZE
    assert _values._resplit(text, False) == (text, None)
    row, parts = _values._resplit(text + "e", False)
    assert parts is not None and len(parts) > 1 and "".join(parts) == text + "e"
    assert row == _codec.chunk_marker(len(parts))
    row, parts = _values._resplit("short", True)  # a value in chunks stays in chunks
    assert parts == ["short"] and row == _codec.chunk_marker(1)


def test_a_damaged_d_value_is_a_value_error() -> None:
    """0.1.0's "d:" values (zlib with DICT_V1) read back; a damaged one is refused as such."""
    import base64

    good = _codec.decode("d:" + base64.b85encode(_codec._deflate(b"hello " * 20)).decode())
    assert good == b"hello " * 20
    with pytest.raises(ValueError, match='a "d:" value is damaged'):
        _codec.decode("d:" + base64.b85encode(b"\x00not zlib at all").decode())
