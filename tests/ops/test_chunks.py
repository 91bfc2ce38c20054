"""Chunk rows stay exact (defect 4) and rows of any total size store (defect 15).

A value over D1's 2 MB row limit lives in `chunks` under its owner ('' the checkpoint,
'<task_id>/<idx>' a write, ':metadata' oversized metadata). Whatever replays, copies or
rewrites happen, an owner keeps exactly the pieces its row names, and reads never fail.
"""

from __future__ import annotations

import json
import os
import random
import uuid
from typing import Any, cast

import ormsgpack

import pytest
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import Checkpoint
from langgraph.checkpoint.conformance.test_utils import generate_checkpoint, generate_config
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

from d1saver import D1Saver, Statement
from d1saver.storage import codec as _codec
from d1saver.storage.values import METADATA_KEY, ROW_MAX
from tests.conftest import Backend

# Random bytes do not compress; base64 makes them 4/3 longer, and pieces are 1.8 MB of text.
TWO_PIECES = 1_500_000   # -> 2.0 MB of text: 2 pieces
THREE_PIECES = 3_000_000  # -> 4.0 MB of text: 3 pieces


def new_thread(prefix: str = "ck") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def chunk_rows(saver: D1Saver, thread_id: str) -> list[tuple[str, str, int]]:
    """(checkpoint_id, owner, seq) of every chunk row of a thread."""
    (res,) = saver.execute([Statement(
        "SELECT checkpoint_id, owner, seq FROM chunks WHERE thread_id = ?1 "
        "ORDER BY checkpoint_id, owner, seq", (thread_id,))])
    return [tuple(r) for r in res.rows]


def pieces_saver(backend: Backend) -> D1Saver:
    """A saver that stores values whole, in pieces past D1's 2 MB ("c:"): with encryption keys.
    Without keys values are stored by content (d1saver_chunks: tests/saver/test_content.py),
    and "c:" rows are only read (as 0.1.0 wrote them: test_010_chunk_rows_read_back)."""
    return backend.saver(encryption_keys=[bytes([7]) * 32])


def with_values(checkpoint_id: str, **values: Any) -> Checkpoint:
    return generate_checkpoint(checkpoint_id=checkpoint_id, channel_values=values)


def written(saver: D1Saver, thread_id: str) -> RunnableConfig:
    """A checkpoint to hang writes on."""
    return saver.put(generate_config(thread_id), generate_checkpoint(), {"step": 0}, {})


# --- defect 4: chunk rows are exact -----------------------------------------------------------


def test_copy_thread_onto_thread_with_more_chunks_reads_back(backend: Backend) -> None:
    """The target held the same checkpoint in 3 pieces, the source in 2: the copy reads back."""
    saver = pieces_saver(backend)
    source, target = new_thread("src"), new_thread("dst")
    cid = generate_checkpoint()["id"]
    big3, big2 = os.urandom(THREE_PIECES), os.urandom(TWO_PIECES)
    saver.put(generate_config(target), with_values(cid, blob=big3), {"step": 1}, {})
    saver.put(generate_config(source), with_values(cid, blob=big2), {"step": 1}, {})
    saver.copy_thread(source, target)
    got = saver.get_tuple(generate_config(target))
    assert got is not None and got.checkpoint["channel_values"] == {"blob": big2}
    assert chunk_rows(saver, target) == [(cid, "", 0), (cid, "", 1)]


def test_copy_thread_of_small_value_onto_chunked_one_drops_its_chunks(backend: Backend) -> None:
    """Copying a small checkpoint over a chunked one leaves no chunk of the old value."""
    saver = pieces_saver(backend)
    source, target = new_thread("src"), new_thread("dst")
    cid = generate_checkpoint()["id"]
    saver.put(generate_config(target), with_values(cid, blob=os.urandom(TWO_PIECES)), {}, {})
    saver.put(generate_config(source), with_values(cid, note="small"), {}, {})
    saver.copy_thread(source, target)
    got = saver.get_tuple(generate_config(target))
    assert got is not None and got.checkpoint["channel_values"] == {"note": "small"}
    assert chunk_rows(saver, target) == []


def test_replayed_regular_write_keeps_first_value_and_exact_chunks(backend: Backend) -> None:
    """A regular write is insert-or-ignore: a replay with a bigger value changes nothing."""
    saver = pieces_saver(backend)
    thread = new_thread()
    config = written(saver, thread)
    first, replay = os.urandom(TWO_PIECES), os.urandom(THREE_PIECES)
    saver.put_writes(config, [("blob", first)], "task-1")
    saver.put_writes(config, [("blob", replay)], "task-1")
    got = saver.get_tuple(config)
    assert got is not None and got.pending_writes == [("task-1", "blob", first)]
    cid = config["configurable"]["checkpoint_id"]
    assert chunk_rows(saver, thread) == [(cid, "task-1/0", 0), (cid, "task-1/0", 1)]


