"""Pytest plugin: Cloudflare's real D1 engine (wrangler dev = workerd + miniflare's D1) as a backend.

Load it from tests/conftest.py with ``pytest_plugins = ["tests.realengine"]`` (or ``-p tests.realengine``).

The session fixture ``wrangler_d1`` starts ``wrangler dev --local`` on the gateway Worker
(worker/, configured by wrangler.toml), which answers D1's REST API paths
(``/client/v4/accounts/:a/d1/database/:db/query`` and ``/raw``) on loopback. Its token is a
fresh random API_TOKEN, given as a secret in a ``.dev.vars`` file written to a temp dir (never
the repository's). It applies no schema: the saver's setup does that.

The gateway serves one database per binding of wrangler.toml (DB_A..DB_D), chosen by the id
in the path. ``database_id`` is the first one's: the tests that need one database all share it
and isolate themselves with unique thread ids and table names; ``databases`` lists them all.
``gateway(secret_vars)`` starts another instance, e.g. one without a token.

Without Node or ``node_modules/.bin/wrangler`` (run ``npm ci``) the fixture skips, except when the
CI environment variable is set: then it fails, so CI can never skip the real engine silently.
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
import signal
import subprocess
import tempfile
import time
import tomllib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

ROOT = Path(__file__).resolve().parent.parent
WRANGLER = ROOT / "node_modules" / ".bin" / "wrangler"
WRANGLER_TOML = ROOT / "wrangler.toml"
STARTUP_TIMEOUT_S = 60.0
MIN_NODE = (20, 3)  # wrangler 4.86.0's engines field

# Variables that could point wrangler at a real account; a local run must never see them.
_ACCOUNT_VARS = ("CLOUDFLARE_API_TOKEN", "CLOUDFLARE_API_KEY", "CLOUDFLARE_EMAIL",
                 "CLOUDFLARE_ACCOUNT_ID", "CF_API_TOKEN", "CF_ACCOUNT_ID")


def gateway_databases(config: Path = WRANGLER_TOML) -> dict[str, str]:
    """The gateway's databases, binding -> database id, in wrangler.toml's order.

    The ids are the keys of DATABASES in [vars], the map the Worker routes by.
    """
    with config.open("rb") as f:
        doc = tomllib.load(f)
    return {binding: database_id for database_id, binding in doc["vars"]["DATABASES"].items()}


@dataclass
class RealD1:
    """Where the gateway listens; use as D1_API_BASE_URL / CLOUDFLARE_API_TOKEN / CLOUDFLARE_ACCOUNT_ID."""

    base_url: str  # e.g. http://127.0.0.1:PORT/client/v4
    api_token: str  # "" for a gateway started without the secret
    databases: dict[str, str]  # binding -> database id, as gateway_databases() reads them
    account_id: str = "local"
    log_path: Path | None = None
    startup_seconds: float = 0.0
    pid: int | None = None  # wrangler's, leader of its process group (workerd included)

    @property
    def root_url(self) -> str:
        """The Worker's origin, e.g. http://127.0.0.1:PORT (``/__scheduled`` is under it)."""
        return self.base_url.removesuffix("/client/v4")

    @property
    def database_id(self) -> str:
        """The first binding's id: the one database the single-database tests share."""
        return next(iter(self.databases.values()))

    def url(self, database_id: str, kind: str = "query") -> str:
        """The full endpoint URL, e.g. .../accounts/local/d1/database/<id>/query."""
        return f"{self.base_url}/accounts/{self.account_id}/d1/database/{database_id}/{kind}"


def _in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def _unavailable(reason: str) -> None:
    """Skip locally; fail under CI so a missing engine is never a silent skip."""
    if _in_ci():
        pytest.fail(f"{reason} [CI is set: the real-engine tests must run, not skip]", pytrace=False)
    pytest.skip(reason)


def _node_version(node: str) -> tuple[int, ...] | None:
    try:
        out = subprocess.run([node, "--version"], capture_output=True, text=True, timeout=15,
                             stdin=subprocess.DEVNULL).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    m = re.match(r"v(\d+)\.(\d+)", out.strip())
    return (int(m.group(1)), int(m.group(2))) if m else None


def wrangler_env(tmp: Path) -> dict[str, str]:
    """The environment wrangler runs in: no account, no telemetry, no network; config under tmp."""
    env = {k: v for k, v in os.environ.items() if k not in _ACCOUNT_VARS}
    env.update(
        WRANGLER_SEND_METRICS="false",          # telemetry off
        WRANGLER_SEND_ERROR_REPORTS="false",    # crash reports off
        WRANGLER_HIDE_BANNER="true",            # the banner is what runs the npm update check
        CLOUDFLARE_CF_FETCH_ENABLED="false",    # miniflare would fetch workers.cloudflare.com/cf.json
        XDG_CONFIG_HOME=str(tmp / "config"),    # no user login/config; its logs land here too
        WRANGLER_LOG_PATH=str(tmp / "logs"),
        NO_COLOR="1",
        FORCE_COLOR="0",
    )
    return env


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """Terminate wrangler and the workerd processes it spawned: its whole process group.

    The group is signalled even if wrangler itself already exited, so no workerd is left behind.
    """
    pgid = proc.pid  # start_new_session=True: wrangler leads its own process group
    for sig, wait in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            break  # nobody left in the group
        try:
            proc.wait(timeout=wait)
        except subprocess.TimeoutExpired:
            continue
        if sig == signal.SIGTERM:
            time.sleep(0.2)  # give workerd a moment, then make sure the rest of the group is gone


