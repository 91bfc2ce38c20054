"""The web inspector in a real browser: Debian's chromium (/usr/bin/chromium), headless, driven
by Playwright's Python client, one browser for all of them. Every request the pages make is
watched: one to a host other than the inspector's fails the test, and so does any console error.

Without chromium or Playwright these tests skip, except under CI=true, where they fail
(./dev setup installs chromium with apt-get). Screenshots go to a temporary folder, or with
D1SAVER_SCREENSHOTS=1 to docs/guide/img/ (the docs show them): regenerate them with
    D1SAVER_SCREENSHOTS=1 .venv/bin/python -m pytest tests/ui/test_browser.py
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from tests.realengine import _in_ci
from tests.ui.conftest import World

CHROMIUM = Path("/usr/bin/chromium")
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run",
        "--disable-default-apps", "--disable-extensions", "--mute-audio"]
DOCS_IMG = Path(__file__).resolve().parents[2] / "docs" / "guide" / "img"


def _unavailable(reason: str) -> None:
    if _in_ci():
        pytest.fail(f"{reason} [CI is set: the browser tests must run, not skip]", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="module", autouse=True)
def _written_first(world: World, served: str) -> None:
    """The scenario is written (sync D1Store calls) and served before Playwright's sync API
    holds an asyncio loop on the main thread, where D1Store refuses sync calls as LangGraph's
    stores do."""


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """One headless chromium for every browser test (all in this module). Not per session:
    Playwright's sync API holds an asyncio loop on the main thread while it runs, and tests
    after these call asyncio.run()."""
    if not CHROMIUM.exists():
        _unavailable("no /usr/bin/chromium: apt-get install chromium (./dev setup does as root)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _unavailable("Playwright's Python client is missing: pip install -e '.[test]'")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
        yield browser
        browser.close()


class Watched:
    """A page whose requests and console are recorded: `foreign` lists requests to any host
    but the inspector's (each refused), `errors` console errors and uncaught exceptions."""

    def __init__(self, browser: Any, origin: str) -> None:
        self.origin = origin
        self.host = urlsplit(origin).netloc
        self.foreign: list[str] = []
        self.errors: list[str] = []
        self.requests: list[str] = []
        self.context = browser.new_context(viewport={"width": 1100, "height": 720},
                                           device_scale_factor=1)
        self.context.route("**/*", self._route)
        self.page = self.context.new_page()
        self.page.on("console", lambda m: self.errors.append(f"console {m.type}: {m.text}")
                     if m.type in ("error", "warning") else None)
        self.page.on("pageerror", lambda e: self.errors.append(f"page error: {e}"))

    def _route(self, route: Any) -> None:
        url = route.request.url
        self.requests.append(url)
        parts = urlsplit(url)
        if parts.scheme in ("data", "about") or parts.netloc == self.host:
            route.continue_()
        else:
            self.foreign.append(url)
            route.abort()

    def goto(self, path: str) -> Any:
        response = self.page.goto(self.origin + path)
        assert response is not None and response.status == 200, (path, response and response.status)
        return self.page

    def close(self) -> None:
        self.context.close()


@pytest.fixture
def web(browser: Any, served: str) -> Iterator[Watched]:
    watched = Watched(browser, served)
    yield watched
    watched.close()
    assert watched.foreign == [], f"requests left the machine: {watched.foreign}"
    assert watched.errors == [], watched.errors
    assert watched.requests, "the route watcher saw no request"


@pytest.fixture(scope="module")
def shots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if os.environ.get("D1SAVER_SCREENSHOTS") == "1":
        DOCS_IMG.mkdir(parents=True, exist_ok=True)
        return DOCS_IMG
    return tmp_path_factory.mktemp("screenshots")


def shoot(page: Any, folder: Path, name: str) -> None:
    path = folder / f"ui-{name}.png"
    page.screenshot(path=str(path))
    assert path.stat().st_size > 1000


def test_the_thread_list(web: Watched, world: World, shots: Path) -> None:
    """The list shows a page of threads with a next page; the filter narrows it; a thread
    waiting on an interrupt is marked; clicking a thread opens it."""
    page = web.goto("/")
    rows = page.locator("tr.thread")
    assert rows.count() == 10
    assert page.locator("a[rel=next]").count() == 1
    page.fill("input[name=q]", "trip")
    page.click("form.filter button")
    page.wait_for_url("**/?q=trip*")
    assert sorted(page.locator("tr.thread td:first-child").all_inner_texts()) == sorted(
        [world.scenario.forked, world.scenario.waiting])
    waiting = page.locator("tr.thread.waiting")
    assert waiting.count() == 1 and world.scenario.waiting in waiting.inner_text()
    assert "waiting on an interrupt" in waiting.inner_text()
    shoot(page, shots, "threads")
    page.click(f"text={world.scenario.waiting}")
    page.wait_for_url(f"**/threads/{world.scenario.waiting}")


