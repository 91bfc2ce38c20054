"""A child process for the crash test: runs the scripted agent graph with D1Saver on one thread.

    python tests/reliability/crash_child.py --url http://127.0.0.1:PORT/client/v4 --thread T \
        --log LOGFILE [--resume] [--variant plain|delta] [--database DB] [--durability MODE]

The graph is benchmarks/workload.py's agent (agent -> FANOUT tools in parallel via Send -> agent
..., answering on turn TURNS), so its final state is known; its hook (`logged`) makes each node
run sleep a little and append to LOGFILE, flushed and fsynced before it goes on:

    start <node> <task_id> <logical_id> <pid>     when the node begins
    end <node> <task_id> <logical_id> <pid>       just before it returns

`task_id` is LangGraph's task id (the id the task's writes are stored under by `put_writes`);
`logical_id` names the work (agent turn, tool call) independently of the checkpoint it ran from.

Without --resume the child invokes the graph with the first input; with --resume it invokes it
with None (resuming from the thread's newest checkpoint), or with the first input if the thread
has no checkpoint yet. On stdout it prints `go <monotonic>` right before invoking and
`done <seconds>` after the invoke returned.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from langchain_core.runnables import RunnableConfig

from benchmarks.workload import VARIANTS, Hook, NodeRun, build_graph, first_input

TURNS = 4
FANOUT = 3
AGENT_SLEEP = 0.040
TOOL_SLEEP = (0.025, 0.045, 0.065)  # by call index: the parallel tools end at different times


def task_id_of(config: RunnableConfig) -> str:
    """The running task's id, as LangGraph passes it to the node (and to put_writes)."""
    conf = config["configurable"]
    task_id = conf.get("__pregel_task_id")
    ns = config.get("metadata", {}).get("langgraph_checkpoint_ns") or conf.get("checkpoint_ns", "")
    ns_id = ns.rpartition(":")[2] if ns else None
    assert task_id, f"no task id in the node's config: {sorted(conf)}"
    assert ns_id in (None, task_id), (task_id, ns)
    return task_id


class Log:
    """Append-only line log; each line is written with one write() and fsynced before returning."""

    def __init__(self, path: str) -> None:
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self.pid = os.getpid()

    def __call__(self, event: str, node: str, task_id: str, logical: str) -> None:
        os.write(self.fd, f"{event} {node} {task_id} {logical} {self.pid}\n".encode())
        os.fsync(self.fd)


def logged(log: Log) -> Hook:
    """The hook: log `start`, sleep (the parallel tools end at different times), run, log `end`."""

    @contextmanager
    def hook(run: NodeRun) -> Iterator[None]:
        task_id = task_id_of(run.config)
        log("start", run.node, task_id, run.logical)
        if run.node == "agent":
            time.sleep(AGENT_SLEEP)
        else:
            time.sleep(TOOL_SLEEP[int(run.logical.rsplit("-", 1)[1]) % len(TOOL_SLEEP)])
        yield
        log("end", run.node, task_id, run.logical)

    return hook


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True, help="D1 API base, e.g. http://127.0.0.1:PORT/client/v4")
    parser.add_argument("--thread", required=True)
    parser.add_argument("--log", required=True)
    parser.add_argument("--resume", action="store_true")
    parser.add_argument("--variant", choices=VARIANTS, default="plain")
    parser.add_argument("--database", default="crash")
    parser.add_argument("--durability", choices=("async", "sync", "exit"), default=None,
                        help="LangGraph's durability mode (default: LangGraph's, async)")
    args = parser.parse_args(argv)

    from d1saver import D1Saver

    saver = D1Saver(account_id="acc", database_id=args.database, api_token="crash-token",
                    api_base_url=args.url)
    graph = build_graph(saver, variant=args.variant, turns=TURNS, fanout=FANOUT,
                        hook=logged(Log(args.log)))
    config: RunnableConfig = {"configurable": {"thread_id": args.thread}}
    started = time.monotonic()
    print(f"go {started}", flush=True)
    inp = first_input()
    if args.resume and saver.get_tuple(config) is not None:
        inp = None
    graph.invoke(inp, config, durability=args.durability)
    print(f"done {time.monotonic() - started:.4f}", flush=True)
    saver.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