def test_small_write_replayed_big_leaves_no_chunks(backend: Backend) -> None:
    """The ignored replay of a small write must not leave the pieces of its big value."""
    saver = pieces_saver(backend)
    thread = new_thread()
    config = written(saver, thread)
    saver.put_writes(config, [("blob", "small")], "task-1")
    saver.put_writes(config, [("blob", os.urandom(TWO_PIECES))], "task-1")
    got = saver.get_tuple(config)
    assert got is not None and got.pending_writes == [("task-1", "blob", "small")]
    assert chunk_rows(saver, thread) == []


def test_chunked_checkpoint_rewritten_small_leaves_no_chunks(backend: Backend) -> None:
    """put of the same checkpoint id, now small: its old pieces go in the same batch."""
    saver = pieces_saver(backend)
    thread = new_thread()
    cid = generate_checkpoint()["id"]
    saver.put(generate_config(thread), with_values(cid, blob=os.urandom(TWO_PIECES)), {}, {})
    assert len(chunk_rows(saver, thread)) == 2
    requests = backend.requests
    saver.put(generate_config(thread), with_values(cid, note="small"), {}, {})
    assert backend.requests - requests == 1
    assert chunk_rows(saver, thread) == []
    got = saver.get_tuple(generate_config(thread))
    assert got is not None and got.checkpoint["channel_values"] == {"note": "small"}


def test_chunked_checkpoint_rewritten_with_fewer_pieces_is_exact(backend: Backend) -> None:
    saver = pieces_saver(backend)
    thread = new_thread()
    cid = generate_checkpoint()["id"]
    saver.put(generate_config(thread), with_values(cid, blob=os.urandom(THREE_PIECES)), {}, {})
    smaller = os.urandom(TWO_PIECES)
    saver.put(generate_config(thread), with_values(cid, blob=smaller), {}, {})
    assert chunk_rows(saver, thread) == [(cid, "", 0), (cid, "", 1)]
    got = saver.get_tuple(generate_config(thread))
    assert got is not None and got.checkpoint["channel_values"] == {"blob": smaller}


def test_chunked_special_write_rewritten_small_leaves_no_chunks(backend: Backend) -> None:
    """Special writes are upserted (the latest wins): the old pieces go with the old value."""
    saver = pieces_saver(backend)
    thread = new_thread()
    config = written(saver, thread)
    saver.put_writes(config, [("__error__", os.urandom(TWO_PIECES))], "task-1")
    saver.put_writes(config, [("__error__", "small")], "task-1")
    got = saver.get_tuple(config)
    assert got is not None and got.pending_writes == [("task-1", "__error__", "small")]
    assert chunk_rows(saver, thread) == []


def _store_as_010(saver: D1Saver, thread: str, cid: str, value: Any, extra_piece: bool) -> None:
    """Rows exactly as d1saver 0.1.0 wrote a chunked checkpoint: 'c:<n>' and n pieces, plus
    (extra_piece) the stale piece its copy_thread/replay bug could leave behind."""
    type_, data = JsonPlusSerializer().dumps_typed(value)
    text = _codec.encode(data)
    pieces = [text[i:i + 1_800_000] for i in range(0, len(text), 1_800_000)]
    stmts = [Statement(
        "INSERT INTO checkpoints (thread_id, checkpoint_ns, checkpoint_id, type, checkpoint, "
        "metadata, channels) VALUES (?1, '', ?2, ?3, ?4, '{}', '[\"blob\"]')",
        (thread, cid, type_, f"c:{len(pieces)}"))]
    if extra_piece:
        pieces.append("b:stale")
    stmts += [Statement("INSERT INTO chunks (thread_id, checkpoint_ns, checkpoint_id, owner, "
                        "seq, data) VALUES (?1, '', ?2, '', ?3, ?4)", (thread, cid, seq, piece))
              for seq, piece in enumerate(pieces)]
    saver.execute(stmts)


