"""The compaction commands (`d1saver compact|tag|untag|threads|history`) through Typer's
CliRunner, against a local D1 served over real HTTP, checked through the database itself;
then `d1saver serve` and `d1saver demo`, which follow the same conventions.

Every invocation also checks that the API token (a sentinel) appears in no output.
"""

from __future__ import annotations

import json
import sys
import unicodedata
import uuid
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import pytest
import typer
from typer.testing import CliRunner, Result

from compaction import lease
from compaction.cli import app as compaction_app
from d1saver import D1Saver, Statement, admin
from d1saver.cli import app as d1saver_app
from d1saver.local import LocalD1
from tests.compaction import LONG_AGO, checkpoint_id, ids_in, put_chain, query
from tests.reliability.test_faults import LoseNextResponse
from tests.servers import closed_url

TOKEN = "sentinel-token-5b0e91d7"
COMMANDS = ["compact", "rebalance", "rekey", "tag", "untag", "threads", "history", "check", "show", "diff"]
runner = CliRunner()


# --- fixtures and helpers -------------------------------------------------------------------


@pytest.fixture
def server(serve: Callable[..., str]) -> str:
    return serve()


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


def assert_usage_error(result: Result) -> None:
    """Exit 2 and a single `error:` line on stderr: no traceback, no framed panel."""
    assert result.exit_code == 2, (result.stdout, result.stderr)
    assert result.stderr.startswith("error:"), result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr


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
    """--keep below 1 or an unreadable --max-age is a usage error (exit 2, one line)."""
    assert_usage_error(cli(env, "compact", "--all", *args))


BAD_ARGUMENTS = {
    # Each used to exit 1 with a traceback, run anyway, or answer wrongly (defect 17).
    "max-age-overflows-timedelta": ["compact", "--keep", "1", "--all", "--max-age", "9999999999d"],
    "max-age-before-year-1": ["compact", "--keep", "1", "--all", "--max-age", "999999d"],
    "lease-ttl-negative": ["compact", "--keep", "1", "--all", "--lease-ttl", "-5"],
    "batch-checkpoints-0": ["compact", "--keep", "1", "--all", "--batch-checkpoints", "0"],
    "threads-limit-negative": ["threads", "--limit", "-1"],
    "history-limit-0": ["history", "a", "--limit", "0"],
}


@pytest.mark.parametrize("args", BAD_ARGUMENTS.values(), ids=BAD_ARGUMENTS.keys())
def test_bad_arguments_exit_2_and_change_nothing(saver: D1Saver, env: dict[str, str],
                                                 args: list[str]) -> None:
    """An out-of-range option is a usage error: exit 2, one line, and no row changed."""
    seed(saver, "a")
    before = everything(saver)
    assert_usage_error(cli(env, *args))
    assert everything(saver) == before


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


def test_untag_after_a_lost_response_exit_0(serve: Callable[..., str]) -> None:
    """`untag` whose first try removed the tag but lost its response: the retry finds no tag,
    and the command still says it untagged, exit 0 (defect 11)."""
    engine = LocalD1()
    base_url = serve(engine=engine)
    env = env_for(base_url)
    with D1Saver(account_id="acc", database_id=env["D1_DATABASE_ID"], api_token=TOKEN,
                 api_base_url=base_url) as saver:
        seed(saver, "a")
        assert cli(env, "tag", "a", checkpoint_id(1), "approval").exit_code == 0
        lose = LoseNextResponse()
        engine.faults = lose  # type: ignore[assignment]
        result = cli(env, "untag", "a", "approval")
        assert lose.used
        assert result.exit_code == 0, result.stderr
        assert "untagged 'approval'" in result.stdout
        assert query(saver, "SELECT COUNT(*) FROM tags") == [[0]]
    engine.close()


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


def test_threads_bytes_count_the_whole_storage(saver: D1Saver, env: dict[str, str]) -> None:
    """A thread's bytes are everything it stores: checkpoints, writes and chunk rows, not its
    checkpoint rows alone."""
    seed(saver, "a", n=3, writes=2, value=lambda i: [f"message {i}-{j} " * 20 for j in range(12)])
    whole = sum(query(saver, sql, "a")[0][0] or 0 for sql in (
        "SELECT SUM(LENGTH(checkpoint) + LENGTH(metadata)) FROM checkpoints WHERE thread_id = ?1",
        "SELECT SUM(LENGTH(value)) FROM writes WHERE thread_id = ?1",
        "SELECT SUM(LENGTH(data)) FROM d1saver_chunks WHERE thread_id = ?1"))
    assert query(saver, "SELECT COUNT(*) FROM d1saver_chunks WHERE thread_id = ?1", "a")[0][0] > 0
    (row,) = json.loads(cli(env, "threads", "--json").stdout)
    assert row["bytes"] == whole


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


