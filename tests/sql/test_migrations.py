"""Versioned, forward-only migrations: version 1 frozen as released, schema.sql equal to version 1
plus every step, upgrades applied on first use at the cost of their own requests only, safe with
two instances upgrading at once and with a lost response, and rolling deploys (an older d1saver
works on a newer additive schema and refuses one it cannot use, naming both versions).

Every test runs on the local D1 and on the real engine. The real engine's dev Worker has one
database for every test, so each test here starts and ends by dropping d1saver's tables.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from langgraph.checkpoint.conformance.test_utils import generate_checkpoint

from d1saver import ConfigError, D1Saver, QueryError, Result, Statement
from d1saver.ops import rows as _rows
from d1saver.sql import catalogue as _sql
from d1saver.sql import schema as _schema
from d1saver.ops.statements import migration_statements, setup_statements
from tests.conftest import Backend
from tests.data import v0_1_0_fixture as fx
from tests.data import v0_1_0_graphs as g
from tests.saver import test_v0_1_0_data as checks

N = _sql.SCHEMA_VERSION
STEPS = N - 1  # migrations after version 1
CFG = {"configurable": {"thread_id": "t-migrate", "checkpoint_ns": ""}}


# --- helpers -----------------------------------------------------------------------------


def raw(backend: Backend, statements: list[Statement]) -> list[Result]:
    """Send exactly `statements`, in one request, through a saver that never sets up nor
    migrates (and so adds nothing to the batch)."""
    with backend.saver(auto_setup=False) as saver:
        return saver.execute(statements)


def drop_everything(backend: Backend) -> None:
    """Drop every table but the engine's own: the local D1 starts empty; the real engine's one
    database is shared with other tests, which set their schema up again on first use."""
    (tables,) = raw(backend, [Statement(
        "SELECT name FROM sqlite_master WHERE type = 'table' "
        "AND substr(name, 1, 7) != 'sqlite_' AND substr(name, 1, 4) != '_cf_'")])
    if tables.rows:
        raw(backend, [Statement(f'DROP TABLE IF EXISTS "{name}"') for (name,) in tables.rows])


@pytest.fixture(autouse=True)
def empty_database(request: pytest.FixtureRequest) -> Iterator[None]:
    backend = request.getfixturevalue("backend") if "backend" in request.fixturenames else None
    if backend is not None:
        drop_everything(backend)
    yield
    if backend is not None:
        drop_everything(backend)


def build_v1(backend: Backend, *, lease_lost: bool = True) -> None:
    """A database as d1saver 0.1.0 created it (or, without lease_lost, as earlier commits did)."""
    with backend.saver(auto_setup=False) as saver:
        fx.create_v010_schema(saver, lease_lost=lease_lost)


def stored_schema(backend: Backend) -> _rows.SchemaInfo:
    (result,) = raw(backend, [Statement.bind(_sql.READ_SCHEMA)])
    return _rows.schema_info(result)


def versions(backend: Backend) -> list[int]:
    (result,) = raw(backend, [Statement("SELECT version FROM d1saver_schema ORDER BY version")])
    return [row[0] for row in result.rows]


def structure(backend: Backend) -> dict[str, Any]:
    """Tables, columns and indexes, with each object's SQL without white space (an added
    column's text lands after the table's last line)."""
    (objects,) = raw(backend, [Statement(
        "SELECT type, name, tbl_name, sql FROM sqlite_master "
        "WHERE substr(name, 1, 7) != 'sqlite_' AND substr(tbl_name, 1, 4) != '_cf_' "
        "ORDER BY type, name")])
    tables = [name for kind, name, _, _ in objects.rows if kind == "table"]
    infos = raw(backend, [Statement(
        f"SELECT cid, name, type, \"notnull\", dflt_value, pk FROM pragma_table_info('{t}')")
        for t in tables])
    return {
        "objects": [[kind, name, tbl, re.sub(r"\s+", "", sql or "")]
                    for kind, name, tbl, sql in objects.rows],
        "columns": {t: info.rows for t, info in zip(tables, infos)},
    }


def migration_step(statements: Any) -> int | None:
    """The version a request migrates to, if it is a migration's batch."""
    for st in statements:
        if st.sql == _sql.CLAIM_VERSION.sql:
            return int(st.params[0])
    return None


def migration_attempts(backend: Backend) -> list[tuple[int, str | None]]:
    """(version, error) of every HTTP attempt that carried a migration."""
    out = []
    for e in backend.events:
        step = migration_step(e.statements)
        if step is not None:
            out.append((step, None if e.error is None else type(e.error).__name__))
    return out


def carries_probe(event: Any) -> bool:
    return any(st.sql == _sql.READ_SCHEMA.sql for st in event.statements)


