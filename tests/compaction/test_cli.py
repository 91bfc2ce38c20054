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

from d1saver.compaction import lease
from d1saver.cli.maintenance import app as compaction_app
from d1saver import D1Saver, Statement, admin
from d1saver.cli import app as d1saver_app
from d1saver.local import LocalD1
from tests.compaction import LONG_AGO, cfg, checkpoint_id, ids_in, put_chain, query
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
    assert figures["requests"] == 4  # list (the schema's version riding along), acquire, 1 batch, release
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
    """`history` of a thread without checkpoints: exit 4, and with --json [] and exit 4 too
    (0.2.0 exited 0 there, unlike every other not-found)."""
    seed(saver, "a")
    assert cli(env, "history", "nobody").exit_code == 4
    out = cli(env, "history", "nobody", "--json")
    assert json.loads(out.stdout) == [] and out.exit_code == 4


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
    """The maintenance commands' own app (d1saver.cli.maintenance) runs compact as `d1saver` does."""
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


# --- a newcomer's second hour (issue 28): each friction, fixed ------------------------------


def waiting_thread(saver: D1Saver, thread_id: str) -> None:
    """A real graph paused at interrupt() a moment ago: `ask` waits on a person."""
    from typing import TypedDict

    from langgraph.graph import END, START, StateGraph
    from langgraph.types import interrupt

    class State(TypedDict):
        answer: str

    def ask(state: State) -> dict[str, str]:
        return {"answer": interrupt({"question": "Book it?"})}

    graph = StateGraph(State)
    graph.add_node("ask", ask)
    graph.add_edge(START, "ask")
    graph.add_edge("ask", END)
    graph.compile(checkpointer=saver).invoke({"answer": ""},
                                             {"configurable": {"thread_id": thread_id}})


def test_max_age_0_is_refused_and_deletes_nothing(saver: D1Saver, env: dict[str, str]) -> None:
    """`--max-age 0d` used to delete every checkpoint of every thread, a thread paused at an
    interrupt seconds earlier included, without asking; 0 is now refused (leave --max-age out
    for no limit), and nothing changes."""
    seed(saver, "a")
    waiting_thread(saver, "waiting")
    before = everything(saver)
    result = cli(env, "compact", "--keep", "20", "--all", "--max-age", "0d")  # as in the issue
    assert_usage_error(result)
    assert everything(saver) == before
    for zero in ("0d", "0s", "0m"):
        result = cli(env, "compact", "--keep", "20", "--all", "--max-age", zero, "--yes")
        assert_usage_error(result)
        assert "--max-age" in result.stderr and "leave --max-age out" in result.stderr
    assert everything(saver) == before


def test_max_age_under_an_hour_needs_yes(saver: D1Saver, env: dict[str, str]) -> None:
    """Under an hour, --max-age asks on a terminal and needs --yes off one (exit 2, nothing
    changed); a dry run changes nothing, so it does not ask; an hour or more never asks."""
    waiting_thread(saver, "waiting")
    before = everything(saver)
    refused = cli(env, "compact", "--keep", "20", "--all", "--max-age", "30m")
    assert_usage_error(refused)
    assert "--yes" in refused.stderr and "interrupt" in refused.stderr
    assert everything(saver) == before
    dry = cli(env, "compact", "--keep", "20", "--all", "--max-age", "30m", "--dry-run", "--json")
    assert dry.exit_code == 0 and json.loads(dry.stdout)["threads_expired"] == 0
    assert cli(env, "compact", "--keep", "20", "--all", "--max-age", "1h").exit_code == 0
    assert everything(saver) == before
    assert cli(env, "compact", "--keep", "20", "--all", "--max-age", "0s", "--yes").exit_code == 2
    put_chain(saver, "minutes-ago", 3, ts=_ago(minutes=2))
    done = cli(env, "compact", "--keep", "20", "--all", "--max-age", "1m", "--yes", "--json")
    assert done.exit_code == 0, done.stderr
    assert json.loads(done.stdout)["threads_expired"] == 1
    assert ids_in(saver, "minutes-ago") == [] and ids_in(saver, "waiting") != []


def _ago(**delta: float) -> str:
    from datetime import datetime, timedelta, timezone

    return (datetime.now(timezone.utc) - timedelta(**delta)).isoformat()


