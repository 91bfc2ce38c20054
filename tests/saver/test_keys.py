"""D1Saver with encryption keys: every stored value sealed and bound to its row, and
everything else working as without keys (graphs, DeltaChannel histories, copies, filters,
compaction, request counts). Tampering is tests/reliability/test_tamper.py."""

from __future__ import annotations

import base64
import json
import os
import uuid
from collections import Counter
from typing import Any

import pytest
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

from benchmarks.workload import build_graph, first_input
from d1saver.compaction import compact
from d1saver import ConfigError, D1Saver, PlaintextValueError, Statement, StoredValueError
from d1saver.storage import codec as _codec
from d1saver.storage.crypto import ENV_KEYS, Sealer, aad_for_checkpoint, aad_for_write
from d1saver.storage.values import bound_columns
from tests.conftest import Backend
from tests.saver.graphs import approval_graph, chat_graph
from tests.saver.test_graphs import check_delta, check_delta_requests, run_delta
from tests.saver.test_state_types import Answer, Question

K1, K2 = bytes([11]) * 32, bytes([12]) * 32


def cfg(thread_id: str, checkpoint_id: str | None = None) -> dict:
    conf: dict[str, Any] = {"thread_id": thread_id, "checkpoint_ns": ""}
    if checkpoint_id:
        conf["checkpoint_id"] = checkpoint_id
    return {"configurable": conf}


def rows(saver: D1Saver, sql: str, *params: Any) -> list[list[Any]]:
    (res,) = saver.client.execute([Statement(sql, params)])
    return res.rows


def put_one(saver: D1Saver, thread_id: str, values: dict, metadata: dict,
            parent: str | None = None) -> dict:
    ck = empty_checkpoint()
    ck["channel_values"] = values
    return saver.put(cfg(thread_id, parent), ck, metadata, {})


# --- what is stored -----------------------------------------------------------------------------


def test_every_stored_value_is_sealed_and_metadata_keeps_only_langgraphs_fields(
        local: Backend) -> None:
    saver = local.saver(encryption_keys=[K1])
    conf = put_one(saver, "t", {"secret": "the patient's diagnosis"},
                   {"source": "loop", "step": 3, "user": "alice@example.com",
                    "counters_since_delta_snapshot": {"messages": [1, 1]}})
    saver.put_writes(conf, [("secret", "more personal data")], "task-1")
    (ck, md, channels), = rows(saver, "SELECT checkpoint, metadata, channels FROM checkpoints")
    (value,), = rows(saver, "SELECT value FROM writes")
    assert ck.startswith("e:") and value.startswith("e:")
    assert json.loads(md) == {"source": "loop", "step": 3,  # LangGraph's fields only
                              "counters_since_delta_snapshot": {"messages": [1, 1]}}
    stored = ck + md + value + channels
    for secret in ("diagnosis", "alice", "personal"):
        assert secret not in stored
    tup = saver.get_tuple(conf)
    assert tup.checkpoint["channel_values"] == {"secret": "the patient's diagnosis"}
    assert tup.metadata == {"source": "loop", "step": 3, "user": "alice@example.com",
                            "counters_since_delta_snapshot": {"messages": [1, 1]}}
    assert tup.pending_writes == [("task-1", "secret", "more personal data")]


def test_a_key_adds_at_most_44_characters_to_each_stored_value(local: Backend) -> None:
    """On the benchmark's agent (30 values and more), each checkpoint and write as stored is
    at most 44 characters longer than the same value stored without a key: 43 or 44 once
    compressed (both unpadded base64: "~", and the key id, codec, nonce and tag, 32 bytes);
    its metadata, LangGraph's own fields only, is stored as without a key."""
    saver = local.saver(encryption_keys=[K1])
    graph = build_graph(saver, variant="delta", turns=4, fanout=3)
    graph.invoke(first_input(), cfg("agent"), durability="sync")
    sealer = Sealer([K1])
    extra: Counter = Counter()
    for t, ns, cid, type_, text, md, channels in rows(
            saver, "SELECT thread_id, checkpoint_ns, checkpoint_id, type, checkpoint, metadata, "
                   "channels FROM checkpoints"):
        aad = aad_for_checkpoint(t, ns, cid, "checkpoint", type_=type_,
                                 columns=bound_columns(json.loads(md), channels))
        data, framed = sealer.open_flagged(text, aad)
        assert not framed  # no metadata but LangGraph's: nothing of it moved into the value
        tup = saver.get_tuple(cfg("agent", cid))
        assert md == json.dumps(tup.metadata, separators=(",", ":"))  # as stored without a key
        extra[len(text) - len(_codec.encode(data))] += 1
    for t, ns, cid, task, path, idx, ch, type_, text in rows(
            saver, "SELECT thread_id, checkpoint_ns, checkpoint_id, task_id, task_path, idx, "
                   "channel, type, value FROM writes"):
        data = sealer.open_text(text, aad_for_write(t, ns, cid, task, idx, ch, type_=type_,
                                                    task_path=path))
        extra[len(text) - len(_codec.encode(data))] += 1
    assert sum(extra.values()) > 30
    assert max(extra) <= 44, extra
    assert extra[43] + extra[44] > sum(extra.values()) // 2  # most values are compressed