def put_one(saver: D1Saver, step: int = 0) -> dict:
    return saver.put(CFG, generate_checkpoint(), {"source": "loop", "step": step}, {})


class Migrations(httpx.BaseTransport):
    """Wraps a transport to stress migration requests (the first attempt of each):
    `together` holds each until that many have arrived, so every saver has decided to migrate
    before any does; `lose` runs it, then drops the connection before the response arrives,
    as a lost response does (the client retries: the step is applied already)."""

    def __init__(self, inner: httpx.BaseTransport, *, together: int = 1, lose: bool = False
                 ) -> None:
        self.inner = inner
        self.barrier = threading.Barrier(together, timeout=30) if together > 1 else None
        self.lose = lose
        self.seen: set[int] = set()
        self.kept: list[httpx.Request] = []
        self.lost = 0
        self.lock = threading.Lock()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.read())
        items = body.get("batch", [body])
        claim = _sql.CLAIM_VERSION.sql
        first = False
        if any(item["sql"] == claim for item in items):
            with self.lock:
                first = id(request) not in self.seen  # a retry re-sends the same request
                self.seen.add(id(request))
                self.kept.append(request)  # alive, so no later request reuses its id
        if first and self.barrier is not None:
            self.barrier.wait()
        response = self.inner.handle_request(request)
        if first and self.lose:
            response.read()
            with self.lock:
                self.lost += 1
            raise httpx.ReadError("connection lost after the request ran", request=request)
        return response


def base_transport(backend: Backend) -> httpx.BaseTransport:
    return backend.transport if backend.transport is not None else httpx.HTTPTransport()


# --- version 1 is frozen; schema.sql is version 1 plus every step ---------------------------


def test_version_1_is_as_released_in_0_1_0() -> None:
    """Nobody edits version 1 again: it is 0.1.0's schema.sql, statement for statement."""
    assert _sql.MIGRATIONS[0] == _sql.split_script(fx.SCHEMA_PATH.read_text(encoding="utf-8"))


def test_schema_sql_equals_version_1_upgraded_through_every_step(backend: Backend) -> None:
    """schema.sql alone (as `wrangler d1 execute --file` runs it) gives what version 1 and every
    migration give: the same tables, columns, indexes and constraints, at the same version."""
    build_v1(backend)
    for version in range(2, N + 1):
        raw(backend, migration_statements(version))
    upgraded, upgraded_info = structure(backend), stored_schema(backend)
    assert versions(backend) == list(range(1, N + 1))

    drop_everything(backend)
    raw(backend, setup_statements())
    assert structure(backend) == upgraded
    assert stored_schema(backend) == upgraded_info == _rows.SchemaInfo(N, _sql.min_reader(N))


def test_schema_sql_leaves_an_older_database_alone(backend: Backend) -> None:
    """On a version-1 database schema.sql stops at its guard and D1 rolls it all back."""
    build_v1(backend)
    before = structure(backend)
    with pytest.raises(QueryError, match="schema_outdated"):
        raw(backend, setup_statements())
    assert structure(backend) == before


# --- applied on first use, at the cost of the migrations' own requests -----------------------


def test_first_op_on_an_up_to_date_database_is_one_request(backend: Backend) -> None:
    """The schema check rides along with the first request; later requests go without it."""
    backend.saver().setup()
    saver = backend.saver()
    _, first = backend.count(lambda: saver.get_tuple(CFG))
    _, second = backend.count(lambda: put_one(saver))
    assert (first, second) == (1, 1)
    assert [carries_probe(e) for e in backend.events[-2:]] == [True, False]


def test_first_op_on_a_version_1_database_migrates_it(backend: Backend) -> None:
    """An op whose statements version 1 can run (tags): it runs, reports version 1, and the
    saver applies every step: steps + 1 requests, then one request per op again."""
    build_v1(backend)
    saver = backend.saver()
    _, first = backend.count(lambda: saver.tags(CFG))
    assert first == STEPS + 1
    assert migration_attempts(backend) == [(v, None) for v in range(2, N + 1)]
    assert stored_schema(backend) == _rows.SchemaInfo(N, _sql.min_reader(N))
    _, second = backend.count(lambda: put_one(saver, 1))
    assert second == 1 and not carries_probe(backend.events[-1])


@pytest.mark.anyio
async def test_first_async_op_on_a_version_1_database_migrates_it(backend: Backend) -> None:
    build_v1(backend)
    saver = backend.saver()
    before = backend.requests
    await saver.aput(CFG, generate_checkpoint(), {"source": "loop", "step": 0}, {})
    await saver.aclose()
    # A put goes through version 6's view: its first batch fails on version 1 ("no such
    # table"), then the versions are read, every step applied, and the put resent.
    assert backend.requests - before == STEPS + 3
    assert stored_schema(backend).version == N


