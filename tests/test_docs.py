"""The docs site's command-line reference is generated from the Typer app, never written twice:
it must match what the app says today (`./dev docs` regenerates it)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

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
