"""The gateway Worker's Cron Trigger, run by `wrangler dev --test-scheduled` on the real D1
engine: it leaves every table as `d1saver compact` with the same settings leaves an identical
copy, shares the CLI's lease, goes on over several runs within its budget, finishes a run
killed midway, refuses bad settings, and records and logs each run.

Each test seeds databases through the gateway with D1Saver, copies them row for row into
another database of the same gateway, compacts one with the Cron Trigger and the other with
the CLI, and compares them.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

from d1saver.compaction import compact, lease
from d1saver import D1Saver, LeaseHeldError, Statement, admin
from d1saver.cli.commands import app
from tests.compaction import LONG_AGO, put_chain, put_checkpoint
from tests.compaction.test_job import one_step_graph, parent_with_subgraph, tagged_delta_thread
from tests.realengine import RealD1, gateway

pytestmark = pytest.mark.realengine

TOKEN = "scheduled-test-token"
KEY = bytes(range(32))
CRON = "17 3 * * *"
# Tables only the scheduled runs write (their records, the cursor), the lease (empty after
# either run) and the idempotency records (random op ids): left out of the comparison.
NOT_COMPARED = {"d1saver_ops", "leases", "d1saver_compaction_runs", "d1saver_compaction_cursor",
                "d1saver_schema"}
# Copied in this order: chunks before the rows over them (level order), checkpoints before
# the rows their triggers clear.
COPY_ORDER = [("d1saver_chunks", "level, thread_id, id"), ("checkpoints", "1, 2, 3"),
              ("writes", "1, 2, 3, 4, 6"), ("chunks", "1, 2, 3, 4, 5"), ("tags", "1, 2, 4"),
              ("delta_unwritten", "1, 2, 3"), ("delta_frozen", "1, 2, 3, 4, 5, 6, 7, 8"),
              ("d1saver_staged", "1"), ("d1saver_gc_pending", "1"), ("store_items", "1, 2"),
              ("store_vectors", "1, 2, 3"), ("cache_entries", "1, 2")]


@contextmanager
def scheduled_gateway(settings: dict[str, str], **kw: Any) -> Iterator[RealD1]:
    with gateway({"API_TOKEN": TOKEN, **settings}, extra_args=("--test-scheduled",),
                 log_level="log", **kw) as g:
        yield g


def saver(g: RealD1, binding: str, **kw: Any) -> D1Saver:
    return D1Saver(account_id=g.account_id, database_id=g.databases[binding], api_token=TOKEN,
                   api_base_url=g.base_url, **kw)


def runs_logged(g: RealD1) -> list[dict[str, Any]]:
    """The Worker's JSON log lines, in order."""
    assert g.log_path is not None
    text, out, at = g.log_path.read_text(errors="replace"), [], 0
    decoder = json.JSONDecoder()
    while (at := text.find('{"event":"d1saver.compaction"', at)) >= 0:
        line, end = decoder.raw_decode(text, at)
        out.append(line)
        at = end
    return out


def tick(g: RealD1, timeout: float = 120) -> dict[str, Any]:
    """One scheduled run (as the Cron Trigger fires it); returns its log line."""
    before = len(runs_logged(g))
    r = httpx.get(f"{g.root_url}/__scheduled", params={"cron": CRON}, timeout=timeout)
    assert r.status_code == 200, r.text
    deadline = time.monotonic() + 10
    while len(logged := runs_logged(g)) == before:
        assert time.monotonic() < deadline, "the run logged no line"
        time.sleep(0.1)
    return logged[-1]


def query(s: D1Saver, sql: str, *params: Any) -> list[dict[str, Any]]:
    (res,) = s.client.execute([Statement(sql, params)])
    return res.dicts()


def runs(s: D1Saver) -> list[dict[str, Any]]:
    (res,) = s.execute([admin.compaction_runs(100)])
    return res.dicts()


# --- seeding, copying, comparing -----------------------------------------------------------


