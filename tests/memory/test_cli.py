"""`d1saver store ...`, `d1saver cache clear` and the TTL sweep of `d1saver compact`, through
Typer's CliRunner against a local D1 served over real HTTP."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from d1saver.compaction.job import compact
from d1saver import D1Cache, D1Saver, D1Store
from tests.compaction.test_cli import TOKEN, cli, env_for


@pytest.fixture
def env(serve: Callable[..., str]) -> dict[str, str]:
    return env_for(serve())


def _kwargs(env: dict[str, str], **more: Any) -> dict[str, Any]:
    return {"account_id": env["CLOUDFLARE_ACCOUNT_ID"], "database_id": env["D1_DATABASE_ID"],
            "api_token": TOKEN, "api_base_url": env["D1_API_BASE_URL"], **more}


@pytest.fixture
def store(env: dict[str, str]) -> Iterator[D1Store]:
    with D1Store(**_kwargs(env)) as s:
        s.put(("users", "u1", "memories"), "m1", {"text": "likes coffee"})
        s.put(("users", "u1", "memories"), "m2", {"text": "lives in Lisbon"})
        s.put(("users", "u2"), "prefs", {"theme": "dark"})
        s.put(("a/b", "c"), "k", {"slash": True})
        yield s


def test_namespaces(store: D1Store, env: dict[str, str]) -> None:
    out = cli(env, "store", "namespaces")
    assert out.exit_code == 0, out.stderr
    assert out.stdout.splitlines() == ['["a/b", "c"]', "users/u1/memories", "users/u2"]
    out = cli(env, "store", "namespaces", "users", "--max-depth", "2", "--json")
    assert json.loads(out.stdout) == [["users", "u1"], ["users", "u2"]]
    out = cli(env, "store", "namespaces", '["a/b"]')
    assert out.stdout.splitlines() == ['["a/b", "c"]']


def test_ls_and_get(store: D1Store, env: dict[str, str]) -> None:
    out = cli(env, "store", "ls", "users/u1")
    assert out.exit_code == 0, out.stderr
    lines = out.stdout.splitlines()
    assert len(lines) == 2 and lines[0].startswith("users/u1/memories  m2  ")
    out = cli(env, "store", "ls", "users", "--json", "--limit", "1")
    assert json.loads(out.stdout)["key"] == "prefs"
    out = cli(env, "store", "get", "users/u1/memories", "m1")
    assert json.loads(out.stdout)["value"] == {"text": "likes coffee"}
    out = cli(env, "store", "get", "users/u1/memories", "nope")
    assert out.exit_code == 4


def test_rm_needs_yes_off_a_terminal(store: D1Store, env: dict[str, str]) -> None:
    out = cli(env, "store", "rm", "users/u1/memories", "m1")
    assert out.exit_code == 2 and "--yes" in out.stderr
    assert store.get(("users", "u1", "memories"), "m1") is not None
    out = cli(env, "store", "rm", "users/u1/memories", "m1", "--yes")
    assert out.exit_code == 0 and "deleted 1 item" in out.stdout
    assert store.get(("users", "u1", "memories"), "m1") is None
    out = cli(env, "store", "rm", "users", "--yes")
    assert "deleted 2 items" in out.stdout
    assert store.list_namespaces() == [("a/b", "c")]
    assert cli(env, "store", "rm", "users/u9", "k", "--yes").exit_code == 4


def test_bad_namespace_is_a_usage_error(store: D1Store, env: dict[str, str]) -> None:
    for bad in ['["unclosed', "a.b", '[1, 2]']:
        out = cli(env, "store", "ls", bad)
        assert out.exit_code == 2 and out.stderr.startswith("error:"), bad


def test_cache_clear(env: dict[str, str]) -> None:
    with D1Cache(**_kwargs(env)) as cache:
        cache.set({(("n", "a"), "k"): (1, None), (("n", "b"), "k"): (2, None)})
        out = cli(env, "cache", "clear", "n/a", "--yes")
        assert out.exit_code == 0, out.stderr
        assert cache.get([(("n", "a"), "k"), (("n", "b"), "k")]) == {(("n", "b"), "k"): 2}
        assert cli(env, "cache", "clear", "--yes").exit_code == 0
        assert cache.get([(("n", "b"), "k")]) == {}


def test_cache_clear_asks_and_counts(env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    """`cache clear` neither asked nor counted: off a terminal it now needs --yes (exit 2,
    nothing deleted), on one it asks, and it prints how many entries it deleted."""
    from typer.testing import CliRunner, _NamedTextIOWrapper  # type: ignore[attr-defined]

    with D1Cache(**_kwargs(env)) as cache:
        cache.set({(("n", "a"), f"k{i}"): (i, None) for i in range(3)})
        cache.set({(("n", "b"), "k"): (9, None)})
        refused = cli(env, "cache", "clear", "n/a")
        assert refused.exit_code == 2 and "--yes" in refused.stderr
        assert len(cache.get([(("n", "a"), f"k{i}") for i in range(3)])) == 3
        monkeypatch.setattr(_NamedTextIOWrapper, "isatty", lambda self: True, raising=False)
        from d1saver.cli import app
        no = CliRunner().invoke(app, ["cache", "clear", "n/a"], env=env, input="n\n")
        assert no.exit_code == 0 and "Delete the cache entries of namespace n/a?" in no.stdout
        assert len(cache.get([(("n", "a"), f"k{i}") for i in range(3)])) == 3
        yes = CliRunner().invoke(app, ["cache", "clear", "n/a"], env=env, input="y\n")
        assert yes.exit_code == 0 and "deleted 3 cache entries of namespace n/a" in yes.stdout
        assert cache.get([(("n", "a"), f"k{i}") for i in range(3)]) == {}
        again = cli(env, "cache", "clear", "n/a", "--yes")
        assert "deleted 0 cache entries" in again.stdout
        assert cli(env, "cache", "clear", "-y").stdout.strip() == "deleted 1 cache entry"
        assert cache.get([(("n", "b"), "k")]) == {}


def test_cache_clear_names_a_node_cache(env: dict[str, str]) -> None:
    """LangGraph's node cache namespaces hold labels with a period (module.function)."""
    node = ("__pregel_ns_writes", "__main__.double", "double")
    other = ("__pregel_ns_writes", "__main__.triple", "triple")
    with D1Cache(**_kwargs(env)) as cache:
        cache.set({(node, "k"): (1, None), (other, "k"): (2, None)})
        out = cli(env, "cache", "clear", "--yes", json.dumps(list(node)))
        assert out.exit_code == 0, out.stderr
        assert "__main__.double" in out.stdout
        assert cache.get([(node, "k"), (other, "k")]) == {(other, "k"): 2}
        out = cli(env, "cache", "clear", "--yes", "/".join(other))
        assert out.exit_code == 0, out.stderr
        assert cache.get([(other, "k")]) == {}
        for bad in ['["unclosed', "[1, 2]", '["a", null]']:
            out = cli(env, "cache", "clear", "--yes", bad)
            assert out.exit_code == 2 and out.stderr.startswith("error:"), bad


