"""Tampering with the database directly, with encryption keys set: every case is refused with
a typed error (the IntegrityError family, naming the thread and checkpoint read) and none
returns data. On the local D1 and on the real D1 engine (Wrangler).

The attacker writes SQL: flips a byte of a stored value (checkpoint, metadata, write, chunk
piece, and the plaintext columns bound to them), moves or copies rows to another thread,
checkpoint or write slot, plants plaintext rows, and the saver reads with a wrong key or
after dropping a key too early. Without keys the same edits would be read back as data
(tests/reliability/test_deserialization.py shows what a planted row does then).
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Callable
from typing import Any

import ormsgpack
import pytest
from langgraph.checkpoint.base import empty_checkpoint

from d1saver.compaction.rekey import rekey
from d1saver import D1Error, D1Saver, IntegrityError, PlaintextValueError, Statement, UnknownKeyError
from d1saver.storage import codec as _codec
from tests.conftest import Backend

KEY, OTHER, NEWER = bytes([31]) * 32, bytes([32]) * 32, bytes([33]) * 32
SECRET = "the secret the state holds"


def cfg(thread_id: str, checkpoint_id: str | None = None) -> dict:
    conf: dict[str, Any] = {"thread_id": thread_id, "checkpoint_ns": ""}
    if checkpoint_id:
        conf["checkpoint_id"] = checkpoint_id
    return {"configurable": conf}


def sql(saver: D1Saver, text: str, *params: Any) -> list[list[Any]]:
    """Raw SQL, as an attacker with write access to the database sends it."""
    (res,) = saver.client.execute([Statement(text, params)])
    return res.rows


def flip(text: str, at: int) -> str:
    """`text` with the character at `at` changed (a one-byte edit of the stored row)."""
    return text[:at] + ("A" if text[at] != "A" else "B") + text[at + 1:]


class Scene:
    """A thread with two checkpoints (c1 <- c2), c2 holding SECRET and three writes."""

    def __init__(self, backend: Backend, keys: list[bytes] | None = None) -> None:
        self.saver = backend.saver(encryption_keys=keys or [KEY])
        self.thread = f"tamper-{uuid.uuid4().hex[:12]}"
        ck = empty_checkpoint()
        ck["channel_values"] = {"x": "first"}
        c1 = self.saver.put(cfg(self.thread), ck, {"step": 0, "source": "input"}, {})
        ck = empty_checkpoint()
        ck["channel_values"] = {"x": SECRET, "n": 1}
        self.conf = self.saver.put(c1, ck, {"step": 1, "source": "loop", "user": "u-1"}, {})
        self.saver.put_writes(self.conf, [("x", "w0"), ("y", "w1")], "task-a")
        self.saver.put_writes(self.conf, [("x", "w2")], "task-b")
        self.c1 = c1["configurable"]["checkpoint_id"]
        self.c2 = self.conf["configurable"]["checkpoint_id"]

    # `where` names its parameters from ?2 on (?1 is the thread).
    def value(self, table: str, column: str, where: str, *params: Any) -> str:
        return sql(self.saver, f"SELECT {column} FROM {table} WHERE thread_id = ?1 AND {where}",
                   self.thread, *params)[0][0]

    def set(self, table: str, column: str, value: Any, where: str, *params: Any) -> None:
        sql(self.saver, f"UPDATE {table} SET {column} = ?{len(params) + 2} "
                        f"WHERE thread_id = ?1 AND {where}", self.thread, *params, value)

    def edit(self, table: str, column: str, fn: Callable[[str], str], where: str,
             *params: Any) -> None:
        self.set(table, column, fn(self.value(table, column, where, *params)), where, *params)


def reads(saver: D1Saver, thread: str, checkpoint_id: str) -> dict[str, Callable[[], Any]]:
    """Every way the saver reads the head checkpoint of `thread`."""
    return {
        "get_tuple": lambda: saver.get_tuple(cfg(thread)),
        "get_tuple by id": lambda: saver.get_tuple(cfg(thread, checkpoint_id)),
        "list": lambda: list(saver.list(cfg(thread))),
        "list with a filter": lambda: list(saver.list(cfg(thread), filter={"user": "u-1"})),
    }


def assert_refused(saver: D1Saver, thread: str, checkpoint_id: str,
                   error: type[IntegrityError] = IntegrityError, *,
                   head: bool = True) -> None:
    """Every read raises `error`, naming the thread and checkpoint; none returns data.
    (`head`: the checkpoint is the thread's newest, which a read without an id finds.)"""
    for name, read in reads(saver, thread, checkpoint_id).items():
        if not head and name == "get_tuple":
            continue
        with pytest.raises(error) as info:
            read()
        err = info.value
        assert (err.thread_id, err.checkpoint_id) == (thread, checkpoint_id), name
        assert repr(thread) in str(err) and repr(checkpoint_id) in str(err), name
        assert SECRET not in str(err) and "nothing was returned" in str(err), name


# --- a byte altered -------------------------------------------------------------------------------

FLIPS: dict[str, Callable[[Scene], None]] = {
    "checkpoint value": lambda s: s.edit("checkpoints", "checkpoint", lambda t: flip(t, 30),
                                         "checkpoint_id = ?2", s.c2),
    "checkpoint value, last character": lambda s: s.edit(
        "checkpoints", "checkpoint", lambda t: flip(t, len(t) - 6), "checkpoint_id = ?2", s.c2),
    "checkpoint key id": lambda s: s.edit("checkpoints", "checkpoint", lambda t: flip(t, 3),
                                          "checkpoint_id = ?2", s.c2),
    "checkpoint type column": lambda s: s.set("checkpoints", "type", "json",
                                              "checkpoint_id = ?2", s.c2),
    "metadata field removed": lambda s: s.edit(
        "checkpoints", "metadata", lambda t: t.replace('"source":"loop",', ""),
        "checkpoint_id = ?2", s.c2),
    "metadata column replaced": lambda s: s.set(
        "checkpoints", "metadata", json.dumps({"step": 1, "source": "loop", "user": "u-1"}),
        "checkpoint_id = ?2", s.c2),
    "plaintext metadata field (step)": lambda s: s.edit(
        "checkpoints", "metadata", lambda t: t.replace('"step":1', '"step":7'),
        "checkpoint_id = ?2", s.c2),
    "metadata field added": lambda s: s.edit(
        "checkpoints", "metadata", lambda t: t.replace("{", '{"note":"mallory",', 1),
        "checkpoint_id = ?2", s.c2),
    "channels column": lambda s: s.set("checkpoints", "channels", '["n","x","z"]',
                                       "checkpoint_id = ?2", s.c2),
    "write value": lambda s: s.edit("writes", "value", lambda t: flip(t, 25),
                                    "task_id = 'task-a' AND idx = 1"),
    "write type column": lambda s: s.set("writes", "type", "json",
                                         "task_id = 'task-a' AND idx = 1"),
    "write task_path (reorders writes)": lambda s: s.set("writes", "task_path", "~",
                                                         "task_id = 'task-b'"),
}


@pytest.mark.parametrize("case", list(FLIPS))
def test_a_value_altered_by_one_byte_is_refused(backend: Backend, case: str) -> None:
    scene = Scene(backend)
    FLIPS[case](scene)
    assert_refused(scene.saver, scene.thread, scene.c2)


def test_metadata_that_is_not_json_fails_in_sql(backend: Backend) -> None:
    """A metadata column cut short is not JSON: D1's JSON functions (the DeltaChannel walk,
    filters) refuse the statement itself, so the read fails as a QueryError, returning nothing."""
    scene = Scene(backend)
    scene.edit("checkpoints", "metadata", lambda t: t[:-1], "checkpoint_id = ?2", scene.c2)
    try:
        for read in reads(scene.saver, scene.thread, scene.c2).values():
            with pytest.raises(D1Error, match="malformed JSON"):
                read()
    finally:  # the real engine's database is shared: a row no JSON function reads must go
        scene.saver.delete_thread(scene.thread)


def test_metadata_that_is_json_but_not_an_object_is_named_as_altered(backend: Backend) -> None:
    """A metadata column replaced by JSON that is not an object (an array): every read that
    meets the row refuses it with an IntegrityError saying the metadata was altered."""
    scene = Scene(backend)
    scene.set("checkpoints", "metadata", "[1]", "checkpoint_id = ?2", scene.c2)
    for name, read in reads(scene.saver, scene.thread, scene.c2).items():
        if name == "list with a filter":  # the filter, in SQL, finds no "user" in an array
            continue
        with pytest.raises(IntegrityError, match="metadata that is not a JSON object") as info:
            read()
        assert (info.value.thread_id, info.value.checkpoint_id) == (scene.thread, scene.c2)


def test_a_chunk_piece_altered_lost_or_swapped_is_refused(backend: Backend) -> None:
    scene = Scene(backend)
    big = os.urandom(4_000_000)  # random bytes: over 2 MB as stored, so in chunks
    ck = empty_checkpoint()
    ck["channel_values"] = {"blob": big}
    conf = scene.saver.put(scene.conf, ck, {"step": 2}, {})
    cid = conf["configurable"]["checkpoint_id"]
    pieces = sql(scene.saver, "SELECT seq, data FROM chunks WHERE thread_id = ?1 AND "
                              "checkpoint_id = ?2 AND owner = '' ORDER BY seq", scene.thread, cid)
    assert len(pieces) >= 3
    where = "thread_id = ?1 AND checkpoint_id = ?2 AND owner = '' AND seq = ?3"
    edits = [
        [Statement(f"UPDATE chunks SET data = ?4 WHERE {where}",
                   (scene.thread, cid, 1, flip(pieces[1][1], 1000)))],
        [Statement(f"DELETE FROM chunks WHERE {where}", (scene.thread, cid, 2))],
        [Statement(f"UPDATE chunks SET data = ?4 WHERE {where}",
                   (scene.thread, cid, 0, pieces[1][1])),
         Statement(f"UPDATE chunks SET data = ?4 WHERE {where}",
                   (scene.thread, cid, 1, pieces[0][1]))],
    ]
    for edit in edits:
        scene.saver.client.execute(edit)
        assert_refused(scene.saver, scene.thread, cid)
        scene.saver.client.execute([  # restore every piece: the value reads again
            Statement("INSERT OR REPLACE INTO chunks VALUES (?1, '', ?2, '', ?3, ?4)",
                      (scene.thread, cid, seq, data)) for seq, data in pieces])
        assert scene.saver.get_tuple(conf).checkpoint["channel_values"]["blob"] == big


# --- a row moved or copied ---------------------------------------------------------------------------


def test_rows_moved_to_another_thread_are_refused(backend: Backend) -> None:
    scene = Scene(backend)
    other = f"moved-{uuid.uuid4().hex[:12]}"
    scene.saver.client.execute([
        Statement(f"UPDATE {table} SET thread_id = ?2 WHERE thread_id = ?1", (scene.thread, other))
        for table in ("checkpoints", "writes", "chunks")])
    assert_refused(scene.saver, other, scene.c2)
    assert scene.saver.get_tuple(cfg(scene.thread)) is None  # gone, and nothing else comes back


def test_rows_copied_to_another_thread_are_refused(backend: Backend) -> None:
    scene = Scene(backend)
    other = f"copied-{uuid.uuid4().hex[:12]}"
    scene.saver.client.execute([
        Statement("INSERT INTO checkpoints SELECT ?2, checkpoint_ns, checkpoint_id, "
                  "parent_checkpoint_id, type, checkpoint, metadata, channels, run_id, ts "
                  "FROM checkpoints WHERE thread_id = ?1", (scene.thread, other)),
        Statement("INSERT INTO writes SELECT ?2, checkpoint_ns, checkpoint_id, task_id, "
                  "task_path, idx, channel, type, value FROM writes WHERE thread_id = ?1",
                  (scene.thread, other))])
    assert_refused(scene.saver, other, scene.c2)
    assert scene.saver.get_tuple(cfg(scene.thread)).checkpoint["channel_values"]["x"] == SECRET
    # copy_thread itself re-seals: its copies read.
    copy = f"copy-{uuid.uuid4().hex[:12]}"
    scene.saver.copy_thread(scene.thread, copy)
    assert scene.saver.get_tuple(cfg(copy)).checkpoint["channel_values"]["x"] == SECRET


MOVES: dict[str, Callable[[Scene], None]] = {
    "checkpoint value from another checkpoint": lambda s: s.set(
        "checkpoints", "checkpoint", s.value("checkpoints", "checkpoint", "checkpoint_id = ?2",
                                             s.c1), "checkpoint_id = ?2", s.c2),
    "metadata from another checkpoint": lambda s: s.set(
        "checkpoints", "metadata", s.value("checkpoints", "metadata", "checkpoint_id = ?2",
                                           s.c1), "checkpoint_id = ?2", s.c2),
    "write to another idx": lambda s: s.set("writes", "idx", 5, "task_id = 'task-b'"),
    "write to another task": lambda s: s.set("writes", "task_id", "task-z", "task_id = 'task-b'"),
    "write to another channel": lambda s: s.set("writes", "channel", "y", "task_id = 'task-b'"),
    "write value from another write": lambda s: s.set(
        "writes", "value", s.value("writes", "value", "task_id = 'task-a' AND idx = 0"),
        "task_id = 'task-b'"),
}


@pytest.mark.parametrize("case", list(MOVES))
def test_a_value_moved_to_another_row_is_refused(backend: Backend, case: str) -> None:
    scene = Scene(backend)
    MOVES[case](scene)
    assert_refused(scene.saver, scene.thread, scene.c2)


def test_a_write_copied_to_another_slot_or_checkpoint_is_refused(backend: Backend) -> None:
    scene = Scene(backend)
    sql(scene.saver, "INSERT INTO writes SELECT thread_id, checkpoint_ns, checkpoint_id, "
                     "'task-c', task_path, idx, channel, type, value FROM writes "
                     "WHERE thread_id = ?1 AND task_id = 'task-b'", scene.thread)
    assert_refused(scene.saver, scene.thread, scene.c2)
    scene = Scene(backend)
    sql(scene.saver, "INSERT INTO writes SELECT thread_id, checkpoint_ns, ?2, task_id, "
                     "task_path, idx, channel, type, value FROM writes "
                     "WHERE thread_id = ?1 AND task_id = 'task-b'", scene.thread, scene.c1)
    assert_refused(scene.saver, scene.thread, scene.c1, head=False)
    assert scene.saver.get_tuple(cfg(scene.thread)).pending_writes  # c2 itself is intact


# --- plaintext planted -------------------------------------------------------------------------------


def test_a_planted_plaintext_checkpoint_is_refused(backend: Backend) -> None:
    scene = Scene(backend)
    ck = empty_checkpoint()
    ck["id"] = "1fffffff-ffff-6fff-bfff-ffffffffffff"  # newer than any: the new head
    ck["channel_values"] = {"x": "planted"}
    sql(scene.saver, "INSERT INTO checkpoints VALUES (?1, '', ?2, ?3, 'msgpack', ?4, ?5, "
                     "'[\"x\"]', NULL, NULL)", scene.thread, ck["id"], scene.c2,
        _codec.encode(ormsgpack.packb(ck)),
        json.dumps({"step": 9, "source": "loop", "user": "u-1"}))
    assert_refused(scene.saver, scene.thread, ck["id"], PlaintextValueError)


PLANTS: dict[str, Callable[[Scene], None]] = {
    "plaintext write": lambda s: sql(
        s.saver, "INSERT INTO writes VALUES (?1, '', ?2, 'task-p', '', 0, 'x', 'msgpack', ?3)",
        s.thread, s.c2, _codec.encode(ormsgpack.packb("planted"))),
    "plaintext write value": lambda s: s.set("writes", "value",
                                             _codec.encode(ormsgpack.packb("planted")),
                                             "task_id = 'task-b'"),
    "NULL write value": lambda s: s.set("writes", "value", None, "task_id = 'task-b'"),
    "plaintext checkpoint value": lambda s: s.set(
        "checkpoints", "checkpoint", _codec.encode(ormsgpack.packb(empty_checkpoint())),
        "checkpoint_id = ?2", s.c2),
}


@pytest.mark.parametrize("case", list(PLANTS))
def test_a_planted_plaintext_value_is_refused(backend: Backend, case: str) -> None:
    scene = Scene(backend)
    PLANTS[case](scene)
    assert_refused(scene.saver, scene.thread, scene.c2, PlaintextValueError)


def test_a_null_write_value_is_refused_as_missing(backend: Backend) -> None:
    """A sealed value is never NULL: a write row whose value is, is refused saying so."""
    scene = Scene(backend)
    PLANTS["NULL write value"](scene)
    with pytest.raises(PlaintextValueError, match=r"is missing \(NULL\): nothing was returned"):
        scene.saver.get_tuple(cfg(scene.thread))


def test_a_value_stored_by_content_without_a_seal_is_refused(backend: Backend) -> None:
    """A saver without keys stores long values by content ("m:" manifests over the thread's
    chunks: nothing authenticates them); one writing into a sealed thread leaves values a
    saver with keys refuses: a pending write of c2, then a new head checkpoint."""
    scene = Scene(backend)
    plain = backend.saver()
    plain.put_writes(scene.conf, [("x", "planted " * 200)], "task-p")
    assert sql(scene.saver, "SELECT substr(value, 1, 2) FROM writes WHERE thread_id = ?1 "
                            "AND task_id = 'task-p'", scene.thread) == [["m:"]]
    assert_refused(scene.saver, scene.thread, scene.c2, PlaintextValueError)
    ck = empty_checkpoint()
    ck["channel_values"] = {"x": [f"planted message {i} " * 40 for i in range(3)]}
    head = plain.put(scene.conf, ck, {"step": 2, "source": "loop", "user": "u-1"}, {})
    assert sql(scene.saver, "SELECT substr(checkpoint, 1, 2) FROM checkpoints WHERE "
                            "checkpoint_id = ?1", head["configurable"]["checkpoint_id"]) == [["m:"]]
    assert_refused(scene.saver, scene.thread, head["configurable"]["checkpoint_id"],
                   PlaintextValueError)
    for conf in (head, scene.conf):  # the refusal says why: stored by content, no seal
        with pytest.raises(PlaintextValueError, match="stored by content without a seal"):
            scene.saver.get_tuple(conf)


# --- keys: a wrong one, one dropped too early ----------------------------------------------------------


def test_a_wrong_key_reads_nothing(backend: Backend) -> None:
    scene = Scene(backend)
    assert_refused(backend.saver(encryption_keys=[OTHER]), scene.thread, scene.c2,
                   UnknownKeyError)


def test_a_key_dropped_after_rotation_reads_nothing_until_rekeyed(backend: Backend) -> None:
    scene = Scene(backend)  # sealed under KEY
    rotated = backend.saver(encryption_keys=[NEWER, KEY])
    assert rotated.get_tuple(cfg(scene.thread)).checkpoint["channel_values"]["x"] == SECRET
    later = rotated.put(scene.conf, empty_checkpoint(), {"step": 2}, {})  # under NEWER
    dropped = backend.saver(encryption_keys=[NEWER])
    assert dropped.get_tuple(later) is not None
    assert_refused(dropped, scene.thread, scene.c2, UnknownKeyError, head=False)
    if backend.name == "local":  # the shared real-engine database holds other tests' rows
        rekey(rotated)
        assert dropped.get_tuple(cfg(scene.thread, scene.c2)).checkpoint["channel_values"][
            "x"] == SECRET


@pytest.mark.anyio
async def test_async_reads_refuse_too(backend: Backend) -> None:
    scene = Scene(backend)
    FLIPS["write value"](scene)
    with pytest.raises(IntegrityError):
        await scene.saver.aget_tuple(cfg(scene.thread))
    with pytest.raises(IntegrityError):
        [t async for t in scene.saver.alist(cfg(scene.thread))]


def test_every_refusal_is_a_d1_error(backend: Backend) -> None:
    """The family callers catch: IntegrityError < StoredValueError < D1Error."""
    assert issubclass(PlaintextValueError, IntegrityError) and issubclass(IntegrityError, D1Error)
    assert issubclass(UnknownKeyError, IntegrityError)
