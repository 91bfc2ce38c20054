"""`d1saver serve` through Typer's CliRunner: it serves only the databases it is told to, answers
any other id with D1's not-found error, and prints settings that work as printed.

The server really serves: `serve_forever` is replaced by a function that serves on a thread while
a saver talks to it over HTTP, then stops, so the command returns and the data directory can be
checked afterwards.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner, Result

from d1saver import D1Saver, QueryError, Statement
from d1saver.cli import app
from d1saver.local.server import LocalD1Server

EXPORT = re.compile(r"^\s*export (.*)$", re.MULTILINE)


@pytest.fixture
def while_serving(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[Callable[[str], Any]], None]]:
    """while_serving(check): `d1saver serve` runs check(base_url) while it serves, then stops."""
    serve_forever = LocalD1Server.serve_forever
    checks: list[Callable[[str], Any]] = []

    def serve_then_stop(self: LocalD1Server, poll_interval: float = 0.5) -> None:
        thread = threading.Thread(target=serve_forever, args=(self, 0.02), daemon=True)
        thread.start()
        try:
            for check in checks:
                check(f"http://127.0.0.1:{self.server_address[1]}/client/v4")
        finally:
            self.shutdown()
            thread.join(5)

    monkeypatch.setattr(LocalD1Server, "serve_forever", serve_then_stop)
    yield checks.append


def serve(*args: str) -> Result:
    result = CliRunner().invoke(app, ["serve", "--port", "0", *args], env={"LOCAL_D1_API_TOKEN": None})
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result


def printed_settings(result: Result) -> dict[str, str]:
    """The `export NAME=value ...` line of the banner, as a dict."""
    found = EXPORT.findall(result.stdout)
    assert len(found) == 1, result.stdout
    return dict(pair.split("=", 1) for pair in found[0].split())


def saver(settings: dict[str, str], **overrides: str) -> D1Saver:
    settings = {**settings, **overrides}
    return D1Saver(account_id=settings["CLOUDFLARE_ACCOUNT_ID"], database_id=settings["D1_DATABASE_ID"],
                   api_token=settings["CLOUDFLARE_API_TOKEN"], api_base_url=settings["D1_API_BASE_URL"])


def one(s: D1Saver, sql: str) -> Any:
    (result,) = s.client.execute([Statement(sql, [])])
    return result.rows[0][0]


def test_serve_refuses_an_unknown_database_id(tmp_path: Path, while_serving: Callable) -> None:
    """A typo in D1_DATABASE_ID used to get a new, empty database (exit 0, an empty table);
    now D1's own not-found error (404, code 7404) names it, and nothing is created."""
    seen: dict[str, Any] = {}

    def check(base_url: str) -> None:
        settings = {"D1_API_BASE_URL": base_url, "CLOUDFLARE_ACCOUNT_ID": "local",
                    "CLOUDFLARE_API_TOKEN": "local", "D1_DATABASE_ID": "agents"}
        with saver(settings) as good:
            good.setup()
            seen["tables"] = one(good, "SELECT count(*) FROM sqlite_master")
        with saver(settings, D1_DATABASE_ID="agentz") as typo, pytest.raises(QueryError) as refused:
            typo.setup()
        seen["error"] = refused.value

    while_serving(check)
    result = serve("--data-dir", str(tmp_path), "--database", "agents")
    assert result.exit_code == 0, result.output
    assert seen["tables"] > 0
    error = seen["error"]
    assert (error.status, error.code) == (404, 7404)
    assert "The database agentz could not be found" in str(error)
    assert "D1_DATABASE_ID" in str(error)  # the client's hint says what to check
    assert sorted(p.stem for p in tmp_path.glob("*.sqlite")) == ["agents"]
    assert not list(tmp_path.glob("agentz*"))


def test_serve_prints_settings_that_work_as_printed(while_serving: Callable) -> None:
    """The banner's `export ...` line points a saver at the served database, with a dummy token
    (the README used to leave D1_API_BASE_URL and the token to docs/guide/local-d1.md)."""
    written: list[str] = []

    def check(base_url: str) -> None:
        # The printed line is only readable once the command returns: it is checked against
        # the real address below; here the settings it will print are used.
        with saver({"D1_API_BASE_URL": base_url, "CLOUDFLARE_ACCOUNT_ID": "local",
                    "CLOUDFLARE_API_TOKEN": "local", "D1_DATABASE_ID": "local"}) as s:
            s.put({"configurable": {"thread_id": "t", "checkpoint_ns": ""}},
                  {"v": 1, "id": "1f000000-0000-6000-8000-000000000000", "ts": "2026-01-01T00:00:00+00:00",
                   "channel_values": {}, "channel_versions": {}, "versions_seen": {}},
                  {"source": "input", "step": -1, "parents": {}}, {})
            written.append(base_url)

    while_serving(check)
    result = serve()
    assert result.exit_code == 0, result.output
    settings = printed_settings(result)
    assert settings == {"D1_API_BASE_URL": written[0], "D1_DATABASE_ID": "local",
                        "CLOUDFLARE_ACCOUNT_ID": "local", "CLOUDFLARE_API_TOKEN": "local"}
    assert "databases: local;" in result.stdout


