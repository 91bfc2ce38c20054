"""d1saver/storage/chunking.py at its bounds: a value of exactly STORED_MIN bytes, an element
of exactly LONG_ELEMENT_MIN in an array of exactly LONG_ARRAY elements, framing of exactly
PIECE_MAX bytes, a FastCDC tail of exactly STORED_MIN, and bytes that only look like msgpack
(a container whose items run past its end, or past the data). Each is cut one way exactly;
one byte less (or more) the other way. The pieces always join back to the value."""

from __future__ import annotations

import ormsgpack

from d1saver.storage.chunking import (CDC_MAX, CDC_MIN, LONG_ARRAY, LONG_ELEMENT_MIN, PIECE_MAX, STORED_MIN,
                                      WALK_MAX, Piece, chunk_id, join, split)


def stored(data: bytes) -> Piece:
    return Piece(data, chunk_id(data))


def cut(data: bytes) -> list[Piece]:
    pieces = split(data)
    assert join(pieces) == data
    return pieces


def test_a_value_of_stored_min_bytes_is_a_piece_one_byte_less_is_inline() -> None:
    at = ormsgpack.packb("x" * (STORED_MIN - 2))  # 0xd9, its length, the characters
    below = ormsgpack.packb("x" * (STORED_MIN - 3))
    assert (len(at), len(below)) == (STORED_MIN, STORED_MIN - 1)
    assert cut(at) == [stored(at)]
    assert cut(below) == [Piece(below, None)]


def test_elements_of_a_long_array_are_pieces_from_long_element_min() -> None:
    """LONG_ARRAY elements of LONG_ELEMENT_MIN bytes: each a piece; one element fewer (a short
    array), each is inline, as the array's framing."""
    items = [f"{i}" + "y" * (LONG_ELEMENT_MIN - 3) for i in range(LONG_ARRAY)]
    packed = [ormsgpack.packb(s) for s in items]
    assert {len(p) for p in packed} == {LONG_ELEMENT_MIN}
    data = ormsgpack.packb(items)
    assert cut(data) == [Piece(data[:1], None), *map(stored, packed)]
    short = ormsgpack.packb(items[1:])
    assert cut(short) == [Piece(short, None)]


def _many_items(total: int) -> bytes:
    """An array of WALK_MAX + 1 short strings (too many to walk), `total` bytes in all."""
    n = WALK_MAX + 1
    head = 3  # 0xdc and a 2-byte count
    eights = total - head - 7 * n  # items of 8 bytes (7 characters); the rest of 7
    items = ["a" * 7] * eights + ["b" * 6] * (n - eights)
    data = ormsgpack.packb(items)
    assert len(data) == total
    return data


def test_framing_of_piece_max_bytes_is_one_inline_piece() -> None:
    """A container of too many items to walk, of exactly PIECE_MAX bytes, stays inline whole;
    one byte more and its items are cut by FastCDC (its header inline)."""
    at = _many_items(PIECE_MAX)
    assert cut(at) == [Piece(at, None)]
    over = cut(_many_items(PIECE_MAX + 1))
    assert over[0] == Piece(over[0].data, None) and len(over[0].data) == 3
    assert all(p.id is not None for p in over[1:]) and len(over) > 1


def test_bytes_that_are_not_msgpack_are_cut_by_fastcdc_stored_from_stored_min() -> None:
    at = b"\xc1" + bytes(range(256))[: STORED_MIN - 1]  # 0xc1: no msgpack value starts so
    assert cut(at) == [stored(at)]
    assert cut(at[:-1]) == [Piece(at[:-1], None)]


def test_items_past_the_end_are_not_msgpack() -> None:
    """An array whose first item runs past the data, or that counts more items than the data
    holds (two more, or only its last missing, or its first item's own items): not one
    msgpack value, so FastCDC cuts the bytes whole (one stored piece)."""
    text = ormsgpack.packb("a" * 300)
    runs_past = b"\x92" + text[:-10]
    assert cut(runs_past) == [stored(runs_past)]
    too_few = b"\x93" + text
    assert cut(too_few) == [stored(too_few)]
    last_missing = b"\x92" + text
    assert cut(last_missing) == [stored(last_missing)]
    # An item holding an array whose items run out exactly at the data's end.
    inner_short = b"\x92\x92" + text
    assert cut(inner_short) == [stored(inner_short)]


def test_framing_of_small_items_over_piece_max_is_cut_by_fastcdc() -> None:
    """An array of 4,000 items under the smallest piece (each inline) whose framing, merged,
    is over PIECE_MAX: FastCDC cuts it, so no row holds more than CDC_MAX of it."""
    data = ormsgpack.packb([f"{i:08d}" for i in range(4000)])
    assert len(data) > PIECE_MAX
    pieces = cut(data)
    assert len(pieces) > 1 and all(len(p.data) <= CDC_MAX for p in pieces)
    assert any(p.id is not None for p in pieces)


