"""`inspection.cache_summary` (the UI's and `d1saver inspect`'s figures of D1Cache): an entry
is expired from the moment its expiry is reached, as the sweep and reads decide."""

from __future__ import annotations

from d1saver import D1Cache, inspection
from tests.compaction import query
from tests.conftest import Backend


def test_an_entry_whose_expiry_is_now_counts_expired_and_is_no_next_expiry(local: Backend
                                                                           ) -> None:
    saver = local.saver()
    with D1Cache(account_id=local.account_id, database_id=local.database_id,
                 api_token=local.api_token, api_base_url=local.base_url,
                 **local.wired({})) as cache:
        cache.set({(("n",), "soon"): (1, 60), (("n",), "later"): (2, 120),
                   (("n",), "never"): (3, None)})
    ((soon,), (later,)) = query(saver, "SELECT expires_at FROM cache_entries"
                                       " WHERE expires_at IS NOT NULL ORDER BY expires_at")

    def figures(now: float) -> tuple[int, int, float | None]:
        (row,) = inspection.cache_summary(saver, now=now)
        return row["entries"], row["expired"], row["next_expiry"]

    assert figures(soon - 1)[:2] == (3, 0)
    at_soon = figures(soon)
    assert at_soon[:2] == (3, 1) and at_soon[2] is not None and at_soon[2] > figures(soon - 1)[2]
    assert figures(later) == (3, 2, None)
