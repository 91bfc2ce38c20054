"""`d1saver gateway init DIR`: write the gateway Worker (its JavaScript, a wrangler.toml to edit,
package.json, schema.sql) from the package's own copy, so a pip user can deploy it, with a
.gitignore that keeps the local token out of git and the pages of d1saver's docs its files name
(the gateway guide as README.md, and docs/), so every pointer in the folder resolves."""

from __future__ import annotations

import json
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path

# The Wrangler release the Worker is tested with (package.json's devDependency; a test holds
# the two equal).
WRANGLER_VERSION = "4.86.0"

# What git must never take from the folder: the local token (.dev.vars, read by `wrangler dev`),
# npm's and Wrangler's working files.
GITIGNORE = """\
# The local API token (`npx wrangler dev` reads it): never commit it.
.dev.vars
.dev.vars.*
!.dev.vars.example
node_modules/
.wrangler/
"""
# The pages of d1saver's docs that the Worker's files name, written under docs/; the gateway
# guide becomes README.md (its links to them rewritten to docs/).
DOCS = ("docs/COMPACTION.md", "docs/MIGRATIONS.md", "docs/REAL_ENGINE.md")
GUIDE = "docs/guide/gateway.md"


def _sources() -> Traversable | Path:
    """The gateway's files: package data in an install (setup.py copies them in), the checkout's
    top level in a source tree or an editable install."""
    packaged = resources.files("d1saver").joinpath("gateway")
    if packaged.joinpath("wrangler.toml").is_file():
        return packaged
    checkout = Path(__file__).resolve().parents[2]
    if (checkout / "pyproject.toml").is_file() and (checkout / "wrangler.toml").is_file():
        return checkout
    raise FileNotFoundError("d1saver's gateway files are missing from the package: reinstall d1saver "
                            "from a wheel or sdist built by its setup.py (which copies them in)")


def files() -> dict[str, str]:
    """Relative path -> text of every file `init` writes."""
    src = _sources()
    out: dict[str, str] = {}
    worker = src.joinpath("worker")
    for entry in sorted(worker.iterdir(), key=lambda e: e.name):
        if entry.is_file() and entry.name.endswith((".js", ".json")):
            out[f"worker/{entry.name}"] = entry.read_text(encoding="utf-8")
    for name in ("wrangler.toml", "schema.sql", ".dev.vars.example", *DOCS):
        out[name] = src.joinpath(*name.split("/")).read_text(encoding="utf-8")
    guide = src.joinpath(*GUIDE.split("/")).read_text(encoding="utf-8")
    out["README.md"] = guide.replace("](../", "](docs/")
    out[".gitignore"] = GITIGNORE
    out["package.json"] = json.dumps({
        "name": "d1saver-gateway",
        "private": True,
        "description": "d1saver's gateway Worker: D1's REST API on D1 bindings (and nightly compaction).",
        "license": "MIT",
        "scripts": {"dev": "wrangler dev", "deploy": "wrangler deploy"},
        "devDependencies": {"wrangler": WRANGLER_VERSION},
    }, indent=2) + "\n"
    return out


def init(directory: Path, *, force: bool = False) -> list[Path]:
    """Write the gateway into `directory`; refuses to overwrite a file unless `force`. A
    .gitignore already there is kept, with the gateway's lines it lacks added."""
    planned = {directory / rel: text for rel, text in files().items()}
    ignore = directory / ".gitignore"
    existing = [p for p in planned if p.exists() and p != ignore]
    if existing and not force:
        raise FileExistsError(f"{existing[0]} exists: pass --force to overwrite the gateway's files")
    if ignore.exists():
        kept = ignore.read_text(encoding="utf-8")
        lines = set(kept.splitlines())
        missing = [line for line in planned[ignore].splitlines() if line not in lines]
        if any(line and not line.startswith("#") for line in missing):
            planned[ignore] = kept + ("" if kept.endswith("\n") or not kept else "\n") + "\n".join(missing) + "\n"
        else:
            planned[ignore] = kept
    for path, text in planned.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return sorted(planned)
