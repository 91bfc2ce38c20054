"""Pins the stored value formats byte for byte, so no stored row ever becomes unreadable.

Every value d1saver stores is "<codec>:<payload>" text (d1saver/storage/codec.py). Rows live for
months across releases, so:
- decoding each codec's pinned text must give back its exact input, forever ("b:", "d:", "r:",
  "s:", and "z:", which only pre-0.1.0 builds wrote);
- what the current writer emits for fixed inputs is pinned too: a change there is a new
  format, which needs a new codec letter, not an edit;
- DICT_V1 and DICT_V2, the "d:" and "r:"/"s:" preset dictionaries, are pinned by their sha256: one
  byte reformatted and every such row decodes to garbage or fails;
- "c:" values (over D1's 2 MB limit, split into the chunks table) written by 0.1.0 decode.

This file imports the private d1saver.storage.codec on purpose: it pins a private storage format.
(_codec keeps its name through refactors; everything else here uses public API.)
"""

from __future__ import annotations

import base64
import hashlib
import zlib
from typing import Any

import pytest
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

from d1saver.storage import codec as _codec
from tests.data import v0_1_0_fixture as fx
from tests.data import v0_1_0_graphs as g

DICT_V1_SHA256 = "8db8c5e69e3f4cebba14afc9b65dc5df2e00e52c793fe6a81cf27d7ac7cee7ea"
DICT_V1_BYTES = 2409
DICT_V2_SHA256 = "2850715b3f705c9a7ee9cb440a00c246002d3c0acf8a6612a3d54c392c397613"
DICT_V2_BYTES = 2898

# 28 bytes, of which deflate cannot save 10%: stored raw.
SMALL = bytes(range(0, 256, 7))
SMALL_B = "b:AAcOFRwjKjE4P0ZNVFtiaXB3foWMk5qhqK+2vcTL0tng5+71/A=="

# 224 pseudo-random bytes: zlib cannot save 10%, so they are stored raw too.
RANDOM = b"".join(hashlib.sha256(bytes([i])).digest() for i in range(7))
RANDOM_B = (
    "b:bjQLnP+zepicpUTmu3gKLHiQHT+zNzh2hRGjBhevoB1L9RIvNEVUxTveLruM0rfj0WAK1jHDhaXXzOI8d4VFmtvBtMkA/+SNV"
    "1tdpcY4BAEl9l2w/j4kSUt26phkV9mGCE/tCLl4r019GWp0RqhrWACeY2thHbFiEbZamq3/KcXlLZxQjFAjRzRNjAetkcvWBor8"
    "df9ikvBioJyjgcieced7mprp4wsNvbb1EKJk753ngVAde2uSronrBZxat0PbZ1humPrSfaC5lovAOaHvNMk5ubjlI6i++J1Hhgj"
    "F7PY="
)

# LangGraph's serde bytes (msgpack) of AIMessage(content="The answer is 42.", id="ai-1", one
# tool call), as langgraph-checkpoint 4.3 writes them: 249 bytes, 84 characters as "d:" (what
# schema v7 wrote), 69 as "r:" (what schema v8 to v14 wrote), 73 as "s:" (what schema v15
# writes: the same 53 bytes of raw deflate in unpadded base64).
MESSAGE = bytes.fromhex(
    "c7f60594ba6c616e67636861696e5f636f72652e6d657373616765732e6169a941494d65737361676589a7636f6e"
    "74656e74b154686520616e737765722069732034322eb16164646974696f6e616c5f6b776172677380b172657370"
    "6f6e73655f6d6574616461746180a474797065a26169a46e616d65c0a26964a461692d31aa746f6f6c5f63616c6c"
    "739184a46e616d65a6736561726368a46172677381a57175657279a26431a26964a663616c6c2d31a474797065a9"
    "746f6f6c5f63616c6cb2696e76616c69645f746f6f6c5f63616c6c7390ae75736167655f6d65746164617461c0b3"
    "6d6f64656c5f76616c69646174655f6a736f6e"
)
MESSAGE_D = "d:c)N0Lot!)VjnuTXF(e~ZAu+GGJhez6vsl5zNRI>$Bd3}riJ7{FL?wqsDTYAx%Rs7h4M|T32e5e@01YH-e*"
MESSAGE_R = "r:JN}K-LSth{Myf($UU7M9kwRv%f{BqH2`L-7cvzB{scT47zF(AL2=johA?Z2(0Jank00"
MESSAGE_S = "s:O/6N1EJjY0hGqkJiXnF5apFCZrGCiZEeCSkbuXhYkpipa0hUvl+UYgjzgK4h6Tn+ALYUDgA"

# "z:" as the first builds wrote it (commit c51f07b's encode: base64 of zlib.compress(data, 6)).
# d1saver 0.1.0 reads it and never writes it.
PROSE = b"The quick brown fox jumps over the lazy dog. " * 14
PROSE_Z = "z:eJwLyUhVKCzNTM5WSCrKL89TSMuvUMgqzS0oVsgvSy1SKAFK5yRWVSqk5KfrKYSMKh5VTA3FADgI4iM="


def test_dicts_are_pinned() -> None:
    assert len(_codec.DICT_V1) == DICT_V1_BYTES
    assert hashlib.sha256(_codec.DICT_V1).hexdigest() == DICT_V1_SHA256
    assert len(_codec.DICT_V2) == DICT_V2_BYTES
    assert hashlib.sha256(_codec.DICT_V2).hexdigest() == DICT_V2_SHA256
    assert _codec.DICT_V2.startswith(_codec.DICT_V1)