def test_values_over_2mb_are_sealed_then_chunked(local: Backend) -> None:
    saver = local.saver(encryption_keys=[K1])
    blob = os.urandom(2_200_000)  # random bytes do not compress: over 2 MB as stored
    big = {"blob": blob, "n": 1}
    conf = put_one(saver, "big", big, {"step": 1, "note": blob[:1000].hex()})
    saver.put_writes(conf, [("blob", blob * 2)], "task-1")
    pieces = rows(saver, "SELECT owner, seq, substr(data, 1, 2) FROM chunks ORDER BY owner, seq")
    owners = Counter(owner for owner, _, _ in pieces)
    assert owners[""] >= 1 and owners["task-1/0"] >= 2
    assert [p[2] for p in pieces if p[1] == 0] == ["e:"] * len(owners)  # one sealed text, split
    tup = saver.get_tuple(conf)
    assert tup.checkpoint["channel_values"] == big
    assert tup.pending_writes == [("task-1", "blob", blob * 2)]
    assert tup.metadata["note"] == blob[:1000].hex()


# --- the serializer: any type from an authenticated row ------------------------------------------


def test_with_keys_any_type_is_constructed_even_from_a_strict_serde(local: Backend) -> None:
    strict = JsonPlusSerializer(allowed_msgpack_modules=None)
    value = {"q": Question("which?", ["a", "b"]), "a": Answer(choice="a", confidence=0.5)}
    keyed = local.saver(serde=strict, encryption_keys=[K1])
    conf = put_one(keyed, "types", value, {"step": 0})
    assert keyed.get_tuple(conf).checkpoint["channel_values"] == value
    # A compiled graph's allowlist cannot narrow it (LANGGRAPH_STRICT_MSGPACK's path).
    assert keyed.with_allowlist([("x", "Y")]).get_tuple(conf).checkpoint["channel_values"] == value
    plain = local.saver(serde=strict)
    conf = put_one(plain, "types-plain", value, {"step": 0})
    assert isinstance(plain.get_tuple(conf).checkpoint["channel_values"]["q"], dict)


def test_a_saver_without_keys_says_the_rows_are_encrypted(local: Backend) -> None:
    conf = put_one(local.saver(encryption_keys=[K1]), "sealed", {"x": 1}, {"step": 0})
    with pytest.raises(StoredValueError, match="encrypted: give the saver its encryption keys"):
        local.saver().get_tuple(conf)