def test_compact_sweeps_expired_memory_and_cache(env: dict[str, str]) -> None:
    past = time.time() - 3600
    with D1Store(**_kwargs(env, clock=lambda: past)) as old, \
            D1Cache(**_kwargs(env, clock=lambda: past)) as old_cache, \
            D1Store(**_kwargs(env)) as store:
        old.put(("t",), "expired", {"v": 1}, ttl=1)
        old.put(("t",), "kept", {"v": 2})
        old_cache.set({(("c",), "expired"): (1, 60), (("c",), "kept"): (2, None)})
        out = cli(env, "compact", "--keep", "1", "--all", "--dry-run")
        assert out.exit_code == 0, out.stderr
        assert "would sweep 1 expired memory items and 1 cache entries" in out.stdout
        out = cli(env, "compact", "--keep", "1", "--all", "--json")
        figures = json.loads(out.stdout)
        assert (figures["store_items_swept"], figures["cache_entries_swept"]) == (1, 1)
        assert figures["requests"] == 3  # list (+ the schema's version), acquire; sweep + release
        rows = store._exchange(store._databases()[0], [_sql("SELECT key FROM store_items"),
                                                   _sql("SELECT key FROM cache_entries")])
        assert [r.rows for r in rows] == [[["kept"]], [["kept"]]]
        out = cli(env, "compact", "--keep", "1", "--all", "--no-sweep", "--json")
        assert json.loads(out.stdout)["store_items_swept"] == 0


