"""d1saver/storage/chunking.py: content-defined pieces of serialized values, named by hash.

Chunk ids will be stored forever (every manifest names its chunks by id), so the pieces of fixed
inputs are pinned here: a change that moves a boundary or an id fails these tests, and needs a new
format instead. The inputs are built from plain msgpack (ormsgpack of lists, maps, strings and
extension values), not LangChain objects, so a dependency upgrade cannot change them; their
sha256 is pinned too, to tell a changed input from a changed chunker.
"""

from __future__ import annotations

import hashlib
import random
from typing import Any

import ormsgpack
import pytest

from d1saver.storage import chunking as _chunking
from d1saver.storage.chunking import CDC_MAX, PIECE_MAX, STORED_MIN, Piece, chunk_id, join, split

_WORDS = ("order invoice refund shipment customer warehouse delivery status payment report review "
          "balance account region quarter pending").split()


def _prose(seed: int, size: int) -> str:
    """Deterministic text (sha256 in counter mode picks the words): no dependency on `random`."""
    out: list[str] = []
    n, i = 0, 0
    while n < size:
        digest = hashlib.sha256(f"{seed}/{i}".encode()).digest()
        words = [_WORDS[b % len(_WORDS)] for b in digest[:8]]
        out.extend(words)
        n += sum(len(w) + 1 for w in words)
        i += 1
    return " ".join(out)[:size]


def _message(i: int, size: int = 500) -> ormsgpack.Ext:
    """A stand-in for a serialized LangChain message: an extension value holding msgpack."""
    body = ["langchain_core.messages.tool", "ToolMessage",
            {"content": _prose(i, size), "id": f"tool-{i}", "tool_call_id": f"call-{i}"},
            "model_validate_json"]
    return ormsgpack.Ext(5, ormsgpack.packb(body))


def _checkpoint(n: int, step: int = 0) -> bytes:
    """A checkpoint-shaped value: n messages, records, changing framing, a string over PIECE_MAX."""
    return ormsgpack.packb({
        "v": 4, "ts": f"2026-11-23T04:{step:02d}:00+00:00", "id": f"1f0c-{step:04d}",
        "channel_values": {"messages": [_message(i) for i in range(n)], "document": _prose(99, 100_000),
                           # records are pieces too; so is an element of 28 KB (under PIECE_MAX)
                           "records": [*({"title": f"r{i}", "text": _prose(100 + i, 400)} for i in range(3)),
                                       _message(500, 28_000)],
                           "branch:to:agent": None},
        "channel_versions": {"messages": f"{step:032d}.0.5", "branch:to:agent": f"{step:032d}.0.7"},
        "versions_seen": {"agent": {"messages": f"{step:032d}.0.5"}},
        "updated_channels": ["messages"],
    })


def _noise(size: int) -> bytes:
    """Deterministic bytes that are not msgpack (start with 0xc1, which msgpack never uses)."""
    out = b"\xc1"
    i = 0
    while len(out) < size:
        out += hashlib.sha256(i.to_bytes(4, "big")).digest()
        i += 1
    return out[:size]


CHECKPOINT = _checkpoint(12, step=3)
CHECKPOINT_SHA256 = "fbe7f0522cf1376aa15028ec0564fed8a55a74a643570f25dd691082b8e7ca64"
NOISE = _noise(150_000)

# (length, id) of each piece; id None: inline framing.
CHECKPOINT_PIECES: list[tuple[int, str | None]] = [
    (72, None),
    (608, "@0?-z1sA3=&B&Equ;F3Q?JVaD"),
    (608, "bQOwSnhsw<_J~l4pxaFNnr5u0"),
    (608, "F2.3?cN+!GmwgP0U5AhPOndDP"),
    (608, "_6v_Y+3ue5|7q<t6-m{=8o#5}"),
    (608, "jfMW4vMOsK;q;@?ukFx$+UlAa"),
    (608, "9+3T@wcMTk@UDrjqt!+h@A1(7"),
    (608, "JW_2DfREtQ_bbOb!j!QCm|O)A"),
    (608, "<luxgBE}bm*(%D@ZoTS}{LX;+"),
    (608, "zZA)6<4)~m7@p%&C-Ivlel*+R"),
    (608, "3@ilLClmhbm=>(2AJ>yfCmmso"),
    (610, "Z_3JcFhVIWFPAg|Cc;>AZtr3X"),
    (610, "V`i$t!Xa?~D`1`=dSmXp(1|dY"),
    (14, None),
    (26242, "p}y1H>T>LZuv>K=fS*=!V1*8f"),
    (31117, "@%}2S0pDOQV.)RZP>7$Nqcbj?"),
    (27787, "WGF43-YIHPpFwwN66+H3zwv7O"),
    (6248, "Y?hmczsvzyveeWMG$oK#SeHjT"),
    (8606, "Fp3r5W5otM6D$Cnq+FFPI!-u#"),
    (9, None),
    (418, "DIh>%k4JuuIUV<QMgn(X9PKv?"),
    (418, "Ql$$cZ0dOcC*cp3b~W=-uL_;M"),
    (418, "6%rqBuEAy*bd7.;1b3`Y@kp$@"),
    (28112, "*tc-t${cO6et8ed6GJ@lB}&yq"),
    (232, None),
]
NOISE_PIECES: list[tuple[int, str | None]] = [
    (33668, 'y2cI(SZm6=>ibIRJ-4XlS|u@R'),
    (9646, '{0Jotnuy8$!&v?~*pRKvnAhoU'),
    (37677, 'Gpu*_*t0s6r$z9E4IP_r*&sGH'),
    (27047, 'a-wN;(%g{v@b=;k4ac(OW82q-'),
    (37272, 'j?I!2RH+nuzS5rYt!%mVFlYIq'),
    (4690, '54PxshFzCz(*bpiX@DHVhLnuj'),
]


