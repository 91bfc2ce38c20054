"""`wrangler deploy --dry-run` bundles the gateway offline, as CI runs it before a real deploy."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.realengine import ROOT, WRANGLER, WRANGLER_TOML, gateway_databases, require_wrangler, wrangler_env

pytestmark = pytest.mark.realengine


def test_deploy_dry_run(tmp_path: Path):
    require_wrangler()
    out = tmp_path / "bundle"
    # wrangler_env: no account variables and nothing that phones home, so this needs no network.
    done = subprocess.run(
        [str(WRANGLER), "deploy", "--dry-run", "--config", str(WRANGLER_TOML), "--outdir", str(out)],
        cwd=ROOT, env=wrangler_env(tmp_path), stdin=subprocess.DEVNULL, capture_output=True,
        text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "--dry-run: exiting now." in done.stdout
    for binding in gateway_databases():
        assert f"env.{binding} " in done.stdout
    bundle = (out / "index.js").read_text()
    assert "timingSafeEqual" in bundle and "DATABASES" in bundle  # the whole worker/, bundled
    assert "API_TOKEN" not in done.stdout  # no token among the bindings


def test_deploy_dry_run_of_gateway_init(tmp_path: Path):
    """The Worker `d1saver gateway init` writes is one `wrangler deploy` accepts, as it stands."""
    require_wrangler()
    from d1saver.cli.gateway import init

    site = tmp_path / "site"
    init(site)
    done = subprocess.run(
        [str(WRANGLER), "deploy", "--dry-run", "--outdir", str(tmp_path / "bundle")],
        cwd=site, env=wrangler_env(tmp_path), stdin=subprocess.DEVNULL, capture_output=True,
        text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "--dry-run: exiting now." in done.stdout