# Stored ids and names are anyone's text: control characters in them must not reach a terminal.
HOSTILE = "evil\x1b]0;owned\x07\x1b[2J\x9b31m\u202e\r\n\\x1b"
HOSTILE_SHOWN = r"evil\x1b]0;owned\x07\x1b[2J\x9b31m\u202e\r\n\\x1b"


def assert_no_control_characters(text: str) -> None:
    assert not [c for c in text.replace("\n", "") if unicodedata.category(c) in ("Cc", "Cf")], text


def test_human_output_escapes_control_characters(saver: D1Saver, env: dict[str, str]) -> None:
    """`threads`, `history`, `compact --dry-run`, `tag` and `untag` show control characters in
    thread ids, namespaces and tag names escaped (as repr does); --json keeps them exact."""
    configs = put_chain(saver, HOSTILE, 3, ns=HOSTILE)
    saver.tag(configs[0], HOSTILE)
    assert [r["thread_id"] for r in json.loads(cli(env, "threads", "--json").stdout)] == [HOSTILE]
    rows = json.loads(cli(env, "history", HOSTILE, "--json").stdout)
    assert (rows[-1]["checkpoint_ns"], rows[-1]["tags"]) == (HOSTILE, HOSTILE)
    outputs = [
        cli(env, "threads").stdout,
        cli(env, "history", HOSTILE).stdout,
        cli(env, "compact", "--keep", "1", "--all", "--dry-run").stdout,
        cli(env, "tag", HOSTILE, checkpoint_id(1), HOSTILE, "--ns", HOSTILE).stdout,
        cli(env, "untag", HOSTILE, HOSTILE, "--ns", HOSTILE).stdout,
    ]
    for out in outputs:
        assert_no_control_characters(out)
        assert HOSTILE_SHOWN in out, out
    assert outputs[0].splitlines()[1].split()[0] == HOSTILE_SHOWN


# --- the other entry point ------------------------------------------------------------------


def test_compaction_app_runs_the_same_commands(saver: D1Saver, env: dict[str, str]) -> None:
    """`python -m compaction`'s app runs compact like `d1saver compact`."""
    seed(saver, "a")
    result = cli(env, "compact", "--keep", "1", "--all", "--json", app=compaction_app)
    assert json.loads(result.stdout)["checkpoints_deleted"] == 4
    assert ids_in(saver, "a") == newest(1)


# --- the token never shows; errors are clean -------------------------------------------------

ARGS = {"compact": ["--keep", "1", "--all"], "rekey": [], "tag": ["a", checkpoint_id(0), "x"],
        "untag": ["a", "x"], "threads": [], "history": ["a"], "rebalance": [], "check": [],
        "show": ["a"], "diff": ["a", checkpoint_id(0), checkpoint_id(1)]}
# Every command reads D1SAVER_ENCRYPTION_KEYS; rekey needs it.
KEYS_ENV = {"D1SAVER_ENCRYPTION_KEYS": "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8="}


@pytest.mark.parametrize("command", ["compact", "threads"])
def test_unreachable_server_exit_1_without_token(command: str) -> None:
    """No server at the URL: exit 1 with a one-line error, and no token anywhere."""
    env = env_for(closed_url())
    result = cli(env, command, *ARGS[command])
    assert result.exit_code == 1
    assert result.stderr.startswith("error: D1 request failed")


@pytest.mark.parametrize("command", COMMANDS)
def test_wrong_token_exit_1_without_token(command: str, serve: Callable[..., str]) -> None:
    """A server that wants another token: exit 1, the message names the variable, not its value."""
    result = cli({**env_for(serve(api_token="right")), **KEYS_ENV}, command, *ARGS[command])
    assert result.exit_code == 1
    assert "CLOUDFLARE_API_TOKEN" in result.stderr


