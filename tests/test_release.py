"""One version everywhere, a licence in the metadata, and the command line's first impressions:
`--version`, a busy port, an unexpected error on one line."""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
import tomllib
from pathlib import Path

from typer.testing import CliRunner

import d1saver
from d1saver.cli import app

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
VERSION = PYPROJECT["project"]["version"]
D1SAVER = [sys.executable, "-c", "from d1saver.cli import main; main()"]


def test_one_version_everywhere() -> None:
    assert d1saver.__version__ == VERSION, "reinstall: the installed metadata is stale"
    assert json.loads((ROOT / "package.json").read_text())["version"] == VERSION
    dated = re.findall(r"^## (\d+\.\d+\.\d+) \(\d{4}-\d{2}-\d{2}\)", (ROOT / "CHANGELOG.md").read_text(), re.M)
    assert dated and dated[0] == VERSION, "the CHANGELOG's newest dated section names another version"


def test_version_option() -> None:
    result = CliRunner().invoke(app, ["--version"])
    assert result.exit_code == 0
    assert result.output.strip() == f"d1saver {VERSION}"


def test_licence_is_mit_everywhere() -> None:
    assert PYPROJECT["project"]["license"] == "MIT"
    assert (ROOT / "LICENSE").read_text().startswith("MIT License")
    assert json.loads((ROOT / "package.json").read_text())["license"] == "MIT"


def test_serve_on_a_busy_port_says_so_in_one_line() -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        done = subprocess.run([*D1SAVER, "serve", "--port", str(port)], capture_output=True, text=True,
                              timeout=60)
    assert done.returncode != 0
    assert done.stdout == "", "nothing is announced for a server that cannot start"
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and str(port) in lines[0] and "--port" in lines[0], done.stderr
    assert "Traceback" not in done.stderr


def test_serve_default_port_is_not_wranglers() -> None:
    from d1saver.local.server import DEFAULT_PORT

    assert DEFAULT_PORT != 8787


def test_unexpected_error_is_one_line_unless_debug(tmp_path: Path) -> None:
    # A data dir that is a file: the local D1 cannot open its databases there.
    blocker = tmp_path / "file"
    blocker.write_text("x")
    args = ["serve", "--port", "0", "--data-dir", str(blocker / "sub")]
    plain = subprocess.run([*D1SAVER, *args], capture_output=True, text=True, timeout=60)
    assert plain.returncode == 1, plain.stderr
    assert len(plain.stderr.strip().splitlines()) == 1 and "--debug" in plain.stderr
    debug = subprocess.run([*D1SAVER, "--debug", *args], capture_output=True, text=True, timeout=60)
    assert debug.returncode == 1 and "Traceback" in debug.stderr


def test_gateway_init_writes_the_worker(tmp_path: Path) -> None:
    from d1saver.cli.gateway import WRANGLER_VERSION

    target = tmp_path / "gw"
    result = CliRunner().invoke(app, ["gateway", "init", str(target)])
    assert result.exit_code == 0, result.output
    for rel in ("worker/index.js", "wrangler.toml", "package.json", "schema.sql", ".dev.vars.example"):
        assert (target / rel).is_file(), rel
    assert (target / "worker" / "index.js").read_text() == (ROOT / "worker" / "index.js").read_text()
    assert sorted(p.name for p in (target / "worker").iterdir()) == sorted(
        p.name for p in (ROOT / "worker").iterdir() if p.suffix in (".js", ".json"))
    package = json.loads((target / "package.json").read_text())
    assert package["devDependencies"]["wrangler"] == WRANGLER_VERSION
    assert json.loads((ROOT / "package.json").read_text())["devDependencies"]["wrangler"] == WRANGLER_VERSION
    again = CliRunner().invoke(app, ["gateway", "init", str(target)])
    assert again.exit_code == 2 and "--force" in again.output
    assert CliRunner().invoke(app, ["gateway", "init", "--force", str(target)]).exit_code == 0


def test_errors_name_the_address_and_the_fix() -> None:
    """A refused connection names the server and D1_API_BASE_URL; a base URL without /client/v4
    says so instead of a bare 404."""
    import pytest

    from d1saver import D1Error, D1Saver, RetryPolicy
    from d1saver.local import LocalD1, LocalD1Transport

    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    nobody = D1Saver(account_id="a", database_id="b", api_token="t",
                     api_base_url=f"http://127.0.0.1:{port}/client/v4", retry=RetryPolicy.none())
    with pytest.raises(D1Error) as refused:
        nobody.get_tuple({"configurable": {"thread_id": "x"}})
    assert f"127.0.0.1:{port}" in str(refused.value) and "D1_API_BASE_URL" in str(refused.value)
    nobody.close()
    wrong = D1Saver(account_id="a", database_id="b", api_token="t", api_base_url="http://d1.local",
                    transport=LocalD1Transport(LocalD1()), retry=RetryPolicy.none())
    with pytest.raises(D1Error) as missing:
        wrong.get_tuple({"configurable": {"thread_id": "x"}})
    assert "/client/v4" in str(missing.value)
    wrong.close()


def test_readme_is_a_newcomers_page() -> None:
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= 150
    head = "\n".join(lines[:40])
    assert "./dev demo" in head and "./dev test" in head


def test_page_size_below_one_is_refused() -> None:
    import pytest

    from d1saver import ConfigError, D1Saver
    from d1saver.local import LocalD1Transport

    for bad in (0, -1, 2.5, True):
        with pytest.raises(ConfigError, match="page_size"):
            D1Saver(account_id="a", database_id="b", api_token="t", api_base_url="http://d1.local/client/v4",
                    transport=LocalD1Transport(), page_size=bad)
