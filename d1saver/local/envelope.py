"""Cloudflare's JSON envelope for the local D1's answers, and the error that ends a request in one."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

__all__ = ["ApiError", "LocalResponse", "d1_error", "encode", "error_envelope", "success_envelope"]


@dataclass(frozen=True)
class LocalResponse:
    """An HTTP response from the engine: status, headers and the JSON body as bytes."""

    status: int
    headers: dict[str, str]
    body: bytes


class ApiError(Exception):
    """A request that ends in a Cloudflare error envelope."""

    def __init__(self, status: int, code: int, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


def d1_error(message: str, code_name: str | None = "SQLITE_ERROR") -> ApiError:
    """An SQL failure worded as D1 words it: HTTP 400, code 7500, "D1_ERROR: <message>: <code>"."""
    suffix = f": {code_name}" if code_name else ""
    return ApiError(400, 7500, f"D1_ERROR: {message}{suffix}")


def error_envelope(code: int, message: str) -> dict[str, Any]:
    """The body of a failed call: `success: false` and one entry in `errors`."""
    return {"success": False, "errors": [{"code": code, "message": message}], "messages": [], "result": None}


def success_envelope(results: list[dict[str, Any]]) -> dict[str, Any]:
    """The body of a successful call: one entry in `result` per statement."""
    return {"success": True, "errors": [], "messages": [], "result": results}


def encode(payload: dict[str, Any]) -> bytes:
    """The body's bytes: compact JSON, UTF-8 as is (D1 does not escape non-ASCII)."""
    return json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode()
