"""Random LangGraph graphs from a seed, for the differential harness (test_differential.py).

A graph is a chain of blocks, START -> block -> block ... -> END, each block one shape that
stores something particular in its checkpoints:
  fan        a node fanning out to 2-4 nodes joined by `add_edge([...], join)` (a barrier
             channel), one branch sometimes a node longer (the barrier fills over two steps),
             the join sometimes deferred (`defer=True`: the barrier that waits for the finish),
             a branch sometimes interrupting;
  cond       conditional edges to a subset of 2-4 nodes, each with its own edge to the join;
  send       a map-reduce: `Send` to a worker per item (2-4), then a reducer;
  sub        a subgraph (its own checkpoints, in its own namespace) with its own fan and join,
             sometimes interrupting inside;
  interrupt  a node that asks (`interrupt`), answered with `Command(resume=...)`;
  tools      an agent calling 2-3 tools in parallel (each a `Send`) for 1-2 turns.
The channels are plain reducers or, for some seeds, DeltaChannels with a small snapshot
frequency. Every node writes what it saw (the length of the log), so a node that runs on the
wrong state, twice, or not at all shows in the values. Everything is a pure function of the
seed: two savers running the same spec must store the same history, ids aside.
"""

from __future__ import annotations

import operator
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any

from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langgraph.channels.delta import DeltaChannel
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.types import Send, interrupt
from typing_extensions import TypedDict

from benchmarks.workload import append_batches

KINDS = ("fan", "cond", "send", "sub", "interrupt", "tools")


@dataclass(frozen=True)
class Block:
    kind: str
    width: int = 2  # branches, items, or tool calls
    long: bool = False  # fan, sub: one branch is two nodes
    defer: bool = False  # fan: the join waits for the finish
    asks: bool = False  # fan, sub: a branch interrupts
    turns: int = 1  # tools: turns calling tools


@dataclass(frozen=True)
class Spec:
    """A graph and how it is driven: `runs` invokes on one thread, each answered until done."""

    seed: int
    blocks: tuple[Block, ...]
    delta: bool  # DeltaChannels instead of plain reducers
    snapshot_frequency: int
    runs: int
    update_as: int  # the block whose entry node update_state writes as

    @property
    def has_tools(self) -> bool:
        return any(b.kind == "tools" for b in self.blocks)

    def describe(self) -> str:
        blocks = " -> ".join(
            f"{b.kind}({b.width}{',long' if b.long else ''}{',defer' if b.defer else ''}"
            f"{',asks' if b.asks else ''}{f',turns={b.turns}' if b.kind == 'tools' else ''})"
            for b in self.blocks)
        channels = f"delta/{self.snapshot_frequency}" if self.delta else "plain"
        return f"seed {self.seed}: {blocks}; {channels}; {self.runs} runs"


def spec_of(seed: int) -> Spec:
    """The graph of a seed. The first block's kind cycles with the seed, so any six
    consecutive seeds start with every kind."""
    rng = random.Random(seed)
    kinds = [KINDS[seed % len(KINDS)]] + [rng.choice(KINDS) for _ in range(rng.randint(1, 2))]
    blocks = []
    for kind in kinds:
        if kind == "fan":
            blocks.append(Block(kind, rng.randint(2, 4), long=rng.random() < 0.5,
                                defer=rng.random() < 0.25, asks=rng.random() < 0.2))
        elif kind == "cond":
            blocks.append(Block(kind, rng.randint(2, 4)))
        elif kind == "send":
            blocks.append(Block(kind, rng.randint(2, 4)))
        elif kind == "sub":
            blocks.append(Block(kind, rng.randint(2, 3), long=rng.random() < 0.5,
                                asks=rng.random() < 0.3))
        elif kind == "interrupt":
            blocks.append(Block(kind, 1))
        else:
            blocks.append(Block(kind, rng.randint(2, 3), turns=rng.randint(1, 2)))
    return Spec(seed, tuple(blocks), delta=rng.random() < 0.4,
                snapshot_frequency=rng.randint(2, 4), runs=rng.randint(2, 3),
                update_as=rng.randrange(len(blocks)))


def _state(spec: Spec) -> type:
    def channel() -> Any:
        if spec.delta:
            return DeltaChannel(append_batches, snapshot_frequency=spec.snapshot_frequency)
        return operator.add

    return TypedDict("GenState", {"log": Annotated[list, channel()],  # type: ignore[misc]
                                  "messages": Annotated[list, channel()]}, total=False)


def _note(name: str) -> Callable[[dict], dict]:
    def run(state: dict) -> dict:
        return {"log": [f"{name}@{len(state.get('log') or [])}"]}
    return run


def _ask(name: str) -> Callable[[dict], dict]:
    def run(state: dict) -> dict:
        answer = interrupt(f"{name}?")
        return {"log": [f"{name}={answer}@{len(state.get('log') or [])}"]}
    return run


def answer_to(question: Any) -> str:
    """What the driver answers an interrupt with."""
    return f"ok:{question}"