def test_b_decodes_and_encodes_exactly() -> None:
    assert _codec.decode(SMALL_B) == SMALL
    assert _codec.decode(RANDOM_B) == RANDOM
    assert _codec.encode(SMALL) == SMALL_B
    assert _codec.encode(RANDOM) == RANDOM_B


def test_d_decodes_and_encodes_exactly() -> None:
    assert _codec.decode(MESSAGE_D) == MESSAGE
    # The zlib stream names its preset dictionary by Adler-32: DICT_V1's, exactly.
    header = base64.b85decode(MESSAGE_D[2:])[:6]
    assert header[1] & 0x20, "FDICT flag"
    assert int.from_bytes(header[2:6], "big") == zlib.adler32(_codec.DICT_V1)
    # Deflate's output at level 6 with this dictionary (zlib 1.2.13 here), as schema v7 wrote
    # it (and sealed it, codec byte "d", still opened).
    assert "d:" + base64.b85encode(_codec._deflate(MESSAGE)).decode() == MESSAGE_D
    assert _codec.unpack(b"d" + _codec._deflate(MESSAGE)) == MESSAGE


def test_r_decodes_and_encodes_exactly() -> None:
    assert _codec.decode(MESSAGE_R) == MESSAGE
    # What schema v8 to v14 wrote: base85 of the raw deflate "s:" holds in base64.
    assert "r:" + base64.b85encode(_codec._raw_deflate(MESSAGE)).decode() == MESSAGE_R
    # What a key seals: the same raw deflate behind codec byte "r".
    assert _codec.pack(MESSAGE) == b"r" + base64.b85decode(MESSAGE_R[2:])
    assert _codec.unpack(_codec.pack(MESSAGE)) == MESSAGE
    # Raw deflate with DICT_V2: no zlib header; a stream cut short is refused, not shortened.
    cut = "r:" + base64.b85encode(base64.b85decode(MESSAGE_R[2:])[:-4]).decode()
    with pytest.raises(ValueError, match="truncated"):
        _codec.decode(cut)


def test_s_decodes_and_encodes_exactly() -> None:
    assert _codec.decode(MESSAGE_S) == MESSAGE
    assert _codec.encode(MESSAGE) == MESSAGE_S
    # Unpadded base64 (RFC 4648's alphabet) of the bytes "r:" held in base85.
    deflated = base64.b85decode(MESSAGE_R[2:])
    assert MESSAGE_S == "s:" + base64.b64encode(deflated).decode().rstrip("=")
    assert len(deflated) % 3 and not MESSAGE_S.endswith("=")
    # A stream cut short is refused, not shortened; text that is not base64 is refused.
    cut = "s:" + base64.b64encode(deflated[:-4]).decode().rstrip("=")
    with pytest.raises(ValueError, match="truncated"):
        _codec.decode(cut)
    for damaged in (MESSAGE_S[:-1] + "~", MESSAGE_S[:-1] + "=", MESSAGE_S + "A" * 1,
                    MESSAGE_S + "=="):
        with pytest.raises(ValueError):
            _codec.decode(damaged)


@pytest.mark.parametrize("size", [16, 17, 18, 19, 100, 1000, 70_000])
def test_s_round_trips_every_padding(size: int) -> None:
    """Unpadded base64 of each length modulo 3 (0, 2 or 1 characters of padding left off)."""
    data = (b"d1saver " * (size // 8 + 1))[:size]
    text = _codec.encode(data)
    assert text.startswith("s:") and "=" not in text
    assert _codec.decode(text) == data


def test_small_and_incompressible_values_stay_base64() -> None:
    assert _codec.encode(SMALL[:_codec.R_MIN - 1]).startswith("b:")
    assert _codec.encode(RANDOM) == RANDOM_B  # deflate cannot save 10%


def test_z_decodes_exactly() -> None:
    assert _codec.decode(PROSE_Z) == PROSE


def test_c_marker_rows_of_0_1_0_decode() -> None:
    """The fixture's chunked checkpoint: "c:2" in its row, pieces in seq order, one "d:" text."""
    rows = fx.read_rows()
    (ckpt,) = [r for t, r in rows if t == "checkpoints" and r["checkpoint"].startswith("c:")]
    (write,) = [r for t, r in rows if t == "writes" and r["value"].startswith("c:")]
    for row, text, owner in ((ckpt, ckpt["checkpoint"], ""),
                             (write, write["value"], f"{write['task_id']}/{write['idx']}")):
        assert text == "c:2" and _codec.is_chunked(text) and _codec.chunk_marker(2) == text
        pieces = sorted((r["seq"], r["data"]) for t, r in rows if t == "chunks"
                        and r["checkpoint_id"] == row["checkpoint_id"] and r["owner"] == owner)
        assert [seq for seq, _ in pieces] == [0, 1]
        joined = "".join(data for _, data in pieces)
        assert joined.startswith("d:")
        value: Any = JsonPlusSerializer().loads_typed((row["type"], _codec.decode(joined)))
        big = value["channel_values"]["big"] if owner == "" else value
        assert big == g.big_text(1)


def test_c_values_of_0_1_0_read_through_the_saver(v010: Any) -> None:
    db = v010(g.BIG)
    head = db.saver.get_tuple(db.config(g.BIG, checkpoint_ns=""))
    assert head is not None
    assert head.checkpoint["channel_values"]["big"] == g.big_text(1)
    paused = db.saver.get_tuple(head.parent_config)
    assert paused is not None
    assert [v for _, ch, v in paused.pending_writes if ch == "big"] == [g.big_text(1)]