def test_serve_serves_every_database_named_and_those_in_its_data_dir(tmp_path: Path,
                                                                      while_serving: Callable) -> None:
    (tmp_path / "older").mkdir()
    answers: dict[str, int] = {}

    def check(base_url: str) -> None:
        for db in ("a", "b", "old", "local"):
            with saver({"D1_API_BASE_URL": base_url, "CLOUDFLARE_ACCOUNT_ID": "local",
                        "CLOUDFLARE_API_TOKEN": "local", "D1_DATABASE_ID": db}) as s:
                try:
                    one(s, "SELECT 1")
                    answers[db] = 200
                except QueryError as exc:
                    answers[db] = exc.status or 0

    first = serve("--data-dir", str(tmp_path), "--database", "old")  # leaves old.sqlite
    assert first.exit_code == 0, first.output
    while_serving(check)
    result = serve("--data-dir", str(tmp_path), "--database", "a", "--database", "b")
    assert result.exit_code == 0, result.output
    assert answers == {"a": 200, "b": 200, "old": 200, "local": 404}
    assert printed_settings(result)["D1_DATABASE_ID"] == "a"
    assert "databases: a, b, old;" in result.stdout
    assert sorted(p.stem for p in tmp_path.glob("*.sqlite")) == ["a", "b", "old"]


def test_serve_create_still_creates_any_id(while_serving: Callable) -> None:
    """`--create` keeps the old behaviour for those who want it, and says so."""
    answers: list[int] = []

    def check(base_url: str) -> None:
        with saver({"D1_API_BASE_URL": base_url, "CLOUDFLARE_ACCOUNT_ID": "local",
                    "CLOUDFLARE_API_TOKEN": "local", "D1_DATABASE_ID": "anything"}) as s:
            answers.append(one(s, "SELECT 1"))

    while_serving(check)
    result = serve("--create")
    assert result.exit_code == 0, result.output
    assert answers == [1]
    assert "created database anything" in result.stderr
    assert "--create" in result.stdout


def test_serve_never_prints_a_required_token(while_serving: Callable) -> None:
    while_serving(lambda base_url: None)
    result = CliRunner().invoke(app, ["serve", "--port", "0"], env={"LOCAL_D1_API_TOKEN": "s3cret-token-77"})
    assert result.exit_code == 0, result.output
    assert "s3cret-token-77" not in result.output
    assert printed_settings(result)["CLOUDFLARE_API_TOKEN"].startswith("<")


def test_serve_refuses_an_invalid_database_name() -> None:
    result = serve("--database", "a/b")
    assert result.exit_code == 2 and result.stderr.startswith("error: --database")


def test_the_readme_quick_start_has_the_local_path_serve_prints(while_serving: Callable) -> None:
    """The README connected `d1saver serve` to no code: its quick start now has the settings the
    banner prints (at the default port), and the guides say the same; they work as written."""
    from d1saver.local.server import DEFAULT_PORT

    root = Path(__file__).resolve().parents[2]
    pages = [root / "README.md", root / "docs" / "guide" / "quickstart.md", root / "docs" / "guide" / "local-d1.md"]
    lines = {page.name: [line for line in EXPORT.findall(page.read_text()) if "D1_API_BASE_URL=" in line]
             for page in pages}
    assert all(len(found) == 1 for found in lines.values()), lines
    assert len({found[0] for found in lines.values()}) == 1, lines
    documented = dict(pair.split("=", 1) for pair in lines["README.md"][0].split())
    answers: list[int] = []

    def check(base_url: str) -> None:
        port = base_url.split(":")[2].split("/")[0]
        env = {**documented, "D1_API_BASE_URL": documented["D1_API_BASE_URL"].replace(str(DEFAULT_PORT), port)}
        with D1Saver.from_env(account_id=env["CLOUDFLARE_ACCOUNT_ID"], database_id=env["D1_DATABASE_ID"],
                              api_token=env["CLOUDFLARE_API_TOKEN"], api_base_url=env["D1_API_BASE_URL"]) as s:
            answers.append(one(s, "SELECT 1"))

    while_serving(check)
    result = serve()
    assert result.exit_code == 0, result.output
    printed = printed_settings(result)
    port = printed["D1_API_BASE_URL"].split(":")[2].split("/")[0]
    printed["D1_API_BASE_URL"] = printed["D1_API_BASE_URL"].replace(port, str(DEFAULT_PORT))
    assert printed == documented
    assert answers == [1]
