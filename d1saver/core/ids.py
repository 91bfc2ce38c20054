"""Account and database ids and the API base URL, checked once wherever they enter: the client, the
settings, the local D1.

An id becomes a URL path segment (and, in the local D1, a file name). A '/' or '..' in it would
change which database a URL reaches (URL clients normalise `db1/../db2` to `db2`), or which file
the local D1 opens, so only what Cloudflare's ids look like passes: letters, digits, '-', '_' and
'.', starting with a letter or digit, not ending in '.' (Windows drops it from file names), at most
64 characters, never '..'.
"""

from __future__ import annotations

import re


from d1saver.core.errors import ConfigError

__all__ = ["DEFAULT_API_BASE_URL", "MAX_ID_LENGTH", "check_api_base_url", "validate_account_id",
           "validate_database_id", "validate_database_ids"]

DEFAULT_API_BASE_URL = "https://api.cloudflare.com/client/v4"

MAX_ID_LENGTH = 64
# Cloudflare's ids are 32 hex digits (accounts) or a UUID (databases); names used in tests
# ("db", "db-1a2b3c4d", "local-account") pass too. \Z, not $: $ would let a trailing newline in.
_ID = re.compile(rf"[A-Za-z0-9](?:[A-Za-z0-9._-]{{0,{MAX_ID_LENGTH - 2}}}[A-Za-z0-9_-])?\Z")


def validate_database_id(value: object) -> str:
    """`value` if it is a safe D1 database id, else a ConfigError naming it."""
    return _validate(value, "database id", "D1_DATABASE_ID")


def validate_account_id(value: object) -> str:
    """`value` if it is a safe Cloudflare account id, else a ConfigError naming it."""
    return _validate(value, "account id", "CLOUDFLARE_ACCOUNT_ID")


def _validate(value: object, what: str, env: str) -> str:
    if isinstance(value, str) and _ID.match(value) and ".." not in value:
        return value
    shown = repr(value) if not isinstance(value, str) or len(value) <= 80 else repr(value[:80]) + "..."
    raise ConfigError(
        f"invalid {what} {shown}: use 1 to {MAX_ID_LENGTH} letters, digits, '-', '_' or '.', "
        f"starting with a letter or digit, not ending in '.', without '..' (check {env})"
    )


def validate_database_ids(value: object) -> list[str]:
    """A list of database ids, or a comma-separated string of them (D1_DATABASE_ID="a,b"):
    each valid, none repeated, at least one; else a ConfigError."""
    if isinstance(value, str):
        items: list[object] = [part.strip() for part in value.split(",")]
    elif isinstance(value, (list, tuple)):
        items = list(value)
    else:
        raise ConfigError(f"database ids must be a list or a comma-separated string, not "
                          f"{type(value).__name__} (check D1_DATABASE_ID)")
    ids = [validate_database_id(item) for item in items]
    repeated = sorted({i for i in ids if ids.count(i) > 1})
    if not ids or repeated:
        raise ConfigError(f"database ids must be distinct and at least one: {repeated or ids} "
                          "(check D1_DATABASE_ID)")
    return ids


def check_api_base_url(url: str) -> str:
    """`url` if it is an absolute http(s) URL with a host, else a ConfigError naming
    D1_API_BASE_URL. Checked when settings or a client are made: httpx refuses an empty or
    relative URL only when sending, and that looked like a connection error (retried, exit 1)."""
    import httpx  # here, not at the top: the CLI's `serve --help` imports this module

    try:
        parsed = httpx.URL(url)
    except (httpx.InvalidURL, TypeError, ValueError):
        parsed = None
    if parsed is None or parsed.scheme not in ("http", "https") or not parsed.host:
        raise ConfigError(f"D1_API_BASE_URL must be an absolute http(s) URL such as "
                          f"{DEFAULT_API_BASE_URL}, not {url!r}")
    return url