def test_max_age_under_an_hour_asks_on_a_terminal(saver: D1Saver, env: dict[str, str],
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """On a terminal, under an hour asks first: no keeps everything, yes goes on."""
    from typer.testing import _NamedTextIOWrapper  # type: ignore[attr-defined]

    monkeypatch.setattr(_NamedTextIOWrapper, "isatty", lambda self: True, raising=False)
    put_chain(saver, "minutes-ago", 3, ts=_ago(minutes=2))
    before = everything(saver)
    no = runner.invoke(d1saver_app, ["compact", "--keep", "5", "--all", "--max-age", "1m"],
                       env=env, input="n\n")
    assert no.exit_code == 0 and "Go on?" in no.stdout and "nothing was changed" in no.stdout
    assert everything(saver) == before
    yes = runner.invoke(d1saver_app, ["compact", "--keep", "5", "--all", "--max-age", "1m"],
                        env=env, input="y\n")
    assert yes.exit_code == 0 and "1 idle threads expired" in yes.stdout
    assert ids_in(saver, "minutes-ago") == []


def test_compact_an_unknown_thread_exits_4(saver: D1Saver, env: dict[str, str]) -> None:
    """`compact --thread` of a thread without checkpoints exits 4 naming it (it used to exit
    0), as every other command does; the threads that exist are compacted (as `rm a b`
    removes a when b is missing), and --json names the missing ones."""
    seed(saver, "a")
    result = cli(env, "compact", "--keep", "1", "--thread", "a", "--thread", "nobody")
    assert result.exit_code == 4
    assert "'nobody'" in result.stderr and "d1saver threads" in result.stderr
    assert ids_in(saver, "a") == newest(1)
    as_json = cli(env, "compact", "--keep", "1", "--thread", "nobody", "--json")
    assert as_json.exit_code == 4 and json.loads(as_json.stdout)["threads_not_found"] == ["nobody"]
    dry = cli(env, "compact", "--keep", "1", "--thread", "nobody", "--dry-run")
    assert dry.exit_code == 4
    assert "threads_not_found" not in json.loads(
        cli(env, "compact", "--keep", "1", "--thread", "a", "--json").stdout)


def _shortest_unique(ids: list[str], of: str) -> str:
    """The shortest start of `of` that no other of `ids` shares."""
    return next(of[:n] for n in range(1, len(of) + 1)
                if not any(other.startswith(of[:n]) for other in ids if other != of))


def test_checkpoint_ids_by_unique_prefix(saver: D1Saver, env: dict[str, str]) -> None:
    """show, diff and tag take the start of a checkpoint id when no other id of the thread
    (in that namespace) starts the same; they used to need all 36 characters."""
    waiting_thread(saver, "a")  # LangGraph's own (uuid6) ids
    ids = [r["checkpoint_id"] for r in json.loads(cli(env, "history", "a", "--json").stdout)]
    last, first = ids[0], ids[-1]
    short_first, short_last = _shortest_unique(ids, first), _shortest_unique(ids, last)
    assert len(short_first) < 36 and len(short_last) < 36
    tagged = cli(env, "tag", "a", short_first, "approval")
    assert tagged.exit_code == 0, tagged.stderr
    assert saver.tags(cfg("a")) == {"approval": first}
    shown = json.loads(cli(env, "show", "a", "--checkpoint", short_last, "--json").stdout)
    assert shown["checkpoint_id"] == last
    diff = json.loads(cli(env, "diff", "a", short_first, short_last, "--json").stdout)
    assert (diff["a"], diff["b"]) == (first, last)
    exact = cli(env, "show", "a", "--checkpoint", last, "--json")
    assert json.loads(exact.stdout)["checkpoint_id"] == last
    # The same start in another thread, or an id equal to a start, does not make it ambiguous.
    put_chain(saver, "b", 2)
    seed(saver, "c", n=12)  # ...-000000000001 is an id, and the start of ...-000000000010
    assert cli(env, "tag", "c", checkpoint_id(1), "exact").exit_code == 0
    assert saver.tags(cfg("c")) == {"exact": checkpoint_id(1)}
    assert cli(env, "tag", "a", short_first, "again").exit_code == 0


def test_an_ambiguous_prefix_lists_the_matches(saver: D1Saver, env: dict[str, str]) -> None:
    """A start that several ids share: exit 2, one line listing them and pointing at history;
    nothing tagged."""
    seed(saver, "a", n=3)
    result = cli(env, "tag", "a", "1f00", "approval")
    assert_usage_error(result)
    assert all(checkpoint_id(i) in result.stderr for i in range(3))
    assert "d1saver history a" in result.stderr
    assert query(saver, "SELECT COUNT(*) FROM tags") == [[0]]
    assert cli(env, "show", "a", "--checkpoint", "1f00").exit_code == 2


def test_a_missing_checkpoint_points_at_history(saver: D1Saver, env: dict[str, str]) -> None:
    """No checkpoint of that id or start: exit 4, the error says so once and names `d1saver
    history` (it used to repeat itself: "checkpoint 'x' of thread 'a' has no checkpoint")."""
    seed(saver, "a")
    for args in (["show", "a", "--checkpoint", "nope"], ["diff", "a", "nope", checkpoint_id(0)],
                 ["tag", "a", "nope", "x"], ["show", "a", "--checkpoint", "9" * 36]):
        result = cli(env, *args)
        assert result.exit_code == 4, (args, result.stderr)
        assert result.stderr.count("checkpoint") <= 2, result.stderr
        assert "d1saver history a" in result.stderr


def test_history_shows_next_tasks_and_interrupts(saver: D1Saver, env: dict[str, str]) -> None:
    """history shows each checkpoint's next tasks and any interrupt, so the thread waiting on a
    person is found without running show on every thread; --json keeps its fields and gains
    `next`, `interrupts` and `sealed`."""
    waiting_thread(saver, "waiting")
    rows = json.loads(cli(env, "history", "waiting", "--json").stdout)
    assert {"checkpoint_id", "parent_checkpoint_id", "step", "source", "writes", "bytes",
            "tags", "checkpoint_ns", "ts"} <= set(rows[0])
    assert rows[0]["next"] == ["ask"] and rows[0]["sealed"] is None
    assert rows[0]["interrupts"][0][0]["value"] == {"question": "Book it?"}  # a list of Interrupts
    lines = cli(env, "history", "waiting").stdout.splitlines()
    assert lines[0].split()[:7] == ["checkpoint_id", "step", "source", "writes", "bytes",
                                    "next", "interrupt"]
    head = lines[1].split()
    assert head[0] == rows[0]["checkpoint_id"] and head[5] == "ask"
    assert "{\"question\":" in lines[1] and "Book it?" in lines[1]


def test_show_on_a_sealed_thread_without_the_key(serve: Callable[..., str]) -> None:
    """show of a checkpoint sealed under a key the command does not hold: what is in clear
    (step, source, parent, writes, bytes, tags, the clear metadata), what is sealed and under
    which key, exit 0; it used to fail whole. With the key, the values."""
    from d1saver.storage.crypto import new_key

    env = env_for(serve())
    key = new_key()
    with D1Saver(account_id="acc", database_id=env["D1_DATABASE_ID"], api_token=TOKEN,
                 api_base_url=env["D1_API_BASE_URL"], encryption_keys=[key]) as keyed:
        waiting_thread(keyed, "sealed")
        key_id = keyed.key_ids[0]
    text = cli(env, "show", "sealed")
    assert text.exit_code == 0, text.stderr
    assert f"sealed under key {key_id}" in text.stdout and "D1SAVER_ENCRYPTION_KEYS" in text.stdout
    assert "step 0" in text.stdout and "source loop" in text.stdout
    shown = json.loads(cli(env, "show", "sealed", "--json").stdout)
    assert shown["key_id"] == key_id and "encryption keys" in shown["sealed"]
    assert shown["metadata"]["source"] == "loop" and shown["step"] == 0
    other = cli({**env, "D1SAVER_ENCRYPTION_KEYS": new_key()}, "show", "sealed")
    assert other.exit_code == 0 and "UnknownKeyError" in other.stdout
    history_rows = json.loads(cli(env, "history", "sealed", "--json").stdout)
    assert all(r["sealed"] for r in history_rows)
    opened = json.loads(cli({**env, "D1SAVER_ENCRYPTION_KEYS": key}, "show", "sealed",
                            "--json").stdout)
    assert opened["next"] == ["ask"] and "sealed" not in opened


def test_verbose_logs_each_maintenance_step(saver: D1Saver, env: dict[str, str]) -> None:
    """-v logs compaction's steps (INFO on the d1saver logger), -vv each D1 request too
    (DEBUG), never the token or a value; the flags work before or after the command."""
    seed(saver, "a", "b", value=lambda i: f"secret-value-{i}")
    quiet = cli(env, "compact", "--keep", "4", "--all")
    assert quiet.stderr == ""
    one = cli(env, "compact", "--keep", "3", "--all", "-v")
    assert one.exit_code == 0, one.stderr
    assert "INFO" in one.stderr and "batch 1, 2 threads" in one.stderr
    assert "lease" in one.stderr and "DEBUG" not in one.stderr
    two = cli(env, "-v", "compact", "--keep", "2", "--all", "-v")
    assert "DEBUG" in two.stderr and "D1 request" in two.stderr and "batch 1" in two.stderr
    assert "secret-value" not in two.stderr + one.stderr
    assert cli(env, "threads", "--json", "--verbose").exit_code == 0


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
    if "t1" in args:  # one thread: not found, as a thread without checkpoints is
        assert f"thread 't1' has no checkpoints: its database {env['D1_DATABASE_ID']} has no " \
            "d1saver schema" in result.stderr and "`d1saver threads`" in result.stderr
    else:
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