def test_an_empty_container_or_string_followed_by_more_bytes() -> None:
    """Pinned boundaries (ids are stored forever): 0x80 (a map of no items) then 50 KB more
    is not one msgpack value, so FastCDC cuts the whole from its first byte; 0xa0 (a string
    of no characters) then the same bytes is read as a string whose payload runs on: its
    one-byte header inline, FastCDC after it."""
    rest = bytes(range(256)) * 200
    as_map = cut(b"\x80" + rest)
    assert len(as_map[0].data) >= CDC_MIN and as_map[0].id is not None
    as_text = cut(b"\xa0" + rest)
    assert as_text[0] == Piece(b"\xa0", None) and len(as_text[1].data) >= CDC_MIN


def _walked_items(total: int) -> bytes:
    """An array of 4,000 short strings (few enough to walk, each inline), `total` bytes."""
    n, head = 4000, 3
    nines = total - head - 8 * n  # items of 9 bytes (8 characters); the rest of 8
    data = ormsgpack.packb(["a" * 8] * nines + ["b" * 7] * (n - nines))
    assert len(data) == total
    return data


def test_merged_framing_of_piece_max_bytes_is_one_inline_piece() -> None:
    """A walked array whose items all stay inline merges them with its header: of exactly
    PIECE_MAX bytes, one inline piece; one byte more and FastCDC cuts the merged bytes
    (finding no cut point in them under CDC_MAX: one stored piece)."""
    at = _walked_items(PIECE_MAX)
    assert cut(at) == [Piece(at, None)]
    over = _walked_items(PIECE_MAX + 1)
    assert cut(over) == [stored(over)]


def test_an_empty_container_followed_by_a_few_bytes_is_cut_by_fastcdc() -> None:
    """0x80 (a map of no items) then 300 bytes: not one msgpack value, so FastCDC cuts it
    from its first byte: one stored piece (not framing kept inline)."""
    data = b"\x80" + bytes(range(256)) + bytes(44)
    assert cut(data) == [stored(data)]


def test_a_string_of_piece_max_bytes_is_one_piece_one_byte_more_is_cut_inside() -> None:
    """A string of exactly PIECE_MAX bytes (its header counted) is one stored piece, a row of
    its own; one byte more and its 3-byte header stays inline and FastCDC cuts the rest."""
    at = ormsgpack.packb("z" * (PIECE_MAX - 3))  # 0xda and a 2-byte length
    assert len(at) == PIECE_MAX
    assert cut(at) == [stored(at)]
    over = ormsgpack.packb("z" * (PIECE_MAX - 2))
    pieces = cut(over)
    assert pieces[0] == Piece(over[:3], None)
    assert len(pieces) > 1 and all(p.id is not None for p in pieces[1:])


def test_an_element_of_piece_max_bytes_is_one_piece_whatever_its_type() -> None:
    """A record in an array, of exactly PIECE_MAX bytes, is one stored piece (a message is
    stored whole); one byte more and it is opened: its header and keys inline, its large
    value a piece of its own."""
    def record(total: int) -> bytes:
        # {"k": text}: 0x81, the key (2 bytes), the text (0xda, a 2-byte length, characters)
        return ormsgpack.packb({"k": "r" * (total - 6)})

    at, over = record(PIECE_MAX), record(PIECE_MAX + 1)
    assert (len(at), len(over)) == (PIECE_MAX, PIECE_MAX + 1)
    assert cut(b"\x91" + at) == [Piece(b"\x91", None), stored(at)]
    assert cut(b"\x91" + over) == [Piece(b"\x91" + over[:3], None), stored(over[3:])]


def test_a_container_of_walk_max_items_is_walked_one_item_more_is_not() -> None:
    """An array (or a map: keys and values count alike) of exactly WALK_MAX items is walked:
    its one large element is a piece of its own, the small items inline around it. One item
    more and it is kept whole, inline (under PIECE_MAX), never walked item by item."""
    big = "L" * 1000
    packed_big = ormsgpack.packb(big)
    for n in (WALK_MAX, WALK_MAX + 1):
        array = ormsgpack.packb([big] + ["s"] * (n - 1))
        mapping = ormsgpack.packb({"big": big} | {f"{i:x}": 0 for i in range((n + 1) // 2 - 1)})
        for data in (array, mapping):
            pieces = cut(data)
            if n == WALK_MAX:
                assert stored(packed_big) in pieces and len(pieces) == 3
            else:
                assert pieces == [Piece(data, None)]
