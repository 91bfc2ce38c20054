"""When to retry a D1 request, and how long to wait first. Pure: no I/O, no clock reads.

Retried: 429 (honouring Retry-After), 5xx, connection failures, timeouts, and the D1 errors
Cloudflare documents as transient (TransientQueryError: the database restarted, overloaded,
network lost; see d1saver/http/envelope.py). Never retried: an SQL error or any other 4xx, which
would fail again.

Retrying is safe because every statement d1saver sends is idempotent: rows are written with
INSERT OR REPLACE / OR IGNORE or ON CONFLICT upserts keyed by primary key, deletes and
compaction's batches reach the same state when run twice, the head guard lets the same put
through twice, and each batch is one transaction. So a request that D1 committed before
failing (a lost response, a 5xx, a transient error) stores nothing twice when sent again.
Statements of your own passed to `D1Saver.execute` get the same retries: make them
idempotent too, or pass `RetryPolicy.none()`.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from d1saver.core.errors import (
    D1Error,
    RateLimitError,
    ServerError,
    TransientQueryError,
    TransportError,
)


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
        return isinstance(error, (RateLimitError, ServerError, TransportError,
                                  TransientQueryError))
