"""The local D1's databases by id: files stay inside the data dir, whatever the request names."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from d1saver import ConfigError
from d1saver.local import LocalD1, LocalD1Transport
from d1saver.local.registry import Registry, database_file

AUTH = {"Authorization": "Bearer t"}


def test_database_file_is_directly_inside_the_root(tmp_path: Path) -> None:
    root = tmp_path.resolve()
    assert database_file(root, "db-1") == root / "db-1.sqlite"
    for bad in ("../x", "db1/../db2", "..", "a\\b", "db\n"):
        with pytest.raises(ConfigError, match="invalid database id"):
            database_file(root, bad)


def test_registry_refuses_a_bad_id_without_touching_the_disk(tmp_path: Path) -> None:
    registry = Registry(tmp_path / "data")
    try:
        with pytest.raises(ConfigError):
            registry.get("../escape")
        assert registry.get("db").conn is registry.get("db").conn  # opened once
    finally:
        registry.close()
    assert sorted(p.name for p in tmp_path.rglob("*.sqlite")) == ["db.sqlite"]
    with pytest.raises(RuntimeError, match="closed"):
        registry.get("db")


@pytest.mark.parametrize("segment", ["db%0A", "db%0D", "db%09", "db1%2F..%2Fdb2", ".", "db."])
def test_in_process_ids_are_checked_after_url_decoding(tmp_path: Path, segment: str) -> None:
    """httpx hands the transport a decoded path: `db%0A` arrives as 'db\\n', which the old route
    check let through (its `$` matched before the newline) into a file named 'db\\n.sqlite'."""
    with LocalD1(tmp_path / "data") as engine, \
            httpx.Client(transport=LocalD1Transport(engine), headers=AUTH) as client:
        url = f"https://api.cloudflare.com/client/v4/accounts/acc/d1/database/{segment}/query"
        response = client.post(url, json={"sql": "CREATE TABLE t (x)"})
        assert response.status_code == 404 and response.json()["errors"][0]["code"] == 7003
    assert list(tmp_path.rglob("*.sqlite")) == []


def test_a_new_database_is_announced_and_can_be_refused(tmp_path):
    """A typo in an id used to make a new, empty database silently."""
    from d1saver.local.registry import Registry, UnknownDatabase

    created = []
    registry = Registry(tmp_path, on_create=lambda db, where: created.append((db, where)))
    registry.get("known")
    registry.get("known")
    assert created == [("known", str(tmp_path.resolve() / "known.sqlite"))]
    registry.close()
    strict = Registry(tmp_path, create=False)
    strict.get("known")  # its file exists
    with pytest.raises(UnknownDatabase):
        strict.get("knwon")
    assert not (tmp_path / "knwon.sqlite").exists()
    strict.close()


def test_a_strict_engine_answers_404_for_unknown_ids():
    import json

    from d1saver.local import LocalD1

    engine = LocalD1(create=False)
    path = "/client/v4/accounts/acc/d1/database/{}/query"
    body = json.dumps({"sql": "SELECT 1 AS one"}).encode()
    headers = {"Authorization": "Bearer t"}
    refused = engine.handle("POST", path.format("nope"), headers, body)
    assert refused.status == 404 and json.loads(refused.body)["errors"][0]["code"] == 7404
    engine.create_database("yes")
    assert engine.handle("POST", path.format("yes"), headers, body).status == 200
    engine.close()