def _shape(pieces: list[Piece]) -> list[tuple[int, str | None]]:
    return [(len(p.data), p.id) for p in pieces]


# --- pinned -----------------------------------------------------------------------------------

def test_input_is_the_pinned_one() -> None:
    assert hashlib.sha256(CHECKPOINT).hexdigest() == CHECKPOINT_SHA256


def test_checkpoint_pieces_are_pinned() -> None:
    assert _shape(split(CHECKPOINT)) == CHECKPOINT_PIECES


def test_bytes_that_are_not_msgpack_are_cut_by_fastcdc_and_pinned() -> None:
    assert _shape(split(NOISE)) == NOISE_PIECES


def test_chunk_id_is_pinned() -> None:
    # Base85 since schema v8 ; the hash of LEAF + the bytes since schema v9 (v8 hashed them bare: "&=!SyXx?x~4ngoCCDJVvuV&%B").
    assert chunk_id(b"d1saver") == 'krBv7f~bNVM?7K&ZeYEdMC&dD'


# --- behaviour --------------------------------------------------------------------------------

def test_chunk_id_is_20_bytes_of_sha256() -> None:
    data = b"a message"
    assert chunk_id(data) == chunk_id(data) and len(chunk_id(data)) == 25
    assert chunk_id(data) != chunk_id(data + b" ")


def test_id_text_is_base85_with_a_dot_for_a_caret() -> None:
    """The table-driven id text is the standard library's base85 of the digest, "." for "^",
    for every digit in every position (random digests, and the extremes of each word)."""
    import base64

    rng = random.Random(31)
    digests = [bytes(rng.getrandbits(8) for _ in range(20)) for _ in range(2000)]
    digests += [b"\x00" * 20, b"\xff" * 20, bytes(range(20)), b"\x00\x00\x00\x01" * 5]
    seen: set[str] = set()
    for digest in digests:
        _chunking._id_text.cache_clear()
        text = _chunking._id_text(digest)
        assert text == base64.b85encode(digest).decode().replace("^", ".")
        seen.update(text)
    assert len(seen) == 85 and "^" not in seen and "." in seen


def test_each_message_is_a_piece_of_its_own() -> None:
    pieces = split(CHECKPOINT)
    stored = [p for p in pieces if p.id]
    for i in range(12):
        element = ormsgpack.packb(_message(i))
        assert any(p.data == element for p in stored), i


def test_an_appended_message_is_the_only_new_stored_piece() -> None:
    before = {p.id for p in split(_checkpoint(40, step=1)) if p.id}
    after = [p for p in split(_checkpoint(41, step=2)) if p.id]
    new = [p for p in after if p.id not in before]
    assert [p.data for p in new] == [ormsgpack.packb(_message(40))]


def test_a_pending_write_holds_the_same_piece_as_the_next_checkpoint() -> None:
    write = ormsgpack.packb([_message(7)])  # what a node returning {"messages": [msg]} writes
    (framing, piece) = split(write)
    assert framing == Piece(b"\x91", None)
    assert piece.id in {p.id for p in split(CHECKPOINT)}


def test_changing_framing_never_makes_a_stored_piece() -> None:
    one, two = split(_checkpoint(12, step=1)), split(_checkpoint(12, step=2))
    assert {p.id for p in one if p.id} == {p.id for p in two if p.id}
    assert [p.data for p in one if not p.id] != [p.data for p in two if not p.id]