def test_flags_override_the_environment(saver: D1Saver, env: dict[str, str]) -> None:
    """--api-base-url and --database-id win over D1_API_BASE_URL and D1_DATABASE_ID."""
    seed(saver, "a")
    wrong = {**env, "D1_API_BASE_URL": closed_url(),
             "D1_DATABASE_ID": "another-database"}
    result = cli(wrong, "threads", "--json", "--api-base-url", env["D1_API_BASE_URL"],
                 "--database-id", env["D1_DATABASE_ID"])
    assert [r["thread_id"] for r in json.loads(result.stdout)] == ["a"]


def test_missing_settings_exit_2(env: dict[str, str]) -> None:
    """Without CLOUDFLARE_API_TOKEN: exit 2, and the message names it."""
    result = cli({**env, "CLOUDFLARE_API_TOKEN": None}, "threads")
    assert result.exit_code == 2
    assert "CLOUDFLARE_API_TOKEN" in result.stderr


@pytest.mark.parametrize("url", ["", "client/v4", "ftp://127.0.0.1/client/v4"],
                         ids=["empty", "relative", "ftp"])
def test_empty_relative_or_non_http_base_url_exit_2(url: str) -> None:
    """D1_API_BASE_URL="" (or relative, or not http) is a usage error at once: exit 2, one line
    naming the variable; it used to be retried five times as a connection error, then exit 1."""
    result = cli(env_for(url), "threads")
    assert_usage_error(result)
    assert "D1_API_BASE_URL" in result.stderr


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


# --- d1saver's own commands: serve and demo ---------------------------------------------------

SERVE_BAD_ARGUMENTS = {
    "port-out-of-range": ["--port", "99999"],
    "rate-above-1": ["--fault-429", "2"],
    "rates-sum-above-1": ["--fault-429", "0.6", "--fault-5xx", "0.6"],
}


@pytest.mark.parametrize("args", SERVE_BAD_ARGUMENTS.values(), ids=SERVE_BAD_ARGUMENTS.keys())
def test_serve_bad_arguments_exit_2(args: list[str]) -> None:
    """`serve` refuses a port or fault rates out of range with one line (was: exit 1, traceback)."""
    assert_usage_error(cli({}, "serve", *args))


