"""The CPU benchmark: what one read and one step's writes cost the client at 100 turns (issue 31).

The benchmark's agent (fanout 3) runs TURNS turns (100: 398 messages) against a local D1 served
by a separate process, so `time.process_time()` here measures the client alone. Then, each a
median of repeats:
- read: `get_tuple` of the thread's latest checkpoint from a fresh `D1Saver` (a new instance,
  its HTTP client and its first request's schema read included), with d1saver's process-wide
  caches cleared first, as in a process that has never seen the thread;
- put: one super-step's writes on an instance that has read the thread, as LangGraph makes
  them: `put_writes` of one new message, then `put` of the checkpoint that holds it (a new
  id, the message appended to the messages channel where the checkpoint holds it).
- encode: the values layer's work in that step's `put` alone (serialize, cut, name, fold and
  encode the checkpoint, all chunks held but the last two), best of repeats: the part of a
  step this module's codec changes, without the request's noise.
The run's own client CPU (the whole `invoke`, LangGraph's work included) is printed once.

    python -m benchmarks cpu [--turns 100] [--repeats 15] [--variants plain,delta]
"""

from __future__ import annotations

import argparse
import copy
import gc
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable
from typing import Any

from langchain_core.messages import AIMessage
from langgraph.checkpoint.base.id import uuid6

from benchmarks.growth_bench import ServerProcess
from benchmarks.workload import build_graph, first_input, prose

FANOUT = 3


def _clear_caches() -> None:
    """d1saver's process-wide memos (chunk id text, tree boundaries): a new process has none."""
    from d1saver.storage import chunking, manifest

    for memo in (getattr(chunking, "_id_text", None), getattr(manifest, "_closes", None)):
        if memo is not None and hasattr(memo, "cache_clear"):
            memo.cache_clear()


def _median_ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1000


def _timed(fn: Callable[..., Any], *args: Any) -> float:
    gc.collect()
    t0 = time.process_time()
    fn(*args)
    return time.process_time() - t0


def _step(saver: Any, parent: Any, checkpoint: Any, metadata: Any, task_id: str,
          message: AIMessage) -> None:
    """One super-step's writes: the task's message, then the checkpoint that holds it."""
    saver.put_writes(parent, [("messages", [message])], task_id)
    saver.put(parent, checkpoint, metadata, {"messages": checkpoint["channel_versions"]["messages"]})


def measure(port: int, variant: str, turns: int, repeats: int) -> dict[str, Any]:
    from d1saver import D1Saver

    base = f"http://127.0.0.1:{port}/client/v4"
    database = f"cpu-{variant}-{uuid.uuid4().hex[:8]}"

    def saver() -> D1Saver:
        return D1Saver(account_id="bench", database_id=database, api_token="local",
                       api_base_url=base)

    writer = saver()
    writer.setup()
    config = {"configurable": {"thread_id": f"cpu-{variant}", "checkpoint_ns": ""}}
    graph = build_graph(writer, variant=variant, turns=turns, fanout=FANOUT)
    t0 = time.process_time()
    graph.invoke(first_input(), config, durability="async")
    run_cpu = time.process_time() - t0
    messages = len(graph.get_state(config).values["messages"])
    writer.close()

    reads = []
    for _ in range(repeats):
        fresh = saver()
        _clear_caches()
        reads.append(_timed(fresh.get_tuple, config))
        fresh.close()

    encode = _encode_ms(latest_checkpoint(saver(), config), repeats)

    steps = []
    stepper = saver()
    latest = stepper.get_tuple(config)
    assert latest is not None
    for i in range(repeats):
        checkpoint = copy.deepcopy(latest.checkpoint)
        checkpoint["id"] = str(uuid6())
        task_id = str(uuid.uuid4())
        message = AIMessage(content=prose(f"cpu-{variant}-{i}"), id=f"cpu-{i}-{task_id[:8]}")
        versions = dict(checkpoint["channel_versions"])
        versions["messages"] = stepper.get_next_version(versions.get("messages"), None)
        checkpoint["channel_versions"] = versions
        if "messages" in checkpoint["channel_values"]:
            checkpoint["channel_values"]["messages"] = [
                *checkpoint["channel_values"]["messages"], message]
        metadata = {"source": "loop", "step": 2 * turns + i, "parents": {}}
        steps.append(_timed(_step, stepper, latest.config, checkpoint, metadata, task_id,
                            message))
    stepper.close()
    return {"variant": variant, "turns": turns, "messages": messages, "run_cpu_s": run_cpu,
            "read_ms": _median_ms(reads), "read_all": [round(r * 1000, 1) for r in reads],
            "put_ms": _median_ms(steps), "put_all": [round(s * 1000, 1) for s in steps],
            "encode_ms": encode}


def latest_checkpoint(reader: Any, config: dict[str, Any]) -> Any:
    latest = reader.get_tuple(config)
    reader.close()
    return latest.checkpoint


def _encode_ms(checkpoint: Any, repeats: int) -> float:
    """Best-of CPU of `Values.dump_checkpoint` of `checkpoint`, its thread holding every chunk
    of it but the last two (a step's put: one or two new messages)."""
    from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

    from d1saver.storage import chunking, manifest
    from d1saver.storage.crypto import checkpoint_binder
    from d1saver.storage.values import Values

    values = Values(JsonPlusSerializer())
    _, data = values.serde.dumps_typed(checkpoint)
    new = [p.id for p in chunking.split(data) if p.id][-2:]
    packed = manifest.pack(data, set(), lambda d: "")  # None: no part stored apart (delta)
    held = set() if packed is None else packed.reached - set(new)
    bind = checkpoint_binder("t", "", "c")
    def encode() -> Any:  # serialized when put is entered, then stored (ops/statements.py)
        return values.dump_checkpoint(values.serialize(checkpoint), {"step": 1}, "[]", bind,
                                      200, held)

    best = min(_timed(encode) for _ in range(max(repeats, 25)))
    return best * 1000


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks cpu", description=__doc__.splitlines()[0])
    p.add_argument("--turns", type=int, default=100)
    p.add_argument("--repeats", type=int, default=15)
    p.add_argument("--variants", default="plain,delta", help="comma list: plain, delta")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    args = parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory(prefix="cpu-") as data_dir:
        srv = ServerProcess(data_dir)
        try:
            for variant in [v.strip() for v in args.variants.split(",") if v.strip()]:
                rows.append(measure(srv.port, variant, args.turns, args.repeats))
        finally:
            srv.close()
    print(f"\n## Client CPU at {args.turns} turns (fanout {FANOUT}; local D1 in its own process; "
          f"process time, median of {args.repeats})\n")
    print("| variant | messages | get_tuple, fresh instance (ms) | one step: put_writes + put (ms) "
          "| its put's encode, best (ms) | the run's client CPU (s) |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['variant']} | {r['messages']} | {r['read_ms']:.1f} | {r['put_ms']:.1f} "
              f"| {r['encode_ms']:.2f} | {r['run_cpu_s']:.2f} |")
    for r in rows:
        print(f"\n{r['variant']}: reads {r['read_all']}\n{r['variant']}: steps {r['put_all']}")
    return rows


if __name__ == "__main__":
    main()
