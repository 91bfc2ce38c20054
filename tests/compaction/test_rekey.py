"""Key rotation: `rekey` (compaction/rekey.py) and `d1saver rekey`. After a rotation new rows
use the new key and old ones stay readable; a rekey re-seals the old ones in resumable
batches under the compaction lease, after which the old key can be dropped."""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from langgraph.checkpoint.base import empty_checkpoint

from benchmarks.workload import build_graph, first_input
from d1saver.compaction import lease
from d1saver.compaction.rekey import rekey
from d1saver import (
    ConfigError,
    D1Saver,
    LeaseHeldError,
    PlaintextValueError,
    QueryError,
    Statement,
    UnknownKeyError,
)
from d1saver.storage.crypto import ENV_KEYS, key_id
from d1saver.sql.catalogue import SCHEMA_VERSION
from d1saver.local import LocalD1Transport
from tests.compaction import one_step_behind
from tests.compaction.test_cli import cli, env_for
from tests.conftest import Backend
from tests.support import Before, body_has

K1, K2, K3 = (bytes([n]) * 32 for n in (21, 22, 23))
OLD, NEW = key_id(K1).hex(), key_id(K2).hex()


def cfg(thread_id: str, checkpoint_id: str | None = None) -> dict:
    conf: dict[str, Any] = {"thread_id": thread_id, "checkpoint_ns": ""}
    if checkpoint_id:
        conf["checkpoint_id"] = checkpoint_id
    return {"configurable": conf}


def put_chain(saver: D1Saver, thread_id: str, n: int, big: bytes | None = None) -> dict:
    """n checkpoints with two writes each; `big` (over 2 MB) in the last one."""
    parent = None
    for i in range(n):
        ck = empty_checkpoint()
        ck["channel_values"] = {"i": i, **({"big": big} if big and i == n - 1 else {})}
        conf = saver.put(cfg(thread_id, parent), ck, {"step": i, "who": "me"}, {})
        saver.put_writes(conf, [("i", i), ("note", f"write {i}")], f"task-{i}")
        parent = conf["configurable"]["checkpoint_id"]
    return conf


def snapshot(saver: D1Saver) -> list[tuple]:
    """Everything a saver reads: every checkpoint, its metadata and its writes."""
    return [(t.config, t.checkpoint["channel_values"], t.metadata, t.pending_writes)
            for t in saver.list(None)]


def census(saver: D1Saver) -> dict[str, dict[str, int]]:
    return saver.key_census()


# --- rotation, rekey, drop the old key ----------------------------------------------------------


def test_rotation_then_rekey_then_the_old_key_can_go(local: Backend) -> None:
    old = local.saver(encryption_keys=[K1])
    put_chain(old, "a", 3, big=os.urandom(2_100_000))
    graph = build_graph(old, variant="delta", turns=2, fanout=2, snapshot_frequency=2)
    final = graph.invoke(first_input(), cfg("agent"))
    rotated = local.saver(encryption_keys=[K2, K1])  # newest first
    put_chain(rotated, "b", 2)  # new rows: the new key
    before = snapshot(rotated)
    counts = census(rotated)
    assert set(counts["checkpoints"]) == set(counts["writes"]) == {OLD, NEW}
    with pytest.raises(UnknownKeyError):
        list(local.saver(encryption_keys=[K2]).list(None))  # too early to drop K1

    summary = rekey(rotated)
    assert summary.before == counts
    assert summary.after == {table: {NEW: sum(per.values())} for table, per in counts.items()}
    assert summary.rewritten == counts["checkpoints"][OLD] + counts["writes"][OLD]
    assert summary.plaintext_left == 0

    dropped = local.saver(encryption_keys=[K2])  # the old key is gone
    assert snapshot(dropped) == before
    assert build_graph(dropped, variant="delta", turns=2, fanout=2,
                       snapshot_frequency=2).get_state(cfg("agent")).values == final
    with pytest.raises(UnknownKeyError):
        list(local.saver(encryption_keys=[K1]).list(None))
    again = rekey(dropped)  # nothing left to do: one read per table
    assert again.rewritten == 0 and again.pages == 2


