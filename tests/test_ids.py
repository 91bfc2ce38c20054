"""Account and database ids (defect 18): one rule, applied by the client, the settings, the CLI and
the local D1, so that no id can reach another database or name a file outside `--data-dir`."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

import d1saver
from d1saver import ConfigError, D1Client, D1Saver, load_settings
from d1saver.core.ids import MAX_ID_LENGTH, validate_account_id, validate_database_id
from d1saver.cli import app

TOKEN = "ids-token"
GOOD = ["db", "d", "a", "db1", f"db-{uuid.uuid4().hex[:8]}", f"d1saver-{uuid.uuid4().hex[:12]}",
        str(uuid.uuid4()), uuid.uuid4().hex, "local-account", "crash", "demo", "my_db.v2",
        "x" * MAX_ID_LENGTH]
BAD = ["db1/../db2", "..", ".", "../x", "db1/x", "a\\b", "x..y", "db%2F", "db\n", "db\r", "\tdb",
       "db\x00", "", " db", "db ", ".hidden", "-db", "_db", "db.", "x" * (MAX_ID_LENGTH + 1), "dé"]


# --- the rule --------------------------------------------------------------------------------


@pytest.mark.parametrize("value", GOOD)
def test_ids_used_by_cloudflare_and_tests_pass(value: str) -> None:
    assert validate_database_id(value) == value
    assert validate_account_id(value) == value


@pytest.mark.parametrize("value", BAD)
def test_unsafe_ids_are_refused_with_the_id_named(value: str) -> None:
    with pytest.raises(ConfigError) as err:
        validate_database_id(value)
    assert repr(value)[:40] in str(err.value) and "D1_DATABASE_ID" in str(err.value)
    with pytest.raises(ConfigError, match="CLOUDFLARE_ACCOUNT_ID"):
        validate_account_id(value)


def test_non_strings_are_refused() -> None:
    for value in (None, 42, b"db"):
        with pytest.raises(ConfigError):
            validate_database_id(value)


# --- client, saver and settings --------------------------------------------------------------


@pytest.mark.parametrize("field", ["account_id", "database_id"])
def test_saver_refuses_a_traversal_id_at_construction(field: str) -> None:
    ids = {"account_id": "acc", "database_id": "db"} | {field: "db1/../db2"}
    with pytest.raises(ConfigError, match=r"'db1/\.\./db2'"):
        D1Saver(**ids, api_token=TOKEN, api_base_url="http://127.0.0.1:9/client/v4")
    with pytest.raises(ConfigError, match=r"'db1/\.\./db2'"):
        D1Client(**ids, api_token=TOKEN, api_base_url="http://127.0.0.1:9/client/v4")


def test_settings_refuse_a_bad_id_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CLOUDFLARE_ACCOUNT_ID", "acc")
    monkeypatch.setenv("CLOUDFLARE_API_TOKEN", TOKEN)
    monkeypatch.setenv("D1_DATABASE_ID", "Db1/../db2")
    with pytest.raises(ConfigError) as err:
        load_settings()
    assert "'Db1/../db2'" in str(err.value)  # named as given, not lower-cased
    with pytest.raises(ConfigError, match="D1_DATABASE_ID"):
        D1Saver.from_env()
    monkeypatch.setenv("D1_DATABASE_ID", "db1")
    monkeypatch.setenv("CLOUDFLARE_ACCOUNT_ID", "acc/..")
    with pytest.raises(ConfigError, match="CLOUDFLARE_ACCOUNT_ID"):
        load_settings()


# --- the local D1 server, in its own process with --data-dir ----------------------------------


@dataclass
class Served:
    base_url: str  # http://127.0.0.1:PORT/client/v4
    data_dir: Path
    root: Path  # the data dir's parent, where a traversal would land


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    """`python -m d1saver.local.server --data-dir` on a free port, run from the data dir's parent."""
    data_dir = tmp_path / "data"
    port = _free_port()
    env = {**os.environ, "PYTHONPATH": str(Path(d1saver.__file__).parents[1]), "LOCAL_D1_API_TOKEN": TOKEN}
    proc = subprocess.Popen(
        [sys.executable, "-m", "d1saver.local.server", "--port", str(port), "--data-dir", str(data_dir),
         "--database", "db1"],
        cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                httpx.get(f"http://127.0.0.1:{port}/", timeout=1)
                break
            except httpx.TransportError:
                assert proc.poll() is None and time.monotonic() < deadline, "local D1 did not start"
                time.sleep(0.05)
        yield Served(f"http://127.0.0.1:{port}/client/v4", data_dir, tmp_path)
    finally:
        proc.terminate()
        proc.wait(10)


def _files(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()}


def _served_only(root: Path) -> bool:
    """Only the served database's files exist (`serve` creates the databases it is told to)."""
    return all(f.startswith("data/db1.sqlite") for f in _files(root))


TRAVERSALS = [
    "accounts/acc/d1/database/db1%2F..%2Fdb2/query",
    "accounts/acc/d1/database/..%2Fescape/query",
    "accounts/acc/d1/database/%2E%2E%2Fescape/raw",
    "accounts/acc/d1/database/../query",
    "accounts/acc/d1/database/db1/../../escape/query",
    "accounts/acc/d1/database/..%5Cescape/query",
    "accounts/acc/d1/database/db%0A/query",
    "accounts/..%2F..%2Facc/d1/database/db1/query",
]


def test_local_server_refuses_traversal_ids_and_writes_no_file_outside(served: Served) -> None:
    auth = {"Authorization": f"Bearer {TOKEN}"}
    with httpx.Client(headers=auth) as client:
        for tail in TRAVERSALS:
            # `target` sends the request line as written: httpx would otherwise normalise the '..'.
            target = f"/client/v4/{tail}".encode()
            response = client.post(served.base_url, json={"sql": "CREATE TABLE t (x)"},
                                   extensions={"target": target})
            assert response.status_code == 404, tail
            assert response.json()["success"] is False and response.json()["errors"][0]["code"] == 7003
        assert _served_only(served.root)  # no file outside the data dir, none for any other id
        ok = client.post(f"{served.base_url}/accounts/acc/d1/database/db1/query", json={"sql": "SELECT 1"})
        assert ok.status_code == 200
    files = _files(served.root)
    assert "data/db1.sqlite" in files and all(f.startswith("data/db1.sqlite") for f in files), files


def test_cli_exits_2_with_one_line_on_a_bad_database_id(served: Served) -> None:
    env = {"CLOUDFLARE_ACCOUNT_ID": "acc", "CLOUDFLARE_API_TOKEN": TOKEN,
           "D1_DATABASE_ID": "db1/../db2", "D1_API_BASE_URL": served.base_url}
    result = CliRunner().invoke(app, ["threads"], env=env)
    assert result.exit_code == 2, result.output
    assert result.stderr.splitlines() == [result.stderr.strip()]
    assert "'db1/../db2'" in result.stderr and "D1_DATABASE_ID" in result.stderr
    assert _served_only(served.root)  # nothing reached the server
