"""Deterministic fault injection for the local D1: rate limits, server errors, transient D1 errors
and lost connections.

A seeded `FaultPlan` decides, per request, whether the request meets one fault, so a retry policy can
be tested against a reproducible sequence of failures.
"""

from __future__ import annotations

import enum
import math
import random
import threading
from dataclasses import dataclass, field
from typing import Any

from .envelope import error_envelope

__all__ = ["DroppedConnection", "Fault", "FaultPlan", "InjectedFault", "RATE_LIMIT",
           "TRANSIENT_MESSAGES"]

RATE_LIMIT = 1200
"""Requests per five minutes that Cloudflare's API allows; sent as `X-RateLimit-Limit`."""


class DroppedConnection(Exception):
    """The connection closes without a response; transports and the server turn this into a network error."""


class Fault(str, enum.Enum):
    """The kinds of fault a `FaultPlan` can inject."""

    RATE_LIMITED = "429"
    SERVER_ERROR = "5xx"
    DROP = "drop"  # not executed, connection dropped
    LOST_RESPONSE = "lost_response"  # executed and committed, then the connection dropped
    TRANSIENT = "transient"  # a D1 error Cloudflare documents as transient; executed or not


# The D1 errors whose recommended action is "Retry the operation", worded as Cloudflare's
# list of D1_ERRORs words them: https://developers.cloudflare.com/d1/observability/debug-d1/
TRANSIENT_MESSAGES = (
    "D1 DB reset because its code was updated.",
    "Internal error while starting up D1 DB storage caused object to be reset.",
    "Network connection lost.",
    "Internal error in D1 DB storage caused object to be reset.",
    "Cannot resolve D1 DB due to transient issue on remote node.",
)


@dataclass(frozen=True)
class InjectedFault:
    """One decision of a `FaultPlan`: the fault and, for HTTP faults, the status to answer with."""

    kind: Fault
    status: int | None = None
    retry_after_s: float = 1.0
    message: str = ""  # a transient fault's D1 error
    executed: bool = False  # a transient fault: the request ran (and committed) first

    def response(self) -> tuple[int, dict[str, str], dict[str, Any]]:
        """Status, extra headers and Cloudflare envelope for a 429, 5xx or transient fault."""
        if self.kind is Fault.RATE_LIMITED:
            wait = str(max(1, math.ceil(self.retry_after_s)))
            headers = {"Retry-After": wait, "X-RateLimit-Remaining": "0", "X-RateLimit-Reset": wait}
            return 429, headers, error_envelope(971, "Please wait and consider throttling your request speed")
        if self.kind is Fault.SERVER_ERROR:
            return self.status or 500, {}, error_envelope(7500, "Internal error")
        if self.kind is Fault.TRANSIENT:  # worded and coded like an SQL error (400, 7500)
            return 400, {}, error_envelope(7500, f"D1_ERROR: {self.message}")
        raise ValueError(f"{self.kind.value} has no HTTP response")


@dataclass
class FaultPlan:
    """Seeded per-request fault decisions; the same seed and request order give the same faults.

    The rates are probabilities per request; at most one fault is chosen per request.
    A transient fault names one of `TRANSIENT_MESSAGES` and, one time in two, runs the
    request before answering with it (the database reset after committing).
    `Retry-After` is sent as whole seconds (rounded up, at least 1), like Cloudflare does.
    """

    seed: int = 0
    rate_429: float = 0.0
    rate_5xx: float = 0.0
    rate_drop: float = 0.0
    rate_lost_response: float = 0.0
    rate_transient: float = 0.0
    retry_after_s: float = 1.0
    _rng: random.Random = field(init=False, repr=False)
    _lock: threading.Lock = field(init=False, repr=False, default_factory=threading.Lock)
    _counts: dict[Fault, int] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        rates = self._thresholds()
        if any(not 0.0 <= rate <= 1.0 for _, rate in rates) or sum(rate for _, rate in rates) > 1.0:
            raise ValueError("fault rates must each be within [0, 1] and sum to at most 1")
        self._rng = random.Random(self.seed)
        self._counts = {kind: 0 for kind in Fault}

    def _thresholds(self) -> list[tuple[Fault, float]]:
        return [
            (Fault.RATE_LIMITED, self.rate_429),
            (Fault.SERVER_ERROR, self.rate_5xx),
            (Fault.DROP, self.rate_drop),
            (Fault.LOST_RESPONSE, self.rate_lost_response),
            (Fault.TRANSIENT, self.rate_transient),
        ]

    def decide(self) -> InjectedFault | None:
        """Draw the fault for the next request, or None for a normal answer."""
        with self._lock:
            draw = self._rng.random()
            for kind, rate in self._thresholds():
                if draw < rate:
                    status, message, executed = None, "", False
                    if kind is Fault.SERVER_ERROR:
                        status = 500 if self._rng.random() < 0.5 else 503
                    if kind is Fault.TRANSIENT:
                        message = self._rng.choice(TRANSIENT_MESSAGES)
                        executed = self._rng.random() < 0.5
                    self._counts[kind] += 1
                    return InjectedFault(kind, status, self.retry_after_s, message, executed)
                draw -= rate
            return None

    @property
    def counts(self) -> dict[str, int]:
        """Faults injected so far, keyed by kind ("429", "5xx", "drop", "lost_response",
        "transient")."""
        with self._lock:
            return {kind.value: n for kind, n in self._counts.items()}