def test_rekey_is_resumable(local: Backend) -> None:
    """Each page is one atomic batch: a run stopped midway leaves whole rows re-sealed, and
    the next run continues with the rest (it reads only rows not under the newest key)."""
    put_chain(local.saver(encryption_keys=[K1]), "r", 9)
    rotated = local.saver(encryption_keys=[K2, K1])

    class Stop(Exception):
        pass

    def stop_after_two_pages(table: str, counts: Any) -> None:
        if counts.pages == 2:
            raise Stop

    with pytest.raises(Stop):
        rekey(rotated, batch_rows=2, progress=stop_after_two_pages)
    assert census(rotated)["checkpoints"] == {NEW: 4, OLD: 5}
    assert census(rotated)["writes"] == {OLD: 18}
    lease.break_lease(rotated)  # the stopped run could not release it
    summary = rekey(rotated, batch_rows=2)
    assert summary.tables["checkpoints"]["rewritten"] == 5
    assert summary.tables["writes"]["rewritten"] == 18
    assert census(rotated)["checkpoints"] == {NEW: 9}


def test_rekey_requests(local: Backend) -> None:
    """Per table, ceil((rows + 1) / batch) page reads, each after the first riding with the
    rows of the page before, and one request for the last page's rows unless it is empty;
    then a census and the lease, before and after."""
    put_chain(local.saver(encryption_keys=[K1]), "q", 10)
    rotated = local.saver(encryption_keys=[K2, K1])
    summary = rekey(rotated, batch_rows=4)
    # checkpoints, 10 rows: 3 reads + 1; writes, 20 rows: 6 reads (the last one empty)
    assert summary.requests == 2 + (3 + 1) + 6 + 2
    assert summary.rewritten == 30


def test_dry_run_counts_and_changes_nothing(local: Backend) -> None:
    put_chain(local.saver(encryption_keys=[K1]), "d", 2)
    rotated = local.saver(encryption_keys=[K2, K1])
    (before,) = rotated.client.execute([Statement("SELECT checkpoint FROM checkpoints")])
    summary = rekey(rotated, dry_run=True)
    assert summary.to_rewrite == 2 + 4  # checkpoints (their metadata sealed in), writes
    assert summary.after is None and summary.rewritten == 0
    (after,) = rotated.client.execute([Statement("SELECT checkpoint FROM checkpoints")])
    assert after.rows == before.rows


def test_a_dry_run_migrates_nothing(local: Backend) -> None:
    """A schema older than this d1saver's is refused by a dry run, not migrated (a run that
    is not dry migrates it); a database with none stays without one and counts nothing."""
    rotated = local.saver(encryption_keys=[K2, K1])
    assert rekey(rotated, dry_run=True).to_rewrite == 0
    (tables,) = rotated.client.execute([Statement("SELECT name FROM sqlite_master")])
    assert tables.rows == []
    latest = Statement("SELECT MAX(version) AS v FROM d1saver_schema")
    with local.saver(auto_setup=False) as raw:
        one_step_behind(raw)
    put_chain(local.saver(encryption_keys=[K1], auto_setup=False), "m", 1)
    rotated = local.saver(encryption_keys=[K2, K1])
    with pytest.raises(ConfigError, match=rf"v{SCHEMA_VERSION - 1}\).*without --dry-run"):
        rekey(rotated, dry_run=True)
    assert rotated.client.execute([latest])[0].rows == [[SCHEMA_VERSION - 1]]
    assert rekey(rotated).rewritten == 3
    assert rotated.client.execute([latest])[0].rows == [[SCHEMA_VERSION]]


def test_plaintext_rows_are_sealed_only_when_asked(local: Backend) -> None:
    """Rows written before keys were set are refused by a saver with keys; rekey leaves them
    (sealing trusts them) unless --seal-plaintext."""
    put_chain(local.saver(), "p", 2)
    keyed = local.saver(encryption_keys=[K1])
    with pytest.raises(PlaintextValueError):
        keyed.get_tuple(cfg("p"))
    kept = rekey(keyed)
    assert kept.rewritten == 0 and kept.plaintext_left == 2 + 2  # rows: each call's writes packed
    assert census(keyed)["checkpoints"] == {"plaintext": 2}
    sealed = rekey(keyed, seal_plaintext=True)
    assert sealed.rewritten == 6 and sealed.plaintext_left == 0
    assert census(keyed) == {"checkpoints": {OLD: 2}, "writes": {OLD: 4}}
    tup = keyed.get_tuple(cfg("p"))
    assert tup.checkpoint["channel_values"] == {"i": 1}
    assert tup.metadata == {"step": 1, "who": "me"}


