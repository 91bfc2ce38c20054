"""The web inspector in-process (httpx's WSGI transport) on the local D1: every page and its
/api twin, their content, paging and sorting in SQL, the CLI's JSON shapes, read-only, and what
it says of a database without the schema and of values sealed under a key it lacks."""

from __future__ import annotations

import json
import re
import time
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from typer.testing import CliRunner

from d1saver import D1Cache, D1Saver, D1Store
from d1saver.cli import app as d1saver_app
from d1saver.core.protocol import Statement
from d1saver.local import LocalD1, LocalD1Transport
from d1saver.sql.query import q
from d1saver.storage.crypto import Sealer, new_key
from d1saver.ui import tree
from d1saver.ui.app import Inspector, segment
from tests.ui.conftest import TOKEN, World, client_for
from tests.ui.scenario import LONG, populate

runner = CliRunner()


def pages(world: World) -> dict[str, list[str]]:
    """Every page of the scenario, each with texts it must show."""
    s = world.scenario
    return {
        "/": ["Threads", s.plain[-1], "next page"],
        "/?q=trip": [s.waiting, s.forked, "waiting on an interrupt"],
        "/threads?sort=bytes": [s.forked],
        f"/threads/{s.waiting}": ["interrupt: ", "Book Casa Alfama for 3 nights?", "approval"],
        f"/threads/{s.forked}": ["branch head", "fork", "research:"],
        f"/threads/{s.forked}/checkpoints/{s.branch_heads[0]}": ["Channels", "assistant",
                                                                "calls <b>weather</b>", "Metadata"],
        f"/threads/{s.forked}/diff?a={s.fork_point}&b={s.branch_heads[1]}": ["added 1", "Porto instead?"],
        "/storage": ["Storage", s.forked],
        f"/storage/{s.forked}": ["Storage of", "<polyline", "checkpoints"],
        "/store": ["users / u1 / memories", "node / weather", "Compaction runs", "done"],
        "/store/users/u1/memories": ["likes tea", "TTL 60", "no TTL"],
        "/store/users": ["users / u1 / memories", "users / u2 / prefs"],
        "/store/" + "/".join(segment(label) for label in s.slashed): ["a/b", "path"],
    }


def test_every_page_loads_directly(world: World, client: httpx.Client) -> None:
    """Each page answers 200 by its URL alone, shows what it is about, and names its JSON twin;
    the twin answers 200 with JSON."""
    for url, texts in pages(world).items():
        page = client.get(url)
        assert page.status_code == 200, (url, page.text[:500])
        assert page.headers["content-type"].startswith("text/html")
        for text in texts:
            assert text in page.text, (url, text)
        api = "/api" + (url if not url.startswith("/?") and url != "/" else "/threads" + url[1:])
        answer = client.get(api)
        assert answer.status_code == 200, (api, answer.text[:300])
        answer.json()


def test_pages_load_only_this_servers_stylesheet(world: World, client: httpx.Client) -> None:
    """No page names another origin: the one asset is /static/style.css, served from the
    package; the Content-Security-Policy forbids scripts and any other origin."""
    for url in pages(world):
        html = client.get(url).text
        refs = re.findall(r'(?:href|src|action)="([^"]*)"', html)
        assert all(r.startswith(("/", "?", "#", "data:")) for r in refs), (url, refs)
        assert "<script" not in html
    css = client.get("/static/style.css")
    assert css.status_code == 200 and css.headers["content-type"] == "text/css"
    assert "url(" not in css.text and "@import" not in css.text
    assert "script-src" not in client.get("/").headers["content-security-policy"]
    assert client.get("/static/../app.py").status_code == 404


def test_thread_list_api_is_the_cli_json(world: World, client: httpx.Client) -> None:
    """`/api/threads` returns what `d1saver threads --json` prints (same rows, same keys)."""
    cli = runner.invoke(d1saver_app, ["threads", "--json", "--limit", "0"], env=world.env())
    assert cli.exit_code == 0, cli.output
    api = client.get("/api/threads", params={"limit": 1000}).json()
    assert api == json.loads(cli.stdout)
    assert {r["thread_id"] for r in api} == {world.scenario.waiting, world.scenario.forked,
                                              *world.scenario.plain}


