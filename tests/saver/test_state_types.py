"""Every state type comes back from D1Saver as it does from SqliteSaver, types included (issue 11).

Each scenario runs one graph on a checkpointer, sync or async, and returns what a user observes
after reading state back from storage (state values, interrupt values, what a node received on
a resume, a functional-API result after a resume), passed through `typed`: every object beside
its class, so a `Plan` that comes back as a dict is a difference. The reference is SqliteSaver
with LangGraph's default serializer; D1Saver runs with its own default (no serde argument) and
with `serde=default_serde()`. The `saver-default` cases pass once D1Saver's default is
`default_serde()`; d1saver 0.1.0's strict default returns dicts for them.
"""

from __future__ import annotations

import dataclasses
import json
import operator
import os
import sqlite3
import subprocess
import sys
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable
from datetime import datetime, timezone
from decimal import Decimal
from enum import Enum
from pathlib import Path
from typing import Annotated, Any, NamedTuple
from uuid import UUID

import aiosqlite
import pytest
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage, ToolMessage
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
from langgraph.func import entrypoint, task
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.types import Command, Interrupt, StateSnapshot, interrupt
from pydantic import BaseModel, Field
from typing_extensions import TypedDict

from d1saver.storage.serde import default_serde
from tests.conftest import Backend

ROOT = Path(__file__).resolve().parents[2]

# --- the types a state holds (module level: a stored row names them by module and class) ---


class Color(str, Enum):
    RED = "red"
    BLUE = "blue"


class Point(NamedTuple):
    x: int
    y: int


@dataclasses.dataclass
class Action:
    """Like LangChain's AgentAction: a dataclass inside state."""

    tool: str
    args: dict[str, Any]


class Step(BaseModel):
    title: str
    due: datetime | None = None


class Plan(BaseModel):
    owner: str
    steps: list[Step]
    budget: Decimal


@dataclasses.dataclass
class Question:
    """A custom interrupt value."""

    text: str
    options: list[str]


class Answer(BaseModel):
    """A custom resume value."""

    choice: str
    confidence: float


WHEN = datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc)
UID = UUID("12345678-1234-5678-1234-567812345678")


def a_plan(owner: str = "ana") -> Plan:
    return Plan(owner=owner, steps=[Step(title="draft", due=WHEN), Step(title="send")],
                budget=Decimal("12.50"))


# --- observing values with their types -------------------------------------------------------


def typed(v: Any) -> Any:
    """`v` with the class of every nested object beside it: equal only if values and types are."""
    name = f"{type(v).__module__}.{type(v).__qualname__}"
    if isinstance(v, Interrupt):  # its id differs between runs; its value is what matters
        return typed(v.value)
    if isinstance(v, Enum):
        return (name, v.value)
    if isinstance(v, BaseModel):
        return (name, {k: typed(x) for k, x in v})
    if dataclasses.is_dataclass(v) and not isinstance(v, type):
        return (name, {f.name: typed(getattr(v, f.name)) for f in dataclasses.fields(v)})
    if isinstance(v, dict):
        return (name, {k: typed(x) for k, x in v.items()})
    if isinstance(v, (set, frozenset)):
        return (name, sorted((typed(x) for x in v), key=repr))
    if isinstance(v, (list, tuple)):
        return (name, [typed(x) for x in v])
    return (name, v)


def snapshot(s: StateSnapshot) -> dict:
    """What get_state shows, read from storage: values, next, interrupt values."""
    return {"values": s.values, "next": s.next,
            "interrupts": [i.value for t in s.tasks for i in t.interrupts]}


class Drive:
    """Runs a graph sync or async with one code path for the scenario (sync calls block the loop,
    which is what a sync caller does anyway)."""

    def __init__(self, mode: str) -> None:
        self.mode = mode

    async def invoke(self, graph: Any, inp: Any, config: dict) -> Any:
        return await graph.ainvoke(inp, config) if self.mode == "async" else graph.invoke(inp, config)

    async def state(self, graph: Any, config: dict) -> dict:
        s = await graph.aget_state(config) if self.mode == "async" else graph.get_state(config)
        return snapshot(s)

    async def history(self, graph: Any, config: dict) -> list[dict]:
        if self.mode == "async":
            return [snapshot(s) async for s in graph.aget_state_history(config)]
        return [snapshot(s) for s in graph.get_state_history(config)]


def thread() -> dict[str, Any]:
    return {"configurable": {"thread_id": f"t-{uuid.uuid4().hex}"}}


Scenario = Callable[[BaseCheckpointSaver, Drive], Awaitable[dict]]


def linear(schema: type, nodes: list[Callable], saver: BaseCheckpointSaver, **kw: Any) -> Any:
    """START -> nodes in order -> END, compiled on `saver`."""
    g = StateGraph(schema).add_sequence(nodes)
    g.add_edge(START, nodes[0].__name__)
    g.add_edge(nodes[-1].__name__, END)
    return g.compile(checkpointer=saver, **kw)

# --- 1. a pydantic v2 model as the state schema, with nested models and messages --------------


