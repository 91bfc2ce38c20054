"""The inspector's pages of store items and namespaces are cut in SQL: a page of n reads
n + offset rows, not the whole namespace (the Python slice after it gives the same items
either way, so only the bytes tell)."""

from __future__ import annotations

from d1saver import D1Store, inspection
from tests.conftest import Backend


def test_a_page_of_store_items_reads_only_its_rows(local: Backend) -> None:
    store = D1Store(account_id=local.account_id, database_id=local.database_id,
                    api_token=local.api_token, api_base_url=local.base_url,
                    transport=local.transport)
    store.setup()
    for n in range(12):
        store.put(("docs",), f"k{n:02d}", {"text": "x" * 2_000, "n": n})
    saver = local.saver()
    every = inspection.store_items(saver, ["docs"], None, limit=50)
    assert len(every) == 12
    received = []
    for limit, offset in ((2, 1), (11, 1)):
        before = len(local.events)
        page = inspection.store_items(saver, ["docs"], None, limit=limit, offset=offset)
        assert [i["key"] for i in page] == [i["key"] for i in every[offset:offset + limit]]
        received.append(sum(e.bytes_received for e in local.events[before:]))
    assert received[0] * 3 < received[1], received


def test_a_page_of_store_namespaces_reads_only_its_rows(local: Backend) -> None:
    """The inspector's page of namespaces, as its page of items: n namespaces after an offset
    read n + offset rows, in namespace order."""
    store = D1Store(account_id=local.account_id, database_id=local.database_id,
                    api_token=local.api_token, api_base_url=local.base_url,
                    transport=local.transport)
    store.setup()
    for n in range(40):
        store.put(("docs", f"part-{n:02d}-" + "x" * 200), "k", {"n": n})
    saver = local.saver()
    every = inspection.store_namespaces(saver, ["docs"], limit=100)
    assert [ns["namespace"][1][:7] for ns in every] == [f"part-{n:02d}" for n in range(40)]
    received = []
    for limit, offset in ((2, 1), (38, 1)):
        before = len(local.events)
        page = inspection.store_namespaces(saver, ["docs"], limit=limit, offset=offset)
        assert page == every[offset:offset + limit]
        received.append(sum(e.bytes_received for e in local.events[before:]))
    assert received[0] * 3 < received[1], received


def test_a_page_of_store_items_put_at_once_is_cut_in_key_order(local: Backend) -> None:
    """Items put in one batch share their updated_at: the page of the newest is cut in key
    order, as D1Store's search orders ties."""
    from langgraph.store.base import PutOp

    store = D1Store(account_id=local.account_id, database_id=local.database_id,
                    api_token=local.api_token, api_base_url=local.base_url,
                    transport=local.transport)
    store.setup()
    store.batch([PutOp(("docs",), key, {"n": 1}) for key in ("c", "a", "d", "b")])
    saver = local.saver()
    assert [i["key"] for i in inspection.store_items(saver, ["docs"], None, limit=2)] == [
        "a", "b"]
    assert [i["key"] for i in inspection.store_items(saver, ["docs"], None, limit=2,
                                                     offset=1)] == ["b", "c"]


def test_sealed_key_reads_the_checkpoint_of_its_own_namespace(local: Backend) -> None:
    """One checkpoint id in two namespaces of a thread, one plaintext, one sealed: each
    namespace's answer is its own."""
    from langgraph.checkpoint.base import empty_checkpoint

    from d1saver.storage.crypto import key_id

    key = bytes([7]) * 32
    plain, sealed = local.saver(), local.saver(encryption_keys=[key])
    plain.setup()
    cp = empty_checkpoint()
    for saver, ns in ((plain, ""), (sealed, "sub:1")):
        saver.put({"configurable": {"thread_id": "t", "checkpoint_ns": ns}}, cp, {"step": 0}, {})
    assert inspection.sealed_key(plain, "t", cp["id"], ns="") is None
    assert inspection.sealed_key(plain, "t", cp["id"], ns="sub:1") == key_id(key).hex()
