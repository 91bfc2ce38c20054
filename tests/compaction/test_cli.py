"""The compaction commands (`d1saver compact|tag|untag|threads|history`) through Typer's
CliRunner, against a local D1 served over real HTTP, checked through the database itself.

Every invocation also checks that the API token (a sentinel) appears in no output.
"""

from __future__ import annotations

import json
import socket
import threading
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import pytest
import typer
from typer.testing import CliRunner, Result

from compaction import lease
from compaction.cli import app as compaction_app
from d1saver import D1Saver
from d1saver.cli import app as d1saver_app
from d1saver.local import make_server
from tests.compaction import LONG_AGO, checkpoint_id, ids_in, put_chain, query

TOKEN = "sentinel-token-5b0e91d7"
COMMANDS = ["compact", "rebalance", "tag", "untag", "threads", "history"]
runner = CliRunner()


# --- fixtures and helpers -------------------------------------------------------------------


@contextmanager
def serve(**kwargs: Any) -> Iterator[str]:
    """A local D1 over HTTP on a free port, in a daemon thread; gives its API base URL."""
    server = make_server("127.0.0.1", 0, None, **kwargs)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02},
                              daemon=True)
    thread.start()
    host, port = server.server_address[:2]
    try:
        yield f"http://{host}:{port}/client/v4"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


@pytest.fixture
def server() -> Iterator[str]:
    with serve() as base_url:
        yield base_url


def env_for(base_url: str, token: str = TOKEN) -> dict[str, str]:
    return {"CLOUDFLARE_ACCOUNT_ID": "acc", "CLOUDFLARE_API_TOKEN": token,
            "D1_DATABASE_ID": f"db-{uuid.uuid4().hex[:8]}", "D1_API_BASE_URL": base_url}


@pytest.fixture
def env(server: str) -> dict[str, str]:
    return env_for(server)


@pytest.fixture
def saver(env: dict[str, str]) -> Iterator[D1Saver]:
    """A saver on the same database as the commands, to seed and inspect it."""
    with D1Saver(account_id=env["CLOUDFLARE_ACCOUNT_ID"], database_id=env["D1_DATABASE_ID"],
                 api_token=TOKEN, api_base_url=env["D1_API_BASE_URL"]) as s:
        yield s


def cli(env: Mapping[str, str | None], *args: str, app: typer.Typer = d1saver_app) -> Result:
    """Invoke a command; the token must appear nowhere, and failures must be handled exits."""
    result = runner.invoke(app, list(args), env=env)
    assert TOKEN not in result.stdout and TOKEN not in result.stderr
    assert TOKEN not in repr(result.exception)
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result


def seed(saver: D1Saver, *threads: str, n: int = 5, **kwargs: Any) -> None:
    for tid in threads:
        put_chain(saver, tid, n, **kwargs)


def everything(saver: D1Saver) -> list[list[list[Any]]]:
    return [query(saver, "SELECT * FROM checkpoints ORDER BY 1, 2, 3"),
            query(saver, "SELECT * FROM writes ORDER BY 1, 2, 3, 4, 6"),
            query(saver, "SELECT thread_id, checkpoint_ns, checkpoint_id, name FROM tags ORDER BY 1, 2, 4")]


def newest(n: int, of: int = 5) -> list[str]:
    return [checkpoint_id(i) for i in range(of - n, of)]


# --- compact --------------------------------------------------------------------------------


def test_compact_all_json(saver: D1Saver, env: dict[str, str]) -> None:
    """`compact --keep 2 --all --json` prints the figures, and the database holds 2 per thread."""
    seed(saver, "a", "b", "c")
    result = cli(env, "compact", "--keep", "2", "--all", "--json")
    assert result.exit_code == 0, result.stderr
    figures = json.loads(result.stdout)
    assert {k: figures[k] for k in ("threads_scanned", "checkpoints_deleted", "writes_deleted",
                                    "checkpoints_kept")} == {
        "threads_scanned": 3, "checkpoints_deleted": 9, "writes_deleted": 9, "checkpoints_kept": 6}
    assert figures["requests"] == 5  # setup, list, acquire, 1 batch, release
    assert "plan" not in figures
    assert all(ids_in(saver, t) == newest(2) for t in "abc")