def test_seal_plaintext_leaves_a_null_write_value_and_seals_the_rest(local: Backend) -> None:
    """A write row whose value is NULL (nothing d1saver writes: planted, or damaged; here the
    row packing task-0's writes) has nothing to seal: --seal-plaintext leaves it as it is and
    seals every other row; a keyed read of its checkpoint still refuses it, the other
    checkpoint reads."""
    plain = local.saver()
    put_chain(plain, "null", 2)
    plain.execute([Statement("UPDATE writes SET value = NULL WHERE thread_id = 'null' "
                             "AND task_id = 'task-0' AND idx = 0", ())])
    keyed = local.saver(encryption_keys=[K1])
    sealed = rekey(keyed, seal_plaintext=True)
    assert (sealed.rewritten_rows, sealed.rewritten) == (3, 4)  # 2 checkpoints, task-1's pack
    assert sealed.plaintext_left == 0 and sealed.skipped == 0
    assert census(keyed) == {"checkpoints": {OLD: 2}, "writes": {OLD: 2}}
    tup = keyed.get_tuple(cfg("null"))
    assert tup.pending_writes == [("task-1", "i", 1), ("task-1", "note", "write 1")]
    with pytest.raises(PlaintextValueError):
        keyed.get_tuple(tup.parent_config)


def test_sealing_plaintext_packs_of_writes_stored_by_content(local: Backend) -> None:
    """One put_writes call's writes are stored packed in one row; a long list among them is
    stored by content (a tree of chunks). --seal-plaintext seals the pack with every value
    whole: a saver with the key reads the same pending writes, and the chunks the pack
    reached, reached by no row any more, go in the same batch."""
    plain = local.saver()
    conf = plain.put(cfg("pc"), empty_checkpoint(), {"step": 0}, {})
    big = [f"{j}: " + "lorem ipsum dolor sit amet " * 12 for j in range(40)]
    plain.put_writes(conf, [("messages", big), ("note", "small")], "task-0")
    before = plain.get_tuple(cfg("pc")).pending_writes

    def chunks() -> int:
        (res,) = plain.execute([Statement("SELECT COUNT(*) FROM d1saver_chunks")])
        return int(res.rows[0][0])

    assert chunks() > 0
    keyed = local.saver(encryption_keys=[K1])
    assert rekey(keyed, seal_plaintext=True).plaintext_left == 0
    assert keyed.get_tuple(cfg("pc")).pending_writes == before
    assert chunks() == 0


def test_sealing_moves_metadata_out_of_its_pieces(local: Backend) -> None:
    """A plaintext checkpoint whose metadata is in pieces (over 64 KB of keys: ':metadata'
    chunks) is sealed with its metadata in the value: the metadata pieces go, and the
    checkpoint reads back with all of its metadata."""
    note = base64.b64encode(os.urandom(1_600_000)).decode()
    plain, cp = local.saver(), empty_checkpoint()
    plain.put(cfg("m"), cp, {"note": note, "step": 0}, {})

    def owners() -> list[list[Any]]:
        (res,) = plain.execute([Statement(
            "SELECT owner, COUNT(*) FROM chunks WHERE thread_id = 'm' GROUP BY owner")])
        return res.rows

    assert owners() == [[":metadata", 2]]
    keyed = local.saver(encryption_keys=[K1])
    assert rekey(keyed, seal_plaintext=True).plaintext_left == 0
    assert [owner for owner, _ in owners()] == [""]
    tup = local.saver(encryption_keys=[K1]).get_tuple(cfg("m"))
    assert tup is not None and tup.metadata == {"note": note, "step": 0}


def test_rekey_drops_pieces_no_value_reaches(local: Backend) -> None:
    """Pieces left beside values stored whole (no piece 0: no value reaches them; planted,
    or left by a bug) do not stop a rekey: the checkpoint and the write are re-sealed, the
    stray pieces dropped with their rows' old pieces, and everything reads as before."""
    keyed = local.saver(encryption_keys=[K1])
    conf = put_chain(keyed, "stray", 1)
    stray = ("INSERT INTO chunks (thread_id, checkpoint_ns, checkpoint_id, owner, seq, data)"
             " VALUES ('stray', '', ?1, ?2, 1, 'stray')")
    keyed.execute([Statement(stray, [conf["configurable"]["checkpoint_id"], owner])
                   for owner in ("", "task-0/0")])
    before = snapshot(keyed)
    summary = rekey(local.saver(encryption_keys=[K2, K1]))
    assert summary.after == {"checkpoints": {NEW: 1}, "writes": {NEW: 2}}
    (res,) = keyed.execute([Statement("SELECT COUNT(*) FROM chunks")])
    assert res.rows == [[0]]
    assert snapshot(local.saver(encryption_keys=[K2])) == before


