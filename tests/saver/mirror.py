"""The same checkpoints and writes in D1Saver and in InMemorySaver, for reads compared whole.

A graph runs once on a `Recording` InMemorySaver, which keeps every put and put_writes call as
LangGraph made it; `replay` makes the same calls on a D1Saver. Both then hold the same
checkpoints under the same ids, and every read can be compared with InMemorySaver's answer.

The corpus graph exercises what the read statements must get right: two DeltaChannels (one
snapshotted every 3 updates, one every 2), writes packed several to a row (a task writing
more than one channel), single writes, special writes (an interrupt and its resume), values
stored by content (manifests over chunks), a subgraph's checkpoints in their own namespace,
metadata to filter on (from the run's config), checkpoint ids shared by two threads and by two
namespaces, and metadata too big for its row.
"""

from __future__ import annotations

import copy
import operator
from functools import cache
from collections.abc import Sequence
from typing import Annotated, Any

from langchain_core.runnables import RunnableConfig
from langgraph.channels.delta import DeltaChannel
from langgraph.checkpoint.base import BaseCheckpointSaver, CheckpointTuple, empty_checkpoint
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.types import Command, interrupt
from typing_extensions import TypedDict

from benchmarks.workload import append_batches

DELTA_CHANNELS = ("messages", "notes")


