"""Where threads live over several databases: rendezvous hashing, a user's route, and the
comma-separated D1_DATABASE_ID."""

from __future__ import annotations

import subprocess
import sys
from collections import Counter

import pytest

from d1saver import ConfigError, D1Saver, load_settings
from d1saver.fleet.routing import Router, rendezvous
from d1saver.local import LocalD1Transport

DBS = ["db-a", "db-b", "db-c", "db-d"]
THREADS = [f"thread-{i:05d}" for i in range(10_000)]


def test_homes_are_pinned() -> None:
    """The hash is part of the stored layout: changing it would misplace every thread, so
    these homes may never change (as a released format may not)."""
    assert {t: rendezvous(t, DBS) for t in [f"user-{i}" for i in range(8)]} == {
        "user-0": "db-b", "user-1": "db-a", "user-2": "db-d", "user-3": "db-b",
        "user-4": "db-c", "user-5": "db-c", "user-6": "db-d", "user-7": "db-d"}
    assert rendezvous("ünïcode", DBS) == "db-a" and rendezvous("", DBS) == "db-b"


def test_homes_agree_across_processes() -> None:
    """hashlib, not hash(): another interpreter (another PYTHONHASHSEED) agrees."""
    code = ("from d1saver.fleet.routing import rendezvous; "
            f"print(','.join(rendezvous(t, {DBS!r}) for t in {THREADS[:200]!r}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={"PYTHONHASHSEED": "12345", "PYTHONPATH": ":".join(sys.path)},
                         check=True).stdout.strip()
    assert out.split(",") == [rendezvous(t, DBS) for t in THREADS[:200]]


def test_threads_spread_evenly() -> None:
    counts = Counter(rendezvous(t, DBS) for t in THREADS)
    assert set(counts) == set(DBS)
    assert all(2_200 <= n <= 2_800 for n in counts.values()), counts


def test_adding_a_database_moves_about_one_in_n_and_none_between_old_ones() -> None:
    before = {t: rendezvous(t, DBS) for t in THREADS}
    after = {t: rendezvous(t, [*DBS, "db-e"]) for t in THREADS}
    moved = [t for t in THREADS if before[t] != after[t]]
    assert 1_700 <= len(moved) <= 2_300, len(moved)  # 1/5 of 10,000
    assert all(after[t] == "db-e" for t in moved)  # only to the new one


def test_removing_a_database_moves_only_its_threads() -> None:
    before = {t: rendezvous(t, DBS) for t in THREADS}
    after = {t: rendezvous(t, DBS[:3]) for t in THREADS}
    moved = {t for t in THREADS if before[t] != after[t]}
    assert moved == {t for t in THREADS if before[t] == "db-d"}


def test_order_of_the_list_does_not_matter() -> None:
    assert all(rendezvous(t, DBS) == rendezvous(t, list(reversed(DBS))) for t in THREADS[:500])


def test_a_route_decides_and_must_name_a_known_database() -> None:
    router = Router(DBS, route=lambda t: "db-c" if t.startswith("acme/") else "db-a")
    assert router.home("acme/1") == "db-c" and router.home("other") == "db-a"
    with pytest.raises(ConfigError, match="not one of"):
        Router(DBS, route=lambda t: "elsewhere").home("t")


def test_database_ids_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CLOUDFLARE_ACCOUNT_ID", "acc")
    monkeypatch.setenv("CLOUDFLARE_API_TOKEN", "token")
    monkeypatch.setenv("D1_DATABASE_ID", " db-a, db-b ,db-c")
    assert load_settings().database_ids == ["db-a", "db-b", "db-c"]
    saver = D1Saver.from_env(transport=LocalD1Transport())
    assert saver.database_ids == ("db-a", "db-b", "db-c") and saver.database_id is None
    assert "database_ids=['db-a', 'db-b', 'db-c']" in repr(saver)
    monkeypatch.setenv("D1_DATABASE_ID", "db-a")
    single = D1Saver.from_env(transport=LocalD1Transport())
    assert single.database_id == "db-a" and single.database_ids == ("db-a",)
    for bad in ("db-a,,db-b", "db-a,db-a", "db-a,../x", ","):
        monkeypatch.setenv("D1_DATABASE_ID", bad)
        with pytest.raises(ConfigError, match="D1_DATABASE_ID"):
            load_settings()


def test_exactly_one_of_database_id_and_database_ids() -> None:
    common = dict(account_id="acc", api_token="t", transport=LocalD1Transport())
    with pytest.raises(ConfigError, match="exactly one"):
        D1Saver(**common)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="exactly one"):
        D1Saver(database_id="a", database_ids=["b"], **common)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="distinct"):
        D1Saver(database_ids=["a", "a"], **common)  # type: ignore[arg-type]
    fleet = D1Saver(database_ids=["a", "b"], **common)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="spans 2 databases"):
        fleet.execute([])
    assert fleet.database("b").database_ids == ("b",)
    with pytest.raises(ConfigError, match="not one of"):
        fleet.database("c")