def test_compact_library_sweep_counts(env: dict[str, str]) -> None:
    past = time.time() - 3600
    with D1Store(**_kwargs(env, clock=lambda: past)) as old, \
            D1Saver(**_kwargs(env)) as saver:
        old.batch([])
        for i in range(5):
            old.put(("t",), f"k{i}", {"v": i}, ttl=1)
        summary = compact(saver, keep=1, dry_run=True)
        assert summary.store_items_swept == 5
        summary = compact(saver, keep=1)
        assert summary.store_items_swept == 5
        assert compact(saver, keep=1).store_items_swept == 0


def test_a_thread_scoped_compaction_sweeps_no_memory(env: dict[str, str]) -> None:
    """`compact --thread X` compacts X: the database's expired memory is not its business
    (issue 30, fact 12); a whole-database run sweeps it."""
    past = time.time() - 3600
    with D1Store(**_kwargs(env, clock=lambda: past)) as old, \
            D1Cache(**_kwargs(env, clock=lambda: past)) as old_cache, \
            D1Saver(**_kwargs(env)) as saver:
        from tests.compaction import put_chain
        put_chain(saver, "t", 3)
        old.put(("t",), "expired", {"v": 1}, ttl=1)
        old_cache.set({(("c",), "expired"): (1, 60)})
        summary = compact(saver, keep=1, threads=["t"])
        assert summary.checkpoints_deleted == 2
        assert (summary.store_items_swept, summary.cache_entries_swept) == (0, 0)
        rows = old._exchange(old._databases()[0], [_sql("SELECT COUNT(*) FROM store_items"),
                                               _sql("SELECT COUNT(*) FROM cache_entries")])
        assert [r.rows for r in rows] == [[[1]], [[1]]]
        out = cli(env, "compact", "--keep", "1", "--thread", "t", "--json")
        assert json.loads(out.stdout)["store_items_swept"] == 0
        assert compact(saver, keep=1).store_items_swept == 1


def test_the_sweep_goes_by_the_databases_clock_not_the_compacting_machines(
        env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    """Writers stamp expiries with their clocks, which agree with the database's; a compacting
    machine whose clock runs an hour ahead must not sweep what expires in 30 minutes."""
    import d1saver.compaction.job
    with D1Store(**_kwargs(env)) as store, D1Cache(**_kwargs(env)) as cache, \
            D1Saver(**_kwargs(env)) as saver:
        store.put(("t",), "half an hour", {"v": 1}, ttl=30)
        cache.set({(("c",), "half an hour"): (1, 1800)})
        ahead = time.time() + 3600
        monkeypatch.setattr(d1saver.compaction.job.time, "time", lambda: ahead)
        dry = compact(saver, keep=1, dry_run=True)
        summary = compact(saver, keep=1)
        assert (dry.store_items_swept, dry.cache_entries_swept) == (0, 0)
        assert (summary.store_items_swept, summary.cache_entries_swept) == (0, 0)
        assert store.get(("t",), "half an hour") is not None
        assert cache.get([(("c",), "half an hour")]) == {(("c",), "half an hour"): 1}


def _sql(text: str) -> Any:
    from d1saver import Statement
    return Statement(text)


MEMORY_COMMANDS = [["store", "namespaces"], ["store", "ls", "a/b"], ["store", "get", "a", "k"],
                   ["store", "rm", "a", "k", "--yes"], ["cache", "clear", "--yes"],
                   ["cache", "clear", "a", "--yes"]]


@pytest.mark.parametrize("args", MEMORY_COMMANDS, ids=" ".join)
def test_wrong_token_and_no_server_exit_1_without_the_token(
        args: list[str], serve: Callable[..., str]) -> None:
    from tests.servers import closed_url
    out = cli(env_for(serve(api_token="right")), *args)
    assert out.exit_code == 1 and "CLOUDFLARE_API_TOKEN" in out.stderr
    out = cli(env_for(closed_url()), *args)
    assert out.exit_code == 1 and out.stderr.startswith("error:")


@pytest.mark.parametrize("args", MEMORY_COMMANDS, ids=" ".join)
def test_every_memory_command_has_help_and_takes_the_connection_flags(args: list[str]) -> None:
    out = cli({}, *args[:2], "--help")
    assert out.exit_code == 0 and "--api-base-url" in out.stdout and "--api-token" in out.stdout