def test_demo_without_langgraph_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without LangGraph (the `demo` extra), `d1saver demo` exits 2 with the install command."""
    monkeypatch.setitem(sys.modules, "langgraph.graph", None)  # import fails as if not installed
    monkeypatch.delitem(sys.modules, "d1saver.demo", raising=False)
    result = cli({}, "demo")
    assert_usage_error(result)
    assert "pip install 'd1saver[demo]'" in result.stderr


def test_rebalance_refuses_a_negative_lease_ttl(env: dict[str, str]) -> None:
    result = cli(env, "rebalance", "--lease-ttl", "-5")
    assert_usage_error(result)
    assert "--lease-ttl" in result.stderr


def test_check_of_a_missing_thread_exits_4(saver: D1Saver, env: dict[str, str]) -> None:
    seed(saver, "a")
    assert cli(env, "check", "--thread-id", "a").exit_code == 0
    missing = cli(env, "check", "--thread-id", "no-such-thread")
    assert missing.exit_code == 4 and "no-such-thread" in missing.stderr


JSON_ARGS = {**ARGS, "compact": ["--keep", "2", "--all"], "tag": ["a", checkpoint_id(1), "x"], "untag": ["a", "x"],
             "diff": ["a", checkpoint_id(0), checkpoint_id(4)]}


@pytest.mark.parametrize("command", ["tag", "untag", "threads", "history", "check", "show", "diff", "rebalance",
                                     "rekey", "compact"])
def test_every_reporting_command_prints_one_json_document(command: str, saver: D1Saver,
                                                          env: dict[str, str]) -> None:
    """For cron monitoring: `--json` output is exactly one JSON document on stdout."""
    seed(saver, "a")
    if command == "untag":
        saver.tag({"configurable": {"thread_id": "a", "checkpoint_ns": "", "checkpoint_id": checkpoint_id(1)}}, "x")
    result = cli({**env, **(KEYS_ENV if command == "rekey" else {})}, command, *JSON_ARGS[command], "--json")
    assert result.exit_code == 0, (result.stdout, result.stderr)
    json.loads(result.stdout)


def test_the_token_can_be_given_as_an_option(saver: D1Saver, env: dict[str, str]) -> None:
    """`--api-token` stands in for CLOUDFLARE_API_TOKEN (and is never echoed)."""
    seed(saver, "a")
    result = cli({**env, "CLOUDFLARE_API_TOKEN": None}, "threads", "--json", "--api-token", TOKEN)
    assert result.exit_code == 0, result.stderr
    assert [r["thread_id"] for r in json.loads(result.stdout)] == ["a"]


# --- compact --history: the gateway Worker's scheduled runs ---------------------------------


def test_compact_history_shows_the_scheduled_runs(saver: D1Saver, env: dict[str, str]) -> None:
    """The records the Cron Trigger writes (with the statements it sends), newest first, as
    text and as JSON; --keep is needed only to compact."""
    saver.setup()
    empty = cli(env, "compact", "--history")
    assert empty.exit_code == 0 and "no scheduled compaction run" in empty.stdout
    db = env["D1_DATABASE_ID"]
    saver.execute([admin.run_begin("r1", db, "17 3 * * *", 5, None, "running", None),
                   admin.run_end("r1", db, "done", None, 12)])
    saver.execute([admin.run_begin("r2", db, "17 3 * * *", 5, 30, "skipped",
                                   "the lease is held by host:1:ab (42 s left)"),
                   admin.run_end("r2", db, "skipped", "the lease is held by host:1:ab (42 s left)", 0)])
    shown = cli(env, "compact", "--history", "--json")
    assert shown.exit_code == 0, shown.stderr
    runs = json.loads(shown.stdout)
    assert [r["run_id"] for r in runs] == ["r2", "r1"]
    assert runs[1]["threads_scanned"] == 12 and runs[1]["status"] == "done"
    assert runs[0]["max_age_days"] == 30 and "lease is held" in runs[0]["reason"]
    text = cli(env, "compact", "--history", "--limit", "1")
    assert text.exit_code == 0
    assert "skipped" in text.stdout and "lease is held" in text.stdout and "r1" not in text.stdout
    missing = cli(env, "compact", "--all")
    assert missing.exit_code == 2 and "--keep" in missing.stderr


# --- commands that only read never write (issue 30, fact 11) ---------------------------------

READ_ONLY = [("threads",), ("history", "t1"), ("check",), ("show", "t1"),
             ("diff", "t1", "a", "b"), ("compact", "--history"), ("store", "namespaces"),
             ("store", "ls", "users"), ("store", "get", "users/u1", "k")]


def _tables(env: Mapping[str, str]) -> list[str]:
    with D1Saver(account_id="acc", database_id=env["D1_DATABASE_ID"], api_token=TOKEN,
                 api_base_url=env["D1_API_BASE_URL"], auto_setup=False) as raw:
        (res,) = raw.execute([Statement("SELECT name FROM sqlite_master ORDER BY name")])
    return [r[0] for r in res.rows]


@pytest.mark.parametrize("args", READ_ONLY, ids=[" ".join(a) for a in READ_ONLY])
def test_a_command_that_only_reads_creates_no_schema(env: dict[str, str],
                                                      args: tuple[str, ...]) -> None:
    result = cli(env, *args)
    assert result.exit_code == 4, (result.stdout, result.stderr)
    assert f"database {env['D1_DATABASE_ID']}: the database has no d1saver schema" \
        in result.stderr
    assert _tables(env) == []  # nothing created


@pytest.mark.parametrize("args", READ_ONLY, ids=[" ".join(a) for a in READ_ONLY])
def test_a_command_that_only_reads_migrates_nothing(env: dict[str, str],
                                                    args: tuple[str, ...]) -> None:
    from tests.data import v0_1_0_fixture as v010
    with D1Saver(account_id="acc", database_id=env["D1_DATABASE_ID"], api_token=TOKEN,
                 api_base_url=env["D1_API_BASE_URL"], auto_setup=False) as old:
        v010.create_v010_schema(old)
    before = _tables(env)
    result = cli(env, *args)
    assert result.exit_code == 2, (result.stdout, result.stderr)
    assert "older than this d1saver's" in result.stderr and "does not migrate" in result.stderr
    assert _tables(env) == before


def test_read_only_commands_over_a_fleet_read_a_fresh_database_as_empty(
        env: dict[str, str], saver: D1Saver) -> None:
    seed(saver, "t1")
    fresh = f"{env['D1_DATABASE_ID']}-new"
    fleet = {**env, "D1_DATABASE_ID": f"{env['D1_DATABASE_ID']},{fresh}"}
    result = cli(fleet, "threads", "--json")
    assert result.exit_code == 0, result.stderr
    assert [t["thread_id"] for t in json.loads(result.stdout)] == ["t1"]
    assert _tables({**env, "D1_DATABASE_ID": fresh}) == []