@pytest.mark.parametrize("extra_piece", [False, True], ids=["as-written", "with-stale-piece"])
def test_010_chunk_rows_read_back(backend: Backend, extra_piece: bool) -> None:
    """'c:<n>' rows of 0.1.0 read back: pieces 0..n-1, whatever else its bugs left."""
    saver = backend.saver()
    saver.setup()
    thread = new_thread("old")
    cp = with_values(generate_checkpoint()["id"], blob=os.urandom(TWO_PIECES))
    _store_as_010(saver, thread, cp["id"], cp, extra_piece)
    got = saver.get_tuple(generate_config(thread))
    assert got is not None and got.checkpoint["channel_values"] == cp["channel_values"]


def test_missing_piece_is_an_error_not_a_wrong_value(local: Backend) -> None:
    saver = pieces_saver(local)
    thread = new_thread()
    saver.put(generate_config(thread), generate_checkpoint(
        channel_values={"blob": os.urandom(TWO_PIECES)}), {}, {})
    saver.execute([Statement("DELETE FROM chunks WHERE thread_id = ?1 AND seq = 1", (thread,))])
    with pytest.raises(Exception, match="2 chunks, 1 found"):
        saver.get_tuple(generate_config(thread))


# --- defect 15: a row's parts add up past 2 MB ------------------------------------------------


def _round_trip(saver: D1Saver, thread: str, values: dict[str, Any],
                metadata: dict[str, Any]) -> RunnableConfig:
    """put, then get_tuple and list give the checkpoint and its metadata back."""
    stored = saver.put(generate_config(thread), generate_checkpoint(channel_values=values),
                       metadata, {})
    for tup in (saver.get_tuple(stored), next(iter(saver.list(generate_config(thread))))):
        assert tup is not None
        assert tup.checkpoint["channel_values"] == values
        assert {k: tup.metadata.get(k) for k in metadata} == metadata
    return stored


def test_value_plus_metadata_over_2mb_round_trip(backend: Backend) -> None:
    """A 1.77 MB value and 250 KB of metadata: each fits, their row does not (stored by
    content, the value leaves a short manifest in the row; the metadata stays in its column)."""
    saver = backend.saver()
    thread = new_thread("sum")
    values = {"blob": os.urandom(1_327_000)}  # 1.77 MB of base64
    metadata = {"notes": "n" * 250_000, "user": thread, "step": 1}
    stored = _round_trip(saver, thread, values, metadata)
    cid = stored["configurable"]["checkpoint_id"]
    assert chunk_rows(saver, thread) == []  # the value is in d1saver_chunks; metadata stayed
    (res,) = saver.execute([Statement(
        "SELECT substr(checkpoint, 1, 2) FROM checkpoints WHERE checkpoint_id = ?1", (cid,))])
    assert res.rows == [["m:"]]
    for flt in ({"user": thread}, {"user": thread, "notes": "n" * 250_000, "step": 1}):
        assert [t.config for t in saver.list(None, filter=flt)] == [stored]


def test_metadata_over_2mb_round_trips_and_filters(backend: Backend) -> None:
    """2.1 MB of metadata alone: stored in chunks; filters on any key still answer exactly."""
    saver = backend.saver()
    thread = new_thread("md")
    medium = {"text": "m" * 20_000}  # too big to stay filterable in SQL: answered in Python
    metadata = {"big": "b" * 2_100_000, "medium": medium, "user": thread, "step": 3}
    stored = _round_trip(saver, thread, {"note": "small"}, metadata)
    cid = stored["configurable"]["checkpoint_id"]
    assert {owner for _, owner, _ in chunk_rows(saver, thread)} == {":metadata"}
    assert {c for c, _, _ in chunk_rows(saver, thread)} == {cid}
    found = lambda flt, **kw: [t.config for t in saver.list(None, filter=flt, **kw)]  # noqa: E731
    assert found({"user": thread}) == [stored]
    assert found({"user": thread, "medium": medium}) == [stored]
    assert found({"medium": medium, "user": thread}, limit=1) == [stored]
    assert found({"user": thread, "medium": {"text": "other"}}) == []
    assert found({"user": thread, "big": "b"}) == []
    assert found({"user": thread, "missing": None}) == [stored]
    copy = new_thread("md-copy")
    saver.copy_thread(thread, copy)
    got = saver.get_tuple(generate_config(copy))
    assert got is not None and {k: got.metadata.get(k) for k in metadata} == metadata
    saver.delete_thread(copy)
    assert chunk_rows(saver, copy) == []
    # Rewritten small, the checkpoint leaves no metadata chunk behind.
    saver.put(generate_config(thread), with_values(cid, note="small"), {"step": 3}, {})
    assert chunk_rows(saver, thread) == []


