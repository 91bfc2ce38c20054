"""delete_namespace removes a namespace and those under it, items and vectors, and nothing
beside: search by meaning in the namespaces around it answers as InMemoryStore does after the
same items are deleted one by one."""

from __future__ import annotations

from langgraph.store.memory import InMemoryStore

from tests.memory.conftest import Memory
from tests.memory.embeddings import TrigramEmbeddings

ITEMS = {("a",): "apples and pears", ("b",): "bananas", ("b", "x"): "blueberries",
         ("ba",): "basil and bay", ("c",): "cherries and apples"}


def test_delete_namespace_leaves_the_vectors_of_the_namespaces_around_it(
        memory: Memory) -> None:
    store = memory.store(index={"dims": 64, "embed": TrigramEmbeddings()})
    store.setup()
    ref = InMemoryStore(index={"dims": 64, "embed": TrigramEmbeddings()})
    for ns, text in ITEMS.items():
        store.put(ns, "k", {"text": text})
        ref.put(ns, "k", {"text": text})
    assert store.delete_namespace(("b",)) == 2
    ref.delete(("b",), "k")
    ref.delete(("b", "x"), "k")
    for ns in (("a",), ("ba",), ("c",), ("b",)):
        got = [(i.key, i.value, round(i.score or 0, 6)) for i in store.search(ns, query="apples")]
        want = [(i.key, i.value, round(i.score or 0, 6)) for i in ref.search(ns, query="apples")]
        assert got == want, ns