def test_sealing_a_pack_stores_a_big_write_in_pieces(local: Backend) -> None:
    """A plaintext pack of a put_writes call (its 1.5 MB value stored by content) is sealed as
    one row per write, the big one sealed whole over several rows: both read back."""
    plain, cp = local.saver(), empty_checkpoint()
    conf = plain.put(cfg("pack"), cp, {"step": 0}, {})
    big = os.urandom(1_500_000)
    plain.put_writes(conf, [("a", big), ("b", 1)], "task")
    keyed = local.saver(encryption_keys=[K1])
    assert rekey(keyed, seal_plaintext=True).plaintext_left == 0
    (res,) = plain.execute([Statement(
        "SELECT channel, substr(value, 1, 2) FROM writes WHERE thread_id = 'pack' ORDER BY idx")])
    assert res.rows == [["a", "c:"], ["b", "e:"]]
    tup = local.saver(encryption_keys=[K1]).get_tuple(conf)
    assert tup is not None and tup.pending_writes == [("task", "a", big), ("task", "b", 1)]


def test_a_row_under_a_key_not_given_stops_the_rekey_by_name(local: Backend) -> None:
    put_chain(local.saver(encryption_keys=[K3]), "k3", 1)
    with pytest.raises(UnknownKeyError) as info:
        rekey(local.saver(encryption_keys=[K2, K1]))
    assert info.value.thread_id == "k3" and key_id(K3).hex() in str(info.value)


def test_rekey_needs_keys_and_the_lease(local: Backend) -> None:
    with pytest.raises(ConfigError, match=ENV_KEYS):
        rekey(local.saver())
    saver = local.saver(encryption_keys=[K1])
    saver.setup()
    held = lease.acquire(saver, ttl=60)  # a compaction run
    with pytest.raises(LeaseHeldError):
        rekey(saver)
    lease.release(saver, held)


def test_a_job_refused_while_a_rekey_runs_is_told_a_rekey_holds_the_lease(local: Backend) -> None:
    put_chain(local.saver(encryption_keys=[K1]), "busy", 2)
    saver = local.saver(encryption_keys=[K2, K1])
    refused: list[str] = []

    def compact_meanwhile(table: str, counts: Any) -> None:
        with pytest.raises(LeaseHeldError) as info:
            lease.acquire(saver, ttl=60)
        refused.append(str(info.value))

    rekey(saver, progress=compact_meanwhile)
    assert refused and all(m.startswith("another rekey run holds the lease (rekey:")
                           for m in refused)


class RacingTransport(LocalD1Transport):
    """Before the first rekey batch of `table` reaches D1 (its guards read that table),
    another writer changes a row (`race`): by default, replaces a special write."""

    def __init__(self, engine: Any, race: Callable[[], None], times: int = 1,
                 table: str = "writes") -> None:
        super().__init__(engine)
        self.race, self.raced, self.times = race, 0, times
        self.marker = f"FROM {table} WHERE".encode()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        body = request.read()
        if b"head_moved" in body and self.marker in body and self.raced < self.times:
            self.raced += 1
            self.race()
        return super().handle_request(request)


def test_a_row_changed_during_a_rekey_is_not_overwritten(local: Backend) -> None:
    """The guard of each row fails the batch if the row moved on since it was read; the page
    is read again, so the newer value survives, re-sealed."""
    conf = put_chain(local.saver(encryption_keys=[K1]), "race", 1)
    writer = local.saver(encryption_keys=[K2, K1])
    writer.put_writes(conf, [("__error__", "first")], "task-x")  # a special write: upserted
    old_only = local.saver(encryption_keys=[K1])
    old_only.put_writes(conf, [("__error__", "older key")], "task-x")

    def race() -> None:
        writer.put_writes(conf, [("__error__", "newest")], "task-x")

    racing = RacingTransport(local.engine, race)
    rotated = D1Saver(account_id=local.account_id, database_id=local.database_id,
                      api_token=local.api_token, api_base_url=local.base_url,
                      transport=racing, encryption_keys=[K2, K1])
    summary = rekey(rotated)
    assert racing.raced == 1
    assert summary.after == {"checkpoints": {NEW: 1}, "writes": {NEW: 3}}
    errors = [w for w in local.saver(encryption_keys=[K2]).get_tuple(conf).pending_writes
              if w[1] == "__error__"]
    assert errors == [("task-x", "__error__", "newest")]


def test_a_rekey_counts_the_requests_a_race_costs(local: Backend) -> None:
    """The requests a table's rekey reports are those it sent: a batch failed by a row that
    moved on, and the page read again, count as well."""
    conf = put_chain(local.saver(encryption_keys=[K1]), "race", 1)
    writer = local.saver(encryption_keys=[K2, K1])
    local.saver(encryption_keys=[K1]).put_writes(conf, [("__error__", "older key")], "task-x")
    racing = RacingTransport(local.engine, lambda: writer.put_writes(
        conf, [("__error__", "newest")], "task-x"))
    rotated = D1Saver(account_id=local.account_id, database_id=local.database_id,
                      api_token=local.api_token, api_base_url=local.base_url,
                      transport=racing, encryption_keys=[K2, K1])
    sent = rotated.client.requests
    counts = rotated.rekey("writes")
    assert racing.raced == 1 and counts.rewritten == 2
    assert counts.requests == rotated.client.requests - sent == 4  # read, fail, read again, write