class _Builder:
    def __init__(self, g: StateGraph, state: type) -> None:
        self.g, self.state = g, state

    def node(self, name: str, fn: Callable[..., Any] | None = None, **kw: Any) -> str:
        self.g.add_node(name, fn or _note(name), **kw)
        return name

    def fan(self, p: str, b: Block) -> tuple[str, str]:
        """p_src -> branches -> p_join (a barrier); returns (entry, exit)."""
        src = self.node(f"{p}src")
        ends = []
        for i in range(b.width):
            name = f"{p}x{i}"
            self.node(name, _ask(name) if b.asks and i == b.width - 1 else None)
            self.g.add_edge(src, name)
            if b.long and i == 0:
                tail = self.node(f"{p}x{i}t")
                self.g.add_edge(name, tail)
                name = tail
            ends.append(name)
        join = self.node(f"{p}join", defer=True) if b.defer else self.node(f"{p}join")
        self.g.add_edge(ends, join)
        return src, join

    def cond(self, p: str, b: Block) -> tuple[str, str]:
        src = self.node(f"{p}src")
        branches = [self.node(f"{p}y{i}") for i in range(b.width)]

        def route(state: dict) -> list[str]:
            n = len(state.get("log") or [])
            return [x for i, x in enumerate(branches) if (n + i) % 3 != 0] or branches[:1]

        self.g.add_conditional_edges(src, route, branches)
        join = self.node(f"{p}join")
        for x in branches:
            self.g.add_edge(x, join)
        return src, join

    def send(self, p: str, b: Block) -> tuple[str, str]:
        src, worker, reduce = f"{p}src", f"{p}map", f"{p}reduce"
        self.node(src)

        def work(payload: dict) -> dict:
            return {"log": [f"{worker}:{payload['item']}"]}

        self.node(worker, work)
        self.node(reduce)

        def route(state: dict) -> list[Send]:
            n = len(state.get("log") or [])
            return [Send(worker, {"item": f"{i}@{n}"}) for i in range(b.width)]

        self.g.add_conditional_edges(src, route, [worker])
        self.g.add_edge(worker, reduce)
        return src, reduce

    def sub(self, p: str, b: Block) -> tuple[str, str]:
        inner = _Builder(StateGraph(self.state), self.state)
        entry, exit_ = inner.fan(f"{p}in_", Block("fan", b.width, long=b.long, asks=b.asks))
        inner.g.add_edge(START, entry)
        inner.g.add_edge(exit_, END)
        name = self.node(f"{p}sub", inner.g.compile())
        return name, name

    def ask(self, p: str, b: Block) -> tuple[str, str]:
        name = self.node(f"{p}ask", _ask(f"{p}ask"))
        return name, name

    def tools(self, p: str, b: Block) -> tuple[str, str]:
        agent, tool, done = f"{p}agent", f"{p}tool", f"{p}done"

        def think(state: dict) -> dict:
            messages = state.get("messages") or []
            last_human = max((i for i, m in enumerate(messages) if isinstance(m, HumanMessage)),
                             default=-1)
            mine = [m for m in messages[last_human + 1:]
                    if isinstance(m, AIMessage) and str(m.id).startswith(agent)]
            turn, mid = len(mine) + 1, f"{agent}-{len(messages)}"
            if turn > b.turns:
                return {"messages": [AIMessage(f"{agent} answers", id=mid)]}
            calls = [{"name": f"tool{i}", "id": f"{mid}-call{i}", "args": {"turn": turn}}
                     for i in range(b.width)]
            return {"messages": [AIMessage(f"{agent} calls {b.width}", tool_calls=calls,
                                           id=mid)]}

        def act(payload: dict) -> dict:
            call = payload["call"]
            return {"messages": [ToolMessage(f"{call['name']} done", tool_call_id=call["id"],
                                             id=f"{call['id']}-result")]}

        def route(state: dict) -> list[Send] | str:
            last = (state.get("messages") or [None])[-1]
            calls = getattr(last, "tool_calls", None)
            return [Send(tool, {"call": c}) for c in calls] if calls else done

        self.node(agent, think)
        self.node(tool, act)
        self.node(done)
        self.g.add_conditional_edges(agent, route, [tool, done])
        self.g.add_edge(tool, agent)
        return agent, done


def build(spec: Spec, saver: BaseCheckpointSaver | None) -> tuple[CompiledStateGraph, list[str]]:
    """The compiled graph of `spec` over `saver`, and each block's entry node."""
    state = _state(spec)
    b = _Builder(StateGraph(state), state)
    make = {"fan": b.fan, "cond": b.cond, "send": b.send, "sub": b.sub, "interrupt": b.ask,
            "tools": b.tools}
    previous, entries = START, []
    for i, block in enumerate(spec.blocks):
        entry, exit_ = make[block.kind](f"b{i}", block)
        b.g.add_edge(previous, entry)
        entries.append(entry)
        previous = exit_
    b.g.add_edge(previous, END)
    return b.g.compile(checkpointer=saver), entries


def run_input(spec: Spec, run: int) -> dict:
    """The input of the graph's `run`-th invoke."""
    out: dict[str, Any] = {"log": [f"in{run}"]}
    if spec.has_tools:
        out["messages"] = [HumanMessage(f"request {run}", id=f"human-{run}")]
    return out
