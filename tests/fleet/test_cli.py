"""The commands over four databases (D1_DATABASE_ID="a,b,c,d"): `threads`, `history`,
`compact --all` and `tag` span the fleet; checked through the databases themselves."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager

from typer.testing import CliRunner, Result

from d1saver.cli import app
from d1saver.local import make_server
from tests.compaction import cfg, checkpoint_id
from tests.fleet.conftest import FleetBackend, unique
from tests.fleet.test_saver import chain

runner = CliRunner()


@contextmanager
def serve_fleet(fleet: FleetBackend) -> Iterator[dict[str, str]]:
    """The environment the commands need to reach the fleet: the local engine served over
    HTTP on a free port, or the real engine's gateway."""
    env = {"CLOUDFLARE_ACCOUNT_ID": fleet.account_id, "CLOUDFLARE_API_TOKEN": fleet.api_token,
           "D1_DATABASE_ID": ",".join(fleet.database_ids), "D1_API_BASE_URL": fleet.base_url}
    if fleet.engine is None:
        yield env
        return
    server = make_server("127.0.0.1", 0, engine=fleet.engine)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02},
                              daemon=True)
    thread.start()
    host, port = server.server_address[:2]
    try:
        yield {**env, "D1_API_BASE_URL": f"http://{host}:{port}/client/v4"}
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def cli(env: Mapping[str, str], *args: str) -> Result:
    result = runner.invoke(app, list(args), env=dict(env))
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result


def test_threads_history_tag_and_compact_all_span_the_fleet(fleet: FleetBackend) -> None:
    saver = fleet.saver()
    prefix = unique("cli")
    threads = [f"{prefix}-{i}" for i in range(12)]
    for t in threads:
        chain(saver, t, 4)
    assert len({saver.home(t) for t in threads}) >= 3
    with serve_fleet(fleet) as env:
        listed = json.loads(cli(env, "threads", "--json", "--limit", "0").stdout)
        ours = {i["thread_id"]: i for i in listed if i["thread_id"].startswith(prefix)}
        assert {t: (i["database_id"], i["checkpoints"]) for t, i in ours.items()} == {
            t: (saver.home(t), 4) for t in threads}

        t = threads[0]
        rows = json.loads(cli(env, "history", t, "--json").stdout)
        assert [r["checkpoint_id"] for r in rows] == [checkpoint_id(i) for i in (3, 2, 1, 0)]
        assert {r["database_id"] for r in rows} == {saver.home(t)}

        assert cli(env, "tag", t, checkpoint_id(1), "approval").exit_code == 0
        assert saver.tags(cfg(t)) == {"approval": checkpoint_id(1)}

        dry = cli(env, "compact", "--keep", "1", "--all", "--dry-run")
        assert dry.exit_code == 0 and all(db in dry.stdout for db in fleet.database_ids)
        result = cli(env, "compact", "--keep", "1", "--all", "--json")
        assert result.exit_code == 0, result.output
        figures = json.loads(result.stdout)
    assert set(figures["databases"]) == set(fleet.database_ids)
    for name in ("threads_scanned", "checkpoints_deleted", "writes_deleted", "requests"):
        assert figures[name] == sum(d[name] for d in figures["databases"].values())
    assert figures["checkpoints_deleted"] >= 3 * len(threads) - 1
    for u in threads:  # the newest stays, and the tagged one
        kept = [x.config["configurable"]["checkpoint_id"] for x in saver.list(cfg(u))]
        assert kept == ([checkpoint_id(3), checkpoint_id(1)] if u == t else [checkpoint_id(3)])
        assert fleet.holding(u) == [saver.home(u)]