class Recording(InMemorySaver):
    """InMemorySaver that keeps a copy of every put and put_writes call, in order."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[str, tuple[Any, ...]]] = []

    def put(self, config: RunnableConfig, checkpoint: Any, metadata: Any,
            new_versions: Any) -> RunnableConfig:
        self.calls.append(("put", (_plain(config), *copy.deepcopy((checkpoint, metadata,
                                                                   new_versions)))))
        return super().put(config, checkpoint, metadata, new_versions)

    def put_writes(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]],
                   task_id: str, task_path: str = "") -> None:
        self.calls.append(("put_writes", (_plain(config), copy.deepcopy(list(writes)), task_id,
                                          task_path)))
        super().put_writes(config, writes, task_id, task_path)


def _plain(config: RunnableConfig) -> RunnableConfig:
    """What a saver reads of a config: the checkpoint's keys and the run's metadata (the rest
    holds the running graph's machinery)."""
    conf = config.get("configurable", {})
    keys = {k: conf[k] for k in ("thread_id", "checkpoint_ns", "checkpoint_id") if k in conf}
    return {"configurable": keys, "metadata": copy.deepcopy(dict(config.get("metadata", {})))}


def replay(recording: Recording, saver: BaseCheckpointSaver) -> None:
    """Make every recorded call on `saver`, in the order LangGraph made them."""
    for method, args in recording.calls:
        getattr(saver, method)(*copy.deepcopy(args))


class CorpusState(TypedDict, total=False):
    messages: Annotated[list, DeltaChannel(append_batches, snapshot_frequency=3)]
    notes: Annotated[list, DeltaChannel(append_batches, snapshot_frequency=2)]
    log: Annotated[list[str], operator.add]
    turn: int


class SubState(TypedDict, total=False):
    messages: Annotated[list, DeltaChannel(append_batches, snapshot_frequency=2)]
    log: Annotated[list[str], operator.add]


def _text(tag: str, n: int) -> str:
    """A message of about 3 KB, so that lists of them are stored by content."""
    return f"{tag}:" + "".join(f"{tag}-{n}-{i:04d} " for i in range(300))


def corpus_graph(saver: BaseCheckpointSaver) -> CompiledStateGraph:
    """plan -> (a || b || sub) -> join -> (ask, which interrupts, on turn 1) -> end."""

    def plan(state: CorpusState) -> dict:
        return {"messages": [_text("plan", state.get("turn", 0))], "log": ["plan"]}

    def a(state: CorpusState) -> dict:
        return {"messages": [f"a saw {len(state.get('messages', []))}"]}

    def b(state: CorpusState) -> dict:
        return {"notes": [f"note {len(state.get('notes', []))}"], "log": ["b"]}

    def inner(state: SubState) -> dict:
        return {"messages": [f"inner saw {len(state.get('messages', []))}"], "log": ["inner"]}

    def join(state: CorpusState) -> dict:
        return {"messages": [_text("join", len(state.get("messages", [])))],
                "log": [f"join {len(state.get('log', []))}"]}

    def ask(state: CorpusState) -> dict:
        answer = interrupt("go on?")
        return {"log": [f"asked: {answer}"], "notes": [f"answer {answer}"]}

    sub = StateGraph(SubState)
    sub.add_node("inner", inner)
    sub.add_edge(START, "inner")
    sub.add_edge("inner", END)
    g = StateGraph(CorpusState)
    g.add_node("plan", plan)
    g.add_node("a", a)
    g.add_node("b", b)
    g.add_node("sub", sub.compile())
    g.add_node("join", join)
    g.add_node("ask", ask)
    g.add_edge(START, "plan")
    for node in ("a", "b", "sub"):
        g.add_edge("plan", node)
    g.add_edge(["a", "b", "sub"], "join")
    g.add_conditional_edges("join", lambda s: "ask" if s.get("turn") == 1 else END)
    g.add_edge("ask", END)
    return g.compile(checkpointer=saver)


# A metadata key whose value is too long to stay in the column of a row whose metadata is
# stored in chunks (d1saver/storage/values.py): a filter on it is decided in Python.
NOTE = "n" * 5_000
BIG_THREAD = "t-big"
BIG_ID = "1f0aaaaa-0000-6000-8000-000000000001"


@cache
def record_corpus(threads: tuple[str, ...] = ("t1", "t2", "t3"), turns: int = 3) -> Recording:
    """The corpus: each thread runs `turns` turns (the second interrupts and is resumed), with
    the run's metadata `user` (a thread's owner), `turn` and `team`; the first thread's root
    checkpoints again, under the same ids, in another thread and in another namespace (so
    pages meet ties on checkpoint_id); and one checkpoint whose metadata (2 MB) is stored in
    chunks. Made once a process (only InMemorySaver runs it; the readers do not change it)."""
    memory = Recording()
    graph = corpus_graph(memory)
    teams = [{"id": 0}, {"id": 1}, {"lead": 0}]
    for n, thread in enumerate(threads):
        for turn in range(turns):
            config: RunnableConfig = {
                "configurable": {"thread_id": thread},
                "metadata": {"user": f"u{n % 2}", "turn": turn, "team": teams[n % 3]}}
            graph.invoke({"messages": [f"{thread} says {turn}"], "turn": turn}, config,
                         durability="sync")
            if turn == 1:
                graph.invoke(Command(resume=f"yes{n}"), config, durability="sync")
    for method, args in list(memory.calls):
        conf = args[0]["configurable"]
        if conf["thread_id"] == threads[0] and not conf.get("checkpoint_ns"):
            for thread, ns in ((f"{threads[0]}-copy", ""), (threads[0], "zz")):
                again = copy.deepcopy(args)
                again[0]["configurable"].update(thread_id=thread, checkpoint_ns=ns)
                getattr(memory, method)(*again)
    big = empty_checkpoint()
    big["id"] = BIG_ID
    memory.put({"configurable": {"thread_id": BIG_THREAD, "checkpoint_ns": ""}}, big,
               {"source": "update", "step": 0, "parents": {}, "user": "u1", "note": NOTE,
                "big": "b" * 2_000_000}, {})
    return memory


def sought(tup: CheckpointTuple) -> list[str]:
    """The DeltaChannels LangGraph asks the history of for this checkpoint: declared in its
    counters, written (a version), with no value stored in it."""
    counters = (tup.metadata or {}).get("counters_since_delta_snapshot") or {}
    return [ch for ch in counters if ch not in tup.checkpoint["channel_values"]
            and ch in tup.checkpoint.get("channel_versions", {})]


def in_order(tuples: Sequence[CheckpointTuple]) -> list[CheckpointTuple]:
    """Tuples in D1Saver's order: newest checkpoint id first, then thread and namespace,
    descending (InMemorySaver lists thread by thread)."""
    def key(t: CheckpointTuple) -> tuple[str, str, str]:
        c = t.config["configurable"]
        return c["checkpoint_id"], c["thread_id"], c["checkpoint_ns"]
    return sorted(tuples, key=key, reverse=True)


def comparable(tup: CheckpointTuple, other: CheckpointTuple) -> CheckpointTuple:
    """`tup` as it compares with `other`, the same checkpoint read from the other saver.

    InMemorySaver keeps a value per channel version, so a DeltaChannel's snapshot reappears in
    every later checkpoint that left its version alone; D1Saver keeps each checkpoint's values
    as LangGraph put them, where only the checkpoint that took it holds it. Both give LangGraph
    the same state (the snapshot, or the history from it), so a snapshot only one side holds
    is left out; the histories are compared on their own.
    """
    mine, theirs = tup.checkpoint["channel_values"], other.checkpoint["channel_values"]
    values = {k: v for k, v in mine.items()
              if k in theirs or type(v).__name__ != "_DeltaSnapshot"}
    return tup._replace(checkpoint={**tup.checkpoint, "channel_values": values})


def every_read(make_reader: Any, config: RunnableConfig, metadata_filter: dict[str, Any]
               ) -> list[tuple[Any, CheckpointTuple, str]]:
    """The checkpoint `config` names, read by each page variant, each by a fresh reader
    (make_reader()): get_tuple, and the list of its namespace, of its thread and of every
    thread, plain and with `metadata_filter` (which it must match). Each as (the reader, the
    tuple, the read), the read last, so that what it prefetched is what the reader holds."""
    conf = config["configurable"]
    scopes: list[tuple[str, RunnableConfig | None]] = [
        ("namespace", {"configurable": {k: conf[k] for k in ("thread_id", "checkpoint_ns")}}),
        ("thread", {"configurable": {"thread_id": conf["thread_id"]}}), ("every thread", None)]
    out = []
    reader = make_reader()
    got = reader.get_tuple(config)
    assert got is not None and got.config == config
    out.append((reader, got, "get_tuple"))
    for name, scope in scopes:
        for f in (None, metadata_filter):
            reader = make_reader()
            found = [t for t in reader.list(scope, filter=f)
                     if t.config["configurable"] == conf]
            assert len(found) == 1, (name, f)
            out.append((reader, found[0], f"list of {name}, filter {f}"))
    return out