def seed(s: D1Saver, keyed: D1Saver) -> list[str]:
    """Threads of every kind: plain graph runs, a subgraph, a tagged DeltaChannel thread, a
    tagged chain, sealed (keyed) ones, idle ones (one tagged), one too short to trim, a
    non-ASCII id, and big values stored as content-addressed chunks. Returns their ids."""
    plain = {"configurable": {"thread_id": "plain"}}
    graph = one_step_graph(s)
    for i in range(3):
        graph.invoke({"log": [f"in{i}"]}, plain)
    sub = {"configurable": {"thread_id": "subgraph"}}
    for i in range(2):
        parent_with_subgraph(s).invoke({"log": [f"in{i}"]}, sub)
    _, delta, _, _ = tagged_delta_thread(s)
    configs = put_chain(s, "tagged", 6)
    s.tag(configs[1], "approval")
    sealed = {"configurable": {"thread_id": "keyed"}}
    for i in range(3):
        one_step_graph(keyed).invoke({"log": [f"secret{i}"]}, sealed)
    put_chain(s, "idle", 4, ts=LONG_AGO)
    idle = put_chain(s, "idle-tagged", 4, ts=LONG_AGO)
    s.tag(idle[2], "keep-me")
    put_chain(s, "short", 2)
    put_chain(s, "thé-🙂", 5)
    put_chain(s, "big", 4, value=lambda i: "".join(f"{j}:{j * 7919 % 10007}," for j in range(
        20_000 + i * 500)))
    return ["plain", "subgraph", str(delta["configurable"]["thread_id"]), "tagged", "keyed",
            "idle", "idle-tagged", "short", "thé-🙂", "big"]


COPYING, MOVING = "\x1fd1saver-copying\x1f", "\x1fd1saver-moving\x1f"


def seed_the_rest(s: D1Saver, g: RealD1, binding: str) -> None:
    """What a run does beyond retention (issue 30, fact 13): memory and cache entries expired
    by the database's clock an hour ago and live ones; staged rows a killed copy (expired) and
    a killed move left, and a copy in progress (kept); a thread kept whole whose checkpoint was
    put again with other content (its first content's chunks are garbage)."""
    from d1saver import D1Cache, D1Store
    kw = dict(account_id=g.account_id, database_id=g.databases[binding], api_token=TOKEN,
              api_base_url=g.base_url)
    past = time.time() - 3600
    with D1Store(**kw, clock=lambda: past) as old, D1Cache(**kw, clock=lambda: past) as old_cache, \
            D1Store(**kw) as store:
        old.put(("users", "u1"), "expired", {"v": 1}, ttl=1)
        old.put(("users", "u1"), "kept", {"v": 2})
        store.put(("users", "u2"), "live", {"v": 3}, ttl=60)
        old_cache.set({(("__pregel_ns_writes", "n"), "expired"): (1, 60),
                       (("__pregel_ns_writes", "n"), "kept"): (2, None)})
    configs = put_chain(s, "gc-short", 2, value=lambda i: "".join(
        f"{j}:{j * 7919 % 10007}," for j in range(20_000)))
    # Put again by a saver that has not seen the row: one that wrote or read it collects the
    # first content's chunks at once (StoredRows), and the run would find no garbage.
    with saver(g, binding) as other:
        put_checkpoint(other, configs[0], 1, value=lambda i: "".join(
            f"{j}:{j * 104729 % 10007}," for j in range(20_000)))
    for staged, registered in ((COPYING + "ghost", 0), (MOVING + "moved", None),
                               (COPYING + "running", 4_000_000_000)):
        s.client.execute([Statement(
            "INSERT INTO checkpoints SELECT ?1, checkpoint_ns, checkpoint_id, "
            "parent_checkpoint_id, type, checkpoint, metadata, channels, run_id, ts "
            "FROM checkpoints WHERE thread_id = 'short'", (staged,))])
        if registered is not None:
            s.client.execute([Statement(
                "INSERT INTO d1saver_staged VALUES (?1, ?2, 'short', 0, ?3)",
                (staged, staged.split("\x1f")[-1], registered))])


def copy_database(src: D1Saver, dst: D1Saver) -> None:
    """Every stored row of `src` into `dst` (set up, empty), as it is."""
    dst.setup()
    for table, order in COPY_ORDER:
        rows = query(src, f"SELECT * FROM {table} ORDER BY {order}")
        stmts = [Statement(f"INSERT INTO {table} ({', '.join(r)}) VALUES "
                           f"({', '.join('?' * len(r))})", tuple(r.values())) for r in rows]
        for at in range(0, len(stmts), 20):
            dst.client.execute(stmts[at:at + 20])


