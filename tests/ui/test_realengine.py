"""Each page of the web inspector loads directly by its URL on the local D1 and on Wrangler's
real D1 engine (the `backend` fixture): every read statement it sends runs on both."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from d1saver import D1Cache, D1Saver, D1Store
from d1saver.ui.app import Inspector, segment
from tests.conftest import Backend
from tests.ui.conftest import client_for
from tests.ui.scenario import Scenario, populate


@pytest.fixture
def written(backend: Backend) -> Iterator[tuple[Backend, Scenario, str]]:
    """The scenario under a fresh tag; on the shared real database, removed afterwards."""
    tag = f"-{uuid.uuid4().hex[:8]}"
    where: dict[str, Any] = dict(account_id=backend.account_id, database_id=backend.database_id,
                                 api_token=backend.api_token, api_base_url=backend.base_url,
                                 transport=backend.transport)
    with backend.saver() as saver, D1Store(**where) as store, D1Cache(**where) as cache:
        scenario = populate(saver, store, cache, plain=3, tag=tag, runs=backend.name == "local")
        try:
            yield backend, scenario, tag
        finally:
            for thread in [scenario.waiting, scenario.forked, *scenario.plain]:
                saver.delete_thread(thread)
            for first in (f"users{tag}", f"docs{tag}"):
                store.delete_namespace((first,))
            cache.clear([(f"node{tag}", "weather")])


def test_each_page_loads_by_its_url(written: tuple[Backend, Scenario, str]) -> None:
    backend, s, tag = written
    reader: D1Saver = backend.saver(auto_setup=False)
    with reader:
        client: httpx.Client = client_for(Inspector(reader))
        heads = client.get(f"/api/threads/{s.forked}").json()
        assert {r["checkpoint_id"] for r in heads} >= set(s.branch_heads)
        pages = {
            "/": "Threads",
            f"/?q={tag}&sort=bytes": s.forked,
            f"/?q={tag}": "waiting on an interrupt",
            f"/threads/{s.waiting}": "Book Casa Alfama",
            f"/threads/{s.forked}": "branch head",
            f"/threads/{s.forked}/checkpoints/{s.branch_heads[0]}": "calls <b>weather</b>",
            f"/threads/{s.forked}/diff?a={s.fork_point}&b={s.branch_heads[1]}": "Porto instead?",
            f"/storage?q={tag}": s.forked,
            f"/storage/{s.forked}": "<polyline",
            "/store": f"users{tag} / u1 / memories",
            "/store/" + "/".join(map(segment, s.namespace)): "likes tea",
            "/store/" + "/".join(map(segment, s.slashed)): "a/b",
        }
        for url, text in pages.items():
            page = client.get(url)
            assert page.status_code == 200, (backend.name, url, page.text[:800])
            assert text in page.text, (backend.name, url, text)
            assert "no d1saver schema" not in page.text
        rows = {r["thread_id"]: r for r in client.get("/api/threads", params={"q": tag}).json()}
        assert rows[s.waiting]["waiting"] and not rows[s.forked]["waiting"]
        growth = client.get(f"/api/storage/{s.forked}").json()
        assert growth[-1]["total"] == rows[s.forked]["bytes"]