class PlanState(BaseModel):
    messages: Annotated[list[AnyMessage], add_messages] = Field(default_factory=list)
    plan: Plan | None = None
    action: Action | None = None
    color: Color | None = None
    reviewed: str | None = None


async def pydantic_state(saver: BaseCheckpointSaver, d: Drive) -> dict:
    def propose(state: PlanState) -> dict:
        return {"plan": a_plan(), "action": Action("search", {"q": "x", "when": WHEN}),
                "color": Color.BLUE,
                "messages": [HumanMessage("plan it", id="m1"),
                             AIMessage("", id="m2", tool_calls=[
                                 {"name": "search", "args": {"q": "x"}, "id": "c1"}]),
                             ToolMessage("found", tool_call_id="c1", id="m3")]}

    def review(state: PlanState) -> dict:
        verdict = interrupt(f"{len(state.plan.steps)} steps?")
        return {"reviewed": verdict, "messages": [AIMessage("done", id="m4")]}

    graph, config = linear(PlanState, [propose, review], saver), thread()
    await d.invoke(graph, {"messages": []}, config)
    paused = await d.state(graph, config)
    final = await d.invoke(graph, Command(resume="ok"), config)  # channels loaded from storage
    return {"paused": paused, "final": final, "head": await d.state(graph, config),
            "history": await d.history(graph, config)}


# --- 2. a TypedDict state holding dataclasses, enums, NamedTuples, sets, datetimes, ... -------


class Bag(TypedDict, total=False):
    actions: Annotated[list[Action], operator.add]
    colors: dict[str, Color]
    points: list[Point]
    tags: set[str]
    seen: frozenset[UUID]
    when: datetime
    uid: UUID
    amount: Decimal
    plan: Plan


async def dataclass_state(saver: BaseCheckpointSaver, d: Drive) -> dict:
    def fill(state: Bag) -> dict:
        return {"actions": [Action("search", {"q": "x"})], "colors": {"a": Color.RED},
                "points": [Point(1, 2), Point(3, 4)], "tags": {"b", "a"},
                "seen": frozenset({UID}), "when": WHEN, "uid": UID,
                "amount": Decimal("0.10"), "plan": a_plan("bo")}

    def more(state: Bag) -> dict:
        return {"actions": [Action("answer", {"text": f"{len(state['actions'])} so far"})]}

    graph, config = linear(Bag, [fill, more], saver, interrupt_before=["more"]), thread()
    await d.invoke(graph, {"actions": []}, config)
    paused = await d.state(graph, config)
    final = await d.invoke(graph, None, config)  # resumes from the stored checkpoint
    return {"paused": paused, "final": final, "head": await d.state(graph, config)}


# --- 3. custom classes as interrupt() values and Command(resume=...) values -------------------


class AskState(TypedDict, total=False):
    seen: Annotated[list[str], operator.add]
    answers: list[Any]


async def custom_interrupts(saver: BaseCheckpointSaver, d: Drive) -> dict:
    def ask(state: AskState) -> dict:
        # On the second resume, `first` is the stored resume value (read from the saver's
        # pending writes), `second` the one just given.
        first = interrupt(Question("which?", ["a", "b"]))
        second = interrupt(Question("sure?", ["y", "n"]))
        return {"seen": [type(first).__name__, type(second).__name__],
                "answers": [first, second]}

    graph, config = linear(AskState, [ask], saver), thread()
    await d.invoke(graph, {"seen": []}, config)
    first_pause = await d.state(graph, config)
    await d.invoke(graph, Command(resume=Answer(choice="a", confidence=0.9)), config)
    second_pause = await d.state(graph, config)
    final = await d.invoke(graph, Command(resume=Answer(choice="y", confidence=1.0)), config)
    return {"first_pause": first_pause, "second_pause": second_pause, "final": final,
            "head": await d.state(graph, config)}


# --- 4. the functional API: a task and an entrypoint returning a pydantic model ---------------


async def functional(saver: BaseCheckpointSaver, d: Drive) -> dict:
    runs: Counter = Counter()

    @task
    def draft(owner: str) -> Plan:
        runs["draft"] += 1
        return a_plan(owner)

    def body(owner: str, previous: Plan | None, plan: Plan) -> Plan:
        # Touches the task result's attributes, as user code does: a dict here fails.
        approved = interrupt(Question(f"approve {len(plan.steps)} steps?", ["yes", "no"]))
        carried = previous.budget if previous is not None else Decimal(0)
        return Plan(owner=plan.owner, budget=plan.budget + carried,
                    steps=[*plan.steps, Step(title=f"approved:{approved.choice}")])

    if d.mode == "async":
        @entrypoint(checkpointer=saver)
        async def planner(owner: str, *, previous: Plan | None = None) -> Plan:
            return body(owner, previous, await draft(owner))
    else:
        @entrypoint(checkpointer=saver)
        def planner(owner: str, *, previous: Plan | None = None) -> Plan:
            return body(owner, previous, draft(owner).result())

    config = thread()
    await d.invoke(planner, "cy", config)
    # The task's result is read back from its stored write: it is not run again.
    first = await d.invoke(planner, Command(resume=Answer(choice="yes", confidence=1)), config)
    await d.invoke(planner, "cy", config)  # `previous` is the stored return value
    second = await d.invoke(planner, Command(resume=Answer(choice="no", confidence=0)), config)
    return {"first": first, "first_is_plan": isinstance(first, Plan), "second": second,
            "head": await d.state(graph=planner, config=config), "runs": dict(runs)}