def test_a_write_changed_during_a_rekey_is_not_overwritten_beside_its_twins(local: Backend
                                                                            ) -> None:
    """`rekey --seal-plaintext` while another writer changes a plaintext write: rows holding
    the very value read (another task's write at that index, the same task's in another
    namespace under the same checkpoint id) do not stand in for it; the page is read again
    and the newer value sealed."""
    plain, ck = local.saver(), empty_checkpoint()
    confs = {ns: plain.put({"configurable": {"thread_id": "twins", "checkpoint_ns": ns}}, ck,
                           {"step": 0}, {}) for ns in ("", "b")}
    for ns, task in (("", "a"), ("", "b"), ("b", "a")):
        plain.put_writes(confs[ns], [("__error__", "boom")], task)
    plain.put_writes(confs[""], [("__error__", "later")], "c")

    def race() -> None:  # task a's error is now the value task c's holds
        plain.execute([Statement(
            "UPDATE writes SET value = (SELECT value FROM writes WHERE thread_id = 'twins'"
            " AND task_id = 'c') WHERE thread_id = 'twins' AND checkpoint_ns = ''"
            " AND task_id = 'a'")])

    racing = RacingTransport(local.engine, race)
    keyed = D1Saver(account_id=local.account_id, database_id=local.database_id,
                    api_token=local.api_token, api_base_url=local.base_url,
                    transport=racing, encryption_keys=[K1])
    for table in ("checkpoints", "writes"):
        keyed.rekey(table, seal_plaintext=True)
    assert racing.raced == 1
    reader = local.saver(encryption_keys=[K1])
    assert sorted(reader.get_tuple(confs[""]).pending_writes) == [
        ("a", "__error__", "later"), ("b", "__error__", "boom"), ("c", "__error__", "later")]
    assert reader.get_tuple(confs["b"]).pending_writes == [("a", "__error__", "boom")]


def test_rekey_rewrites_only_the_row_it_read(local: Backend) -> None:
    """A task id written at two checkpoints of a thread, under the old key at the first and
    the new one at the second: the rekey re-seals the first write only, and each checkpoint
    reads its own write."""
    old = local.saver(encryption_keys=[K1])
    first = old.put(cfg("reused"), empty_checkpoint(), {"step": 0}, {})
    old.put_writes(first, [("x", "first")], "task")
    rotated = local.saver(encryption_keys=[K2, K1])
    second = rotated.put(first, empty_checkpoint(), {"step": 1}, {})
    rotated.put_writes(second, [("x", "second")], "task")
    assert rekey(rotated).after == {"checkpoints": {NEW: 2}, "writes": {NEW: 2}}
    reader = local.saver(encryption_keys=[K2])
    assert [reader.get_tuple(c).pending_writes for c in (first, second)] == [
        [("task", "x", "first")], [("task", "x", "second")]]


def test_a_row_that_keeps_changing_stops_the_rekey_after_three_retries(local: Backend) -> None:
    """A row changed before every rekey batch of it: the page is read again three times, then
    the rekey stops with D1's head_moved error (the run can be resumed), never loops."""
    conf = put_chain(local.saver(encryption_keys=[K1]), "busy-row", 1)
    writer = local.saver(encryption_keys=[K2, K1])
    writer.put_writes(conf, [("__error__", "first")], "task-x")
    old_only = local.saver(encryption_keys=[K1])
    old_only.put_writes(conf, [("__error__", "older key")], "task-x")

    def race() -> None:
        old_only.put_writes(conf, [("__error__", f"older key {racing.raced}")], "task-x")

    racing = RacingTransport(local.engine, race, times=10)
    rotated = D1Saver(account_id=local.account_id, database_id=local.database_id,
                      api_token=local.api_token, api_base_url=local.base_url,
                      transport=racing, encryption_keys=[K2, K1])
    with pytest.raises(QueryError, match="head_moved"):
        rotated.rekey("writes")
    assert racing.raced == 1 + 3


# --- the command ----------------------------------------------------------------------------------


@pytest.fixture
def server(serve: Callable[..., str]) -> str:
    return serve()


def keyed_env(server: str, *keys: bytes) -> dict[str, str]:
    return {**env_for(server), ENV_KEYS: ",".join(base64.b64encode(k).decode() for k in keys)}