def test_compact_prints_a_human_summary(saver: D1Saver, env: dict[str, str]) -> None:
    """Without --json, compact prints one line of figures."""
    seed(saver, "a")
    result = cli(env, "compact", "--keep", "1", "--all")
    assert result.exit_code == 0
    assert "1 threads scanned; deleted 4 checkpoints and 4 writes" in result.stdout


def test_compact_dry_run_changes_nothing(saver: D1Saver, env: dict[str, str]) -> None:
    """`--dry-run` prints the plan per thread and changes no row."""
    seed(saver, "a", "b")
    before = everything(saver)
    result = cli(env, "compact", "--keep", "2", "--all", "--dry-run")
    assert result.exit_code == 0
    assert "dry run: nothing was changed" in result.stdout
    assert "  a: 3 of 5 checkpoints, 3 writes" in result.stdout
    assert "  b: 3 of 5 checkpoints, 3 writes" in result.stdout
    assert "would delete 6 checkpoints" in result.stdout
    assert everything(saver) == before


def test_compact_dry_run_json_has_the_plan(saver: D1Saver, env: dict[str, str]) -> None:
    """`--dry-run --json` includes the per-thread plan."""
    seed(saver, "a")
    result = cli(env, "compact", "--keep", "2", "--all", "--dry-run", "--json")
    figures = json.loads(result.stdout)
    assert figures["dry_run"] is True
    assert [(p["thread_id"], p["checkpoints_deleted"]) for p in figures["plan"]] == [("a", 3)]
    assert ids_in(saver, "a") == newest(5)


def test_compact_named_threads_only(saver: D1Saver, env: dict[str, str]) -> None:
    """`--thread A --thread B` compacts those two and leaves C alone."""
    seed(saver, "A", "B", "C")
    result = cli(env, "compact", "--keep", "1", "--thread", "A", "--thread", "B", "--json")
    assert json.loads(result.stdout)["threads_scanned"] == 2
    assert (ids_in(saver, "A"), ids_in(saver, "B"), ids_in(saver, "C")) == (
        newest(1), newest(1), newest(5))


@pytest.mark.parametrize("args", [[], ["--all", "--thread", "a"]], ids=["neither", "both"])
def test_compact_needs_thread_xor_all(saver: D1Saver, env: dict[str, str], args: list[str]) -> None:
    """Neither or both of --thread and --all: exit 2, nothing changed."""
    seed(saver, "a")
    result = cli(env, "compact", "--keep", "1", *args)
    assert result.exit_code == 2
    assert "--thread" in result.stderr and "--all" in result.stderr
    assert ids_in(saver, "a") == newest(5)


@pytest.mark.parametrize("args", [["--keep", "0"], ["--keep", "1", "--max-age", "30x"]],
                         ids=["keep-0", "bad-duration"])
def test_compact_bad_options_exit_2(env: dict[str, str], args: list[str]) -> None:
    """--keep below 1 or an unreadable --max-age is a usage error (exit 2)."""
    assert cli(env, "compact", "--all", *args).exit_code == 2


def test_compact_max_age(saver: D1Saver, env: dict[str, str]) -> None:
    """`--max-age 30d` deletes threads idle longer than 30 days, all but their tags."""
    seed(saver, "active")
    old = put_chain(saver, "idle", 5, ts=LONG_AGO)
    saver.tag(old[1], "approval")
    result = cli(env, "compact", "--keep", "2", "--all", "--max-age", "30d", "--json")
    assert json.loads(result.stdout)["threads_expired"] == 1
    assert ids_in(saver, "idle") == [checkpoint_id(1)]
    assert ids_in(saver, "active") == newest(2)


def test_compact_lease_held_exit_3(saver: D1Saver, env: dict[str, str]) -> None:
    """While another run holds the lease: exit 3 and nothing deleted; --break-lease overrides it."""
    seed(saver, "a")
    lease.acquire(saver, ttl=300)
    result = cli(env, "compact", "--keep", "1", "--all")
    assert result.exit_code == 3
    assert "holds the lease" in result.stderr
    assert ids_in(saver, "a") == newest(5)
    assert cli(env, "compact", "--keep", "1", "--all", "--break-lease").exit_code == 0
    assert ids_in(saver, "a") == newest(1)