SCENARIOS: dict[str, Scenario] = {
    "pydantic_state": pydantic_state,
    "dataclass_state": dataclass_state,
    "custom_interrupts": custom_interrupts,
    "functional": functional,
}


async def observe(scenario: str, saver: BaseCheckpointSaver, mode: str) -> Any:
    """What the scenario shows on `saver`, with types; an exception is an observation too."""
    try:
        return typed(await SCENARIOS[scenario](saver, Drive(mode)))
    except Exception as exc:  # noqa: BLE001 - e.g. an AttributeError on a dict that should be a Plan
        return ("raised", type(exc).__name__, str(exc)[:200])


async def on_sqlite(scenario: str, mode: str) -> Any:
    """The reference: LangGraph's SqliteSaver, its default serializer, a fresh database."""
    if mode == "async":
        async with aiosqlite.connect(":memory:") as conn:
            return await observe(scenario, AsyncSqliteSaver(conn), mode)
    conn = sqlite3.connect(":memory:", check_same_thread=False)
    try:
        return await observe(scenario, SqliteSaver(conn), mode)
    finally:
        conn.close()


# "saver-default" passes no serde: it tests whatever D1Saver's default is.
VARIANTS = ["saver-default", "default_serde"]


def d1_saver(backend: Backend, variant: str) -> BaseCheckpointSaver:
    return backend.saver() if variant == "saver-default" else backend.saver(serde=default_serde())


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize("scenario", list(SCENARIOS))
@pytest.mark.parametrize("variant", VARIANTS)
async def test_state_reads_back_as_on_sqlite(local: Backend, variant: str, scenario: str,
                                             mode: str) -> None:
    want = await on_sqlite(scenario, mode)
    assert want[0] != "raised", want
    got = await observe(scenario, d1_saver(local, variant), mode)
    assert got == want


@pytest.mark.anyio
@pytest.mark.parametrize("variant", VARIANTS)
async def test_functional_result_is_a_model_after_resume(local: Backend, variant: str) -> None:
    """The symptom from the issue, stated directly: isinstance(result, Plan) after a resume."""
    out = await functional(d1_saver(local, variant), Drive("sync"))
    assert out["first_is_plan"] is True
    assert out["runs"] == {"draft": 2}  # once per run, never again on the resume
    assert isinstance(out["head"]["values"], Plan)


# --- LANGGRAPH_STRICT_MSGPACK: read once at import, so each setting gets a fresh process ------

CHILD = """
import asyncio, json, sys
from tests.saver import test_state_types as t
from tests.conftest import local_backend
out = {}
for scenario in t.SCENARIOS:
    want = asyncio.run(t.on_sqlite(scenario, "sync"))
    for variant in t.VARIANTS:
        b = local_backend()
        got = asyncio.run(t.observe(scenario, t.d1_saver(b, variant), "sync"))
        b.engine.close()
        out[f"{scenario}/{variant}"] = {"same": got == want, "want": repr(want)}
print(json.dumps(out))
"""


def run_child(strict: str | None) -> dict[str, dict]:
    env = {k: v for k, v in os.environ.items() if k != "LANGGRAPH_STRICT_MSGPACK"}
    if strict is not None:
        env["LANGGRAPH_STRICT_MSGPACK"] = strict
    env["PYTHONPATH"] = str(ROOT)
    proc = subprocess.run([sys.executable, "-c", CHILD], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_strict_msgpack_is_honoured_as_langgraph_does() -> None:
    """Strict: the graph's schema types still round-trip (LangGraph hands them to the saver
    through with_allowlist at compile time); types outside them come back as their raw data,
    on SqliteSaver and D1Saver alike."""
    out = run_child("true")
    assert {k: v["same"] for k, v in out.items()} == {k: True for k in out}, out
    # The setting took effect: a Question interrupt value is in no schema, so it is blocked
    # (read back as a dict), while Plan, a field type of PlanState, is allowed.
    asked = out["custom_interrupts/default_serde"]["want"]
    assert f"{__name__}.Question" not in asked and "'builtins.dict'" in asked
    assert f"{__name__}.Plan" in out["pydantic_state/default_serde"]["want"]
    # LangGraph reads an entrypoint's types with inspect.signature, so under
    # `from __future__ import annotations` (as here) they are strings, not collected: the task's
    # Plan is blocked and the entrypoint fails on SqliteSaver too, the same way.
    assert "has no attribute 'steps'" in out["functional/default_serde"]["want"]


def test_strict_msgpack_false_is_langgraphs_default() -> None:
    """`LANGGRAPH_STRICT_MSGPACK=false` reads back every type, as LangGraph's default does."""
    out = run_child("false")
    assert all(out[f"{s}/default_serde"]["same"] for s in SCENARIOS), out
    assert f"{__name__}.Question" in out["custom_interrupts/default_serde"]["want"]