def test_a_large_string_is_cut_inside_and_an_edit_stays_local() -> None:
    text = _prose(5, 300_000)
    edited = text[:150_000] + "an inserted sentence. " + text[150_000:]
    a = {p.id for p in split(ormsgpack.packb([text])) if p.id}
    b = [p for p in split(ormsgpack.packb([edited])) if p.id]
    assert len(a) >= 300_000 // (2 * _chunking.CDC_AVG)
    assert sum(len(p.data) for p in b if p.id not in a) <= 2 * CDC_MAX


def test_small_values_stay_whole_and_inline() -> None:
    for value in (b"", ormsgpack.packb(None), ormsgpack.packb({"a": 1}), b"\xc1" * 100):
        assert split(value) == ([Piece(value, None)] if value else [])


def test_a_huge_record_of_small_items_is_cut_to_bounded_pieces() -> None:
    data = ormsgpack.packb({"numbers": list(range(100_000))})
    pieces = split(data)
    assert join(pieces) == data
    assert max(len(p.data) for p in pieces) <= CDC_MAX
    assert all(len(p.data) <= PIECE_MAX for p in pieces if p.id is None)


def test_truncated_msgpack_falls_back_to_bytes() -> None:
    data = CHECKPOINT[:-10]
    assert join(split(data)) == data


def test_skip_finds_the_end_of_every_msgpack_type() -> None:
    values: list[Any] = [None, True, False, 0, 127, 128, 255, 65_535, 2**32, 2**64 - 1, -1, -32, -33,
                         -129, -40_000, -(2**40), 1.5, "", "a" * 31, "a" * 32, "a" * 300, "a" * 70_000,
                         b"", b"x" * 300, b"x" * 70_000, [], [1] * 15, [1] * 16, [1] * 70_000, {},
                         {str(i): i for i in range(15)}, {str(i): i for i in range(16)},
                         {str(i): i for i in range(70_000)}]
    values += [ormsgpack.Ext(1, b"x" * n) for n in (1, 2, 4, 8, 16, 3, 300, 70_000)]
    for value in values:
        data = ormsgpack.packb(value)
        assert _chunking._skip(data + b"\x00", 0) == len(data), repr(value)[:40]


# --- property-style: seeded random structures -------------------------------------------------

def _random_value(rng: random.Random, depth: int = 0) -> Any:
    kind = rng.choice(["int", "str", "bytes", "ext", "list", "map", "none", "float"] if depth < 4
                      else ["int", "str", "bytes", "none"])
    if kind == "int":
        return rng.choice([rng.randint(-(2**63), 2**63 - 1), rng.randint(-200, 200)])
    if kind == "str":
        return _prose(rng.randint(0, 10**6), rng.choice([5, 40, 300, 2_000, 40_000]))
    if kind == "bytes":
        return rng.randbytes(rng.choice([0, 10, 600, 5_000, 50_000]))
    if kind == "ext":
        return ormsgpack.Ext(rng.randint(1, 100), rng.randbytes(rng.choice([1, 2, 4, 8, 16, 100, 1_000, 40_000])))
    if kind == "list":
        return [_random_value(rng, depth + 1) for _ in range(rng.choice([0, 3, 20, 200]))]
    if kind == "map":
        return {f"k{i}": _random_value(rng, depth + 1) for i in range(rng.choice([0, 3, 20]))}
    if kind == "float":
        return rng.random()
    return None


@pytest.mark.parametrize("seed", range(40))
def test_random_values_reassemble_exactly_within_bounds(seed: int) -> None:
    rng = random.Random(seed)
    value = _random_value(rng)
    data = ormsgpack.packb(value)
    if seed % 4 == 3:  # and arbitrary bytes
        data = rng.randbytes(rng.choice([1, 1_000, 100_000]))
    pieces = split(data)
    assert join(pieces) == data
    assert pieces == split(data)  # deterministic
    assert all(p.data for p in pieces)
    for p in pieces:
        if p.id is None:
            assert len(p.data) <= PIECE_MAX
        else:
            assert STORED_MIN <= len(p.data) <= CDC_MAX
            assert p.id == chunk_id(p.data)
    assert all(a.id or b.id for a, b in zip(pieces, pieces[1:]))  # inline framing is merged


def test_pure_python_fastcdc_cuts_where_the_compiled_one_does() -> None:
    """Where no wheel installs, pyfastcdc falls back to pure Python: the chunks must not differ."""
    from pyfastcdc.py import FastCDC as PurePython

    text = _prose(3, 200_000).encode()
    for data in (NOISE, text):
        pure = PurePython(avg_size=_chunking.CDC_AVG, min_size=_chunking.CDC_MIN, max_size=CDC_MAX,
                          normalized_chunking=1, seed=0)
        cuts: list[tuple[int, int, bool]] = []
        _chunking._cut_cdc(data, 0, len(data), cuts)
        assert [(c.offset, c.offset + c.length) for c in pure.cut_buf(data)] == [(a, b) for a, b, _ in cuts]