def snapshot(s: D1Saver) -> dict[str, list[list[Any]]]:
    """Every row of every table (but NOT_COMPARED), in a stable order."""
    tables = [r["name"] for r in query(
        s, "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' "
           "AND name NOT LIKE '_cf_%' ORDER BY name")]
    out = {}
    for table in tables:
        if table in NOT_COMPARED:
            continue
        (res,) = s.client.execute([Statement(f"SELECT * FROM {table}")])
        out[table] = sorted(res.rows, key=lambda row: json.dumps(row))
    (res,) = s.client.execute([Statement("SELECT version, min_reader FROM d1saver_schema")])
    out["d1saver_schema"] = sorted(res.rows)
    return out


def cli_compact(g: RealD1, binding: str, *args: str) -> dict[str, Any]:
    env = {"CLOUDFLARE_ACCOUNT_ID": g.account_id, "CLOUDFLARE_API_TOKEN": TOKEN,
           "D1_DATABASE_ID": g.databases[binding], "D1_API_BASE_URL": g.base_url}
    done = CliRunner().invoke(app, ["compact", "--all", "--json", *args], env=env)
    assert done.exit_code == 0, done.output
    return json.loads(done.output)


FIGURES = ("threads_compacted", "threads_expired", "checkpoints_deleted", "writes_deleted",
           "bytes_freed")


# --- the same database as the CLI's ----------------------------------------------------------


def test_cron_leaves_every_table_as_the_cli_does() -> None:
    settings = {"COMPACTION_KEEP": "2", "COMPACTION_MAX_AGE_DAYS": "30",
                "COMPACTION_DATABASES": "DB_A"}
    with scheduled_gateway(settings) as g, saver(g, "DB_A") as a, saver(g, "DB_B") as b, \
            saver(g, "DB_A", encryption_keys=[KEY]) as keyed:
        threads = [*seed(a, keyed), "gc-short"]
        seed_the_rest(a, g, "DB_A")
        assert query(a, "SELECT COUNT(*) AS n FROM d1saver_gc_pending")[0]["n"] == 1
        assert query(a, "SELECT COUNT(*) AS n FROM d1saver_chunks")[0]["n"] > 0
        assert query(a, "SELECT COUNT(*) AS n FROM delta_frozen")[0]["n"] == 0
        copy_database(a, b)
        before = snapshot(a)
        assert snapshot(b) == before  # an identical copy

        line = tick(g)
        cli = cli_compact(g, "DB_B", "--keep", "2", "--max-age", "30d")

        after = snapshot(a)
        assert after == snapshot(b)
        assert after != before and after["delta_frozen"]  # it did compact, DeltaChannels too
        assert admin.inexact_threads(a.execute([admin.chunk_check()])[0]) == []
        # Beyond retention, as the CLI: leftovers of the killed copy and move gone (the copy
        # in progress kept), expired memory and cache entries swept, the garbage collected.
        staged = {r["thread_id"] for r in query(
            a, "SELECT DISTINCT thread_id FROM checkpoints WHERE substr(thread_id, 1, 1) = char(31)")}
        assert staged == {COPYING + "running"}
        assert [r["key"] for r in query(a, "SELECT key FROM store_items ORDER BY key")] == [
            "kept", "live"]
        assert [r["key"] for r in query(a, "SELECT key FROM cache_entries")] == ["kept"]
        assert after["d1saver_gc_pending"] == []
        mine = line["databases"][g.databases["DB_A"]]
        assert (mine["staged_removed"], mine["store_items_swept"], mine["cache_entries_swept"]) \
            == (cli["staged_removed"], cli["store_items_swept"], cli["cache_entries_swept"]) \
            == (2, 1, 1)
        (record,) = runs(a)
        assert record["status"] == "done" and record["reason"] is None
        assert record["trigger"] == CRON and record["keep"] == 2 and record["max_age_days"] == 30
        assert record["threads_scanned"] == cli["threads_scanned"] == len(threads)
        for name in FIGURES:
            assert record[name] == cli[name] == line["databases"][g.databases["DB_A"]][name], name
        assert cli["threads_expired"] == 2 and cli["checkpoints_deleted"] > 0
        assert line["run_id"] == record["run_id"] and line["errors"] == []
        assert list(line["databases"]) == [g.databases["DB_A"]]  # COMPACTION_DATABASES
        assert runs(b) == []  # the CLI records no scheduled run
        assert query(a, "SELECT * FROM leases") == query(a, "SELECT * FROM d1saver_compaction_cursor") == []

        # The next run finds nothing more to delete, and is recorded too.
        again = tick(g)["databases"][g.databases["DB_A"]]
        assert again["status"] == "done" and again["checkpoints_deleted"] == 0
        assert snapshot(a) == after
        assert [r["status"] for r in runs(a)] == ["done", "done"]
        # The keyed thread still reads back with its key.
        assert keyed.get_tuple({"configurable": {"thread_id": "keyed"}}) is not None

        # `d1saver compact --history` shows the records, newest first.
        env = {"CLOUDFLARE_ACCOUNT_ID": g.account_id, "CLOUDFLARE_API_TOKEN": TOKEN,
               "D1_DATABASE_ID": g.databases["DB_A"], "D1_API_BASE_URL": g.base_url}
        shown = CliRunner().invoke(app, ["compact", "--history", "--json"], env=env)
        assert shown.exit_code == 0, shown.output
        assert json.loads(shown.output) == runs(a)
        text = CliRunner().invoke(app, ["compact", "--history", "--limit", "1"], env=env)
        assert text.exit_code == 0
        header, row = text.output.splitlines()  # a table: the newest run, which found nothing
        cells = dict(zip(header.split(), row.split()))  # (its reason, the last column, is empty)
        assert (cells["status"], cells["checkpoints"], cells["run"]) == (
            "done", "0", runs(a)[0]["run_id"])