@pytest.mark.parametrize("command", ["history", "show", "diff"])
def test_thread_apis_have_the_cli_shapes(world: World, client: httpx.Client, command: str) -> None:
    """`/api/threads/T` is `history --json` (each row with its interrupts and next tasks); a
    checkpoint's API is `show --json`; a diff's is `diff --json`."""
    s = world.scenario
    args = {"history": ["history", s.forked, "--json"],
            "show": ["show", s.forked, "--checkpoint", s.branch_heads[0], "--json"],
            "diff": ["diff", s.forked, s.fork_point, s.branch_heads[1], "--json"]}[command]
    cli = runner.invoke(d1saver_app, args, env=world.env())
    assert cli.exit_code == 0, cli.output
    url = {"history": f"/api/threads/{s.forked}",
           "show": f"/api/threads/{s.forked}/checkpoints/{s.branch_heads[0]}",
           "diff": f"/api/threads/{s.forked}/diff?a={s.fork_point}&b={s.branch_heads[1]}"}[command]
    api = client.get(url).json()
    assert api == json.loads(cli.stdout)


def test_waiting_threads_are_marked(world: World, client: httpx.Client) -> None:
    """The thread paused on interrupt() is waiting; the one that was resumed is not; its
    thread page names the interrupt's value at the checkpoint that holds it."""
    rows = {r["thread_id"]: r for r in client.get("/api/threads", params={"limit": 100}).json()}
    assert rows[world.scenario.waiting]["waiting"] is True
    assert rows[world.scenario.forked]["waiting"] is False
    assert not any(rows[t]["waiting"] for t in world.scenario.plain)
    timeline = client.get(f"/api/threads/{world.scenario.waiting}").json()
    head = timeline[0]
    assert head["next"] == ["approval"]
    assert head["interrupts"][0][0]["value"] == {"question": "Book Casa Alfama for 3 nights?"}
    page = client.get(f"/threads/{world.scenario.waiting}/checkpoints/{head['checkpoint_id']}")
    assert "Waiting on an interrupt" in page.text


def test_a_fork_shows_both_branches(world: World, client: httpx.Client) -> None:
    """The forked thread's two newest checkpoints head two branches in two lanes, which join
    at the fork point."""
    html = client.get(f"/threads/{world.scenario.forked}").text
    rows = dict(re.findall(r'data-lane="(\d+)" data-checkpoint="([^"]+)"', html)[::-1])
    lanes = {cid: int(lane) for lane, cid in re.findall(
        r'data-lane="(\d+)" data-checkpoint="([^"]+)"', html)}
    assert rows
    heads = world.scenario.branch_heads
    assert {lanes[heads[0]], lanes[heads[1]]} == {0, 1}
    assert re.search(rf'class="checkpoint lane-0 fork" data-lane="0" data-checkpoint="'
                     rf'{world.scenario.fork_point}"', html)
    assert len(re.findall(r'class="checkpoint lane-\d head', html)) == 2