def test_explicit_setup_migrates_a_version_1_database(backend: Backend) -> None:
    """setup(): schema.sql stops on the older database, the versions are read, the steps run."""
    build_v1(backend)
    saver = backend.saver()
    _, n = backend.count(saver.setup)
    assert n == 2 + STEPS
    assert stored_schema(backend).version == N
    _, again = backend.count(saver.setup)
    assert again == 0


def test_a_statement_needing_a_newer_schema_migrates_and_is_resent(backend: Backend) -> None:
    """guard_head's put needs version 2's guards: on version 1 its batch fails ("no such
    table") after the read that goes first, so the database is an older one, not a fresh one:
    the saver reads its versions, applies the steps and resends the put once."""
    build_v1(backend)
    saver = backend.saver(guard_head=True)
    _, n = backend.count(lambda: put_one(saver))
    assert n == 1 + 1 + STEPS + 1
    assert migration_attempts(backend) == [(v, None) for v in range(2, N + 1)]
    assert saver.get_tuple(CFG) is not None


# --- two instances at once, and lost responses ------------------------------------------------


def test_two_savers_upgrade_at_once(backend: Backend) -> None:
    """Both send every step; for each, one batch applies it and the other fails on the version
    claim, rolls back whole, and counts the step as applied."""
    build_v1(backend)
    transport = Migrations(base_transport(backend), together=2)
    savers = [backend.saver(transport=transport) for _ in range(2)]
    errors: list[BaseException] = []

    def first_op(saver: D1Saver) -> None:
        try:
            saver.get_tuple(CFG)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=first_op, args=(s,)) for s in savers]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    attempts = migration_attempts(backend)
    for version in range(2, N + 1):
        assert attempts.count((version, None)) == 1
        assert attempts.count((version, "QueryError")) == 1
    assert versions(backend) == list(range(1, N + 1))
    assert all(s.is_setup for s in savers)
    put_one(savers[1])
    assert savers[0].get_tuple(CFG) is not None


def test_lost_response_of_a_migration(backend: Backend) -> None:
    """Each step runs, its response is lost, the retry fails on the version claim: applied once."""
    build_v1(backend)
    transport = Migrations(base_transport(backend), lose=True)
    saver = backend.saver(transport=transport)
    saver.get_tuple(CFG)
    assert transport.lost == STEPS
    assert migration_attempts(backend) == [
        attempt for v in range(2, N + 1)
        for attempt in ((v, "D1ConnectionError"), (v, "QueryError"))]
    assert versions(backend) == list(range(1, N + 1))
    put_one(saver)


# --- rolling deploys: an older d1saver on a newer schema -------------------------------------


def newer_release(m: pytest.MonkeyPatch, step: list[str], min_reader: int | None = None) -> None:
    """The code of a later release: one more step (contract if it sets min_reader), in the
    schema module (whose migration() and min_reader() read it) and in the aggregate the
    operations read."""
    steps, readers = [*_schema.MIGRATIONS, step], {**_schema.MIN_READER, N + 1: min_reader}
    for module in (_schema, _sql):
        m.setattr(module, "MIGRATIONS", steps)
        m.setattr(module, "SCHEMA_VERSION", N + 1)
        if min_reader is not None:
            m.setattr(module, "MIN_READER", readers)


