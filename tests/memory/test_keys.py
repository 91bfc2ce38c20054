"""With encryption keys: item values and cache entries sealed and bound to their row; what
stays readable is the namespace, the key, the times and the vectors (docs/STORE.md)."""

from __future__ import annotations

import base64
import os

import pytest

from d1saver import IntegrityError, PlaintextValueError, Statement, UnknownKeyError
from tests.memory.conftest import Memory
from tests.memory.embeddings import TrigramEmbeddings

KEY = base64.b64encode(os.urandom(32)).decode()
OTHER = base64.b64encode(os.urandom(32)).decode()


def _raw(store: object, sql: str) -> list[list[object]]:
    db = store._databases()[0]  # type: ignore[attr-defined]
    return store._exchange(db, [Statement(sql)])[0].rows  # type: ignore[attr-defined]


def test_values_are_sealed_and_readable_with_the_key(memory: Memory) -> None:
    store = memory.store(encryption_keys=[KEY], index={"dims": 64, "embed": TrigramEmbeddings()})
    store.put(("u", "secret"), "k", {"text": "my password is swordfish", "n": 3})
    (value,), = _raw(store, "SELECT value FROM store_items")
    assert isinstance(value, str) and value.startswith("e:") and "swordfish" not in value
    assert store.get(("u", "secret"), "k").value["text"] == "my password is swordfish"  # type: ignore[union-attr]
    assert [i.key for i in store.search(("u",), filter={"n": {"$gte": 3}})] == ["k"]
    assert store.search(("u",), query="password")[0].key == "k"


def test_a_value_moved_to_another_key_is_refused(memory: Memory) -> None:
    store = memory.store(encryption_keys=[KEY])
    store.put(("u",), "a", {"v": "alice"})
    store.put(("u",), "b", {"v": "bob"})
    _raw(store, "UPDATE store_items SET value = (SELECT value FROM store_items WHERE key = 'a') "
                "WHERE key = 'b'")
    assert store.get(("u",), "a").value == {"v": "alice"}  # type: ignore[union-attr]
    with pytest.raises(IntegrityError):
        store.get(("u",), "b")


def test_a_plaintext_row_is_refused_with_keys(memory: Memory) -> None:
    plain, sealed = memory.store(), memory.store(encryption_keys=[KEY])
    plain.put(("u",), "planted", {"v": 1})
    with pytest.raises(PlaintextValueError):
        sealed.get(("u",), "planted")


def test_an_unknown_key_is_named(memory: Memory) -> None:
    memory.store(encryption_keys=[OTHER]).put(("u",), "k", {"v": 1})
    with pytest.raises(UnknownKeyError):
        memory.store(encryption_keys=[KEY]).get(("u",), "k")
    assert memory.store(encryption_keys=[KEY, OTHER]).get(("u",), "k").value == {"v": 1}  # type: ignore[union-attr]


def test_cache_entries_are_sealed_and_bound(memory: Memory) -> None:
    cache = memory.cache(encryption_keys=[KEY])
    cache.set({(("n",), "a"): ("alpha-secret", None), (("n",), "b"): ("beta", None)})
    rows = _raw(cache, "SELECT value FROM cache_entries")
    assert all("alpha" not in str(v) and "\ne:" in str(v) for (v,) in rows)
    assert cache.get([(("n",), "a")]) == {(("n",), "a"): "alpha-secret"}
    _raw(cache, "UPDATE cache_entries SET value = (SELECT value FROM cache_entries "
                "WHERE key = 'a') WHERE key = 'b'")
    with pytest.raises(IntegrityError):
        cache.get([(("n",), "b")])
