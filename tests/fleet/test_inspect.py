"""`d1saver show` and `d1saver diff`: a graph's state from the terminal, over four databases,
with encryption keys, for threads written by sync and async runs, on both engines."""

from __future__ import annotations

import asyncio
import base64
import json
import operator
import os
from collections.abc import Callable
from typing import Annotated, Any

from langgraph.graph import END, START, StateGraph
from langgraph.types import interrupt
from typer.testing import CliRunner
from typing_extensions import TypedDict

from d1saver.cli import app
from tests.fleet.conftest import FleetBackend

KEY = base64.b64encode(os.urandom(32)).decode()


class State(TypedDict):
    messages: Annotated[list[dict[str, Any]], operator.add]
    approved: bool


def build() -> StateGraph:
    def agent(state: State) -> dict[str, Any]:
        n = len(state["messages"])
        return {"messages": [{"id": f"m{n}", "role": "ai", "content": f"step {n}"}]}

    def approval(state: State) -> dict[str, Any]:
        return {"approved": bool(interrupt({"question": "go ahead?"}))}

    g = StateGraph(State)
    g.add_node("agent", agent)
    g.add_node("approval", approval)
    g.add_edge(START, "agent")
    g.add_edge("agent", "approval")
    g.add_edge("approval", END)
    return g


def run(fleet: FleetBackend, args: list[str]) -> Any:
    env = {"CLOUDFLARE_ACCOUNT_ID": fleet.account_id, "CLOUDFLARE_API_TOKEN": fleet.api_token,
           "D1_DATABASE_ID": ",".join(fleet.database_ids), "D1_API_BASE_URL": fleet.base_url,
           "D1SAVER_ENCRYPTION_KEYS": KEY}
    return CliRunner().invoke(app, args, env=env)


def test_show_and_diff(fleet: FleetBackend, serve: Callable[..., str]) -> None:
    if fleet.engine is not None:  # the commands speak HTTP: serve the same in-process engine
        fleet.base_url = serve(engine=fleet.engine)
        fleet.transport = None
    saver = fleet.saver(encryption_keys=[KEY])
    graph = build().compile(checkpointer=saver)
    first = {"messages": [{"id": "u0", "role": "user", "content": "hello"}], "approved": False}
    graph.invoke(first, {"configurable": {"thread_id": "sync-thread"}})
    asyncio.run(graph.ainvoke(first, {"configurable": {"thread_id": "async-thread"}}))

    for thread in ("sync-thread", "async-thread"):
        shown = run(fleet, ["show", thread, "--json"])
        assert shown.exit_code == 0, shown.output
        snap = json.loads(shown.output)
        assert [m["content"] for m in snap["channels"]["messages"]] == ["hello", "step 1"]
        assert snap["next"] == ["approval"]
        assert snap["interrupts"] and "go ahead?" in json.dumps(snap["interrupts"])
        assert snap["database_id"] == saver.home(thread)
        assert snap["bytes"] > 0
        history = [t.config["configurable"]["checkpoint_id"]
                   for t in saver.list({"configurable": {"thread_id": thread}})]
        oldest, newest = history[-1], history[0]
        diffed = run(fleet, ["diff", thread, oldest, newest, "--json"])
        assert diffed.exit_code == 0, diffed.output
        added = json.loads(diffed.output)["channels"]["messages"]["added"]
        assert [m["id"] for m in added] == ["u0", "m1"]
        text = run(fleet, ["show", thread])
        assert text.exit_code == 0 and "next: approval" in text.output and "messages: 2 items" in text.output
        human = run(fleet, ["diff", thread, oldest, newest])
        assert human.exit_code == 0 and "messages: +2 -0" in human.output

    missing = run(fleet, ["show", "no-such-thread"])
    assert missing.exit_code == 4 and "no-such-thread" in missing.output
    # A thread whose home database was never written (no d1saver schema there, and a command
    # that only reads creates none) is not found, as any other: named, exit 4, a pointer.
    written = {saver.home(t) for t in ("sync-thread", "async-thread")}
    nobody = next(t for t in (f"nobody-{i}" for i in range(1000)) if saver.home(t) not in written)
    for args in (["show", nobody], ["show", nobody, "--checkpoint", "1f0"], ["history", nobody],
                 ["history", nobody, "--json"], ["diff", nobody, "1f0", "1f1"],
                 ["tag", nobody, "1f0", "kept"]):
        missing = run(fleet, args)
        assert missing.exit_code == 4, (args, missing.output)
        assert f"thread '{nobody}'" in missing.output and "schema:" not in missing.output, args
        assert "`d1saver threads`" in missing.output or "`d1saver history" in missing.output
    for thread in ("sync-thread", "async-thread"):  # the real engine's databases are shared
        saver.delete_thread(thread)
    saver.close()