def test_from_env_reads_the_keys(local: Backend, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CLOUDFLARE_ACCOUNT_ID", local.account_id)
    monkeypatch.setenv("CLOUDFLARE_API_TOKEN", local.api_token)
    monkeypatch.setenv("D1_DATABASE_ID", local.database_id)
    monkeypatch.setenv("D1_API_BASE_URL", local.base_url)
    b64 = [base64.b64encode(k).decode() for k in (K2, K1)]
    monkeypatch.setenv(ENV_KEYS, ",".join(b64))
    saver = D1Saver.from_env(transport=local.transport)
    assert saver.key_ids == Sealer([K2, K1]).key_ids
    conf = put_one(saver, "env", {"x": 1}, {"step": 0})
    assert rows(saver, "SELECT substr(checkpoint, 1, 2) FROM checkpoints") == [["e:"]]
    assert local.saver(encryption_keys=[K2]).get_tuple(conf).checkpoint["channel_values"] == {
        "x": 1}
    monkeypatch.setenv(ENV_KEYS, f"{b64[0]},not-a-key")
    with pytest.raises(ConfigError, match=f"{ENV_KEYS} key 2"):
        D1Saver.from_env(transport=local.transport)
    monkeypatch.delenv(ENV_KEYS)
    assert D1Saver.from_env(transport=local.transport).key_ids == []


# --- everything else keeps working ---------------------------------------------------------------


def test_delta_channel_agent_loop_with_keys(backend: Backend) -> None:
    """DeltaChannel histories (the walk in SQL, seeds and writes opened in Python) rebuild as
    on InMemorySaver, at the same request counts."""
    got = run_delta(backend.saver(encryption_keys=[K1]), backend.count)
    want = run_delta(InMemorySaver())
    check_delta_requests(got)
    want.pop("requests")
    check_delta(got, want)


def test_interrupt_and_resume_with_keys(backend: Backend) -> None:
    saver, runs = backend.saver(encryption_keys=[K1]), Counter()
    graph, config = approval_graph(saver, runs), cfg(f"ap-{uuid.uuid4().hex}")
    graph.invoke({"log": []}, config)
    from langgraph.types import Command

    out = approval_graph(backend.saver(encryption_keys=[K1]), runs).invoke(
        Command(resume="yes"), config)
    assert out["log"] == ["prepared", "approved:yes", "finished"]
    assert runs == {"prepare": 1, "approve": 2, "finish": 1}


def test_request_counts_are_unchanged_by_keys(local: Backend) -> None:
    saver = local.saver(encryption_keys=[K1])
    saver.setup()
    conf, n = local.count(lambda: put_one(saver, "rc", {"x": 1}, {"step": 0}))
    assert n == 1
    assert local.count(lambda: saver.put_writes(conf, [("x", 2), ("y", 3)], "t1"))[1] == 1
    assert local.count(lambda: saver.get_tuple(conf))[1] == 1
    assert local.count(lambda: list(saver.list(cfg("rc"))))[1] == 1
    assert local.count(lambda: saver.get_delta_channel_history(config=conf,
                                                               channels=["x"]))[1] == 1


def test_list_filters_on_sealed_metadata_with_an_exact_limit(local: Backend) -> None:
    """Filter keys the column does not hold are decided on the opened metadata, page after
    page, and `limit` stays exact."""
    saver = local.saver(encryption_keys=[K1], page_size=3)
    parent = None
    for i in range(12):
        conf = put_one(saver, "f", {"i": i}, {"step": i, "source": "loop",
                                             "team": "red" if i % 3 == 0 else "blue"},
                       parent)
        parent = conf["configurable"]["checkpoint_id"]
    red = [t.metadata["step"] for t in saver.list(cfg("f"), filter={"team": "red"})]
    assert red == [9, 6, 3, 0]
    assert [t.metadata["step"] for t in saver.list(cfg("f"), filter={"team": "red"},
                                                   limit=3)] == [9, 6, 3]
    assert [t.metadata["step"] for t in saver.list(None, filter={"step": 4})] == [4]
    assert list(saver.list(cfg("f"), filter={"team": "green"})) == []


def test_writes_over_d1s_parameter_cap_go_in_as_few_statements_as_fit(local: Backend) -> None:
    """A put_writes of 3.3 MB of sealed values (one row each) binds its rows as JSON
    parameters of at most 1.5 MB (D1 caps a bound string at 2 MB): 4 writes of 670 KB and a
    small one fill 2 statements, in one request, and read back."""
    saver = local.saver(encryption_keys=[K1])
    conf = put_one(saver, "big", {}, {"step": 0})
    writes = [*((f"x{i}", os.urandom(500_000)) for i in range(4)), ("y", b"small")]
    before = len(local.events)
    saver.put_writes(conf, writes, "task")
    assert [len(e.statements) for e in local.events[before:]] == [2]
    got = local.saver(encryption_keys=[K1]).get_tuple(conf)
    assert got is not None and got.pending_writes == [("task", c, v) for c, v in writes]


def test_a_special_write_over_the_row_limit_is_sealed_in_pieces(local: Backend) -> None:
    """A special write (an error, upserted by its index) of 1.5 MB is sealed over several
    rows and reads back whole."""
    saver = local.saver(encryption_keys=[K1])
    conf = put_one(saver, "big-error", {}, {"step": 0})
    big = os.urandom(1_500_000)
    saver.put_writes(conf, [("__error__", big)], "task")
    got = local.saver(encryption_keys=[K1]).get_tuple(conf)
    assert got is not None and got.pending_writes == [("task", "__error__", big)]


def test_copy_thread_re_seals_for_the_target(local: Backend) -> None:
    """The copies are bound to the new thread: each value is opened and sealed again, so a
    copy costs requests in proportion to the rows (one per page each way, pipelined)."""
    saver = local.saver(encryption_keys=[K1], page_size=2)
    parent = None
    for i in range(5):
        conf = put_one(saver, "src", {"i": i}, {"step": i, "who": "me"}, parent)
        saver.put_writes(conf, [("i", i), ("j", -i)], f"task-{i}")
        parent = conf["configurable"]["checkpoint_id"]
    saver.tag(conf, "kept")
    _, requests = local.count(lambda: saver.copy_thread("src", "dst"))
    # Per table, ceil((rows + 1) / page_size) reads, each after the first carrying the rows
    # of the page before, then the last page's rows (with the tags after the writes):
    # checkpoints 3 + 1, writes 6 + 1.
    assert requests == (3 + 1) + (6 + 1)
    src, dst = list(saver.list(cfg("src"))), list(saver.list(cfg("dst")))
    assert [(t.checkpoint["channel_values"], t.metadata, t.pending_writes) for t in dst] == [
        (t.checkpoint["channel_values"], t.metadata, t.pending_writes) for t in src]
    assert saver.tags(cfg("dst")) == {"kept": parent}
    sealed = dict(rows(saver, "SELECT thread_id, checkpoint FROM checkpoints "
                              "WHERE checkpoint_id = ?1", parent))
    assert sealed["src"] != sealed["dst"]  # re-sealed, not copied
    # Without keys it stays one statement batch.
    plain = local.saver()
    put_one(plain, "p-src", {"i": 1}, {"step": 0})
    assert local.count(lambda: plain.copy_thread("p-src", "p-dst"))[1] == 1


def test_copy_thread_with_keys_carries_values_in_pieces(local: Backend) -> None:
    """A value too big for one row (its pieces in chunks) is re-sealed for the target and
    stored whole there: the copy's pending write reads back as the source's."""
    saver = local.saver(encryption_keys=[K1])
    conf = put_one(saver, "big-src", {"i": 1}, {"step": 0})
    saver.put_writes(conf, [("blob", os.urandom(1_500_000))], "task")
    saver.copy_thread("big-src", "big-dst")
    (src,), (dst,) = list(saver.list(cfg("big-src"))), list(saver.list(cfg("big-dst")))
    assert dst.pending_writes == src.pending_writes and len(dst.pending_writes) == 1


def test_copy_thread_with_keys_onto_the_same_rows_replaces_their_pieces(local: Backend) -> None:
    """A keyed copy onto a thread already holding rows under the source's keys replaces
    them whole, pieces included: a checkpoint whose metadata was in pieces (written before
    keys were set) and a write in pieces. The target then reads as the source and holds the
    pieces of the source's values, none of the rows replaced."""
    keyed, plain = local.saver(encryption_keys=[K1]), local.saver()
    ck = empty_checkpoint()
    note = base64.b64encode(os.urandom(1_600_000)).decode()  # metadata over a row: in pieces
    old = plain.put(cfg("same-dst"), {**ck, "channel_values": {"i": 0}}, {"note": note}, {})
    keyed.put_writes(old, [("blob", os.urandom(1_500_000))], "task")
    new = keyed.put(cfg("same-src"), {**ck, "channel_values": {"i": 1}}, {"step": 1}, {})
    keyed.put_writes(new, [("blob", os.urandom(1_400_000))], "task")
    pieces = "SELECT owner, COUNT(*) FROM chunks WHERE thread_id = ?1 GROUP BY owner"
    assert [owner for owner, _ in rows(keyed, pieces, "same-dst")] == [":metadata", "task/0"]
    keyed.copy_thread("same-src", "same-dst")
    (src,), (dst,) = list(keyed.list(cfg("same-src"))), list(keyed.list(cfg("same-dst")))
    assert (dst.checkpoint, dst.metadata, dst.pending_writes) == (
        src.checkpoint, src.metadata, src.pending_writes)
    assert rows(keyed, pieces, "same-dst") == rows(keyed, pieces, "same-src")


@pytest.mark.parametrize("plain_part", ["checkpoint", "write"])
def test_copy_thread_with_keys_refuses_a_plaintext_row(local: Backend, plain_part: str) -> None:
    """A copy never launders what a read would refuse: a row written without keys (a
    checkpoint, or a write on a sealed checkpoint) fails the copy with PlaintextValueError,
    and the target gets none of that table's rows (each page of a table is its own batch)."""
    keyed, plain = local.saver(encryption_keys=[K1]), local.saver()
    conf = put_one(plain if plain_part == "checkpoint" else keyed, "p-src", {"i": 1}, {"step": 0})
    (plain if plain_part == "write" else keyed).put_writes(conf, [("i", 2)], "task")
    with pytest.raises(PlaintextValueError, match="not encrypted"):
        keyed.copy_thread("p-src", "p-dst")
    if plain_part == "checkpoint":
        assert rows(keyed, "SELECT COUNT(*) FROM checkpoints WHERE thread_id = 'p-dst'") == [[0]]
    assert rows(keyed, "SELECT COUNT(*) FROM writes WHERE thread_id = 'p-dst'") == [[0]]


def test_copy_thread_with_keys_carries_never_written_delta_channels(local: Backend) -> None:
    """A DeltaChannel never written (rows in delta_unwritten) is copied as without keys, so
    the copy's state and history read back as the source's."""
    saver = local.saver(encryption_keys=[K1])
    graph = chat_graph(saver, Counter())
    for turn in range(3):
        graph.invoke({"messages": [f"user{turn}"]}, cfg("chat-src"))
    unwritten = "SELECT COUNT(*) AS n FROM delta_unwritten WHERE thread_id = ?1"
    assert rows(saver, unwritten, "chat-src")[0][0] > 0
    saver.copy_thread("chat-src", "chat-dst")
    assert rows(saver, unwritten, "chat-dst") == rows(saver, unwritten, "chat-src")
    fresh = chat_graph(local.saver(encryption_keys=[K1]), Counter())
    assert [s.values for s in fresh.get_state_history(cfg("chat-dst"))] == [
        s.values for s in fresh.get_state_history(cfg("chat-src"))]


def test_copy_thread_with_keys_onto_a_compacted_thread_replaces_its_frozen_histories(
        local: Backend) -> None:
    """Copied onto a thread whose frozen DeltaChannel histories have the same keys (both
    compacted, under the same checkpoint ids, with other messages), the target's frozen rows
    are the source's, re-sealed: every history then reads as the source's, as without keys."""
    from tests.compaction import cfg as at, checkpoint_id
    from tests.compaction.test_shared_keys import delta_chain

    saver = local.saver(encryption_keys=[K1])
    for tid in ("f-src", "f-dst"):
        delta_chain(saver, tid, "", 5, (0,), label=tid)
    compact(saver, keep=2, threads=["f-src", "f-dst"])
    assert rows(saver, "SELECT COUNT(*) > 0 FROM delta_frozen WHERE thread_id = 'f-dst'") == [[1]]

    def histories(tid: str) -> list[Any]:
        return [saver.get_delta_channel_history(config=at(tid, "", checkpoint_id(i)),
                                                channels=["messages"]) for i in (3, 4)]

    want = histories("f-src")
    assert want != histories("f-dst")
    saver.copy_thread("f-src", "f-dst")
    assert histories("f-dst") == want


def test_compaction_with_keys_keeps_what_delta_channels_replay_from(local: Backend) -> None:
    """Retention reads the plaintext counters, so it plans as without keys; the kept
    checkpoints still rebuild their DeltaChannel from the kept ancestors."""
    deleted = []
    for keys in (None, [K1]):
        saver = local.saver(encryption_keys=keys)
        thread = f"compact-{uuid.uuid4().hex[:8]}"
        graph = build_graph(saver, variant="delta", turns=4, fanout=2, snapshot_frequency=3)
        final = graph.invoke(first_input(), cfg(thread))
        deleted.append(compact(saver, keep=2, threads=[thread]).checkpoints_deleted)
        reread = build_graph(local.saver(encryption_keys=keys), variant="delta", turns=4,
                             fanout=2, snapshot_frequency=3)
        assert reread.get_state(cfg(thread)).values == final
    assert deleted[0] == deleted[1] > 0


def test_the_demo_shows_one_run_with_a_key() -> None:
    from d1saver.demo import run

    lines: list[str] = []
    sealed = run(echo=lines.append)["sealed"]
    assert sealed["head"].startswith("e:")
    assert set(json.loads(sealed["metadata"])) == {"parents", "source", "step"}
    assert sealed["answer"].startswith("Booked")
    assert sealed["refusals"] == {"without a key": "StoredValueError",
                                  "with another key": "UnknownKeyError"}
    assert any(line.startswith("6. With encryption_keys") for line in lines)