def saver_for(env: dict[str, str], *keys: bytes) -> D1Saver:
    return D1Saver(account_id=env["CLOUDFLARE_ACCOUNT_ID"], database_id=env["D1_DATABASE_ID"],
                   api_token=env["CLOUDFLARE_API_TOKEN"], api_base_url=env["D1_API_BASE_URL"],
                   encryption_keys=list(keys) or None)


def test_rekey_command_json(server: str) -> None:
    env = keyed_env(server, K2, K1)
    put_chain(saver_for(env, K1), "c", 2)
    dry = cli(env, "rekey", "--dry-run", "--json")
    assert dry.exit_code == 0, dry.stderr
    plan = json.loads(dry.stdout)
    assert plan["dry_run"] and plan["to_rewrite"] == 6 and plan["after"] is None
    assert plan["keys"] == [NEW, OLD]
    done = cli(env, "rekey", "--json", "--batch-rows", "1")
    assert done.exit_code == 0, done.stderr
    figures = json.loads(done.stdout)
    assert figures["before"] == {"checkpoints": {OLD: 2}, "writes": {OLD: 4}}
    assert figures["after"] == {"checkpoints": {NEW: 2}, "writes": {NEW: 4}}
    assert figures["rewritten"] == 6
    assert saver_for(env, K2).get_tuple(cfg("c")).checkpoint["channel_values"] == {"i": 1}


def test_rekey_command_human_output(server: str) -> None:
    env = keyed_env(server, K2, K1)
    put_chain(saver_for(env, K1), "h", 1)
    result = cli(env, "rekey")
    assert result.exit_code == 0, result.stderr
    assert f"before: checkpoints {OLD}: 1" in result.stdout
    assert f"after:  checkpoints {NEW}: 1" in result.stdout
    assert "of 3 rows: 3 re-sealed" in result.stdout  # a checkpoint and its two writes
    for key in (K1, K2):  # no key material in any output
        assert base64.b64encode(key).decode() not in result.stdout + result.stderr


@pytest.mark.parametrize("value, code", [(None, 2), ("bm90IGEga2V5", 2)])
def test_rekey_command_without_usable_keys_exits_2(server: str, value: str | None,
                                                   code: int) -> None:
    env = {**env_for(server), ENV_KEYS: value}
    result = cli(env, "rekey")
    assert result.exit_code == code and result.stderr.startswith("error:")
    assert ENV_KEYS in result.stderr


def test_rekey_command_under_an_unknown_key_exits_1(server: str) -> None:
    env = keyed_env(server, K2)
    put_chain(saver_for(env, K1), "u", 1)
    result = cli(env, "rekey")
    assert result.exit_code == 1
    assert OLD in result.stderr and "'u'" in result.stderr


def test_rekey_command_lease_held_exits_3(server: str) -> None:
    env = keyed_env(server, K2, K1)
    saver = saver_for(env, K1)
    saver.setup()
    lease.acquire(saver, ttl=60)
    assert cli(env, "rekey").exit_code == 3
    assert cli(env, "rekey", "--break-lease").exit_code == 0


@pytest.mark.realengine
def test_rotation_and_rekey_on_the_real_engine(wrangler_d1: Any) -> None:
    """The rekey statements (keyset pages, guards, chunks) on Cloudflare's engine. A database
    of its own (the gateway's last binding; no other saver test writes there), emptied first,
    since a rekey covers the whole database."""
    def make(keys: list[bytes]) -> D1Saver:
        return D1Saver(account_id=wrangler_d1.account_id, api_token=wrangler_d1.api_token,
                       database_id=list(wrangler_d1.databases.values())[-1],
                       api_base_url=wrangler_d1.base_url, encryption_keys=keys)

    old = make([K1])
    old.setup()
    old.client.execute([Statement(f"DELETE FROM {table}")
                        for table in ("writes", "chunks", "tags", "checkpoints", "leases")])
    put_chain(old, "real-a", 3, big=os.urandom(2_100_000))
    rotated = make([K2, K1])
    put_chain(rotated, "real-b", 1)
    before = snapshot(rotated)
    summary = rekey(rotated, batch_rows=2)
    assert summary.after == {"checkpoints": {NEW: 4}, "writes": {NEW: 8}}
    assert summary.rewritten == 3 + 6
    assert snapshot(make([K2])) == before


