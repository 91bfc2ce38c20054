"""DeltaCache's contract beyond tests/saver/test_delta_channels.py: a read begun before an
operation that may change any thread stores nothing, and an entry that lacks a channel asked
for is a miss (the saver then reads the database), never a partial answer."""

from __future__ import annotations

from d1saver.ops.delta_cache import DeltaCache

KEY = ("a", "", "1")


def test_a_read_begun_before_invalidate_all_stores_nothing() -> None:
    cache, entry = DeltaCache(), {"messages": {"writes": []}}
    since = cache.mark()
    cache.invalidate_all()  # a prune, a delete of many threads: any thread may have changed
    cache.put(KEY, entry, since)
    assert cache.take(KEY, ["messages"]) is None
    cache.put(KEY, entry, cache.mark())  # a read begun after it is kept
    assert cache.take(KEY, ["messages"]) == entry


def test_an_entry_lacking_a_channel_asked_for_is_a_miss() -> None:
    cache = DeltaCache()
    cache.put(KEY, {"messages": {"writes": []}}, cache.mark())
    assert cache.take(KEY, ["messages", "notes"]) is None
    assert cache.hits == 0
    cache.put(KEY, {"messages": {"writes": []}, "notes": {"writes": []}}, cache.mark())
    assert cache.take(KEY, ["notes"]) == {"notes": {"writes": []}} and cache.hits == 1
