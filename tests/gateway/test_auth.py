"""The bearer token: the API_TOKEN secret, and no service at all without one."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from d1saver import AuthenticationError, D1Saver
from tests.gateway.client import Gateway, failed, ok
from tests.realengine import RealD1, gateway

pytestmark = pytest.mark.realengine


def test_right_token_accepted(gw: Gateway):
    ok(gw.post({"sql": "SELECT 1"}))
    ok(gw.post({"sql": "SELECT 1"}, headers={"Authorization": f"bearer   {gw.real.api_token}"}))


@pytest.mark.parametrize("authorization", [
    None, "", "Bearer", "Bearer wrong", "Basic {token}", "{token}", "Bearer {token}x",
    "Bearer {token_prefix}", "Bearer x{token}",
])
def test_missing_or_wrong_token_refused(gw: Gateway, authorization: str | None):
    token = gw.real.api_token
    headers = {} if authorization is None else {
        "Authorization": authorization.format(token=token, token_prefix=token[:-1])}
    for kind in ("query", "raw"):
        response = gw.client.post(gw.url("DB_B", kind), json={"sql": "SELECT 1"}, headers=headers)
        assert failed(response, 401, 10000) == "Authentication error"


def test_token_is_checked_before_the_database_id(gw: Gateway):
    # A caller without the token cannot tell mapped ids from others.
    for db in (gw.real.database_id, "no-such-database"):
        response = gw.client.post(gw.real.url(db), json={"sql": "SELECT 1"})
        failed(response, 401, 10000)


@pytest.fixture(scope="module")
def no_secret() -> Iterator[RealD1]:
    """A second gateway, started with an empty .dev.vars: no API_TOKEN."""
    with gateway({}) as real:
        yield real


def test_no_secret_refuses_every_request(no_secret: RealD1):
    with httpx.Client(timeout=30.0, trust_env=False) as client:
        for headers in ({}, {"Authorization": "Bearer local-dev-token"}, {"Authorization": "Bearer x"}):
            for url in (no_secret.url(no_secret.database_id), no_secret.url(no_secret.database_id, "raw"),
                        no_secret.url("no-such-database"), f"{no_secret.base_url}/nowhere"):
                for method in ("POST", "GET"):
                    response = client.request(method, url, json={"sql": "SELECT 1"}, headers=headers)
                    message = failed(response, 500, 10000)
                    assert "no API_TOKEN secret" in message
                    assert "npx wrangler secret put API_TOKEN" in message


def test_no_secret_is_an_authentication_error_for_the_saver_without_retries(no_secret: RealD1):
    events: list = []
    saver = D1Saver(account_id=no_secret.account_id, database_id=no_secret.database_id,
                    api_token="anything", api_base_url=no_secret.base_url, tracer=events.append)
    with pytest.raises(AuthenticationError, match="no API_TOKEN secret"):
        saver.setup()
    assert len(events) == 1  # refused at once, not retried as a server error
    saver.close()