def test_a_waiting_interrupt(web: Watched, world: World, shots: Path) -> None:
    """The thread page marks the checkpoint holding the interrupt, with its value; a click
    opens it, and the checkpoint says what it waits on."""
    page = web.goto(f"/threads/{world.scenario.waiting}")
    badge = page.locator("span.badge.interrupt").first
    assert "Book Casa Alfama" in badge.inner_text()
    row = page.locator("tr.checkpoint", has=page.locator("span.badge.interrupt"))
    assert "approval" in row.inner_text()  # its next task
    row.locator("td:nth-child(2) a").click()
    page.wait_for_selector("section.interrupts")
    assert "Book Casa Alfama for 3 nights?" in page.locator("section.interrupts").inner_text()
    shoot(page, shots, "interrupt")


def test_both_branches_of_a_fork(web: Watched, world: World, shots: Path) -> None:
    """Two branch heads in two lanes, joined at the fork point; each opens its checkpoint."""
    page = web.goto(f"/threads/{world.scenario.forked}")
    heads = page.locator("tr.checkpoint.head")
    assert heads.count() == 2
    lanes = {heads.nth(i).get_attribute("data-checkpoint"): heads.nth(i).get_attribute("data-lane")
             for i in range(2)}
    assert set(lanes) == set(world.scenario.branch_heads) and set(lanes.values()) == {"0", "1"}
    fork = page.locator("tr.checkpoint.fork")
    assert fork.get_attribute("data-checkpoint") == world.scenario.fork_point
    assert page.locator("td.graph svg line").count() > 0
    shoot(page, shots, "fork")
    for cid in world.scenario.branch_heads:
        page.click(f"a:has-text('{cid}')")
        page.wait_for_url(f"**/checkpoints/{cid}")
        assert cid in page.locator("h1").inner_text()
        page.go_back()


def test_a_checkpoints_messages(web: Watched, world: World, shots: Path) -> None:
    """The messages channel reads as a conversation; a long message is cut, and "show all"
    shows the rest; other values are collapsible."""
    s = world.scenario
    page = web.goto(f"/threads/{s.forked}/checkpoints/{s.branch_heads[0]}")
    roles = page.locator("#channel-messages li.message .role").all_inner_texts()
    assert [r.split(" ")[0].lower() for r in roles] == ["user", "assistant", "tool", "assistant",
                                                        "user", "assistant"]
    assert "weather" in page.locator(".tool-call").first.inner_text()
    shoot(page, shots, "checkpoint")
    cut = page.locator("#channel-messages .cut")
    assert "more characters" in cut.inner_text()
    cut.locator("a").click()
    page.wait_for_url("**full=1")
    assert page.locator("#channel-messages .cut").count() == 0
    details = page.locator("#channel-notes details.json")
    assert details.count() == 1


def test_a_diff(web: Watched, world: World, shots: Path) -> None:
    """Pick two checkpoints on the thread page and compare: the messages added show."""
    s = world.scenario
    page = web.goto(f"/threads/{s.forked}")
    page.check(f"tr[data-checkpoint='{s.fork_point}'] input[name=a]")
    page.check(f"tr[data-checkpoint='{s.branch_heads[1]}'] input[name=b]")
    page.click("text=Compare a → b")
    page.wait_for_url("**/diff?**")
    section = page.locator("#change-messages")
    assert "added 1" in section.inner_text() and "Porto instead?" in section.inner_text()
    shoot(page, shots, "diff")


def test_the_memory_pages(web: Watched, world: World, shots: Path) -> None:
    """Namespaces, the cache and the compaction runs; a namespace's items with their TTLs;
    a label holding '/' stays one label."""
    page = web.goto("/store")
    assert "node / weather" in page.locator("table.cache").inner_text()
    assert "done" in page.locator("table.runs").inner_text()
    shoot(page, shots, "memory")
    page.click("text=users / u1 / memories")
    page.wait_for_url("**/store/users/u1/memories")
    items = page.locator("section.item")
    assert items.count() == 2
    assert "TTL 60" in page.locator("#item-m1").inner_text()
    assert "no TTL" in page.locator("#item-m2").inner_text()
    shoot(page, shots, "namespace")
    page = web.goto("/store")
    page.click("text=docs / a/b")
    assert page.locator("h1").inner_text() == "Namespace docs / a/b"


def test_storage(web: Watched, world: World, shots: Path) -> None:
    """Bytes per thread as bars; a thread's growth as a chart of its own (inline SVG)."""
    page = web.goto("/storage")
    assert page.locator("svg.bar").count() == 10
    page.click(f"text={world.scenario.forked}")
    page.wait_for_url(f"**/storage/{world.scenario.forked}")
    assert page.locator("figure.chart polyline.total").count() == 1
    shoot(page, shots, "storage")


def test_a_foreign_request_would_fail(browser: Any, served: str) -> None:
    """The watcher itself: a page that asks another host is caught."""
    watched = Watched(browser, served)
    try:
        watched.page.set_content('<img src="http://example.invalid/x.png">')
        watched.page.wait_for_timeout(200)
        assert watched.foreign == ["http://example.invalid/x.png"]
    finally:
        watched.close()


def test_screenshots_are_small() -> None:
    """The committed screenshots (docs/guide/img) stay small."""
    found = sorted(DOCS_IMG.glob("ui-*.png"))
    assert found, "no screenshot in docs/guide/img: D1SAVER_SCREENSHOTS=1 pytest tests/ui/test_browser.py"
    assert all(p.stat().st_size < 200_000 for p in found), [(p.name, p.stat().st_size) for p in found]
