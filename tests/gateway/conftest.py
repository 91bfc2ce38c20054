"""Fixtures for the gateway's tests: a client of the session's gateway, unique table names."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import httpx
import pytest

from tests.gateway.client import Gateway
from tests.realengine import RealD1


@pytest.fixture
def gw(wrangler_d1: RealD1) -> Iterator[Gateway]:
    with httpx.Client(timeout=60.0, trust_env=False) as client:
        yield Gateway(wrangler_d1, client)


@pytest.fixture
def table() -> str:
    """A table name no other test uses: the session's databases are shared."""
    return "t_" + uuid.uuid4().hex[:12]
