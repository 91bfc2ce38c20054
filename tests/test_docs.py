"""The docs site's command-line reference is generated from the Typer app, never written twice:
it must match what the app says today (`./dev docs` regenerates it). Every code fence in the docs
and the README is closed, and the guides speak to pip users."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_cli_reference_is_current(tmp_path: Path) -> None:
    out = tmp_path / "cli.md"
    subprocess.run([sys.executable, "-m", "typer", "d1saver.cli.commands", "utils", "docs", "--name", "d1saver",
                    "--title", "Command line", "--output", str(out)], check=True, capture_output=True, cwd=ROOT)
    committed = (ROOT / "docs" / "reference" / "cli.md").read_text()
    assert out.read_text() == committed, "docs/reference/cli.md is stale: run ./dev docs"


def test_every_page_is_in_the_nav() -> None:
    nav = (ROOT / "mkdocs.yml").read_text()
    pages = {p.relative_to(ROOT / "docs").as_posix() for p in (ROOT / "docs").rglob("*.md")}
    missing = sorted(p for p in pages if p not in nav)
    assert not missing, f"pages missing from mkdocs.yml's nav: {missing}"


MARKDOWN = sorted([*(ROOT / "docs").rglob("*.md"), ROOT / "README.md"])
FENCE = re.compile(r"^(?P<indent>\s*)(?P<fence>`{3,}|~{3,})(?P<info>.*)$")


def unclosed_fences(text: str) -> list[int]:
    """Lines (1-based) of code fences never closed. As CommonMark reads them: a fence closes on
    a line of at least as many of the same character and nothing else, so a "```yaml" inside an
    open block is content, and one left open at the end swallows the rest of the page (or, where
    the opening one is missing, shows the code as a paragraph and opens a block at its end)."""
    open_at: tuple[int, str] | None = None
    for number, line in enumerate(text.splitlines(), 1):
        match = FENCE.match(line)
        if match is None:
            continue
        fence = match["fence"]
        if open_at is None:
            open_at = (number, fence)
        elif fence[0] == open_at[1][0] and len(fence) >= len(open_at[1]) and not match["info"].strip():
            open_at = None
    return [] if open_at is None else [open_at[0]]


def test_fence_check_finds_a_fence_left_open() -> None:
    assert unclosed_fences("a\n```sh\nx\n```\n") == []
    assert unclosed_fences("a\n```yaml\non: {}\n") == [2]
    assert unclosed_fences("```sh\n```yaml\n```\n") == []  # "```yaml" inside is content
    assert unclosed_fences("on: {}\njobs: x\n```\n") == [3]  # the opening fence was lost
    assert unclosed_fences("````md\n```\n````\n") == []


@pytest.mark.parametrize("page", MARKDOWN, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_code_fence_is_closed(page: Path) -> None:
    """mkdocs --strict passes an unclosed fence: the built page showed YAML as a paragraph."""
    assert unclosed_fences(page.read_text()) == [], f"{page.relative_to(ROOT)}: a code fence is never closed"


# ./dev's own verbs (developing d1saver); a d1saver command is written `d1saver X` for pip users.
DEV_VERBS = {"demo", "test", "bench", "docs", "soak", "setup"}


@pytest.mark.parametrize("page", sorted((ROOT / "docs" / "guide").glob("*.md")), ids=lambda p: p.name)
def test_the_guides_speak_to_pip_users(page: Path) -> None:
    """The guides used `./dev compact` and `./dev rekey`, which a pip user does not have."""
    commands = {m.group(1) for m in re.finditer(r"\./dev ([\w-]+)", page.read_text())}
    assert commands <= DEV_VERBS, f"{page.name} runs d1saver commands through ./dev: {sorted(commands - DEV_VERBS)}"


def test_configuration_leads_with_what_a_user_sets() -> None:
    """configuration.md opened with D1Saver's internals (base85, manifests, chunk trees) before
    a reader learned what to set: now the settings first, the stored format last."""
    text = (ROOT / "docs" / "guide" / "configuration.md").read_text()
    sections = re.findall(r"^## (.+)$", text, re.MULTILINE)
    assert sections[0] == "What you set" and sections[-1] == "How values are stored", sections
    first = text.index("## What you set")
    settings = text[first:text.index("\n## ", first + 1)]
    for name in ("CLOUDFLARE_ACCOUNT_ID", "CLOUDFLARE_API_TOKEN", "D1_DATABASE_ID", "D1_API_BASE_URL",
                 "D1SAVER_ENCRYPTION_KEYS"):
        assert f"`{name}`" in settings, name
    internals = text.index("## How values are stored")
    for word in ("base85", "manifest", "FastCDC"):
        assert text.index(word) > internals, f"{word!r} comes before the storage internals"


def _blocks(text: str, info: str) -> list[str]:
    """The contents of the fenced code blocks of `text` whose info string is `info`."""
    return re.findall(rf"^```{info}\n(.*?)^```$", text, re.MULTILINE | re.DOTALL)


@pytest.mark.parametrize("page", MARKDOWN, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_ci_recipes_install_d1saver_itself(page: Path) -> None:
    """The GitHub Actions recipe ran `pip install .`, which in a user's repository installs
    their own project, not d1saver: a recipe that runs d1saver installs it by name (or a git
    URL)."""
    for block in _blocks(page.read_text(), "yaml"):
        if "d1saver " not in block or "pip install" not in block:
            continue
        assert not re.search(r"pip install \.(\s|$|&)", block), block
        assert re.search(r"pip install ['\"]?d1saver\b", block), block
