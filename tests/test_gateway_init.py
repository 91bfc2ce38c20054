"""`d1saver gateway init DIR` writes a folder a newcomer can follow and put in git: a .gitignore
that keeps the token out, the guide it follows (README.md, starting from `gateway init`, with
commands that work without a lockfile), and every page its files point at."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from d1saver.cli import app

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    target = tmp_path / "gw"
    result = CliRunner().invoke(app, ["gateway", "init", str(target)])
    assert result.exit_code == 0, result.output
    return target


def test_gateway_init_keeps_the_token_out_of_git(folder: Path) -> None:
    """The docs call .dev.vars gitignored: it now is, in the folder a user runs `git init` in."""
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    (folder / ".dev.vars").write_text("API_TOKEN=secret\n")
    (folder / "node_modules" / "wrangler").mkdir(parents=True)
    (folder / "node_modules" / "wrangler" / "index.js").write_text("")
    (folder / ".wrangler" / "state").mkdir(parents=True)
    (folder / ".wrangler" / "state" / "db.sqlite").write_text("")

    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=folder, check=True, capture_output=True, text=True).stdout

    git("init", "-q")
    git("add", "-A")
    staged = set(git("diff", "--cached", "--name-only").split())
    assert ".dev.vars" not in staged
    assert not [p for p in staged if p.startswith(("node_modules/", ".wrangler/"))]
    assert {".gitignore", ".dev.vars.example", "wrangler.toml", "worker/index.js", "README.md"} <= staged


def test_gateway_init_adds_to_a_gitignore_already_there(tmp_path: Path) -> None:
    (tmp_path / ".gitignore").write_text("*.log")
    result = CliRunner().invoke(app, ["gateway", "init", str(tmp_path)])
    assert result.exit_code == 0, result.output
    lines = (tmp_path / ".gitignore").read_text().splitlines()
    assert lines[0] == "*.log" and {".dev.vars", "node_modules/", ".wrangler/"} <= set(lines)
    again = CliRunner().invoke(app, ["gateway", "init", "--force", str(tmp_path)])
    assert again.exit_code == 0
    assert (tmp_path / ".gitignore").read_text().splitlines() == lines  # nothing added twice


def test_the_gateway_guide_starts_from_gateway_init_and_works_without_a_lockfile(folder: Path) -> None:
    """It used to start with `npm ci`, which fails where `gateway init` wrote no lockfile."""
    readme = (folder / "README.md").read_text()
    assert readme == (ROOT / "docs" / "guide" / "gateway.md").read_text().replace("](../", "](docs/")
    steps = re.search(r"^```sh\n(.*?)^```$", readme, re.MULTILINE | re.DOTALL)
    assert steps is not None
    commands = [line.split("#")[0].strip() for line in steps.group(1).splitlines()]
    commands = [c for c in commands if c]
    assert commands[0].startswith("d1saver gateway init ")
    if not (folder / "package-lock.json").exists():
        assert "npm ci" not in commands and "npm install" in commands


def test_every_page_the_gateway_files_name_is_in_the_folder(folder: Path) -> None:
    """The Worker's files named README sections and docs/ pages that a pip user's folder did
    not have."""
    written = {p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()}
    headings = set(re.findall(r"^#+ (.+)$", (folder / "README.md").read_text(), re.MULTILINE))
    for rel in sorted(written):
        if rel.endswith(".md"):
            continue
        text = (folder / rel).read_text()
        for page in re.findall(r"\bdocs/[\w./-]+\.md\b", text):
            assert page in written, f"{rel} names {page}, which gateway init does not write"
        for section in re.findall(r'README "([^"]+)"', text):
            assert section in headings, f"{rel} names the README section {section!r}, which README.md lacks"
    readme = (folder / "README.md").read_text()
    for target in re.findall(r"\]\(([^)#]+\.md)(?:#[^)]*)?\)", readme):
        if "://" not in target:
            assert target in written, f"README.md links to {target}, which gateway init does not write"