def test_older_d1saver_works_on_a_newer_additive_schema(backend: Backend,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """Columns added to both hot tables and a new table: this release's d1saver (now the older
    one) still writes and reads, one request per op, the check riding along."""
    with monkeypatch.context() as m:
        newer_release(m, ["ALTER TABLE checkpoints ADD COLUMN note TEXT",
                          "ALTER TABLE writes ADD COLUMN note TEXT",
                          "CREATE TABLE IF NOT EXISTS d1saver_future (x TEXT)"])
        backend.saver().setup()
        # Additive: the oldest reader stays this release's own (version 7 set it).
        assert stored_schema(backend) == _rows.SchemaInfo(N + 1, _sql.min_reader(N))
    older = backend.saver()
    config, n = backend.count(lambda: put_one(older))
    assert n == 1 and carries_probe(backend.events[-1])
    older.put_writes(config, [("messages", "hi")], task_id="t1")  # INSERT OR IGNORE
    older.put_writes(config, [("__error__", "boom")], task_id="t2")  # INSERT OR REPLACE
    tup = older.get_tuple(CFG)
    assert tup is not None and sorted(w[1:] for w in tup.pending_writes) == [
        ("__error__", "boom"), ("messages", "hi")]
    assert len(list(older.list(CFG))) == 1
    backend.saver().setup()  # explicit setup accepts it too


def test_older_d1saver_refuses_a_schema_it_cannot_use(backend: Backend,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """A contract step needing code of its own version: refused with a typed error naming both
    versions, on first use and by setup(), whose schema.sql changes nothing."""
    with monkeypatch.context() as m:
        newer_release(m, ["ALTER TABLE checkpoints DROP COLUMN ts"], min_reader=N + 1)
        backend.saver().setup()
    message = (f"database schema v{N + 1} requires d1saver schema >= v{N + 1}; "
               f"this d1saver knows v{N}")
    before = structure(backend)
    with pytest.raises(ConfigError, match=re.escape(message)):
        backend.saver().get_tuple(CFG)
    with pytest.raises(ConfigError, match=re.escape(message)):
        backend.saver().setup()
    assert structure(backend) == before
    saver = backend.saver()
    for _ in range(2):  # refused on every request, not only the first
        with pytest.raises(ConfigError):
            saver.get_tuple(CFG)


def test_a_release_of_schema_12_refuses_a_database_holding_base64_values(
        backend: Backend, monkeypatch: pytest.MonkeyPatch) -> None:
    """0.2 (schema 12) cannot decode "s:" nor "e:~" (step 15): once this version has written
    to a database, 0.2 refuses it by name rather than failing on a value it meets."""
    put_one(backend.saver())  # this version: every step applied, "s:" values written
    assert _sql.min_reader(_sql.SCHEMA_VERSION) == 15 <= _sql.SCHEMA_VERSION
    with monkeypatch.context() as m:
        m.setattr(_sql, "MIGRATIONS", _sql.MIGRATIONS[:12])
        m.setattr(_sql, "SCHEMA_VERSION", 12)
        m.setattr(_sql, "MIN_READER", {v: r for v, r in _sql.MIN_READER.items() if v <= 12})
        with pytest.raises(ConfigError, match=re.escape(
                f"database schema v{N} requires d1saver schema >= v15; this d1saver knows v12")):
            backend.saver().get_tuple(CFG)


# --- the 0.1.0 database, upgraded by two savers at once with lost responses -------------------


def upgraded_v010(v010: Any, backend: Backend, schema: str = "v0.1.0") -> fx.V010Db:
    """The 0.1.0 rows on a version-1 schema, upgraded by the first ops of two savers at once,
    every migration's first response lost; returns the database with one of them."""
    transport = Migrations(base_transport(backend), together=2, lose=True)
    db = v010(schema=schema, transport=transport)
    other = backend.saver(transport=transport)
    results: list[Any] = []
    threads = [threading.Thread(target=lambda s=s: results.append(s.get_tuple(CFG)))
               for s in (db.saver, other)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    other.close()
    assert results == [None, None]  # both ops ran (the thread is not in the 0.1.0 data)
    assert transport.lost == 2 * STEPS  # each saver's first try of each step
    assert versions(backend) == list(range(1, N + 1))
    return db


def test_0_1_0_database_upgraded_reads_back_identically(v010: Any, backend: Backend) -> None:
    db = upgraded_v010(v010, backend)
    for name in g.THREADS:
        checks.test_reads_back_identically(lambda *names, **kw: db, name)


def test_0_1_0_database_upgraded_resumes(v010: Any, backend: Backend) -> None:
    db = upgraded_v010(v010, backend)
    for name in g.THREADS:
        checks.test_resumes(lambda *names, **kw: db, name, compacted=False)


def test_0_1_0_database_upgraded_compacts(v010: Any, backend: Backend) -> None:
    db = upgraded_v010(v010, backend)
    checks.test_compacts_keeping_heads_and_tags(lambda *names, **kw: db)


def test_database_from_before_lease_lost_upgrades_and_compacts(v010: Any,
                                                               backend: Backend) -> None:
    """Version 1 as created before lease_lost existed: compaction's lease check could not run
    on it; after the upgrade, compaction keeps what it must."""
    db = v010(schema="v1-without-lease_lost")
    checks.test_compacts_keeping_heads_and_tags(lambda *names, **kw: db)
    assert versions(backend) == list(range(1, N + 1))


def test_schema_sql_guards_name_the_current_version() -> None:
    """schema.sql refuses a database older or newer than the version it creates; its guards and
    header must name that version (they once lagged three steps behind)."""
    import re
    from pathlib import Path

    from d1saver.sql.catalogue import SCHEMA_VERSION

    text = (Path(__file__).resolve().parents[2] / "schema.sql").read_text()
    assert text.splitlines()[0].startswith(f"-- d1saver schema, version {SCHEMA_VERSION}:")
    assert re.search(rf"MAX\(version\) FROM d1saver_schema\) < {SCHEMA_VERSION};", text)
    assert re.search(rf"MAX\(min_reader\) FROM d1saver_schema\) > {SCHEMA_VERSION};", text)
