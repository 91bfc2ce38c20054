"""wrangler.toml and worker/ are fit to deploy: no secret in the config, a consistent id map, public APIs only."""

from __future__ import annotations

import re
import subprocess
import tomllib

from tests.realengine import ROOT, WRANGLER_TOML, gateway_databases


def _config() -> dict:
    with WRANGLER_TOML.open("rb") as f:
        return tomllib.load(f)


def test_no_token_in_wrangler_toml():
    config = _config()
    assert "API_TOKEN" not in config.get("vars", {})
    # Nothing else, secret or not: the id map and the scheduled compaction's settings.
    assert set(config.get("vars", {})) == {"DATABASES", "COMPACTION_KEEP", "COMPACTION_BATCHES"}
    assert not re.search(r"token|secret\s*=|password", WRANGLER_TOML.read_text().split("[vars]")[1], re.I)


def test_databases_map_each_binding_by_its_database_id():
    config = _config()
    bindings = {d["binding"]: d["database_id"] for d in config["d1_databases"]}
    assert gateway_databases() == bindings
    assert len(bindings) >= 4  # DB_A..DB_D for local multi-database tests
    assert len(set(bindings.values())) == len(bindings)


def test_dev_vars_is_ignored_and_the_example_is_not():
    def ignored(path: str) -> bool:
        return subprocess.run(["git", "check-ignore", "-q", path], cwd=ROOT).returncode == 0
    assert ignored(".dev.vars") and ignored(".dev.vars.production") and ignored(".env")
    assert not ignored(".dev.vars.example")
    assert (ROOT / ".dev.vars.example").read_text().count("API_TOKEN=") == 1


def test_worker_uses_only_the_public_binding_api():
    # `fetcher` is the binding's internal service (workerd's cloudflare-internal:d1-api).
    source = "\n".join(p.read_text() for p in sorted((ROOT / "worker").glob("*.js")))
    assert "fetcher" not in source
    assert set(re.findall(r"\bdb\.(\w+)\(", source)) == {"prepare", "batch"}