# --- tag and untag --------------------------------------------------------------------------


def test_tag_keeps_and_untag_releases(saver: D1Saver, env: dict[str, str]) -> None:
    """A tagged checkpoint survives `compact`; after `untag` the next `compact` removes it."""
    seed(saver, "a")
    tagged = cli(env, "tag", "a", checkpoint_id(1), "approval")
    assert tagged.exit_code == 0 and "approval" in tagged.stdout
    cli(env, "compact", "--keep", "1", "--all")
    assert ids_in(saver, "a") == [checkpoint_id(1), checkpoint_id(4)]
    assert cli(env, "untag", "a", "approval").exit_code == 0
    cli(env, "compact", "--keep", "1", "--all")
    assert ids_in(saver, "a") == newest(1)


def test_tag_in_a_namespace(saver: D1Saver, env: dict[str, str]) -> None:
    """`tag --ns child:1` tags the checkpoint of that namespace."""
    seed(saver, "a", ns="child:1")
    assert cli(env, "tag", "a", checkpoint_id(0), "draft", "--ns", "child:1").exit_code == 0
    assert saver.tags({"configurable": {"thread_id": "a", "checkpoint_ns": "child:1"}}) == {
        "draft": checkpoint_id(0)}


def test_tag_missing_checkpoint_exit_4(saver: D1Saver, env: dict[str, str]) -> None:
    """Tagging a checkpoint that does not exist: exit 4, no tag stored."""
    seed(saver, "a")
    result = cli(env, "tag", "a", "no-such-checkpoint", "approval")
    assert result.exit_code == 4
    assert "no checkpoint" in result.stderr
    assert query(saver, "SELECT COUNT(*) FROM tags") == [[0]]


def test_untag_missing_tag_exit_4(saver: D1Saver, env: dict[str, str]) -> None:
    """Untagging a name the thread does not have: exit 4."""
    seed(saver, "a")
    result = cli(env, "untag", "a", "approval")
    assert result.exit_code == 4 and "no tag" in result.stderr


# --- threads and history --------------------------------------------------------------------


def test_threads_json(saver: D1Saver, env: dict[str, str]) -> None:
    """`threads --json` lists every thread with its checkpoints, namespaces, last update, bytes."""
    seed(saver, "a", n=3)
    seed(saver, "b", n=2)
    seed(saver, "b", n=2, ns="child:1")
    rows = json.loads(cli(env, "threads", "--json", "--sort", "id").stdout)
    assert [(r["thread_id"], r["checkpoints"], r["namespaces"]) for r in rows] == [
        ("a", 3, 1), ("b", 4, 2)]
    assert all(r["bytes"] > 0 and r["updated"] for r in rows)


def test_threads_table(saver: D1Saver, env: dict[str, str]) -> None:
    """`threads` prints a table with a header and a line per thread."""
    seed(saver, "a", n=3)
    lines = cli(env, "threads").stdout.splitlines()
    assert lines[0].split()[:2] == ["thread_id", "checkpoints"]
    assert lines[1].split()[:3] == ["a", "3", "1"]


def test_history_json(saver: D1Saver, env: dict[str, str]) -> None:
    """`history THREAD --json` lists its checkpoints newest first, with parents, writes and tags."""
    configs = put_chain(saver, "a", 3, writes=2)
    saver.tag(configs[0], "approval")
    rows = json.loads(cli(env, "history", "a", "--json").stdout)
    assert [r["checkpoint_id"] for r in rows] == [checkpoint_id(i) for i in (2, 1, 0)]
    assert [r["parent_checkpoint_id"] for r in rows] == [checkpoint_id(1), checkpoint_id(0), None]
    assert [r["step"] for r in rows] == [2, 1, 0]
    assert all(r["writes"] == 2 for r in rows)
    assert [r["tags"] for r in rows] == [None, None, "approval"]


