"""Plain httpx against the gateway (tests/realengine.py), and checks of D1's envelope."""

from __future__ import annotations

from typing import Any

import httpx

from tests.realengine import RealD1

# worker/request.js MAX_BODY_BYTES: the whole-body cap (413 past it).
MAX_BODY_BYTES = 32 * 1024 * 1024


class Gateway:
    """POSTs bodies to one running gateway: to a database chosen by binding, with its token."""

    def __init__(self, real: RealD1, client: httpx.Client) -> None:
        self.real = real
        self.client = client

    def url(self, binding: str = "DB_A", kind: str = "query") -> str:
        return self.real.url(self.real.databases[binding], kind)

    def post(self, body: Any, binding: str = "DB_A", kind: str = "query", *,
             token: str | None = None, **kwargs: Any) -> httpx.Response:
        """POST a JSON body (or `content=` bytes) with the gateway's token (or `token`)."""
        headers = {"Authorization": f"Bearer {self.real.api_token if token is None else token}"}
        headers.update(kwargs.pop("headers", {}))
        if "content" not in kwargs:
            kwargs["json"] = body
        return self.client.post(self.url(binding, kind), headers=headers, **kwargs)

    def rows(self, sql: str, *params: Any, binding: str = "DB_A") -> list[dict[str, Any]]:
        """The rows of one statement, as objects."""
        [entry] = ok(self.post({"sql": sql, "params": list(params)}, binding))
        return entry["results"]


def ok(response: httpx.Response) -> list[dict[str, Any]]:
    """D1's success envelope: its result entries, each with success and meta."""
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["success"] is True
    assert body["errors"] == [] and body["messages"] == []
    for entry in body["result"]:
        assert entry["success"] is True
        assert isinstance(entry["meta"], dict)
    return body["result"]


def failed(response: httpx.Response, status: int, code: int) -> str:
    """D1's error envelope with this HTTP status and error code: its message."""
    assert response.status_code == status, response.text
    body = response.json()
    assert body["success"] is False and body["result"] is None and body["messages"] == []
    assert len(body["errors"]) == 1 and body["errors"][0]["code"] == code, body
    return body["errors"][0]["message"]