@pytest.mark.realengine
def test_seal_plaintext_of_content_on_the_real_engine(wrangler_d1: Any) -> None:
    """`rekey --seal-plaintext` of values stored by content (checkpoints, writes, packs and
    frozen DeltaChannel values) on Cloudflare's engine: the pages read with the chunks their
    manifests reach, each value sealed whole, the chunks collected in the same batches. The
    database of test_rotation_and_rekey_on_the_real_engine, emptied first."""
    from d1saver.compaction.fleet import check_chunks
    from tests.reliability.harness import observe
    from tests.saver.test_format_bindings import stored_by_content, write_content

    def make(keys: list[bytes] | None) -> D1Saver:
        return D1Saver(account_id=wrangler_d1.account_id, api_token=wrangler_d1.api_token,
                       database_id=list(wrangler_d1.databases.values())[-1],
                       api_base_url=wrangler_d1.base_url, encryption_keys=keys)

    plain = make(None)
    plain.setup()
    plain.client.execute([Statement(f"DELETE FROM {table}") for table in (
        "writes", "chunks", "d1saver_chunks", "delta_frozen", "tags", "checkpoints", "leases")])
    write_content(plain, "real-frozen", "real-content")
    before = observe(plain, ["real-frozen", "real-content"])
    keyed = make([K1])
    summary = rekey(keyed, seal_plaintext=True, batch_rows=4)
    assert summary.plaintext_left == 0
    assert observe(keyed, ["real-frozen", "real-content"]) == before
    assert stored_by_content(keyed) == 0 and check_chunks(keyed) == []


