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


def test_a_read_begun_after_its_thread_changed_is_kept() -> None:
    """The tick taken after an invalidation is not 'before' it: that read's entry is stored."""
    cache, entry = DeltaCache(), {"messages": {"writes": []}}
    cache.invalidate(["a"])
    cache.put(KEY, entry, cache.mark())
    assert cache.take(KEY, ["messages"]) == entry and cache.hits == 1


def test_the_entries_put_last_are_kept() -> None:
    """Past max_entries the entry put longest ago goes; putting an entry again renews it."""
    cache = DeltaCache(max_entries=2)
    entries = {cid: {"messages": {"writes": [("t", "messages", cid)]}} for cid in "123"}
    cache.put(("a", "", "1"), entries["1"], cache.mark())
    cache.put(("a", "", "2"), entries["2"], cache.mark())
    cache.put(("a", "", "1"), entries["1"], cache.mark())  # read again: now the newest
    cache.put(("a", "", "3"), entries["3"], cache.mark())
    assert cache.take(("a", "", "2"), ["messages"]) is None
    assert cache.take(("a", "", "1"), ["messages"]) == entries["1"]
    assert cache.take(("a", "", "3"), ["messages"]) == entries["3"]