def test_history_of_unknown_thread_exit_4(saver: D1Saver, env: dict[str, str]) -> None:
    """`history` of a thread without checkpoints: exit 4 (and [] with --json)."""
    seed(saver, "a")
    assert cli(env, "history", "nobody").exit_code == 4
    assert json.loads(cli(env, "history", "nobody", "--json").stdout) == []


# --- the other entry point ------------------------------------------------------------------


def test_compaction_app_runs_the_same_commands(saver: D1Saver, env: dict[str, str]) -> None:
    """`python -m compaction`'s app runs compact like `d1saver compact`."""
    seed(saver, "a")
    result = cli(env, "compact", "--keep", "1", "--all", "--json", app=compaction_app)
    assert json.loads(result.stdout)["checkpoints_deleted"] == 4
    assert ids_in(saver, "a") == newest(1)


# --- the token never shows; errors are clean -------------------------------------------------

ARGS = {"compact": ["--keep", "1", "--all"], "tag": ["a", checkpoint_id(0), "x"],
        "untag": ["a", "x"], "threads": [], "history": ["a"], "rebalance": []}


def unused_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("command", ["compact", "threads"])
def test_unreachable_server_exit_1_without_token(command: str) -> None:
    """No server at the URL: exit 1 with a one-line error, and no token anywhere."""
    env = env_for(f"http://127.0.0.1:{unused_port()}/client/v4")
    result = cli(env, command, *ARGS[command])
    assert result.exit_code == 1
    assert result.stderr.startswith("error: D1 request failed")


@pytest.mark.parametrize("command", COMMANDS)
def test_wrong_token_exit_1_without_token(command: str) -> None:
    """A server that wants another token: exit 1, the message names the variable, not its value."""
    with serve(api_token="right") as base_url:
        result = cli(env_for(base_url), command, *ARGS[command])
        assert result.exit_code == 1
        assert "CLOUDFLARE_API_TOKEN" in result.stderr


def test_flags_override_the_environment(saver: D1Saver, env: dict[str, str]) -> None:
    """--api-base-url and --database-id win over D1_API_BASE_URL and D1_DATABASE_ID."""
    seed(saver, "a")
    wrong = {**env, "D1_API_BASE_URL": f"http://127.0.0.1:{unused_port()}/client/v4",
             "D1_DATABASE_ID": "another-database"}
    result = cli(wrong, "threads", "--json", "--api-base-url", env["D1_API_BASE_URL"],
                 "--database-id", env["D1_DATABASE_ID"])
    assert [r["thread_id"] for r in json.loads(result.stdout)] == ["a"]


def test_missing_settings_exit_2(env: dict[str, str]) -> None:
    """Without CLOUDFLARE_API_TOKEN: exit 2, and the message names it."""
    result = cli({**env, "CLOUDFLARE_API_TOKEN": None}, "threads")
    assert result.exit_code == 2
    assert "CLOUDFLARE_API_TOKEN" in result.stderr


def test_malformed_base_url_is_a_clean_error() -> None:
    """A malformed D1_API_BASE_URL is a usage error: exit 2, one `error:` line naming it."""
    result = cli(env_for("http://[::1"), "threads")
    assert result.exit_code == 2
    assert result.stderr.startswith("error:") and "D1_API_BASE_URL" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


# --- help -----------------------------------------------------------------------------------


@pytest.mark.parametrize("app", [d1saver_app, compaction_app], ids=["d1saver", "compaction"])
@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_has_help(app: typer.Typer, command: str) -> None:
    """`COMMAND --help` exits 0 and shows the command's description and options."""
    result = cli({}, command, "--help", app=app)
    assert result.exit_code == 0
    summary = next(c for c in app.registered_commands if c.name == command).callback.__doc__
    assert summary.split(";")[0].split(":")[0][:30] in " ".join(result.stdout.split())
    assert "--api-base-url" in result.stdout


@pytest.mark.parametrize("app", [d1saver_app, compaction_app], ids=["d1saver", "compaction"])
def test_top_level_help_lists_the_commands(app: typer.Typer) -> None:
    """`--help` lists every compaction command."""
    result = cli({}, "--help", app=app)
    assert result.exit_code == 0
    assert all(command in result.stdout for command in COMMANDS)
