"""Which database a store item or a cache entry lives in, in the layout of a fleet and in its
previous one (while `d1saver rebalance` moves memory after the database list changed).

A store item lives by its namespace's first label (rendezvous hashing of the label, or the
user's `route(label)`), so that a user's memory, ("user-1", ...), stays in one database.

A cache entry lives by its whole namespace and key: LangGraph's node cache puts every entry
under ("__pregel_ns_writes", ...), so routing it by the first label, as 0.2.0 did, put a
fleet's whole node cache in one database. Its route key is the JSON array of the namespace's
labels and the key (unambiguous, whatever they hold). With a `route`, entries keep going by
their first label (the placement the caller chose), as before. While migrating, an entry
may still be where 0.2.0's rule put it, in the previous layout: both are previous homes.

Pure: no I/O. Used by D1Store and D1Cache (d1saver/memory/) and by `d1saver rebalance`
(through d1saver.admin).
"""

from __future__ import annotations

from collections.abc import Sequence

from d1saver.core.protocol import compact_json
from d1saver.fleet.routing import Route, Router, rendezvous

__all__ = ["Layout", "cache_route_key", "item_route_key", "legacy_cache_route_key"]


def item_route_key(namespace: Sequence[str]) -> str:
    """What a store item is routed by: its namespace's first label ("" for none)."""
    return namespace[0] if namespace else ""


def cache_route_key(namespace: Sequence[str], key: str) -> str:
    """What a cache entry is routed by (without a `route`): its namespace and key, whole."""
    return compact_json([*namespace, key])


def legacy_cache_route_key(namespace: Sequence[str]) -> str:
    """What 0.2.0 routed a cache entry by: its namespace's first label."""
    return item_route_key(namespace)


class Layout:
    """The databases of a fleet's memory now (`router`) and before the list changed
    (`previous`, None when not migrating): where each item and entry lives, and where it may
    still be while a rebalance moves it."""

    def __init__(self, router: Router, previous: Router | None = None) -> None:
        self.router, self.previous = router, previous

    @property
    def route(self) -> Route | None:
        return self.router.route

    # --- store items --------------------------------------------------------------------

    def item_home(self, namespace: Sequence[str]) -> str:
        return self.router.home(item_route_key(namespace))

    def item_previous(self, namespace: Sequence[str]) -> list[str]:
        """The item's home in the previous layout, if that is another database."""
        if self.previous is None:
            return []
        old = self.previous.home(item_route_key(namespace))
        return [] if old == self.item_home(namespace) else [old]

    # --- cache entries ------------------------------------------------------------------

    def entry_home(self, namespace: Sequence[str], key: str) -> str:
        if self.route is not None:
            return self.router.home(legacy_cache_route_key(namespace))
        if len(self.router.database_ids) == 1:
            return self.router.database_ids[0]
        return rendezvous(cache_route_key(namespace, key), self.router.database_ids)

    def entry_previous(self, namespace: Sequence[str], key: str) -> list[str]:
        """Where the entry may still be: its home in the previous layout, by this release's
        rule and by 0.2.0's (first label), those that are another database than its home."""
        if self.previous is None:
            return []
        ids = self.previous.database_ids
        found = [rendezvous(cache_route_key(namespace, key), ids),
                 rendezvous(legacy_cache_route_key(namespace), ids)]
        if self.route is not None:
            found = [self.previous.home(legacy_cache_route_key(namespace))]
        home = self.entry_home(namespace, key)
        return [db for db in dict.fromkeys(found) if db != home]

    def namespace_homes(self, namespace: Sequence[str]) -> list[str] | None:
        """The databases that may hold cache entries of `namespace` now: one with a `route`
        (its first label's), every database otherwise (None)."""
        if self.route is not None:
            return [self.router.home(legacy_cache_route_key(namespace))]
        return None