# --- budget, lease, bad settings --------------------------------------------------------------


def test_a_budget_of_one_batch_goes_on_over_several_runs_and_the_lease_is_shared() -> None:
    settings = {"COMPACTION_KEEP": "2", "COMPACTION_BATCHES": "1",
                "COMPACTION_BATCH_CHECKPOINTS": "1", "COMPACTION_DATABASES": "DB_C"}
    with scheduled_gateway(settings) as g, saver(g, "DB_C") as c, saver(g, "DB_D") as d:
        for t in ("t1", "t2", "t3", "t4"):
            put_chain(c, t, 5)
        put_chain(c, "t0-short", 2)
        copy_database(c, d)
        before = snapshot(c)

        # Held by `d1saver compact` (or rebalance, rekey): the run skips, deleting nothing.
        held = lease.acquire(c, ttl=60)
        line = tick(g)["databases"][g.databases["DB_C"]]
        assert line["status"] == "skipped" and held.holder in line["reason"]
        assert snapshot(c) == before
        (record,) = runs(c)
        assert record["status"] == "skipped" and held.holder in record["reason"]
        assert "lease" in record["reason"] and record["batches"] == 0
        lease.release(c, held)

        statuses, cursors = [], []
        for _ in range(6):
            statuses.append(tick(g)["databases"][g.databases["DB_C"]]["status"])
            cursors.append([r["after"] for r in query(c, "SELECT after FROM d1saver_compaction_cursor")])
            if statuses[-1] == "done":
                break
        assert statuses == ["partial", "partial", "partial", "done"]
        assert cursors == [["t1"], ["t2"], ["t3"], []]
        records = runs(c)
        assert [r["batches"] for r in records[:4]] == [1, 1, 1, 1]
        assert all("COMPACTION_BATCHES" in r["reason"] for r in records[1:4])
        assert sum(r["checkpoints_deleted"] for r in records) == 4 * 3

        cli_compact(g, "DB_D", "--keep", "2")
        assert snapshot(c) == snapshot(d)

        # The cron holding the lease stops `d1saver compact`, which names it.
        (taken,) = c.execute([admin.acquire_lease(lease.LEASE_NAME, "cron:some-run", 60)])
        assert taken.rows
        with pytest.raises(LeaseHeldError, match="another cron run holds the lease"):
            compact(c, keep=2)
        c.execute([admin.break_lease(lease.LEASE_NAME)])


