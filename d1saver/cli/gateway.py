"""`d1saver gateway init DIR`: write the gateway Worker (its JavaScript, a wrangler.toml to edit,
package.json, schema.sql) from the package's own copy, so a pip user can deploy it."""

from __future__ import annotations

import json
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path

# The Wrangler release the Worker is tested with (package.json's devDependency; a test holds
# the two equal).
WRANGLER_VERSION = "4.86.0"


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
    for name in ("wrangler.toml", "schema.sql", ".dev.vars.example"):
        out[name] = src.joinpath(name).read_text(encoding="utf-8")
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
    """Write the gateway into `directory`; refuses to overwrite a file unless `force`."""
    planned = {directory / rel: text for rel, text in files().items()}
    existing = [p for p in planned if p.exists()]
    if existing and not force:
        raise FileExistsError(f"{existing[0]} exists: pass --force to overwrite the gateway's files")
    for path, text in planned.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return sorted(planned)