def require_wrangler() -> None:
    """Skip (fail under CI) unless Node >= 20.3 and node_modules/.bin/wrangler are here."""
    node = shutil.which("node")
    if node is None or not WRANGLER.exists():
        _unavailable("real D1 engine needs Node >= 20 and `npm ci` (node_modules/.bin/wrangler missing)")
    version = _node_version(node)
    if version is None or version < MIN_NODE:
        _unavailable(f"real D1 engine needs Node >= {MIN_NODE[0]}.{MIN_NODE[1]}, found {version}")


@contextmanager
def gateway(secret_vars: dict[str, str], *, extra_args: tuple[str, ...] = (),
            state_dir: Path | None = None, log_level: str = "info") -> Iterator[RealD1]:
    """Run ``wrangler dev`` on the gateway with these secrets (its .dev.vars), stop it after.

    ``gateway({"API_TOKEN": token})`` is a working gateway; ``gateway({})`` one with no token.
    .dev.vars also overrides [vars] (``{"COMPACTION_KEEP": "3"}``); ``extra_args`` go to
    ``wrangler dev`` (``("--test-scheduled",)`` serves ``/__scheduled``, which runs the Cron
    Trigger); ``state_dir`` keeps the databases there, to start another instance on them;
    ``log_level="log"`` also logs the Worker's console.log lines.
    """
    require_wrangler()
    tmp = Path(tempfile.mkdtemp(prefix="d1saver-wrangler-"))
    state = state_dir if state_dir is not None else tmp / "state"
    log_path = tmp / "wrangler.log"
    # The secrets go in a .dev.vars of our own, passed with --env-file: wrangler then reads no
    # other (not the repository's .dev.vars or .env), and parallel sessions never share one.
    dev_vars = tmp / ".dev.vars"
    dev_vars.write_text("".join(f"{k}={v}\n" for k, v in secret_vars.items()))
    # Port 0 for the server and the devtools inspector: the OS picks free ports, so parallel
    # sessions never race for one (the inspector otherwise probes from 9229 and can collide);
    # the real server port is read from wrangler's "Ready on" line.
    cmd = [
        str(WRANGLER), "dev",
        "--config", str(WRANGLER_TOML),
        "--local",
        "--ip", "127.0.0.1",
        "--port", "0",
        "--inspector-port", "0",
        "--persist-to", str(state),
        "--env-file", str(dev_vars),
        "--show-interactive-dev-session=false",
        "--log-level", log_level,
        *extra_args,
    ]
    started = time.monotonic()
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=wrangler_env(tmp), stdin=subprocess.DEVNULL,
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        base_url = _wait_ready(proc, log_path)
        yield RealD1(base_url=base_url, api_token=secret_vars.get("API_TOKEN", ""),
                     databases=gateway_databases(), log_path=log_path, pid=proc.pid,
                     startup_seconds=time.monotonic() - started)
    finally:
        _stop(proc)
        # D1SAVER_KEEP_WRANGLER_LOG=1 keeps the temp dir (log, state) for a post-mortem.
        if not os.environ.get("D1SAVER_KEEP_WRANGLER_LOG"):
            shutil.rmtree(tmp, ignore_errors=True)


@pytest.fixture(scope="session")
def wrangler_d1() -> Iterator[RealD1]:
    """The gateway on the real D1 engine for the whole session, with a random token."""
    with gateway({"API_TOKEN": secrets.token_urlsafe(24)}) as real:
        yield real


def _wait_ready(proc: subprocess.Popen[bytes], log_path: Path) -> str:
    """Wait for wrangler's "Ready on" line, then for the Worker to answer; return base_url."""
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    with httpx.Client(timeout=2.0, trust_env=False) as client:  # no proxy for loopback
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                break
            m = re.search(r"Ready on http://127\.0\.0\.1:(\d+)", _read(log_path))
            if m:
                url = f"http://127.0.0.1:{m.group(1)}/client/v4"
                try:
                    client.post(url + "/ping")  # any answer (404, or 500 without a token): it is up
                    return url
                except httpx.TransportError:
                    pass
            time.sleep(0.2)
    status = "exited with code %s" % proc.returncode if proc.poll() is not None else "still running"
    _stop(proc)
    raise RuntimeError(
        f"wrangler dev did not answer on 127.0.0.1 within {STARTUP_TIMEOUT_S:.0f}s ({status}).\n"
        f"--- wrangler output ({log_path}) ---\n{_read(log_path)[-8000:]}"
    )


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""