def test_lanes_draw_a_fork_as_two_branches() -> None:
    """tree.lanes: two children of one checkpoint take two lanes, joined at their parent."""
    rows = [{"checkpoint_id": "d", "parent_checkpoint_id": "b"},
            {"checkpoint_id": "c", "parent_checkpoint_id": "b"},
            {"checkpoint_id": "b", "parent_checkpoint_id": "a"},
            {"checkpoint_id": "a", "parent_checkpoint_id": None}]
    drawn = tree.lanes(rows)
    assert [(r["lane"], r["head"], r["fork"]) for r in drawn] == [
        (0, True, False), (1, True, False), (0, False, True), (0, False, False)]
    assert (tree.LANE + tree.LANE // 2, 0, tree.LANE // 2, tree.ROW // 2) in drawn[2]["lines"]


def test_a_checkpoint_shows_its_messages_as_a_conversation(world: World,
                                                           client: httpx.Client) -> None:
    """Roles, contents and tool calls; a long content is cut with a link to the whole of it."""
    url = f"/threads/{world.scenario.forked}/checkpoints/{world.scenario.branch_heads[0]}"
    html = client.get(url).text
    roles = re.findall(r'<li class="message role-(\w+)">', html)
    assert roles == ["human", "ai", "tool", "ai", "human", "ai"]
    assert "Plan a trip to Lisbon" in html and "Lisbon: 22°C and sunny" in html
    assert "calls <b>weather</b>" in html and "call_weather" in html
    assert LONG not in html and "more characters" in html and 'href="?full=1"' in html
    whole = client.get(url, params={"full": "1"}).text
    assert LONG.strip() in whole and "more characters" not in whole


def test_the_thread_list_is_filtered_sorted_and_paged(world: World, client: httpx.Client,
                                                      inspector: Inspector) -> None:
    """Pages follow each other through `next` until every thread was shown once; a filter
    keeps the ids that hold its text; by bytes, largest first. One request per page."""
    everything = client.get("/api/threads", params={"limit": 1000}).json()
    for sort, key in (("bytes", "bytes"), ("updated", "updated"), ("checkpoints", "checkpoints")):
        seen: list[dict[str, Any]] = []
        url: str | None = f"/api/threads?sort={sort}&limit=5"
        while url is not None:
            before = len(world.events)
            answer = client.get(url)
            assert len(world.events) - before == 1  # the page, in one request
            assert int(answer.headers["x-total-count"]) == len(everything)
            seen += answer.json()
            link = answer.headers.get("link")
            url = None if link is None else "/api/threads" + link[1:link.index(">")]
        assert sorted(r["thread_id"] for r in seen) == sorted(r["thread_id"] for r in everything)
        assert [r[key] for r in seen] == sorted((r[key] for r in seen), reverse=True)
    found = client.get("/api/threads", params={"q": "PLAIN-00"}).json()
    assert sorted(r["thread_id"] for r in found) == [f"plain-00{i}" for i in range(10)]
    assert client.get("/?q=nothing-holds-this").text.count('<tr class="thread') == 0


def test_storage_growth_adds_up(world: World, client: httpx.Client) -> None:
    """A thread's growth ends at the bytes the thread list gives it: every stored byte is
    counted once, where it first appeared."""
    rows = {r["thread_id"]: r for r in client.get("/api/threads", params={"limit": 100}).json()}
    for thread in (world.scenario.forked, world.scenario.waiting, world.scenario.plain[3]):
        growth = client.get(f"/api/storage/{thread}").json()
        assert growth[-1]["total"] == rows[thread]["bytes"], thread
        assert all(r["added"] > 0 for r in growth)
    storage = client.get("/api/storage").json()
    assert [r["bytes"] for r in storage] == sorted((r["bytes"] for r in storage), reverse=True)


def test_memory_pages(world: World, client: httpx.Client) -> None:
    """Namespaces with their counts, the items of one with values and TTLs, the cache's
    figures and the compaction runs recorded."""
    store = client.get("/api/store").json()
    assert [(n["namespace"], n["items"]) for n in store["namespaces"]] == [
        (["docs", "a/b"], 1), (["users", "u1", "memories"], 2), (["users", "u2", "prefs"], 1)]
    assert [(c["namespace"], c["entries"]) for c in store["cache"]] == [(["node", "weather"], 2)]
    assert [r["status"] for r in store["runs"]] == ["done"]
    page = client.get("/api/store/users/u1/memories").json()
    items = {i["key"]: i for i in page["items"]}
    assert items["m1"]["value"]["text"] == "likes tea" and items["m1"]["ttl_minutes"] == 60
    assert items["m1"]["expires_at"] is not None and items["m2"]["ttl_minutes"] is None
    assert client.get("/store/users/u1/memories/nothing").status_code == 404


def test_errors_are_pages(client: httpx.Client) -> None:
    """Unknown thread or checkpoint: 404; a malformed cursor or limit: 400; a write: 405."""
    assert client.get("/threads/no-such-thread").status_code == 404
    assert client.get("/api/threads/no-such-thread/checkpoints/x").status_code == 404
    assert client.get("/api/threads?after=not-json").status_code == 400
    assert client.get("/api/threads?limit=0").status_code == 400
    assert client.get("/api/threads?sort=size").status_code == 400
    assert client.get("/threads/x/diff").status_code == 400
    assert client.get("/nowhere").status_code == 404
    assert client.post("/").status_code == 405


WRITES = re.compile(r"^\s*(INSERT|UPDATE|DELETE|REPLACE|CREATE|DROP|ALTER)\b", re.I)


def test_the_inspector_writes_nothing(world: World, client: httpx.Client) -> None:
    """Across every page, every statement it sends only reads."""
    world.events.clear()
    for url in pages(world):
        client.get(url)
    statements = [s for e in world.events for s in e.statements]
    assert statements
    assert not [s.name for s in statements if WRITES.match(s.sql)], [s.name for s in statements]


def test_a_database_without_the_schema_is_reported_not_written() -> None:
    """A fresh database: every page says it has no schema, and it still has none after."""
    engine = LocalD1()
    where = dict(account_id="a", database_id="fresh", api_token="t",
                 api_base_url="http://d1.local/client/v4", transport=LocalD1Transport(engine))
    with D1Saver(**where, auto_setup=False) as reader:
        client = client_for(Inspector(reader))
        for url in ("/", "/storage", "/store"):
            page = client.get(url)
            assert page.status_code == 200, (url, page.text[:400])
            assert "no d1saver schema" in page.text
        assert client.get("/threads/t").status_code in (404, 502)
        tables = reader.client.execute([Statement.bind(q(
            "SELECT name FROM sqlite_master WHERE type = 'table'", name="TABLES"))])[0].rows
    assert tables == []
    engine.close()


def test_sealed_values_without_their_key_say_so() -> None:
    """Rows sealed under a key: without it, the pages open but say the values are sealed (and
    under which key); with it, they show the values."""
    engine = LocalD1()
    key = new_key()
    where = dict(account_id="a", database_id="keyed", api_token="t",
                 api_base_url="http://d1.local/client/v4", transport=LocalD1Transport(engine))
    with D1Saver(**where, encryption_keys=[key]) as saver, \
            D1Store(**where, encryption_keys=[key]) as store, \
            D1Cache(**where, encryption_keys=[key]) as cache:
        s = populate(saver, store, cache)
        key_id = saver.key_ids[0]
    with D1Saver(**where, auto_setup=False) as blind:
        client = client_for(Inspector(blind))
        thread = client.get(f"/threads/{s.waiting}")
        assert thread.status_code == 200 and "Values are sealed" in thread.text
        head = client.get(f"/api/threads/{s.waiting}").json()[0]["checkpoint_id"]
        page = client.get(f"/threads/{s.waiting}/checkpoints/{head}")
        assert page.status_code == 200 and f"sealed under key <code>{key_id}</code>" in page.text
        assert client.get(f"/api/threads/{s.waiting}/checkpoints/{head}").json()["key_id"] == key_id
        items = client.get("/api/store/users/u1/memories").json()["items"]
        assert items and all(i["value"] is None and i["sealed"] for i in items)
        assert "sealed: this value cannot be opened" in client.get("/store/users/u1/memories").text
    with D1Saver(**where, auto_setup=False, encryption_keys=[key]) as holder:
        client = client_for(Inspector(holder, sealer=Sealer([key])))
        page = client.get(f"/threads/{s.waiting}/checkpoints/{head}")
        assert "Waiting on an interrupt" in page.text and "sealed" not in page.text
        items = client.get("/api/store/users/u1/memories").json()["items"]
        assert {i["value"]["text"] for i in items} == {"likes tea", "lives in Lisbon"}
    engine.close()


def test_many_databases_are_one_list() -> None:
    """Over several databases, the list merges every database's page (each row naming its
    database), one request per database per page, and pages through all of them exactly."""
    engine = LocalD1()
    transport = LocalD1Transport(engine)
    ids = ["db-a", "db-b", "db-c"]
    where = dict(account_id="a", database_ids=ids, api_token="t",
                 api_base_url="http://d1.local/client/v4", transport=transport)
    with D1Saver(**where) as saver:
        threads = [f"t-{i:02d}" for i in range(20)]
        for thread in threads:
            from langgraph.checkpoint.base import empty_checkpoint

            saver.put({"configurable": {"thread_id": thread, "checkpoint_ns": ""}},
                      empty_checkpoint(), {"source": "input", "step": -1}, {})
        homes = {t: saver.home(t) for t in threads}
    events: list[Any] = []
    with D1Saver(**where, auto_setup=False, tracer=events.append) as reader:
        client = client_for(Inspector(reader))
        seen: list[dict[str, Any]] = []
        url: str | None = "/api/threads?sort=id&limit=6"
        while url is not None:
            before = len(events)
            answer = client.get(url)
            assert len(events) - before == len(ids)
            seen += answer.json()
            link = answer.headers.get("link")
            url = None if link is None else "/api/threads" + link[1:link.index(">")]
        assert [r["thread_id"] for r in seen] == threads
        assert {r["thread_id"]: r["database_id"] for r in seen} == homes
        assert "database" in client.get("/").text
    engine.close()


def test_ten_thousand_threads_one_request_a_page() -> None:
    """10,000 threads: a page sorted by bytes or by last update is one request that returns
    the page's rows (and one more, to know a next page exists), never the whole list."""
    engine = LocalD1()
    where = dict(account_id="a", database_id="big", api_token="t",
                 api_base_url="http://d1.local/client/v4", transport=LocalD1Transport(engine))
    with D1Saver(**where) as saver:
        saver.setup()
        seed = q("""INSERT INTO checkpoints (thread_id, checkpoint_ns, checkpoint_id, checkpoint,
                    metadata, ts)
                    WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < 19999)
                    SELECT printf('t-%05d', i / 2), '', printf('c-%05d', i), printf('%.*c', i % 997, 'x'),
                           '{}', printf('2026-01-01T00:%05d', i) FROM n""", name="SEED")
        saver.client.execute([Statement.bind(seed)])
    events: list[Any] = []
    with D1Saver(**where, auto_setup=False, tracer=events.append) as reader:
        client = client_for(Inspector(reader, page_size=50))
        for sort in ("bytes", "updated"):
            before = len(events)
            started = time.perf_counter()
            answer = client.get(f"/api/threads?sort={sort}")
            seconds = time.perf_counter() - started
            assert len(events) - before == 1
            assert answer.headers["x-total-count"] == "10000"
            rows = answer.json()
            assert len(rows) == 50
            print(f"10,000 threads, a page by {sort}: 1 request, {seconds:.3f} s in-process")
            if sort == "updated":
                assert rows[0]["thread_id"] == "t-09999"
            else:
                assert rows[0]["bytes"] == max(r["bytes"] for r in rows)
        nxt = client.get(f"/api/threads?sort=bytes&limit=50&after={quote(json.dumps(['', 'zz', '']))}")
        assert nxt.json() == []
    engine.close()


def test_d1saver_ui_serves_and_refuses_a_bad_port(world: World) -> None:
    """`d1saver ui --help` documents it; a port in use is a one-line usage error (exit 2)."""
    import socket

    assert runner.invoke(d1saver_app, ["ui", "--help"]).exit_code == 0
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = runner.invoke(d1saver_app, ["ui", "--port", str(port)], env=world.env())
    assert result.exit_code == 2 and "in use" in result.output, result.output
    assert TOKEN not in result.output


def test_store_paths_keep_labels_apart(world: World, client: httpx.Client) -> None:
    """A label holding '/' or '%' is one path segment (escaped twice), never two labels."""
    assert segment("a/b") == "a%252Fb" and segment("x%y") == "x%2525y" and segment("plain") == "plain"
    assert client.get("/store/docs/a/b").status_code == 404
    assert client.get("/store/docs/a%252Fb").status_code == 200