def test_bad_settings_are_recorded_and_delete_nothing() -> None:
    settings = {"COMPACTION_KEEP": "-3", "COMPACTION_MAX_AGE_DAYS": "soon",
                "COMPACTION_DATABASES": "DB_A,DB_NOPE"}
    with scheduled_gateway(settings) as g, saver(g, "DB_A") as a:
        put_chain(a, "t1", 5)
        before = snapshot(a)
        line = tick(g)
        assert snapshot(a) == before
        assert len(line["errors"]) == 3
        record = next(r for r in runs(a))
        assert record["status"] == "failed"
        for part in ("COMPACTION_KEEP", "COMPACTION_MAX_AGE_DAYS", '"DB_NOPE"', ">= 1"):
            assert part in record["reason"], part
        # Every database the Worker reaches records the failure.
        for binding in ("DB_B", "DB_C", "DB_D"):
            with saver(g, binding) as other:
                assert [r["status"] for r in runs(other)] == ["failed"]
        assert {d["status"] for d in line["databases"].values()} == {"failed"}
        assert query(a, "SELECT * FROM leases") == []


# --- killed midway ---------------------------------------------------------------------------


def test_a_run_killed_midway_is_finished_by_the_next() -> None:
    settings = {"COMPACTION_KEEP": "1", "COMPACTION_BATCH_CHECKPOINTS": "1",
                "COMPACTION_BATCHES": "100000", "COMPACTION_LEASE_TTL": "2",
                "COMPACTION_DATABASES": "DB_A"}
    state = Path(tempfile.mkdtemp(prefix="d1saver-scheduled-"))
    try:
        _kill_and_finish(settings, state)
    finally:
        shutil.rmtree(state, ignore_errors=True)


def _kill_and_finish(settings: dict[str, str], state: Path) -> None:
    copies = 500  # one batch each: a run of some seconds, killed early on
    with scheduled_gateway(settings, state_dir=state) as g, saver(g, "DB_A") as a, \
            saver(g, "DB_B") as b:
        put_chain(a, "k", 3, writes=0)
        copy_database(a, b)
        for s in (a, b):  # the thread's rows under many thread ids, in one statement
            s.client.execute([Statement(
                "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?1) "
                "INSERT INTO checkpoints SELECT printf('k%05d', n.i), checkpoint_ns, "
                "checkpoint_id, parent_checkpoint_id, type, checkpoint, metadata, channels, "
                "run_id, ts FROM checkpoints, n WHERE thread_id = 'k'", (copies,))])
        threads = copies + 1
        # Fire the run, and kill wrangler (workerd with it) once some batches committed.
        fired = threading.Thread(target=lambda: _fire(g), daemon=True)
        fired.start()
        deadline = time.monotonic() + 60
        while _batches_on_disk(state) < 3:  # the gateway answers no request during the run
            assert time.monotonic() < deadline and fired.is_alive()
            time.sleep(0.01)
        assert g.pid is not None
        os.killpg(g.pid, signal.SIGKILL)
        fired.join(30)
    with scheduled_gateway(settings, state_dir=state) as g, saver(g, "DB_A") as a, \
            saver(g, "DB_B") as b:
        (killed,) = runs(a)
        assert killed["status"] == "running" and 3 <= killed["batches"] < threads
        left = query(a, "SELECT COUNT(*) AS n FROM checkpoints")[0]["n"]
        assert left == 3 * threads - 2 * killed["batches"]  # whole batches, each one thread
        time.sleep(2.5)  # the dead run's lease expires
        line = tick(g)["databases"][g.databases["DB_A"]]
        assert line["status"] == "done"
        records = runs(a)
        assert [r["status"] for r in records] == ["done", "interrupted"]
        assert "stopped midway" in records[1]["reason"]
        assert records[0]["batches"] + records[1]["batches"] == threads
        cli_compact(g, "DB_B", "--keep", "1")
        assert snapshot(a) == snapshot(b)
        assert query(a, "SELECT COUNT(*) AS n FROM checkpoints")[0]["n"] == threads


def _batches_on_disk(state: Path) -> int:
    """The batches the running run has recorded, read from the local D1's SQLite files."""
    found = 0
    for path in state.rglob("*.sqlite"):
        try:
            with sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=0.05) as db:
                (n,) = db.execute("SELECT COALESCE(MAX(batches), 0) FROM d1saver_compaction_runs"
                                  " WHERE status = 'running'").fetchone()
        except sqlite3.Error:
            continue  # another database, or locked for a moment
        found = max(found, int(n))
    return found


def _fire(g: RealD1) -> None:
    try:
        httpx.get(f"{g.root_url}/__scheduled", params={"cron": CRON}, timeout=60)
    except httpx.HTTPError:
        pass  # killed