def test_oversized_metadata_keeps_what_sql_reads_in_its_column(local: Backend) -> None:
    """The DeltaChannel walk, compaction and `d1saver history` read counters, step and source
    in SQL: chunked metadata keeps them in its column, first, even when the user's keys
    alone would fill the column's 64 KB."""
    saver = local.saver()
    thread = new_thread("md")
    metadata = {"big": "b" * 2_100_000, "source": "loop", "step": 7,
                "counters_since_delta_snapshot": {"messages": 3},
                **{f"k{i:02d}": "a" * 4_087 for i in range(16)}}  # 4,096 bytes each, key and all
    saver.put(generate_config(thread), generate_checkpoint(), metadata, {})
    (res,) = saver.execute([Statement(
        "SELECT json_extract(metadata, '$.counters_since_delta_snapshot.messages'), "
        "json_extract(metadata, '$.step'), json_extract(metadata, '$.source'), "
        "json_type(metadata, '$.big'), LENGTH(metadata) FROM checkpoints WHERE thread_id = ?1",
        (thread,))])
    counters, step, source, big, length = res.rows[0]
    assert (counters, step, source, big) == (3, 7, "loop", None) and length < 70_000


def _column(saver: D1Saver, config: RunnableConfig) -> dict[str, Any]:
    """The metadata column of a checkpoint row as stored."""
    (res,) = saver.execute([Statement(
        "SELECT metadata FROM checkpoints WHERE checkpoint_id = ?1",
        (config["configurable"]["checkpoint_id"],))])
    return cast(dict[str, Any], json.loads(res.rows[0][0]))


def test_chunked_metadata_keeps_values_up_to_4096_bytes_and_64_kb_in_its_column(
        local: Backend) -> None:
    """Metadata in chunks keeps in its column (where SQL filters) each top-level value of at
    most 4,096 bytes of JSON, while the kept keys cost at most 64 KB (a value's JSON, its key
    and 4): a value of exactly 4,096 bytes stays, one of 4,097 does not; sixteen keys
    costing exactly 64 KB all stay. Filters answer alike either way."""
    saver = local.saver()
    thread = new_thread("md")
    big = "b" * 2_100_000
    edge = {"big": big, "edge": "e" * 4_094, "over": "o" * 4_095}  # JSON: 4,096 and 4,097
    stored = _round_trip(saver, thread, {"note": "small"}, edge)
    assert set(_column(saver, stored)) == {"edge", METADATA_KEY}
    full = {"big": big, **{f"k{i:02d}": "a" * 4_087 for i in range(16)}}  # 4,089 + 3 + 4 each
    stored = _round_trip(saver, thread, {"note": "small"}, full)
    assert set(_column(saver, stored)) == {*full, METADATA_KEY} - {"big"}
    assert [t.config for t in saver.list(None, filter={"k15": "a" * 4_087})] == [stored]


def test_a_value_beside_metadata_that_nearly_fills_its_row_moves_to_chunks(
        local: Backend) -> None:
    """Metadata that fits its row only beside a chunk marker stays in its column (SQL filters
    on it); the value, stored whole (no part worth storing by content), moves to chunks, so
    the row keeps within ROW_MAX."""
    saver = local.saver()
    thread = new_thread("fit")
    rng = random.Random(15)
    values = {"notes": [f"{rng.getrandbits(400):0100x}" for _ in range(100)]}  # inline items
    assert len(_codec.encode(ormsgpack.packb(values))) > 5_000  # more than the row has left
    metadata = {"user": thread, "step": 1, "notes": "n" * (ROW_MAX - 3_000)}
    stored = _round_trip(saver, thread, values, metadata)
    (res,) = saver.execute([Statement(
        "SELECT substr(checkpoint, 1, 2), length(checkpoint) + length(metadata), "
        "json_extract(metadata, '$.user') FROM checkpoints WHERE thread_id = ?1", (thread,))])
    (kind, size, user), = res.rows
    assert (kind, user) == ("c:", thread) and size <= ROW_MAX
    assert {owner for _, owner, _ in chunk_rows(saver, thread)} == {""}
    assert [t.config for t in saver.list(None, filter={"user": thread})] == [stored]


def test_metadata_holding_the_reserved_key_round_trips(local: Backend) -> None:
    """Metadata of any content reads back as given, even a key named like d1saver's marker."""
    saver = local.saver()
    thread = new_thread("md")
    metadata = {"d1saver:metadata": "c:9", "step": 1}
    stored = saver.put(generate_config(thread), generate_checkpoint(), metadata, {})
    got = saver.get_tuple(stored)
    assert got is not None and {k: got.metadata[k] for k in metadata} == metadata
