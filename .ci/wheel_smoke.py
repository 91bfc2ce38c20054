"""Smoke test of an installed d1saver, run by .ci/wheel-check from an empty folder in a fresh
virtualenv: the package imports from site-packages, sets up its schema (package data) on the
embedded local D1, and a checkpoint with a pending write goes in and comes back, sync and async;
then a D1Store item and a D1Cache entry."""

import asyncio
import sys
from pathlib import Path

import d1saver
from d1saver import D1Saver
from d1saver.local import LocalD1, LocalD1Transport
from langgraph.checkpoint.base import empty_checkpoint

installed = Path(d1saver.__file__).resolve()
assert installed.is_relative_to(Path(sys.prefix).resolve()), f"imported from {installed}"

saver = D1Saver(account_id="smoke", database_id="smoke", api_token="local",
                api_base_url="http://d1.local/client/v4", transport=LocalD1Transport(LocalD1()))
with saver:
    checkpoint = empty_checkpoint()
    checkpoint["channel_values"] = {"messages": ["hello"]}
    checkpoint["channel_versions"] = {"messages": "1"}
    config = saver.put({"configurable": {"thread_id": "smoke", "checkpoint_ns": ""}}, checkpoint,
                       {"source": "input", "step": -1}, {"messages": "1"})
    saver.put_writes(config, [("messages", "world")], task_id="task-1")
    for got in (saver.get_tuple(config), asyncio.run(saver.aget_tuple(config))):
        assert got is not None and got.checkpoint["id"] == checkpoint["id"], got
        assert got.checkpoint["channel_values"] == {"messages": ["hello"]}, got
        assert [tuple(w) for w in got.pending_writes] == [("task-1", "messages", "world")], got
# Long-term memory and the node cache, from the same install, on the same kind of local D1.
from d1saver import D1Cache, D1Store  # noqa: E402

where = dict(account_id="smoke", database_id="memory", api_token="local",
             api_base_url="http://d1.local/client/v4", transport=LocalD1Transport(LocalD1()))
with D1Store(**where) as store, D1Cache(**where) as cache:
    store.put(("user", "memories"), "m1", {"text": "likes tea"}, ttl=60)
    assert store.get(("user", "memories"), "m1").value == {"text": "likes tea"}
    assert asyncio.run(store.alist_namespaces()) == [("user", "memories")]
    cache.set({(("node",), "k"): ({"answer": 42}, 60)})
    assert cache.get([(("node",), "k")]) == {(("node",), "k"): {"answer": 42}}
print(f"wheel smoke test: ok (d1saver from {installed.parent})")
