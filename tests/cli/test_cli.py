"""The `d1saver` command line as a whole: what starting it imports (benchmarks/cli_bench.py
times it), the global flags before or after a command, -h and -V, and tables that stay plain
text off a terminal."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from d1saver import __version__
from d1saver.cli import app

runner = CliRunner()
HEAVY = ("langgraph", "langchain_core", "httpx", "pydantic")


def imported(*args: str, code: str | None = None) -> set[str]:
    """The top-level packages a fresh interpreter has imported once `d1saver ARGS` has run
    (or `code`)."""
    return {name.split(".")[0] for name in modules(*args, code=code)}


def modules(*args: str, code: str | None = None) -> list[str]:
    """The modules a fresh interpreter has imported once `d1saver ARGS` has run (or `code`)."""
    run = code or (f"import sys\nsys.argv = ['d1saver', *{list(args)!r}]\n"
                   "from d1saver.cli import main\ntry:\n    main()\nexcept SystemExit:\n    pass\n")
    out = subprocess.run([sys.executable, "-c", run + "\nimport json, sys\n"
                          "print(json.dumps(sorted(sys.modules)), file=sys.stderr)"],
                         capture_output=True, text=True, check=True).stderr
    return list(json.loads(out.strip().splitlines()[-1]))


@pytest.mark.parametrize("args", [["--version"], ["-V"], ["--help"]], ids=" ".join)
def test_version_and_help_import_no_heavy_package(args: list[str]) -> None:
    """`d1saver --version` and `--help` load neither LangGraph, LangChain, httpx nor pydantic
    (0.2.0 loaded all four, 1.2-2.0 s before printing anything)."""
    assert not imported(*args) & set(HEAVY)


def test_a_command_s_help_imports_neither_langgraph_nor_httpx() -> None:
    """`d1saver threads --help` loads what Typer's help needs (recent Typer checks option values
    with pydantic), but not what the command runs."""
    assert not imported("threads", "--help") & {"langgraph", "langchain_core", "httpx"}


@pytest.mark.parametrize("args", [["--help"], ["threads", "--help"], ["store", "ls", "-h"]],
                         ids=" ".join)
def test_help_imports_no_opentelemetry_api(args: list[str]) -> None:
    """With OpenTelemetry installed (the otel extra), a help page opens no command span, so it
    does not import OpenTelemetry's API (about 65 ms): `opentelemetry` alone is the namespace
    package that finding the API imports."""
    pytest.importorskip("opentelemetry.trace")
    assert [m for m in modules(*args) if m.startswith("opentelemetry.")] == []


def test_the_command_modules_and_the_package_import_lightly() -> None:
    """The modules that declare the commands import Typer and d1saver's errors only; `import
    d1saver` loads a name's module when the name is first used."""
    code = ("import d1saver, d1saver.compaction, d1saver.cli.commands, d1saver.cli.maintenance,"
            " d1saver.local\n")
    assert not imported(code=code) & set(HEAVY)
    assert "langgraph" in imported(code="import d1saver\nd1saver.D1Saver\n")


def test_python_m_d1saver_runs_the_command() -> None:
    """`python -m d1saver` is the `d1saver` command (0.2.0's `python -m compaction` ran its
    maintenance commands, which `d1saver` mounts), and `d1saver.compaction` is importable."""
    out = subprocess.run([sys.executable, "-m", "d1saver", "--version"], check=True,
                         capture_output=True, text=True).stdout
    assert out.strip() == f"d1saver {__version__}"
    subprocess.run([sys.executable, "-m", "d1saver", "compact", "--help"], check=True,
                   capture_output=True)
    subprocess.run([sys.executable, "-c", "import d1saver.compaction.job"], check=True)


def test_the_package_still_exports_every_name() -> None:
    import d1saver

    for name in d1saver.__all__:
        assert getattr(d1saver, name) is not None, name
    assert set(d1saver.__all__) <= set(dir(d1saver))
    namespace: dict[str, object] = {}
    exec("from d1saver import *", namespace)
    assert {"D1Saver", "D1Store", "D1Cache", "admin", "__version__"} <= set(namespace)


@pytest.mark.parametrize("args", [["-V"], ["--version"], ["threads", "-V"],
                                  ["compact", "--keep", "1", "--version"]], ids=" ".join)
def test_version_short_and_after_a_command(args: list[str]) -> None:
    """-V was refused; --version worked only before a command."""
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert result.stdout == f"d1saver {__version__}\n"


@pytest.mark.parametrize("args", [["-h"], ["threads", "-h"], ["store", "-h"], ["store", "ls", "-h"],
                                  ["gateway", "-h"], ["gateway", "build", "-h"], ["cache", "clear", "-h"]],
                         ids=" ".join)
def test_h_is_help_everywhere(args: list[str]) -> None:
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "Usage:" in result.stdout


def test_global_flags_after_the_command(monkeypatch: pytest.MonkeyPatch) -> None:
    """-v, -vv, --verbose and --debug are taken after a command as before it (they used to be
    refused there: "No such option"); a command's own option of the same name keeps its
    meaning (`serve --verbose` logs request lines)."""
    env = {"D1_API_BASE_URL": "ftp://nowhere"}  # every connecting command stops at once, exit 2
    for flags in (["-v"], ["-vv"], ["--verbose"], ["--debug"], ["-v", "--debug"]):
        result = runner.invoke(app, ["threads", *flags], env=env)
        assert result.exit_code == 2 and "D1_API_BASE_URL" in result.stderr, (flags, result.output)
        assert "No such option" not in result.stderr
    serve = runner.invoke(app, ["serve", "--help"], env={"COLUMNS": "200"})
    assert "Log each request line." in serve.stdout


def test_tables_off_a_terminal_are_plain_and_whole(capsys: pytest.CaptureFixture[str]) -> None:
    """Through rich, but off a terminal: no colour, no markup read from the data, cells never
    cut or wrapped whatever their width, columns aligned, no trailing spaces."""
    from d1saver.cli.support import table

    long_id = "t-" + "x" * 300
    table(["thread_id", "bytes", "note"],
          [[long_id, 5, "[bold]not markup[/bold]"], ["b", 12345, ""]], right=["bytes"])
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["thread_id", "bytes", "note"]
    assert lines[1].split() == [long_id, "5", "[bold]not", "markup[/bold]"]
    assert lines[2].rstrip() == lines[2] and lines[2].split() == ["b", "12345"]
    assert lines[1].index("5") == lines[2].index("12345") + 4  # numbers aligned right
    assert "\x1b" not in "".join(lines)


def test_compaction_exports_the_functions_named_like_its_modules() -> None:
    """`d1saver.compaction.rebalance` is the function, as 0.2.0's eager package bound it, even
    once the submodule of that name is imported (which names itself on the package)."""
    code = ("import d1saver.compaction.rebalance, d1saver.compaction.job\n"
            "from d1saver import compaction\n"
            "from d1saver.compaction import rebalance, compact\n"
            "assert callable(rebalance)\n"
            "assert rebalance.__module__ == 'd1saver.compaction.rebalance'\n"
            "assert compaction.rebalance is rebalance and callable(compact)\n"
            "assert sorted(n for n in compaction.__all__ if getattr(compaction, n) is None) == []\n")
    subprocess.run([sys.executable, "-c", code], check=True)
