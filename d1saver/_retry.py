"""When to retry a D1 request, and how long to wait first. Pure: no I/O, no clock reads.

Retried: 429 (honouring Retry-After), 5xx, connection failures and timeouts. Never retried:
an SQL error or any other 4xx, which would fail again. Retrying a request whose response was
lost is safe because every write d1saver sends is idempotent (upserts keyed by primary key).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from d1saver._errors import D1Error, RateLimitError, ServerError, TransportError


@dataclass(frozen=True)
class RetryPolicy:
    """Bounded retries with capped exponential backoff and full jitter.

    `max_attempts` counts the first try; `max_elapsed` bounds the whole operation in seconds
    (D1 also cuts any single request at 30 s). `max_retry_after` is the longest Retry-After
    we are willing to sleep: Cloudflare's lockout lasts 5 minutes once the budget is spent,
    and waiting it out beats hammering the API, up to this bound.
    """

    max_attempts: int = 5
    backoff_initial: float = 0.25
    backoff_max: float = 8.0
    max_elapsed: float = 60.0
    max_retry_after: float = 60.0
    rng: random.Random = field(default_factory=random.Random, compare=False, repr=False)

    @classmethod
    def none(cls) -> RetryPolicy:
        """No retries: every failure reaches the caller at once."""
        return cls(max_attempts=1)

    def delay(self, error: D1Error, attempt: int, elapsed: float) -> float | None:
        """Seconds to wait before try number `attempt + 1`, or None to give up and raise."""
        if attempt >= self.max_attempts or not self.retryable(error):
            return None
        if isinstance(error, RateLimitError) and error.retry_after is not None:
            wait = error.retry_after
            if wait > self.max_retry_after:
                return None
        else:
            cap = min(self.backoff_max, self.backoff_initial * (2 ** (attempt - 1)))
            wait = self.rng.uniform(0, cap)
        if elapsed + wait > self.max_elapsed:
            return None
        return wait

    @staticmethod
    def retryable(error: D1Error) -> bool:
        return isinstance(error, (RateLimitError, ServerError, TransportError))