def test_counts_add_up_and_the_dry_run_names_the_plaintext(local: Backend,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    """Rows looked at = re-sealed + already current + plaintext left (+ skipped); a dry run
    over plaintext rows says how many there are and what --seal-plaintext would do."""
    put_chain(local.saver(), "plain", 2)  # 2 checkpoints, 4 writes, before any key
    put_chain(local.saver(encryption_keys=[K1]), "old", 1)  # under K1
    put_chain(local.saver(encryption_keys=[K2]), "new", 1)  # already under K2
    rotated = local.saver(encryption_keys=[K2, K1])
    dry = rekey(rotated, dry_run=True)
    assert (dry.looked_at, dry.already_current, dry.plaintext) == (10, 3, 4)  # rows: writes packed
    assert dry.to_rewrite == 3
    assert dry.looked_at == dry.to_rewrite + dry.already_current + dry.plaintext
    from d1saver.cli.maintenance import _print_rekey

    _print_rekey(dry)
    text = capsys.readouterr().out
    assert "4 plaintext rows would be left" in text and "--seal-plaintext" in text
    done = rekey(rotated)
    assert done.looked_at == (done.rewritten_rows + done.already_current + done.plaintext_left
                              + done.skipped)
    assert (done.rewritten_rows, done.already_current, done.plaintext_left, done.skipped) == (3, 3, 4, 0)


# --- memory: D1Store's items and D1Cache's entries (issue 30, fact 3) ---------------------------


def _memory(local: Backend, cls: Any, keys: list[bytes] | None) -> Any:
    return cls(account_id=local.account_id, database_id=local.database_id,
               api_token=local.api_token, api_base_url=local.base_url,
               transport=local.transport, encryption_keys=keys)


def _fill_memory(local: Backend, keys: list[bytes] | None) -> None:
    from d1saver import D1Cache, D1Store
    with _memory(local, D1Store, keys) as store:
        for i in range(5):
            store.put(("users", f"u{i}"), "profile", {"name": f"user {i}", "n": i})
        store.put(("users", "big"), "blob", {"text": "x" * 300_000 + os.urandom(8).hex()})
    with _memory(local, D1Cache, keys) as cache:
        cache.set({(("__pregel_ns_writes", "node"), f"k{i}"): ({"out": i}, None)
                   for i in range(3)})


def _read_memory(local: Backend, keys: list[bytes] | None) -> tuple[Any, ...]:
    from d1saver import D1Cache, D1Store
    with _memory(local, D1Store, keys) as store, _memory(local, D1Cache, keys) as cache:
        items = sorted((i.namespace, i.key, json.dumps(i.value)) for i in store.search(
            ("users",), limit=100))
        one = store.get(("users", "u3"), "profile")
        entries = cache.get([(("__pregel_ns_writes", "node"), f"k{i}") for i in range(3)])
    return items, None if one is None else one.value, entries


def test_rekey_reseals_memory_so_the_old_key_can_go(local: Backend) -> None:
    _fill_memory(local, [K1])
    rotated = local.saver(encryption_keys=[K2, K1])
    before = _read_memory(local, [K2, K1])
    counts = census(rotated)
    assert counts["store_items"] == {OLD: 6} and counts["cache_entries"] == {OLD: 3}

    dry = rekey(rotated, dry_run=True)
    assert dry.to_rewrite == 6 + 3 and dry.before == counts and dry.looked_at == 9

    summary = rekey(rotated)
    assert summary.tables["store_items"]["rewritten"] == 6
    assert summary.tables["cache_entries"]["rewritten"] == 3
    assert summary.after == {"checkpoints": {}, "writes": {}, "store_items": {NEW: 6},
                             "cache_entries": {NEW: 3}}
    assert summary.rewritten == 9 and summary.rewritten_rows == 9 and summary.skipped == 0
    assert _read_memory(local, [K2]) == before  # the old key is gone: everything reads
    with pytest.raises(UnknownKeyError):
        _read_memory(local, [K1])


def test_rekey_seals_plaintext_memory_only_when_asked(local: Backend) -> None:
    """In pages of two rows, each plaintext row left is counted once (a page starts after the
    last row of the one before)."""
    _fill_memory(local, None)
    plain = _read_memory(local, None)
    keyed = local.saver(encryption_keys=[K1])
    with pytest.raises(PlaintextValueError):
        _read_memory(local, [K1])
    kept = rekey(keyed, batch_rows=2)
    assert kept.rewritten == 0 and kept.plaintext_left == 6 + 3
    assert (kept.tables["store_items"], kept.tables["cache_entries"]) == (
        {"rewritten": 0, "plaintext_left": 6, "pages": 4},  # 2 + 2 + 2 + 0 rows
        {"rewritten": 0, "plaintext_left": 3, "pages": 2})  # 2 + 1
    sealed = rekey(keyed, seal_plaintext=True)
    assert sealed.rewritten == 9 and sealed.plaintext_left == 0
    assert census(keyed)["store_items"] == {OLD: 6}
    assert _read_memory(local, [K1]) == plain


def test_rekey_pages_through_the_keys_of_one_namespace(local: Backend) -> None:
    """Five items of one namespace, in pages of two: each is re-sealed once (a page starts
    after the last key of the one before, whichever namespace holds them), and everything
    reads back under the new key alone."""
    from d1saver import D1Store
    with _memory(local, D1Store, [K1]) as store:
        for i in range(5):
            store.put(("team",), f"k{i}", {"n": i})
    rotated = local.saver(encryption_keys=[K2, K1])
    summary = rekey(rotated, batch_rows=2)
    assert summary.tables["store_items"] == {"rewritten": 5, "plaintext_left": 0,
                                              "pages": 3}  # 2 + 2 + 1 rows
    assert census(rotated)["store_items"] == {NEW: 5}
    with _memory(local, D1Store, [K2]) as store:
        assert [store.get(("team",), f"k{i}").value for i in range(5)] == [  # type: ignore[union-attr]
            {"n": i} for i in range(5)]


def test_rekey_seals_equal_plaintext_values_each_for_its_own_item(local: Backend) -> None:
    """Items (cache entries) holding the same plaintext under the same key in two namespaces,
    or under two keys of one namespace, are each sealed for their own (namespace, key): every
    one reads back under the key."""
    from d1saver import D1Cache, D1Store
    same = {"text": "the same value"}
    items = [(("a",), "k"), (("b",), "k"), (("a",), "j")]
    entries = [(("n", "a"), "k"), (("n", "b"), "k"), (("n", "a"), "j")]
    with _memory(local, D1Store, None) as store:
        for ns, key in items:
            store.put(ns, key, same)
    with _memory(local, D1Cache, None) as cache:
        cache.set({where: (same, None) for where in entries})
    keyed = local.saver(encryption_keys=[K1])
    summary = rekey(keyed, seal_plaintext=True)
    assert summary.rewritten == 6 and summary.plaintext_left == 0
    with _memory(local, D1Store, [K1]) as store, _memory(local, D1Cache, [K1]) as cache:
        assert [store.get(ns, key).value for ns, key in items] == [same] * 3
        assert cache.get(entries) == {where: same for where in entries}


def test_rekey_of_memory_keeps_a_live_writers_newer_value(local: Backend) -> None:
    """A value rewritten between the page's read and its rewrite stays the writer's."""
    from d1saver import D1Store
    _fill_memory(local, [K1])
    rotated = local.saver(encryption_keys=[K2, K1])
    writer = _memory(local, D1Store, [K2, K1])
    racing = local.saver(encryption_keys=[K2, K1], transport=Before(
        local.transport, body_has(b"UPDATE store_items SET value"),
        lambda: writer.put(("users", "u1"), "profile", {"name": "renamed"})))
    summary = rekey(racing)
    assert summary.skipped == 0  # the writer's value is under the newest key already
    assert writer.get(("users", "u1"), "profile").value == {"name": "renamed"}  # type: ignore[union-attr]
    assert census(rotated)["store_items"] == {NEW: 6}
