"""The databases d1saver 0.3.0 wrote (tests/data/v0_3_0.jsonl: stored by content, and sealed
under a key) read back identically with the current code, from 0.3.0's own schema (migrated by
the current code if it is newer), through the saver and through the graphs that wrote them."""

from __future__ import annotations

from collections.abc import Iterator
from functools import cache
from typing import Any

import pytest

from d1saver import D1Saver
from d1saver.local import LocalD1, LocalD1Transport
from tests.data import v0_1_0_fixture as read
from tests.data import v0_1_0_graphs as graphs
from tests.data import v0_3_0_fixture as fx


@cache
def rows() -> list[dict[str, Any]]:
    return fx.read_rows()


@cache
def expected() -> dict[str, Any]:
    return fx.expected()


@pytest.fixture(params=fx.DATABASES)
def loaded(request: pytest.FixtureRequest) -> Iterator[tuple[str, D1Saver, LocalD1]]:
    database = request.param
    engine = LocalD1()
    keys = [fx.KEY] if database == "keyed" else None

    def saver(**kwargs: Any) -> D1Saver:
        return D1Saver(account_id="acc", database_id=f"v030-{database}", api_token="token",
                       api_base_url="http://d1.local/client/v4", transport=LocalD1Transport(engine),
                       encryption_keys=keys, **kwargs)

    with saver(auto_setup=False) as loader:
        fx.create_schema(loader)
        counts = fx.load_rows(loader, rows(), database, expected()["columns"])
    assert {t: n for t, n in counts.items() if n} == expected()["row_counts"][database]
    with saver() as current:
        yield database, current, engine
    engine.close()


def test_the_schema_is_0_2_0s() -> None:
    import hashlib

    digest = hashlib.sha256(fx.SCHEMA_PATH.read_bytes()).hexdigest()
    assert digest == expected()["generated_by"]["schema_sql_sha256"]


@pytest.mark.parametrize("name", graphs.THREADS)
def test_reads_back_identically(loaded: tuple[str, D1Saver, LocalD1], name: str) -> None:
    database, saver, _ = loaded
    subst = {n: n for n in graphs.THREADS}
    want = expected()["databases"][database]
    assert read.read_thread(saver, name, subst) == want["threads"][name]
    assert read.read_graph(graphs.graph_for(name, saver), name, subst) == want["graphs"][name]


def test_memory_reads_back_identically(loaded: tuple[str, D1Saver, LocalD1]) -> None:
    """Store items (with vectors, searched by meaning and filtered) and cache entries."""
    from tests.data.make_v0_3_0 import memory, read_memory

    database, _, engine = loaded
    assert read_memory(*memory(engine, database)) == expected()["databases"][database]["memory"]
